//! Instrumentation: what a tool sees of a block (`BlockView`) and the primitives it may ask
//! for (`Instrumenter`), turned into host code by `emit` inside the translation.
//!
//! A tool's `instrument` hook gets a read-only view of the decoded block and records requests
//! (bump a counter once per block execution, count the extra entries of a `rep` string
//! instruction, check an instruction fetch or a data access against the most-recently-used way
//! of a cache and call an out-of-line routine when that check fails — or do the whole L1
//! lookup inline and call out only on an L1 miss —, call a routine with arguments). The translator asks this module to emit them at the right places.
//!
//! # Invariants
//! * Emitted instrumentation keeps the guest state intact at every guest instruction
//!   boundary: it borrows registers through `gs:` slots and never touches the guest stack;
//!   arithmetic flags are saved (`lahf`/`seto`) only where they are live. Live flags a data
//!   check saved may stay saved through instructions that neither read nor write them, up
//!   to the next check (`emit`'s `Plan::stashed`); a fault there takes them from the save
//!   slot (`unstash_flags`).
//! * Out-of-line routines run on the thread's helper stack (`helper::rgrind_helper_call`),
//!   with every caller-saved general register, the flags and the extended state preserved.
//! * Cost arrays (`Instrumenter::cost_array`) are keyed by the block's guest start and size;
//!   a retranslated block gets the same array back, so no counts are lost.
//!
//! Not done here: deciding what to count (the tool does), or any tool state.
pub mod arena;
// Callgrind (callgrind branch): per-thread key and host-FS switch for tool routines.
pub mod calltrack;
pub(crate) mod emit;
mod fetch_slots;
pub mod helper;

use iced_x86::{
    Code, FlowControl, Instruction, InstructionInfoFactory, Mnemonic, OpAccess, Register,
    RflagsBits,
};

/// How an instruction touches one memory location.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessKind {
    /// Loaded only (also conditional loads such as `cmovcc r, [m]`).
    Read,
    /// Stored only (also conditional stores).
    Write,
    /// Loaded and stored back at the same address (read-modify-write, `cmpxchg`).
    Modify,
}

/// One memory location an instruction uses, in the instruction's order.
#[derive(Clone, Copy, Debug)]
pub struct MemAccess {
    pub kind: AccessKind,
    /// Bytes accessed (the operand size; 0 when unknown).
    pub size: u32,
    /// Element by element (AVX gathers and masked moves): each element is a data reference
    /// of its own, named by [`DataRef::lane`].
    pub lanes: Option<Lanes>,
    pub(crate) seg: Register,
    pub(crate) base: Register,
    pub(crate) index: Register,
    pub(crate) scale: u32,
    pub(crate) displ: u64,
    /// What the address adds to `base + index * scale + displ`.
    pub(crate) term: AddressTerm,
}

/// A part of an effective address that only the run time knows beyond base, index and
/// displacement; such an address is computed out of line, where the flags are free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AddressTerm {
    None,
    /// `xlat`: `al`, zero-extended (the index slot holds no register then).
    ZeroExtendedAl,
    /// `bt`/`bts`/`btr`/`btc` with a register bit offset on memory: the signed offset
    /// divided by 8 (rounded down), the byte that holds the bit, as VEX reads it.
    BitOffset(Register),
    /// The same on a register spilled to the stack ([`vex_bit_spill`]): the offset taken
    /// modulo the register's bits, then divided by 8.
    MaskedBitOffset(Register),
}

/// The elements of an element-wise access (for `xsave`/`xrstor`, only the x87 state is one;
/// the tool places it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lanes {
    pub count: u8,
    /// Bytes per element.
    pub elem: u8,
    /// Where element `i` lies: at `base + index[i] * scale + displ` (a gather; `index` is
    /// the vector register, `index_bytes` the width of its elements), else at the effective
    /// address plus `i * elem`.
    pub(crate) index: Option<(Register, u8)>,
    /// What enables element `i`: the sign bit of element `i` (of `elem` bytes) of a vector
    /// register, or bit `i` of an opmask register (`k1`-`k7`) or of a general register.
    pub(crate) mask: Register,
    /// What a disabled element does.
    pub masked_off: MaskedOff,
}

impl Lanes {
    /// The data reference of element `i` of access `access`, `size` bytes (the element
    /// size, clamped by the tool), counted at `enabled_count` (null for none) when it is
    /// skipped while disabled.
    pub fn element(&self, access: usize, i: u8, size: u32, enabled_count: *mut u64) -> DataRef {
        let offset = if self.index.is_some() {
            0
        } else {
            i32::from(i) * i32::from(self.elem)
        };
        DataRef {
            lane: Some(LaneRef {
                index: i,
                enabled_count,
            }),
            ..DataRef::at(access, offset, size)
        }
    }
}

/// What a disabled element of an element-wise access does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaskedOff {
    /// Nothing: the element's access is skipped (`vmaskmov*`, `vpmaskmov*`).
    Skipped,
    /// An access at the stack pointer instead: VEX's gathers load every element, a
    /// disabled one from `rsp`, so Cachegrind and Callgrind count and simulate it.
    AtStackPointer,
}

/// What an instruction does to control flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowKind {
    Next,
    /// Direct unconditional jump.
    Jump,
    /// Conditional direct branch (`jcc`, `loop*`, `jrcxz`).
    CondBranch,
    /// `jmp r/m`.
    IndirectJump,
    Call,
    /// `call r/m`.
    IndirectCall,
    Return,
    /// `syscall`, `cpuid`, a client request, or an instruction that traps.
    Other,
}

/// `rep` string-instruction kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepKind {
    None,
    /// `rep` on movs/stos/lods/ins/outs: runs while rcx != 0.
    Plain,
    /// `repe`/`repne` on cmps/scas: also stops on the condition.
    Cond,
}

/// One guest instruction of a block.
pub struct InsnView<'a> {
    pub addr: u64,
    pub len: u32,
    pub insn: &'a Instruction,
    pub accesses: Vec<MemAccess>,
    pub flow: FlowKind,
    pub rep: RepKind,
    /// `lock` prefix, or `xchg` with a memory operand (always locked).
    pub locked: bool,
    /// Arithmetic flags read and written (iced-x86 `RflagsBits`).
    pub flags_read: u32,
    pub flags_written: u32,
    /// The 19-byte client-request sequence (counts as one instruction).
    pub client_request: bool,
}

/// A decoded guest block, as tools see it.
pub struct BlockView<'a> {
    /// Guest address of the first instruction.
    pub start: u64,
    /// Guest address after the last instruction.
    pub end: u64,
    pub insns: Vec<InsnView<'a>>,
}

