//! The trampoline translated code uses to call an out-of-line routine (`extern "C"`, three
//! arguments) without touching the guest stack.
//!
//! Translated code stores the routine in `gs:[helper_fn]`, its arguments in
//! `gs:[helper_args]`, the address to resume at in `gs:[helper_ret]`, then jumps to
//! `gs:[helper_tramp]`. The trampoline switches to the thread's helper stack, saves the flags
//! (restored without the slow popfq: DF and the arithmetic flags), every caller-saved general
//! register and the extended state the guest can see (ymm0-15 and MXCSR when it was shown
//! Valgrind's AVX2 CPU; else everything, with XSAVEC where the CPU has it, else XSAVE: the
//! routine may reach host library code that uses AVX/AVX-512), clears DF, calls the routine,
//! restores everything and jumps back. Integer-only routines go through a lean variant that
//! saves general registers and arithmetic flags only.
//!
//! # Invariants
//! * The guest stack (and its red zone) is never written.
//! * The helper stack is 16-byte aligned at its top and big enough for the routines
//!   (they are leaf-like: the cache and branch models).
//! * The routine runs with the guest's FS: it must not touch thread-local storage.
use crate::context::*;

/// Bytes of each thread's helper stack.
const HELPER_STACK_BYTES: usize = 256 * 1024;

/// The full trampoline, in variants that differ only in how the extended state is saved
/// (`$prepare`, `$save`) and restored (`$restore`) in the 64-byte-aligned area on the helper
/// stack: `rgrind_helper_call` with XSAVE (standard format: the header's reserved bytes are
/// zeroed first, as XRSTOR faults on them and XSAVE leaves them), `rgrind_helper_call_xsavec`
/// with XSAVEC (compacted, written whole by the instruction), which skips the components in
/// their initial state, and `rgrind_helper_call_avx` below.
macro_rules! full_trampoline {
    ($name:literal, $prepare:literal, $save:literal, $restore:literal) => {
        core::arch::global_asm!(
            concat!(".globl ", $name),
            concat!(".type ", $name, ",@function"),
            concat!($name, ":"),
            "mov gs:[{saved_rsp}], rsp",
            "mov rsp, gs:[{stack}]",
            "pushfq",
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
            "push rbx",
            "mov rbx, rsp",
            "sub rsp, {xarea}",
            "and rsp, -64",
            $prepare,
            "mov eax, {mask}",
            "xor edx, edx",
            $save,
            "cld",
            "mov rdi, gs:[{args}]",
            "mov rsi, gs:[{args} + 8]",
            "mov rdx, gs:[{args} + 16]",
            "call qword ptr gs:[{func}]",
            "mov eax, {mask}",
            "xor edx, edx",
            $restore,
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
            // The flags without the slow popfq: DF (the routine runs after `cld`) from the
            // image pushed on entry, then the arithmetic flags kept with lahf/seto; the
            // routine changes no other flag.
            "test dword ptr [rsp + 16], 0x400",
            "jz 3f",
            "std",
            "3:",
            "pop rax",
            "add al, 0x7f",
            "sahf",
            "pop rax",
            "mov rsp, gs:[{saved_rsp}]",
            "jmp qword ptr gs:[{ret}]",
            concat!(".size ", $name, ", . - ", $name),
            saved_rsp = const OFF_HELPER_SAVED_RSP,
            stack = const OFF_HELPER_STACK,
            args = const OFF_HELPER_ARGS,
            func = const OFF_HELPER_FN,
            ret = const OFF_HELPER_RET,
            mask = const XSAVE_MASK_LO,
            xarea = const XSAVE_BYTES,
        );
    };
}

full_trampoline!(
    "rgrind_helper_call",
    "mov qword ptr [rsp + 520], 0; mov qword ptr [rsp + 528], 0; \
     mov qword ptr [rsp + 536], 0; mov qword ptr [rsp + 544], 0; \
     mov qword ptr [rsp + 552], 0; mov qword ptr [rsp + 560], 0; \
     mov qword ptr [rsp + 568], 0",
    "xsave64 [rsp]",
    "xrstor64 [rsp]"
);
full_trampoline!(
    "rgrind_helper_call_xsavec",
    "",
    "xsavec64 [rsp]",
    "xrstor64 [rsp]"
);

