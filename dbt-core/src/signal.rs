//! Signal virtualisation: rgrind owns the real handlers; guest signals are queued per thread
//! and delivered at a guest instruction boundary with a kernel-layout frame on the guest stack
//! (or its alternate stack).
//!
//! How a signal reaches the guest:
//! 1. The host handler (`rgrind_sig_stub` → `host_handler`) runs on the thread's rgrind
//!    alternate stack with rgrind's FS. It records the signal in the thread's `ThreadContext`.
//! 2. If the thread was running translated code, the handler gets it out: at the first byte of a
//!    block (where host state is exactly guest state and no cost has been counted for the block
//!    yet) it points the interrupted context at `rgrind_exit_signal`; elsewhere it sets the trap
//!    flag and looks again after the next host instruction. A synchronous fault is taken out at
//!    the faulting instruction itself. If the thread was inside a helper routine called from
//!    translated code, the helper returns through `rgrind_helper_step`, which sets the trap
//!    flag on the way back (`instrument::helper::step_after_helper`).
//! 3. The dispatcher (`deliver_pending`) builds the frame and continues at the guest handler, or
//!    carries out the default action (writing the profile before a fatal one).
//!
//! # Invariants
//! * The host signal mask of a guest thread is the guest's signal mask.
//! * The host handler takes the `Core` lock only when the interrupted pc is in the code cache
//!   (then the thread cannot be holding it); otherwise it only sets bits in its own context.
//! * Guest dispositions live in `ACTIONS`; the kernel sees rgrind's handler for every signal
//!   whose guest disposition is a handler or a default action that ends the process.
use crate::context::{reg, ThreadContext};
use crate::core_state::{die_by_signal, fatal};
use crate::syscall::raw;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

pub const NSIG: usize = 65;
const YIELD: usize = crate::runlock::YIELD_SIGNAL;
const SIG_DFL: u64 = 0;
const SIG_IGN: u64 = 1;
const SA_SIGINFO: u64 = 4;
const SA_ONSTACK: u64 = 0x0800_0000;
const SA_RESTART: u64 = 0x1000_0000;
const SA_NODEFER: u64 = 0x4000_0000;
const SA_RESETHAND: u64 = 0x8000_0000;
const SA_RESTORER: u64 = 0x0400_0000;
const SS_ONSTACK: u64 = 1;
const SS_DISABLE: u64 = 2;
const TF: u64 = 0x100;

/// The kernel's `struct sigaction` layout for rt_sigaction.
#[derive(Clone, Copy, Default, Debug)]
#[repr(C)]
pub struct KSigaction {
    pub handler: u64,
    pub flags: u64,
    pub restorer: u64,
    pub mask: u64,
}

static ACTIONS: Mutex<[KSigaction; NSIG]> = Mutex::new(
    [KSigaction {
        handler: 0,
        flags: 0,
        restorer: 0,
        mask: 0,
    }; NSIG],
);

fn bit(sig: usize) -> u64 {
    1u64 << (sig - 1)
}

/// What the kernel does with a signal whose disposition is SIG_DFL.
#[derive(PartialEq, Eq)]
enum Default_ {
    Ignore,
    Stop,
    Terminate,
}

fn default_action(sig: usize) -> Default_ {
    match sig as i32 {
        libc::SIGCHLD | libc::SIGCONT | libc::SIGURG | libc::SIGWINCH => Default_::Ignore,
        libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU => Default_::Stop,
        _ => Default_::Terminate,
    }
}

extern "C" {
    fn rgrind_sig_stub();
    fn rgrind_sig_restorer();
    fn rgrind_exit_signal();
}

core::arch::global_asm!(
    ".globl rgrind_sig_stub",
    "rgrind_sig_stub:",
    "push r12",
    "rdfsbase r12",
    "rdgsbase rax",
    "test rax, rax",
    "jz 1f",
    "mov rax, gs:[{host_fs}]",
    "test rax, rax",
    "jz 1f",
    "wrfsbase rax",
    "1:",
    "call {handler}",
    "wrfsbase r12",
    "pop r12",
    "ret",
    ".globl rgrind_sig_restorer",
    "rgrind_sig_restorer:",
    "mov eax, 15",
    "syscall",
    "ud2",
    ".globl rgrind_exit_signal",
    "rgrind_exit_signal:",
    "mov dword ptr gs:[{exit_id}], {exit_signal}",
    "jmp qword ptr gs:[{exit_fn}]",
    host_fs = const crate::context::OFF_HOST_FS,
    exit_id = const crate::context::OFF_EXIT_ID,
    exit_fn = const crate::context::OFF_EXIT_FN,
    exit_signal = const crate::context::EXIT_SIGNAL,
    handler = sym host_handler,
);

