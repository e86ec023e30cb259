//! Guest threads: one host thread per guest thread, each with its own `ThreadContext`.
//!
//! A guest `clone` with CLONE_VM starts a host thread with `std::thread` (so rgrind's Rust code
//! has working TLS there) and emulates what the kernel does for the guest: the new thread's
//! registers are the parent's with rax = 0, the new stack and TLS; CLONE_PARENT_SETTID and
//! CLONE_CHILD_SETTID store the thread id; CLONE_CHILD_CLEARTID is honoured at exit by clearing
//! the word and waking its futex (what pthread_join waits for).
//!
//! # Invariants
//! * Guest threads run in parallel; the `Core` lock is held only inside the dispatcher.
//! * `CONTEXTS` lists the context of every live guest thread; a context is unlisted before it
//!   is freed.
//! * The child does not run guest code before the parent has stored its thread id.
use crate::context::{reg, ThreadContext};
use crate::syscall::{
    raw, write_guest_u32, CLONE_CHILD_CLEARTID, CLONE_CHILD_SETTID, CLONE_PARENT_SETTID,
    CLONE_SETTLS,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex};

/// Addresses of the live threads' contexts.
static CONTEXTS: Mutex<Vec<usize>> = Mutex::new(Vec::new());
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// Host stack of a guest thread's host thread (rgrind's own frames only).
const HOST_STACK: usize = 512 << 10;

pub fn register(ctx: &ThreadContext) {
    LIVE.fetch_add(1, Ordering::SeqCst);
    CONTEXTS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(ctx as *const _ as usize);
}

/// Holds the thread list still (no thread starts or ends) across a fork.
pub fn list_guard() -> std::sync::MutexGuard<'static, Vec<usize>> {
    CONTEXTS.lock().unwrap_or_else(|p| p.into_inner())
}

/// In a forked child (with `list_guard`'s guard): the calling thread is the only one.
pub fn after_fork_child(list: &mut Vec<usize>, ctx: &ThreadContext) {
    list.clear();
    list.push(ctx as *const _ as usize);
    LIVE.store(1, Ordering::SeqCst);
}

/// Counts the calling thread out unless it is the last one; false when it is (its `exit`
/// ends the process). One atomic step, so two threads exiting at once cannot both see the
/// other still there.
pub fn leave_unless_last() -> bool {
    LIVE.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
        (n > 1).then(|| n - 1)
    })
    .is_ok()
}

/// Runs `f` on every live thread's context.
pub fn for_each_context(mut f: impl FnMut(&mut ThreadContext)) {
    for &addr in CONTEXTS.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        // SAFETY: listed contexts are live (unlisted before being freed, under this lock); the
        // callers only do idempotent table updates that tolerate a concurrent reader.
        f(unsafe { &mut *(addr as *mut ThreadContext) });
    }
}

/// Takes discarded translations (their guest starts) out of every thread's IBL table; a
/// long list empties the tables instead. Entry by entry, because a JIT's code patching
/// discards a block or two at a time, and emptying 20 threads' 64 Ki-entry tables each
/// time (20 MB of stores) took 14% of a JVM's run.
pub fn forget_translations(guests: &[u64]) {
    if guests.len() > crate::context::IBL_ENTRIES / 16 {
        for_each_context(|t| t.clear_ibl());
    } else if !guests.is_empty() {
        for_each_context(|t| guests.iter().for_each(|&g| t.ibl_forget(g)));
    }
}

fn gettid() -> u64 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { raw::syscall6(libc::SYS_gettid as u64, [0; 6]) as u64 }
}

struct SendPtr(usize);

