//! The per-thread rgrind context that GS points at while guest code runs.
//!
//! Translated code reaches this block with `gs:`-relative operands (no register cost): spill
//! slots, the saved guest register file, the exit protocol fields and the thread's
//! indirect-branch lookup (IBL) table all live here.
//!
//! # Invariants
//! * GS base == address of this thread's `ThreadContext` for the whole life of the thread.
//! * The layout is `#[repr(C)]`; every offset the emitted code or the entry/exit asm uses is a
//!   `pub const` computed with `offset_of!`, so the asm and the struct cannot drift apart.
//! * `xsave_area` is 64-byte aligned (XSAVE requires it).
//! * An IBL entry whose `neg_tag` is `1` (tag `u64::MAX`) is empty; a guest target never equals it.
//!
//! This module does not allocate translations or decide anything about the guest: it is the
//! storage the dispatcher, the translator and the asm glue agree on.
use core::mem::offset_of;
use core::sync::atomic::{AtomicU64, Ordering};

/// Number of entries in a thread's IBL table. Indexed by the low 16 bits of the guest target,
/// which translated code extracts with a flag-free `movzx`.
pub const IBL_ENTRIES: usize = 1 << 16;
/// Bytes reserved for the XSAVE image of the guest's extended state.
pub const XSAVE_BYTES: usize = 16 * 1024;
/// Spill slots available to translated code.
pub const N_SCRATCH: usize = 8;

/// Index of each general-purpose register in `ThreadContext::gpr` (hardware encoding order).
pub mod reg {
    pub const RAX: usize = 0;
    pub const RCX: usize = 1;
    pub const RDX: usize = 2;
    pub const RBX: usize = 3;
    pub const RSP: usize = 4;
    pub const RBP: usize = 5;
    pub const RSI: usize = 6;
    pub const RDI: usize = 7;
    pub const R8: usize = 8;
    pub const R9: usize = 9;
    pub const R10: usize = 10;
    pub const R11: usize = 11;
    pub const R12: usize = 12;
    pub const R13: usize = 13;
    pub const R14: usize = 14;
    pub const R15: usize = 15;
}

/// One entry of the in-cache indirect-branch lookup table. Atomic words: other threads empty
/// the table (`clear_ibl`) while its thread reads it in translated code.
#[repr(C)]
pub struct IblEntry {
    /// `0 - guest_target`, so that `neg_tag + target == 0` tests a hit with a flag-free `lea`
    /// followed by `jrcxz`.
    pub neg_tag: AtomicU64,
    /// Host address of the translation of `guest_target`'s IBL entry; `rgrind_ibl_miss` in
    /// an entry never filled. Never zero: the lookup loads it after the tag compare, and the
    /// tag may have been emptied in between.
    pub host: AtomicU64,
}

/// Why translated code returned to the dispatcher; written to `ThreadContext::exit_id`.
/// Values below `EXIT_ID_FIRST_SPECIAL` are indices of exit records (see `crate::cache`).
pub const EXIT_ID_FIRST_SPECIAL: u32 = 0xffff_ff00;
/// An indirect branch missed the IBL table; the guest target is in `ibl_target`.
pub const EXIT_IBL_MISS: u32 = 0xffff_ff01;
/// The signal handler took the thread out of translated code at `signal_rip`.
pub const EXIT_SIGNAL: u32 = 0xffff_ff02;

/// 64-byte aligned storage for XSAVE.
#[repr(C, align(64))]
pub struct XsaveArea(pub [u8; XSAVE_BYTES]);

