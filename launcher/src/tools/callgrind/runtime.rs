//! The call-graph state Callgrind's `setup_bbcc` keeps, updated at the start of every
//! executed block: the previous block is charged, its exit classified (call, return, jump,
//! fall-through; returns checked against the shadow stack by stack pointer; jumps to a
//! function entry, to another object or section kind turned into calls), the shadow call
//! stack pushed or unwound, and the (block, context, recursion level) cost centre chosen.
//!
//! # Invariants
//! * Only the helper routine (`clg_setup`, guest threads run one at a time) and the tool's
//!   hooks (under the core lock, guest stopped) touch a [`Runtime`]; never both at once.
//! * Without cache simulation a block is charged when the next block of its thread starts, as
//!   Callgrind does, so the very last block before the process ends is not counted. With
//!   `--cache-sim=yes` ([`Runtime::eager`]) a block is charged when it starts (Callgrind's
//!   simulator helpers count as the block runs). Callgrind still counts an execution as
//!   finished only when the next block starts (with collection on), and dumps and zeroes
//!   only cost centres with a finished execution; [`Runtime::finished`] reproduces that
//!   (so the last block before exit is left out of the totals but not of the summary).
//! * Hits cost nothing at run time: Ir, Dr, Dw, Bc and Bi of a cost centre follow from its
//!   execution count and what each instruction statically does ([`InsnStat`]); only misses
//!   and mispredicts are counted by the simulator helpers, into the current cost centre's
//!   per-instruction array ([`Bbcc::miss`], found through `jump().cur_miss`, see [`cur_stride`]) and into the thread's
//!   running cost ([`ThreadState::run`], through [`CUR_THREAD`]).
//! * Contexts, cost centres and arcs are numbered in creation order (Callgrind's ids follow).
//! * [`Runtime::setup_fast`] is an exact shortcut of [`Runtime::setup`] for the common case
//!   (the previous block ended in a plain jump or fall-through, within the same object and
//!   section, into no function entry, with no frame to unwind): it reads only the thread's
//!   [`Fast`] summary, which `setup` (and every other change of thread state) refreshes, and
//!   the block's cached cost centre. Cost centres are boxed so their counters never move.
//!   It also covers a `ret` popping exactly one real call's frame and a real call whose
//!   callee context and cost centre are already cached, whose arc exists (`ArcIndex`) and
//!   whose frame fits the shadow stacks' spare capacity (the fast path never allocates).
//! * In Ir-only mode the jump case of `setup_fast` also runs inline in translated code
//!   ([`jump`]): it accepts exactly the transitions `setup_fast` accepts there and makes the
//!   same changes, kept as deltas and a last block that [`Runtime::inline_pull`] folds into
//!   the owning thread before Rust code reads its state.
//! * Jump arcs (`--collect-jumps`) follow Callgrind's rules: a transfer that stays a jump
//!   (not turned into a call, no frame unwound) from a block ending in `jmp` (to anywhere but
//!   the next instruction), `jmp r/m`, or a taken conditional branch; they are counted whether
//!   collection is on or not, and only the arcs of cost centres that ran are written (and
//!   restarted) by a dump. Callgrind's blocks also end at every `rep` instruction, which then
//!   loops as a block of its own: those conditional jumps are derived from the `rep`
//!   counters ([`RepKey`]).
//! * Thread states are Valgrind's thread slots: a new thread takes the lowest free one and
//!   inherits its state. With `--separate-threads=yes` the slot index is part of every cost
//!   centre's key (and of the fast path's `fast_key`), so each thread has its own.
//!
//! Not done: signal-handler stack markers, `--separate-callers` beyond plain caller lists,
//! the fake call site Callgrind invents on a call-stack underflow (the context is simply
//! switched to the returned-to function).
use dbt_core::tool::{CallPlan, InlineRec, JumpState, LlHitCount, RepKind, EXIT_OTHER, EXIT_RET};
use std::cell::Cell;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

/// Words of a running cost ([`ThreadState::run`], [`Jcc::incl`]): the static events
/// `Ir Dr Dw Bc Bi` (indices [`R_IR`]..=[`R_BI`]), then up to 8 run-time slots from
/// [`R_MISS`] on (misses and mispredicts, in the order of [`Runtime::miss_events`]), then
/// the system-call events from [`R_SYS`] on (`--collect-systime`).
pub const RUN: usize = 16;
pub const R_IR: usize = 0;
pub const R_DR: usize = 1;
pub const R_DW: usize = 2;
pub const R_BC: usize = 3;
pub const R_BI: usize = 4;
pub const R_MISS: usize = 5;
/// Static events per block execution (Ir Dr Dw Bc Bi).
pub const N_STATIC: usize = 5;
/// `sysCount sysTime sysCpuTime` ([`Runtime::charge_syscall`]). They stay out of the
/// words the paths that charge blocks and push and pop frames carry ([`Runtime::n_cost`]):
/// a system call's cost goes straight to every arc on the call stack instead.
pub const R_SYS: usize = 13;
pub const N_SYS: usize = 3;
const _: () = assert!(R_SYS >= R_MISS + 8 && R_SYS + N_SYS == RUN);

/// Where the simulator helpers add a miss of instruction `i`, slot `s` (encoded in their
/// first argument as `i << 8 | s`): `base + i * stride + s`, where `base` is
/// `jump().cur_miss` (the current cost centre's [`Bbcc::miss`], or a skipped-function sink
/// with stride 0; null: not collecting; see [`set_cur_miss`]) and `stride` is
/// `jump().cur_stride` ([`cur_stride`]), and `CUR_THREAD + s` (the running thread's
/// [`ThreadState::run`] from [`R_MISS`]). Written by `setup` and the inline paths (guest
/// threads run one at a time), read by the helpers.
pub static CUR_THREAD: AtomicPtr<u64> = AtomicPtr::new(core::ptr::null_mut());

/// The miss slots between consecutive instructions of the current miss array (see
/// [`CUR_THREAD`]): in the inline state, which the stub case sets too.
#[inline(always)]
pub fn cur_stride() -> &'static AtomicU64 {
    &jump().cur_stride
}

/// Points the simulator helpers at miss array `base` (see [`CUR_THREAD`]).
#[inline(always)]
fn set_cur_miss(base: *mut u64) {
    jump().cur_miss.store(base as u64, Ordering::Relaxed);
}

/// Adds one to miss slot `slot` of instruction `idx` (see [`CUR_THREAD`]), and to slot
/// `slot + 3` too when `ll` (the LL miss that follows an L1 miss). Integer-only.
#[inline(always)]
pub fn add_miss(arg: u64, ll: bool) {
    let base = jump().cur_miss.load(Ordering::Relaxed) as *mut u64;
    if base.is_null() {
        return;
    }
    let (idx, slot) = (arg >> 8, (arg & 0xff) as usize);
    let off = (idx.wrapping_mul(cur_stride().load(Ordering::Relaxed)) as usize).wrapping_add(slot);
    let th = CUR_THREAD.load(Ordering::Relaxed);
    // SAFETY: `jump().cur_miss`/`CUR_THREAD` point into a boxed cost centre's miss array (which has
    // `n_insns * stride` slots, `idx < n_insns`, `slot (+3) < stride`) or a skipped-cost sink
    // (stride 0, `RUN - R_MISS` slots) and a boxed thread's running cost; the arrays are
    // never freed and only the running guest thread's helpers touch them.
    unsafe {
        *base.add(off) += 1;
        *th.add(slot) += 1;
        if ll {
            *base.add(off + 3) += 1;
            *th.add(slot + 3) += 1;
        }
    }
}

/// What `add_miss(slot_arg(index, slot), false)` does, for generated code that counts an LL
/// hit itself (`AfterMiss::ll_mru`).
pub fn ll_hit_count(index: usize, slot: u64) -> LlHitCount {
    LlHitCount::CostCentre {
        base: &jump().cur_miss as *const AtomicU64 as u64,
        stride: cur_stride() as *const AtomicU64 as u64,
        total: &CUR_THREAD as *const AtomicPtr<u64> as u64,
        index: index as u32,
        slot: slot as u32,
    }
}

/// `acc[..n] += now[..n] - then[..n]` (wrapping; volatile: no vector registers in the fast path).
#[inline(always)]
fn add_diff(acc: &mut [u64], now: &[u64], then: &[u64], n: usize) {
    for ((a, x), y) in acc.iter_mut().zip(now.iter()).zip(then.iter()).take(n) {
        // SAFETY: references to live words.
        unsafe {
            let v = core::ptr::read_volatile(a).wrapping_add(
                core::ptr::read_volatile(x).wrapping_sub(core::ptr::read_volatile(y)),
            );
            core::ptr::write_volatile(a, v);
        }
    }
}

/// The part of running cost `run` a frame keeps (`Entry::enter_cost`).
#[inline(always)]
fn entry_cost(run: &[u64; RUN]) -> [u64; R_SYS] {
    let mut c = [0; R_SYS];
    c.copy_from_slice(&run[..R_SYS]);
    c
}

/// `c.set(v)` as a volatile store, for the fast path: plain stores to neighbouring fields
/// may be merged into one from a vector register, which would clobber the guest's.
fn set_volatile(c: &Cell<u64>, v: u64) {
    // SAFETY: `as_ptr` points at the cell's value, which no reference borrows (a `Cell`).
    unsafe { core::ptr::write_volatile(c.as_ptr(), v) }
}

/// `acc[..n] += add[..n]` (volatile, as [`add_diff`]).
#[inline(always)]
fn add_cost(acc: &mut [u64], add: &[u64], n: usize) {
    for (a, x) in acc.iter_mut().zip(add.iter()).take(n) {
        // SAFETY: references to live words.
        unsafe {
            let v = core::ptr::read_volatile(a).wrapping_add(core::ptr::read_volatile(x));
            core::ptr::write_volatile(a, v);
        }
    }
}

/// What one instruction statically does per execution (per iteration for `rep`), for the
/// events derived from execution counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InsnStat {
    /// Data reads and writes as Callgrind counts them (a read-modify-write is one write).
    pub dr: u64,
    pub dw: u64,
    /// A conditional branch (`Bc`), an indirect jump or call (`Bi`).
    pub cond: bool,
    pub ind: bool,
    /// A locked read-modify-write: VEX's compare-and-swap retry exit is one more `Bc`.
    pub cas_exit: bool,
}

type HashMap<K, V> = dbt_core::fast_hash::FastMap<K, V>;

/// The arcs by (calling cost centre, called cost centre). Open addressing in plain integer
/// code: the integer-only fast path looks arcs up here, and a `HashMap` probes its groups
/// with vector registers.
#[derive(Default)]
struct ArcIndex {
    /// `from << 32 | to`, or [`ArcIndex::FREE`]; a power of two long (or empty).
    keys: Vec<u64>,
    ids: Vec<u32>,
    len: usize,
}

impl ArcIndex {
    /// No key: cost-centre ids stay below `u32::MAX`.
    const FREE: u64 = u64::MAX;

    fn key(from: u32, to: u32) -> u64 {
        (u64::from(from) << 32) | u64::from(to)
    }

    /// The first slot to probe for `key` (the table is not empty).
    #[inline(always)]
    fn home(&self, key: u64) -> usize {
        let bits = self.keys.len().trailing_zeros();
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - bits)) as usize
    }

    #[inline(always)]
    fn get(&self, from: u32, to: u32) -> Option<u32> {
        if self.keys.is_empty() {
            return None;
        }
        let (key, mask) = (Self::key(from, to), self.keys.len() - 1);
        let mut i = self.home(key);
        loop {
            match self.keys.get(i) {
                Some(&k) if k == key => return self.ids.get(i).copied(),
                Some(&k) if k != Self::FREE => i = (i + 1) & mask,
                _ => return None,
            }
        }
    }

    /// Adds an arc that is not in the table yet.
    fn insert(&mut self, from: u32, to: u32, id: u32) {
        if (self.len + 1) * 2 > self.keys.len() {
            let old = core::mem::take(&mut self.keys);
            let old_ids = core::mem::take(&mut self.ids);
            let n = (old.len() * 2).max(64);
            self.keys = vec![Self::FREE; n];
            self.ids = vec![0; n];
            for (k, j) in old.into_iter().zip(old_ids) {
                if k != Self::FREE {
                    self.place(k, j);
                }
            }
        }
        self.place(Self::key(from, to), id);
        self.len += 1;
    }

    fn place(&mut self, key: u64, id: u32) {
        let mask = self.keys.len() - 1;
        let mut i = self.home(key);
        while self.keys[i] != Self::FREE {
            i = (i + 1) & mask;
        }
        self.keys[i] = key;
        self.ids[i] = id;
    }
}

/// How a block ends, as Callgrind's jump kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    Call,
    Return,
    /// Any other transfer (jumps, fall-through, system calls).
    Other,
}

/// How a block's last instruction leaves it, as Callgrind classifies the final exit for
/// `--collect-jumps` (after undoing VEX's inverted conditional branches): only a transfer to
/// somewhere other than the next instruction can be a jump arc.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JumpExit {
    /// Fall-through, call, return, system call, or a branch to the next instruction.
    None,
    /// `jmp` to a fixed target: a `jump=` arc.
    Direct,
    /// `jmp r/m`: a `jump=` arc wherever it lands (even on the next instruction).
    Indirect,
    /// A conditional branch to this target: a `jcnd=` arc when taken.
    Cond(u64),
}

/// Per-function switches, copied into each block of the function.
#[derive(Clone, Copy, Debug, Default)]
pub struct FnFlags {
    pub skip: bool,
    pub pop_on_jump: bool,
    pub toggle_collect: bool,
    pub dump_before: bool,
    pub dump_after: bool,
    pub zero_before: bool,
    pub separate_recs: u32,
    pub separate_callers: u32,
}

/// What the runtime knows of a translated block (leaked: lives for the process).
pub struct BlockInfo {
    pub addr: u64,
    /// Address of the last instruction (the call/jump site).
    pub last_insn: u64,
    /// Address after the block (a call's return address).
    pub end: u64,
    pub n_insns: u64,
    pub exit: Exit,
    /// Starts at a symbol's first byte.
    pub is_entry: bool,
    /// Lies in a function the symbol tables name (a call into it starts at its entry).
    pub named: bool,
    pub obj: u32,
    pub sect: u8,
    pub fn_id: u32,
    pub flags: FnFlags,
    pub insn_addrs: Vec<u64>,
    /// `(instruction index, extra-entries counter)` of each `rep` instruction.
    pub rep: Vec<(usize, *mut u64)>,
    /// Last `(context, recursion level, cost centre)` used for this block (Callgrind's LRU).
    pub last: Cell<(u32, u32, u32)>,
    /// The same entry for the fast path: `fast_key(context, level)` (`u64::MAX`: none) and
    /// the cost centre's execution counter.
    pub fast_key: Cell<u64>,
    pub fast_count: Cell<*mut u64>,
    /// The entry before: its `fast_key` (`u64::MAX`: none) and cost centre, swapped back in
    /// when the block runs in that context again (recursion levels alternate).
    pub alt_key: Cell<u64>,
    pub alt_bbcc: Cell<u32>,
    /// `exit == Other` and no `rep` instruction: the next block may take the fast path.
    pub plain_exit: bool,
    /// Ends plainly in a direct `jmp` to the first byte of a function or into a PLT stub (a
    /// tail call): like a call, it arms its cost centre's plan for the inline tail-call case.
    pub tail_jump: bool,
    /// `--collect-jumps`: the final exit's kind.
    pub jump: JumpExit,
    /// For each `rep` (same order as `rep`): whether it is `repe`/`repne`, whose counter pair's
    /// second word counts iterations.
    pub rep_cond: Vec<bool>,
    /// Per instruction: static data accesses and branch kind (with simulation).
    pub insn_stat: Vec<InsnStat>,
    /// Per instruction: its `rep` kind.
    pub insn_rep: Vec<RepKind>,
    /// Static events per execution, `Ir Dr Dw Bc Bi` (`rep` iterations excluded).
    pub stat: [u64; N_STATIC],
    /// The inline jump path's view of the `fast_*` entry ([`inline_key`] of `fast_key`,
    /// with this block's object and section; never for a function entry); below 2 GiB when
    /// possible (`leak_low`), like [`jump`].
    pub jrec: &'static InlineRec,
    /// The block's own call plan (`InlineJump::own_plan`), made when a translation of it
    /// first has the call case.
    pub own_plan: std::cell::OnceCell<&'static CallPlan>,
    /// Out-of-line inline cases ([`CASE_CALL`], [`CASE_RET`]) the block's translation lacks
    /// but could have, and those it was retranslated for (see [`BlockInfo::entered_from`]).
    pub cases_missing: Cell<u8>,
    pub cases_wanted: Cell<u8>,
}

/// The out-of-line call case (`InlineJump::call_case` outside a function's entry block).
pub const CASE_CALL: u8 = 1;
/// The return case (`InlineJump::ret_case`).
pub const CASE_RET: u8 = 2;

impl BlockInfo {
    /// Ends in a `ret` and has no `rep` instruction: the return fast paths may take the
    /// transition to the next block.
    #[inline(always)]
    pub fn plain_ret(&self) -> bool {
        self.exit == Exit::Return && self.rep.is_empty()
    }

    /// Ends plainly and is no tail call: the next block's inline jump case may take the
    /// transition (the state keeps the expected key). A tail call arms its plan instead,
    /// so the key is kept only where `JumpState::exit` reads `EXIT_OTHER`, which the inline
    /// jump case relies on (it leaves `exit` as it is when its own block ends so too).
    #[inline(always)]
    pub fn arms_jump_key(&self) -> bool {
        self.plain_exit && !self.tail_jump
    }

    /// Ends in a call (and has no `rep` instruction) or is a tail call: its end arms its
    /// cost centre's plans (`JumpState::exit`), so only its cost centres have any.
    #[inline(always)]
    pub fn arms_plans(&self) -> bool {
        (self.exit == Exit::Call && self.rep.is_empty()) || self.tail_jump
    }

    /// The block is being entered from `from` through Rust: a call or return into it that
    /// an inline case its translation lacks would have taken asks for it to be translated
    /// again with that case (blocks get those cases only where calls and returns were seen
    /// to land, to keep the code small). Integer-only.
    #[inline(always)]
    pub fn entered_from(&self, from: &BlockInfo) {
        let missing = self.cases_missing.get();
        if missing == 0 {
            return;
        }
        let landed = if from.exit == Exit::Call || from.tail_jump {
            CASE_CALL
        } else if from.plain_ret() {
            CASE_RET
        } else {
            0
        };
        if missing & landed != 0 && dbt_core::tool::request_retranslation(self.addr) {
            self.cases_missing.set(missing & !landed);
            self.cases_wanted.set(self.cases_wanted.get() | landed);
        }
    }
}

/// The running thread's summary as the inline jump path reads it (Ir-only mode, see
/// [`Runtime::inline_push`]). Its `ir`/`uncounted` deltas and last block belong to the thread
/// whose key it holds ([`Runtime::inline_pull`] folds them back before Rust code looks).
///
/// Reached through [`jump`]: [`init_jump`] moves it below 2 GiB when possible (`leak_low`),
/// where the emitted code addresses it with 32-bit displacements and needs no register for
/// its address.
static JUMP_AT: AtomicPtr<JumpState> =
    AtomicPtr::new((&JUMP_STATIC as *const JumpState).cast_mut());

/// Where [`jump`] points until [`init_jump`].
static JUMP_STATIC: JumpState = JumpState::new();