/// Starts a guest thread for `clone(flags, newsp, ptid, ctid, tls)`; returns the new thread's
/// id to the parent (or -errno).
pub fn spawn(
    parent: &ThreadContext,
    flags: u64,
    newsp: u64,
    ptid: u64,
    ctid: u64,
    tls: u64,
) -> i64 {
    let Some(child) = ThreadContext::allocate() else {
        return -(libc::ENOMEM as i64);
    };
    child.gpr = parent.gpr;
    child.gpr[reg::RAX] = 0;
    if newsp != 0 {
        child.gpr[reg::RSP] = newsp;
    }
    child.rflags = parent.rflags;
    child.rip = parent.rip;
    child.guest_fs = if flags & CLONE_SETTLS != 0 {
        tls
    } else {
        parent.guest_fs
    };
    child.xsave_area.0.copy_from_slice(&parent.xsave_area.0);
    child.clear_child_tid = if flags & CLONE_CHILD_CLEARTID != 0 {
        ctid
    } else {
        0
    };
    let ptr = SendPtr(child as *mut ThreadContext as usize);
    let child_key = ptr.0 as u64;
    let (tid_tx, tid_rx) = mpsc::channel::<u64>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    // The new host thread starts with the parent's GS base (the parent's context): it blocks
    // every signal until its own is set, then takes the guest mask it inherits.
    let guest_mask = block_all_signals();
    let mask = SendMask(guest_mask);
    let spawned = std::thread::Builder::new()
        .stack_size(HOST_STACK)
        .spawn(move || {
            let ptr = ptr;
            // SAFETY: the context was allocated for this thread alone and lives until it exits.
            let ctx = unsafe { &mut *(ptr.0 as *mut ThreadContext) };
            let mask = mask;
            crate::dispatch::set_gs_base(ctx);
            set_signal_mask(&mask.0);
            let tid = gettid();
            if flags & CLONE_CHILD_SETTID != 0 {
                let _ = write_guest_u32(ctid, tid as u32);
            }
            let _ = tid_tx.send(tid);
            let _ = go_rx.recv();
            register(ctx);
            crate::dispatch::run_thread(ctx);
            // A signal now (a time-slice request sent before the thread left the run lock)
            // would run rgrind's handler on the context being freed.
            block_all_signals();
            // SAFETY: the guest thread has exited and its context is unlisted: nothing refers
            // to it or runs on its helper stack any more.
            unsafe { ThreadContext::free(ptr.0 as *mut ThreadContext) };
        });
    set_signal_mask(&guest_mask);
    if spawned.is_err() {
        return -(libc::EAGAIN as i64);
    }
    let Ok(tid) = tid_rx.recv() else {
        return -(libc::EAGAIN as i64);
    };
    if flags & CLONE_PARENT_SETTID != 0 {
        let _ = write_guest_u32(ptid, tid as u32);
    }
    let parent_key = parent as *const ThreadContext as u64;
    crate::core_state::core()
        .tool
        .thread_start(parent_key, child_key);
    let taken = crate::runlock::tickets_taken();
    let _ = go_tx.send(());
    crate::runlock::yield_to_newcomer(taken);
    tid as i64
}

struct SendMask(libc::sigset_t);
// SAFETY: a signal set is plain data.
unsafe impl Send for SendMask {}

/// Blocks every signal in the calling host thread; returns the mask it had.
fn block_all_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data that sigfillset initialises; pthread_sigmask only
    // changes this thread's mask.
    unsafe {
        let mut all: libc::sigset_t = core::mem::zeroed();
        let mut old: libc::sigset_t = core::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        old
    }
}

fn set_signal_mask(mask: &libc::sigset_t) {
    // SAFETY: only changes this thread's mask.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, mask, core::ptr::null_mut()) };
}

/// Ends the calling guest thread (not the last one, already counted out by
/// `leave_unless_last`): honours CLONE_CHILD_CLEARTID and unlists the context. The
/// dispatcher then returns; the host thread ends (and frees the context), except the main
/// thread, which ends with a raw `exit` because returning from `main` would end the whole
/// process.
pub fn exit_current(ctx: &mut ThreadContext, status: i32) {
    let addr = ctx as *mut ThreadContext as usize;
    CONTEXTS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|&a| a != addr);
    let ctid = ctx.clear_child_tid;
    if ctid != 0 {
        let _ = write_guest_u32(ctid, 0);
        // SAFETY: FUTEX_WAKE on a guest address; the kernel validates it.
        unsafe {
            raw::syscall6(
                libc::SYS_futex as u64,
                [ctid, libc::FUTEX_WAKE as u64, 1, 0, 0, 0],
            )
        };
    }
    if ctx.is_main_thread {
        crate::signal::thread_exit(ctx);
        crate::runlock::release();
        // SAFETY: exit ends only this thread; nothing of it runs afterwards.
        unsafe { raw::syscall6(libc::SYS_exit as u64, [status as u64, 0, 0, 0, 0, 0]) };
    }
}