fn install_host(sig: usize, handler: u64) {
    let act = KSigaction {
        handler,
        flags: if handler > SIG_IGN {
            SA_SIGINFO | SA_ONSTACK | SA_RESTORER
        } else {
            0
        },
        restorer: if handler > SIG_IGN {
            rgrind_sig_restorer as *const () as u64
        } else {
            0
        },
        mask: if handler > SIG_IGN { !0 } else { 0 },
    };
    // SAFETY: rt_sigaction with a valid kernel sigaction; the stub is a proper handler.
    unsafe {
        raw::syscall6(
            libc::SYS_rt_sigaction as u64,
            [sig as u64, &act as *const _ as u64, 0, 8, 0, 0],
        );
    }
}

fn host_disposition_for(sig: usize, guest: &KSigaction) -> u64 {
    match guest.handler {
        SIG_IGN => SIG_IGN,
        SIG_DFL if default_action(sig) != Default_::Terminate => SIG_DFL,
        _ => rgrind_sig_stub as *const () as u64,
    }
}

fn is_fault(sig: usize) -> bool {
    matches!(
        sig as i32,
        libc::SIGSEGV | libc::SIGBUS | libc::SIGFPE | libc::SIGILL | libc::SIGTRAP
    )
}

/// Takes over every signal at startup, keeping dispositions inherited as SIG_IGN.
pub fn init() {
    let mut actions = ACTIONS.lock().unwrap_or_else(|p| p.into_inner());
    for sig in 1..NSIG {
        if sig as i32 == libc::SIGKILL || sig as i32 == libc::SIGSTOP {
            continue;
        }
        let mut old = KSigaction::default();
        // SAFETY: query only (act = NULL).
        let r = unsafe {
            raw::syscall6(
                libc::SYS_rt_sigaction as u64,
                [sig as u64, 0, &mut old as *mut _ as u64, 8, 0, 0],
            )
        };
        if r != 0 {
            continue;
        }
        if sig == YIELD {
            install_host(sig, rgrind_sig_stub as *const () as u64);
            continue;
        }
        actions[sig] = KSigaction {
            handler: if old.handler == SIG_IGN {
                SIG_IGN
            } else {
                SIG_DFL
            },
            ..Default::default()
        };
        let host = host_disposition_for(sig, &actions[sig]);
        if host > SIG_IGN || is_fault(sig) {
            install_host(sig, rgrind_sig_stub as *const () as u64);
        }
    }
}

/// Per-thread setup: rgrind's alternate stack for its handler.
pub fn thread_init(ctx: &mut ThreadContext) {
    const SIZE: usize = 256 << 10;
    // SAFETY: anonymous mapping for the alternate stack, checked.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        fatal("cannot allocate a signal stack");
    }
    let ss = libc::stack_t {
        ss_sp: p,
        ss_flags: 0,
        ss_size: SIZE,
    };
    // SAFETY: installs a stack we own for this thread's handlers.
    unsafe { libc::sigaltstack(&ss, core::ptr::null_mut()) };
    ctx.host_altstack = p as u64;
}

/// Undoes `thread_init` when a guest thread ends.
pub fn thread_exit(ctx: &mut ThreadContext) {
    let ss = libc::stack_t {
        ss_sp: core::ptr::null_mut(),
        ss_flags: libc::SS_DISABLE,
        ss_size: 0,
    };
    // SAFETY: disables this thread's alternate stack, then unmaps it.
    unsafe {
        libc::sigaltstack(&ss, core::ptr::null_mut());
        libc::munmap(ctx.host_altstack as *mut libc::c_void, 256 << 10);
    }
}

