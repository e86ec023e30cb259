//! The only way into and out of translated code: `rgrind_enter` switches from rgrind's host
//! state to the guest's (FS base, extended state, flags, registers, stack) and jumps into the
//! code cache; `rgrind_exit`, reached with `jmp gs:[exit_fn]`, does the reverse and returns
//! from `rgrind_enter`.
//!
//! # Invariants
//! * Between the two, FS holds the guest's TLS base and rgrind's Rust code does not run.
//! * `rgrind_exit` is entered with every guest register holding its guest value (exit stubs
//!   restore their scratch registers first); `gs:[exit_id]` says why.
//! * No state survives on the host stack across a cache execution except the callee-saved
//!   registers `rgrind_enter` pushed.
use crate::context::*;

core::arch::global_asm!(
    ".globl rgrind_enter",
    ".type rgrind_enter,@function",
    "rgrind_enter:",
    "push rbx",
    "push rbp",
    "push r12",
    "push r13",
    "push r14",
    "push r15",
    "sub rsp, 8",
    "mov [rdi + {host_rsp}], rsp",
    "rdfsbase rax",
    "mov [rdi + {host_fs}], rax",
    "mov rax, [rdi + {guest_fs}]",
    "wrfsbase rax",
    "mov eax, {mask}",
    "xor edx, edx",
    "xrstor64 [rdi + {xsave}]",
    // The guest's AC flag waits in `guest_ac`; the real one stays clear.
    "mov rax, [rdi + {rflags}]",
    "mov edx, {ac}",
    "and rdx, rax",
    "mov [rdi + {guest_ac}], rdx",
    "xor rax, rdx",
    "push rax",
    "popfq",
    "mov rax, [rdi + 0]",
    "mov rcx, [rdi + 8]",
    "mov rdx, [rdi + 16]",
    "mov rbx, [rdi + 24]",
    "mov rsp, [rdi + 32]",
    "mov rbp, [rdi + 40]",
    "mov rsi, [rdi + 48]",
    "mov r8, [rdi + 64]",
    "mov r9, [rdi + 72]",
    "mov r10, [rdi + 80]",
    "mov r11, [rdi + 88]",
    "mov r12, [rdi + 96]",
    "mov r13, [rdi + 104]",
    "mov r14, [rdi + 112]",
    "mov r15, [rdi + 120]",
    "mov rdi, [rdi + 56]",
    "jmp qword ptr gs:[{enter_target}]",
    ".globl rgrind_enter_end",
    "rgrind_enter_end:",
    ".size rgrind_enter, . - rgrind_enter",
    "",
    ".globl rgrind_exit",
    ".type rgrind_exit,@function",
    "rgrind_exit:",
    "mov gs:[0], rax",
    "mov rax, gs:[{self_addr}]",
    "mov [rax + 8], rcx",
    "mov [rax + 16], rdx",
    "mov [rax + 24], rbx",
    "mov [rax + 32], rsp",
    "mov [rax + 40], rbp",
    "mov [rax + 48], rsi",
    "mov [rax + 56], rdi",
    "mov [rax + 64], r8",
    "mov [rax + 72], r9",
    "mov [rax + 80], r10",
    "mov [rax + 88], r11",
    "mov [rax + 96], r12",
    "mov [rax + 104], r13",
    "mov [rax + 112], r14",
    "mov [rax + 120], r15",
    "mov rsp, [rax + {host_rsp}]",
    "pushfq",
    "pop qword ptr [rax + {rflags}]",
    "mov rcx, [rax + {guest_ac}]",
    "or [rax + {rflags}], rcx",
    "mov rbx, rax",
    "rdfsbase rcx",
    "mov [rbx + {guest_fs}], rcx",
    "mov rcx, [rbx + {host_fs}]",
    "wrfsbase rcx",
    "mov eax, {mask}",
    "xor edx, edx",
    "xsave64 [rbx + {xsave}]",
    "ldmxcsr [rbx + {host_mxcsr}]",
    "cld",
    "add rsp, 8",
    "pop r15",
    "pop r14",
    "pop r13",
    "pop r12",
    "pop rbp",
    "pop rbx",
    "ret",
    ".size rgrind_exit, . - rgrind_exit",
    "",
    // What an empty IBL entry points at: the same miss exit the lookup takes itself (guest
    // target in rdx, guest rcx and rdx in S0/S1). Another thread may empty an entry between
    // the owner's tag compare and its load of the host address; the host word therefore
    // always holds a jumpable address.
    ".globl rgrind_ibl_miss",
    ".type rgrind_ibl_miss,@function",
    "rgrind_ibl_miss:",
    "mov gs:[{ibl_target}], rdx",
    "mov rcx, gs:[{s0}]",
    "mov rdx, gs:[{s1}]",
    "mov dword ptr gs:[{exit_id}], {miss}",
    "jmp qword ptr gs:[{exit_fn}]",
    ".size rgrind_ibl_miss, . - rgrind_ibl_miss",
    host_rsp = const OFF_HOST_RSP,
    host_fs = const OFF_HOST_FS,
    guest_fs = const OFF_GUEST_FS,
    mask = const XSAVE_MASK_LO,
    xsave = const OFF_XSAVE,
    rflags = const OFF_RFLAGS,
    guest_ac = const OFF_GUEST_AC,
    ac = const RFLAGS_AC,
    enter_target = const OFF_ENTER_TARGET,
    self_addr = const OFF_SELF,
    host_mxcsr = const OFF_HOST_MXCSR,
    ibl_target = const OFF_IBL_TARGET,
    s0 = const OFF_SCRATCH,
    s1 = const OFF_SCRATCH + 8,
    exit_id = const OFF_EXIT_ID,
    miss = const EXIT_IBL_MISS,
    exit_fn = const OFF_EXIT_FN,
);

