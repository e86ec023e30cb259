//! The trampoline translated code uses to call an out-of-line routine (`extern "C"`, three
//! arguments) without touching the guest stack.
//!
//! Translated code stores the routine in `gs:[helper_fn]`, its arguments in
//! `gs:[helper_args]`, the address to resume at in `gs:[helper_ret]`, then jumps to
//! `gs:[helper_tramp]`. The trampoline switches to the thread's helper stack, saves the
//! flags, every caller-saved general register and xmm0-15, clears DF, calls the routine,
//! restores everything and jumps back.
//!
//! # Invariants
//! * The guest stack (and its red zone) is never written.
//! * The helper stack is 16-byte aligned at its top and big enough for the routines
//!   (they are leaf-like: the cache and branch models).
//! * The routine runs with the guest's FS: it must not touch thread-local storage.
//!
//! Not done here: upper halves of ymm/zmm registers are not saved; routines are compiled for
//! the baseline x86-64 target and use legacy SSE encodings, which leave them untouched.
use crate::context::*;

/// Bytes of each thread's helper stack.
const HELPER_STACK_BYTES: usize = 256 * 1024;

core::arch::global_asm!(
    ".globl rgrind_helper_call",
    ".type rgrind_helper_call,@function",
    "rgrind_helper_call:",
    "mov gs:[{saved_rsp}], rsp",
    "mov rsp, gs:[{stack}]",
    "pushfq",
    "push rax",
    "push rcx",
    "push rdx",
    "push rsi",
    "push rdi",
    "push r8",
    "push r9",
    "push r10",
    "push r11",
    "sub rsp, 256",
    "movaps [rsp + 0], xmm0",
    "movaps [rsp + 16], xmm1",
    "movaps [rsp + 32], xmm2",
    "movaps [rsp + 48], xmm3",
    "movaps [rsp + 64], xmm4",
    "movaps [rsp + 80], xmm5",
    "movaps [rsp + 96], xmm6",
    "movaps [rsp + 112], xmm7",
    "movaps [rsp + 128], xmm8",
    "movaps [rsp + 144], xmm9",
    "movaps [rsp + 160], xmm10",
    "movaps [rsp + 176], xmm11",
    "movaps [rsp + 192], xmm12",
    "movaps [rsp + 208], xmm13",
    "movaps [rsp + 224], xmm14",
    "movaps [rsp + 240], xmm15",
    "cld",
    "mov rdi, gs:[{args}]",
    "mov rsi, gs:[{args} + 8]",
    "mov rdx, gs:[{args} + 16]",
    "call qword ptr gs:[{func}]",
    "movaps xmm0, [rsp + 0]",
    "movaps xmm1, [rsp + 16]",
    "movaps xmm2, [rsp + 32]",
    "movaps xmm3, [rsp + 48]",
    "movaps xmm4, [rsp + 64]",
    "movaps xmm5, [rsp + 80]",
    "movaps xmm6, [rsp + 96]",
    "movaps xmm7, [rsp + 112]",
    "movaps xmm8, [rsp + 128]",
    "movaps xmm9, [rsp + 144]",
    "movaps xmm10, [rsp + 160]",
    "movaps xmm11, [rsp + 176]",
    "movaps xmm12, [rsp + 192]",
    "movaps xmm13, [rsp + 208]",
    "movaps xmm14, [rsp + 224]",
    "movaps xmm15, [rsp + 240]",
    "add rsp, 256",
    "pop r11",
    "pop r10",
    "pop r9",
    "pop r8",
    "pop rdi",
    "pop rsi",
    "pop rdx",
    "pop rcx",
    "pop rax",
    "popfq",
    "mov rsp, gs:[{saved_rsp}]",
    "jmp qword ptr gs:[{ret}]",
    ".size rgrind_helper_call, . - rgrind_helper_call",
    saved_rsp = const OFF_HELPER_SAVED_RSP,
    stack = const OFF_HELPER_STACK,
    args = const OFF_HELPER_ARGS,
    func = const OFF_HELPER_FN,
    ret = const OFF_HELPER_RET,
);

// The lean variant for integer-only routines: no vector registers saved, no `cld` (the
// routine uses no string instruction, so the guest's DF may stay), and the arithmetic flags
// kept with lahf/seto instead of the slow popfq.
core::arch::global_asm!(
    ".globl rgrind_helper_call_int",
    ".type rgrind_helper_call_int,@function",
    "rgrind_helper_call_int:",
    "mov gs:[{saved_rsp}], rsp",
    "mov rsp, gs:[{stack}]",
    "push rax",
    "lahf",
    "seto al",
    "push rax",
    "push rcx",
    "push rdx",
    "push rsi",
    "push rdi",
    "push r8",
    "push r9",
    "push r10",
    "push r11",
    "mov rdi, gs:[{args}]",
    "mov rsi, gs:[{args} + 8]",
    "mov rdx, gs:[{args} + 16]",
    "call qword ptr gs:[{func}]",
    "pop r11",
    "pop r10",
    "pop r9",
    "pop r8",
    "pop rdi",
    "pop rsi",
    "pop rdx",
    "pop rcx",
    "pop rax",
    "add al, 0x7f",
    "sahf",
    "pop rax",
    "mov rsp, gs:[{saved_rsp}]",
    "jmp qword ptr gs:[{ret}]",
    ".size rgrind_helper_call_int, . - rgrind_helper_call_int",
    saved_rsp = const OFF_HELPER_SAVED_RSP,
    stack = const OFF_HELPER_STACK,
    args = const OFF_HELPER_ARGS,
    func = const OFF_HELPER_FN,
    ret = const OFF_HELPER_RET,
);

extern "C" {
    fn rgrind_helper_call();
    fn rgrind_helper_call_int();
}

/// Fills in a new thread context's helper fields (trampoline address, a fresh helper stack).
/// Returns false if the stack cannot be mapped.
pub fn init_context(ctx: &mut ThreadContext) -> bool {
    // SAFETY: anonymous private mapping, checked below; it lives as long as the thread (never
    // unmapped: a thread context is never freed either).
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            HELPER_STACK_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return false;
    }
    ctx.helper_stack = p as u64 + HELPER_STACK_BYTES as u64;
    ctx.helper_tramp = rgrind_helper_call as *const () as usize as u64;
    ctx.helper_tramp_int = rgrind_helper_call_int as *const () as usize as u64;
    true
}