/// The host handler, entered from `rgrind_sig_stub` with rgrind's FS.
extern "C" fn host_handler(sig: i32, info: *mut libc::siginfo_t, uc: *mut libc::ucontext_t) {
    let gs: u64;
    // SAFETY: reading GS base has no side effects.
    unsafe { core::arch::asm!("rdgsbase {}", out(reg) gs) };
    let sig = sig as usize;
    // SAFETY: the kernel passes valid siginfo and ucontext pointers.
    let (info, uc) = unsafe { (&*info, &mut *uc) };
    let pc = uc.uc_mcontext.gregs[libc::REG_RIP as usize] as u64;
    if let Some(fixup) = crate::guest_mem::fault_fixup(pc).filter(|_| is_fault(sig)) {
        // rgrind's own copy from guest memory that was unmapped meanwhile: it reports it.
        uc.uc_mcontext.gregs[libc::REG_RIP as usize] = fixup as i64;
        return;
    }
    if gs == 0 {
        internal_crash(sig, pc, None);
    }
    // SAFETY: GS of a guest thread points at its live ThreadContext.
    let ctx = unsafe { &mut *(gs as *mut ThreadContext) };
    let in_cache = crate::cache::in_code_cache(pc);
    let kernel_fault = is_fault(sig) && info.si_code > 0;
    if sig as i32 == libc::SIGTRAP && ctx.stepping != 0 && info.si_code == 2 {
        // Our own single step towards a block start.
        step_towards_boundary(ctx, uc, pc, in_cache);
        return;
    }
    if kernel_fault {
        if !in_cache {
            internal_crash(sig, pc, Some(ctx.rip));
        }
        let guest = crate::core_state::core().cache.guest_insn_at(pc);
        let Some((guest_rip, flags_stashed)) = guest else {
            internal_crash(sig, pc, Some(ctx.rip))
        };
        if flags_stashed {
            let efl = &mut uc.uc_mcontext.gregs[libc::REG_EFL as usize];
            *efl = crate::instrument::unstash_flags(*efl as u64, ctx.instr_flags) as i64;
        }
        if let Some((owed, n)) = crate::core_state::core().cache.loop_owed_at(pc) {
            // SAFETY: the state is a leaked static; only the faulting thread, stopped here,
            // runs inline code on it.
            unsafe {
                (*(owed.state as *const crate::instrument::calltrack::JumpState))
                    .charge_owed(n, owed.ir)
            };
        }
        ctx.cut_short = crate::core_state::core()
            .cache
            .cut_short_at(pc)
            .unwrap_or_default();
        ctx.sync_signal = sig as u64;
        copy_info(&mut ctx.sync_info, info);
        ctx.signal_rip = guest_rip;
        uc.uc_mcontext.gregs[libc::REG_RIP as usize] = rgrind_exit_signal as *const () as i64;
        return;
    }
    if sig == YIELD {
        ctx.yield_requested = 1;
    } else {
        // Asynchronous (or sent by a process): queue it for this thread, with its disposition
        // as of now. try_lock: this thread may itself be inside `sigaction`, holding the lock;
        // then the disposition is read at delivery instead.
        copy_info(&mut ctx.pending_info[sig], info);
        // A snapshot taken when another guest thread sent it (`snapshot_for_target`) stands.
        // The snapshot fields are only touched under the disposition lock.
        if let Ok(actions) = ACTIONS.try_lock() {
            if ctx.pending_snapped & bit(sig) == 0 {
                ctx.pending_action[sig] = actions[sig];
                ctx.pending_snapped |= bit(sig);
            }
        }
        ctx.pending.fetch_or(bit(sig), Ordering::SeqCst);
    }
    if in_cache || crate::dispatch::in_enter(pc) {
        step_towards_boundary(ctx, uc, pc, in_cache);
    } else if sig != YIELD {
        let sp = uc.uc_mcontext.gregs[libc::REG_RSP as usize] as u64;
        crate::instrument::helper::step_after_helper(ctx, pc, sp);
    }
}

fn step_towards_boundary(
    ctx: &mut ThreadContext,
    uc: &mut libc::ucontext_t,
    pc: u64,
    in_cache: bool,
) {
    let flags = &mut uc.uc_mcontext.gregs[libc::REG_EFL as usize];
    if in_cache {
        let at = crate::core_state::core().cache.block_start_at(pc);
        if let Some(guest_rip) = at {
            ctx.signal_rip = guest_rip;
            ctx.stepping = 0;
            *flags &= !(TF as i64);
            uc.uc_mcontext.gregs[libc::REG_RIP as usize] = rgrind_exit_signal as *const () as i64;
            return;
        }
        ctx.stepping = 1;
        *flags |= TF as i64;
    } else if crate::dispatch::in_enter(pc) || crate::instrument::helper::is_helper_step_jmp(pc) {
        // Loading guest state, or returning from a helper (`step_after_helper`): step on into
        // the block.
        ctx.stepping = 1;
        *flags |= TF as i64;
    } else {
        // Left the cache (into rgrind_exit): the dispatcher will see the pending signal; it
        // also clears TF from the saved guest flags.
        ctx.stepping = 0;
        *flags &= !(TF as i64);
    }
}