#[repr(C, align(4096))]
pub struct ThreadContext {
    /// Guest general-purpose registers while the guest is not running (hardware order).
    pub gpr: [u64; 16],
    pub rflags: u64,
    /// Guest instruction pointer of the next instruction to run.
    pub rip: u64,
    /// Guest FS base.
    pub guest_fs: u64,
    /// rgrind's FS base for this thread (Rust TLS).
    pub host_fs: u64,
    /// Host stack pointer saved by `rgrind_enter`.
    pub host_rsp: u64,
    /// Host address `rgrind_enter` jumps to.
    pub enter_target: u64,
    /// Address of `rgrind_exit`, jumped to through `jmp gs:[EXIT_FN]`.
    pub exit_fn: u64,
    /// Exit record index or one of the `EXIT_*` specials.
    pub exit_id: u64,
    /// Guest target of an indirect branch that missed the IBL.
    pub ibl_target: u64,
    /// Address of this struct (what GS base holds), for code that needs it in a register.
    pub self_addr: u64,
    /// MXCSR value rgrind's own code runs with.
    pub host_mxcsr: u32,
    pub _pad0: u32,
    /// CLONE_CHILD_CLEARTID address of this guest thread (0: none).
    pub clear_child_tid: u64,
    /// The process's first thread (its exit must not return from `main`).
    pub is_main_thread: bool,
    /// Pending asynchronous guest signals (bit `sig - 1`), set by the host handler.
    pub pending: core::sync::atomic::AtomicU64,
    /// A synchronous fault to deliver before anything else (0: none).
    pub sync_signal: u64,
    /// Guest address where a signal took the thread out of translated code.
    pub signal_rip: u64,
    /// With `sync_signal` from a fault in translated code: the run of a block it cut short
    /// (all zero: none).
    pub cut_short: crate::cache::CutShort,
    /// Non-zero while the host handler single-steps towards a block start.
    pub stepping: u64,
    /// Another thread asked for the run lock (time slice over).
    pub yield_requested: u64,
    /// Signals the guest asked to block that rgrind keeps unblocked on the host (SIGTRAP,
    /// signal 64): reported in the guest's mask and applied for real at exec.
    pub guest_hidden_blocked: u64,
    /// The guest's alternate signal stack (size 0: none).
    pub guest_ss_sp: u64,
    pub guest_ss_size: u64,
    /// rgrind's own alternate stack for its handler on this thread.
    pub host_altstack: u64,
    pub sync_info: [u8; 128],
    pub pending_info: [[u8; 128]; crate::signal::NSIG],
    /// The guest disposition of each pending signal when the host handler took it (the
    /// kernel decides at that moment, not later when rgrind delivers the frame); valid for
    /// the signals in `pending_snapped`.
    pub pending_action: [crate::signal::KSigaction; crate::signal::NSIG],
    pub pending_snapped: u64,
    /// Kernel thread id of this guest thread.
    pub tid: u64,
    /// The guest's alignment-check flag (`AC`, 0 or `RFLAGS_AC`) while translated code runs.
    /// The real flag stays clear, so that rgrind's own code (the dispatcher, helpers, signal
    /// handler) never faults on an unaligned access; `pushfq` and `popfq` are translated to
    /// read and write it here, and `rflags` holds it while the guest is stopped. As under
    /// Valgrind, the guest's unaligned accesses do not fault either.
    pub guest_ac: u64,
    /// Spill slots for translated code.
    pub scratch: [u64; N_SCRATCH],
    /// Instrumentation (`crate::instrument`): the helper trampoline's address, the top of this
    /// thread's helper stack, the guest rsp while a helper runs, the routine, its arguments,
    /// where to resume, saved flags and spill slots.
    pub helper_tramp: u64,
    /// The lean trampoline for `Helper::integer_only` routines.
    pub helper_tramp_int: u64,
    pub helper_stack: u64,
    pub helper_saved_rsp: u64,
    pub helper_fn: u64,
    pub helper_args: [u64; 3],
    pub helper_ret: u64,
    /// Where `rgrind_helper_step` resumes: the helper's real return address, when a signal
    /// that arrived during the helper redirected `helper_ret` (`signal::step_after_helper`).
    pub helper_step_resume: u64,
    pub instr_flags: u64,
    pub instr_scratch: [u64; 6],
    /// Per group of data checks, the last L1 miss's line and its distance from the one
    /// before (`instrument::emit::prefetch_stream`).
    pub miss_streams: [[u64; 2]; MISS_STREAMS],
    /// A vector register stored by the out-of-line address of an element-wise access, to
    /// read one element (`instrument::emit::element_address`).
    pub lane_scratch: [u64; 8],
    /// The guest rsp while a shared cache-scan routine runs on `scan_stack`
    /// (`instrument::emit::enter_shared_scan`).
    pub scan_saved_rsp: u64,
    /// The address just past `scan_stack`.
    pub scan_stack_top: u64,
    /// The shared scan routines' stack: it holds their return address (a `call` and `ret`,
    /// whose return the CPU predicts, where one shared indirect jump back would not be).
    pub scan_stack: [u64; 2],
    /// XSAVE image of the guest's x87/SSE/AVX/AVX-512 state while outside translated code.
    pub xsave_area: XsaveArea,
    pub ibl: [IblEntry; IBL_ENTRIES],
}

