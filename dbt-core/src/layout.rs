//! A fixed address-space layout under the profiling tools, as Valgrind's own address-space
//! manager gives: rgrind runs itself again with the kernel's `ADDR_NO_RANDOMIZE` persona, so
//! the guest's mappings land at the same addresses in every run and costs that depend on
//! addresses repeat (ld.so's `_dl_find_object` during C++ unwinding depends on the order of
//! the modules; Python's sets and dicts of objects hash their addresses: a loop over a set
//! of 2,000 objects varied by 0.07% from run to run with `PYTHONHASHSEED=0`).
//!
//! The guest does not see the persona rgrind added: `personality` queries leave it out, and
//! it is taken off before an `execve` (a program run natively then has its randomisation
//! back; one run under rgrind again sets it anew). When randomisation was off already (`setarch
//! -R`), or the persona cannot be set (a container's seccomp policy), nothing changes.
//!
//! # Invariants
//! * [`OURS`] is true exactly while the persona bit is set and rgrind, not the user or the
//!   guest, set it.
use crate::syscall::raw;
use std::sync::atomic::{AtomicBool, Ordering};

/// The kernel's `ADDR_NO_RANDOMIZE` persona bit.
const ADDR_NO_RANDOMIZE: u64 = 0x0040000;
/// `personality(0xffffffff)` reads the persona without changing it.
const QUERY: u64 = 0xffff_ffff;
/// Set in the environment of the second run: the persona bit is rgrind's.
const MARKER: &str = "RGRIND_FIXED_LAYOUT_";

static OURS: AtomicBool = AtomicBool::new(false);

fn personality(persona: u64) -> i64 {
    // SAFETY: personality changes only the persona word of the calling task.
    unsafe { raw::syscall6(libc::SYS_personality as u64, [persona, 0, 0, 0, 0, 0]) }
}

/// Called first thing by the launcher of a profiling tool: returns when the layout is fixed
/// (this is the second run, or randomisation was off already) or cannot be; otherwise runs
/// rgrind again, with the same arguments, and does not return.
pub fn fix() {
    if std::env::var_os(MARKER).is_some() {
        std::env::remove_var(MARKER);
        let now = personality(QUERY);
        OURS.store(
            now >= 0 && now as u64 & ADDR_NO_RANDOMIZE != 0,
            Ordering::Relaxed,
        );
        return;
    }
    let before = personality(QUERY);
    if before < 0 || before as u64 & ADDR_NO_RANDOMIZE != 0 {
        return;
    }
    if personality(before as u64 | ADDR_NO_RANDOMIZE) < 0
        || personality(QUERY) as u64 & ADDR_NO_RANDOMIZE == 0
    {
        return;
    }
    use std::os::unix::ffi::OsStrExt;
    let args: Vec<std::ffi::CString> = std::env::args_os()
        .filter_map(|a| std::ffi::CString::new(a.as_bytes()).ok())
        .collect();
    let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(core::ptr::null());
    std::env::set_var(MARKER, "1");
    // SAFETY: a NUL-terminated path and argument vector, kept alive across the call; execv
    // returns only on failure. The signal mask and dispositions carry over, as they must
    // for the guest.
    unsafe { libc::execv(c"/proc/self/exe".as_ptr(), argv.as_ptr()) };
    std::env::remove_var(MARKER);
    personality(before as u64);
}

/// The guest's `personality(persona)`: rgrind's bit stays set and out of sight.
pub fn guest_personality(persona: u64) -> i64 {
    if !OURS.load(Ordering::Relaxed) {
        return personality(persona);
    }
    let hide = |r: i64| {
        if r < 0 {
            r
        } else {
            r & !(ADDR_NO_RANDOMIZE as i64)
        }
    };
    if persona as u32 == QUERY as u32 {
        return hide(personality(persona));
    }
    let r = personality(persona | ADDR_NO_RANDOMIZE);
    if r >= 0 && persona & ADDR_NO_RANDOMIZE != 0 {
        // The guest asked for it itself: no longer rgrind's to hide or take off.
        OURS.store(false, Ordering::Relaxed);
    }
    hide(r)
}

/// Before an `execve` passed to the kernel: takes rgrind's bit off; give the result to
/// [`after_failed_exec`] if the call returns.
pub fn before_exec() -> Option<u64> {
    if !OURS.load(Ordering::Relaxed) {
        return None;
    }
    let now = personality(QUERY);
    if now < 0 {
        return None;
    }
    personality(now as u64 & !ADDR_NO_RANDOMIZE);
    Some(now as u64)
}

/// The `execve` failed: the guest goes on under rgrind with the layout fixed again.
pub fn after_failed_exec(saved: Option<u64>) {
    if let Some(p) = saved {
        personality(p);
    }
}