fn copy_info(dst: &mut [u8; 128], info: &libc::siginfo_t) {
    // SAFETY: siginfo_t is 128 bytes of plain data.
    let src = unsafe { core::slice::from_raw_parts(info as *const _ as *const u8, 128) };
    dst.copy_from_slice(src);
}

fn internal_crash(sig: usize, pc: u64, guest_rip: Option<u64>) -> ! {
    let where_ = guest_rip.map_or(String::new(), |r| {
        format!(" while running guest code near {r:#x}")
    });
    eprintln!("rgrind: internal error: signal {sig} at rgrind address {pc:#x}{where_}; this is a bug in rgrind");
    // SAFETY: plain exit.
    unsafe { libc::_exit(134) }
}

/// Holds the guest's signal dispositions still across a fork.
pub fn actions_guard() -> std::sync::MutexGuard<'static, [KSigaction; NSIG]> {
    ACTIONS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Guest rt_sigaction.
pub fn sigaction(sig: u64, act: u64, oldact: u64, sigsetsize: u64) -> i64 {
    let sig = sig as usize;
    if sigsetsize != 8 || sig == 0 || sig >= NSIG {
        return -(libc::EINVAL as i64);
    }
    if sig == YIELD && act != 0 {
        // Reserved by rgrind for time slicing between guest threads.
        return -(libc::EINVAL as i64);
    }
    if (sig as i32 == libc::SIGKILL || sig as i32 == libc::SIGSTOP) && act != 0 {
        return -(libc::EINVAL as i64);
    }
    let mut actions = ACTIONS.lock().unwrap_or_else(|p| p.into_inner());
    let old = actions[sig];
    if act != 0 {
        let mut new = KSigaction::default();
        if !read_guest_struct(act, &mut new) {
            return -(libc::EFAULT as i64);
        }
        actions[sig] = new;
        let host = host_disposition_for(sig, &new);
        install_host(
            sig,
            if is_fault(sig) {
                rgrind_sig_stub as *const () as u64
            } else {
                host
            },
        );
    }
    if oldact != 0 && !write_guest_struct(oldact, &old) {
        return -(libc::EFAULT as i64);
    }
    0
}

/// Guest sigaltstack (kept per thread, never given to the kernel: rgrind's own is there).
pub fn sigaltstack(ctx: &mut ThreadContext, ss: u64, old: u64) -> i64 {
    let rsp = ctx.gpr[reg::RSP];
    let on = ctx.guest_ss_size != 0 && rsp.wrapping_sub(ctx.guest_ss_sp) < ctx.guest_ss_size;
    if old != 0 {
        let flags = if ctx.guest_ss_size == 0 {
            SS_DISABLE
        } else if on {
            SS_ONSTACK
        } else {
            0
        };
        let v: [u64; 3] = [ctx.guest_ss_sp, flags, ctx.guest_ss_size];
        if !write_guest_struct(old, &v) {
            return -(libc::EFAULT as i64);
        }
    }
    if ss != 0 {
        let mut v = [0u64; 3];
        if !read_guest_struct(ss, &mut v) {
            return -(libc::EFAULT as i64);
        }
        if on {
            return -(libc::EPERM as i64);
        }
        if v[1] as u32 as u64 & SS_DISABLE != 0 {
            ctx.guest_ss_sp = 0;
            ctx.guest_ss_size = 0;
        } else {
            if v[2] < 2048 {
                return -(libc::ENOMEM as i64);
            }
            ctx.guest_ss_sp = v[0];
            ctx.guest_ss_size = v[2];
        }
    }
    0
}

fn read_guest_struct<T: Copy>(addr: u64, out: &mut T) -> bool {
    let n = core::mem::size_of::<T>();
    // SAFETY: T is plain data (KSigaction or u64 arrays); we fill all its bytes.
    let buf = unsafe { core::slice::from_raw_parts_mut(out as *mut T as *mut u8, n) };
    crate::translate::read_guest(addr, buf) == n
}

