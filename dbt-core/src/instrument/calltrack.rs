//! Support for tools that keep per-thread state in their out-of-line routines (Callgrind's
//! shadow call stack): which guest thread is running, and a way to run Rust code that needs
//! rgrind's own thread-local storage or allocator from inside a routine; and the layout of
//! the state Callgrind's inline plain-jump path reads and writes (`JumpState`, `InlineRec`).
//!
//! # Invariants
//! * Both functions are only meaningful inside a routine called through the helper trampoline
//!   (GS points at the running thread's `ThreadContext`).
//! * `with_host_fs` restores the guest's FS base before it returns, so the guest never sees
//!   rgrind's TLS.
//!
//! * `JumpState`/`InlineRec` are `repr(C)`; the emitted code addresses their fields with
//!   `offset_of!`, so the layout is the only contract with the emitter.
//!
//! Deliberately not done here: any tool state; the tool owns what it keeps per thread (and
//! the one `JumpState`, which it swaps between threads itself).
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

/// Bytes per mapping of `leak_low`'s arena.
const LOW_CHUNK: usize = 1 << 20;

/// Moves `value` to memory that lives for the process, below 2 GiB when the kernel allows
/// (`MAP_32BIT`), so that generated code can address it with a 32-bit displacement; else to
/// a leaked box. Objects are 64-byte aligned (one cache line for a 64-byte `InlineRec`).
pub fn leak_low<T: Send + Sync + 'static>(value: T) -> &'static T {
    use std::sync::Mutex;
    /// The current mapping: next free address and end (0, 0 before the first).
    static NEXT: Mutex<(usize, usize)> = Mutex::new((0, 0));
    let (size, align) = (
        core::mem::size_of::<T>(),
        core::mem::align_of::<T>().max(64),
    );
    if size > 0 && size <= LOW_CHUNK / 4 && align <= 4096 {
        let mut next = NEXT.lock().unwrap_or_else(|e| e.into_inner());
        let mut at = next.0.next_multiple_of(align);
        if next.0 == 0 || at + size > next.1 {
            // SAFETY: a fresh private anonymous mapping: it aliases no Rust object.
            let p = unsafe {
                libc::mmap(
                    core::ptr::null_mut(),
                    LOW_CHUNK,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_32BIT,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                *next = (p as usize, p as usize + LOW_CHUNK);
                at = p as usize;
            } else {
                at = 0;
            }
        }
        if at != 0 {
            next.0 = at + size;
            let ptr = at as *mut T;
            // SAFETY: `[at, at + size)` lies in our mapping (page-aligned start, `align`
            // divides 4096), was never handed out, and is written once here; nothing frees it.
            unsafe {
                ptr.write(value);
                return &*ptr;
            }
        }
    }
    Box::leak(Box::new(value))
}

// Callgrind (clginline): the layout shared by the tool and the inline jump path that
// `Instrumenter::call_with_fallback_inline` emits. The tool owns the one `JumpState` (a
// static: fixed address) and a `InlineRec` per block; the emitted code reads and writes them
// with absolute addresses, flag-free.
use core::sync::atomic::{AtomicU64, Ordering};

/// [`JumpState::exit`] after a plain `ret`.
pub const EXIT_RET: u64 = 0;
/// [`JumpState::exit`] after any other end (no plan is at address 1).
pub const EXIT_OTHER: u64 = 1;

/// The running thread's summary for the inline jump path (Callgrind's `setup_bbcc` for a
/// plain jump). It belongs to the last thread that ran a block-start routine: the tool
/// disarms it when another thread takes the run lock (`set_switch_hook`). The inline code
/// takes its path only when `expect` equals the block's key and the guest `rsp` is at most
/// the top frame's `sp` (`ret_frame`'s, the top sp; the tool's disarmed frame carries it
/// while the frame cases are disarmed); it then adds one to
/// `*last_count`, the previous block's instruction count (the word after its counter) to
/// `ir`, and makes the block the last one (`last_count` from its `InlineRec`; `expect`
/// becomes `u64::MAX` unless the block ends plainly). `ir`/`uncounted` are deltas the tool
/// folds back; the tool finds the previous block and cost centre from its counter. The
/// blocks the inline paths run are not counted as such: each adds one to a cost centre's
/// counter, which the tool sums when it needs the total (a second counter in every block
/// made a second chain of read-modify-writes).
#[repr(C)]
pub struct JumpState {
    /// Key a plainly-reached block must have (`u64::MAX`: none).
    pub expect: AtomicU64,
    /// Execution counter of the previous block's cost centre (`*mut u64`), followed in
    /// memory by that block's instruction count (`u64`).
    pub last_count: AtomicU64,
    /// Ir charged by the inline paths, added to what the tool left here: with lazy
    /// charging the thread's running Ir (so the word is the running Ir, which the call and
    /// return cases read), with eager charging 0 (a delta, like `stat`).
    pub ir: AtomicU64,
    /// Blocks the inline paths ran since the tool last looked that added to no cost
    /// centre's counter (a PLT stub's execution, charged to a skipped-cost sink).
    pub uncounted: AtomicU64,
    /// How the previous block ended, for the next block's return and call cases (one word,
    /// so that entering a block stores it once): [`EXIT_RET`] after a `ret` the return case
    /// may take, the block's `CallPlan` (`*const CallPlan`) after a call the call case may
    /// take, else [`EXIT_OTHER`].
    pub exit: AtomicU64,
    // The return case (see `InlineJump`): a `ret` popping the top shadow-stack frame, read
    // from the tool's frame (layout in `FrameLayout`).
    /// The top frame (`*const` frame; a frame whose key field is `u64::MAX` when none).
    pub ret_frame: AtomicU64,
    /// Minus the address of the bottom frame (the frame below it does not exist); 0 when
    /// the return and call cases are not armed.
    pub stack_base_neg: AtomicU64,
    /// The thread's running cost (`*const u64`, Ir first; with eager charging `ir` and
    /// `stat` are added to its words).
    pub run_ir: AtomicU64,
    // The call case (see `CallPlan`) and the pops of the return case keep these of the
    // tool's stacks up to date themselves; the tool reads the lengths back.
    /// The thread's activation count per function (`*mut u32`, indexed by function).
    pub fn_active: AtomicU64,
    /// How many functions `fn_active` holds. A call plan is shared by the threads (cost
    /// centres are, without `--separate-threads`) and may name a function a thread has not
    /// seen yet: the call case leaves that to the tool (which grows the thread's table).
    /// 0 while the frame cases are disarmed (`stack_base_neg` 0): the call cases test
    /// only this.
    pub fn_len: AtomicU64,
    /// The thread's function stack: first slot, next free slot, end of its capacity
    /// (`*mut u32`).
    pub fn_base: AtomicU64,
    pub fn_top: AtomicU64,
    pub fn_end: AtomicU64,
    /// The last frame slot the shadow stack's capacity holds.
    pub stack_last: AtomicU64,
    /// The skipped-function state (`u64::MAX`: none): the calling cost centre while a PLT
    /// stub entered by the stub case runs (see `CallPlan::stub`).
    pub nonskipped: AtomicU64,
    /// Where the tool's simulator routines count misses: the current cost centre's miss
    /// array (`*mut u64`; 0: nowhere). The inline path stores the entered block's
    /// `InlineRec::miss` here with `InlineJump::eager`.
    pub cur_miss: AtomicU64,
    /// Words between the miss slots of consecutive instructions there: the tool's miss
    /// slots per instruction, 0 for a skipped function's sink (the stub case sets it).
    pub cur_stride: AtomicU64,
    /// Eager charging (`InlineJump::eager`): the entered blocks' further static costs, added
    /// here like `ir` (the tool folds them back).
    pub stat: [AtomicU64; 4],
}

impl JumpState {
    /// Charges `n` executions of the last block, of `ir` instructions each, which a
    /// self-loop's later copies deferred (`Plan::loop_lite`) when one of its instructions
    /// faulted: `n` on its counter, `n * ir` Ir.
    ///
    /// # Safety
    /// `last_count` must point at a live counter that no other thread updates meanwhile.
    pub unsafe fn charge_owed(&self, n: u64, ir: u32) {
        let count = self.last_count.load(Ordering::Relaxed) as *mut u64;
        // SAFETY: per this function's contract.
        unsafe { *count = (*count).wrapping_add(n) };
        self.ir.fetch_add(n * u64::from(ir), Ordering::Relaxed);
    }

    /// An empty state: `expect` is `u64::MAX`, so no inline path is taken.
    pub const fn new() -> JumpState {
        JumpState {
            expect: AtomicU64::new(u64::MAX),
            last_count: AtomicU64::new(0),
            ir: AtomicU64::new(0),
            uncounted: AtomicU64::new(0),
            exit: AtomicU64::new(EXIT_OTHER),
            ret_frame: AtomicU64::new(0),
            stack_base_neg: AtomicU64::new(0),
            run_ir: AtomicU64::new(0),
            fn_active: AtomicU64::new(0),
            fn_len: AtomicU64::new(0),
            fn_base: AtomicU64::new(0),
            fn_top: AtomicU64::new(0),
            fn_end: AtomicU64::new(0),
            stack_last: AtomicU64::new(0),
            nonskipped: AtomicU64::new(u64::MAX),
            cur_miss: AtomicU64::new(0),
            cur_stride: AtomicU64::new(0),
            stat: [const { AtomicU64::new(0) }; 4],
        }
    }
}

impl Default for JumpState {
    fn default() -> Self {
        JumpState::new()
    }
}

/// Per block: the key under which it may be entered inline (stored negated, as the IBL
/// stores tags; `u64::MAX - 1` negated when never), its cost centre's counter (followed by
/// the block's instruction count, see `JumpState::last_count`), miss array and `CallPlan`.
/// The jump case also tries a second entry, laid out like the first at
/// [`InlineRec::ALT`]: the tool's older cached cost centre of the block (a block entered in
/// two contexts in turn, e.g. by jumps from two functions).
#[repr(C)]
pub struct InlineRec {
    pub neg_key: AtomicU64,
    pub count: AtomicU64,
    pub miss: AtomicU64,
    pub plan: AtomicU64,
    pub alt_neg_key: AtomicU64,
    pub alt_count: AtomicU64,
    pub alt_miss: AtomicU64,
    pub alt_plan: AtomicU64,
}

/// The call case of the inline path, per calling cost centre: the last call the tool made
/// from it, as the callee's entry block can repeat it. The block takes it when the previous
/// block armed this plan (`JumpState::exit`), the plan names this block, `[rsp]` is
/// `ret_addr`, `rsp + 8 <=` the top frame's `sp` (nothing to unwind, the frame below stays)
/// and the callee function's activation count lies in `lo ..= lo + span` (its recursion
/// level is the planned one), and both stacks have room. It then charges the previous block as a
/// jump does, adds `inc` to the activation count and one to `*arc_count`, pushes a frame
/// (`FrameLayout`: arc, caller context, `rsp`, `ret_addr`, the running Ir, the function
/// stack's depth, and the return plan: `ret_key`, `to_fn`, the old activation count,
/// `arc_incl`), pushes `to_fn` on the function stack when `push_fn`, and
/// enters the block with the planned cost centre (`callee_count`; its own
/// plan `callee_plan`; `callee_expect` as `expect` when the block ends plainly).
/// All fields are `u64`; ids are stored in the frames as `u32`.
///
/// A call through a skipped stub (a PLT stub with `--skip-plt=yes`: Callgrind charges the
/// stub to the caller and makes the stub's jump into the library the call) has `stub`: the
/// stub's block takes the *stub case* when the caller's block armed the plan and `[rsp]` is
/// `ret_addr`: it charges the caller's block, pushes a frame without arc (`nonskipped`
/// none, no return plan), enters the stub with the cost centre `stub_count`
/// and sets `JumpState::nonskipped` to `from_bbcc`, leaving the plan armed. The callee's
/// entry block then takes the call case in that state: the stub frame must be the top one
/// at `rsp`; it charges the stub (its instructions, to the running Ir and to `*sink`,
/// no execution), pushes the arc's frame with the stub frame's `sp` and `nonskipped`, and
/// clears the state. `drop` is the bytes the return case pops (one frame, or
/// both frames of a stub call).
///
/// A cost centre has two plans, one after the other (calls from one site into two callees in
/// turn: an indirect call through a table or a virtual call); what is armed is the first's
/// address, and the cases take the one that names their block. A callee block may have a
/// plan of its own (`InlineJump::own_plan`) for calls from a site whose two plans name other
/// callees (an interpreter's dispatch calls dozens of functions from one site): the call
/// case takes it when its `armed_by` is the armed address. Stub plans are never a block's
/// own.
#[repr(C)]
pub struct CallPlan {
    /// The callee block (`InlineJump::bb`; 0: no plan).
    pub callee: AtomicU64,
    pub ret_addr: AtomicU64,
    pub to_fn: AtomicU64,
    pub lo: AtomicU64,
    pub span: AtomicU64,
    pub inc: AtomicU64,
    pub push_fn: AtomicU64,
    /// The arc's id and the caller's context (`u32`s, the context in the high half): the
    /// frame's first two fields, as one word (`FrameLayout::arc`).
    pub arc_cxt: AtomicU64,
    pub arc_count: AtomicU64,
    pub arc_incl: AtomicU64,
    pub caller_cxt: AtomicU64,
    /// `to_fn << 32`: with the skipped state in the low half, the frame's next two fields
    /// as one word (`FrameLayout::nonskipped`).
    pub to_fn_hi: AtomicU64,
    pub ret_key: AtomicU64,
    pub callee_count: AtomicU64,
    /// With eager charging: the callee cost centre's miss array (`JumpState::cur_miss`).
    pub callee_miss: AtomicU64,
    pub callee_plan: AtomicU64,
    pub callee_expect: AtomicU64,
    /// The frame's `drop` shifted into the high half: with the activation count in the low
    /// half, one word (`FrameLayout::active`).
    pub drop_hi: AtomicU64,
    /// The stub block (0: a direct call).
    pub stub: AtomicU64,
    pub sink: AtomicU64,
    pub stub_count: AtomicU64,
    pub from_bbcc: AtomicU64,
    /// A callee block's own plan: the calling cost centre's first plan address (what that
    /// centre's blocks arm); 0 in a cost centre's plans and while unused.
    pub armed_by: AtomicU64,
}

impl CallPlan {
    /// A plan no block takes.
    pub const fn new() -> CallPlan {
        CallPlan {
            callee: AtomicU64::new(0),
            ret_addr: AtomicU64::new(0),
            to_fn: AtomicU64::new(0),
            lo: AtomicU64::new(0),
            span: AtomicU64::new(0),
            inc: AtomicU64::new(0),
            push_fn: AtomicU64::new(0),
            arc_cxt: AtomicU64::new(0),
            arc_count: AtomicU64::new(0),
            arc_incl: AtomicU64::new(0),
            caller_cxt: AtomicU64::new(0),
            to_fn_hi: AtomicU64::new(0),
            ret_key: AtomicU64::new(u64::MAX),
            callee_count: AtomicU64::new(0),
            callee_miss: AtomicU64::new(0),
            callee_plan: AtomicU64::new(0),
            callee_expect: AtomicU64::new(u64::MAX),
            drop_hi: AtomicU64::new(0),
            stub: AtomicU64::new(0),
            sink: AtomicU64::new(0),
            stub_count: AtomicU64::new(0),
            from_bbcc: AtomicU64::new(0),
            armed_by: AtomicU64::new(0),
        }
    }
}

impl Default for CallPlan {
    fn default() -> Self {
        CallPlan::new()
    }
}

impl core::fmt::Debug for CallPlan {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CallPlan").finish_non_exhaustive()
    }
}