/// The inline path's state (see `JUMP_AT`).
#[inline(always)]
pub fn jump() -> &'static JumpState {
    // SAFETY: JUMP_AT always points at a JumpState that lives for the process (the static,
    // or the one `init_jump` leaked).
    unsafe { &*JUMP_AT.load(Ordering::Relaxed) }
}

/// Moves the inline path's state below 2 GiB; call once, before anything is translated.
pub fn init_jump() {
    let low: &'static JumpState = dbt_core::tool::leak_low(JumpState::new());
    JUMP_AT.store((low as *const JumpState).cast_mut(), Ordering::Relaxed);
}

/// The inline path's key: a [`fast_key`] with the object and section folded in, or `None`
/// when a part does not fit (context below 2^16 - 1, object below 2^12, section below 16),
/// so that no valid key has its top 16 bits all ones (`u64::MAX`, `u64::MAX - 1` are the
/// "none" values of [`JumpState::expect`] and [`InlineRec::neg_key`]).
#[inline(always)]
fn inline_key(key: u64, obj: u32, sect: u8) -> Option<u64> {
    let cxt = key >> 32;
    if key == u64::MAX || cxt >= 0xffff || obj >= 1 << 12 || sect >= 16 {
        return None;
    }
    Some((cxt << 48) | (u64::from(obj) << 36) | (u64::from(sect) << 32) | (key & 0xffff_ffff))
}

/// The recursion-level index of a cost centre in a context separating `recs` levels, for a
/// function with `active` activations (`None`: unknown, or none, which `setup` must fix up).
#[inline(always)]
fn level_index(recs: u32, active: Option<u32>) -> Option<u32> {
    if recs > 1 {
        active?.min(recs).checked_sub(1)
    } else {
        Some(0)
    }
}

/// The activation counts (before a call) that give the callee's cost centre recursion
/// level index `idx` in a context separating `recs` levels, when the call adds `inc` (0 or
/// 1): `(lo, hi)`, as [`level_index`] computes levels.
#[inline(always)]
fn level_range(recs: u32, idx: u32, inc: u32) -> (u32, u32) {
    if recs <= 1 {
        (0, u32::MAX - inc)
    } else if idx + 1 < recs {
        (idx + 1 - inc, idx + 1 - inc)
    } else {
        (recs - inc, u32::MAX - inc)
    }
}

/// A frame's context field as the inline call path writes it (`u32::MAX`: none).
#[inline(always)]
fn plan_cxt(c: Option<u32>) -> u64 {
    u64::from(Id::of(c).0)
}

/// The fields every `CallPlan` of a call into `bb` sets (the fast call and the stub's jump
/// into the library): the callee and its recursion level (`lo..=hi`, the activation count's
/// increment), the arc (id, counter, inclusive Ir), the caller's context and return key, the
/// callee's cached key and own plan, and the bytes its return pops. Integer-only (tuples of integers, no
/// `Option`s that could be copied with vector moves).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn plan_call(
    p: &CallPlan,
    bb: &BlockInfo,
    ret_addr: u64,
    (to_fn, lo, hi, inc): (u32, u32, u32, u32),
    push_fn: bool,
    (arc, arc_count, arc_incl): (u32, u64, u64),
    (caller_cxt, ret_key): (u64, u64),
    (callee_key, callee_plan, drop): (u64, u64, u64),
) {
    let r = Ordering::Relaxed;
    p.callee.store(bb as *const BlockInfo as u64, r);
    p.ret_addr.store(ret_addr, r);
    p.to_fn.store(u64::from(to_fn), r);
    p.lo.store(u64::from(lo), r);
    p.span.store(u64::from(hi - lo), r);
    p.inc.store(u64::from(inc), r);
    p.push_fn.store(u64::from(push_fn), r);
    p.arc_cxt.store(u64::from(arc) | caller_cxt << 32, r);
    p.arc_count.store(arc_count, r);
    p.arc_incl.store(arc_incl, r);
    p.caller_cxt.store(caller_cxt, r);
    p.to_fn_hi.store(u64::from(to_fn) << 32, r);
    p.ret_key.store(ret_key, r);
    p.callee_count.store(bb.fast_count.get() as u64, r);
    p.callee_plan.store(callee_plan, r);
    let expect = inline_key(callee_key, bb.obj, bb.sect)
        .filter(|_| bb.arms_jump_key())
        .unwrap_or(u64::MAX);
    p.callee_expect.store(expect, r);
    p.drop_hi.store(drop << 32, r);
}

/// The key of a (context, recursion level, thread partition) triple in
/// [`BlockInfo::fast_key`] and [`Fast`]; `u64::MAX` (never cached) when a level or partition
/// does not fit its bits.
#[inline(always)]
fn fast_key(cxt: u32, rec: u32, th: u32) -> u64 {
    if rec >= 1 << 20 || th >= 1 << 12 {
        return u64::MAX;
    }
    (u64::from(cxt) << 32) | (u64::from(th) << 20) | u64::from(rec)
}

/// What [`Runtime::setup_fast`] needs of a thread, kept up to date by the slow path.
pub struct Fast {
    /// The previous block (null: none).
    last_bb: *const BlockInfo,
    /// Its cost centre's execution counter (valid when `last_bb` is not null).
    last_count: *mut u64,
    /// `sp` of the top shadow-stack frame (`u64::MAX`: empty stack).
    top_sp: u64,
    /// `fast_key` of the cost-centre context and level a non-call transfer would use;
    /// `u64::MAX` when the slow path must decide (no context, a skipped function active, a
    /// recursion level to be fixed up).
    key: u64,
}

impl Default for Fast {
    fn default() -> Self {
        Fast {
            last_bb: core::ptr::null(),
            last_count: core::ptr::null_mut(),
            top_sp: u64::MAX,
            key: u64::MAX,
        }
    }
}

/// A context: a function and (with `--separate-callers`) its callers, innermost first.
pub struct Cxt {
    pub fns: Vec<u32>,
    /// Block address through which the function was first entered.
    pub entry: u64,
    pub recs: u32,
}

/// Cost centre of one block in one context and recursion level (`repr(C)`: the inline paths
/// find `ir` after `count`, and the tool finds the cost centre from its counter).
#[repr(C)]
pub struct Bbcc {
    /// Executions.
    pub count: u64,
    /// The block's instructions.
    pub ir: u64,
    /// Its index in [`Runtime::bbccs`].
    pub id: u32,
    pub bb: *const BlockInfo,
    pub cxt: u32,
    pub rec: u32,
    /// Thread partition (`--separate-threads=yes`: the thread slot's index, else 0).
    pub th: u32,
    /// Extra entries of each `rep` instruction (same order as `BlockInfo::rep`).
    pub rep_extra: Vec<u64>,
    /// Iterations of each `repe`/`repne` instruction (same order).
    pub rep_iters: Vec<u64>,
    /// Cost of skipped functions called from here (`--skip-plt`, `--fn-skip`), in the
    /// running-cost layout ([`RUN`]); its miss slots are a stride-0 sink for the helpers.
    pub skipped: [u64; RUN],
    /// Misses and mispredicts per instruction: `n_insns * miss_slots` words (empty without
    /// simulation), in [`Runtime::miss_events`] order.
    pub miss: Box<[u64]>,
    /// With eager charging: finished executions counted by Callgrind minus executions
    /// charged, for executions during which collection was toggled (a
    /// `CALLGRIND_TOGGLE_COLLECT` ending the block); see [`Runtime::finished`].
    pub adj: i64,
    /// The last jump arc from here, the same way (`--collect-jumps`).
    pub last_jump: u64,
    /// The inline call path's plans of the last fast-path calls from here into two callees
    /// (an indirect call site often alternates between two: `plan_for`); the inline code
    /// is given the first's address and tries the second after it. Only where the block
    /// arms them (`BlockInfo::arms_plans`): the two take 368 bytes, and a short run makes
    /// tens of thousands of cost centres, most of them never calling.
    pub plan: Option<Box<[CallPlan; 2]>>,
}

impl Bbcc {
    /// The plan a fast-path call from here into `bb` goes to: the one of the two naming
    /// `bb`, else an unused one, else `bb`'s own plan (`own`: for direct calls and tail
    /// calls), now armed by this cost centre; without it the second plan (the first keeps
    /// the callee planned first).
    fn plan_for(&self, bb: &BlockInfo, own: bool) -> Option<&CallPlan> {
        let plan = self.plan.as_deref()?;
        let r = Ordering::Relaxed;
        let this = bb as *const BlockInfo as u64;
        let free_or_named = |p: &CallPlan| {
            let c = p.callee.load(r);
            c == 0 || c == this
        };
        if free_or_named(&plan[0]) {
            return Some(&plan[0]);
        }
        Some(match bb.own_plan.get() {
            Some(o) if own && !free_or_named(&plan[1]) => {
                o.armed_by.store(self.plans(), r);
                o
            }
            _ => &plan[1],
        })
    }

    /// The address inline code is given for the plans (`CallPlan`); 0 (no plan) where the
    /// block arms none.
    fn plans(&self) -> u64 {
        self.plan
            .as_deref()
            .map_or(0, |p| &p[0] as *const CallPlan as u64)
    }
}

/// A jump arc between two cost centres (`--collect-jumps`), at the source block's last
/// instruction.
pub struct JumpRec {
    pub from: u32,
    pub to: u32,
    /// Conditional (`jcnd=`): its executions are the source cost centre's.
    pub cond: bool,
    /// Times taken since it was last written (counted whether collection is on or not, as
    /// Callgrind does).
    pub followed: u64,
    /// Creation order (Callgrind writes an exit's newest arc first).
    pub seq: u64,
}

/// Which Callgrind block a `rep` exit belongs to. Callgrind's blocks end at each `rep`
/// instruction, and every further iteration runs the block made of the `rep` alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RepKey {
    /// The part of cost centre `bbcc`'s block that ends at its `rep` number `k` (not the first
    /// instruction).
    Part { bbcc: u32, k: u32 },
    /// The one-instruction block of the `rep` at `addr`, in a context, level and partition.
    Own {
        addr: u64,
        cxt: u32,
        rec: u32,
        th: u32,
    },
}

/// The conditional jump from a `rep` back to itself (`jcnd=` at the `rep`).
pub struct RepRec {
    pub cxt: u32,
    pub rec: u32,
    pub th: u32,
    /// The `rep` instruction.
    pub addr: u64,
    /// Start of the Callgrind block it ends (the order Callgrind writes blocks in).
    pub block: u64,
    /// Iterations that went on (jumps taken).
    pub followed: u64,
    /// Times the jump was reached (collected), and executions of the block (collected).
    pub executed: u64,
    pub execs: u64,
    pub seq: u64,
}

/// A jump arc as the dump needs it.
pub struct JumpOut {
    pub cxt: u32,
    pub rec: u32,
    pub from_addr: u64,
    pub to_addr: u64,
    /// `Some(executions)` for `jcnd=`.
    pub executed: Option<u64>,
    pub followed: u64,
    /// Start of the Callgrind block the jump ends, and creation order, for ordering.
    pub block: u64,
    pub seq: u64,
}

/// A call arc between two cost centres.
pub struct Jcc {
    pub from: u32,
    pub to: u32,
    pub count: u64,
    /// Inclusive cost, running-cost layout ([`RUN`]).
    pub incl: [u64; RUN],
}

/// An optional id as the inline call path writes it into a frame: `u32::MAX` is none.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(transparent)]
struct Id(u32);

impl Id {
    const NONE: Id = Id(u32::MAX);

    #[inline(always)]
    fn get(self) -> Option<u32> {
        (self.0 != u32::MAX).then_some(self.0)
    }

    #[inline(always)]
    fn of(v: Option<u32>) -> Id {
        match v {
            Some(x) if x != u32::MAX => Id(x),
            _ => Id::NONE,
        }
    }
}

/// A shadow-stack frame (`repr(C)`: the inline call path writes whole frames and the inline
/// return path reads them, see [`frame_layout`]).
#[repr(C)]
#[derive(Clone, Copy)]
struct Entry {
    jcc: Id,
    cxt: Id,
    nonskipped: Id,
    /// For the inline return path (real calls set up by the fast path or the inline call
    /// path): the callee function and its activation count once popped.
    plan_to_fn: u32,
    plan_active: u32,
    /// The bytes the inline return path pops: this frame, or with a stub call's frame below
    /// (after the activation count: the call case writes both with one store).
    plan_drop: u32,
    sp: u64,
    ret_addr: u64,
    /// The function stack's depth at the push, in bytes (`fn_depth`).
    fn_off: usize,
    /// The key of the context returned into, in inline form (`u64::MAX`: no plan).
    plan_key: u64,
    /// The arc's inclusive Ir (`*mut u64`).
    plan_incl: u64,
    /// The running cost at entry: the words paths that push and pop frames carry (the
    /// system-call words go straight to the arcs, [`Runtime::charge_syscall`]).
    enter_cost: [u64; R_SYS],
}

impl Entry {
    /// What fills the shadow stack's spare capacity (the inline call path writes frames
    /// there, which must be initialised memory once the length covers them).
    const SPARE: Entry = Entry {
        jcc: Id::NONE,
        cxt: Id::NONE,
        nonskipped: Id::NONE,
        plan_to_fn: 0,
        plan_active: 0,
        sp: 0,
        ret_addr: 0,
        fn_off: 0,
        plan_key: u64::MAX,
        plan_incl: 0,
        plan_drop: 0,
        enter_cost: [0; R_SYS],
    };

    /// The function stack's depth at the push.
    fn fn_depth(&self) -> usize {
        self.fn_off / FN_BYTES
    }

    /// The frame below the bottom one (`FrameStack`): no block has its return address or
    /// key, and a tail frame's walk stops at it. Its `sp` is the top sp of an empty stack,
    /// which the inline code reads from the top frame.
    const SENTINEL: Entry = Entry {
        jcc: Id::NONE,
        cxt: Id::NONE,
        nonskipped: Id::NONE,
        plan_to_fn: u32::MAX,
        plan_active: u32::MAX,
        sp: i64::MAX as u64,
        ret_addr: u64::MAX,
        fn_off: usize::MAX,
        plan_key: u64::MAX,
        plan_incl: u64::MAX,
        plan_drop: u32::MAX,
        enter_cost: [u64::MAX; R_SYS],
    };
}

/// A thread's shadow stack: its frames (what it derefs to), after a sentinel frame
/// (`Entry::SENTINEL`) that the inline paths find as the top one when the stack is empty,
/// so that pushing the first frame and popping the last need no case of their own there
/// (a stack's top frame is always at `base + (depth - 1)`, the sentinel at `base - 1`).
struct FrameStack(Vec<Entry>);

impl FrameStack {
    fn with_capacity(frames: usize) -> FrameStack {
        let mut v = Vec::with_capacity(frames + 1);
        v.push(Entry::SENTINEL);
        FrameStack(v)
    }

    /// Frames it holds without growing.
    fn capacity(&self) -> usize {
        self.0.capacity().saturating_sub(1)
    }

    fn push(&mut self, e: Entry) {
        self.0.push(e);
    }

    fn pop(&mut self) -> Option<Entry> {
        if self.0.len() > 1 {
            self.0.pop()
        } else {
            None
        }
    }

    fn truncate(&mut self, depth: usize) {
        self.0.truncate(depth + 1);
    }

    /// # Safety
    /// As `Vec::set_len`: the first `depth` frames must be initialised.
    unsafe fn set_len(&mut self, depth: usize) {
        // SAFETY: the caller's; the sentinel before them always is.
        unsafe { self.0.set_len(depth + 1) };
    }

    fn spare_capacity_mut(&mut self) -> &mut [core::mem::MaybeUninit<Entry>] {
        self.0.spare_capacity_mut()
    }
}

// The fast path reaches these: no indexing that could panic (the integer-only helpers
// must not reach the panic machinery, which uses vector registers).
impl core::ops::Deref for FrameStack {
    type Target = [Entry];
    fn deref(&self) -> &[Entry] {
        self.0.split_first().map_or(&[], |(_, frames)| frames)
    }
}

impl core::ops::DerefMut for FrameStack {
    fn deref_mut(&mut self) -> &mut [Entry] {
        self.0
            .split_first_mut()
            .map_or(&mut [], |(_, frames)| frames)
    }
}

/// One guest thread's call-tracking state.
pub struct ThreadState {
    /// The running thread's key (valid while `live`).
    pub key: u64,
    /// Valgrind's thread id: 1-based slot, the lowest free one when the thread was created
    /// (`--separate-threads` file suffix and `thread:` line). A later thread reuses the slot
    /// of an ended one, and with it this state (costs, call stack, last block), as Callgrind's
    /// per-thread-id state is reused.
    pub tid: u32,
    /// Whether a live thread holds the slot.
    pub live: bool,
    /// Cost-centre partition: `tid - 1` with `--separate-threads=yes`, else 0.
    pub th: u32,
    stack: FrameStack,
    fn_stack: Vec<u32>,
    cxt: Option<u32>,
    /// Running cost ([`RUN`] layout: Ir first).
    pub run: [u64; RUN],
    /// Running cost at the last dump or zeroing.
    pub lastdump: [u64; RUN],
    /// When the system call in progress started (`--collect-systime`: the tool's clock
    /// readings).
    pub sys_start: [u64; 2],
    last_bbcc: Option<u32>,
    fn_active: Vec<u32>,
    nonskipped: Option<u32>,
    pub collect: bool,
    /// With eager charging: the block just entered is not charged yet because a trigger
    /// (`--dump-before/--dump-after/--zero-before`) must act first ([`Runtime::charge_pending`]).
    pub pending: bool,
    fast: Fast,
    /// The shadow stack's capacity when its spare slots were last initialised.
    spare_init: usize,
    /// The states signal handlers put aside, innermost last (Callgrind's exec-state stack).
    sigs: Vec<SigFrame>,
}

/// What a signal handler's run put aside (Callgrind's saved `exec_state`): the interrupted
/// code's state, back when the handler returns (`rt_sigreturn`) or is left by a `longjmp`.
/// The handler runs as a thread of its own would: no context, a cost of its own (kept out of
/// the thread's running cost, so out of `summary:` as in Callgrind), its frames above
/// `bottom` and its functions above a [`FN_SEPARATOR`] on the function stack.
struct SigFrame {
    /// Shadow-stack depth at delivery.
    bottom: usize,
    /// Where the handler's rsp stays (`[low, high)`, from the core): a block entered with
    /// rsp outside it was reached by leaving the handler (`siglongjmp`).
    stack: (u64, u64),
    /// Function-stack depth at delivery (where the separator went).
    fn_sp: usize,
    last_bbcc: Option<u32>,
    cxt: Option<u32>,
    nonskipped: Option<u32>,
    collect: bool,
    run: [u64; RUN],
}

impl SigFrame {
    /// Whether `sp` lies on the handler's stack.
    fn holds(&self, sp: u64) -> bool {
        (self.stack.0..self.stack.1).contains(&sp)
    }
}

/// On the function stack, the start of a signal handler's functions (Callgrind's 0 entry):
/// contexts do not reach below it.
const FN_SEPARATOR: u32 = u32::MAX;

/// The inline return path's plan of a frame (see `Entry::plan_key`).
#[derive(Clone, Copy)]
struct Plan {
    key: u64,
    to_fn: u32,
    active: u32,
    incl: u64,
    drop: u64,
}

/// The plan of a frame the inline return path does not pop.
const NO_PLAN: Plan = Plan {
    key: u64::MAX,
    to_fn: 0,
    active: 0,
    incl: 0,
    drop: 0,
};

/// Bytes per function on a thread's function stack (`Entry::fn_off`).
const FN_BYTES: usize = core::mem::size_of::<u32>();