fn write_guest_struct<T: Copy>(addr: u64, v: &T) -> bool {
    let n = core::mem::size_of::<T>();
    // SAFETY: T is plain data.
    let bytes = unsafe { core::slice::from_raw_parts(v as *const T as *const u8, n) };
    write_guest(addr, bytes)
}

pub use crate::translate::write_guest;

fn current_mask() -> u64 {
    let mut old = 0u64;
    // SAFETY: query only.
    unsafe {
        raw::syscall6(
            libc::SYS_rt_sigprocmask as u64,
            [0, 0, &mut old as *mut u64 as u64, 8, 0, 0],
        )
    };
    old
}

/// Signals rgrind never lets the guest block on the host: its own time-slice signal, and
/// SIGTRAP, which the handler's single-stepping raises (a blocked single-step trap makes the
/// kernel kill the process).
fn never_blocked() -> u64 {
    bit(YIELD) | bit(libc::SIGTRAP as usize)
}

fn set_mask(mask: u64) {
    let m = mask & !(bit(libc::SIGKILL as usize) | bit(libc::SIGSTOP as usize) | never_blocked());
    // SAFETY: sets this thread's mask from a value we own.
    unsafe {
        raw::syscall6(
            libc::SYS_rt_sigprocmask as u64,
            [
                libc::SIG_SETMASK as u64,
                &m as *const u64 as u64,
                0,
                8,
                0,
                0,
            ],
        )
    };
}

// Offsets in the kernel's x86-64 rt_sigframe.
const UC_OFF: u64 = 8;
const UC_STACK: u64 = 16;
const UC_MCONTEXT: u64 = 40;
const UC_SIGMASK: u64 = 40 + 256;
const UC_SIZE: u64 = 304;
const INFO_OFF: u64 = UC_OFF + UC_SIZE;
const FRAME_SIZE: u64 = INFO_OFF + 128;
/// Order of registers in `struct sigcontext` (r8..r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp).
const SIGCONTEXT_GPRS: [usize; 16] = [
    reg::R8,
    reg::R9,
    reg::R10,
    reg::R11,
    reg::R12,
    reg::R13,
    reg::R14,
    reg::R15,
    reg::RDI,
    reg::RSI,
    reg::RBP,
    reg::RBX,
    reg::RDX,
    reg::RAX,
    reg::RCX,
    reg::RSP,
];

/// Whether something is pending that `deliver_pending` would act on.
pub fn has_work(ctx: &ThreadContext) -> bool {
    if ctx.sync_signal != 0 || ctx.yield_requested != 0 {
        return true;
    }
    let pending = ctx.pending.load(Ordering::SeqCst);
    pending != 0 && pending & !current_mask() != 0
}