pub const OFF_GPR: usize = offset_of!(ThreadContext, gpr);
pub const OFF_RFLAGS: usize = offset_of!(ThreadContext, rflags);
pub const OFF_GUEST_AC: usize = offset_of!(ThreadContext, guest_ac);
/// The alignment-check bit of RFLAGS.
pub const RFLAGS_AC: u64 = 1 << 18;
pub const OFF_RIP: usize = offset_of!(ThreadContext, rip);
pub const OFF_GUEST_FS: usize = offset_of!(ThreadContext, guest_fs);
pub const OFF_HOST_FS: usize = offset_of!(ThreadContext, host_fs);
pub const OFF_HOST_RSP: usize = offset_of!(ThreadContext, host_rsp);
pub const OFF_ENTER_TARGET: usize = offset_of!(ThreadContext, enter_target);
pub const OFF_EXIT_FN: usize = offset_of!(ThreadContext, exit_fn);
pub const OFF_EXIT_ID: usize = offset_of!(ThreadContext, exit_id);
pub const OFF_IBL_TARGET: usize = offset_of!(ThreadContext, ibl_target);
pub const OFF_SELF: usize = offset_of!(ThreadContext, self_addr);
pub const OFF_HOST_MXCSR: usize = offset_of!(ThreadContext, host_mxcsr);
pub const OFF_SCRATCH: usize = offset_of!(ThreadContext, scratch);
pub const OFF_HELPER_TRAMP: usize = offset_of!(ThreadContext, helper_tramp);
pub const OFF_HELPER_TRAMP_INT: usize = offset_of!(ThreadContext, helper_tramp_int);
pub const OFF_HELPER_STACK: usize = offset_of!(ThreadContext, helper_stack);
pub const OFF_HELPER_SAVED_RSP: usize = offset_of!(ThreadContext, helper_saved_rsp);
pub const OFF_HELPER_FN: usize = offset_of!(ThreadContext, helper_fn);
pub const OFF_HELPER_ARGS: usize = offset_of!(ThreadContext, helper_args);
pub const OFF_HELPER_RET: usize = offset_of!(ThreadContext, helper_ret);
pub const OFF_HELPER_STEP_RESUME: usize = offset_of!(ThreadContext, helper_step_resume);
pub const OFF_STEPPING: usize = offset_of!(ThreadContext, stepping);
pub const OFF_INSTR_FLAGS: usize = offset_of!(ThreadContext, instr_flags);
pub const OFF_INSTR_SCRATCH: usize = offset_of!(ThreadContext, instr_scratch);
pub const OFF_MISS_STREAMS: usize = offset_of!(ThreadContext, miss_streams);
/// Entries of `ThreadContext::miss_streams` (a power of two).
pub const MISS_STREAMS: usize = 64;
pub const OFF_LANE_SCRATCH: usize = offset_of!(ThreadContext, lane_scratch);
pub const OFF_SCAN_SAVED_RSP: usize = offset_of!(ThreadContext, scan_saved_rsp);
pub const OFF_SCAN_STACK_TOP: usize = offset_of!(ThreadContext, scan_stack_top);
pub const OFF_SCAN_STACK: usize = offset_of!(ThreadContext, scan_stack);
pub const OFF_XSAVE: usize = offset_of!(ThreadContext, xsave_area);
pub const OFF_IBL: usize = offset_of!(ThreadContext, ibl);

const _: () = assert!(OFF_XSAVE.is_multiple_of(64));
const _: () = assert!(OFF_IBL + IBL_ENTRIES * 16 < i32::MAX as usize);
// dispatch::enter hard-codes the gpr offsets (8 * register number).
const _: () = assert!(OFF_GPR == 0);

/// Offset of scratch slot `i` (for emitted code).
pub const fn scratch_off(i: usize) -> i32 {
    (OFF_SCRATCH + 8 * i) as i32
}