extern "C" {
    fn rgrind_enter(ctx: *mut ThreadContext);
    fn rgrind_enter_end();
    fn rgrind_exit();
    fn rgrind_ibl_miss();
}

/// Whether `pc` is inside `rgrind_enter` (guest state is being loaded).
pub fn in_enter(pc: u64) -> bool {
    (rgrind_enter as *const () as u64..rgrind_enter_end as *const () as u64).contains(&pc)
}

pub fn exit_fn_addr() -> u64 {
    rgrind_exit as *const () as u64
}

/// Host address of an empty IBL entry (see `rgrind_ibl_miss`).
pub fn ibl_miss_addr() -> u64 {
    rgrind_ibl_miss as *const () as u64
}

/// Runs translated code at `host` until it exits back; the exit is described by `ctx.exit_id`.
///
/// # Safety
/// GS base must point at `ctx`; `host` must be the start of a live translation; the guest
/// state in `ctx` must be one the guest can run with.
pub unsafe fn enter(ctx: &mut ThreadContext, host: u64) {
    ctx.enter_target = host;
    // SAFETY: upheld by the caller; rgrind_enter saves and restores every callee-saved register
    // and returns here with the host stack, FS and MXCSR as they were.
    unsafe { rgrind_enter(ctx) }
}

/// Points GS at `ctx` for the calling thread.
pub fn set_gs_base(ctx: &ThreadContext) {
    let addr = ctx as *const ThreadContext as u64;
    // SAFETY: wrgsbase only changes GS base; nothing in rgrind's Rust code or libc uses GS on
    // x86-64 Linux. FSGSBASE support is checked at startup.
    unsafe { core::arch::asm!("wrgsbase {}", in(reg) addr) };
}

/// Whether the kernel lets user space use rd/wr{fs,gs}base (HWCAP2 bit 1).
pub fn fsgsbase_available() -> bool {
    // SAFETY: getauxval has no preconditions.
    let hwcap2 = unsafe { libc::getauxval(libc::AT_HWCAP2) };
    hwcap2 & 2 != 0
}
