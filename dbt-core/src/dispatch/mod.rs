//! The dispatcher: the loop that runs translated code and handles each way it exits
//! (chain request, indirect-branch miss, system call, cpuid, trap).
//!
//! # Invariants
//! * The global `Core` lock is held only to look up, translate or chain — never across guest
//!   execution or a system call that may block.
//! * On return from `enter`, `ctx` holds the complete guest state.
mod enter;

pub use enter::{exit_fn_addr, fsgsbase_available, ibl_miss_addr, in_enter, set_gs_base};

use crate::cache::ExitKind;
use crate::context::*;
use crate::core_state::{core, Core};
use crate::syscall;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Looks up the translation of `guest`, translating it on a miss. A translation failure is
/// fatal to the guest: it is reported and the process exits like Valgrind does.
pub fn lookup_or_translate(core: &mut Core, guest: u64) -> u64 {
    if let Some(b) = core.cache.blocks.get(&guest) {
        return b.host;
    }
    let Core {
        cache,
        topts,
        process,
        tool,
        ..
    } = core;
    let writable = |s: u64, e: u64| process.any_writable(s, e);
    match crate::translate::translate(cache, &mut **tool, guest, topts, &writable) {
        Ok(host) => host,
        Err(e) => crate::core_state::fatal(&format!("{e}")),
    }
}

/// Blocks a tool asked to have translated again ([`request_retranslation`]); the dispatcher
/// takes them at its next exit. A fixed array because the asking helper may not allocate or
/// lock. Only the thread holding the run lock asks or takes (tools that ask instrument, so
/// one guest thread runs at a time).
const RETRANSLATE_SLOTS: usize = 256;
static RETRANSLATE: [AtomicU64; RETRANSLATE_SLOTS] =
    [const { AtomicU64::new(0) }; RETRANSLATE_SLOTS];
static RETRANSLATE_N: AtomicUsize = AtomicUsize::new(0);

/// Asks for the block starting at `guest` to be translated again (the tool's instrumentation
/// of it changed) once the running block is done; returns false when the request could not
/// be queued (ask again later). Call only from a helper. The calling thread's indirect-branch
/// table forgets the block at once, so that the next indirect branch there comes back to
/// the dispatcher.
pub fn request_retranslation(guest: u64) -> bool {
    let n = RETRANSLATE_N.load(Ordering::Acquire);
    if n >= RETRANSLATE_SLOTS {
        return false;
    }
    RETRANSLATE[n].store(guest, Ordering::Relaxed);
    RETRANSLATE_N.store(n + 1, Ordering::Release);
    let ctx = crate::instrument::calltrack::thread_key();
    // SAFETY: in a helper the key is the running thread's live ThreadContext.
    unsafe { &*(ctx as *const ThreadContext) }.ibl_forget(guest);
    true
}

/// Discards the translations tools asked to redo (`request_retranslation`).
fn retranslate_requested() {
    let mut c = core();
    let n = RETRANSLATE_N.load(Ordering::Acquire).min(RETRANSLATE_SLOTS);
    for slot in &RETRANSLATE[..n] {
        let guest = slot.load(Ordering::Relaxed);
        if c.cache.discard(guest) {
            crate::thread::for_each_context(|t| t.ibl_forget(guest));
        }
    }
    RETRANSLATE_N.store(0, Ordering::Release);
}

/// Dispatcher event counts, for `--stats=yes`.
pub static STATS: [std::sync::atomic::AtomicU64; 5] =
    [const { std::sync::atomic::AtomicU64::new(0) }; 5];
pub const STAT_NAMES: [&str; 5] = ["ibl misses", "direct exits", "syscalls", "cpuid", "traps"];

