//! Support for tools that keep per-thread state in their out-of-line routines (Callgrind's
//! shadow call stack): which guest thread is running, and a way to run Rust code that needs
//! rgrind's own thread-local storage or allocator from inside a routine.
//!
//! # Invariants
//! * Both functions are only meaningful inside a routine called through the helper trampoline
//!   (GS points at the running thread's `ThreadContext`).
//! * `with_host_fs` restores the guest's FS base before it returns, so the guest never sees
//!   rgrind's TLS.
//!
//! Deliberately not done here: any tool state; the tool owns what it keeps per thread.
use crate::context::{OFF_HOST_FS, OFF_SELF};

/// A key identifying the running guest thread (the address of its `ThreadContext`); stable
/// for the thread's life. Call only from a helper routine.
#[inline]
pub fn thread_key() -> u64 {
    let k: u64;
    // SAFETY: inside a helper GS is the running thread's ThreadContext, whose `self_addr`
    // field holds its own address; a plain load.
    unsafe {
        core::arch::asm!("mov {k}, gs:[{off}]", k = out(reg) k, off = const OFF_SELF,
            options(nostack, readonly, preserves_flags));
    }
    k
}

/// Runs `f` with rgrind's FS base (its TLS, so the allocator and `thread_local!` work), then
/// puts the guest's FS base back. Call only from a helper routine; `f` must not panic.
#[inline]
pub fn with_host_fs<R>(f: impl FnOnce() -> R) -> R {
    let guest_fs: u64;
    // SAFETY: FSGSBASE is required by rgrind; GS is the running ThreadContext whose
    // `host_fs` is rgrind's FS base for this host thread (saved by `rgrind_enter`).
    unsafe {
        core::arch::asm!(
            "rdfsbase {g}",
            "mov {h}, gs:[{off}]",
            "wrfsbase {h}",
            g = out(reg) guest_fs, h = out(reg) _, off = const OFF_HOST_FS,
            options(nostack, preserves_flags));
    }
    let r = f();
    // SAFETY: restores the guest FS base read above.
    unsafe {
        core::arch::asm!("wrfsbase {g}", g = in(reg) guest_fs, options(nostack, preserves_flags));
    }
    r
}
