//! Process-wide rgrind state: the code cache, the guest's process facts (exe path, brk,
//! mappings) and the tool, behind one lock.
//!
//! # Invariants
//! * `CORE` is written once by `run` before any guest code executes.
//! * Code called from the code cache never takes this lock (only the dispatcher does).
use crate::aspace::GuestRanges;
use crate::cache::CodeCache;
use crate::context::ThreadContext;
use crate::tool::{FiniReason, Tool};
use crate::translate::TranslateOptions;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, OnceLock};

pub struct Process {
    /// Absolute path of the guest executable (what /proc/self/exe shows).
    pub exe_path: PathBuf,
    /// NUL-separated argv (what /proc/self/cmdline shows).
    pub cmdline: Vec<u8>,
    /// The auxv as bytes (what /proc/self/auxv shows).
    pub auxv: Vec<u8>,
    pub brk_start: u64,
    pub brk_cur: u64,
    /// Highest brk mapped read-write so far (page aligned).
    pub brk_mapped: u64,
    pub brk_limit: u64,
    pub mappings: GuestRanges,
    /// Guest memory that is currently writable: code translated from it gets an entry check
    /// of its bytes (self-modifying code, JITs).
    pub writable: GuestRanges,
    /// System V shared-memory attachments: address -> size.
    pub shm_segments: std::collections::HashMap<u64, u64>,
    pub trace_children: crate::children::ChildTracing,
    /// rgrind's preload object in the guest's `LD_PRELOAD`, if any (see `CoreOptions::preload`).
    pub preload: Option<PathBuf>,
    pub trace_syscalls: bool,
    /// How to run rgrind again on an exec'd program: rgrind's own exe and its options.
    pub rgrind_exe: PathBuf,
    pub rgrind_args: Vec<std::ffi::OsString>,
}

impl Process {
    pub fn set_writable(&mut self, start: u64, end: u64, writable: bool) {
        if writable {
            self.writable.insert(start, end);
        } else {
            self.writable.remove(start, end);
        }
    }

    /// Whether any byte of `[start, end)` is writable guest memory.
    pub fn any_writable(&self, start: u64, end: u64) -> bool {
        self.writable.gaps(start, end) != [(start, end)]
    }
}

pub struct Core {
    pub cache: CodeCache,
    pub topts: TranslateOptions,
    pub chaining: bool,
    pub process: Process,
    pub tool: Box<dyn Tool>,
    pub finished: bool,
    /// Print dispatcher statistics at exit (`--stats=yes`).
    pub stats: bool,
}

static CORE: OnceLock<Mutex<Core>> = OnceLock::new();

pub fn install(core: Core) {
    if CORE.set(Mutex::new(core)).is_err() {
        fatal("rgrind core initialised twice");
    }
}

pub fn core() -> MutexGuard<'static, Core> {
    match CORE.get() {
        Some(m) => m.lock().unwrap_or_else(|p| p.into_inner()),
        None => fatal("rgrind core used before initialisation"),
    }
}

/// Lets the tool write its results (once), for any way the process ends.
pub fn finish(reason: FiniReason) {
    let mut c = core();
    if !c.finished {
        c.finished = true;
        c.tool.fini(reason);
        if let Ok(dir) = std::env::var("RGRIND_DUMP_CACHE") {
            // Debugging aid (ARCHITECTURE.md): the translations, for offline disassembly.
            let dir = std::path::Path::new(&dir);
            let dumped = c
                .cache
                .dump_chunks(dir)
                .and_then(|()| crate::instrument::dump_shared_scans(dir));
            if let Err(e) = dumped {
                eprintln!(
                    "--rgrind-- cannot dump the code cache to {}: {e}",
                    dir.display()
                );
            }
        }
        if c.stats {
            eprintln!(
                "--rgrind-- translations: {} blocks, {} exits",
                c.cache.blocks.len(),
                c.cache.exits.len()
            );
            for (n, v) in crate::dispatch::STAT_NAMES
                .iter()
                .zip(&crate::dispatch::STATS)
            {
                eprintln!(
                    "--rgrind-- {n}: {}",
                    v.load(std::sync::atomic::Ordering::Relaxed)
                );
            }
            eprintln!("--rgrind-- thread switches: {}", crate::runlock::switches());
        }
    }
}

/// Reports an rgrind-level failure and exits with status 1.
pub fn fatal(msg: &str) -> ! {
    eprintln!("rgrind: {msg}");
    // SAFETY: exit_group never returns.
    unsafe { libc::syscall(libc::SYS_exit_group, 1) };
    unreachable_exit()
}

fn unreachable_exit() -> ! {
    std::process::abort()
}

/// A guest instruction raises `signal` natively (`int3`, `ud2`, undecodable bytes...): deliver
/// it like the kernel would. Without a guest handler the guest dies of it; for SIGILL rgrind
/// first names the instruction, as Valgrind does.
pub fn guest_trap(ctx: &mut ThreadContext, signal: i32, next: u64) {
    let rip = ctx.rip;
    if signal == libc::SIGILL && !crate::signal::has_handler(signal as usize) {
        let mut buf = [0u8; 16];
        let n = crate::translate::read_guest(rip, &mut buf);
        let mut dec =
            iced_x86::Decoder::with_ip(64, &buf[..n], rip, iced_x86::DecoderOptions::NONE);
        let insn = dec.decode();
        let text = if insn.is_invalid() {
            format!("bytes {:02x?}", &buf[..n.min(8)])
        } else {
            crate::translate::insn_text(&insn)
        };
        eprintln!("rgrind: unhandled instruction `{text}` at guest address {rip:#x}");
    }
    // int3 reports the address after it, like the kernel.
    if signal == libc::SIGTRAP {
        ctx.rip = next;
    }
    crate::signal::raise_sync(ctx, signal, rip);
}

/// Writes the profile, then ends the process by `signal`'s default action.
pub fn die_by_signal(signal: i32) -> ! {
    finish(FiniReason::Signal(signal));
    // SAFETY: plain libc calls; restoring the default disposition and unblocking makes the
    // raise terminate the process with the same wait status the guest would have had.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        let mut set: libc::sigset_t = core::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, signal);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, core::ptr::null_mut());
        libc::raise(signal);
        libc::syscall(libc::SYS_exit_group, 128 + signal);
    }
    unreachable_exit()
}