/// An out-of-line routine: `func(arg0, a1, a2) -> u64`. It must not allocate, lock, log,
/// touch thread-local storage or panic (it runs on the helper stack with the guest's FS).
#[derive(Clone, Copy, Debug)]
pub struct Helper {
    pub func: extern "C" fn(u64, u64, u64) -> u64,
    pub arg0: u64,
    /// The routine (and everything it calls) uses no vector or x87 register and no string
    /// instruction: it is called through the lean trampoline, which saves neither vector
    /// registers nor the direction flag. The project's tests check this on the rgrind binary
    /// for every helper marked so (`tests/tests/all/helpers.rs`).
    pub integer_only: bool,
}

/// The constants of a cache level's flat layout used by the inline MRU-way check: the tag
/// array (row-major by set, way 0 = most recently used), `sets - 1`, `log2(line)`, ways,
/// and the bytes from one set's row to the next (at least `assoc * 8`; the ways past
/// `assoc` are padding). The tag array address must stay valid for the whole run.
#[derive(Clone, Copy, Debug)]
pub struct MruCache {
    pub tags: u64,
    pub set_mask: u64,
    pub line_bits: u32,
    pub assoc: u64,
    pub row_bytes: u64,
}

/// An I1 kept as slots with stamps (`cachesim::SlotCache`): set `s`'s clock (`u64`) is at
/// `base + s * row_bytes`, its slots (a line `u64`, then its stamp `u64`) from 16 bytes on.
/// A line stays in its slot until evicted, so a fetch check tests one slot and, on a hit,
/// does the LRU update itself: `clock += 1; stamp = clock`. The words must stay where they
/// are for the whole run.
#[derive(Clone, Copy, Debug)]
pub struct SlotI1 {
    pub base: u64,
    pub row_bytes: u64,
    pub set_mask: u64,
    pub line_bits: u32,
    /// The first argument of `touch` and `locate`.
    pub cache: u64,
    /// `touch(cache, line)`: the lookup and LRU update of one line; returns the address of
    /// the slot that now holds it, plus 1 if it missed. Integer-only, called from the check's
    /// slow path.
    pub touch: unsafe extern "C" fn(u64, u64) -> u64,
    /// `locate(cache, line)`: the address of the slot that holds the line, or else of the
    /// one a miss of it would fill now; changes nothing. Called at translation (a block
    /// translated for new code runs at once, and its first fetch misses into that slot).
    pub locate: unsafe extern "C" fn(u64, u64) -> u64,
}

impl SlotI1 {
    /// Address of `line`'s set's clock.
    pub fn clock(&self, line: u64) -> u64 {
        self.base + (line & self.set_mask) * self.row_bytes
    }
}

/// The LL's tag rows as a prefetch hint: set `s`'s row starts at `base + s * row_bytes`.
/// Only read ahead, never written by generated code, so a stale hint costs time, not counts.
#[derive(Clone, Copy, Debug)]
pub struct LlRows {
    pub base: u64,
    pub row_bytes: u64,
}

/// A queue that takes the LL parts of L1 misses (`AfterMiss::queue`), for a simulator that
/// runs them elsewhere in order. The record at `producer` is two words: the next entry's
/// address, and the address at which `segment_end` must run (after the entry that reaches
/// it). An entry is 16 bytes: the address accessed, then `slot << 8 | size` with `slot` the
/// `u64` that counts the access's LL miss.
#[derive(Clone, Copy, Debug)]
pub struct LlQueue {
    pub producer: u64,
    /// Integer-only; called with the registers saved, its arguments unused.
    pub segment_end: Helper,
}

/// What an after-miss helper does for an L1 miss that hits in the LL (`AfterMiss::ll_mru`).
#[derive(Clone, Copy, Debug)]
pub enum LlHitCount {
    /// Adds one to the `u64` at `helper.arg0` (Cachegrind: the instruction's miss slot).
    Arg0,
    /// Callgrind: unless the `u64` at `base` is 0, adds one to word `index * stride + slot`
    /// of the array it points at, where `stride` is the `u64` at `stride`; and one to word
    /// `slot` of the array the `u64` at `total` points at. The three addresses live for the
    /// process.
    CostCentre {
        base: u64,
        stride: u64,
        total: u64,
        index: u32,
        slot: u32,
    },
}

/// What an inline L1 lookup (`fetch_check_l1`/`data_check_l1`) does after an L1 miss of a
/// single-line access.
#[derive(Clone, Copy, Debug)]
pub struct AfterMiss {
    /// The levels behind L1: `helper(helper.arg0, addr, size)`.
    pub helper: Helper,
    /// The LL's MRU tags, if the generated code may look there first: `tags` is set 0's MRU
    /// tag, `row_bytes` the distance between sets' MRU tags (8 in a per-set copy).
    /// A line found there is an LL hit that changes no LL state, so the code only counts it
    /// as `ll_hit` says — which must be all the helper does in that case — and skips the
    /// call. Requires `whole_lines`.
    pub ll_mru: Option<MruCache>,
    /// Where the LL's rows lie (with `ll_mru`, whose set mask they share): the miss path
    /// asks the host for the row the helper is about to read.
    pub ll_rows: Option<LlRows>,
    /// How the helper counts an LL hit (with `ll_mru`).
    pub ll_hit: LlHitCount,
    /// An L1 line lies within one LL line, so the LL part of an access within one L1 line
    /// is the same for the line's first byte: the generated code may pass that instead of
    /// the access's address (and 1 as the size), and need not recompute the address.
    pub whole_lines: bool,
    /// With `whole_lines`: an access within one L1 line that misses there is counted at
    /// `helper.arg0` and its LL part queued (to be counted at `helper.arg0 + 8` on an LL
    /// miss) by the generated code itself, instead of the helper call. `ll_mru` is then the
    /// queue's own copy of the LL's MRU lines, which the code keeps: a line not found there
    /// becomes its set's before it is queued. The helper still takes the rest (an access
    /// across two lines).
    pub queue: Option<LlQueue>,
}

/// Value of the second argument of a `call` request.
#[derive(Clone, Copy, Debug)]
pub enum CallArg {
    Imm(u64),
    /// 1 if the conditional branch at the instruction is taken, else 0.
    Taken,
    /// The target of the indirect jump/call at the instruction.
    Target,
    /// The guest stack pointer before the instruction (Callgrind's call tracking).
    Sp,
}