impl InlineRec {
    /// Byte offset of the second entry.
    pub const ALT: i32 = core::mem::offset_of!(InlineRec, alt_neg_key) as i32;

    /// A record no key matches.
    pub const fn new() -> InlineRec {
        let none = (u64::MAX - 1).wrapping_neg();
        InlineRec {
            neg_key: AtomicU64::new(none),
            count: AtomicU64::new(0),
            miss: AtomicU64::new(0),
            plan: AtomicU64::new(0),
            alt_neg_key: AtomicU64::new(none),
            alt_count: AtomicU64::new(0),
            alt_miss: AtomicU64::new(0),
            alt_plan: AtomicU64::new(0),
        }
    }
}

const _: () = {
    use core::mem::offset_of;
    let alt = InlineRec::ALT as usize;
    assert!(offset_of!(InlineRec, alt_count) - alt == offset_of!(InlineRec, count));
    assert!(offset_of!(InlineRec, alt_miss) - alt == offset_of!(InlineRec, miss));
    assert!(offset_of!(InlineRec, alt_plan) - alt == offset_of!(InlineRec, plan));
};

impl Default for InlineRec {
    fn default() -> Self {
        InlineRec::new()
    }
}

/// What `Instrumenter::call_with_fallback_inline` needs: the state, the block's record
/// (both live for the process), the tool's block pointer, the block's instruction count
/// and guest address, whether it ends plainly (a jump or fall-through that the next block may
/// take inline) and whether it ends in a `ret` the next block may take inline.
///
/// The return case: when the previous block ended in such a `ret` (`JumpState::exit`) and the top
/// frame (`ret_frame`) has this block's address as its return address, its `sp + 8` is
/// `rsp` and its key is this block's, the inline code charges the previous block as for a
/// jump, adds the Ir run since the frame was entered to the frame's arc's inclusive cost,
/// puts back the callee's activation count and the function stack's depth the frame
/// recorded, makes the frame `drop` bytes below the top one (below the bottom frame, the
/// tool's sentinel frame, which no block matches), and continues with `expect` = the
/// frame's key (when this block ends plainly).
#[derive(Clone, Copy, Debug)]
pub struct InlineJump {
    pub state: &'static JumpState,
    pub rec: &'static InlineRec,
    pub bb: u64,
    pub ir: u32,
    /// Ends plainly (no call, `ret` or `rep`) and is no tail call: the state keeps the
    /// expected key for the next block. Every way into a block that leaves a key in the
    /// state leaves `JumpState::exit` at `EXIT_OTHER`, so a block the jump case enters
    /// finds it so (see `enter_inline`).
    pub ends_plain: bool,
    pub addr: u64,
    pub ends_ret: bool,
    /// Ends in a call (no `rep`) or a tail call (a `jmp` to a function's first byte): the
    /// next block may take the call case (for a tail call, its tail form: a plan whose
    /// `ret_addr` is 0).
    pub ends_call: bool,
    /// A function's entry block: its inline path is the call case (`CallPlan`) instead of
    /// the jump and return cases.
    pub entry: bool,
    /// The block may take the call case (with `entry`, it must); without `entry`, after the
    /// jump and return cases.
    pub call_case: bool,
    /// Without `entry`: the block has the return case (out of line; without it a failed
    /// jump case goes on to the call case or the routine's call).
    pub ret_case: bool,
    /// A skipped function's block: its inline path is the stub case (`CallPlan::stub`).
    pub stub: bool,
    /// The block's own `CallPlan` (`*const`, 0: none), tried by its call case after the
    /// calling cost centre's two.
    pub own_plan: u64,
    /// Words of the tool's running cost in use (with `eager`, the return case adds that
    /// many to the arc's inclusive cost and the call case copies that many into a frame).
    pub cost_words: u32,
    pub frame: FrameLayout,
    /// Eager charging (Callgrind with cache simulation): the entered block is charged when
    /// it is entered (its counter, `ir` and these further static costs into
    /// `JumpState::stat`) instead of the previous one, and its miss array is stored in
    /// `JumpState::cur_miss`; the return case is not used.
    pub eager: Option<[u32; 4]>,
}

