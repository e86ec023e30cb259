//! The only place rgrind executes the `syscall` instruction on the guest's behalf.

/// Performs system call `nr` with six arguments; returns the raw kernel result
/// (`-errno` on failure).
///
/// # Safety
/// The arguments are passed to the kernel unchecked: the caller must know the call cannot
/// corrupt rgrind's own memory or state (memory-management calls are checked by the caller).
pub unsafe fn syscall6(nr: u64, a: [u64; 6]) -> i64 {
    let ret: i64;
    // SAFETY: upheld by the caller; the kernel clobbers only rcx and r11.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") nr as i64 => ret,
            in("rdi") a[0], in("rsi") a[1], in("rdx") a[2],
            in("r10") a[3], in("r8") a[4], in("r9") a[5],
            lateout("rcx") _, lateout("r11") _,
            options(nostack),
        );
    }
    ret
}