impl ThreadContext {
    /// Allocates a zeroed context with mmap (it is ~1 MiB, too big for the stack) and
    /// initialises the IBL table to empty.
    pub fn allocate() -> Option<&'static mut ThreadContext> {
        let size = core::mem::size_of::<ThreadContext>();
        // SAFETY: anonymous private mapping; the result is checked before use.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        // SAFETY: the mapping is page aligned (>= the 4096 alignment), zero filled (a valid
        // ThreadContext: all fields are plain integers), sized for the struct and never unmapped
        // while the thread lives.
        let ctx = unsafe { &mut *(p as *mut ThreadContext) };
        ctx.self_addr = p as u64;
        ctx.scan_stack_top = p as u64 + (OFF_SCAN_STACK + size_of::<[u64; 2]>()) as u64;
        ctx.host_mxcsr = 0x1f80;
        ctx.exit_fn = crate::dispatch::exit_fn_addr();
        if !crate::instrument::helper::init_context(ctx) {
            return None;
        }
        let miss = crate::dispatch::ibl_miss_addr();
        for e in ctx.ibl.iter() {
            e.host.store(miss, Ordering::Relaxed);
        }
        ctx.clear_ibl();
        Some(ctx)
    }

    /// Unmaps a context made by `allocate`, and its helper stack.
    ///
    /// # Safety
    /// `ctx` must come from `allocate`, and no thread may use it (or run on its helper stack)
    /// any more.
    pub unsafe fn free(ctx: *mut ThreadContext) {
        // SAFETY: per the contract, `ctx` is a live context from `allocate`.
        crate::instrument::helper::release_context(unsafe { &*ctx });
        // SAFETY: per the contract, an mmap of exactly this size that nothing uses any more.
        unsafe { libc::munmap(ctx.cast(), core::mem::size_of::<ThreadContext>()) };
    }

    /// Empties the IBL table (after translations were discarded); called from any thread.
    /// Only the tags change: a lookup that compared an old tag still jumps to the old
    /// translation (code is never freed), as it would had it run a moment earlier.
    pub fn clear_ibl(&self) {
        for e in self.ibl.iter() {
            e.neg_tag.store(1, Ordering::Relaxed);
        }
    }

    /// Empties the entry for `guest`, if it holds it; called from any thread (as
    /// `clear_ibl`).
    pub fn ibl_forget(&self, guest: u64) {
        let e = &self.ibl[(guest & 0xffff) as usize];
        let _ = e.neg_tag.compare_exchange(
            guest.wrapping_neg(),
            1,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// Called by the owning thread only.
    pub fn ibl_insert(&self, guest: u64, host: u64) {
        let e = &self.ibl[(guest & 0xffff) as usize];
        e.host.store(host, Ordering::Relaxed);
        e.neg_tag.store(guest.wrapping_neg(), Ordering::Relaxed);
    }

    /// Initial guest xstate: whatever the host state is now, with default control words,
    /// so the guest starts like after execve.
    pub fn init_xstate(&mut self) {
        // SAFETY: xsave_area is 64-byte aligned and XSAVE_BYTES is larger than the XSAVE size
        // for the components in the mask (checked at startup against CPUID 0xD).
        unsafe {
            core::arch::asm!(
                "fninit",
                "xsave64 [{area}]",
                area = in(reg) self.xsave_area.0.as_mut_ptr(),
                in("eax") XSAVE_MASK_LO,
                in("edx") 0u32,
            );
        }
        // MXCSR lives at offset 24 of the legacy region.
        self.xsave_area.0[24..28].copy_from_slice(&0x1f80u32.to_le_bytes());
    }
}

/// State components saved and restored around rgrind's own code: x87, SSE, AVX, AVX-512
/// (opmask, ZMM_Hi256, Hi16_ZMM). AMX and PKRU are left alone.
pub const XSAVE_MASK_LO: u32 = 0xe7;

/// Bytes of the XSAVE image for `XSAVE_MASK_LO` (standard format), from CPUID leaf 0xD.
pub fn xsave_size() -> usize {
    static SIZE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *SIZE.get_or_init(|| {
        let mut end = 512 + 64;
        for i in 2..8u32 {
            if XSAVE_MASK_LO & (1 << i) == 0 {
                continue;
            }
            let r = core::arch::x86_64::__cpuid_count(0xd, i);
            if r.eax != 0 {
                end = end.max((r.ebx + r.eax) as usize);
            }
        }
        end.min(XSAVE_BYTES)
    })
}