fn count(i: usize) {
    STATS[i].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// Runs the calling thread's guest until the guest thread exits (an exit of the whole
/// process never returns).
pub fn run_thread(ctx: &mut ThreadContext) {
    set_gs_base(ctx);
    // SAFETY: gettid has no preconditions.
    ctx.tid = unsafe { libc::gettid() } as u64;
    crate::signal::thread_init(ctx);
    crate::runlock::acquire();
    let mut next_host: Option<u64> = None;
    loop {
        if crate::signal::has_work(ctx) {
            crate::signal::deliver_pending(ctx, None);
            next_host = None;
        }
        let host = match next_host.take() {
            Some(h) => h,
            None => {
                let mut c = core();
                lookup_or_translate(&mut c, ctx.rip)
            }
        };
        // SAFETY: GS points at ctx (set above, and by the thread's creator); `host` is a live
        // translation returned under the lock; ctx holds the guest state.
        unsafe { enter::enter(ctx, host) };
        if RETRANSLATE_N.load(Ordering::Relaxed) != 0 {
            retranslate_requested();
        }
        // The trap flag is rgrind's (single-stepping towards a block start), not the guest's.
        ctx.rflags &= !0x100;
        let id = ctx.exit_id as u32;
        if id == EXIT_SIGNAL {
            ctx.rip = ctx.signal_rip;
            continue;
        }
        if id == EXIT_IBL_MISS {
            count(0);
            let target = ctx.ibl_target;
            ctx.rip = target;
            let mut c = core();
            let h = lookup_or_translate(&mut c, target);
            ctx.ibl_insert(target, h - crate::translate::IBL_ENTRY_OFFSET);
            next_host = Some(h);
            continue;
        }
        let rec = core().cache.exits[id as usize];
        match rec.kind {
            ExitKind::Direct => {
                count(1);
                ctx.rip = rec.target;
                let mut c = core();
                let h = lookup_or_translate(&mut c, rec.target);
                if c.chaining {
                    c.cache.chain(id, rec.target, h);
                }
                next_host = Some(h);
            }
            ExitKind::Syscall => {
                count(2);
                ctx.rip = rec.target;
                let nr = ctx.gpr[reg::RAX];
                core().tool.pre_syscall(nr);
                let ends = matches!(nr as i64, libc::SYS_exit | libc::SYS_exit_group);
                if ends {
                    // As Valgrind, whose wrappers complete these before the thread ends.
                    core().tool.post_syscall(nr, 0);
                }
                if !syscall::handle(ctx) {
                    crate::signal::thread_exit(ctx);
                    crate::runlock::release();
                    return;
                }
                if nr == libc::SYS_rt_sigreturn as u64 {
                    core().tool.signal_returned();
                } else if !ends {
                    core().tool.post_syscall(nr, ctx.gpr[reg::RAX] as i64);
                }
                if ctx.gpr[reg::RAX] as i64 == -(libc::EINTR as i64) && crate::signal::has_work(ctx)
                {
                    crate::signal::deliver_pending(ctx, Some(nr));
                }
            }
            ExitKind::Cpuid => {
                ctx.rip = rec.target;
                emulate_cpuid(ctx);
            }
            ExitKind::ClientRequest => {
                ctx.rip = rec.target;
                crate::clientreq::handle(ctx, &mut core());
            }
            ExitKind::SmcMismatch => {
                ctx.rip = rec.target;
                let mut c = core();
                let end = c
                    .cache
                    .blocks
                    .get(&rec.target)
                    .map_or(rec.target + 1, |b| b.guest_end);
                let gone = c.cache.invalidate(rec.target, end);
                drop(c);
                crate::thread::forget_translations(&gone);
            }
            ExitKind::Trap { signal, next } => {
                ctx.rip = rec.target;
                crate::core_state::guest_trap(ctx, signal, next);
            }
        }
    }
}

fn emulate_cpuid(ctx: &mut ThreadContext) {
    let leaf = ctx.gpr[reg::RAX] as u32;
    let sub = ctx.gpr[reg::RCX] as u32;
    let [a, b, c, d] = crate::cpu::cpuid(leaf, sub);
    ctx.gpr[reg::RAX] = u64::from(a);
    ctx.gpr[reg::RBX] = u64::from(b);
    ctx.gpr[reg::RCX] = u64::from(c);
    ctx.gpr[reg::RDX] = u64::from(d);
}
