//! The trampoline translated code uses to call an out-of-line routine (`extern "C"`, three
//! arguments) without touching the guest stack.
//!
//! Translated code stores the routine in `gs:[helper_fn]`, its arguments in
//! `gs:[helper_args]`, the address to resume at in `gs:[helper_ret]`, then jumps to
//! `gs:[helper_tramp]`. The trampoline switches to the thread's helper stack, saves the
//! flags, every caller-saved general register and the whole extended state (XSAVE: the
//! routine may reach host library code that uses AVX/AVX-512), clears DF, calls the routine,
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
    "push rbx",
    "mov rbx, rsp",
    "sub rsp, {xarea}",
    "and rsp, -64",
    // XRSTOR faults on a non-zero XCOMP_BV or reserved header bytes; XSAVE leaves them.
    "mov qword ptr [rsp + 520], 0",
    "mov qword ptr [rsp + 528], 0",
    "mov qword ptr [rsp + 536], 0",
    "mov qword ptr [rsp + 544], 0",
    "mov qword ptr [rsp + 552], 0",
    "mov qword ptr [rsp + 560], 0",
    "mov qword ptr [rsp + 568], 0",
    "mov eax, {mask}",
    "xor edx, edx",
    "xsave64 [rsp]",
    "cld",
    "mov rdi, gs:[{args}]",
    "mov rsi, gs:[{args} + 8]",
    "mov rdx, gs:[{args} + 16]",
    "call qword ptr gs:[{func}]",
    "mov eax, {mask}",
    "xor edx, edx",
    "xrstor64 [rsp]",
    "mov rsp, rbx",
    "pop rbx",
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
    mask = const XSAVE_MASK_LO,
    xarea = const XSAVE_BYTES,
);

// The lean variant for integer-only routines: no vector registers saved, no `cld` (the
// routine uses no string instruction, so the guest's DF may stay), and the arithmetic flags
// kept with lahf/seto instead of the slow popfq. The routine's return value is left in
// `gs:[helper_args]` (argument 0's slot) for the code after the call.
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
    // Callgrind (clgspeed): the routine's result, for `Instrumenter::call_with_fallback`.
    "mov gs:[{args}], rax",
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
    // SAFETY: anonymous private mapping, checked below; it lives as long as the context
    // (`release_context` unmaps it when the context is freed).
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

/// Unmaps the helper stack `init_context` made (the context's thread no longer runs).
pub fn release_context(ctx: &ThreadContext) {
    if ctx.helper_stack != 0 {
        let base = ctx.helper_stack - HELPER_STACK_BYTES as u64;
        // SAFETY: `base` is the mapping `init_context` made for this context, of this size, and
        // nothing runs on it any more.
        unsafe { libc::munmap(base as *mut libc::c_void, HELPER_STACK_BYTES) };
    }
}