/// Delivers a pending synchronous fault, or the lowest pending unblocked signal, by building
/// its frame (or carrying out its default action). `restart_nr`: the system call the thread
/// was in when the signal arrived, if it returned EINTR, to restart under SA_RESTART.
pub fn deliver_pending(ctx: &mut ThreadContext, restart_nr: Option<u64>) {
    ctx.rflags &= !TF;
    if ctx.yield_requested != 0 {
        ctx.yield_requested = 0;
        crate::runlock::release();
        // SAFETY: sched_yield has no preconditions.
        unsafe { libc::sched_yield() };
        crate::runlock::acquire();
    }
    let mut snapped: Option<KSigaction> = None;
    let mut asynchronous = false;
    let (sig, info) = if ctx.sync_signal != 0 {
        let s = ctx.sync_signal as usize;
        ctx.sync_signal = 0;
        let cut = std::mem::take(&mut ctx.cut_short);
        if cut.end != 0 {
            crate::core_state::core().tool.block_cut_short(
                (cut.start, cut.end),
                cut.faulting as usize,
                cut.counted,
            );
        }
        (s, ctx.sync_info)
    } else {
        let pend = ctx.pending.load(Ordering::SeqCst) & !current_mask();
        if pend == 0 {
            return;
        }
        let s = pend.trailing_zeros() as usize + 1;
        ctx.pending.fetch_and(!bit(s), Ordering::SeqCst);
        asynchronous = true;
        (s, ctx.pending_info[s])
    };
    let action = {
        let mut actions = ACTIONS.lock().unwrap_or_else(|p| p.into_inner());
        // The snapshot fields are only touched under this lock (another thread's
        // `snapshot_for_target` writes them).
        if asynchronous && ctx.pending_snapped & bit(sig) != 0 {
            ctx.pending_snapped &= !bit(sig);
            snapped = Some(ctx.pending_action[sig]);
        }
        let a = snapped.unwrap_or(actions[sig]);
        if a.handler > SIG_IGN && a.flags & SA_RESETHAND != 0 {
            actions[sig].handler = SIG_DFL;
            install_host(sig, host_disposition_for(sig, &actions[sig]));
        }
        a
    };
    match action.handler {
        SIG_IGN => {}
        SIG_DFL => match default_action(sig) {
            Default_::Ignore => {}
            Default_::Stop => {
                // SAFETY: stop ourselves the way the kernel would.
                unsafe { libc::raise(libc::SIGSTOP) };
            }
            Default_::Terminate => {
                if std::env::var_os("RGRIND_DEBUG_FATAL").is_some() {
                    // Debugging aid (ARCHITECTURE.md): where the guest died, and the map.
                    eprintln!(
                        "--rgrind-- fatal signal {sig} at guest rip {:#x}, rsp {:#x}\n{}",
                        ctx.rip,
                        ctx.gpr[reg::RSP],
                        std::fs::read_to_string("/proc/thread-self/maps").unwrap_or_default()
                    );
                }
                die_by_signal(sig as i32)
            }
        },
        handler => {
            if let Some(nr) = restart_nr {
                if action.flags & SA_RESTART != 0 {
                    ctx.gpr[reg::RAX] = nr;
                    ctx.rip -= 2;
                }
            }
            build_frame(ctx, sig, &info, &action, handler);
        }
    }
}

fn build_frame(
    ctx: &mut ThreadContext,
    sig: usize,
    info: &[u8; 128],
    action: &KSigaction,
    handler: u64,
) {
    let rsp = ctx.gpr[reg::RSP];
    let on_alt = ctx.guest_ss_size != 0 && rsp.wrapping_sub(ctx.guest_ss_sp) < ctx.guest_ss_size;
    let mut sp = if action.flags & SA_ONSTACK != 0 && ctx.guest_ss_size != 0 && !on_alt {
        ctx.guest_ss_sp + ctx.guest_ss_size
    } else {
        rsp - 128
    };
    let xsize = crate::context::xsave_size() as u64;
    sp = (sp - xsize) & !63;
    let fpstate = sp;
    sp = ((sp - FRAME_SIZE) & !15) - 8;
    let frame = sp;
    let old_mask = current_mask();
    let mut f = vec![0u8; FRAME_SIZE as usize];
    let put = |f: &mut Vec<u8>, off: u64, v: u64| {
        f[off as usize..off as usize + 8].copy_from_slice(&v.to_ne_bytes())
    };
    put(&mut f, 0, action.restorer);
    put(&mut f, UC_OFF, 0x7); // UC_FP_XSTATE | UC_SIGCONTEXT_SS | UC_STRICT_RESTORE_SS
    put(&mut f, UC_OFF + UC_STACK, ctx.guest_ss_sp);
    put(
        &mut f,
        UC_OFF + UC_STACK + 8,
        if ctx.guest_ss_size == 0 {
            SS_DISABLE
        } else if on_alt {
            SS_ONSTACK
        } else {
            0
        },
    );
    put(&mut f, UC_OFF + UC_STACK + 16, ctx.guest_ss_size);
    let mc = UC_OFF + UC_MCONTEXT;
    for (i, &r) in SIGCONTEXT_GPRS.iter().enumerate() {
        put(&mut f, mc + 8 * i as u64, ctx.gpr[r]);
    }
    put(&mut f, mc + 128, ctx.rip);
    put(&mut f, mc + 136, ctx.rflags);
    put(&mut f, mc + 144, 0x2b_0000_0000_0033); // cs=0x33, gs=0, fs=0, ss=0x2b
    let (trapno, err) = trap_info(sig);
    put(&mut f, mc + 152, err);
    put(&mut f, mc + 160, trapno);
    put(&mut f, mc + 168, old_mask);
    // cr2: the fault address for SIGSEGV/SIGBUS (si_addr at offset 16 of siginfo).
    put(
        &mut f,
        mc + 176,
        u64::from_ne_bytes(info[16..24].try_into().unwrap_or([0; 8])),
    );
    put(&mut f, mc + 184, fpstate);
    put(&mut f, UC_OFF + UC_SIGMASK, old_mask);
    f[INFO_OFF as usize..].copy_from_slice(info);
    let mut fp = ctx.xsave_area.0[..xsize as usize].to_vec();
    // Software-reserved bytes that mark an XSAVE-format frame, as the kernel writes them.
    fp[464..468].copy_from_slice(&0x4650_5853u32.to_ne_bytes());
    fp[468..472].copy_from_slice(&((xsize as u32) + 4).to_ne_bytes());
    fp[472..480].copy_from_slice(&u64::from(crate::context::XSAVE_MASK_LO).to_ne_bytes());
    fp[480..484].copy_from_slice(&(xsize as u32).to_ne_bytes());
    if !write_guest(frame, &f) || !write_guest(fpstate, &fp) {
        // The guest stack is unusable: the kernel would kill the process with SIGSEGV.
        die_by_signal(libc::SIGSEGV);
    }
    let mut mask = old_mask | action.mask;
    if action.flags & SA_NODEFER == 0 {
        mask |= bit(sig);
    }
    set_mask(mask);
    ctx.gpr[reg::RSP] = frame;
    ctx.gpr[reg::RDI] = sig as u64;
    ctx.gpr[reg::RSI] = frame + INFO_OFF;
    ctx.gpr[reg::RDX] = frame + UC_OFF;
    ctx.gpr[reg::RAX] = 0;
    ctx.rip = handler;
    ctx.rflags &= !(0x400 | TF); // DF and TF clear in handlers
                                 // The handler's stack: below the interrupted rsp, or the alternate stack it switched to
                                 // (or, already on it, the part below rsp).
    let switched = action.flags & SA_ONSTACK != 0 && ctx.guest_ss_size != 0 && !on_alt;
    let handler_stack = match (switched, on_alt) {
        (true, _) => (ctx.guest_ss_sp, ctx.guest_ss_sp + ctx.guest_ss_size),
        (false, true) => (ctx.guest_ss_sp, rsp),
        (false, false) => (0, rsp),
    };
    crate::core_state::core()
        .tool
        .signal_delivered(sig as i32, handler_stack);
}