/// A frame's size, the bytes the inline return path pops for one frame.
const FRAME: u64 = core::mem::size_of::<Entry>() as u64;

/// The top frame the inline paths see while the frame cases are disarmed: no block has its
/// return address or key, and its `sp` is the thread's top sp, which the jump case's unwind
/// checks compare `rsp` with (`inline_push` sets it; while armed they read the real top
/// frame's, or the stack's sentinel's, `FrameStack`).
struct DisarmedFrame(core::cell::UnsafeCell<Entry>);

// SAFETY: written only by the tool with the guest stopped (`inline_push`, under the run
// lock), read by the inline code of the thread whose state is current.
unsafe impl Sync for DisarmedFrame {}

static DISARMED_FRAME: DisarmedFrame = DisarmedFrame(core::cell::UnsafeCell::new(Entry::SENTINEL));

impl DisarmedFrame {
    /// The frame's address, for `JumpState::ret_frame`.
    fn addr(&self) -> u64 {
        self.0.get() as u64
    }

    /// Makes `sp` the top sp the inline code finds in it. Integer-only.
    #[inline(always)]
    fn set_sp(&self, sp: u64) {
        // SAFETY: see `Sync`: no inline code runs while the tool writes it.
        unsafe { core::ptr::write_volatile(core::ptr::addr_of_mut!((*self.0.get()).sp), sp) };
    }
}
const _: () = assert!(core::mem::offset_of!(Bbcc, count) == 0);
const _: () = assert!(core::mem::offset_of!(Bbcc, ir) == 8);

// The inline call case writes the arc and the context, the skipped state and the callee
// function, and the activation count and the drop, as one aligned word each
// (`FrameLayout::arc`).
const _: () = {
    use core::mem::offset_of;
    assert!(
        offset_of!(Entry, jcc) % 8 == 0 && offset_of!(Entry, cxt) == offset_of!(Entry, jcc) + 4
    );
    assert!(
        offset_of!(Entry, nonskipped) % 8 == 0
            && offset_of!(Entry, plan_to_fn) == offset_of!(Entry, nonskipped) + 4
    );
    assert!(
        offset_of!(Entry, plan_active) % 8 == 0
            && offset_of!(Entry, plan_drop) == offset_of!(Entry, plan_active) + 4
    );
};

/// Where the inline return path reads a frame's fields.
pub fn frame_layout() -> dbt_core::tool::FrameLayout {
    use core::mem::offset_of;
    dbt_core::tool::FrameLayout {
        size: core::mem::size_of::<Entry>() as i32,
        ret_addr: offset_of!(Entry, ret_addr) as i32,
        sp: offset_of!(Entry, sp) as i32,
        key: offset_of!(Entry, plan_key) as i32,
        incl: offset_of!(Entry, plan_incl) as i32,
        enter_ir: offset_of!(Entry, enter_cost) as i32,
        arc: offset_of!(Entry, jcc) as i32,
        cxt: offset_of!(Entry, cxt) as i32,
        nonskipped: offset_of!(Entry, nonskipped) as i32,
        to_fn: offset_of!(Entry, plan_to_fn) as i32,
        active: offset_of!(Entry, plan_active) as i32,
        fn_off: offset_of!(Entry, fn_off) as i32,
        drop: offset_of!(Entry, plan_drop) as i32,
    }
}

/// Requests the runtime makes of the tool (function entry/exit triggers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    DumpBefore(u32),
    DumpAfter(u32),
    ZeroBefore,
}

/// Everything the helper updates.
pub struct Runtime {
    pub cxts: Vec<Cxt>,
    cxt_map: HashMap<Vec<u32>, u32>,
    /// Boxed: the fast path keeps pointers to the counters.
    #[allow(clippy::vec_box)]
    pub bbccs: Vec<Box<Bbcc>>,
    bbcc_map: HashMap<(usize, u32, u32, u32), u32>,
    /// Boxed: a frame keeps a pointer to its arc's inclusive cost (the inline return path).
    #[allow(clippy::vec_box)]
    pub jccs: Vec<Box<Jcc>>,
    jcc_index: ArcIndex,
    /// Boxed: the helper keeps a raw pointer to the running thread's state across pushes.
    #[allow(clippy::vec_box)]
    pub threads: Vec<Box<ThreadState>>,
    /// Blocks the tool's own paths ran, and those the inline paths ran without adding to a
    /// counter (`JumpState::uncounted`); [`Runtime::bb_executions`] is the whole count.
    pub bbs_by_tool: u64,
    /// Counter increments the tool's own paths made, and the counts that zeroing took off:
    /// with these, the counters tell how many blocks the inline paths ran.
    counted_by_tool: Cell<u64>,
    counts_zeroed: u64,
    /// `JumpState::ir` as [`Runtime::inline_push`] left it: every inline path adds to it,
    /// so an unchanged word means that none ran.
    ir_pushed: Cell<u64>,
    /// What `JumpState::ir` held beyond the inline paths' Ir when it was pushed: the
    /// thread's running Ir with lazy charging (the word is the running Ir itself, one load
    /// where the call and return cases read it), 0 with eager charging (a delta).
    ir_base: Cell<u64>,
    pub skip_direct_rec: bool,
    pub collect_atstart: bool,
    /// `--cache-sim=yes`: blocks are charged when they start (see the module invariants).
    pub eager: bool,
    /// Words of the running cost in use: 1 (Ir only) or `N_STATIC + miss_slots`.
    pub n_cost: usize,
    /// Run-time slots per instruction (0 without simulation, 6 for the caches, 2 for
    /// branches).
    pub miss_slots: usize,
    /// The names of those slots, in order (`I1mr D1mr D1mw ILmr DLmr DLmw`, then `Bcm Bim`).
    pub miss_events: Vec<&'static str>,
    /// Triggers met since the tool last looked.
    pub triggers: Vec<Trigger>,
    /// `--collect-jumps=yes`: jump arcs are recorded (by the slow path only).
    pub collect_jumps: bool,
    /// `--separate-threads=yes`: each thread slot has its own cost centres.
    pub separate_threads: bool,
    jump_map: HashMap<(u32, u32), u32>,
    pub jumps: Vec<JumpRec>,
    rep_map: HashMap<RepKey, u32>,
    pub reps: Vec<RepRec>,
    seq: u64,
    /// `--dump-every-bb` (0: off) and `bb_executions` after the last such dump.
    pub dump_every: u64,
    pub every_done: u64,
    /// The fast path declines once `bb_executions` reaches this (a periodic dump is due).
    fast_limit: u64,
    /// Blocks carry the inline jump path ([`jump`]; Ir only, no jumps, no periodic dumps).
    pub inline_jumps: bool,
}

impl Default for Runtime {
    fn default() -> Self {
        Runtime {
            cxts: Vec::new(),
            cxt_map: HashMap::default(),
            bbccs: Vec::new(),
            bbcc_map: HashMap::default(),
            jccs: Vec::new(),
            jcc_index: ArcIndex::default(),
            threads: Vec::new(),
            bbs_by_tool: 0,
            counted_by_tool: Cell::new(0),
            counts_zeroed: 0,
            ir_pushed: Cell::new(0),
            ir_base: Cell::new(0),
            skip_direct_rec: false,
            collect_atstart: true,
            eager: false,
            n_cost: 1,
            miss_slots: 0,
            miss_events: Vec::new(),
            triggers: Vec::new(),
            collect_jumps: false,
            separate_threads: false,
            jump_map: HashMap::default(),
            jumps: Vec::new(),
            rep_map: HashMap::default(),
            reps: Vec::new(),
            seq: 0,
            dump_every: 0,
            every_done: 0,
            fast_limit: u64::MAX,
            inline_jumps: false,
        }
    }
}

impl Runtime {
    /// The state of the live thread with `key`; a thread not announced by
    /// [`Runtime::thread_start`] (the main thread) gets a slot on first use.
    pub fn thread(&mut self, key: u64) -> *mut ThreadState {
        if let Some(t) = self.threads.iter_mut().find(|t| t.live && t.key == key) {
            return &mut **t;
        }
        self.thread_start(key)
    }

    /// A new thread takes the lowest free slot (Valgrind's thread ids); a reused slot keeps
    /// its state, as Callgrind's does.
    pub fn thread_start(&mut self, key: u64) -> *mut ThreadState {
        if let Some(t) = self.threads.iter_mut().find(|t| !t.live) {
            t.live = true;
            t.key = key;
            return &mut **t;
        }
        let tid = self.threads.len() as u32 + 1;
        let th = if self.separate_threads { tid - 1 } else { 0 };
        self.threads.push(Box::new(ThreadState {
            key,
            tid,
            live: true,
            th,
            // Spare capacity from the start: the fast path pushes only without reallocating.
            stack: FrameStack::with_capacity(256),
            fn_stack: Vec::with_capacity(256),
            cxt: None,
            run: [0; RUN],
            lastdump: [0; RUN],
            sys_start: [0; 2],
            last_bbcc: None,
            fn_active: Vec::new(),
            nonskipped: None,
            collect: self.collect_atstart,
            pending: false,
            fast: Fast::default(),
            spare_init: 0,
            sigs: Vec::new(),
        }));
        let last = self.threads.len() - 1;
        &mut *self.threads[last]
    }

    /// The thread with `key` ended: its slot is free for the next new thread.
    pub fn thread_exit(&mut self, key: u64) {
        if let Some(t) = self.threads.iter_mut().find(|t| t.live && t.key == key) {
            t.live = false;
        }
    }

    /// Arms the periodic dump: the fast path declines from the block that makes it due.
    pub fn set_dump_every(&mut self, n: u64) {
        self.dump_every = n;
        self.fast_limit = if n == 0 {
            u64::MAX
        } else {
            self.every_done.saturating_add(n).saturating_add(1)
        };
    }

    /// Whether `--dump-every-bb` asks for a dump before the next block (Callgrind checks
    /// `executed blocks - blocks at the last such dump > N`).
    /// (Periodic dumps turn the inline paths off, so the tool's own count is the whole.)
    pub fn dump_due(&self) -> bool {
        self.dump_every > 0 && self.bbs_by_tool.wrapping_sub(self.every_done) > self.dump_every
    }

    /// Callgrind's `bb_executions`: the blocks run so far (as Callgrind splits them at a
    /// `rep`). Every block the inline paths run adds one to a cost centre's counter (or to
    /// `JumpState::uncounted`), so theirs are what the counters hold beyond the tool's own
    /// increments (a sum over every cost centre: for the dump's header, not per block).
    pub fn bb_executions(&self) -> u64 {
        if !self.inline_jumps {
            return self.bbs_by_tool;
        }
        let counts = self.bbccs.iter().fold(0u64, |s, b| s.wrapping_add(b.count));
        self.bbs_by_tool
            .wrapping_add(counts)
            .wrapping_add(self.counts_zeroed)
            .wrapping_sub(self.counted_by_tool.get())
    }

    /// One execution on a cost centre's counter, by the tool's own paths (noted for
    /// [`Runtime::bb_executions`]).
    ///
    /// # Safety
    /// `count` is the `count` field of a cost centre in [`Runtime::bbccs`] (boxed, never
    /// dropped), which nothing else accesses meanwhile (guest threads run one at a time).
    #[inline(always)]
    unsafe fn count_by_tool(&self, count: *mut u64) {
        // SAFETY: per this function's contract.
        unsafe { *count = (*count).wrapping_add(1) };
        let c = &self.counted_by_tool;
        c.set(c.get().wrapping_add(1));
    }

    /// Counts a dump as an executed block (as Callgrind does) and returns the count before.
    pub fn count_dump(&mut self) -> u64 {
        let before = self.bb_executions();
        self.bbs_by_tool = self.bbs_by_tool.wrapping_add(1);
        before
    }

    /// Records that a periodic dump was just written.
    pub fn every_dumped(&mut self) {
        self.every_done = self.bbs_by_tool;
        self.set_dump_every(self.dump_every);
    }

    fn get_cxt(&mut self, fns: &[u32], entry: u64, recs: u32) -> u32 {
        if let Some(&c) = self.cxt_map.get(fns) {
            return c;
        }
        let id = self.cxts.len() as u32;
        self.cxts.push(Cxt {
            fns: fns.to_vec(),
            entry,
            recs,
        });
        self.cxt_map.insert(fns.to_vec(), id);
        id
    }

    fn get_bbcc(&mut self, bb: &BlockInfo, cxt: u32, rec: u32, th: u32) -> u32 {
        let (lc, lr, lb) = bb.last.get();
        if lc == cxt && lr == rec && lb != u32::MAX && self.bbccs[lb as usize].th == th {
            return lb;
        }
        let key = fast_key(cxt, rec, th);
        if self.cached_as(bb, key) {
            return bb.last.get().2;
        }
        let b = self.get_bbcc_slow(bb, cxt, rec, th);
        self.cache_bbcc(bb, b);
        b
    }

    /// Whether `bb`'s cached cost centre has fast key `key`, after swapping the block's
    /// older entry in when it has. Integer-only (the fast path calls it).
    #[inline(always)]
    fn cached_as(&self, bb: &BlockInfo, key: u64) -> bool {
        if key == u64::MAX {
            return false;
        }
        if bb.fast_key.get() == key {
            return true;
        }
        if bb.alt_key.get() != key {
            return false;
        }
        self.cache_bbcc(bb, bb.alt_bbcc.get());
        true
    }

    /// Makes cost centre `b` (of block `bb`) the block's cached one, the one it replaces
    /// the older entry: `last`, `fast_key`, `fast_count` and the inline path's record.
    /// Integer-only (the fast path calls it through [`Runtime::cached_as`]).
    #[inline(always)]
    fn cache_bbcc(&self, bb: &BlockInfo, b: u32) {
        let Some(c) = self.bbccs.get(b as usize) else {
            return;
        };
        let (old_key, old_b) = (bb.fast_key.get(), bb.last.get().2);
        bb.alt_key.set(old_key);
        bb.alt_bbcc.set(old_b);
        let key = fast_key(c.cxt, c.rec, c.th);
        // SAFETY: the cell's own storage; three integer writes (no vector code).
        unsafe {
            let last = bb.last.as_ptr();
            core::ptr::write_volatile(core::ptr::addr_of_mut!((*last).0), c.cxt);
            core::ptr::write_volatile(core::ptr::addr_of_mut!((*last).1), c.rec);
            core::ptr::write_volatile(core::ptr::addr_of_mut!((*last).2), b);
        }
        bb.fast_key.set(key);
        let count = core::ptr::addr_of!(c.count) as *mut u64;
        bb.fast_count.set(count);
        let miss = Self::miss_ptr(c) as u64;
        let ik = inline_key(key, bb.obj, bb.sect)
            .filter(|_| !bb.is_entry)
            .unwrap_or(u64::MAX - 1);
        let r = Ordering::Relaxed;
        let j = bb.jrec;
        // The entry replaced becomes the second one, as `alt_key`/`alt_bbcc` here.
        j.alt_count.store(j.count.load(r), r);
        j.alt_miss.store(j.miss.load(r), r);
        j.alt_plan.store(j.plan.load(r), r);
        j.alt_neg_key.store(j.neg_key.load(r), r);
        j.count.store(count as u64, r);
        j.miss.store(miss, r);
        j.plan.store(c.plans(), r);
        j.neg_key.store(ik.wrapping_neg(), r);
    }

    fn get_bbcc_slow(&mut self, bb: &BlockInfo, cxt: u32, rec: u32, th: u32) -> u32 {
        let key = (bb as *const BlockInfo as usize, cxt, rec, th);
        if let Some(&b) = self.bbcc_map.get(&key) {
            return b;
        }
        let id = self.bbccs.len() as u32;
        self.bbccs.push(Box::new(Bbcc {
            ir: bb.stat[R_IR],
            id,
            bb,
            cxt,
            rec,
            th,
            count: 0,
            rep_extra: vec![0; bb.rep.len()],
            rep_iters: vec![0; bb.rep.len()],
            skipped: [0; RUN],
            adj: 0,
            miss: vec![0; bb.n_insns as usize * self.miss_slots].into_boxed_slice(),
            last_jump: u64::MAX,
            plan: bb
                .arms_plans()
                .then(|| Box::new([CallPlan::new(), CallPlan::new()])),
        }));
        self.bbcc_map.insert(key, id);
        id
    }

    fn get_jcc(&mut self, from: u32, to: u32) -> u32 {
        if let Some(j) = self.jcc_index.get(from, to) {
            return j;
        }
        let id = self.jccs.len() as u32;
        self.jccs.push(Box::new(Jcc {
            from,
            to,
            count: 0,
            incl: [0; RUN],
        }));
        self.jcc_index.insert(from, to, id);
        id
    }

    /// A new runtime: Ir only, until [`Runtime::set_simulation`].
    pub fn new(skip_direct_rec: bool, collect_atstart: bool) -> Runtime {
        Runtime {
            skip_direct_rec,
            collect_atstart,
            n_cost: 1,
            ..Runtime::default()
        }
    }

    /// Switches on cache simulation (`--cache-sim=yes`: eager charging, six miss slots)
    /// and/or branch simulation (two mispredict slots). Call before any block runs.
    pub fn set_simulation(&mut self, cache: bool, branch: bool) {
        let mut ev = Vec::new();
        if cache {
            ev.extend(["I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw"]);
        }
        if branch {
            ev.extend(["Bcm", "Bim"]);
        }
        self.eager = cache;
        self.miss_slots = ev.len();
        self.n_cost = if ev.is_empty() {
            1
        } else {
            N_STATIC + ev.len()
        };
        self.miss_events = ev;
    }

    /// Charges a system call of thread `t` (`--collect-systime`: [`N_SYS`] words from
    /// [`R_SYS`] on) as Callgrind's `post_syscall` does: to the running cost and the current
    /// cost centre's skipped-cost line (whether collecting or not), and, as its frames'
    /// inclusive costs would take it from the running cost on return, to the arc of every
    /// frame on the call stack.
    pub fn charge_syscall(&mut self, t: &mut ThreadState, cost: [u64; N_SYS]) {
        let Some(b) = t.last_bbcc else { return };
        add_cost(&mut t.run[R_SYS..], &cost, N_SYS);
        if let Some(c) = self.bbccs.get_mut(b as usize) {
            add_cost(&mut c.skipped[R_SYS..], &cost, N_SYS);
        }
        for e in t.stack.iter() {
            if let Some(j) = e.jcc.get().and_then(|j| self.jccs.get_mut(j as usize)) {
                add_cost(&mut j.incl[R_SYS..], &cost, N_SYS);
            }
        }
    }

    /// The miss array of a cost centre (null when there is none), where the simulator
    /// helpers count (through `JumpState::cur_miss`).
    fn miss_ptr(c: &Bbcc) -> *mut u64 {
        if c.miss.is_empty() {
            core::ptr::null_mut()
        } else {
            c.miss.as_ptr().cast_mut()
        }
    }

    /// Points the simulator helpers at the thread's current cost centre (or the skipped
    /// sink, or nowhere when not collecting). See [`cur_stride`].
    fn set_cur(&mut self, t: &mut ThreadState) {
        if self.miss_slots == 0 {
            return;
        }
        CUR_THREAD.store(t.run[R_MISS..].as_mut_ptr(), Ordering::Relaxed);
        let (base, stride) = match (t.collect, t.nonskipped, t.last_bbcc) {
            (false, _, _) => (core::ptr::null_mut(), 0),
            (true, Some(ns), _) => (self.bbccs[ns as usize].skipped[R_MISS..].as_mut_ptr(), 0),
            (true, None, Some(b)) => (Self::miss_ptr(&self.bbccs[b as usize]), self.miss_slots),
            (true, None, None) => (core::ptr::null_mut(), 0),
        };
        set_cur_miss(base);
        cur_stride().store(stride as u64, Ordering::Relaxed);
    }