/// Where the return case finds what it reads in the tool's shadow-stack frames (byte
/// offsets of `u64` fields).
#[derive(Clone, Copy, Debug)]
pub struct FrameLayout {
    pub size: i32,
    pub ret_addr: i32,
    pub sp: i32,
    /// The key of the context returned into (`u64::MAX`: the inline path must not pop it).
    pub key: i32,
    /// Where the frame's arc keeps its inclusive Ir (`*mut u64`).
    pub incl: i32,
    /// Running Ir when the frame was entered.
    pub enter_ir: i32,
    /// `u32` fields: the arc, the caller's context, the skipped-function state (`u32::MAX`:
    /// none), the callee function and its activation count before the call. The context
    /// must follow the arc, and the function the skipped state, each pair in one aligned
    /// `u64` (the call case writes each pair with one store, see `CallPlan::arc_cxt`).
    pub arc: i32,
    pub cxt: i32,
    pub nonskipped: i32,
    pub to_fn: i32,
    pub active: i32,
    /// The function stack's top at the call, as a byte offset from its base (`u64`: 4 per
    /// function, so that the inline paths add it to the base as it is).
    pub fn_off: i32,
    /// The bytes the return case pops (`u32`, after `active` in one aligned `u64`: one
    /// frame, or a stub call's two).
    pub drop: i32,
}

impl core::fmt::Debug for JumpState {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("JumpState").finish_non_exhaustive()
    }
}

impl core::fmt::Debug for InlineRec {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("InlineRec").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leak_low_gives_distinct_aligned_objects_below_2_gib() {
        let recs: Vec<&'static InlineRec> =
            (0..20_000).map(|_| leak_low(InlineRec::new())).collect();
        let mut addrs: Vec<u64> = recs.iter().map(|r| *r as *const InlineRec as u64).collect();
        assert!(addrs.iter().all(|&a| a % 64 == 0));
        // 20,000 records span more than one 1 MiB mapping; this kernel allows MAP_32BIT.
        assert!(addrs.iter().all(|&a| a + 64 <= 1 << 31), "not below 2 GiB");
        addrs.sort_unstable();
        assert!(addrs.windows(2).all(|w| w[1] - w[0] >= 64));
        recs[7]
            .count
            .store(5, core::sync::atomic::Ordering::Relaxed);
        assert_eq!(recs[7].count.load(core::sync::atomic::Ordering::Relaxed), 5);
        assert_eq!(recs[8].count.load(core::sync::atomic::Ordering::Relaxed), 0);
    }
}