/// Which bytes of an instruction's memory access a data check covers.
#[derive(Clone, Copy, Debug)]
pub struct DataRef {
    /// Index into `InsnView::accesses`.
    pub access: usize,
    /// Added to the effective address.
    pub offset: i32,
    /// Bytes (already clamped by the tool to its smallest line size).
    pub size: u32,
    /// For an element-wise access ([`MemAccess::lanes`]): the element.
    pub lane: Option<LaneRef>,
}

/// One element of an element-wise access.
#[derive(Clone, Copy, Debug)]
pub struct LaneRef {
    pub index: u8,
    /// Incremented each time the element is enabled ([`MaskedOff::Skipped`] elements
    /// count at run time); null for none.
    pub enabled_count: *mut u64,
}

impl DataRef {
    /// Access `access` at `offset` of `size` bytes, not element-wise.
    pub fn at(access: usize, offset: i32, size: u32) -> Self {
        Self {
            access,
            offset,
            size,
            lane: None,
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Op {
    /// +1 per block execution, anywhere in the block.
    CountBlock(*mut u64),
    /// Extra entries (and, for repe/repne, iterations) of the rep instruction.
    Rep {
        insn: usize,
        entries: *mut u64,
        iterations: *mut u64,
    },
    Fetch {
        insn: usize,
        cache: &'static SlotI1,
        /// The levels behind the I1.
        after_miss: AfterMiss,
    },
    Data {
        insn: usize,
        dref: DataRef,
        cache: MruCache,
        helper: Helper,
        /// As for `Fetch`.
        after_miss: Option<AfterMiss>,
    },
    Call {
        insn: usize,
        helper: Helper,
        arg1: CallArg,
        arg2: u64,
    },
    /// Callgrind (clgsim): the guest branches of a `rep` string instruction, reported at each
    /// entry and, for `repe`/`repne`, after each iteration.
    RepBranch {
        insn: usize,
        helper: Helper,
        invert_entry: bool,
    },
    /// Callgrind (clgspeed): `fast` (integer-only) first; `slow` only if it returned non-zero.
    CallFallback {
        insn: usize,
        fast: Helper,
        slow: Helper,
        arg1: CallArg,
        arg2: u64,
    },
    /// Callgrind (clginline): the plain-jump case inline (see `calltrack::JumpState`), and
    /// `CallFallback`'s calls when it does not apply.
    CallFallbackInline {
        insn: usize,
        fast: Helper,
        slow: Helper,
        arg1: CallArg,
        arg2: u64,
        jump: calltrack::InlineJump,
    },
}

// SAFETY: the raw pointers in `Op` point into cost arrays that live for the whole process
// (`arena`); they are only embedded into generated code, never dereferenced here.
unsafe impl Send for Op {}

/// Where a tool's requests for one block are collected.
pub struct Instrumenter {
    pub(crate) ops: Vec<Op>,
    /// `disarm_if_unwound`'s state and the offset of a frame's `sp`.
    pub(crate) unwind_watch: Option<(&'static calltrack::JumpState, i32)>,
    key: (u64, u64),
    /// Where the translation will go (cost arrays are placed near it).
    host: u64,
}

impl Instrumenter {
    pub(crate) fn new(start: u64, end: u64, host: u64) -> Self {
        Self {
            ops: Vec::new(),
            unwind_watch: None,
            key: (start, end),
            host,
        }
    }

    /// The block's cost array of `n` zeroed `u64`s; the same array is returned when the same
    /// guest block (start and end) is translated again. Valid for the rest of the process.
    pub fn cost_array(&mut self, n: usize) -> *mut u64 {
        arena::cost_array(self.key.0, self.key.1, n, self.host)
    }

    /// Adds 1 to `*counter` each time the block runs. In a block that loops on itself the
    /// count may be spread over extra counters: read `*counter` only after
    /// [`crate::tool::fold_block_counters`].
    pub fn count_block(&mut self, counter: *mut u64) {
        self.ops.push(Op::CountBlock(counter));
    }

    /// For a `rep` string instruction: adds to `*entries` each extra time the instruction is
    /// entered (Valgrind counts one per iteration that continues plus the first), and for
    /// `repe`/`repne` adds 1 to `*iterations` per iteration.
    pub fn count_rep(&mut self, insn: usize, entries: *mut u64, iterations: *mut u64) {
        self.ops.push(Op::Rep {
            insn,
            entries,
            iterations,
        });
    }

    /// Checks the fetch of instruction `insn` in the I1 `cache` inline: per line it fetches,
    /// the slot the line was found in last time ([`SlotI1`]; chosen at translation, then
    /// kept by the slow path); when every line is there, a hit, whose LRU update the
    /// check makes itself (the set's clock advanced, the slot stamped). Otherwise
    /// `cache.touch` does the lookup, line by line, the check is pointed at the slots it
    /// returns, and `after_miss` runs on an L1 miss for the levels behind it.
    ///
    /// A block whose first request (after `count_block`) is the fetch check of instruction 0
    /// within one line gets a second entry past that check, which direct branches whose own
    /// last fetch left the line most recently used are chained to: a fetch of it there is a
    /// hit on the most recently used line, which changes the order of none (as Cachegrind,
    /// which charges the hit only as an Ir). So `after_miss` may only be relied on to run
    /// for misses.
    pub fn fetch_check_l1(&mut self, insn: usize, cache: &'static SlotI1, after_miss: AfterMiss) {
        self.ops.push(Op::Fetch {
            insn,
            cache,
            after_miss,
        });
    }

    /// Checks a data access of instruction `insn` against the MRU way of `cache` inline and
    /// calls `helper(arg0, addr, size)` when it is not an MRU hit. For a `rep` instruction
    /// the check runs once per iteration.
    pub fn data_check(&mut self, insn: usize, dref: DataRef, cache: MruCache, helper: Helper) {
        self.ops.push(Op::Data {
            insn,
            dref,
            cache,
            helper,
            after_miss: None,
        });
    }

    /// Like `data_check`, with the L1 lookup of a single-line access done inline as in
    /// `fetch_check_l1`: `after_miss` runs only on an L1 miss (the L1 tags already updated),
    /// `helper(arg0, addr, size)` for an access spanning two lines.
    pub fn data_check_l1(
        &mut self,
        insn: usize,
        dref: DataRef,
        cache: MruCache,
        helper: Helper,
        after_miss: AfterMiss,
    ) {
        self.ops.push(Op::Data {
            insn,
            dref,
            cache,
            helper,
            after_miss: Some(after_miss),
        });
    }

    /// Calls `fast(fast.arg0, arg1, arg2)` through the lean trampoline just before
    /// instruction `insn` runs and, only if it returns non-zero, then
    /// `slow(slow.arg0, arg1, arg2)` (same `arg1` value). `fast` must be integer-only
    /// (`Helper::integer_only` is forced on for it). Added for Callgrind's per-block fast path.
    pub fn call_with_fallback(
        &mut self,
        insn: usize,
        fast: Helper,
        slow: Helper,
        arg1: CallArg,
        arg2: u64,
    ) {
        self.ops.push(Op::CallFallback {
            insn,
            fast: Helper {
                integer_only: true,
                ..fast
            },
            slow,
            arg1,
            arg2,
        });
    }

    /// `call_with_fallback`, preceded by Callgrind's plain-jump case done inline, flag-free and
    /// without any call (see [`calltrack::JumpState`] for what it checks and updates); the
    /// calls run only when it does not apply. Added for Callgrind (clginline).
    pub fn call_with_fallback_inline(
        &mut self,
        insn: usize,
        fast: Helper,
        slow: Helper,
        arg1: CallArg,
        arg2: u64,
        jump: calltrack::InlineJump,
    ) {
        self.ops.push(Op::CallFallbackInline {
            insn,
            fast: Helper {
                integer_only: true,
                ..fast
            },
            slow,
            arg1,
            arg2,
            jump,
        });
    }

    /// Callgrind (clginline), for a block that ends plainly (its successor may take the short
    /// form of the jump case): where the block may leave `rsp` above where it found it, after
    /// its last write to `rsp`, disarms `state`'s expected key when `rsp` lies above the top
    /// frame's sp (`state.ret_frame`'s, the frame's `sp` at byte `sp` of it). The short form
    /// then needs no unwind check of its own: `rsp <=` that sp holds at the start of every
    /// block an inline case enters, and a block that does not raise `rsp` keeps it so for the
    /// next.
    pub fn disarm_if_unwound(&mut self, state: &'static calltrack::JumpState, sp: i32) {
        self.unwind_watch = Some((state, sp));
    }

    /// For a `rep` string instruction `insn`: calls `helper(arg0, taken, addr)` (`addr` the
    /// instruction's address) for each branch VEX makes of it, in execution order: at every
    /// entry the `rcx == 0` test (`taken` = 1 when rcx is 0, inverted when `invert_entry`),
    /// and for `repe`/`repne`, after every iteration, the test that repeats it (`taken` = 1
    /// when it goes on). The instruction then runs as a loop. Added for Callgrind's branch
    /// simulation (clgsim).
    pub fn rep_branch(&mut self, insn: usize, helper: Helper, invert_entry: bool) {
        self.ops.push(Op::RepBranch {
            insn,
            helper,
            invert_entry,
        });
    }

    /// Calls `helper(arg0, arg1, arg2)` just before instruction `insn` runs. The helper
    /// must not change the caches whose most-recently-used ways fetch checks test: an entry
    /// may skip a fetch check that an earlier fetch of the same line makes a hit
    /// (`cache::Block::line_entry`).
    pub fn call(&mut self, insn: usize, helper: Helper, arg1: CallArg, arg2: u64) {
        self.ops.push(Op::Call {
            insn,
            helper,
            arg1,
            arg2,
        });
    }
}

fn flow_kind(insn: &Instruction, client_request: bool) -> FlowKind {
    if client_request || matches!(insn.code(), Code::Syscall | Code::Cpuid) {
        return FlowKind::Other;
    }
    match insn.flow_control() {
        FlowControl::Next => FlowKind::Next,
        FlowControl::UnconditionalBranch => FlowKind::Jump,
        FlowControl::ConditionalBranch => FlowKind::CondBranch,
        FlowControl::IndirectBranch => FlowKind::IndirectJump,
        FlowControl::Call => FlowKind::Call,
        FlowControl::IndirectCall => FlowKind::IndirectCall,
        FlowControl::Return => FlowKind::Return,
        _ => FlowKind::Other,
    }
}

/// Instructions whose memory operand is no data access for Cachegrind.
fn no_data_access(code: Code) -> bool {
    use iced_x86::Mnemonic as M;
    matches!(
        code.mnemonic(),
        M::Lea
            | M::Nop
            | M::Prefetch
            | M::Prefetchw
            | M::Prefetchnta
            | M::Prefetcht0
            | M::Prefetcht1
            | M::Prefetcht2
            | M::Prefetchwt1
            | M::Clflush
            | M::Clflushopt
            | M::Clwb
            | M::Cldemote
            | M::Bndcl
            | M::Bndcu
            | M::Bndcn
            | M::Bndmk
    )
}

/// Fills in what a plain memory operand does not say: the address terms of `xlat` and of
/// the bit instructions with a register offset, and the elements of gathers and scatters
/// (`vsib`: the index width; 0 for none) and of AVX's masked moves. AVX-512's other masked
/// accesses stay one access at the operand's address.
fn element_wise(insn: &Instruction, acc: &mut MemAccess, vsib: u8) {
    use iced_x86::{EncodingKind, OpKind};
    let m = insn.mnemonic();
    if m == Mnemonic::Xlatb {
        acc.index = Register::None;
        acc.term = AddressTerm::ZeroExtendedAl;
        acc.size = 1;
        return;
    }
    if matches!(
        m,
        Mnemonic::Bt | Mnemonic::Bts | Mnemonic::Btr | Mnemonic::Btc
    ) && insn.op0_kind() == OpKind::Memory
        && insn.op1_kind() == OpKind::Register
    {
        acc.term = AddressTerm::BitOffset(insn.op1_register());
        acc.size = 1;
        return;
    }
    if matches!(
        m,
        Mnemonic::Xsave
            | Mnemonic::Xsave64
            | Mnemonic::Xsavec
            | Mnemonic::Xsavec64
            | Mnemonic::Xsaveopt
            | Mnemonic::Xsaveopt64
            | Mnemonic::Xrstor
            | Mnemonic::Xrstor64
    ) {
        // The x87 state, the area's first element: only when eax (the requested-feature
        // mask's low half) asks for it, as VEX does; glibc's lazy-binding trampoline does not.
        acc.lanes = Some(Lanes {
            count: 1,
            elem: 0,
            index: None,
            mask: Register::EAX,
            masked_off: MaskedOff::Skipped,
        });
        return;
    }
    if insn.encoding() == EncodingKind::EVEX {
        // AVX-512's gathers and scatters: element i where the opmask's bit i is set.
        let data = match m {
            _ if is_gather(m) => insn.op0_register(),
            Mnemonic::Vscatterdps
            | Mnemonic::Vscatterqps
            | Mnemonic::Vscatterdpd
            | Mnemonic::Vscatterqpd
            | Mnemonic::Vpscatterdd
            | Mnemonic::Vpscatterqd
            | Mnemonic::Vpscatterdq
            | Mnemonic::Vpscatterqq => insn.op1_register(),
            _ => return,
        };
        acc.lanes = gathered(acc, vsib, data, (insn.op_mask(), MaskedOff::Skipped));
        return;
    }
    if insn.encoding() != EncodingKind::VEX {
        return;
    }
    let (elem, mask, vector) = match m {
        _ if is_gather(m) => {
            let mask = (insn.op2_register(), MaskedOff::AtStackPointer);
            acc.lanes = gathered(acc, vsib, insn.op0_register(), mask);
            return;
        }
        Mnemonic::Vmaskmovps | Mnemonic::Vpmaskmovd => (4, insn.op1_register(), acc.size),
        Mnemonic::Vmaskmovpd | Mnemonic::Vpmaskmovq => (8, insn.op1_register(), acc.size),
        _ => return,
    };
    acc.lanes = Some(Lanes {
        count: (vector / elem) as u8,
        elem: elem as u8,
        index: None,
        mask,
        masked_off: MaskedOff::Skipped,
    });
}

/// The accesses VEX makes for `bt`/`bts`/`btr`/`btc` on a register with a register bit
/// offset (`dis_bt_G_E`): it stores the register 288 bytes below rsp (past the red zone),
/// tests (and for the others sets, clears or flips) the bit in memory, a byte, and loads the
/// register back unless it only tested. Cachegrind and Callgrind count and simulate them.
fn vex_bit_spill(insn: &Instruction) -> Vec<MemAccess> {
    use iced_x86::OpKind;
    let m = insn.mnemonic();
    if !matches!(
        m,
        Mnemonic::Bt | Mnemonic::Bts | Mnemonic::Btr | Mnemonic::Btc
    ) || insn.op0_kind() != OpKind::Register
        || insn.op1_kind() != OpKind::Register
    {
        return Vec::new();
    }
    let spill = MemAccess {
        kind: AccessKind::Write,
        size: insn.op0_register().size() as u32,
        lanes: None,
        seg: Register::None,
        base: Register::RSP,
        index: Register::None,
        scale: 1,
        displ: (-288i64) as u64,
        term: AddressTerm::None,
    };
    let bit = MemAccess {
        kind: if m == Mnemonic::Bt {
            AccessKind::Read
        } else {
            AccessKind::Modify
        },
        size: 1,
        term: AddressTerm::MaskedBitOffset(insn.op1_register()),
        ..spill
    };
    let reload = MemAccess {
        kind: AccessKind::Read,
        ..spill
    };
    if m == Mnemonic::Bt {
        vec![spill, bit]
    } else {
        vec![spill, bit, reload]
    }
}

/// AVX2's and AVX-512's gathers.
fn is_gather(m: Mnemonic) -> bool {
    matches!(
        m,
        Mnemonic::Vgatherdps
            | Mnemonic::Vgatherqps
            | Mnemonic::Vgatherdpd
            | Mnemonic::Vgatherqpd
            | Mnemonic::Vpgatherdd
            | Mnemonic::Vpgatherqd
            | Mnemonic::Vpgatherdq
            | Mnemonic::Vpgatherqq
    )
}

/// The elements of a gather or scatter `acc` (`vsib`: its index width) to or from vector
/// register `data`: as many as both `data` and the index register hold.
fn gathered(
    acc: &MemAccess,
    vsib: u8,
    data: Register,
    (mask, masked_off): (Register, MaskedOff),
) -> Option<Lanes> {
    let (elem, index) = (acc.size, acc.index);
    if vsib == 0 || elem == 0 {
        return None;
    }
    let count = (data.size() as u32 / elem).min(index.size() as u32 / u32::from(vsib));
    Some(Lanes {
        count: count as u8,
        elem: elem as u8,
        index: Some((index, vsib)),
        mask,
        masked_off,
    })
}

/// Builds the tool's view of a decoded block.
pub(crate) fn block_view<'a>(
    insns: &'a [Instruction],
    client_requests: &[bool],
    factory: &mut InstructionInfoFactory,
) -> BlockView<'a> {
    let start = insns.first().map_or(0, |i| i.ip());
    let end = insns.last().map_or(start, |i| i.next_ip());
    let views = insns
        .iter()
        .zip(client_requests)
        .map(|(insn, &cr)| {
            let mut accesses = Vec::new();
            if !cr && !no_data_access(insn.code()) {
                for m in factory.info(insn).used_memory() {
                    let kind = match m.access() {
                        OpAccess::Read | OpAccess::CondRead => AccessKind::Read,
                        OpAccess::Write | OpAccess::CondWrite => AccessKind::Write,
                        OpAccess::ReadWrite | OpAccess::ReadCondWrite => AccessKind::Modify,
                        _ => continue,
                    };
                    let mut acc = MemAccess {
                        kind,
                        size: m.memory_size().size() as u32,
                        lanes: None,
                        seg: m.segment(),
                        base: m.base(),
                        index: m.index(),
                        scale: m.scale(),
                        displ: m.displacement(),
                        term: AddressTerm::None,
                    };
                    element_wise(insn, &mut acc, m.vsib_size() as u8);
                    accesses.push(acc);
                }
                accesses.extend(vex_bit_spill(insn));
            }
            let rep = if insn.is_string_instruction() {
                if matches!(
                    insn.code().mnemonic(),
                    iced_x86::Mnemonic::Cmpsb
                        | iced_x86::Mnemonic::Cmpsw
                        | iced_x86::Mnemonic::Cmpsd
                        | iced_x86::Mnemonic::Cmpsq
                        | iced_x86::Mnemonic::Scasb
                        | iced_x86::Mnemonic::Scasw
                        | iced_x86::Mnemonic::Scasd
                        | iced_x86::Mnemonic::Scasq
                ) && (insn.has_repe_prefix() || insn.has_repne_prefix())
                {
                    RepKind::Cond
                } else if insn.has_rep_prefix() {
                    RepKind::Plain
                } else {
                    RepKind::None
                }
            } else {
                RepKind::None
            };
            let locked = insn.has_lock_prefix()
                || (insn.code().mnemonic() == iced_x86::Mnemonic::Xchg
                    && (0..insn.op_count()).any(|i| insn.op_kind(i) == iced_x86::OpKind::Memory));
            InsnView {
                addr: insn.ip(),
                len: insn.len() as u32,
                insn,
                accesses,
                flow: flow_kind(insn, cr),
                rep,
                locked,
                flags_read: insn.rflags_read(),
                flags_written: flags_written(insn),
                client_request: cr,
            }
        })
        .collect();
    BlockView {
        start,
        end,
        insns: views,
    }
}

/// rsp's bit in the register masks (bit n = register n, rax = 0 .. r15 = 15): never dead,
/// never a scratch.
const RSP: u16 = 1 << 4;

/// The six arithmetic flags.
const ARITH: u32 = RflagsBits::OF
    | RflagsBits::SF
    | RflagsBits::ZF
    | RflagsBits::AF
    | RflagsBits::CF
    | RflagsBits::PF;

/// The flags an instruction writes, clears, sets or leaves undefined (iced-x86
/// `RflagsBits`).
fn flags_written(insn: &Instruction) -> u32 {
    insn.rflags_written() | insn.rflags_cleared() | insn.rflags_set() | insn.rflags_undefined()
}

/// Whether an instruction's flag writes may not happen (shift/rotate counts can be 0).
fn writes_conditionally(insn: &Instruction) -> bool {
    use iced_x86::Mnemonic as M;
    matches!(
        insn.code().mnemonic(),
        M::Shl | M::Shr | M::Sar | M::Sal | M::Rol | M::Ror | M::Rcl | M::Rcr | M::Shld | M::Shrd
    )
}

/// `live[i]`: whether the arithmetic flags are live just before instruction `i` (and
/// `live[n]` at the block end: `exit.flags_live`).
pub(crate) fn flags_liveness(view: &BlockView, exit: ExitLiveness) -> Vec<bool> {
    let n = view.insns.len();
    let mut live = vec![true; n + 1];
    live[n] = exit.flags_live;
    let mut cur = if exit.flags_live { ARITH } else { 0 };
    for i in (0..n).rev() {
        let v = &view.insns[i];
        let killed = if writes_conditionally(v.insn) || v.flow != FlowKind::Next {
            0
        } else {
            v.flags_written & ARITH
        };
        cur = (cur & !killed) | (v.flags_read & ARITH);
        if v.rep != RepKind::None || v.client_request {
            cur = ARITH;
        }
        live[i] = cur != 0;
    }
    live
}

/// `transparent[i]`: instruction `i` neither reads nor writes an arithmetic flag and goes on
/// to the next instruction (no `rep`, no client request): its own code may run while the
/// guest's flags are held in `instr_flags` between two data checks (`emit::Plan`).
pub(crate) fn flags_transparent(view: &BlockView) -> Vec<bool> {
    view.insns
        .iter()
        .map(|v| {
            v.flow == FlowKind::Next
                && v.rep == RepKind::None
                && !v.client_request
                && (v.flags_read | v.flags_written) & ARITH == 0
        })
        .collect()
}

/// The guest's rflags from the host's `efl` at a point where the arithmetic flags were held
/// in `instr_flags` (`held`: rax after `lahf; seto al`): SF ZF AF PF CF from ah, OF from al.
pub(crate) use emit::{dump_shared_scans, map_shared_scans};

pub fn unstash_flags(efl: u64, held: u64) -> u64 {
    const LAHF_BITS: u64 = 0xd5; // SF ZF AF PF CF
    const OF: u64 = 0x800;
    let ah = (held >> 8) & LAHF_BITS;
    let of = if held & 1 != 0 { OF } else { 0 };
    (efl & !(LAHF_BITS | OF)) | ah | of
}

/// For each instruction, the general-purpose registers (bit n = register n, rax = 0 .. r15 =
/// 15; never rsp) whose guest value is dead just before it: the instruction does not read
/// them, and it or a later instruction of the block overwrites them before any read. Code
/// placed before the instruction may use them as scratch without saving them.
///
/// Only instructions that always write their destination count as overwriting it (a
/// whitelist: moves, loads, `lea`, `pop`, three-operand `imul`, bit counts, ...): `rdssp`, for
/// one, leaves its destination alone without shadow stacks, and `bsf` on zero, `cmov` and
/// `cmpxchg` may not write. A write of 8 or 16 bits keeps the rest of the register, so it is
/// a read. At the end of the block what `exit` says is dead is dead (after the block's last
/// instruction, which may be control flow, has read what it reads); everything is live
/// around `rep` instructions and client requests.
///
/// Second, for each instruction, the registers it may write (all of them for a `rep`
/// instruction, a client request or anything but plain straight-on flow): what the data
/// checks need to know to trust a register saved before it (`emit::Plan::fresh`).
pub(crate) fn gpr_dead_and_written(
    view: &BlockView,
    factory: &mut InstructionInfoFactory,
    exit: ExitLiveness,
) -> (Vec<u16>, Vec<u16>) {
    let n = view.insns.len();
    let mut dead = vec![0u16; n];
    let mut written = vec![u16::MAX; n];
    let mut cur = exit.gprs_dead & !RSP;
    for i in (0..n).rev() {
        let v = &view.insns[i];
        if v.rep != RepKind::None || v.client_request {
            cur = 0;
            continue;
        }
        if v.flow != FlowKind::Next {
            // The block's last instruction: what it reads is live before it, and it writes
            // nothing the block's checks could rely on (`written` all).
            cur = if i + 1 == n {
                cur & !gpr_effects(v.insn, factory).0
            } else {
                0
            };
            dead[i] = cur;
            continue;
        }
        let (read, killed, writes) = gpr_effects(v.insn, factory);
        cur = ((cur | killed) & !read) & !RSP;
        dead[i] = cur;
        written[i] = writes;
    }
    (dead, written)
}

/// The general-purpose registers instruction `insn` reads (a write that may not happen or
/// keeps part of the register counts as a read), always overwrites whole, and may write: bit
/// n = register n (rax = 0 .. r15 = 15).
fn gpr_effects(insn: &Instruction, factory: &mut InstructionInfoFactory) -> (u16, u16, u16) {
    let always_writes = matches!(
        insn.mnemonic(),
        Mnemonic::Mov
            | Mnemonic::Movzx
            | Mnemonic::Movsx
            | Mnemonic::Movsxd
            | Mnemonic::Lea
            | Mnemonic::Pop
            | Mnemonic::Imul
            | Mnemonic::Movd
            | Mnemonic::Movq
            | Mnemonic::Vmovd
            | Mnemonic::Vmovq
            | Mnemonic::Popcnt
            | Mnemonic::Lzcnt
            | Mnemonic::Tzcnt
            | Mnemonic::Shlx
            | Mnemonic::Shrx
            | Mnemonic::Sarx
            | Mnemonic::Rorx
            | Mnemonic::Andn
            | Mnemonic::Movbe
    );
    let (mut read, mut killed, mut writes) = (0u16, 0u16, 0u16);
    for r in factory.info(insn).used_registers() {
        let reg = r.register();
        if !reg.is_gpr() {
            continue;
        }
        let bit = 1u16 << (reg.full_register() as u32 - Register::RAX as u32);
        let full_width = reg.is_gpr64() || reg.is_gpr32();
        if matches!(
            r.access(),
            OpAccess::Write | OpAccess::CondWrite | OpAccess::ReadWrite | OpAccess::ReadCondWrite
        ) {
            writes |= bit;
        }
        // A write that may not happen (or keeps part of the register) lets the old value
        // through: for liveness it is a read.
        match r.access() {
            OpAccess::Write if always_writes && full_width => killed |= bit,
            OpAccess::None | OpAccess::NoMemAccess => {}
            _ => read |= bit,
        }
    }
    (read, killed, writes)
}

/// What is dead when a block ends: the general-purpose registers (bit n = register n, never
/// rsp) and whether the arithmetic flags are live. Without knowledge of the block's
/// successors nothing is dead ([`ExitLiveness::ALL_LIVE`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExitLiveness {
    pub gprs_dead: u16,
    pub flags_live: bool,
}

impl ExitLiveness {
    pub const ALL_LIVE: ExitLiveness = ExitLiveness {
        gprs_dead: 0,
        flags_live: true,
    };