    /// Charges one execution of `bb` to the running cost and to `count` (fast path: no
    /// `rep` extras, no skipped state).
    #[inline(always)]
    fn charge_fast(&self, t: &mut ThreadState, bb: &BlockInfo, count: *mut u64) {
        add_cost(&mut t.run, &bb.stat, self.n_cost.min(N_STATIC));
        // SAFETY: callers pass a cost centre's counter (`last_count`, `fast_count`).
        unsafe { self.count_by_tool(count) };
    }

    fn bb_of(&self, bbcc: u32) -> &'static BlockInfo {
        // SAFETY: BlockInfo values are leaked at instrumentation and never freed.
        unsafe { &*self.bbccs[bbcc as usize].bb }
    }

    fn cxt_fn(&self, bbcc: u32) -> u32 {
        self.cxts[self.bbccs[bbcc as usize].cxt as usize].fns[0]
    }

    /// Callgrind's `push_cxt`: make `bb`'s function the current one.
    fn push_cxt(&mut self, t: &mut ThreadState, bb: &BlockInfo) {
        if t.fn_stack.last() == Some(&bb.fn_id) && t.cxt.is_some() {
            return;
        }
        t.fn_stack.push(bb.fn_id);
        let n = bb.flags.separate_callers as usize + 1;
        let fns: Vec<u32> = t
            .fn_stack
            .iter()
            .rev()
            .take_while(|&&f| f != FN_SEPARATOR)
            .take(n)
            .copied()
            .collect();
        t.cxt = Some(self.get_cxt(&fns, bb.addr, bb.flags.separate_recs.max(1)));
    }

    fn active(t: &mut ThreadState, f: u32) -> &mut u32 {
        let i = f as usize;
        if t.fn_active.len() <= i {
            t.fn_active.resize(i + 1, 0);
        }
        &mut t.fn_active[i]
    }

    fn pop(&mut self, t: &mut ThreadState) {
        if t.sigs.last().is_some_and(|s| t.stack.len() <= s.bottom) {
            // A frame of the interrupted code: the handler was left (`siglongjmp`).
            self.post_signal(t);
        }
        let Some(e) = t.stack.pop() else { return };
        t.nonskipped = e.nonskipped.get();
        if let Some(j) = e.jcc.get() {
            let (from, to) = (self.jccs[j as usize].from, self.jccs[j as usize].to);
            let to_fn = self.cxt_fn(to);
            let direct = self.cxt_fn(from) == to_fn;
            let a = Self::active(t, to_fn);
            if !(self.skip_direct_rec && direct) {
                *a = a.saturating_sub(1);
            }
            let depth = *a;
            let n = self.n_cost;
            add_diff(&mut self.jccs[j as usize].incl, &t.run, &e.enter_cost, n);
            t.cxt = e.cxt.get();
            t.fn_stack.truncate(e.fn_depth());
            if depth == 0 {
                let flags = self.bb_of(to).flags;
                if flags.dump_after {
                    self.triggers.push(Trigger::DumpAfter(to_fn));
                }
                if flags.toggle_collect {
                    t.collect = !t.collect;
                }
            }
        }
    }

    fn unwind(&mut self, t: &mut ThreadState, sp: u64, mut minpops: i32) -> u32 {
        let mut n = 0;
        while let Some(top) = t.stack.last() {
            if top.sp < sp || (top.sp == sp && minpops > 0) {
                minpops -= 1;
                n += 1;
                self.pop(t);
            } else {
                break;
            }
        }
        n
    }

    fn push_call(
        &mut self,
        t: &mut ThreadState,
        from: u32,
        to: u32,
        sp: u64,
        skip: bool,
        saved: (Option<u32>, usize),
    ) {
        let jcc = if skip {
            None
        } else {
            let j = self.get_jcc(from, to);
            let to_fn = self.cxt_fn(to);
            let direct = self.cxt_fn(from) == to_fn;
            let a = Self::active(t, to_fn);
            if !(self.skip_direct_rec && direct) {
                *a += 1;
            }
            let depth = *a;
            self.jccs[j as usize].count += 1;
            if depth == 1 {
                let flags = self.bb_of(to).flags;
                if flags.dump_before {
                    self.triggers.push(Trigger::DumpBefore(to_fn));
                } else if flags.zero_before {
                    self.triggers.push(Trigger::ZeroBefore);
                }
                if flags.toggle_collect {
                    t.collect = !t.collect;
                }
            }
            Some(j)
        };
        let fb = self.bb_of(from);
        let ret_addr = if fb.exit == Exit::Call { fb.end } else { 0 };
        t.stack.push(Entry {
            jcc: Id::of(jcc),
            sp,
            ret_addr,
            enter_cost: entry_cost(&t.run),
            cxt: Id::of(saved.0),
            fn_off: saved.1 * FN_BYTES,
            nonskipped: Id::of(t.nonskipped),
            plan_key: u64::MAX,
            plan_to_fn: 0,
            plan_active: 0,
            plan_incl: 0,
            plan_drop: 0,
        });
        if !skip {
            t.nonskipped = None;
        } else if t.nonskipped.is_none() {
            t.nonskipped = Some(from);
        }
    }

    /// The common case of [`Runtime::setup`] with integer arithmetic only (called through
    /// the lean trampoline: no allocation, no TLS, no panic); returns false, having changed
    /// nothing, when `setup` must run instead. See the module's invariants.
    /// `JUMPS` (`--collect-jumps`): a jump taken between the two blocks is counted on the
    /// source cost centre's last jump arc, if it is that arc (else `setup` runs).
    #[inline(always)]
    pub fn setup_fast<const JUMPS: bool>(
        &mut self,
        t: &mut ThreadState,
        bb: &BlockInfo,
        sp: u64,
    ) -> bool {
        let f = &mut t.fast;
        if f.last_bb.is_null() || self.bbs_by_tool >= self.fast_limit {
            return false;
        }
        // SAFETY: `last_bb` is a leaked BlockInfo (never freed), set by `refresh_fast`.
        let lbb = unsafe { &*f.last_bb };
        bb.entered_from(lbb);
        if lbb.exit == Exit::Call {
            if bb.flags.skip {
                return self.setup_fast_call_skipped(t, lbb, bb, sp);
            }
            return self.setup_fast_call(t, lbb, bb, sp);
        }
        // A return checks the context it returns into itself (the thread's key is the
        // callee's).
        if lbb.plain_ret() {
            let two =
                t.stack.len() >= 2 && t.stack.get(t.stack.len() - 2).is_some_and(|e| e.sp < sp);
            if two {
                return self.setup_fast_ret_n(t, lbb, bb, sp);
            }
            return self.setup_fast_ret(t, lbb, bb, sp);
        }
        if lbb.plain_exit && (bb.is_entry || lbb.obj != bb.obj || lbb.sect != bb.sect) {
            if bb.flags.skip {
                return self.setup_fast_jump_skipped(t, lbb, bb, sp);
            }
            return self.setup_fast_jump_call(t, lbb, bb, sp);
        }
        if !self.cached_as(bb, f.key) {
            return false;
        }
        if !lbb.plain_exit
            || bb.is_entry
            || lbb.sect != bb.sect
            || lbb.obj != bb.obj
            || f.top_sp < sp
        {
            return false;
        }
        if JUMPS {
            let taken = match &lbb.jump {
                JumpExit::None => false,
                JumpExit::Cond(target) => *target == bb.addr,
                JumpExit::Direct | JumpExit::Indirect => true,
            };
            if taken {
                let (Some(from), to) = (t.last_bbcc, bb.last.get().2) else {
                    return false;
                };
                let Some(lj) = self.bbccs.get(from as usize).map(|b| b.last_jump) else {
                    return false;
                };
                if (lj >> 32) as u32 != to {
                    return false;
                }
                match self.jumps.get_mut(lj as u32 as usize) {
                    Some(j) if j.from == from && j.to == to => {
                        j.followed = j.followed.wrapping_add(1);
                    }
                    _ => return false,
                }
            }
        }
        self.bbs_by_tool = self.bbs_by_tool.wrapping_add(1);
        self.fast_charge_prev(t, lbb);
        t.fast.last_bb = bb;
        t.fast.last_count = bb.fast_count.get();
        t.last_bbcc = Some(bb.last.get().2);
        self.fast_enter(t, bb);
        true
    }

    /// Fast path, before the transition: without cache simulation the previous block is
    /// charged now (see the module invariants).
    #[inline(always)]
    fn fast_charge_prev(&self, t: &mut ThreadState, lbb: &BlockInfo) {
        if !self.eager && t.collect {
            let c = t.fast.last_count;
            self.charge_fast(t, lbb, c);
        }
    }

    /// Fast path, after the transition: with cache simulation the new block is charged now;
    /// the simulator helpers are pointed at its cost centre.
    #[inline(always)]
    fn fast_enter(&self, t: &mut ThreadState, bb: &BlockInfo) {
        if self.eager && t.collect {
            self.charge_fast(t, bb, bb.fast_count.get());
        }
        if self.miss_slots != 0 {
            let base = if t.collect {
                bb.jrec.miss.load(Ordering::Relaxed) as *mut u64
            } else {
                core::ptr::null_mut()
            };
            set_cur_miss(base);
            cur_stride().store(self.miss_slots as u64, Ordering::Relaxed);
        }
    }

    /// The fast path for a block reached by a real call (the previous block ended in a
    /// `call`): the callee's context must be the caller's (direct recursion) or, with
    /// `--separate-callers=0`, the one-function context cached in the block's cost-centre
    /// entry; the cost centre must be that entry, the arc must exist (`ArcIndex`; a new arc
    /// is `setup`'s), and both shadow stacks must have spare capacity. Skipped functions,
    /// trigger and toggle functions, `rep` extras, a skipped-function state and frames to
    /// unwind are left to `setup`. Everything is checked before anything changes.
    #[inline(always)]
    fn setup_fast_call(
        &mut self,
        t: &mut ThreadState,
        lbb: &BlockInfo,
        bb: &BlockInfo,
        sp: u64,
    ) -> bool {
        let fl = &bb.flags;
        if fl.skip || fl.dump_before || fl.zero_before || fl.toggle_collect {
            return false;
        }
        if !lbb.rep.is_empty() || t.nonskipped.is_some() || t.fast.top_sp < sp {
            return false;
        }
        let (Some(old_cxt), Some(from)) = (t.cxt, t.last_bbcc) else {
            return false;
        };
        let bkey = bb.fast_key.get();
        if bkey == u64::MAX {
            return false;
        }
        // As `push_cxt`: the context stays on direct recursion, else it is `[fn]`.
        let push_fn = t.fn_stack.last() != Some(&bb.fn_id);
        let new_cxt = if push_fn {
            if fl.separate_callers != 0 {
                return false;
            }
            let c = (bkey >> 32) as u32;
            match self.cxts.get(c as usize) {
                // `cxt_map` is one-to-one, so this is what `get_cxt(&[fn])` returns.
                Some(x) if x.fns.len() == 1 && x.fns.first() == Some(&bb.fn_id) => c,
                _ => return false,
            }
        } else {
            old_cxt
        };
        let Some(cx) = self.cxts.get(new_cxt as usize) else {
            return false;
        };
        let (Some(&to_fn), recs) = (cx.fns.first(), cx.recs) else {
            return false;
        };
        let Some(fbcc) = self.bbccs.get(from as usize) else {
            return false;
        };
        let Some(&from_fn) = self.cxts.get(fbcc.cxt as usize).and_then(|c| c.fns.first()) else {
            return false;
        };
        let Some((a_old, a_new, idx)) = self.call_level(t, from_fn, to_fn, recs) else {
            return false;
        };
        if !self.cached_as(bb, fast_key(new_cxt, idx, t.th)) {
            return false;
        }
        let bkey = bb.fast_key.get();
        // `fast_key` and `last` are set together: this is `get_bbcc(bb, new_cxt, idx)`.
        let to = bb.last.get().2;
        let Some(j) = self.jcc_index.get(from, to) else {
            return false;
        };
        let (n, fsp) = (t.stack.len(), t.fn_stack.len());
        if n >= t.stack.capacity() || (push_fn && fsp >= t.fn_stack.capacity()) {
            return false;
        }
        // Commit: charge the previous block, push the context and the frame (as `push_cxt`
        // and `push_call`), enter `bb`.
        self.bbs_by_tool = self.bbs_by_tool.wrapping_add(1);
        self.fast_charge_prev(t, lbb);
        if let Some(a) = t.fn_active.get_mut(to_fn as usize) {
            *a = a_new;
        }
        if let Some(jc) = self.jccs.get_mut(j as usize) {
            jc.count = jc.count.wrapping_add(1);
        }
        // The return that pops this frame restores the caller's state as it is now: its
        // key is the thread's present one (the inline return path checks the block
        // returned into against it).
        // Popped alone by a plain `ret` only if the frame below lies above sp + 8.
        let below = t.stack.last().map_or(u64::MAX, |e| e.sp);
        let single = sp.checked_add(8).is_some_and(|after| below >= after);
        let plan_key = if fl.dump_after || !single || below > i64::MAX as u64 && below != u64::MAX {
            u64::MAX
        } else {
            inline_key(t.fast.key, lbb.obj, lbb.sect).unwrap_or(u64::MAX)
        };
        let incl = match self.jccs.get_mut(j as usize) {
            Some(jc) => core::ptr::addr_of_mut!(jc.incl[R_IR]) as u64,
            None => return false,
        };
        let plan = Plan {
            key: plan_key,
            to_fn,
            active: a_old,
            incl,
            drop: FRAME,
        };
        let ret_key = if fl.dump_after {
            u64::MAX
        } else {
            inline_key(t.fast.key, lbb.obj, lbb.sect).unwrap_or(u64::MAX)
        };
        self.push_frame(t, Some(j), sp, lbb.end, Some(old_cxt), None, plan);
        if push_fn {
            Self::push_fn(t, bb.fn_id);
        }
        t.cxt = Some(new_cxt);
        self.enter_fast(t, bb, sp);
        // The next call from `from` into `bb` at this recursion level can be made inline
        // (`CallPlan`), where the function stack's top is the caller's function, as it is
        // whenever no skipped function is active.
        if self.inline_jumps && push_fn == (from_fn != to_fn) {
            let inc = a_new.wrapping_sub(a_old);
            let (lo, hi) = level_range(recs, idx, inc);
            let (callee_plan, callee_miss) = match self.bbccs.get(to as usize) {
                Some(c) => (c.plans(), Self::miss_ptr(c) as u64),
                None => return true,
            };
            let arc_count = match self.jccs.get(j as usize) {
                Some(jc) => &jc.count as *const u64 as u64,
                None => return true,
            };
            let Some(p) = self
                .bbccs
                .get(from as usize)
                .and_then(|c| c.plan_for(bb, true))
            else {
                return true;
            };
            let r = Ordering::Relaxed;
            plan_call(
                p,
                bb,
                lbb.end,
                (to_fn, lo, hi, inc),
                push_fn,
                (j, arc_count, incl),
                (u64::from(old_cxt), ret_key),
                (bkey, callee_plan, FRAME),
            );
            p.callee_miss.store(callee_miss, r);
            p.stub.store(0, r);
        }
        true
    }

    /// Pushes a shadow-stack frame as `push_call` does, with the running cost as its entry
    /// cost (word by word: no vector registers in the fast path). The caller checked that
    /// the stack has spare capacity.
    // Separate arguments, not a struct: a struct of `Option`s may be copied with vector
    // moves, which this integer-only path must not make.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn push_frame(
        &self,
        t: &mut ThreadState,
        jcc: Option<u32>,
        sp: u64,
        ret_addr: u64,
        cxt: Option<u32>,
        nonskipped: Option<u32>,
        plan: Plan,
    ) {
        let n = t.stack.len();
        if n >= t.stack.capacity() {
            return;
        }
        let fn_sp = t.fn_stack.len();
        // SAFETY: `n < capacity` (checked above), so the slot is allocated; every field is
        // written before the length covers it.
        unsafe {
            let e = t.stack.as_mut_ptr().add(n);
            core::ptr::addr_of_mut!((*e).jcc).write(Id::of(jcc));
            core::ptr::addr_of_mut!((*e).sp).write(sp);
            core::ptr::addr_of_mut!((*e).ret_addr).write(ret_addr);
            core::ptr::addr_of_mut!((*e).cxt).write(Id::of(cxt));
            core::ptr::addr_of_mut!((*e).fn_off).write(fn_sp * FN_BYTES);
            core::ptr::addr_of_mut!((*e).nonskipped).write(Id::of(nonskipped));
            // Volatile: adjacent zero stores would otherwise be merged into a vector store.
            // A drop too large for its field (a tail chain of millions of frames) leaves the
            // frame to the Rust path.
            let (key, drop) = match u32::try_from(plan.drop) {
                Ok(d) => (plan.key, d),
                Err(_) => (u64::MAX, 0),
            };
            core::ptr::write_volatile(core::ptr::addr_of_mut!((*e).plan_key), key);
            core::ptr::write_volatile(core::ptr::addr_of_mut!((*e).plan_to_fn), plan.to_fn);
            core::ptr::write_volatile(core::ptr::addr_of_mut!((*e).plan_active), plan.active);
            core::ptr::write_volatile(core::ptr::addr_of_mut!((*e).plan_incl), plan.incl);
            core::ptr::write_volatile(core::ptr::addr_of_mut!((*e).plan_drop), drop);
            let ec = core::ptr::addr_of_mut!((*e).enter_cost).cast::<u64>();
            for k in 0..R_SYS {
                let v = if k < self.n_cost { t.run[k] } else { 0 };
                core::ptr::write_volatile(ec.add(k), v);
            }
            t.stack.set_len(n + 1);
        }
    }

    /// For a call from `from_fn` into `to_fn` (whose context separates `recs` recursion
    /// levels): the callee's activation count before and after it and the level index of its
    /// cost centre, as `push_call` and `setup` make them; `None` when the slow path must
    /// decide.
    #[inline(always)]
    fn call_level(
        &self,
        t: &ThreadState,
        from_fn: u32,
        to_fn: u32,
        recs: u32,
    ) -> Option<(u32, u32, u32)> {
        let a_old = *t.fn_active.get(to_fn as usize)?;
        let a_new = if self.skip_direct_rec && from_fn == to_fn {
            a_old
        } else {
            a_old.checked_add(1)?
        };
        let idx = level_index(recs, Some(a_new))?;
        Some((a_old, a_new, idx))
    }

    /// Pushes `f` on the function stack (as `push_cxt`); the caller checked its capacity.
    #[inline(always)]
    fn push_fn(t: &mut ThreadState, f: u32) {
        let fsp = t.fn_stack.len();
        if fsp >= t.fn_stack.capacity() {
            return;
        }
        // SAFETY: `fsp < capacity`, so the slot is allocated.
        unsafe {
            t.fn_stack.as_mut_ptr().add(fsp).write(f);
            t.fn_stack.set_len(fsp + 1);
        }
    }

    /// The end of a fast path: `bb` (with its cached cost centre) is the thread's last block,
    /// the summary is recomputed with `top_sp` as the top frame's `sp`, and `bb` is entered.
    #[inline(always)]
    fn enter_fast(&self, t: &mut ThreadState, bb: &BlockInfo, top_sp: u64) {
        t.last_bbcc = Some(bb.last.get().2);
        t.fast = Fast {
            last_bb: bb,
            last_count: bb.fast_count.get(),
            top_sp,
            key: self.summary_key(t),
        };
        self.fast_enter(t, bb);
    }

    /// What popping frames down to `depth` leaves when the last one popped had an arc (as
    /// `pop`): its context and function-stack depth, no skipped function active.
    #[inline(always)]
    fn pop_to(t: &mut ThreadState, depth: usize, cxt: Option<u32>, fn_sp: usize) {
        t.stack.truncate(depth);
        t.nonskipped = None;
        t.cxt = cxt;
        t.fn_stack.truncate(fn_sp);
    }

    /// Reads an `Option<u32>` as integers: a plain copy of the 8-byte value may be made with
    /// a vector register, which the integer-only fast path must not touch.
    #[inline(always)]
    fn opt(o: &Option<u32>) -> Option<u32> {
        // SAFETY: a valid, aligned `Option<u32>` behind a reference.
        unsafe { core::ptr::read_volatile(o) }
    }

    /// The first function of context `c` (panic-free).
    #[inline(always)]
    fn fn_of_cxt(&self, c: u32) -> Option<u32> {
        self.cxts
            .get(c as usize)
            .and_then(|x| x.fns.first().copied())
    }

    /// The fast path for a call into a skipped function (`--skip-plt`'s PLT stubs,
    /// `--fn-skip`): as `setup`, the stub's block gets a cost centre in the
    /// caller's context, a frame without arc is pushed and the caller's cost centre becomes
    /// the one skipped costs go to. Everything is checked before anything changes.
    #[inline(always)]
    fn setup_fast_call_skipped(
        &mut self,
        t: &mut ThreadState,
        lbb: &BlockInfo,
        bb: &BlockInfo,
        sp: u64,
    ) -> bool {
        if !lbb.rep.is_empty() {
            return false;
        }
        let top_sp = t.stack.last().map_or(u64::MAX, |e| e.sp);
        if t.nonskipped.is_some() || top_sp < sp {
            return false;
        }
        let Some((cxt, from)) = self.skipped_entry(t, bb) else {
            return false;
        };
        if t.stack.len() >= t.stack.capacity() {
            return false;
        }
        // Commit: charge the previous block, push the frame (as `push_call` with `skip`),
        // enter `bb`.
        self.bbs_by_tool = self.bbs_by_tool.wrapping_add(1);
        self.fast_charge_prev(t, lbb);
        self.push_frame(t, None, sp, lbb.end, Some(cxt), None, NO_PLAN);
        t.nonskipped = Some(from);
        self.enter_skipped(t, bb, from);
        true
    }

    /// The fast path for a jump that Callgrind turns into a call into a skipped function (a
    /// tail call through a PLT stub), with no skipped function active and no frame to
    /// unwind: as `setup`, the stub's block gets a cost centre in the jumping block's
    /// context, a frame without arc and without return address is pushed at the top frame's
    /// stack pointer, and the jumping block's cost centre becomes the one skipped costs go
    /// to. Everything is checked before anything changes.
    #[inline(always)]
    fn setup_fast_jump_skipped(
        &mut self,
        t: &mut ThreadState,
        lbb: &BlockInfo,
        bb: &BlockInfo,
        sp: u64,
    ) -> bool {
        if lbb.flags.pop_on_jump || t.nonskipped.is_some() {
            return false;
        }
        let frame_sp = t.stack.last().map_or(sp, |e| e.sp);
        if frame_sp < sp || t.stack.len() >= t.stack.capacity() {
            return false;
        }
        let Some((cxt, from)) = self.skipped_entry(t, bb) else {
            return false;
        };
        // Commit: charge the previous block, push the frame (as `push_call` with `skip`),
        // enter `bb`.
        self.bbs_by_tool = self.bbs_by_tool.wrapping_add(1);
        self.fast_charge_prev(t, lbb);
        self.push_frame(t, None, frame_sp, 0, Some(cxt), None, NO_PLAN);
        t.nonskipped = Some(from);
        self.enter_skipped(t, bb, from);
        true
    }

    /// Entering skipped block `bb` from the running context (as `setup`: no context change,
    /// the level of the running function): that context and the cost centre skipped costs go
    /// to (the previous block's), when `bb`'s cached cost centre is the one for them.
    #[inline(always)]
    fn skipped_entry(&self, t: &ThreadState, bb: &BlockInfo) -> Option<(u32, u32)> {
        let (cxt, from) = (Self::opt(&t.cxt)?, Self::opt(&t.last_bbcc)?);
        let cx = self.cxts.get(cxt as usize)?;
        let &top_fn = cx.fns.first()?;
        let idx = if cx.recs > 1 {
            match t.fn_active.get(top_fn as usize) {
                Some(&a) if a > 0 => a.min(cx.recs) - 1,
                _ => return None,
            }
        } else {
            0
        };
        self.cached_as(bb, fast_key(cxt, idx, t.th))
            .then_some((cxt, from))
    }

    /// The end of a fast path into a skipped function whose costs go to cost centre `from`:
    /// `bb` (with its cached cost centre) is the last block, no key (the full path decides
    /// the next transition unless it is a fast one), and with cache simulation the stub is
    /// charged to the sink now, where its misses go too (as `charge_entered` and `set_cur`
    /// in a skipped state).
    #[inline(always)]
    fn enter_skipped(&mut self, t: &mut ThreadState, bb: &BlockInfo, from: u32) {
        let top_sp = t.stack.last().map_or(u64::MAX, |e| e.sp);
        t.last_bbcc = Some(bb.last.get().2);
        t.fast = Fast {
            last_bb: bb,
            last_count: bb.fast_count.get(),
            top_sp,
            key: u64::MAX,
        };
        if let Some(sink) = self.bbccs.get_mut(from as usize) {
            if self.eager && t.collect {
                add_cost(&mut t.run, &bb.stat, N_STATIC);
                add_cost(&mut sink.skipped, &bb.stat, N_STATIC);
            }
            if self.miss_slots != 0 {
                let base = if t.collect {
                    sink.skipped[R_MISS..].as_mut_ptr()
                } else {
                    core::ptr::null_mut()
                };
                set_cur_miss(base);
                cur_stride().store(0, Ordering::Relaxed);
            }
        }
    }

    /// The fast path for a jump that Callgrind turns into a call (into a function entry, or
    /// into another object or section: tail calls, and a PLT stub's jump into the library),
    /// with no frame to unwind: the arc comes from the caller of the skipped
    /// function when one is active (the PLT case), else from the jumping block; the frame
    /// takes the top frame's stack pointer. The callee's context must be the current one
    /// (same function) or its cached one-function context, its cost centre and the arc the
    /// cached ones. Everything is checked before anything changes.
    #[inline(always)]
    fn setup_fast_jump_call(
        &mut self,
        t: &mut ThreadState,
        lbb: &BlockInfo,
        bb: &BlockInfo,
        sp: u64,
    ) -> bool {
        let fl = &bb.flags;
        if lbb.flags.pop_on_jump {
            return false;
        }
        if fl.skip || fl.dump_before || fl.zero_before || fl.toggle_collect {
            return false;
        }
        // No frame to unwind; the new frame takes the top frame's stack pointer.
        let frame_sp = t.stack.last().map_or(sp, |e| e.sp);
        if fl.separate_callers != 0 || frame_sp < sp {
            return false;
        }
        let Some(last) = Self::opt(&t.last_bbcc) else {
            return false;
        };
        let from = Self::opt(&t.nonskipped).unwrap_or(last);
        let bkey = bb.fast_key.get();
        if bkey == u64::MAX {
            return false;
        }
        let push_fn = t.fn_stack.last() != Some(&bb.fn_id) || t.cxt.is_none();
        let new_cxt = if push_fn {
            let c = (bkey >> 32) as u32;
            match self.cxts.get(c as usize) {
                Some(x) if x.fns.len() == 1 && x.fns.first() == Some(&bb.fn_id) => c,
                _ => return false,
            }
        } else {
            match t.cxt {
                Some(c) => c,
                None => return false,
            }
        };
        let Some(cx) = self.cxts.get(new_cxt as usize) else {
            return false;
        };
        let (Some(&to_fn), recs) = (cx.fns.first(), cx.recs) else {
            return false;
        };
        let (Some(last_fn), Some(from_fn)) = (
            self.bbccs
                .get(last as usize)
                .and_then(|b| self.fn_of_cxt(b.cxt)),
            self.bbccs
                .get(from as usize)
                .and_then(|b| self.fn_of_cxt(b.cxt)),
        ) else {
            return false;
        };
        // `setup` takes the recursion level from the jumping block and the arc from `from`.
        if last_fn != from_fn {
            return false;
        }
        let Some((a_old, a_new, idx)) = self.call_level(t, from_fn, to_fn, recs) else {
            return false;
        };
        if !self.cached_as(bb, fast_key(new_cxt, idx, t.th)) {
            return false;
        }
        let bkey = bb.fast_key.get();
        let to = bb.last.get().2;
        let Some(fbcc) = self.bbccs.get(from as usize) else {
            return false;
        };
        let (from_rec, from_th) = (fbcc.rec, fbcc.th);
        // SAFETY: cost centres point at leaked BlockInfo values.
        let fb = unsafe { &*fbcc.bb };
        let ret_addr = if fb.exit == Exit::Call { fb.end } else { 0 };
        let Some(j) = self.jcc_index.get(from, to) else {
            return false;
        };
        let (n, fsp) = (t.stack.len(), t.fn_stack.len());
        if n >= t.stack.capacity() || (push_fn && fsp >= t.fn_stack.capacity()) {
            return false;
        }
        // Commit: charge the previous block (to the skipped-cost sink when a skipped function
        // is active), push the context and the frame, enter `bb`.
        self.bbs_by_tool = self.bbs_by_tool.wrapping_add(1);
        // (With cache simulation the previous block was charged when it was entered.)
        if !self.eager && t.collect {
            let ns = self.n_cost.min(N_STATIC);
            add_cost(&mut t.run, &lbb.stat, ns);
            match t.nonskipped.and_then(|b| self.bbccs.get_mut(b as usize)) {
                Some(c) => add_cost(&mut c.skipped, &lbb.stat, ns),
                None => {
                    // SAFETY: the last block's cost centre's counter.
                    unsafe { self.count_by_tool(t.fast.last_count) };
                }
            }
        }
        if let Some(a) = t.fn_active.get_mut(to_fn as usize) {
            *a = a_new;
        }
        if let Some(jc) = self.jccs.get_mut(j as usize) {
            jc.count = jc.count.wrapping_add(1);
        }
        let (old_cxt, old_ns) = (Self::opt(&t.cxt), Self::opt(&t.nonskipped));
        // The jump out of a stub a call entered (the stub's frame on top, at this sp, with
        // the call's return address and no skipped state below it): the return pops both
        // frames inline, and the whole call can be made inline next time (`CallPlan::stub`).
        let via_stub = match (old_ns, n.checked_sub(1).and_then(|i| t.stack.get(i))) {
            (Some(ns), Some(f1)) if ns == from && fb.exit == Exit::Call => {
                f1.jcc.get().is_none()
                    && f1.nonskipped.get().is_none()
                    && f1.sp == frame_sp
                    && f1.ret_addr == ret_addr
            }
            _ => false,
        };
        let below = n
            .checked_sub(2)
            .and_then(|i| t.stack.get(i))
            .map_or(u64::MAX, |e| e.sp);
        let ret_key = match (via_stub, old_cxt) {
            (true, Some(c)) if !fl.dump_after && below >= frame_sp.saturating_add(8) => {
                inline_key(fast_key(c, from_rec, from_th), fb.obj, fb.sect)
            }
            _ => None,
        };
        let incl = self
            .jccs
            .get_mut(j as usize)
            .map_or(0, |jc| core::ptr::addr_of_mut!(jc.incl[R_IR]) as u64);
        // A tail call: the inline return pops this frame (`ret_addr` 0 marks it) and goes on
        // with the one below, so it returns into that frame's context (its key). After a
        // tail jump into a PLT stub, the stub's frame (no arc, `ret_addr` 0, at the same sp)
        // is popped with it and the frame below that one gives the key.
        let tail_stub = match (old_ns, n.checked_sub(1).and_then(|i| t.stack.get(i))) {
            (Some(ns), Some(f1)) if ns == from && ret_addr == 0 && !fb.flags.pop_on_jump => {
                f1.jcc.get().is_none()
                    && f1.nonskipped.get().is_none()
                    && f1.sp == frame_sp
                    && f1.ret_addr == 0
            }
            _ => false,
        };
        let tail_below = if tail_stub { 2 } else { 1 };
        let tail_key = match (
            via_stub,
            n.checked_sub(tail_below).and_then(|i| t.stack.get(i)),
        ) {
            (false, Some(top))
                if (old_ns.is_none() || tail_stub)
                    && !fl.dump_after
                    && ret_addr == 0
                    && top.sp == frame_sp
                    && top.plan_key != u64::MAX =>
            {
                Some(top.plan_key)
            }
            _ => None,
        };
        let plan = match (ret_key, tail_key) {
            (Some(key), _) if incl != 0 => Plan {
                key,
                to_fn,
                active: a_old,
                incl,
                drop: 2 * FRAME,
            },
            (None, Some(key)) if incl != 0 => Plan {
                key,
                to_fn,
                active: a_old,
                incl,
                drop: tail_below as u64 * FRAME,
            },
            _ => NO_PLAN,
        };
        let stub_count = t.fast.last_count as u64;
        self.push_frame(t, Some(j), frame_sp, ret_addr, old_cxt, old_ns, plan);
        if push_fn {
            Self::push_fn(t, bb.fn_id);
        }
        t.nonskipped = None;
        t.cxt = Some(new_cxt);
        self.enter_fast(t, bb, frame_sp);
        if plan.key != u64::MAX && self.inline_jumps && push_fn == (from_fn != to_fn) {
            let inc = a_new.wrapping_sub(a_old);
            let (lo, hi) = level_range(recs, idx, inc);
            let (Some(tc), Some(jc)) = (self.bbccs.get(to as usize), self.jccs.get(j as usize))
            else {
                return true;
            };
            let (callee_plan, arc_count, callee_miss) = (
                tc.plans(),
                &jc.count as *const u64 as u64,
                Self::miss_ptr(tc) as u64,
            );
            let Some(fc) = self.bbccs.get_mut(from as usize) else {
                return true;
            };
            let sink = core::ptr::addr_of_mut!(fc.skipped[R_IR]) as u64;
            let Some(p) = fc.plan_for(bb, !(via_stub || tail_stub)) else {
                return true;
            };
            let r = Ordering::Relaxed;
            if via_stub || tail_stub {
                // (A tail call's plan has `ret_addr` 0: the frame takes the key of the frame
                // below the stub's at run time.)
                let ret_key = if via_stub { plan.key } else { u64::MAX };
                plan_call(
                    p,
                    bb,
                    ret_addr,
                    (to_fn, lo, hi, inc),
                    push_fn,
                    (j, arc_count, incl),
                    (plan_cxt(old_cxt), ret_key),
                    (bkey, callee_plan, 2 * FRAME),
                );
                p.sink.store(sink, r);
                p.stub_count.store(stub_count, r);
                p.from_bbcc.store(u64::from(from), r);
                p.stub.store(lbb as *const BlockInfo as u64, r);
                p.callee_miss.store(callee_miss, r);
            } else if lbb.tail_jump && from == last {
                // The tail-call case (`ret_addr` 0): the frame takes the top frame's sp and
                // key at run time.
                plan_call(
                    p,
                    bb,
                    0,
                    (to_fn, lo, hi, inc),
                    push_fn,
                    (j, arc_count, incl),
                    (plan_cxt(old_cxt), u64::MAX),
                    (bkey, callee_plan, FRAME),
                );
                p.stub.store(0, r);
                p.callee_miss.store(callee_miss, r);
            }
        }
        true
    }

    /// What popping frame `e` does to `fn_active` (as `pop`): the callee function of its arc
    /// and whether its count goes down (`None`: no arc); `Err` for an arc into a function
    /// with `--dump-after`/`--toggle-collect` (left to `setup`). Integer-only.
    #[inline(always)]
    fn frame_arc(&self, e: &Entry) -> Result<Option<(u32, bool)>, ()> {
        let Some(j) = e.jcc.get() else {
            return Ok(None);
        };
        let jcc = self.jccs.get(j as usize).ok_or(())?;
        let (fb, tb) = (
            self.bbccs.get(jcc.from as usize).ok_or(())?,
            self.bbccs.get(jcc.to as usize).ok_or(())?,
        );
        let from_fn = self.fn_of_cxt(fb.cxt).ok_or(())?;
        let to_fn = self.fn_of_cxt(tb.cxt).ok_or(())?;
        // SAFETY: cost centres point at leaked BlockInfo values.
        let flags = unsafe { &(*tb.bb).flags };
        if flags.dump_after || flags.toggle_collect {
            return Err(());
        }
        Ok(Some((to_fn, !(self.skip_direct_rec && from_fn == to_fn))))
    }

    /// The fast path for a `ret` that pops two or more shadow-stack frames, all below the
    /// returning stack pointer: a call through a PLT stub (the library function's frame, then
    /// the stub's frame without arc), a tail call (the jump's frame, then the real call's),
    /// chains of them. The frames must leave no skipped function active and name their
    /// contexts; functions with `--dump-after`/`--toggle-collect` are left to `setup`.
    /// Everything is checked before anything changes.
    #[inline(always)]
    fn setup_fast_ret_n(
        &mut self,
        t: &mut ThreadState,
        lbb: &BlockInfo,
        bb: &BlockInfo,
        sp: u64,
    ) -> bool {
        let n = t.stack.len();
        if t.nonskipped.is_some() {
            return false;
        }
        let mut k = 0;
        while t
            .stack
            .get(n.wrapping_sub(k + 1))
            .is_some_and(|e| e.sp < sp)
        {
            k += 1;
        }
        if k < 2 {
            return false;
        }
        let next_sp = t
            .stack
            .get(n.wrapping_sub(k + 1))
            .map_or(u64::MAX, |e| e.sp);
        match t.stack.get(n - k) {
            Some(e) if e.nonskipped.get().is_none() => {}
            _ => return false,
        }
        // The context after the pops: that of the last frame popped with an arc.
        let mut after = None;
        for i in 1..=k {
            let Some(e) = t.stack.get(n - i) else {
                return false;
            };
            if self.frame_arc(e).is_err() {
                return false;
            }
            if e.jcc.get().is_some() {
                after = Some((e.cxt.get(), e.fn_depth()));
            }
        }
        let Some((Some(new_cxt), fn_sp)) = after else {
            return false;
        };
        let Some(cx) = self.cxts.get(new_cxt as usize) else {
            return false;
        };
        let Some(&top_fn) = cx.fns.first() else {
            return false;
        };
        // Its function's activation count after the pops (each a saturating decrement).
        let Some(mut cur) = t.fn_active.get(top_fn as usize).copied() else {
            return false;
        };
        for i in 1..=k {
            if let Some(Ok(Some((f, true)))) = t.stack.get(n - i).map(|e| self.frame_arc(e)) {
                if f == top_fn {
                    cur = cur.saturating_sub(1);
                }
            }
        }
        let Some(idx) = level_index(cx.recs, Some(cur)) else {
            return false;
        };
        if !self.cached_as(bb, fast_key(new_cxt, idx, t.th)) {
            return false;
        }
        // Commit: charge the previous block, pop the frames (as `pop`), enter `bb`.
        self.bbs_by_tool = self.bbs_by_tool.wrapping_add(1);
        self.fast_charge_prev(t, lbb);
        let nc = self.n_cost;
        for i in 1..=k {
            let Some(e) = t.stack.get(n - i) else {
                continue;
            };
            let arc = self.frame_arc(e);
            let Some(j) = e.jcc.get() else { continue };
            if let Some(jcc) = self.jccs.get_mut(j as usize) {
                add_diff(&mut jcc.incl, &t.run, &e.enter_cost, nc);
            }
            if let Ok(Some((f, true))) = arc {
                if let Some(a) = t.fn_active.get_mut(f as usize) {
                    *a = a.saturating_sub(1);
                }
            }
        }
        Self::pop_to(t, n - k, Some(new_cxt), fn_sp);
        self.enter_fast(t, bb, next_sp);
        true
    }

    /// The fast path for a block reached by a `ret` that pops exactly one shadow-stack frame
    /// (a real call's frame, into a known context, with no `--dump-after`/`--toggle-collect`
    /// function returning): everything is checked before anything changes.
    #[inline(always)]
    fn setup_fast_ret(
        &mut self,
        t: &mut ThreadState,
        lbb: &BlockInfo,
        bb: &BlockInfo,
        sp: u64,
    ) -> bool {
        let n = t.stack.len();
        if n == 0 || t.nonskipped.is_some() {
            return false;
        }
        let Some(top) = t.stack.get(n - 1) else {
            return false;
        };
        if sp < top.sp || (sp == top.sp && top.ret_addr != bb.addr) {
            return false;
        }
        let next_sp = match n.checked_sub(2).and_then(|i| t.stack.get(i)) {
            Some(e) if e.sp < sp => return false,
            Some(e) => e.sp,
            None => u64::MAX,
        };
        // (A frame that restores a skipped-function state is left to `setup`: copying the
        // `Option` would be done with a vector register.)
        let (Some(j), Some(new_cxt), None) = (top.jcc.get(), top.cxt.get(), top.nonskipped.get())
        else {
            return false;
        };
        let fn_sp = top.fn_depth();
        let Some(jcc) = self.jccs.get(j as usize) else {
            return false;
        };
        let (Some(fb), Some(tb)) = (
            self.bbccs.get(jcc.from as usize),
            self.bbccs.get(jcc.to as usize),
        ) else {
            return false;
        };
        let fn_of = |c: u32| {
            self.cxts
                .get(c as usize)
                .and_then(|x| x.fns.first().copied())
        };
        let (Some(from_fn), Some(to_fn)) = (fn_of(fb.cxt), fn_of(tb.cxt)) else {
            return false;
        };
        // SAFETY: cost centres point at leaked BlockInfo values.
        let to_flags = unsafe { &(*tb.bb).flags };
        if to_flags.dump_after || to_flags.toggle_collect {
            return false;
        }
        let Some(&a_old) = t.fn_active.get(to_fn as usize) else {
            return false;
        };
        let a_new = if self.skip_direct_rec && from_fn == to_fn {
            a_old
        } else {
            a_old.saturating_sub(1)
        };
        let Some(cx) = self.cxts.get(new_cxt as usize) else {
            return false;
        };
        let Some(&top_fn) = cx.fns.first() else {
            return false;
        };
        let cur = if top_fn == to_fn {
            Some(a_new)
        } else {
            t.fn_active.get(top_fn as usize).copied()
        };
        let Some(idx) = level_index(cx.recs, cur) else {
            return false;
        };
        if !self.cached_as(bb, fast_key(new_cxt, idx, t.th)) {
            return false;
        }
        // Commit: charge the previous block, pop the frame (as `pop`), enter `bb`.
        self.bbs_by_tool = self.bbs_by_tool.wrapping_add(1);
        self.fast_charge_prev(t, lbb);
        let nc = self.n_cost;
        if let (Some(jcc), Some(top)) = (self.jccs.get_mut(j as usize), t.stack.get(n - 1)) {
            add_diff(&mut jcc.incl, &t.run, &top.enter_cost, nc);
        }
        if let Some(a) = t.fn_active.get_mut(to_fn as usize) {
            *a = a_new;
        }
        Self::pop_to(t, n - 1, Some(new_cxt), fn_sp);
        self.enter_fast(t, bb, next_sp);
        true
    }

    /// The [`Fast::key`] of the thread's present state (panic-free: the fast path uses it).
    #[inline(always)]
    fn summary_key(&self, t: &ThreadState) -> u64 {
        let Some(cid) = t.cxt else {
            return u64::MAX;
        };
        if t.nonskipped.is_some() {
            return u64::MAX;
        }
        let Some(c) = self.cxts.get(cid as usize) else {
            return u64::MAX;
        };
        let Some(&f0) = c.fns.first() else {
            return u64::MAX;
        };
        if c.recs <= 1 {
            return fast_key(cid, 0, t.th);
        }
        let level = t
            .fn_active
            .get(f0 as usize)
            .copied()
            .unwrap_or(0)
            .min(c.recs);
        if level == 0 {
            u64::MAX
        } else {
            fast_key(cid, level - 1, t.th)
        }
    }

    /// Recomputes the thread's [`Fast`] summary after the slow path changed its state.
    pub fn refresh_fast(&mut self, t: &mut ThreadState) {
        let (last_bb, last_count) = match t.last_bbcc {
            // In a signal handler everything takes the full path (rare, and the inline
            // paths know no stack bottom but the real one).
            Some(_) if !t.sigs.is_empty() => (core::ptr::null(), core::ptr::null_mut()),
            Some(b) => {
                let c = &mut self.bbccs[b as usize];
                (c.bb, core::ptr::addr_of_mut!(c.count))
            }
            None => (core::ptr::null(), core::ptr::null_mut()),
        };
        let key = self.summary_key(t);
        t.fast = Fast {
            last_bb,
            last_count,
            top_sp: t.stack.last().map_or(u64::MAX, |e| e.sp),
            key,
        };
        self.set_cur(t);
    }

    /// Folds what the inline paths did since the last look into thread `t` (the one [`jump`]
    /// belongs to): running Ir, blocks that no counter counted, the last block and its
    /// cost centre, and,
    /// when the call and return cases were armed, the lengths of the shadow stack and the
    /// function stack (whose contents and the activation counts they kept up to date) and
    /// the context (the last cost centre's) and the skipped-function state. Integer-only (the
    /// fast path calls it).
    #[inline(always)]
    pub fn inline_pull(&mut self, t: &mut ThreadState) {
        let js = jump();
        let ir = js.ir.load(Ordering::Relaxed);
        if ir == self.ir_pushed.get() {
            return;
        }
        let ir = ir.wrapping_sub(self.ir_base.get());
        js.ir.store(0, Ordering::Relaxed);
        set_volatile(&self.ir_pushed, 0);
        set_volatile(&self.ir_base, 0);
        let n = js.uncounted.load(Ordering::Relaxed);
        js.uncounted.store(0, Ordering::Relaxed);
        self.bbs_by_tool = self.bbs_by_tool.wrapping_add(n);
        if self.eager {
            for (k, d) in js.stat.iter().enumerate() {
                let v = d.load(Ordering::Relaxed);
                d.store(0, Ordering::Relaxed);
                if let Some(r) = t.run.get_mut(R_IR + 1 + k) {
                    // SAFETY: a plain write to the thread's own field (volatile: no vector
                    // code in the fast path).
                    unsafe { core::ptr::write_volatile(r, r.wrapping_add(v)) };
                }
            }
        }
        // The last block's counter is the first field of its cost centre.
        let count = js.last_count.load(Ordering::Relaxed) as *mut u64;
        // SAFETY: the inline paths only store counters of boxed cost centres (never freed).
        let (last, last_bb, last_ir) = unsafe {
            let c = &*(count as *const Bbcc);
            (c.id, c.bb, c.ir)
        };
        // The inline paths add a block's Ir when they enter it; lazily it is charged when
        // the next block starts, so the last one's comes off (`inline_push` put the Ir of
        // the block it left as the last one in beforehand).
        let ir = if self.eager {
            ir
        } else {
            ir.wrapping_sub(last_ir)
        };
        // SAFETY: plain writes to the thread's own fields (volatile: no vector code in the
        // fast path).
        unsafe {
            let run = core::ptr::addr_of_mut!(t.run[R_IR]);
            core::ptr::write_volatile(run, core::ptr::read_volatile(run).wrapping_add(ir));
            core::ptr::write_volatile(core::ptr::addr_of_mut!(t.fast.last_bb), last_bb);
            core::ptr::write_volatile(core::ptr::addr_of_mut!(t.fast.last_count), count);
            core::ptr::write_volatile(core::ptr::addr_of_mut!(t.last_bbcc), Some(last));
        }
        // Armed, the call and return cases may have run (they keep no flag: a store less
        // per call and return). Where none did, what follows reads back what the thread
        // has: the lengths `inline_push` gave, the skipped state none (it arms the cases
        // only then), and the context of the last cost centre, which a jump case entered
        // under the expected key, that is, in the thread's context.
        let base_neg = js.stack_base_neg.load(Ordering::Relaxed);
        if base_neg == 0 {
            return;
        }
        let base = base_neg.wrapping_neg();
        // The top frame lies at `base + (depth - 1)` (the sentinel when empty).
        let frame = js.ret_frame.load(Ordering::Relaxed);
        let depth = (frame.wrapping_sub(base).wrapping_add(FRAME) / FRAME) as usize;
        let fn_base = js.fn_base.load(Ordering::Relaxed);
        let fn_depth =
            (js.fn_top.load(Ordering::Relaxed).wrapping_sub(fn_base) / FN_BYTES as u64) as usize;
        if depth > t.stack.capacity() || fn_depth > t.fn_stack.capacity() {
            return;
        }
        // SAFETY: the inline paths keep the frames below `ret_frame` and the functions below
        // `fn_top` written (frames in the spare capacity `inline_push` initialised), and
        // check both capacities before they push.
        unsafe {
            t.stack.set_len(depth);
            t.fn_stack.set_len(fn_depth);
        }
        let cxt = self.bbccs.get(last as usize).map(|c| c.cxt);
        let ns = js.nonskipped.load(Ordering::Relaxed);
        let ns = (ns != u64::MAX).then_some(ns as u32);
        // SAFETY: plain writes to the thread's own fields (volatile: no vector code).
        unsafe {
            core::ptr::write_volatile(core::ptr::addr_of_mut!(t.cxt), cxt);
            core::ptr::write_volatile(core::ptr::addr_of_mut!(t.nonskipped), ns);
        }
        t.fast.top_sp = t.stack.last().map_or(u64::MAX, |e| e.sp);
        t.fast.key = self.summary_key(t);
    }

    /// Makes [`jump`] thread `t`'s (the running one, whose state is current): the key a plainly
    /// reached block must have (none unless collecting, the last block ends plainly and the
    /// context has a key), the top frame's `sp`, the last block's counter and Ir. Only with
    /// [`Runtime::inline_jumps`]. Integer-only.
    #[inline(always)]
    pub fn inline_push(&self, t: &mut ThreadState) {
        let js = jump();
        if !self.inline_jumps {
            return;
        }
        let f = &t.fast;
        let top_ok = f.top_sp == u64::MAX || f.top_sp <= i64::MAX as u64;
        let mut expect = None;
        // With simulation the inline path also points the helpers at the new cost centre,
        // which the stride of a skipped-function sink (0) would not fit.
        let sim_ok = self.miss_slots == 0 || t.nonskipped.is_none();
        if !f.last_bb.is_null() && t.collect && top_ok && sim_ok {
            // SAFETY: a leaked BlockInfo.
            let lbb = unsafe { &*f.last_bb };
            if lbb.arms_jump_key() {
                expect = inline_key(f.key, lbb.obj, lbb.sect);
            }
        }
        jump()
            .last_count
            .store(f.last_count as u64, Ordering::Relaxed);
        // Lazily, the running Ir's delta holds the last block's Ir while it is the last one
        // (see `inline_pull`).
        let pre = if self.eager || f.last_count.is_null() {
            0
        } else {
            // SAFETY: a counter of a boxed cost centre (never freed), its first field.
            unsafe { (*(f.last_count as *const Bbcc)).ir }
        };
        let base = if self.eager { 0 } else { t.run[R_IR] };
        js.ir.store(base.wrapping_add(pre), Ordering::Relaxed);
        set_volatile(&self.ir_pushed, base.wrapping_add(pre));
        set_volatile(&self.ir_base, base);
        jump()
            .expect
            .store(expect.unwrap_or(u64::MAX), Ordering::Relaxed);
        // The return case: armed for the top frame; taken only right after a block that
        // ends in a plain `ret` (the call case is armed below).
        let mut exit = EXIT_OTHER;
        if !f.last_bb.is_null() {
            // SAFETY: a leaked BlockInfo.
            let lbb = unsafe { &*f.last_bb };
            if lbb.plain_ret() {
                exit = EXIT_RET;
            }
        }
        jump()
            .run_ir
            .store(core::ptr::addr_of!(t.run[R_IR]) as u64, Ordering::Relaxed);
        // The frames, as the fast paths planned their returns, and the call case (taken only
        // while collecting and outside skipped functions, once the shadow stack's spare
        // capacity is initialised).
        let frames = t.collect
            && top_ok
            && t.nonskipped.is_none()
            && t.stack.capacity() > 0
            && t.stack.capacity() == t.spare_init;
        let r = Ordering::Relaxed;
        js.nonskipped.store(u64::MAX, r);
        if frames {
            let base = t.stack.as_mut_ptr();
            // The top frame, or the sentinel below the bottom one.
            let frame = base.wrapping_add(t.stack.len()).wrapping_sub(1) as u64;
            js.ret_frame.store(frame, r);
            js.stack_base_neg.store((base as u64).wrapping_neg(), r);
            jump()
                .stack_last
                .store(base.wrapping_add(t.stack.capacity() - 1) as u64, r);
            js.fn_active.store(t.fn_active.as_mut_ptr() as u64, r);
            js.fn_len.store(t.fn_active.len() as u64, r);
            let fb = t.fn_stack.as_mut_ptr();
            js.fn_base.store(fb as u64, r);
            jump()
                .fn_top
                .store(fb.wrapping_add(t.fn_stack.len()) as u64, r);
            jump()
                .fn_end
                .store(fb.wrapping_add(t.fn_stack.capacity()) as u64, r);
            if !f.last_bb.is_null() {
                // SAFETY: a leaked BlockInfo.
                let lbb = unsafe { &*f.last_bb };
                if let (true, Some(b)) = (lbb.arms_plans(), t.last_bbcc) {
                    if let Some(c) = self.bbccs.get(b as usize) {
                        exit = c.plans();
                    }
                }
            }
        } else {
            DISARMED_FRAME.set_sp(f.top_sp.min(i64::MAX as u64));
            js.ret_frame.store(DISARMED_FRAME.addr(), r);
            js.stack_base_neg.store(0, r);
            js.fn_len.store(0, r);
        }
        js.exit.store(exit, r);
    }

    /// Initialises the shadow stack's spare capacity (see [`Entry::SPARE`]) after it grew;
    /// the slow path calls it (not integer-only).
    fn init_spare(t: &mut ThreadState) {
        if t.stack.capacity() != t.spare_init {
            for slot in t.stack.spare_capacity_mut() {
                slot.write(Entry::SPARE);
            }
            t.spare_init = t.stack.capacity();
        }
    }

    /// Disarms [`jump`] (every case) before Rust code changes thread state.
    pub fn inline_disarm() {
        let js = jump();
        js.expect.store(u64::MAX, Ordering::Relaxed);
        // Its `sp` may be another thread's: the unwind checks that read it can only clear
        // `expect`, which is cleared here.
        jump()
            .ret_frame
            .store(DISARMED_FRAME.addr(), Ordering::Relaxed);
        js.stack_base_neg.store(0, Ordering::Relaxed);
        js.fn_len.store(0, Ordering::Relaxed);
        js.exit.store(EXIT_OTHER, Ordering::Relaxed);
        js.nonskipped.store(u64::MAX, Ordering::Relaxed);
    }

    /// Callgrind's `setup_bbcc` for block `bb` starting with stack pointer `sp` in thread `t`.
    pub fn setup(&mut self, t: &mut ThreadState, bb: &BlockInfo, sp: u64) {
        self.setup_slow(t, bb, sp);
        Self::init_spare(t);
        self.refresh_fast(t);
    }

    fn setup_slow(&mut self, t: &mut ThreadState, bb: &BlockInfo, mut sp: u64) {
        self.bbs_by_tool += 1;
        let last = t.last_bbcc;
        let mut jk = Exit::Other;
        let mut is_jump = false;
        if let Some(lb) = last {
            let lbb = self.bb_of(lb);
            jk = lbb.exit;
            // Lazy charging: the whole previous block; eager: only its `rep` extras (they
            // happened while it ran).
            let mut add = if self.eager { [0; N_STATIC] } else { lbb.stat };
            let skipped = t.nonskipped.is_some();
            let count_here = t.collect && !skipped;
            for (k, &(i, ctr)) in lbb.rep.iter().enumerate() {
                // SAFETY: `ctr` and `ctr + 1` are the entries and iterations slots of the
                // block's process-lifetime cost array; guest threads run one at a time.
                let (extra, iters) = unsafe {
                    (
                        core::mem::take(&mut *ctr),
                        core::mem::take(&mut *ctr.add(1)),
                    )
                };
                let st = lbb.insn_stat.get(i).copied().unwrap_or_default();
                let cond = lbb.insn_rep.get(i) == Some(&RepKind::Cond);
                let per = if cond { iters } else { extra };
                add[R_IR] += extra;
                add[R_DR] += per * st.dr;
                add[R_DW] += per * st.dw;
                add[R_BC] += extra + if cond { iters } else { 0 };
                if count_here {
                    self.bbccs[lb as usize].rep_extra[k] += extra;
                    self.bbccs[lb as usize].rep_iters[k] += iters;
                }
                // Callgrind's blocks end at a `rep`, which then runs alone `extra` more
                // times; the rest of the block is one more block.
                let split = u64::from(i + 1 < lbb.insn_addrs.len());
                self.bbs_by_tool = self.bbs_by_tool.wrapping_add(extra + split);
                if self.collect_jumps {
                    let cond = lbb.rep_cond.get(k).copied().unwrap_or(false);
                    let iters = cond.then_some(iters);
                    self.rep_jumps(lb, lbb, k, extra, iters, count_here);
                }
            }
            if t.collect {
                let ns_static = self.n_cost.min(N_STATIC);
                add_cost(&mut t.run, &add, ns_static);
                if let Some(ns) = t.nonskipped {
                    add_cost(&mut self.bbccs[ns as usize].skipped, &add, ns_static);
                } else if !self.eager {
                    let c = core::ptr::addr_of_mut!(self.bbccs[lb as usize].count);
                    // SAFETY: a cost centre's counter.
                    unsafe { self.count_by_tool(c) };
                }
            }
        }
        let csp = t.stack.len();
        // In a signal handler the interrupted code's frames are out of reach.
        let bottom = t.sigs.last().map_or(0, |s| s.bottom);
        let mut popcount = 1;
        let mut ret_without_call = false;
        if jk == Exit::Return && csp > bottom {
            let mut up = csp - 1;
            if sp < t.stack[up].sp {
                popcount = 0;
            } else if t.stack[up].sp == sp {
                loop {
                    if t.stack[up].ret_addr == bb.addr {
                        break;
                    }
                    if up > bottom {
                        up -= 1;
                        if t.stack[up].sp == sp {
                            popcount += 1;
                            continue;
                        }
                    }
                    popcount = 0;
                    break;
                }
            }
            if popcount == 0 {
                jk = Exit::Other;
                ret_without_call = true;
            }
        }
        let mut from = last;
        let mut call_emulation = false;
        if jk == Exit::Other {
            if let Some(lb) = last {
                let lbb = self.bb_of(lb);
                let (l_sect, l_obj, l_pop) = (lbb.sect, lbb.obj, lbb.flags.pop_on_jump);
                if ret_without_call || bb.is_entry || l_sect != bb.sect || l_obj != bb.obj {
                    if l_pop {
                        if let Some(top) = t.stack.last() {
                            if let Some(j) = top.jcc.get() {
                                from = Some(self.jccs[j as usize].from);
                                sp = top.sp;
                                self.pop(t);
                            }
                        }
                    }
                    jk = Exit::Call;
                    call_emulation = true;
                } else {
                    is_jump = true;
                }
            }
        }
        let skip = jk == Exit::Call && bb.flags.skip;
        let mut delayed_push = false;
        if jk == Exit::Return {
            if t.stack.len() <= bottom {
                // Underflow: the caller was never seen (or, from a signal handler, is the
                // signal frame's restorer); continue in the returned-to function.
                let fn_bottom = t.sigs.last().map_or(0, |s| s.fn_sp + 1);
                t.fn_stack.truncate(fn_bottom);
                t.cxt = None;
            } else {
                self.unwind(t, sp, popcount);
            }
        } else {
            let n = self.unwind(t, sp, 0);
            if n > 0 {
                jk = Exit::Return;
            }
            if jk == Exit::Call {
                delayed_push = true;
                if call_emulation {
                    if let Some(top) = t.stack.last() {
                        sp = top.sp;
                    }
                }
            }
        }
        // A handler left without `rt_sigreturn` for the interrupted function itself (a
        // `siglongjmp` there: no frame of the interrupted code was unwound, which would have
        // ended the handler as in Callgrind): its stack is behind, so the interrupted state
        // comes back here and the block continues it. Callgrind stays in the handler's state
        // for the rest of the run.
        let mut left_handler = false;
        while t.sigs.last().is_some_and(|s| !s.holds(sp)) {
            self.post_signal(t);
            left_handler = true;
        }
        if left_handler {
            delayed_push = false;
            is_jump = false;
        }
        let saved = (t.cxt, t.fn_stack.len());
        if (delayed_push && !skip) || t.cxt.is_none() {
            self.push_cxt(t, bb);
        }
        let Some(cxt) = t.cxt else { return };
        let (top_fn, recs) = {
            let c = &self.cxts[cxt as usize];
            (c.fns[0], c.recs)
        };
        let mut idx = 0;
        if recs > 1 {
            let mut level = *Self::active(t, top_fn);
            if delayed_push && !skip {
                let direct = from.is_some_and(|f| self.cxt_fn(f) == top_fn);
                if !(self.skip_direct_rec && direct) {
                    level += 1;
                }
            }
            level = level.min(recs);
            if level == 0 {
                level = 1;
                *Self::active(t, top_fn) = 1;
            }
            idx = level - 1;
        }
        let bbcc = self.get_bbcc(bb, cxt, idx, t.th);
        if delayed_push {
            if !skip && t.nonskipped.is_some() {
                from = t.nonskipped;
            }
            if let Some(f) = from {
                self.push_call(t, f, bbcc, sp, skip, saved);
            }
        }
        // A transfer that stayed a jump (no call emulation, no frame unwound) is an arc,
        // whether costs are collected or not (as Callgrind counts it).
        if self.collect_jumps && is_jump && jk == Exit::Other {
            if let Some(lb) = last {
                let cond = match self.bb_of(lb).jump {
                    JumpExit::None => None,
                    JumpExit::Direct | JumpExit::Indirect => Some(false),
                    JumpExit::Cond(target) => (target == bb.addr).then_some(true),
                };
                if let Some(cond) = cond {
                    self.record_jump(lb, bbcc, cond);
                }
            }
        }
        t.last_bbcc = Some(bbcc);
        if self.eager && t.collect {
            // Eager charging: the new block, after the call or return it completes. A trigger
            // met on the way acts before the block runs, as in Callgrind: the charge waits.
            if self.triggers.is_empty() {
                self.charge_entered(t);
            } else {
                t.pending = true;
            }
        }
    }

    /// Eager charging of the block `t` just entered (its `last_bbcc`).
    fn charge_entered(&mut self, t: &mut ThreadState) {
        let Some(b) = t.last_bbcc else { return };
        let stat = self.bb_of(b).stat;
        add_cost(&mut t.run, &stat, N_STATIC);
        match t.nonskipped {
            Some(ns) => add_cost(&mut self.bbccs[ns as usize].skipped, &stat, N_STATIC),
            None => {
                let c = core::ptr::addr_of_mut!(self.bbccs[b as usize].count);
                // SAFETY: a cost centre's counter.
                unsafe { self.count_by_tool(c) };
            }
        }
    }

    /// Charges the blocks whose eager charge waited for the triggers (see
    /// [`ThreadState::pending`]); the tool calls it once it has acted on them.
    pub fn charge_pending(&mut self) {
        for ti in 0..self.threads.len() {
            let tp: *mut ThreadState = &mut *self.threads[ti];
            // SAFETY: the box stays in place; `charge_entered` does not touch `self.threads`.
            let t = unsafe { &mut *tp };
            if core::mem::take(&mut t.pending) {
                self.charge_entered(t);
            }
        }
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn record_jump(&mut self, from: u32, to: u32, cond: bool) {
        let id = match self.jump_map.get(&(from, to)) {
            Some(&j) => j,
            None => {
                let seq = self.next_seq();
                let j = self.jumps.len() as u32;
                self.jumps.push(JumpRec {
                    from,
                    to,
                    cond,
                    followed: 0,
                    seq,
                });
                self.jump_map.insert((from, to), j);
                j
            }
        };
        self.jumps[id as usize].followed += 1;
        self.bbccs[from as usize].last_jump = (u64::from(to) << 32) | u64::from(id);
    }

    /// The jumps of one execution of `rep` number `k` of cost centre `lb`'s block:
    /// `entries` iterations went on to another one; `iters` is the number done, for
    /// `repe`/`repne` (`None`: plain `rep`, where both are equal).
    ///
    /// Callgrind's block ending at the `rep` jumps back to the `rep` once if it iterates
    /// again at all (`jcnd`, executed each time the block is left there, for `repe`/`repne`
    /// unless `rcx` was 0); the `rep`'s own block then runs `entries` times and jumps back
    /// `entries - 1` times (executed: `entries`, or `iters - 1` for `repe`/`repne`). When
    /// the `rep` starts the block, both are the `rep`'s own block.
    fn rep_jumps(
        &mut self,
        lb: u32,
        lbb: &BlockInfo,
        k: usize,
        entries: u64,
        iters: Option<u64>,
        count_here: bool,
    ) {
        let Some(&(i, _)) = lbb.rep.get(k) else {
            return;
        };
        let Some(&addr) = lbb.insn_addrs.get(i) else {
            return;
        };
        let (cxt, rec, th) = {
            let b = &self.bbccs[lb as usize];
            (b.cxt, b.rec, b.th)
        };
        let s_executed = iters.map_or(1, |m| u64::from(m > 0));
        let own = RepKey::Own { addr, cxt, rec, th };
        let (part, block) = if i == 0 {
            (own, addr)
        } else {
            let start = match k.checked_sub(1).and_then(|p| lbb.rep.get(p)) {
                Some(&(pi, _)) => lbb.insn_addrs.get(pi + 1).copied().unwrap_or(addr),
                None => lbb.addr,
            };
            (
                RepKey::Part {
                    bbcc: lb,
                    k: k as u32,
                },
                start,
            )
        };
        let site = (cxt, rec, th, addr);
        self.rep_add(
            part,
            site,
            block,
            u64::from(entries > 0),
            s_executed,
            1,
            count_here,
        );
        if entries > 0 {
            let r_executed = iters.map_or(entries, |m| m.saturating_sub(1));
            self.rep_add(
                own,
                site,
                addr,
                entries - 1,
                r_executed,
                entries,
                count_here,
            );
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn rep_add(
        &mut self,
        key: RepKey,
        (cxt, rec, th, addr): (u32, u32, u32, u64),
        block: u64,
        followed: u64,
        executed: u64,
        execs: u64,
        count_here: bool,
    ) {
        let id = match self.rep_map.get(&key) {
            Some(&r) => r,
            None => {
                let seq = self.next_seq();
                let r = self.reps.len() as u32;
                self.reps.push(RepRec {
                    cxt,
                    rec,
                    th,
                    addr,
                    block,
                    followed: 0,
                    executed: 0,
                    execs: 0,
                    seq,
                });
                self.rep_map.insert(key, r);
                r
            }
        };
        let r = &mut self.reps[id as usize];
        r.followed += followed;
        if count_here {
            r.executed += executed;
            r.execs += execs;
        }
    }

    /// The jump arcs to write for partition `th` (`None`: all): those of cost centres with
    /// a finished execution since the last dump (`finished`: [`Runtime::finished_counts`]);
    /// their counts restart. Others keep counting, as Callgrind writes and clears only the
    /// arcs of the blocks it writes. A `jcnd=` arc's executions are its source's finished
    /// executions.
    pub fn take_jumps(&mut self, th: Option<u32>, finished: &[u64]) -> Vec<JumpOut> {
        let mut out = Vec::new();
        for j in &mut self.jumps {
            let f = &self.bbccs[j.from as usize];
            let done = finished.get(j.from as usize).copied().unwrap_or(0);
            if th.is_some_and(|x| x != f.th) || done == 0 {
                continue;
            }
            if j.followed > 0 {
                // SAFETY: cost centres point at leaked BlockInfo values.
                let (fb, tb) = unsafe { (&*f.bb, &*self.bbccs[j.to as usize].bb) };
                // Callgrind's block that ends here starts after the block's last `rep`.
                let block = match fb.rep.last() {
                    Some(&(i, _)) => fb.insn_addrs.get(i + 1).copied().unwrap_or(fb.end),
                    None => fb.addr,
                };
                out.push(JumpOut {
                    cxt: f.cxt,
                    rec: f.rec,
                    from_addr: fb.last_insn,
                    to_addr: tb.addr,
                    executed: j.cond.then_some(done),
                    followed: j.followed,
                    block,
                    seq: j.seq,
                });
            }
            j.followed = 0;
        }
        for r in &mut self.reps {
            if th.is_some_and(|x| x != r.th) || r.execs == 0 {
                continue;
            }
            if r.followed > 0 {
                out.push(JumpOut {
                    cxt: r.cxt,
                    rec: r.rec,
                    from_addr: r.addr,
                    to_addr: r.addr,
                    executed: Some(r.executed),
                    followed: r.followed,
                    block: r.block,
                    seq: r.seq,
                });
            }
            r.followed = 0;
            r.executed = 0;
            r.execs = 0;
        }
        out
    }

    /// `CALLGRIND_ZERO_STATS`: jump counts of partition `th` (`None`: all) restart too.
    pub fn zero_jumps(&mut self, th: Option<u32>) {
        for j in &mut self.jumps {
            if th.is_none_or(|x| x == self.bbccs[j.from as usize].th) {
                j.followed = 0;
            }
        }
        for r in &mut self.reps {
            if th.is_none_or(|x| x == r.th) {
                r.followed = 0;
                r.executed = 0;
                r.execs = 0;
            }
        }
    }

    /// Adds the cost since entry of every active call to its arc (before a dump), for the
    /// thread slot at index `only` or all.
    pub fn flush_active(&mut self, only: Option<usize>) {
        let n = self.n_cost;
        for (ti, t) in self.threads.iter_mut().enumerate() {
            if only.is_some_and(|o| o != ti) {
                continue;
            }
            let run = t.run;
            for e in t.stack.iter_mut() {
                if let Some(j) = e.jcc.get() {
                    add_diff(&mut self.jccs[j as usize].incl, &run, &e.enter_cost, n);
                    e.enter_cost = entry_cost(&run);
                }
            }
        }
    }

    /// Per cost centre: its executions Callgrind has seen finish since the last dump or
    /// zeroing (its `ecounter_sum`). Callgrind dumps and zeroes only cost centres with one;
    /// the others keep their costs for later. Without eager charging that is `count`; with
    /// it, a thread's current block (charged, not finished) does not count, and `adj`
    /// corrects for collection toggled during an execution.
    pub fn finished_counts(&self) -> Vec<u64> {
        let mut done: Vec<i64> = self
            .bbccs
            .iter()
            .map(|b| b.count as i64 + if self.eager { b.adj } else { 0 })
            .collect();
        if self.eager {
            for t in &self.threads {
                if let (true, None, Some(b), false) =
                    (t.collect, t.nonskipped, t.last_bbcc, t.pending)
                {
                    done[b as usize] -= 1;
                }
            }
        }
        done.into_iter().map(|d| d.max(0) as u64).collect()
    }

    /// Per cost centre: whether it has a finished execution ([`Runtime::finished_counts`]).
    pub fn finished(&self) -> Vec<bool> {
        self.finished_counts().into_iter().map(|d| d > 0).collect()
    }

    /// `CALLGRIND_TOGGLE_COLLECT` ends the current block of `t`: with eager charging, that
    /// block was charged (or not) under the old setting but finishes under the new one.
    pub fn toggle_collect(&mut self, t: &mut ThreadState) {
        if let (true, None, Some(b)) = (self.eager, t.nonskipped, t.last_bbcc) {
            self.bbccs[b as usize].adj += if t.collect { -1 } else { 1 };
        }
        t.collect = !t.collect;
        self.refresh_fast(t);
    }

    /// Zeroes the cost centres and call arcs (after a dump, or `CALLGRIND_ZERO_STATS`) of
    /// the thread slot at index `only` (its partition and its running cost) or of all.
    /// Only cost centres with a finished execution ([`Runtime::finished`]) lose their self
    /// and skipped costs (Callgrind leaves the others alone).
    /// `after_dump`: an arc with no inclusive cost was not written and keeps its call count
    /// (as Callgrind clears only the arcs it writes).
    pub fn zero(&mut self, only: Option<usize>, after_dump: bool) {
        let th = only.and_then(|i| self.threads.get(i)).map(|t| t.th);
        let fin = self.finished();
        let mut zeroed = 0u64;
        for (b, fin) in self.bbccs.iter_mut().zip(fin) {
            if th.is_some_and(|x| x != b.th) {
                continue;
            }
            if !fin {
                continue;
            }
            b.skipped = [0; RUN];
            zeroed = zeroed.wrapping_add(b.count);
            b.count = 0;
            b.adj = 0;
            b.rep_extra.iter_mut().for_each(|x| *x = 0);
            b.rep_iters.iter_mut().for_each(|x| *x = 0);
            b.miss.iter_mut().for_each(|x| *x = 0);
        }
        self.counts_zeroed = self.counts_zeroed.wrapping_add(zeroed);
        let n = self.n_cost;
        for j in &mut self.jccs {
            if th.is_some_and(|x| x != self.bbccs[j.from as usize].th)
                || (after_dump && j.incl[..n].iter().all(|&x| x == 0))
            {
                continue;
            }
            j.count = 0;
            j.incl = [0; RUN];
        }
        for (ti, t) in self.threads.iter_mut().enumerate() {
            if only.is_some_and(|o| o != ti) {
                continue;
            }
            let run = t.run;
            for e in t.stack.iter_mut() {
                e.enter_cost = entry_cost(&run);
            }
            t.lastdump = run;
        }
    }

    /// Instrumentation switched on or off (Callgrind's `unwind_thread` and `zero_state_cost`
    /// for every thread): pops every call stack, so the next block starts without a
    /// predecessor, and restarts the running costs from zero (not their last-dump marks), so
    /// the next `summary:` counts from here.
    pub fn switch_instrumentation(&mut self) {
        for ti in 0..self.threads.len() {
            let tp: *mut ThreadState = &mut *self.threads[ti];
            // SAFETY: the box stays in place; `pop` does not touch `self.threads`.
            let t = unsafe { &mut *tp };
            while !t.sigs.is_empty() {
                self.post_signal(t);
            }
            while !t.stack.is_empty() {
                self.pop(t);
            }
            if let (true, true, None, Some(b)) = (self.eager, t.collect, t.nonskipped, t.last_bbcc)
            {
                // The running block never finishes for Callgrind.
                self.bbccs[b as usize].adj -= 1;
            }
            t.last_bbcc = None;
            // Callgrind's `unwind_thread` (`init_exec_state`): no context and an empty
            // function stack, so the next block's function starts a new context (not the
            // outermost function's); collection back to `--collect-atstart`, whatever
            // `CALLGRIND_TOGGLE_COLLECT` made it; no skipped function.
            t.fn_stack.clear();
            t.cxt = None;
            t.collect = self.collect_atstart;
            t.nonskipped = None;
            t.run = [0; RUN];
            self.refresh_fast(t);
        }
    }
}

impl Runtime {
    /// Callgrind's `pre_signal`: a handler is about to run on thread `t`; the interrupted
    /// code's state is put aside ([`SigFrame`]) and the handler starts afresh.
    pub fn pre_signal(&mut self, t: &mut ThreadState, stack: (u64, u64)) {
        t.sigs.push(SigFrame {
            bottom: t.stack.len(),
            stack,
            fn_sp: t.fn_stack.len(),
            last_bbcc: t.last_bbcc,
            cxt: t.cxt,
            nonskipped: t.nonskipped,
            collect: t.collect,
            run: t.run,
        });
        t.fn_stack.push(FN_SEPARATOR);
        t.last_bbcc = None;
        t.cxt = None;
        t.nonskipped = None;
        t.collect = self.collect_atstart;
        t.run = [0; RUN];
        self.refresh_fast(t);
    }

    /// Callgrind's `post_signal`: thread `t`'s innermost handler has returned (or was left):
    /// its frames are popped (their arcs get their inclusive costs), the activation its
    /// last function got without a call is taken back, and the interrupted state returns.
    pub fn post_signal(&mut self, t: &mut ThreadState) {
        let Some(s) = t.sigs.pop() else { return };
        while t.stack.len() > s.bottom {
            self.pop(t);
        }
        if let Some(c) = t.cxt {
            let f = self.cxts[c as usize].fns[0];
            let a = Self::active(t, f);
            *a = a.saturating_sub(1);
        }
        t.fn_stack.truncate(s.fn_sp);
        t.last_bbcc = s.last_bbcc;
        t.cxt = s.cxt;
        t.nonskipped = s.nonskipped;
        t.collect = s.collect;
        t.run = s.run;
        self.refresh_fast(t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arc_index_finds_every_arc_across_growth() {
        let mut index = ArcIndex::default();
        assert_eq!(index.get(0, 0), None);
        let arcs: Vec<(u32, u32)> = (0..5000u32)
            .map(|i| (i % 97, i.wrapping_mul(7919)))
            .collect();
        for (id, &(from, to)) in arcs.iter().enumerate() {
            index.insert(from, to, id as u32);
        }
        for (id, &(from, to)) in arcs.iter().enumerate() {
            assert_eq!(index.get(from, to), Some(id as u32));
        }
        assert_eq!(index.get(97, 0), None);
        assert!(index.keys.len().is_power_of_two() && index.keys.len() >= 2 * arcs.len());
    }

    /// A leaked block of `n` two-byte instructions at `addr` in function 0.
    fn block(addr: u64, n: u64, jump: JumpExit, rep: Vec<(usize, *mut u64)>) -> &'static BlockInfo {
        Box::leak(Box::new(block_info(addr, n, jump, rep)))
    }

    fn block_info(addr: u64, n: u64, jump: JumpExit, rep: Vec<(usize, *mut u64)>) -> BlockInfo {
        let rep_cond = vec![false; rep.len()];
        BlockInfo {
            addr,
            last_insn: addr + 2 * (n - 1),
            end: addr + 2 * n,
            n_insns: n,
            exit: Exit::Other,
            is_entry: false,
            named: true,
            obj: 0,
            sect: 0,
            fn_id: 0,
            flags: FnFlags {
                separate_recs: 2,
                ..FnFlags::default()
            },
            insn_addrs: (0..n).map(|i| addr + 2 * i).collect(),
            plain_exit: rep.is_empty(),
            tail_jump: false,
            rep,
            last: Cell::new((u32::MAX, u32::MAX, u32::MAX)),
            fast_key: Cell::new(u64::MAX),
            fast_count: Cell::new(core::ptr::null_mut()),
            alt_key: Cell::new(u64::MAX),
            alt_bbcc: Cell::new(u32::MAX),
            jump,
            rep_cond,
            insn_stat: vec![InsnStat::default(); n as usize],
            insn_rep: vec![RepKind::None; n as usize],
            stat: [n, 0, 0, 0, 0],
            jrec: dbt_core::tool::leak_low(InlineRec::new()),
            own_plan: std::cell::OnceCell::new(),
            cases_missing: Cell::new(0),
            cases_wanted: Cell::new(0),
        }
    }

    /// Every jump arc to write, as a dump takes them.
    fn take_all(rt: &mut Runtime) -> Vec<JumpOut> {
        let fin = rt.finished_counts();
        rt.take_jumps(None, &fin)
    }

    fn runtime(jumps: bool) -> Runtime {
        Runtime {
            collect_jumps: jumps,
            ..Runtime::default()
        }
    }

    /// The tests that arm the process's one inline state (`jump`) take turns.
    static INLINE_STATE: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// A runtime with the inline paths on and its thread `key` (boxed: the pointer stays
    /// valid), while the caller holds the inline state's turn.
    fn inline_runtime(
        key: u64,
    ) -> (
        std::sync::MutexGuard<'static, ()>,
        Runtime,
        *mut ThreadState,
    ) {
        let turn = INLINE_STATE.lock().unwrap_or_else(|e| e.into_inner());
        let mut rt = runtime(false);
        rt.inline_jumps = true;
        let t = rt.thread(key);
        (turn, rt, t)
    }

    /// The jump case's unwind checks read the top sp from the frame `ret_frame` points at:
    /// while a skipped function runs (the frame cases disarmed) that is the disarmed frame,
    /// which must carry the thread's top sp, not the empty stack's.
    #[test]
    fn the_disarmed_frame_carries_the_top_sp() {
        let (_turn, mut rt, t) = inline_runtime(9);
        // SAFETY: the boxed state stays in place; nothing else uses it.
        let t = unsafe { &mut *t };
        let a = block(0x2000, 3, JumpExit::None, Vec::new());
        rt.setup(t, a, 0x8000);
        t.stack.push(Entry {
            sp: 0x7ff0,
            ..Entry::SPARE
        });
        t.fast.top_sp = 0x7ff0;
        t.nonskipped = Some(0);
        rt.inline_push(t);
        assert_eq!(
            jump().stack_base_neg.load(Ordering::Relaxed),
            0,
            "frame cases armed"
        );
        let top = jump().ret_frame.load(Ordering::Relaxed) as *const Entry;
        // SAFETY: `ret_frame` points at a live frame; nothing else runs.
        let top = unsafe { &*top };
        assert_eq!(
            (top.sp, top.plan_key, top.ret_addr),
            (0x7ff0, u64::MAX, u64::MAX)
        );
        Runtime::inline_disarm();
    }

    #[test]
    fn inline_state_arms_for_plain_jumps_only_and_folds_back() {
        let (_turn, mut rt, t) = inline_runtime(7);
        // SAFETY: the boxed state stays in place; nothing else uses it.
        let t = unsafe { &mut *t };
        let a = block(0x1000, 3, JumpExit::None, Vec::new());
        let b = block(0x1006, 2, JumpExit::None, Vec::new());
        rt.setup(t, a, 0x8000);
        rt.setup(t, b, 0x8000);
        rt.setup(t, a, 0x8000);
        rt.inline_push(t);
        let expect = jump().expect.load(Ordering::Relaxed);
        assert_ne!(expect, u64::MAX);
        // `b` (same context, object, section) matches.
        let matches =
            |x: &BlockInfo| expect.wrapping_add(x.jrec.neg_key.load(Ordering::Relaxed)) == 0;
        assert!(matches(b));
        let fresh = block(0x1020, 1, JumpExit::None, Vec::new());
        assert!(!matches(fresh), "a block never set up has no key");
        // SAFETY: the inline paths' view of a cost centre: its counter, then the block's Ir.
        let last_ir = unsafe { *(jump().last_count.load(Ordering::Relaxed) as *const u64).add(1) };
        assert_eq!(last_ir, 3);
        // The stack is empty: the top frame the inline code sees (the sentinel, or the
        // disarmed frame) has the empty stack's top sp.
        let top = jump().ret_frame.load(Ordering::Relaxed) as *const Entry;
        // SAFETY: `ret_frame` points at a live frame; nothing else runs.
        assert_eq!(unsafe { (*top).sp }, i64::MAX as u64);
        // Lazily the state's Ir is the running Ir with the last block's (`a`'s 3) while it
        // is the last one.
        assert_eq!(jump().ir.load(Ordering::Relaxed), t.run[R_IR] + 3);
        // What the inline code does for `b` (its Ir on entry), then folded back: `a`'s
        // execution is charged, `b`'s is not yet.
        let before = (rt.bb_executions(), t.run[R_IR]);
        let a_count = jump().last_count.load(Ordering::Relaxed) as *mut u64;
        // SAFETY: `a`'s cost centre's counter (boxed, never freed); nothing else runs.
        unsafe { *a_count += 1 };
        jump().ir.fetch_add(2, Ordering::Relaxed);
        jump()
            .last_count
            .store(b.jrec.count.load(Ordering::Relaxed), Ordering::Relaxed);
        rt.inline_pull(t);
        assert_eq!(
            (rt.bb_executions(), t.run[R_IR]),
            (before.0 + 1, before.1 + 3)
        );
        assert_eq!(t.last_bbcc, Some(b.last.get().2));
        assert!(core::ptr::eq(t.fast.last_bb, b));
        assert_eq!(jump().ir.load(Ordering::Relaxed), 0);
        // After a block ending in a `rep`: nothing may be entered inline.
        let ctr = Box::leak(Box::new([0u64; 2])).as_mut_ptr();
        let r = block(0x1010, 2, JumpExit::None, vec![(1, ctr)]);
        rt.setup(t, r, 0x8000);
        rt.inline_push(t);
        assert_eq!(jump().expect.load(Ordering::Relaxed), u64::MAX);
        rt.setup(t, b, 0x8000);
        rt.inline_push(t);
        assert!(matches(b));
        // Collection off: nothing may be entered inline.
        rt.toggle_collect(t);
        rt.inline_push(t);
        assert_eq!(jump().expect.load(Ordering::Relaxed), u64::MAX);
        // Eager charging (cache simulation): the entered blocks' Dr/Dw/Bc/Bi deltas fold
        // into the running cost with their Ir, and the return case stays off.
        rt.toggle_collect(t);
        rt.set_simulation(true, false);
        assert!(rt.eager);
        rt.inline_push(t);
        let before = (t.run[R_IR], t.run[R_DR], t.run[R_DW]);
        jump().ir.store(4, Ordering::Relaxed);
        jump().stat[0].store(3, Ordering::Relaxed);
        jump().stat[1].store(1, Ordering::Relaxed);
        rt.inline_pull(t);
        assert_eq!(
            (t.run[R_IR], t.run[R_DR], t.run[R_DW]),
            (before.0 + 4, before.1 + 3, before.2 + 1)
        );
        assert_eq!(jump().stat[0].load(Ordering::Relaxed), 0);
        rt.inline_push(t);
        assert_eq!(jump().exit.load(Ordering::Relaxed), EXIT_OTHER);
        // The stack is empty: the top frame the inline paths see is its sentinel, right
        // below where the first frame goes, and no block matches it.
        let top = jump().ret_frame.load(Ordering::Relaxed) as *const Entry;
        assert!(core::ptr::eq(top, t.stack.as_ptr().wrapping_sub(1)));
        // SAFETY: the sentinel, the first element of the stack's buffer.
        let top = unsafe { &*top };
        assert_eq!((top.ret_addr, top.plan_key), (u64::MAX, u64::MAX));
    }

    #[test]
    fn frame_stack_keeps_its_sentinel_right_below_the_frames() {
        let mut s = FrameStack::with_capacity(2);
        assert!(s.is_empty() && s.capacity() >= 2);
        assert!(s.pop().is_none(), "the sentinel is no frame");
        let mut e = Entry::SPARE;
        e.sp = 7;
        s.push(e);
        s.push(e);
        assert_eq!((s.len(), s[1].sp), (2, 7));
        // SAFETY: the element before the first frame in the stack's buffer.
        let below = unsafe { &*s.as_ptr().wrapping_sub(1) };
        assert_eq!((below.ret_addr, below.plan_key), (u64::MAX, u64::MAX));
        s.truncate(1);
        assert_eq!(s.len(), 1);
        assert!(s.pop().is_some() && s.pop().is_none() && s.is_empty());
        // SAFETY: depth 0 needs no initialised frame.
        unsafe { s.set_len(0) };
        assert!(s.is_empty());
    }

    #[test]
    fn inline_keys_fold_object_and_section_and_refuse_what_does_not_fit() {
        let k = fast_key(3, 1, 0);
        assert_ne!(inline_key(k, 0, 0), inline_key(k, 1, 0));
        assert_ne!(inline_key(k, 0, 0), inline_key(k, 0, 1));
        assert_eq!(inline_key(u64::MAX, 0, 0), None);
        assert_eq!(inline_key(fast_key(0xffff, 0, 0), 0, 0), None);
        assert_eq!(inline_key(k, 1 << 12, 0), None);
        assert_eq!(inline_key(k, 0, 16), None);
        assert!(inline_key(fast_key(0xfffe, 0xfffff, 0xfff), 0xfff, 15).unwrap() < u64::MAX - 1);
    }

    #[test]
    fn fast_keys_separate_threads_and_refuse_what_does_not_fit() {
        assert_ne!(fast_key(3, 1, 0), fast_key(3, 1, 1));
        assert_ne!(fast_key(3, 1, 0), fast_key(3, 0, 0));
        assert_eq!(fast_key(3, 1 << 20, 0), u64::MAX);
        assert_eq!(fast_key(3, 0, 1 << 12), u64::MAX);
    }

    #[test]
    fn new_threads_take_the_lowest_free_slot_and_its_state() {
        let mut rt = runtime(false);
        rt.separate_threads = true;
        let main = rt.thread(0x10);
        let a = rt.thread_start(0x20);
        let b = rt.thread_start(0x30);
        // SAFETY: boxed states owned by `rt`, read while nothing else uses them.
        let tid = |p: *mut ThreadState| unsafe { ((*p).tid, (*p).th) };
        assert_eq!([tid(main), tid(a), tid(b)], [(1, 0), (2, 1), (3, 2)]);
        // SAFETY: as above.
        unsafe { (*a).run[R_IR] = 77 };
        rt.thread_exit(0x20);
        rt.thread_exit(0x30);
        let c = rt.thread_start(0x40);
        assert_eq!(c, a, "slot 2 is reused with its state");
        // SAFETY: as above.
        assert_eq!(unsafe { (*c).run[R_IR] }, 77);
        assert_eq!(rt.thread(0x40), c);
        assert_eq!(
            rt.thread(0x30),
            b,
            "an unknown key takes the next free slot"
        );
    }

    #[test]
    fn taken_conditional_branches_become_jcnd_arcs() {
        let mut rt = runtime(true);
        let t = rt.thread(1);
        // SAFETY: the boxed state lives in `rt.threads`; only `t` is used to reach it.
        let t = unsafe { &mut *t };
        let a = block(0x1000, 3, JumpExit::Cond(0x1000), Vec::new());
        let b = block(0x1006, 2, JumpExit::None, Vec::new());
        for bb in [a, a, a, a, b, b] {
            rt.setup(t, bb, 0x8000);
        }
        let j = take_all(&mut rt);
        assert_eq!(j.len(), 1);
        // Taken 3 times out of 4 executions; the fall-through to b is no arc.
        assert_eq!((j[0].from_addr, j[0].to_addr), (0x1004, 0x1000));
        assert_eq!((j[0].followed, j[0].executed), (3, Some(4)));
        // Written arcs restart.
        assert!(take_all(&mut rt).is_empty());
    }

    #[test]
    fn rep_iterations_become_jumps_of_callgrinds_rep_blocks() {
        let mut rt = runtime(true);
        let t = rt.thread(1);
        // SAFETY: as above.
        let t = unsafe { &mut *t };
        let ctr = Box::leak(Box::new([0u64; 2])).as_mut_ptr();
        // `rep movsb` as the second of three instructions.
        let r = block(0x2000, 3, JumpExit::None, vec![(1, ctr)]);
        let after = block(0x2006, 1, JumpExit::None, Vec::new());
        rt.setup(t, r, 0x8000);
        // SAFETY: the counter pair leaked above; nothing else uses it.
        unsafe { *ctr = 5 };
        let before = rt.bb_executions();
        rt.setup(t, after, 0x8000);
        // Callgrind ran [i0, rep], then [rep] 5 times, then [i2], then `after`.
        assert_eq!(rt.bb_executions() - before, 1 + 5 + 1);
        let mut j = take_all(&mut rt);
        j.sort_by_key(|x| x.block);
        let got: Vec<_> = j
            .iter()
            .map(|x| (x.block, x.from_addr, x.to_addr, x.followed, x.executed))
            .collect();
        assert_eq!(
            got,
            [
                (0x2000, 0x2002, 0x2002, 1, Some(1)),
                (0x2002, 0x2002, 0x2002, 4, Some(5)),
            ]
        );
    }

    /// A block as [`block`], changed by `f` before it is leaked.
    fn block_with(addr: u64, n: u64, f: impl FnOnce(&mut BlockInfo)) -> &'static BlockInfo {
        let mut b = block_info(addr, n, JumpExit::None, Vec::new());
        f(&mut b);
        Box::leak(Box::new(b))
    }

    /// `--cache-sim=yes` (eager charging) with `--collect-jumps` and `--separate-threads`.
    fn simulating() -> Runtime {
        let mut rt = runtime(true);
        rt.separate_threads = true;
        rt.set_simulation(true, false);
        rt
    }

    #[test]
    fn eager_charge_of_a_triggered_block_waits_for_the_trigger() {
        let mut rt = simulating();
        let t = rt.thread(1);
        // SAFETY: as above.
        let t = unsafe { &mut *t };
        let caller = block_with(0x1000, 2, |b| b.exit = Exit::Call);
        let callee = block_with(0x2000, 3, |b| {
            b.fn_id = 1;
            b.is_entry = true;
            b.flags.dump_before = true;
        });
        rt.setup(t, caller, 0x8000);
        assert_eq!(t.run[R_IR], 2, "a block is charged when it starts");
        rt.setup(t, callee, 0x7ff8);
        assert_eq!(rt.triggers, [Trigger::DumpBefore(1)]);
        // The dump the trigger asks for must not see the callee: it has not run yet.
        assert_eq!(t.run[R_IR], 2);
        assert!(t.pending);
        let callee_cc = t.last_bbcc.expect("callee cost centre") as usize;
        assert_eq!(rt.bbccs[callee_cc].count, 0);
        assert_eq!(rt.finished_counts()[callee_cc], 0);
        rt.triggers.clear();
        rt.charge_pending();
        assert!(!t.pending);
        assert_eq!(t.run[R_IR], 5);
        assert_eq!(rt.bbccs[callee_cc].count, 1);
        assert_eq!(
            rt.finished_counts()[callee_cc],
            0,
            "charged, but still running"
        );
    }

    #[test]
    fn zero_of_one_thread_keeps_other_threads_and_running_blocks() {
        let mut rt = simulating();
        let (t1, t2) = (rt.thread(1), rt.thread_start(2));
        // SAFETY: boxed states owned by `rt`; each is used through one reference.
        let (t1, t2) = unsafe { (&mut *t1, &mut *t2) };
        let a = block(0x1000, 2, JumpExit::Direct, Vec::new());
        let b = block(0x1010, 3, JumpExit::None, Vec::new());
        rt.setup(t1, a, 0x8000);
        rt.setup(t1, b, 0x8000);
        rt.setup(t2, a, 0x9000);
        let cc = |t: &ThreadState| t.last_bbcc.expect("cost centre") as usize;
        let (b1, a2) = (cc(t1), cc(t2));
        let a1 = rt.jumps[0].from as usize;
        assert_eq!(
            (rt.bbccs[a1].th, rt.bbccs[b1].th, rt.bbccs[a2].th),
            (0, 0, 1)
        );
        assert_eq!(rt.finished(), {
            let mut v = vec![false; rt.bbccs.len()];
            v[a1] = true;
            v
        });
        // A dump of thread 1: its arcs are taken, then its costs zeroed.
        let fin = rt.finished_counts();
        assert_eq!(rt.take_jumps(Some(0), &fin).len(), 1);
        let slot1 = rt.threads.iter().position(|x| x.key == 1);
        rt.zero(slot1, true);
        // Thread 1: the finished block is zeroed, the running one keeps its charge.
        assert_eq!((rt.bbccs[a1].count, rt.bbccs[b1].count), (0, 1));
        assert_eq!(t1.lastdump, t1.run);
        // Thread 2's cost centres and last-dump cost are untouched.
        assert_eq!(rt.bbccs[a2].count, 1);
        assert_eq!(t2.lastdump[R_IR], 0);
        // The jump arc counts again from zero.
        rt.setup(t1, a, 0x8000);
        rt.setup(t1, b, 0x8000);
        let fin = rt.finished_counts();
        let j = rt.take_jumps(Some(0), &fin);
        assert_eq!(j.len(), 1);
        assert_eq!((j[0].followed, j[0].executed), (1, None));
        assert!(rt.take_jumps(Some(1), &fin).is_empty());
    }

    #[test]
    fn jcnd_executions_are_finished_executions_with_eager_charging() {
        let mut rt = simulating();
        let t = rt.thread(1);
        // SAFETY: as above.
        let t = unsafe { &mut *t };
        let a = block(0x1000, 3, JumpExit::Cond(0x1000), Vec::new());
        for _ in 0..3 {
            rt.setup(t, a, 0x8000);
        }
        // Three executions charged, the third still running: two finished, both taken.
        let j = take_all(&mut rt);
        assert_eq!(j.len(), 1);
        assert_eq!((j[0].followed, j[0].executed), (2, Some(2)));
    }

    #[test]
    fn periodic_dump_is_due_after_more_than_n_blocks() {
        let mut rt = runtime(false);
        rt.set_dump_every(3);
        let t = rt.thread(1);
        // SAFETY: as above.
        let t = unsafe { &mut *t };
        let a = block(0x1000, 1, JumpExit::None, Vec::new());
        for _ in 0..3 {
            rt.setup(t, a, 0x8000);
            assert!(!rt.dump_due());
        }
        rt.setup(t, a, 0x8000);
        assert!(rt.dump_due());
        assert!(
            !rt.setup_fast::<false>(t, a, 0x8000),
            "the fast path declines"
        );
        rt.every_dumped();
        assert!(!rt.dump_due());
    }
}