fn trap_info(sig: usize) -> (u64, u64) {
    match sig as i32 {
        libc::SIGSEGV | libc::SIGBUS => (14, 4),
        libc::SIGFPE => (0, 0),
        libc::SIGILL => (6, 0),
        libc::SIGTRAP => (3, 0),
        _ => (0, 0),
    }
}

/// Guest rt_sigreturn: reload the (possibly edited) context from the frame.
pub fn sigreturn(ctx: &mut ThreadContext) {
    let uc = ctx.gpr[reg::RSP];
    let mut f = vec![0u8; UC_SIZE as usize];
    if crate::translate::read_guest(uc, &mut f) != f.len() {
        die_by_signal(libc::SIGSEGV);
    }
    let get = |off: u64| {
        u64::from_ne_bytes(
            f[off as usize..off as usize + 8]
                .try_into()
                .unwrap_or([0; 8]),
        )
    };
    let mc = UC_MCONTEXT;
    for (i, &r) in SIGCONTEXT_GPRS.iter().enumerate() {
        ctx.gpr[r] = get(mc + 8 * i as u64);
    }
    ctx.rip = get(mc + 128);
    ctx.rflags = (get(mc + 136) & 0x0000_0000_0025_0fd5) | 0x202;
    let fpstate = get(mc + 184);
    if fpstate != 0 {
        let xsize = crate::context::xsave_size();
        let mut fp = vec![0u8; xsize];
        if crate::translate::read_guest(fpstate, &mut fp) == xsize {
            ctx.xsave_area.0[..xsize].copy_from_slice(&fp);
        }
    }
    set_mask(get(UC_SIGMASK));
    // The alternate-stack settings in uc_stack are restored like the kernel does.
    let ss = [get(UC_STACK), get(UC_STACK + 8), get(UC_STACK + 16)];
    if ss[1] & SS_DISABLE != 0 {
        ctx.guest_ss_sp = 0;
        ctx.guest_ss_size = 0;
    } else if ss[2] != 0 {
        ctx.guest_ss_sp = ss[0];
        ctx.guest_ss_size = ss[2];
    }
}