    /// What is dead after a branch to either of two successors.
    pub fn either(self, other: ExitLiveness) -> ExitLiveness {
        ExitLiveness {
            gprs_dead: self.gprs_dead & other.gprs_dead,
            flags_live: self.flags_live || other.flags_live,
        }
    }
}

/// What is dead on entry to the straight-line code `insns` (decoded from guest memory: a
/// successor's first instructions, or a whole block) when `exit` is dead after its last
/// instruction: registers it overwrites before reading them, and whether it overwrites all
/// six arithmetic flags before reading any. The rules of `gpr_dead_and_written` and
/// `flags_liveness`, read forwards; nothing after a `rep` instruction, a client request or
/// a system call counts, nor `exit` then.
pub(crate) fn entry_liveness(
    insns: &[Instruction],
    exit: ExitLiveness,
    factory: &mut InstructionInfoFactory,
) -> ExitLiveness {
    // Read before being overwritten, and overwritten before being read.
    let (mut read, mut killed) = (0u16, 0u16);
    let (mut flags_read, mut flags_killed) = (0u32, 0u32);
    let mut whole = true;
    for (i, insn) in insns.iter().enumerate() {
        let special = crate::clientreq::is_request(insn)
            || matches!(insn.code(), Code::Syscall | Code::Cpuid)
            || (insn.is_string_instruction() && (insn.has_rep_prefix() || insn.has_repne_prefix()));
        if special {
            whole = false;
            break;
        }
        let (r, k, _) = gpr_effects(insn, factory);
        read |= r & !killed;
        let flags_in = insn.rflags_read() & ARITH;
        flags_read |= flags_in & !flags_killed;
        let control = insn.flow_control() != FlowControl::Next;
        if control {
            // What a branch, call or return reads is all it says (it ends the code).
            whole = i + 1 == insns.len();
            break;
        }
        killed |= k & !read;
        if !writes_conditionally(insn) {
            flags_killed |= flags_written(insn) & ARITH & !flags_read;
        }
    }
    let (after_dead, after_flags) = if whole {
        (exit.gprs_dead, if exit.flags_live { ARITH } else { 0 })
    } else {
        (0, ARITH)
    };
    ExitLiveness {
        gprs_dead: (killed | (after_dead & !read)) & !RSP,
        flags_live: (flags_read | (after_flags & !flags_killed)) != 0,
    }
}

/// Asks `tool` to instrument the decoded block and returns what to emit.
pub(crate) fn plan_block(
    insns: &[Instruction],
    tool: &mut dyn crate::tool::Tool,
    host: u64,
    exit: &dyn Fn(&mut InstructionInfoFactory) -> ExitLiveness,
) -> emit::Plan {
    if !tool.instruments() {
        return emit::Plan::empty();
    }
    let crs: Vec<bool> = insns.iter().map(crate::clientreq::is_request).collect();
    let mut factory = InstructionInfoFactory::new();
    let view = block_view(insns, &crs, &mut factory);
    let mut ins = Instrumenter::new(view.start, view.end, host);
    if !insns.is_empty() {
        tool.instrument(&view, &mut ins);
    }
    let live = flags_liveness(&view, ExitLiveness::ALL_LIVE);
    // Dead registers serve as scratch without saving: for cache checks, callgrind's block
    // start, and a block counter where the flags are live (in a block where they are live
    // throughout; see `emit::Plan::new`). Only then is it worth looking at the successors
    // for what is dead at the block's end (`exit`).
    let needs_dead = ins.ops.iter().any(|o| match o {
        Op::Data { .. } | Op::Fetch { .. } | Op::CallFallbackInline { .. } => true,
        Op::CountBlock(_) => live.iter().all(|&l| l),
        _ => false,
    });
    let rsp_rise = ins
        .unwind_watch
        .and_then(|_| emit::after_rsp_rise(view.insns.iter().map(|v| v.insn), &mut factory));
    // Callgrind's block start alone (no cache checks, no unwind check later in the block)
    // needs only dead flags and a dead register where the block starts. Most blocks show
    // both themselves, and decoding the successors (`exit`) is a good part of translating
    // them.
    let start_only = ins.ops.iter().all(|o| {
        matches!(
            o,
            Op::CallFallbackInline { insn: 0, .. } | Op::Rep { .. } | Op::Call { .. }
        )
    }) && rsp_rise.is_none();
    let local = (needs_dead && start_only && !live.first().copied().unwrap_or(true))
        .then(|| gpr_dead_and_written(&view, &mut factory, ExitLiveness::ALL_LIVE))
        .filter(|(dead, _)| dead.first().is_some_and(|&d| d & !RSP != 0));
    let (live, (dead, written)) = match local {
        Some(dead_written) => (live, dead_written),
        None if needs_dead => {
            let exit = exit(&mut factory);
            (
                flags_liveness(&view, exit),
                gpr_dead_and_written(&view, &mut factory, exit),
            )
        }
        None => (live, (Vec::new(), Vec::new())),
    };
    emit::Plan::new(&view, ins, (dead, written), live, rsp_rise)
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::{Decoder, DecoderOptions};

    /// `gpr_dead_and_written` for the block `code` (decoded at 0x1000).
    fn dead_and_written(code: &[u8]) -> (Vec<u16>, Vec<u16>) {
        let insns: Vec<Instruction> = Decoder::with_ip(64, code, 0x1000, DecoderOptions::NONE)
            .into_iter()
            .collect();
        let crs = vec![false; insns.len()];
        let mut factory = InstructionInfoFactory::new();
        let view = block_view(&insns, &crs, &mut factory);
        gpr_dead_and_written(&view, &mut factory, ExitLiveness::ALL_LIVE)
    }

    fn dead_masks(code: &[u8]) -> Vec<u16> {
        dead_and_written(code).0
    }

    #[test]
    fn written_registers_include_partial_conditional_and_implicit_writes() {
        // mov dl, 2; cmove rbx, rcx; mul rcx; lea rcx, [rax + 1]; add [rdi], eax; rep stosb;
        // ret
        let (_, w) = dead_and_written(&[
            0xb2, 0x02, 0x48, 0x0f, 0x44, 0xd9, 0x48, 0xf7, 0xe1, 0x48, 0x8d, 0x48, 0x01, 0x01,
            0x07, 0xf3, 0xaa, 0xc3,
        ]);
        assert_eq!(w.len(), 7);
        assert_eq!(w[0], RDX);
        assert_eq!(w[1], RBX);
        assert_eq!(w[2], RAX | RDX);
        assert_eq!(w[3], RCX);
        // A store writes memory, no register.
        assert_eq!(w[4], 0);
        // A `rep` instruction and the block's last (control flow) count as writing all.
        assert_eq!(w[5], u16::MAX);
        assert_eq!(w[6], u16::MAX);
    }

    const RAX: u16 = 1;
    const RCX: u16 = 2;
    const RDX: u16 = 4;
    const RBX: u16 = 8;

    #[test]
    fn a_register_is_dead_only_until_an_unconditional_full_write() {
        // mov rax, [rbx]; mov ecx, 1; mov dl, 2; add rdx, rcx; ret
        let d = dead_masks(&[
            0x48, 0x8b, 0x03, 0xb9, 0x01, 0, 0, 0, 0xb2, 0x02, 0x48, 0x01, 0xca, 0xc3,
        ]);
        assert_eq!(d.len(), 5);
        // Before the load: rax (overwritten by it) and rcx (by `mov ecx`) are free; rbx is
        // the address, rdx is read after a partial write.
        assert_eq!(d[0] & (RAX | RCX | RDX | RBX), RAX | RCX);
        assert_eq!(d[1] & (RAX | RCX | RDX | RBX), RCX);
        assert_eq!(d[2] & (RAX | RCX | RDX | RBX), 0);
        // Nothing is dead at the end of the block (after `ret` anything may read).
        assert_eq!(d[4], 0);
        assert_eq!(d[3], 0);
    }

    /// `entry_liveness` of the code `code` (decoded at 0x1000) before `exit`.
    fn entry(code: &[u8], exit: ExitLiveness) -> ExitLiveness {
        let insns: Vec<Instruction> = Decoder::with_ip(64, code, 0x1000, DecoderOptions::NONE)
            .into_iter()
            .collect();
        entry_liveness(&insns, exit, &mut InstructionInfoFactory::new())
    }

    #[test]
    fn a_successor_kills_what_it_overwrites_before_reading() {
        let all = ExitLiveness::ALL_LIVE;
        // mov ecx, 1; mov rax, [rax]; cmp rdx, 1; ret
        let e = entry(
            &[
                0xb9, 1, 0, 0, 0, 0x48, 0x8b, 0x00, 0x48, 0x83, 0xfa, 0x01, 0xc3,
            ],
            all,
        );
        assert_eq!(e.gprs_dead & (RAX | RCX | RDX), RCX);
        assert!(!e.flags_live, "cmp writes all six flags first");
        // mov cl, 5; cmovz rbx, rdx; inc rax; jc +0
        let e = entry(
            &[
                0xb1, 0x05, 0x48, 0x0f, 0x44, 0xda, 0x48, 0xff, 0xc0, 0x72, 0x00,
            ],
            all,
        );
        assert_eq!(
            e.gprs_dead & (RCX | RBX),
            0,
            "partial and conditional writes read"
        );
        assert!(e.flags_live, "inc keeps CF, which jc reads");
        // rep stosb; mov ecx, 1: nothing after a rep instruction counts.
        let e = entry(&[0xf3, 0xaa, 0xb9, 1, 0, 0, 0], all);
        assert_eq!(e, all);
    }

    #[test]
    fn a_block_passes_on_what_is_dead_after_it() {
        // add rdx, 1; jnz: rcx is dead after it, so before it; the flags are written first.
        let exit = ExitLiveness {
            gprs_dead: RCX | RDX,
            flags_live: true,
        };
        let e = entry(&[0x48, 0x83, 0xc2, 0x01, 0x75, 0x00], exit);
        assert_eq!(e.gprs_dead & (RCX | RDX), RCX);
        assert!(!e.flags_live);
        // A system call ends what is known: `exit` does not count past it.
        let e = entry(&[0x0f, 0x05], exit);
        assert_eq!(e.gprs_dead, 0);
        assert!(e.flags_live);
        assert_eq!(exit.either(ExitLiveness::ALL_LIVE), ExitLiveness::ALL_LIVE);
    }

    #[test]
    fn reads_conditional_writes_and_rdssp_keep_a_register_live() {
        // mov rax, [rax]; cmovz rcx, rbx; rdsspq rdx; mov rcx, 0; mov rdx, 0; ret
        let d = dead_masks(&[
            0x48, 0x8b, 0x00, 0x48, 0x0f, 0x44, 0xcb, 0xf3, 0x48, 0x0f, 0x1e, 0xca, 0x48, 0xc7,
            0xc1, 0, 0, 0, 0, 0x48, 0xc7, 0xc2, 0, 0, 0, 0, 0xc3,
        ]);
        assert_eq!(d.len(), 6);
        assert_eq!(d[0] & RAX, 0, "rax is the load's address");
        assert_eq!(d[0] & RCX, 0, "cmov may keep rcx");
        assert_eq!(d[1] & RCX, 0, "cmov may keep rcx");
        assert_eq!(
            d[1] & RDX,
            0,
            "rdssp does not write rdx without shadow stacks"
        );
        assert_eq!(d[2] & RCX, RCX);
        // rsp is never handed out.
        assert!(d.iter().all(|m| m & RSP == 0));
    }
}