// The variant for a guest shown a CPU whose XCR0 is x87|SSE|AVX (Valgrind's): ymm0-15 and
// MXCSR are saved with plain moves, far cheaper than XSAVE/XRSTOR. Not saved: the x87/MMX
// state (rgrind's routines and the host library code they reach use SSE/AVX registers for
// data, never x87) and AVX-512 state (the guest was told it has none). When every saved upper
// half is zero the registers come back as xmm after a `vzeroupper`: restoring them as ymm
// marks the upper state in use, and until the guest's next `vzeroupper` every legacy SSE
// instruction then pays for merging the upper halves (sqlite3 under callgrind: 5%).
full_trampoline!(
    "rgrind_helper_call_avx",
    "",
    "vmovdqa [rsp + 0], ymm0; vmovdqa [rsp + 32], ymm1; \
     vmovdqa [rsp + 64], ymm2; vmovdqa [rsp + 96], ymm3; \
     vmovdqa [rsp + 128], ymm4; vmovdqa [rsp + 160], ymm5; \
     vmovdqa [rsp + 192], ymm6; vmovdqa [rsp + 224], ymm7; \
     vmovdqa [rsp + 256], ymm8; vmovdqa [rsp + 288], ymm9; \
     vmovdqa [rsp + 320], ymm10; vmovdqa [rsp + 352], ymm11; \
     vmovdqa [rsp + 384], ymm12; vmovdqa [rsp + 416], ymm13; \
     vmovdqa [rsp + 448], ymm14; vmovdqa [rsp + 480], ymm15; \
     stmxcsr [rsp + 512]; vzeroupper",
    "ldmxcsr [rsp + 512]; vmovdqa xmm0, [rsp + 16]; vpor xmm0, xmm0, [rsp + 48]; \
     vpor xmm0, xmm0, [rsp + 80]; vpor xmm0, xmm0, [rsp + 112]; vpor xmm0, xmm0, [rsp + 144]; \
     vpor xmm0, xmm0, [rsp + 176]; vpor xmm0, xmm0, [rsp + 208]; vpor xmm0, xmm0, [rsp + 240]; \
     vpor xmm0, xmm0, [rsp + 272]; vpor xmm0, xmm0, [rsp + 304]; vpor xmm0, xmm0, [rsp + 336]; \
     vpor xmm0, xmm0, [rsp + 368]; vpor xmm0, xmm0, [rsp + 400]; vpor xmm0, xmm0, [rsp + 432]; \
     vpor xmm0, xmm0, [rsp + 464]; vpor xmm0, xmm0, [rsp + 496]; vptest xmm0, xmm0; \
     jnz 4f; vzeroupper; vmovdqa xmm0, [rsp + 0]; \
     vmovdqa xmm1, [rsp + 32]; vmovdqa xmm2, [rsp + 64]; vmovdqa xmm3, [rsp + 96]; \
     vmovdqa xmm4, [rsp + 128]; vmovdqa xmm5, [rsp + 160]; vmovdqa xmm6, [rsp + 192]; \
     vmovdqa xmm7, [rsp + 224]; vmovdqa xmm8, [rsp + 256]; vmovdqa xmm9, [rsp + 288]; \
     vmovdqa xmm10, [rsp + 320]; vmovdqa xmm11, [rsp + 352]; vmovdqa xmm12, [rsp + 384]; \
     vmovdqa xmm13, [rsp + 416]; vmovdqa xmm14, [rsp + 448]; vmovdqa xmm15, [rsp + 480]; \
     jmp 5f; 4:; vmovdqa ymm0, [rsp + 0]; \
     vmovdqa ymm1, [rsp + 32]; vmovdqa ymm2, [rsp + 64]; vmovdqa ymm3, [rsp + 96]; \
     vmovdqa ymm4, [rsp + 128]; vmovdqa ymm5, [rsp + 160]; vmovdqa ymm6, [rsp + 192]; \
     vmovdqa ymm7, [rsp + 224]; vmovdqa ymm8, [rsp + 256]; vmovdqa ymm9, [rsp + 288]; \
     vmovdqa ymm10, [rsp + 320]; vmovdqa ymm11, [rsp + 352]; vmovdqa ymm12, [rsp + 384]; \
     vmovdqa ymm13, [rsp + 416]; vmovdqa ymm14, [rsp + 448]; vmovdqa ymm15, [rsp + 480]; \
     5:"
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

// Where a helper returns to when an asynchronous signal arrived while it ran
// (`signal::step_after_helper` points `gs:[helper_ret]` here): with every guest register
// back and the guest stack in rsp, it sets the trap flag (through the helper stack, never
// the guest's) and jumps to the real return address, so that the single-stepping towards
// the next block start goes on in translated code. `rgrind_helper_step_jmp` is where the
// first trap lands (after the `mov` that follows `popfq`); the handler steps on from there.
core::arch::global_asm!(
    ".globl rgrind_helper_step",
    ".globl rgrind_helper_step_jmp",
    "rgrind_helper_step:",
    "mov gs:[{saved_rsp}], rsp",
    "mov rsp, gs:[{stack}]",
    "pushfq",
    "or qword ptr [rsp], 0x100",
    "mov qword ptr gs:[{stepping}], 1",
    "popfq",
    "mov rsp, gs:[{saved_rsp}]",
    "rgrind_helper_step_jmp:",
    "jmp qword ptr gs:[{resume}]",
    saved_rsp = const OFF_HELPER_SAVED_RSP,
    stack = const OFF_HELPER_STACK,
    stepping = const OFF_STEPPING,
    resume = const OFF_HELPER_STEP_RESUME,
);

extern "C" {
    fn rgrind_helper_step();
    fn rgrind_helper_step_jmp();
    fn rgrind_helper_call();
    fn rgrind_helper_call_xsavec();
    fn rgrind_helper_call_avx();
    fn rgrind_helper_call_int();
}

/// Whether the CPU has XSAVEC (CPUID.(EAX=0DH,ECX=1):EAX bit 1).
fn has_xsavec() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        let max = core::arch::x86_64::__cpuid(0).eax;
        max >= 0xd && core::arch::x86_64::__cpuid_count(0xd, 1).eax & 2 != 0
    })
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
    ctx.helper_tramp = if crate::cpu::guest_xcr0() == Some(0x7) {
        // The Valgrind CPU model is only chosen on hosts with AVX (`cpu::select`).
        rgrind_helper_call_avx as *const () as usize as u64
    } else if has_xsavec() {
        rgrind_helper_call_xsavec as *const () as usize as u64
    } else {
        rgrind_helper_call as *const () as usize as u64
    };
    ctx.helper_tramp_int = rgrind_helper_call_int as *const () as usize as u64;
    true
}

/// For an asynchronous signal that arrived at host `pc` with host stack pointer `sp` outside
/// translated code: if the thread is inside a helper (`sp` on its helper stack), makes the
/// helper return through `rgrind_helper_step`, which single-steps on into translated code
/// (without it the signal would wait for the next dispatcher entry, which a chained loop may
/// not reach for a long time).
pub fn step_after_helper(ctx: &mut ThreadContext, pc: u64, sp: u64) {
    let stub = rgrind_helper_step as *const () as usize as u64;
    let top = ctx.helper_stack;
    let on_helper_stack = top != 0 && sp <= top && sp > top - HELPER_STACK_BYTES as u64;
    if on_helper_stack && ctx.helper_ret != stub && pc != stub {
        ctx.helper_step_resume = ctx.helper_ret;
        ctx.helper_ret = stub;
    }
}

/// Whether `pc` is where `rgrind_helper_step`'s first single-step trap lands.
pub fn is_helper_step_jmp(pc: u64) -> bool {
    pc == rgrind_helper_step_jmp as *const () as usize as u64
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