/// Whether the guest has a handler function for `sig`.
pub fn has_handler(sig: usize) -> bool {
    ACTIONS.lock().unwrap_or_else(|p| p.into_inner())[sig].handler > SIG_IGN
}

/// Queues a synchronous `sig` raised by the guest instruction at `addr` (delivered before the
/// thread runs on).
pub fn raise_sync(ctx: &mut ThreadContext, sig: i32, addr: u64) {
    let mut info = [0u8; 128];
    let code: i32 = match sig {
        libc::SIGILL => 2,     // ILL_ILLOPN
        libc::SIGTRAP => 0x80, // SI_KERNEL
        _ => 0x80,
    };
    info[0..4].copy_from_slice(&sig.to_ne_bytes());
    info[8..12].copy_from_slice(&code.to_ne_bytes());
    info[16..24].copy_from_slice(&addr.to_ne_bytes());
    ctx.sync_signal = sig as u64;
    ctx.sync_info = info;
}

/// Guest rt_sigprocmask: passed to the kernel with rgrind's private signal kept unblocked.
pub fn sigprocmask(ctx: &mut ThreadContext, how: u64, set: u64, old: u64, size: u64) -> i64 {
    // The guest's view of the signals rgrind keeps unblocked on the host, before this call.
    let hidden_old = ctx.guest_hidden_blocked;
    let mut new = 0u64;
    let set_ptr = if set != 0 {
        if !read_guest_struct(set, &mut new) {
            return -(libc::EFAULT as i64);
        }
        let asked = new & never_blocked();
        ctx.guest_hidden_blocked = match how as i32 {
            libc::SIG_BLOCK => hidden_old | asked,
            libc::SIG_UNBLOCK => hidden_old & !asked,
            libc::SIG_SETMASK => asked,
            _ => return -(libc::EINVAL as i64),
        };
        if how != libc::SIG_UNBLOCK as u64 {
            new &= !never_blocked();
        }
        &new as *const u64 as u64
    } else {
        0
    };
    let mut prev = 0u64;
    // SAFETY: both sets are our own 8-byte buffers.
    let r = unsafe {
        raw::syscall6(
            libc::SYS_rt_sigprocmask as u64,
            [how, set_ptr, &mut prev as *mut u64 as u64, size, 0, 0],
        )
    };
    if r == 0 && old != 0 && !write_guest_struct(old, &(prev | hidden_old)) {
        return -(libc::EFAULT as i64);
    }
    r
}

/// Puts the guest's exact signal mask on the host thread just before an exec (the new program
/// inherits the mask; rgrind's own unblocked signals must not leak into it). Returns the mask to
/// restore if the exec fails.
pub fn exact_mask_for_exec(ctx: &ThreadContext) -> u64 {
    let host = current_mask();
    let exact = host | ctx.guest_hidden_blocked;
    // SAFETY: sets this thread's mask from a value we own; rgrind's handlers are not needed
    // across the exec (which replaces them), and the caller restores `host` if it fails.
    unsafe {
        raw::syscall6(
            libc::SYS_rt_sigprocmask as u64,
            [
                libc::SIG_SETMASK as u64,
                &exact as *const u64 as u64,
                0,
                8,
                0,
                0,
            ],
        )
    };
    host
}

pub fn restore_mask(mask: u64) {
    set_mask(mask);
}

/// A guest thread is about to send `sig` to guest thread `tid` (tgkill/tkill): fix the
/// disposition now, as the kernel in effect does by delivering at once, so a handler reset
/// that the sender makes right after sending does not apply to this signal.
/// With `take == false`, drops the snapshot again (the send failed).
pub fn snapshot_for_target(tid: u64, sig: u64, take: bool) {
    let sig = sig as usize;
    if sig == 0 || sig >= NSIG {
        return;
    }
    // Held across the update: the target reads and clears its snapshot under this lock.
    let actions = ACTIONS.lock().unwrap_or_else(|p| p.into_inner());
    let action = actions[sig];
    crate::thread::for_each_context(|t| {
        if t.tid != tid {
            return;
        }
        if !take {
            t.pending_snapped &= !bit(sig);
        } else if t.pending_snapped & bit(sig) == 0 {
            t.pending_action[sig] = action;
            t.pending_snapped |= bit(sig);
        }
    });
    drop(actions);
}
