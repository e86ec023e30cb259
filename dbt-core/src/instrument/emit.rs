//! Host code for the instrumentation requests of one block.
//!
//! The translator calls `Plan::emit_before(i)` before it emits guest instruction `i`,
//! `Plan::emit_rep(i)` in place of a `rep` string instruction that needs per-iteration work,
//! `Plan::emit_near_paths` after the block body (the out-of-line parts that stay with it),
//! `Plan::emit_literals` after them and `Plan::emit_slow_paths` last (before the exit stubs):
//! the rest of the out-of-line code, which may be moved away (`translate::split`).
//!
//! # Invariants
//! * Every sequence restores the registers it borrowed (through `gs:[instr_scratch]`) and, if
//!   the flags are live at that point, the arithmetic flags, before the guest instruction
//!   (consecutive data checks of one instruction restore them once, after the last:
//!   `Plan::chains_after`). The one exception: live flags saved by a data check stay in
//!   `gs:[instr_flags]` through flag-transparent instructions up to the next data check
//!   (`Plan::stashed`), and go back before anything else, always before the block's last
//!   instruction; the translation records those instructions (`Block::flags_stashed`) so
//!   that a fault there hands the guest its own flags.
//! * Counter bumps use one `inc [rip+d]` where the flags are dead and the counter is within
//!   rel32 reach, and a flag-free load/`lea`/store otherwise.
//!
//! * The inline D1 lookup (`data_check_l1`) updates the tags exactly as `cachesim`'s
//!   `Cache::access` does for a single-line access (`l1_scan`), and a fetch check's hit
//!   stamps its slot as `SlotCache::touch` would (`stamp_slots`), so the state stays
//!   Valgrind's whichever path an access takes.
//!
//! * Callgrind's inline block-start paths (`inline_jump_low`, `inline_jump` and its return,
//!   call, tail-call and stub cases) leave every register and live flags as they were on all
//!   of their ways out.
//!
//! Deliberately not done: merging checks across guest instructions (each instruction's
//! requests are emitted on their own; only held flags carry over).
use super::calltrack::{EXIT_OTHER, EXIT_RET};
use super::fetch_slots::{fetch_slots_slow, record_words, SlotField};
use super::{
    AddressTerm, AfterMiss, BlockView, CallArg, DataRef, Helper, LaneRef, LlHitCount, LlQueue,
    MaskedOff, MemAccess, MruCache, Op, SlotI1,
};
use super::{Instrumenter, RepKind};
use crate::asm::Asm;
use crate::cache::FetchedLines;
use crate::context::*;
use dynasmrt::{dynasm, DynamicLabel, DynasmApi, DynasmLabelApi};
use iced_x86::{
    Code, Encoder, Instruction, InstructionInfoFactory, MemoryOperand, OpAccess, OpKind, Register,
};

/// Names the code emitted next in the perf map (`crate::perfmap`).
fn mark(a: &Asm, name: &'static str) {
    crate::perfmap::mark(a.offset().0, name);
}

const IS0: i32 = OFF_INSTR_SCRATCH as i32;
const IS1: i32 = OFF_INSTR_SCRATCH as i32 + 8;
const IS2: i32 = OFF_INSTR_SCRATCH as i32 + 16;
const IS3: i32 = OFF_INSTR_SCRATCH as i32 + 24;
const IS4: i32 = OFF_INSTR_SCRATCH as i32 + 32;
const LANES: i32 = OFF_LANE_SCRATCH as i32;
const STREAMS: i32 = OFF_MISS_STREAMS as i32;
const FLAGS: i32 = OFF_INSTR_FLAGS as i32;
const ARG0: i32 = OFF_HELPER_ARGS as i32;
const ARG1: i32 = OFF_HELPER_ARGS as i32 + 8;
const ARG2: i32 = OFF_HELPER_ARGS as i32 + 16;
const HFN: i32 = OFF_HELPER_FN as i32;
const HRET: i32 = OFF_HELPER_RET as i32;
const TRAMP: i32 = OFF_HELPER_TRAMP as i32;
const TRAMP_INT: i32 = OFF_HELPER_TRAMP_INT as i32;
const SCAN_RSP: i32 = OFF_SCAN_SAVED_RSP as i32;
const SCAN_TOP: i32 = OFF_SCAN_STACK_TOP as i32;

const RAX: u8 = 0;
const RCX: u8 = 1;
const RDX: u8 = 2;
const RBX: u8 = 3;
const RSP: u8 = 4;

/// The iced register for general-purpose register number `n` (rax = 0 .. r15 = 15).
fn gpr(n: u8) -> Register {
    const GPRS: [Register; 16] = [
        Register::RAX,
        Register::RCX,
        Register::RDX,
        Register::RBX,
        Register::RSP,
        Register::RBP,
        Register::RSI,
        Register::RDI,
        Register::R8,
        Register::R9,
        Register::R10,
        Register::R11,
        Register::R12,
        Register::R13,
        Register::R14,
        Register::R15,
    ];
    GPRS[usize::from(n & 15)]
}

/// Out-of-line code reached from an inline check that failed.
struct Slow {
    entry: DynamicLabel,
    back: DynamicLabel,
    kind: SlowKind,
}

enum SlowKind {
    /// `kind` with guest rax and rcx saved first (`gs:[instr_scratch]`) and restored on the
    /// way back, for a check that borrowed no register (`entry` is the inner kind's label).
    Saving {
        entry: DynamicLabel,
        kind: Box<SlowKind>,
    },
    /// A data access whose MRU check failed (`Plan::data`): on entry the registers the check
    /// borrowed hold anything (saved ones in `gs:[IS0]`/`gs:[IS1]`, see `saved`), the flags
    /// are saved if live. Recomputes the address from the guest
    /// registers, then does the rest of the L1 lookup inline when `after_miss` is given
    /// (calling it on an L1 miss) and calls `helper` for an access spanning two lines or when
    /// there is no inline lookup.
    Data {
        acc: MemAccess,
        offset: i32,
        cache: MruCache,
        helper: Helper,
        after_miss: Option<AfterMiss>,
        size: u64,
        /// Whether the check saved guest rax / rcx in `gs:[IS0]` / `gs:[IS1]`.
        saved: [bool; 2],
        /// With `near_rows`: the registers where the check left the line of the access's
        /// last byte and the row offset of its first byte's set.
        line_row: Option<(u8, u8)>,
        /// Whether the scan past way 1 may be a shared routine (`shared_data_scan`).
        shared: bool,
        /// The element of an element-wise access.
        lane: Option<LaneRef>,
    },
    /// Callgrind's block-start routine past the short form's first entry (`ShortForm`),
    /// reached with its register borrowed: the short form's second entry, the way on to the
    /// return case and the Rust fallback; back to `back` (the body) in every case.
    /// `labels`: the short form's miss, the return case, where the return and call cases
    /// fail to.
    JumpCold {
        short: ShortForm,
        jump: super::calltrack::InlineJump,
        labels: [DynamicLabel; 3],
        fallback: Fallback,
        /// Whether the fallback may be a shared routine (`shared_fallback`).
        shared: bool,
    },
    /// The inline jump case's second entry (`inline_jump_alt`), reached when the first
    /// entry's key did not match: back to `back` (the rest of the jump case) when this one
    /// does, else to `fail` (the return case).
    InlineAlt { fail: DynamicLabel },
    /// Callgrind's inline return case (`inline_ret`), reached when the inline jump case's
    /// key did not match (rax, rcx, rdx saved, rdx = the state): back to `back` when taken,
    /// else to `fail`.
    InlineRet {
        jump: super::calltrack::InlineJump,
        fail: DynamicLabel,
        flags_dead: bool,
        /// At a return site, its entry from the block's start (`ShortForm::ret_test`), before
        /// anything is saved.
        first: Option<DynamicLabel>,
    },
    /// Callgrind's inline call case (`inline_call`) in a block that is no function entry,
    /// reached when the return case did not apply (rax, rcx, rdx saved, the flags as the
    /// guest had them): back to `back` when taken, else to `fail`.
    InlineCall {
        jump: super::calltrack::InlineJump,
        fail: DynamicLabel,
        flags_dead: bool,
    },
    /// A later copy of a callgrind self-loop whose state check failed
    /// (`Plan::loop_lite`): puts back what the short form borrowed and goes to the first
    /// copy's block-start routine (`back`).
    LoopLiteFail { short: ShortForm },
    /// The back edge of a callgrind self-loop's last copy: charges the executions the
    /// later copies deferred (`owed`, `Plan::loop_charge`) and goes to the first copy's
    /// head (`back`).
    LoopBack {
        short: ShortForm,
        jump: super::calltrack::InlineJump,
        owed: i32,
    },
    /// A fetch check that did not find its lines in their slots (`Plan::fetch`): rax and
    /// rcx saved (the hot part's, or `Saving`'s), the flags live unless `flags_dead`.
    /// `fetch_slots_slow` does the lookup and repoints the check (its record at `record`),
    /// then `after_miss` on an I1 miss.
    FetchSlots {
        cache: &'static SlotI1,
        after_miss: AfterMiss,
        flags_dead: bool,
        addr: u64,
        len: u64,
        record: DynamicLabel,
        /// The check's end in the hot part (its `back`, unless `Saving` wraps this kind).
        end: DynamicLabel,
    },
}

/// The registers of a data check (`Plan::data_regs`).
#[derive(Clone, Copy)]
struct DataRegs {
    l: u8,
    w: u8,
    /// Whether rax / rcx are guest registers saved in `gs:[IS0]` / `gs:[IS1]`.
    saved: [bool; 2],
}

/// Static facts about the instructions the plan needs at emission time.
struct InsnFacts {
    addr: u64,
    len: u32,
    accesses: Vec<MemAccess>,
    rep: RepKind,
    insn: Instruction,
}

/// The instrumentation of one block, ready to emit.
pub(crate) struct Plan {
    ops: Vec<Op>,
    live: Vec<bool>,
    facts: Vec<InsnFacts>,
    /// Where the block counter goes and whether it may use flag-changing code there.
    count_at: usize,
    /// Counter used in place of `Op::CountBlock`'s (an unrolled copy's loop share).
    counter_override: Option<*mut u64>,
    /// In a later copy of a callgrind self-loop: the first copy's head, where the block-start
    /// routine is, and the copy's number (`Plan::loop_lite`).
    loop_head: Option<(DynamicLabel, u32)>,
    slow: Vec<Slow>,
    /// 8-byte constants read `rip`-relative, emitted after the block body (`emit_literals`).
    literals: Vec<(DynamicLabel, u64)>,
    /// Per instruction, the guest registers dead before it (`gpr_dead_and_written`; empty when no
    /// data check needs them).
    dead: Vec<u16>,
    /// Per instruction, the guest registers it may write (`gpr_dead_and_written`; empty
    /// like `dead`).
    written: Vec<u16>,
    /// Whether `gs:[IS0]` (`[0]`) and `gs:[IS1]` (`[1]`) hold the guest's rax and rcx as they
    /// are now, so that a check borrowing them needs not save them again: a data check or
    /// fetch check put them back from there and nothing since has written them (only guest
    /// instructions that leave them alone, and only straight-line code: no entry point in
    /// between). Saving a register a check has just restored made each check wait for the
    /// store before it (the value goes through memory again); callgrind with cache
    /// simulation pays that on most blocks.
    fresh: [bool; 2],
    /// Per instruction, `super::flags_transparent`.
    transparent: Vec<bool>,
    /// Whether the code emitted so far leaves the guest's (live) arithmetic flags held in
    /// `gs:[instr_flags]` rather than in rflags: a data check keeps them there across the
    /// flag-transparent instructions up to the next check instead of putting them back and
    /// saving them again (`Plan::flags_hold`). They go back before anything else.
    stashed: bool,
    /// The op emitted first, before instruction 0's other ops: a fetch check of one line
    /// with only block counting before it in the tool's order, after which the block gets a
    /// second entry (`cache::Block::line_entry`).
    entry_fetch: Option<usize>,
    /// That entry's offset and the line its check skips.
    line_entry: Option<(usize, FetchedLines)>,
    /// The lines the last fetch check emitted so far left most recently used, while no op
    /// after it may have touched that cache (`cache::ExitRecord::fetched`).
    fetched: Option<FetchedLines>,
    /// Whether cache checks may share their scans (`shared_data_scan`).
    shared_scans: bool,
    /// `Instrumenter::disarm_if_unwound`: before which instruction (the block's length: at
    /// its end) the check goes, and the state's address; `None` where the block cannot
    /// raise `rsp`.
    unwind_check: Option<(usize, u64, i32)>,
}

// SAFETY: see `Op`: the pointers are addresses embedded in code, not dereferenced here.
unsafe impl Send for Plan {}

impl Plan {
    /// `rsp_rise`: `after_rsp_rise` of the block's instructions (wanted only with
    /// `Instrumenter::unwind_watch`).
    pub(crate) fn new(
        view: &BlockView,
        ins: Instrumenter,
        (dead, written): (Vec<u16>, Vec<u16>),
        live: Vec<bool>,
        rsp_rise: Option<usize>,
    ) -> Plan {
        let n = view.insns.len();
        let count_at = (0..n).find(|&i| !live[i]).unwrap_or(0);
        let entry_fetch = ins
            .ops
            .iter()
            .position(|o| !matches!(o, Op::CountBlock(_) | Op::Rep { .. }))
            .filter(|&k| match (&ins.ops[k], view.insns.first()) {
                (&Op::Fetch { insn: 0, cache, .. }, Some(v)) => {
                    let l = fetched_lines(cache, v.addr, v.len);
                    l.first == l.last
                }
                _ => false,
            });
        // Without a short form (the state out of 32-bit reach) no block needs the check.
        let unwind_check =
            ins.unwind_watch
                .filter(|&(st, _)| below_2gib(st))
                .and_then(|(st, sp)| {
                    Some((
                        rsp_rise?,
                        st as *const super::calltrack::JumpState as u64,
                        sp,
                    ))
                });
        Plan {
            ops: ins.ops,
            unwind_check,
            live,
            facts: view
                .insns
                .iter()
                .map(|v| InsnFacts {
                    addr: v.addr,
                    len: v.len,
                    accesses: v.accesses.clone(),
                    rep: v.rep,
                    insn: *v.insn,
                })
                .collect(),
            count_at,
            counter_override: None,
            loop_head: None,
            slow: Vec::new(),
            literals: Vec::new(),
            dead,
            written,
            fresh: [false; 2],
            transparent: super::flags_transparent(view),
            stashed: false,
            entry_fetch,
            line_entry: None,
            fetched: None,
            shared_scans: false,
        }
    }

    /// A plan that adds nothing.
    pub(crate) fn empty() -> Plan {
        Plan {
            ops: Vec::new(),
            live: Vec::new(),
            facts: Vec::new(),
            count_at: 0,
            counter_override: None,
            loop_head: None,
            slow: Vec::new(),
            literals: Vec::new(),
            dead: Vec::new(),
            written: Vec::new(),
            fresh: [false; 2],
            transparent: Vec::new(),
            stashed: false,
            entry_fetch: None,
            line_entry: None,
            fetched: None,
            shared_scans: false,
            unwind_check: None,
        }
    }

    /// Lets cache checks share their scans past way 1 (`shared_data_scan`).
    pub(crate) fn share_scans(&mut self, on: bool) {
        self.shared_scans = on;
    }

    /// The block's second entry past its first fetch check (offset from the start of the
    /// code, and the line), once instruction 0 is emitted.
    pub(crate) fn line_entry(&self) -> Option<(usize, FetchedLines)> {
        self.line_entry
    }

    /// What the last fetch check emitted so far left most recently used
    /// (`cache::ExitRecord::fetched`), for an exit emitted now.
    pub(crate) fn fetched(&self) -> Option<FetchedLines> {
        self.fetched
    }

    /// Whether the guest instruction emitted next (after `emit_before`) runs with the guest's
    /// arithmetic flags held in `gs:[instr_flags]` (a fault there takes them from there).
    pub(crate) fn flags_stashed(&self) -> bool {
        self.stashed
    }

    /// Whether op `op` is emitted before instruction `i`.
    fn applies_at(&self, op: &Op, i: usize) -> bool {
        match *op {
            Op::CountBlock(_) => i == self.count_at,
            Op::Rep { insn, .. }
            | Op::Fetch { insn, .. }
            | Op::Data { insn, .. }
            | Op::Call { insn, .. }
            | Op::RepBranch { insn, .. }
            | Op::CallFallback { insn, .. }
            | Op::CallFallbackInline { insn, .. } => insn == i,
        }
    }

    /// Whether held flags may stay held through everything emitted for instruction `i`: it
    /// is flag-transparent and not the block's last (the flags are back before the block
    /// ends), and what goes before it is data checks (which take held flags as saved) and
    /// the block counter (flag-free where the flags are live).
    fn may_hold_through(&self, i: usize) -> bool {
        i + 1 < self.facts.len()
            && self.transparent.get(i).copied().unwrap_or(false)
            && !self.rep_loop(i)
            && self
                .ops
                .iter()
                .all(|o| !self.applies_at(o, i) || matches!(o, Op::Data { .. } | Op::CountBlock(_)))
    }

    /// Whether held flags may go on into the code before instruction `i` even though they
    /// may not stay held through `i` itself (`may_hold_through`; the block's last
    /// instruction, say a `ret` after a `pop`): that code is data checks (the first takes
    /// the flags as saved, the last puts them back) and the block counter. Saves putting
    /// the flags back and saving them again at once (callgrind's `calls`: every epilogue).
    fn checks_take_held(&self, i: usize) -> bool {
        let mut at_i = self.ops.iter().filter(|o| self.applies_at(o, i));
        !self.rep_loop(i)
            && at_i.clone().any(|o| matches!(o, Op::Data { .. }))
            && at_i.all(|o| matches!(o, Op::Data { .. } | Op::CountBlock(_)))
    }

    /// Whether the data check `k` (of instruction `i`, flags live) may leave the flags held
    /// instead of putting them back: another data check of `i` follows it directly, or it
    /// is the last op of `i` and the flags may stay held through `i` and on to the next
    /// instruction of the block.
    fn flags_hold(&self, k: usize, i: usize) -> bool {
        match self.ops[k + 1..].iter().find(|o| self.applies_at(o, i)) {
            Some(Op::Data { .. }) => true,
            Some(_) => false,
            None => self.may_hold_through(i),
        }
    }

    /// Puts held flags back in rflags (rax kept unless dead before `i`).
    fn unstash(&mut self, a: &mut Asm, i: usize) {
        let rax_dead = self.dead_mask(i) & (1 << RAX) != 0;
        if !rax_dead {
            dynasm!(a ; .arch x64 ; gs mov QWORD [IS0], rax);
        }
        restore_flags(a);
        if !rax_dead {
            dynasm!(a ; .arch x64 ; gs mov rax, QWORD [IS0]);
        }
        self.stashed = false;
    }

    /// The block counter, when the plan's other ops are cache checks (the translator may
    /// then unroll a self-loop, each copy with its own share of the counter). A check's
    /// state lives in the simulated caches, not in the translation, so each copy may have
    /// its own; its miss counters are shared, their bumps being rare. (cachegrind with
    /// `--cache-sim=yes`, ABBA runs: stride 0.34 -> 0.30 s, its 64M-iteration fill loop
    /// 0.22 -> 0.18 s, chase 0.55 -> 0.53 s, matmul 0.65 -> 0.64 s.)
    pub(crate) fn loop_counter(&self) -> Option<*mut u64> {
        let mut counter = None;
        for op in &self.ops {
            match op {
                Op::CountBlock(c) if counter.is_none() => counter = Some(*c),
                Op::Fetch { .. } | Op::Data { .. } => {}
                _ => return None,
            }
        }
        counter
    }

    /// Whether the block's lines (first to last byte) lie in distinct sets of a cache of
    /// lines of `1 << line_bits` bytes with `set_mask + 1` sets.
    fn lines_in_distinct_sets(&self, line_bits: u32, set_mask: u64) -> bool {
        let (Some(first), Some(last)) = (self.facts.first(), self.facts.last()) else {
            return false;
        };
        let end = last.addr + u64::from(last.len.max(1)) - 1;
        (end >> line_bits) - (first.addr >> line_bits) <= set_mask
    }

    /// Makes the following `emit_before` calls emit a later copy of an unrolled self-loop
    /// (`loop_counter`): they bump `ctr`, the copy's share, instead of the block counter, and
    /// leave out the fetch checks that the copy before made hits (`Plan::fetch`).
    pub(crate) fn set_counter(&mut self, ctr: *mut u64) {
        self.counter_override = Some(ctr);
    }

    /// Whether a self-loop of this block may be unrolled with `Plan::loop_lite` at the start
    /// of its later copies: callgrind's Ir-only block-start routine is the only op, with its
    /// short form, in a block that ends plainly (no `rep`, so no extras to charge).
    pub(crate) fn loop_lite_ok(&self) -> bool {
        match self.ops.as_slice() {
            [Op::CallFallbackInline { insn: 0, jump, .. }] => {
                let mut info = InstructionInfoFactory::new();
                !jump.stub
                    && !jump.entry
                    && jump.ends_plain
                    && jump.eager.is_none()
                    && self.facts.iter().all(|f| f.rep == RepKind::None)
                    && !self.facts.iter().any(|f| writes_rsp(&mut info, &f.insn))
                    && ShortForm::new(jump, !self.live[0], self.dead_mask(0)).is_some()
            }
            _ => false,
        }
    }

    /// The code after the block's last instruction, before a fall-through exit: the unwind
    /// check when that instruction writes `rsp` (`Instrumenter::disarm_if_unwound`).
    pub(crate) fn emit_block_end(&mut self, a: &mut Asm) {
        self.disarm_if_unwound(a, self.facts.len());
    }

    /// Where the unwind check goes before instruction `i` (the block's length: at its end):
    /// `expect = u64::MAX` when `rsp` lies above the top frame's sp. Held flags wait in
    /// `gs:[instr_flags]` already; live ones are saved around it. The frame's address takes
    /// a register: rax once the flags are saved, else a dead one, else rcx through
    /// `gs:[IS1]`.
    #[allow(clippy::useless_conversion)] // dynasm's `Rq(x)` converts the register number
    fn disarm_if_unwound(&mut self, a: &mut Asm, i: usize) {
        let Some((_, st, sp_at)) = self.unwind_check.filter(|&(at, ..)| at == i) else {
            return;
        };
        let save = self.live[i] && !self.stashed;
        let (x, borrowed) = if save {
            dynasm!(a ; .arch x64 ; gs mov QWORD [IS0], rax);
            save_flags(a);
            self.fresh = [false; 2];
            (RAX, false)
        } else {
            match self.dead_scratch(i, &[]) {
                Some(r) => (r, false),
                None => {
                    // Saved even where `fresh` says `gs:[IS1]` holds it: `fresh` is not yet
                    // brought up to date for the instruction before. The slot then holds it,
                    // so `fresh` stays as it is.
                    dynasm!(a ; .arch x64 ; gs mov QWORD [IS1], rcx);
                    (RCX, true)
                }
            }
        };
        let (frame, expect) = (st as i32 + JUMP_OFF.frame, st as i32 + JUMP_OFF.expect);
        dynasm!(a
            ; .arch x64
            ; mov Rq(x), QWORD [frame]
            ; cmp rsp, QWORD [Rq(x) + sp_at]
        );
        if borrowed {
            // A `mov` leaves the comparison's flags alone.
            dynasm!(a ; .arch x64 ; gs mov rcx, QWORD [IS1]);
        }
        dynasm!(a
            ; .arch x64
            ; jbe >kept
            ; mov QWORD [expect], -1
            ; kept:
        );
        if save {
            restore_flags(a);
            dynasm!(a ; .arch x64 ; gs mov rax, QWORD [IS0]);
        }
    }

    /// Makes the following `emit_before` calls emit copy `copy` (1, 2, ...) of a self-loop
    /// whose first copy starts at `head` (`Plan::loop_lite_ok`).
    pub(crate) fn set_loop_head(&mut self, head: DynamicLabel, copy: u32) {
        self.loop_head = Some((head, copy));
    }

    /// The instruction before whose own code the block's counter is bumped (`count_at`);
    /// `None` without a counter.
    pub(crate) fn counted_before(&self) -> Option<u32> {
        self.ops
            .iter()
            .any(|o| matches!(o, Op::CountBlock(_)))
            .then_some(self.count_at as u32)
    }

    /// The inline state and the block's Ir when this plan's later loop copies defer their
    /// charges (`Plan::loop_lite`): what a fault in copy `k` owes (`JumpState::charge_owed`).
    pub(crate) fn loop_owed(&self) -> Option<(u64, u32)> {
        match self.ops.as_slice() {
            [Op::CallFallbackInline { jump, .. }] if self.loop_lite_ok() => Some((
                jump.state as *const super::calltrack::JumpState as u64,
                jump.ir,
            )),
            _ => None,
        }
    }

    /// Where the last copy's back edge goes (`copy` is its number): an out-of-line charge of
    /// the executions the later copies deferred, then the first copy's head.
    pub(crate) fn loop_back(&mut self, a: &mut Asm, copy: u32) -> Result<DynamicLabel, String> {
        let (Some((head, _)), [Op::CallFallbackInline { jump, .. }]) =
            (self.loop_head, self.ops.as_slice())
        else {
            return Err("a self-loop's back edge without its later copies".into());
        };
        let jump = *jump;
        let short = ShortForm::new(&jump, !self.live[0], self.dead_mask(0))
            .ok_or("a self-loop's back edge without a short form")?;
        let entry = a.new_dynamic_label();
        self.slow.push(Slow {
            entry,
            back: head,
            kind: SlowKind::LoopBack {
                short,
                jump,
                owed: copy as i32,
            },
        });
        Ok(entry)
    }

    /// Before the way out of copy `copy` (1, 2, ...) of a self-loop to the block after it:
    /// charges the executions the later copies deferred. The flags are kept (the next block
    /// may read them).
    pub(crate) fn loop_exit(&self, a: &mut Asm, copy: u32) -> Result<(), String> {
        let [Op::CallFallbackInline { jump, .. }] = self.ops.as_slice() else {
            return Err("a self-loop's exit without its block-start routine".into());
        };
        let short =
            ShortForm::new(jump, false, 0).ok_or("a self-loop's exit without a short form")?;
        loop_charge(a, &short, jump, copy as i32);
        Ok(())
    }

    /// Upper bound on the bytes this plan adds to the translation.
    pub(crate) fn code_bound(&self) -> u64 {
        // Callgrind's block-start routine with its inline jump, return and call cases is
        // the largest op (~1.5 KiB).
        let count = |f: fn(&Op) -> bool| self.ops.iter().filter(|o| f(o)).count() as u64;
        let inline = count(|o| matches!(o, Op::CallFallbackInline { .. }));
        // A data check with the inline L1 lookup takes up to ~1 KiB (`data_scan` with a
        // 16-way `l1_scan` unrolled, ~270 bytes, then `data_slow` for two lines); an
        // instruction fetch across two lines scans twice.
        let data = count(|o| matches!(o, Op::Data { .. }));
        let fetch = count(|o| matches!(o, Op::Fetch { .. }));
        640 * self.ops.len() as u64 + 640 * data + 512 * fetch + 1536 * inline + 64
    }

    fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Whether instruction `i` is a rep string instruction that must be emitted as a loop
    /// (per-iteration data checks, or repe/repne whose entries cannot be derived from rcx).
    fn rep_loop(&self, i: usize) -> bool {
        let f = &self.facts[i];
        if f.rep == RepKind::None {
            return false;
        }
        let has_rep = self
            .ops
            .iter()
            .any(|o| matches!(o, Op::Rep { insn, .. } if *insn == i));
        let has_data = self
            .ops
            .iter()
            .any(|o| matches!(o, Op::Data { insn, .. } | Op::RepBranch { insn, .. } if *insn == i));
        has_data || (has_rep && f.rep == RepKind::Cond)
    }

    /// Emits the requests that go before guest instruction `i`.
    pub(crate) fn emit_before(&mut self, a: &mut Asm, host: u64, i: usize) -> Result<(), String> {
        if self.is_empty() {
            return Ok(());
        }
        self.disarm_if_unwound(a, i);
        if self.stashed && !self.may_hold_through(i) && !self.checks_take_held(i) {
            self.unstash(a, i);
        }
        let kept = match i.checked_sub(1).and_then(|p| self.written.get(p)) {
            Some(&w) => [w & (1 << RAX) == 0, w & (1 << RCX) == 0],
            None => [false; 2],
        };
        self.fresh = [self.fresh[0] && kept[0], self.fresh[1] && kept[1]];
        let first = self.entry_fetch.filter(|_| i == 0);
        if let Some(k) = first {
            if let Op::Fetch {
                cache, after_miss, ..
            } = self.ops[k]
            {
                self.fetch(a, i, cache, after_miss);
                self.line_entry = self.fetched.map(|l| (a.offset().0, l));
                // The line entry comes in here without that check's saves.
                self.fresh = [false; 2];
            }
        }
        // Whether the previous op left its registers and flags saved for this one.
        let mut chained = false;
        for k in 0..self.ops.len() {
            if Some(k) == first {
                continue;
            }
            if self.applies_at(&self.ops[k], i) {
                if !matches!(self.ops[k], Op::Data { .. } | Op::Fetch { .. }) {
                    // Other code may use the slots for its own values.
                    self.fresh = [false; 2];
                }
                // What may touch the fetched lines' cache forgets them (a fetch check sets
                // them anew); a tool's plain helper calls must leave its caches alone.
                self.fetched = self.fetched.filter(|f| match self.ops[k] {
                    Op::Data { cache, .. } => cache.tags != f.tags,
                    Op::CountBlock(_) | Op::Rep { .. } | Op::Call { .. } | Op::Fetch { .. } => true,
                    Op::RepBranch { .. }
                    | Op::CallFallback { .. }
                    | Op::CallFallbackInline { .. } => false,
                });
            }
            match self.ops[k] {
                Op::CountBlock(ctr) if i == self.count_at => {
                    let ctr = self.counter_override.unwrap_or(ctr);
                    let scratch = self.dead_scratch(i, &[]);
                    add_one(a, host, ctr, (self.live[i], scratch));
                }
                Op::Fetch {
                    insn,
                    cache,
                    after_miss,
                } if insn == i => self.fetch(a, i, cache, after_miss),
                Op::Data {
                    insn,
                    dref,
                    cache,
                    helper,
                    after_miss,
                } if insn == i && !self.rep_loop(i) => {
                    let live = self.live[i];
                    let next = match self.ops.get(k + 1) {
                        Some(&Op::Data { insn, dref, .. }) if insn == i => Some(dref),
                        _ => None,
                    };
                    let held = live && self.stashed && !chained;
                    let may_hold = live && self.flags_hold(k, i);
                    // Flags held on the way in and out: no lahf/sahf here, so the line needs
                    // not go to rax (unless the next check chains on these registers).
                    let free = held && may_hold && {
                        let r = self.data_regs(i, false);
                        next.is_none_or(|d| !self.chains_after(i, d, r))
                    };
                    let regs = self.data_regs(i, live && !free);
                    let chain_out = next.is_some_and(|d| self.chains_after(i, d, regs));
                    let hold = may_hold && !chain_out;
                    self.data(
                        a,
                        (i, dref, regs),
                        cache,
                        (helper, after_miss),
                        (live, chained, held, chain_out, hold),
                    )?;
                    chained = chain_out;
                    self.stashed = hold;
                    continue;
                }
                Op::Call {
                    insn,
                    helper,
                    arg1,
                    arg2,
                } if insn == i => self.call(a, i, helper, arg1, arg2)?,
                Op::CallFallback {
                    insn,
                    fast,
                    slow,
                    arg1,
                    arg2,
                } if insn == i => self.call_fallback(a, i, fast, slow, arg1, arg2)?,
                Op::CallFallbackInline { insn, jump, .. }
                    if insn == i && self.loop_head.is_some() =>
                {
                    self.loop_lite(a, i, &jump)?;
                }
                Op::CallFallbackInline {
                    insn,
                    fast,
                    slow,
                    arg1,
                    arg2,
                    jump,
                } if insn == i => {
                    let (done, try_ret, fail) = (
                        a.new_dynamic_label(),
                        a.new_dynamic_label(),
                        a.new_dynamic_label(),
                    );
                    let flags_dead = !self.live[i];
                    if jump.stub {
                        mark(a, "clg-stub");
                        inline_stub(a, &jump, (done, fail), flags_dead);
                    } else if jump.entry {
                        mark(a, "clg-entry-call");
                        inline_call(a, &jump, (done, fail), flags_dead, true);
                    } else {
                        let dead = self.dead_mask(i);
                        let (try_alt, alt_back) = (a.new_dynamic_label(), a.new_dynamic_label());
                        let short = ShortForm::new(&jump, flags_dead, dead);
                        let mut ret_first = None;
                        if let Some(short) = short {
                            let (second, miss) = (a.new_dynamic_label(), a.new_dynamic_label());
                            mark(a, "clg-short");
                            if jump.ret_case && flags_dead {
                                let first = a.new_dynamic_label();
                                short.ret_test(a, first);
                                ret_first = Some(first);
                            }
                            short.emit_hot(a, &jump, second);
                            self.slow.push(Slow {
                                entry: second,
                                back: done,
                                kind: SlowKind::JumpCold {
                                    short,
                                    jump,
                                    labels: [miss, try_ret, fail],
                                    fallback: Fallback {
                                        insn: self.facts[i].insn,
                                        fast,
                                        slow,
                                        arg1,
                                        arg2,
                                    },
                                    shared: self.shared_scans,
                                },
                            });
                        } else {
                            mark(a, "clg-full");
                            inline_jump(a, &jump, (done, (try_alt, alt_back), fail), flags_dead);
                            self.slow.push(Slow {
                                entry: try_alt,
                                back: alt_back,
                                kind: SlowKind::InlineAlt { fail: try_ret },
                            });
                        }
                        // The return and call cases are rarer: out of line, after the block.
                        let ret_fail = if jump.call_case {
                            let try_call = a.new_dynamic_label();
                            self.slow.push(Slow {
                                entry: try_call,
                                back: done,
                                kind: SlowKind::InlineCall {
                                    jump,
                                    fail,
                                    flags_dead,
                                },
                            });
                            try_call
                        } else {
                            fail
                        };
                        self.slow.push(Slow {
                            entry: try_ret,
                            back: done,
                            kind: SlowKind::InlineRet {
                                jump,
                                fail: ret_fail,
                                flags_dead,
                                first: ret_first,
                            },
                        });
                        if short.is_some() {
                            dynasm!(a ; .arch x64 ; =>done);
                            mark(a, "body");
                            continue;
                        }
                    }
                    mark(a, "clg-rust");
                    self.call_fallback(a, i, fast, slow, arg1, arg2)?;
                    dynasm!(a ; .arch x64 ; =>done);
                    mark(a, "body");
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The block-start routine of a later copy of a self-loop (`Plan::loop_lite_ok`), reached
    /// only from the copy before it: the previous block is this one, entered with the cost
    /// centre the state names, and nothing has run since but its guest code, which leaves
    /// `rsp` alone. While the state is armed (`expect` not `u64::MAX`, which also keeps the
    /// key of that cost centre) the jump case would take it again with the same cost centre
    /// (a block's cost centre is the one of its context, recursion level and thread, which
    /// the key encodes, so the entry it would match holds the same counter), with nothing to
    /// unwind: charge it, count a block and its Ir; the last block, its cost centre, the
    /// expected key and the exit kind stay as they are. Those charges are deferred, so that
    /// an iteration does not wait on the three counters' read-modify-writes: the way out of
    /// copy `k` charges `k` executions at once (`Plan::loop_exit`, `Plan::loop_back`), and
    /// a fault in copy `k` has the signal handler charge them (`JumpState::charge_owed`).
    /// Only the second copy tests the state (nothing can change it in between); when it is
    /// not armed, the first copy's routine decides. The first copy's head is also the only
    /// block start signals wait for (`translate::LITE_LOOP_COPIES`).
    fn loop_lite(
        &mut self,
        a: &mut Asm,
        i: usize,
        j: &super::calltrack::InlineJump,
    ) -> Result<(), String> {
        let (Some((head, copy)), Some(short)) = (
            self.loop_head,
            ShortForm::new(j, !self.live[i], self.dead_mask(i)),
        ) else {
            return Err("a self-loop copy without its block-start routine's short form".into());
        };
        if copy > 1 {
            return Ok(());
        }
        mark(a, "clg-loop");
        let fail = a.new_dynamic_label();
        short.save(a);
        dynasm!(a
            ; .arch x64
            ; cmp QWORD [short.s(JUMP_OFF.expect)], -1
            ; je =>fail
        );
        short.restore(a);
        mark(a, "body");
        self.slow.push(Slow {
            entry: fail,
            back: head,
            kind: SlowKind::LoopLiteFail { short },
        });
        Ok(())
    }

    /// Emits instruction `i` itself when it is a counted `rep` string instruction; returns
    /// false when the translator should emit it as usual.
    pub(crate) fn emit_rep(
        &mut self,
        a: &mut Asm,
        host: u64,
        i: usize,
        bytes: &[u8],
    ) -> Result<bool, String> {
        let Some(f) = self.facts.get(i) else {
            return Ok(false);
        };
        if f.rep == RepKind::None {
            return Ok(false);
        }
        let rep = self.ops.iter().find_map(|o| match *o {
            Op::Rep {
                insn,
                entries,
                iterations,
            } if insn == i => Some((entries, iterations)),
            _ => None,
        });
        if !self.rep_loop(i) {
            let Some((entries, _)) = rep else {
                return Ok(false);
            };
            // Entries beyond the first = iterations = rcx before - rcx after.
            dynasm!(a ; .arch x64 ; gs mov QWORD [IS3], rcx);
            a.extend(bytes.iter().copied());
            dynasm!(a
                ; .arch x64
                ; gs mov QWORD [IS0], rax
                ; gs mov QWORD [IS1], rdx
                ; gs mov QWORD [IS2], rcx
                ; mov rdx, rcx
                ; not rdx
                ; gs mov rax, QWORD [IS3]
                ; lea rax, [rax + rdx + 1]
                ; mov rdx, QWORD entries as i64
                ; mov rcx, QWORD [rdx]
                ; lea rcx, [rcx + rax]
                ; mov QWORD [rdx], rcx
                ; gs mov rcx, QWORD [IS2]
                ; gs mov rdx, QWORD [IS1]
                ; gs mov rax, QWORD [IS0]
            );
            return Ok(true);
        }
        let cond = f.rep == RepKind::Cond;
        let repe = bytes
            .iter()
            .take_while(|b| is_prefix(**b))
            .any(|&b| b == 0xf3);
        // The instruction without its F2/F3 prefix.
        let mut single = Vec::with_capacity(bytes.len());
        let mut in_prefix = true;
        for &b in bytes {
            if in_prefix && is_prefix(b) {
                if b != 0xf2 && b != 0xf3 {
                    single.push(b);
                }
                continue;
            }
            in_prefix = false;
            single.push(b);
        }
        let done = a.new_dynamic_label();
        let top = a.new_dynamic_label();
        let branch = self.ops.iter().find_map(|o| match *o {
            Op::RepBranch {
                insn,
                helper,
                invert_entry,
            } if insn == i => Some((helper, invert_entry)),
            _ => None,
        });
        let addr = f.addr;
        dynasm!(a ; .arch x64 ; =>top);
        if let Some((helper, invert)) = branch {
            // The entry's `rcx == 0` branch (flag-free; the trampoline keeps the flags).
            let (z, nz) = if invert { (0, 1) } else { (1, 0) };
            dynasm!(a
                ; .arch x64
                ; gs mov QWORD [IS0], rax
                ; mov eax, z
                ; jrcxz >t
                ; mov eax, nz
                ; t:
                ; gs mov QWORD [ARG1], rax
            );
            let back = a.new_dynamic_label();
            helper_call(a, helper, addr, back);
            dynasm!(a ; .arch x64 ; =>back ; gs mov rax, QWORD [IS0]);
        }
        dynasm!(a
            ; .arch x64
            ; jrcxz >zero
            ; jmp >body
            ; zero:
            ; jmp =>done
            ; body:
        );
        for k in 0..self.ops.len() {
            if let Op::Data {
                insn,
                dref,
                cache,
                helper,
                after_miss,
            } = self.ops[k]
            {
                if insn == i {
                    // The loop comes back here after the guest's iteration.
                    self.fresh = [false; 2];
                    let regs = self.data_regs(i, true);
                    self.data(
                        a,
                        (i, dref, regs),
                        cache,
                        (helper, after_miss),
                        (true, false, false, false, false),
                    )?;
                }
            }
        }
        self.fresh = [false; 2];
        if let (true, Some((_, iterations))) = (cond, rep) {
            add_one(a, host, iterations, (true, None));
        }
        a.extend(single.iter().copied());
        dynasm!(a ; .arch x64 ; lea rcx, [rcx - 1]);
        if let (true, Some((helper, _))) = (cond, branch) {
            // The branch that repeats: repe goes on while ZF = 1, repne while ZF = 0.
            dynasm!(a ; .arch x64 ; gs mov QWORD [IS0], rax);
            let setcc = if repe { 0x94 } else { 0x95 };
            a.extend([0x0f, setcc, 0xc0, 0x0f, 0xb6, 0xc0]); // setcc al; movzx eax, al
            dynasm!(a ; .arch x64 ; gs mov QWORD [ARG1], rax);
            let back = a.new_dynamic_label();
            helper_call(a, helper, addr, back);
            dynasm!(a ; .arch x64 ; =>back ; gs mov rax, QWORD [IS0]);
        }
        if cond {
            if repe {
                dynasm!(a ; .arch x64 ; jne =>done);
            } else {
                dynasm!(a ; .arch x64 ; je =>done);
            }
        }
        if let Some((entries, _)) = rep {
            add_one(a, host, entries, (true, None));
        }
        dynasm!(a ; .arch x64 ; jmp =>top ; =>done);
        Ok(true)
    }

    /// Emits the 8-byte constants the checks read (`Plan::literal`), after the block body:
    /// they stay with the hot part when the out-of-line code moves away
    /// (`translate::split`).
    pub(crate) fn emit_literals(&mut self, a: &mut Asm) {
        if !self.literals.is_empty() {
            dynasm!(a ; .arch x64 ; .align 8);
            for (label, value) in std::mem::take(&mut self.literals) {
                dynasm!(a ; .arch x64 ; =>label ; .u64 value);
            }
        }
    }

    /// Emits the out-of-line parts that run often enough to stay with the block body when
    /// the rest moves away (`translate::split`): the data checks', whose first steps find
    /// most non-MRU hits in ways 1 and 2 (`data_way1`). Measured against all parts apart
    /// (alternating runs): cachegrind with simulation python3 and sqlite −2 to −5%, matmul
    /// −2%; callgrind with simulation within ±2%.
    pub(crate) fn emit_near_paths(&mut self, a: &mut Asm) -> Result<(), String> {
        let (near, rest) = std::mem::take(&mut self.slow)
            .into_iter()
            .partition(|s| matches!(s.kind, SlowKind::Data { .. }));
        self.slow = rest;
        for s in near {
            emit_slow(a, s)?;
        }
        Ok(())
    }

    /// Emits the rest of the out-of-line code of failed checks (after `emit_literals`): the
    /// part that may be moved away.
    pub(crate) fn emit_slow_paths(&mut self, a: &mut Asm) -> Result<(), String> {
        debug_assert!(!self.stashed, "flags still held at the block's end");
        debug_assert!(
            self.literals.is_empty(),
            "constants after the out-of-line code"
        );
        for s in std::mem::take(&mut self.slow) {
            emit_slow(a, s)?;
        }
        Ok(())
    }

    /// Queues `kind` as the out-of-line part of a check that borrowed no register, from
    /// `entry` back to `back`: it saves rax and rcx first and puts them back at the end.
    fn push_saving(
        &mut self,
        a: &mut Asm,
        (entry, back): (DynamicLabel, DynamicLabel),
        kind: SlowKind,
    ) {
        let inner = a.new_dynamic_label();
        self.slow.push(Slow {
            entry,
            back,
            kind: SlowKind::Saving {
                entry: inner,
                kind: Box::new(kind),
            },
        });
    }

    /// The I1 check of instruction `i`'s fetch (`Instrumenter::fetch_check_l1`): per line,
    /// compare the slot the line was in when last seen; when all match, advance the set's
    /// clock and stamp the slot (the hit's LRU update), else the slow path
    /// (`SlowKind::FetchSlots`), which does the lookup in Rust and points these
    /// instructions at the slots the lines are in now.
    // dynasm's dynamic registers (`Rq(n)`) expand to a `.into()` of the `u8` given.
    #[allow(clippy::useless_conversion)]
    fn fetch(&mut self, a: &mut Asm, i: usize, cache: &'static SlotI1, after_miss: AfterMiss) {
        let f = &self.facts[i];
        self.fetched = Some(fetched_lines(cache, f.addr, f.len));
        if self.counter_override.is_some()
            && self.lines_in_distinct_sets(cache.line_bits, cache.set_mask)
        {
            // A later copy of an unrolled self-loop, entered only from the copy before (a
            // signal or a yield leaves at the block's start): that copy fetched every line
            // of the block, each in a set of its own, and nothing else reached the cache
            // since, so each line is its set's most recently used: a hit that changes the
            // order of none.
            return;
        }
        let (addr, len) = (f.addr, u64::from(f.len.max(1)));
        let first = addr >> cache.line_bits;
        let last = (addr + len - 1) >> cache.line_bits;
        let lines = &[first, last][..1 + usize::from(last != first)];
        let entry = a.new_dynamic_label();
        let back = a.new_dynamic_label();
        let record = a.new_dynamic_label();
        let kind = SlowKind::FetchSlots {
            cache,
            after_miss,
            flags_dead: !self.live[i],
            addr,
            len,
            record,
            end: back,
        };
        // Where each line is now, else where its miss will put it if it comes first.
        let slots: Vec<u64> = lines
            .iter()
            // SAFETY: `locate` only reads the simulator's state (`SlotI1`'s contract).
            .map(|&l| unsafe { (cache.locate)(cache.cache, l) })
            .collect();
        let slots_end = cache.base + (cache.set_mask + 1) * cache.row_bytes;
        // The fields the slow path rewrites: per line, (what it holds, its offset).
        let mut fields: Vec<Vec<(SlotField, usize)>> = vec![Vec::new(); lines.len()];
        let back_at;
        if slots_end > 1 << 31 {
            // Out of 32-bit reach (a huge I1, or no low mapping): every fetch goes through
            // the slow path, which then has nothing to rewrite.
            dynasm!(a ; .arch x64 ; jmp =>entry ; =>back);
            back_at = a.offset().0;
            self.push_saving(a, (entry, back), kind);
        } else if !self.live[i] {
            // Flags dead: compare in memory, then stamp through a dead register (or rax).
            for (k, (&line, &slot)) in lines.iter().zip(&slots).enumerate() {
                if line < 1 << 31 {
                    let at = abs_mem(a, (Some(0x48), 0x81, 7), slot, Some(line as i32));
                    fields[k].push((SlotField::Line, at));
                } else {
                    let at = abs_mem(a, (None, 0x81, 7), slot, Some(line as u32 as i32));
                    fields[k].push((SlotField::Line, at));
                    dynasm!(a ; .arch x64 ; jne =>entry);
                    let hi = (line >> 32) as u32 as i32;
                    let high = slot + SlotField::High as u64;
                    let at = abs_mem(a, (None, 0x81, 7), high, Some(hi));
                    fields[k].push((SlotField::High, at));
                }
                dynasm!(a ; .arch x64 ; jne =>entry);
            }
            let scratch = self.dead_scratch(i, &[]);
            let r = scratch.unwrap_or(RAX);
            if scratch.is_none() && !self.fresh[0] {
                dynasm!(a ; .arch x64 ; gs mov QWORD [IS0], rax);
            }
            stamp_slots(a, r, cache, (lines, &slots), &mut fields);
            if scratch.is_none() {
                dynasm!(a ; .arch x64 ; gs mov rax, QWORD [IS0]);
                self.fresh[0] = true;
            } else if r < 2 {
                self.fresh[usize::from(r)] = false;
            }
            dynasm!(a ; .arch x64 ; =>back);
            back_at = a.offset().0;
            // The slow path saves what it borrows and puts it back before coming back.
            self.push_saving(a, (entry, back), kind);
        } else {
            // Flags live: compare without them (`lea`, `jrcxz`) in rax and rcx.
            if !self.fresh[0] {
                dynasm!(a ; .arch x64 ; gs mov QWORD [IS0], rax);
            }
            if !self.fresh[1] {
                dynasm!(a ; .arch x64 ; gs mov QWORD [IS1], rcx);
            }
            for (k, (&line, &slot)) in lines.iter().zip(&slots).enumerate() {
                let at = abs_mem(a, (Some(0x48), 0x8b, RAX), slot, None);
                fields[k].push((SlotField::Line, at));
                let neg = line.wrapping_neg();
                dynasm!(a
                    ; .arch x64
                    ; mov rcx, QWORD neg as i64
                    ; lea rcx, [rax + rcx]
                    ; jrcxz >next
                    ; jmp =>entry
                    ; next:
                );
            }
            stamp_slots(a, RAX, cache, (lines, &slots), &mut fields);
            self.slow.push(Slow { entry, back, kind });
            dynasm!(a ; .arch x64 ; =>back);
            back_at = a.offset().0;
            dynasm!(a ; .arch x64 ; gs mov rcx, QWORD [IS1] ; gs mov rax, QWORD [IS0]);
            self.fresh = [true; 2];
        }
        // The slow path's record (`fetch_slots_slow`), by the block's other constants.
        let mut label = Some(record);
        for w in record_words(addr, len, back_at, &fields) {
            let l = label.take().unwrap_or_else(|| a.new_dynamic_label());
            self.literals.push((l, w));
        }
    }

    // dynasm's dynamic registers (`Rq(n)`) expand to a `.into()` of the `u8` given.
    #[allow(clippy::useless_conversion)]
    fn data(
        &mut self,
        a: &mut Asm,
        // The instruction, its access and the registers the check borrows (`data_regs`).
        (i, dref, regs): (usize, DataRef, DataRegs),
        cache: MruCache,
        (helper, after_miss): (Helper, Option<AfterMiss>),
        // Live flags; entered with the registers and flags saved by the check before; entered
        // with the flags held (`Plan::stashed`); leaves the registers and flags saved for the
        // next; leaves the flags held (the registers put back).
        (live, chained, held, chain_out, hold): (bool, bool, bool, bool, bool),
    ) -> Result<(), String> {
        let Some(acc) = self.facts[i].accesses.get(dref.access).copied() else {
            return Err(format!("no memory access #{} in instruction", dref.access));
        };
        let size = u64::from(dref.size.max(1));
        let DataRegs { l, w, saved } = regs;
        let entry = a.new_dynamic_label();
        let back = a.new_dynamic_label();
        let out_of_line = computed_out_of_line(&acc, dref.lane);
        self.slow.push(Slow {
            entry,
            back,
            kind: SlowKind::Data {
                acc,
                offset: dref.offset,
                cache,
                helper,
                after_miss,
                size,
                saved,
                line_row: (near_rows(cache) && !out_of_line).then_some((l, w)),
                shared: self.shared_scans,
                lane: dref.lane,
            },
        });
        if saved[0] && !chained && !self.fresh[0] {
            dynasm!(a ; .arch x64 ; gs mov QWORD [IS0], rax);
        }
        if saved[1] && !chained && !self.fresh[1] {
            dynasm!(a ; .arch x64 ; gs mov QWORD [IS1], rcx);
        }
        if out_of_line {
            if live && !chained && !held {
                save_flags(a);
            }
            dynasm!(a ; .arch x64 ; jmp =>entry);
        } else {
            effective_address(a, &acc, dref.offset, gpr(w), gpr(l))?;
            if live && !chained && !held {
                save_flags(a);
            }
            let bits = cache.line_bits as i8;
            let last = (size - 1) as i32;
            if last == 0 {
                dynasm!(a ; .arch x64 ; mov Rq(l), Rq(w));
            } else {
                dynasm!(a ; .arch x64 ; lea Rq(l), [Rq(w) + last]);
            }
            dynasm!(a ; .arch x64 ; shr Rq(l), bits);
            // w = byte offset of the first byte's set row (or that divided by `row_scale`,
            // which the compare's addressing mode puts back). The line of the last byte is
            // compared with that row's MRU tag: equal only if the access lies in one line (a
            // tag in set s is s modulo the set count, and the next line belongs to the next
            // set), so no separate straddle test, except with a single set.
            let set_bits = cache.set_mask << cache.line_bits;
            let row = cache.row_bytes;
            let scale = row_scale(cache);
            match (i32::try_from(set_bits), cache.set_mask) {
                (Ok(sb), 1..) => {
                    dynasm!(a ; .arch x64 ; and Rd(w), DWORD sb);
                    if scale.is_none() {
                        scale_to_row(a, w, cache);
                    }
                }
                _ => {
                    // A single set or a huge one: the straddle test first, then the row by
                    // multiplication.
                    dynasm!(a
                        ; .arch x64
                        ; shr Rq(w), bits
                        ; cmp Rq(l), Rq(w)
                        ; jne =>entry
                        ; and Rq(w), DWORD cache.set_mask as i32
                        ; imul Rq(w), Rq(w), row as i32
                    );
                }
            }
            let tags_end = (cache.set_mask + 1) * row + cache.tags;
            let tg = cache.tags as i32;
            if let Some(scale) = scale {
                match scale {
                    2 => dynasm!(a ; .arch x64 ; cmp Rq(l), QWORD [Rq(w) * 2 + tg]),
                    4 => dynasm!(a ; .arch x64 ; cmp Rq(l), QWORD [Rq(w) * 4 + tg]),
                    8 => dynasm!(a ; .arch x64 ; cmp Rq(l), QWORD [Rq(w) * 8 + tg]),
                    _ => dynasm!(a ; .arch x64 ; cmp Rq(l), QWORD [Rq(w) + tg]),
                }
            } else if tags_end <= 1 << 31 {
                dynasm!(a ; .arch x64 ; cmp Rq(l), QWORD [Rq(w) + tg]);
            } else {
                let tags = self.literal(a, cache.tags);
                dynasm!(a
                    ; .arch x64
                    ; add Rq(w), QWORD [=>tags]
                    ; cmp Rq(l), QWORD [Rq(w)]
                );
            }
            dynasm!(a ; .arch x64 ; jne =>entry);
        }
        dynasm!(a ; .arch x64 ; =>back);
        if chain_out {
            return Ok(());
        }
        if live && !hold {
            restore_flags(a);
        }
        if saved[1] {
            dynasm!(a ; .arch x64 ; gs mov rcx, QWORD [IS1]);
            self.fresh[1] = true;
        }
        if saved[0] {
            dynasm!(a ; .arch x64 ; gs mov rax, QWORD [IS0]);
            self.fresh[0] = true;
        }
        Ok(())
    }

    /// The registers the data checks of instruction `i` borrow: `l` gets the line of the
    /// last byte, `w` the address and then the set row. Dead guest registers need no
    /// saving; otherwise rax (`gs:[IS0]`) and rcx (`gs:[IS1]`), `saved`. With `live` flags
    /// `l` is rax (`lahf`).
    fn data_regs(&self, i: usize, live: bool) -> DataRegs {
        let l = if live {
            RAX
        } else {
            self.dead_scratch(i, &[]).unwrap_or(RAX)
        };
        let w = self
            .dead_scratch(i, &[l])
            .unwrap_or(if l == RCX { RAX } else { RCX });
        let dead = self.dead_mask(i);
        let saves = |r: u8| (r == l || r == w) && dead & (1 << r) == 0;
        DataRegs {
            l,
            w,
            saved: [saves(RAX), saves(RCX)],
        }
    }

    /// The guest registers dead before instruction `i` (never rsp; none before a `rep`
    /// instruction emitted as a loop, whose code runs again and again).
    fn dead_mask(&self, i: usize) -> u16 {
        if self.rep_loop(i) {
            return 0;
        }
        self.dead.get(i).copied().unwrap_or(0) & !(1 << RSP)
    }

    /// A guest register dead before instruction `i` (none of `avoid`), which code placed
    /// there may use without saving.
    fn dead_scratch(&self, i: usize, avoid: &[u8]) -> Option<u8> {
        let dead = self.dead_mask(i);
        (0..16u8).find(|&r| dead & (1 << r) != 0 && !avoid.contains(&r))
    }

    /// Whether the data check of access `next` of instruction `i` may follow the one before
    /// it without the guest registers and flags put back in between (python3's `call
    /// *0x140(%rax)`: the load, then the push): its address must not use a register the
    /// checks borrow (the first check left it holding its tag row).
    fn chains_after(&self, i: usize, next: DataRef, regs: DataRegs) -> bool {
        let Some(acc) = self.facts[i].accesses.get(next.access) else {
            return false;
        };
        let borrowed = |r: Register| {
            let r = r.full_register();
            r == gpr(regs.l) || r == gpr(regs.w)
        };
        !borrowed(acc.base) && !borrowed(acc.index)
    }

    /// A label for an 8-byte constant in the pool after the block body (read `rip`-relative).
    fn literal(&mut self, a: &mut Asm, value: u64) -> DynamicLabel {
        if let Some(&(l, _)) = self.literals.iter().find(|&&(_, v)| v == value) {
            return l;
        }
        let l = a.new_dynamic_label();
        self.literals.push((l, value));
        l
    }

    fn call(
        &mut self,
        a: &mut Asm,
        i: usize,
        helper: Helper,
        arg1: CallArg,
        arg2: u64,
    ) -> Result<(), String> {
        let insn = self.facts[i].insn;
        dynasm!(a ; .arch x64 ; gs mov QWORD [IS0], rax);
        store_arg1(a, &insn, arg1)?;
        let back = a.new_dynamic_label();
        helper_call(a, helper, arg2, back);
        dynasm!(a ; .arch x64 ; =>back ; gs mov rax, QWORD [IS0]);
        Ok(())
    }
}

impl Plan {
    /// Callgrind (clgspeed): `fast` through the lean trampoline, whose result comes back in
    /// `gs:[helper_args]`; if it is non-zero, `slow` with the same argument 1 (still in
    /// `gs:[helper_args + 8]`: the trampolines do not write it). Flag-free (`jrcxz`).
    fn call_fallback(
        &mut self,
        a: &mut Asm,
        i: usize,
        fast: Helper,
        slow: Helper,
        arg1: CallArg,
        arg2: u64,
    ) -> Result<(), String> {
        let f = Fallback {
            insn: self.facts[i].insn,
            fast,
            slow,
            arg1,
            arg2,
        };
        call_fallback(a, &f)
    }
}

/// The arguments of `Plan::call_fallback`, kept for code emitted out of line.
#[derive(Clone, Copy)]
struct Fallback {
    insn: Instruction,
    fast: Helper,
    slow: Helper,
    arg1: CallArg,
    arg2: u64,
}

/// `Plan::call_fallback`'s code.
fn call_fallback(a: &mut Asm, f: &Fallback) -> Result<(), String> {
    dynasm!(a ; .arch x64 ; gs mov QWORD [IS0], rax ; gs mov QWORD [IS1], rcx);
    call_fallback_saved(a, f)
}

/// `call_fallback` where guest rax and rcx are in `gs:[IS0]` and `gs:[IS1]` already (and
/// the registers free).
fn call_fallback_saved(a: &mut Asm, f: &Fallback) -> Result<(), String> {
    store_arg1(a, &f.insn, f.arg1)?;
    let after_fast = a.new_dynamic_label();
    let done = a.new_dynamic_label();
    helper_call(a, f.fast, f.arg2, after_fast);
    dynasm!(a
        ; .arch x64
        ; =>after_fast
        ; gs mov rcx, QWORD [ARG0]
        ; jrcxz =>done
    );
    helper_call_same_arg2(a, f.slow, done);
    dynasm!(a
        ; .arch x64
        ; =>done
        ; gs mov rcx, QWORD [IS1]
        ; gs mov rax, QWORD [IS0]
    );
    Ok(())
}

/// `call_fallback_saved` as a shared routine, for the cold path of every block (its ~180
/// bytes were a tenth of Callgrind's translations): the same calls, entered as the shared
/// scans are (`enter_shared_fallback`). `None` where it cannot be shared: an argument 1
/// other than the guest rsp, routines with different `arg0`s, an `arg2` beyond 32 bits, no
/// memory for code.
fn shared_fallback(f: &Fallback) -> Option<u64> {
    if !matches!(f.arg1, CallArg::Sp) || f.fast.arg0 != f.slow.arg0 || !f.fast.integer_only {
        return None;
    }
    let arg2 = i32::try_from(f.arg2 as i64).ok()?;
    let key = RoutineKey::Fallback(
        f.fast.func as usize as u64,
        f.slow.func as usize as u64,
        f.arg2,
    );
    shared_routine(key, |at| fallback_routine(f, arg2, at))
}

/// The code of `shared_fallback`'s routine placed at `at`: entered by a `call` on the scan
/// stack with the routines' `arg0` in `gs:[ARG0]`, the guest rsp in `gs:[SCAN_RSP]`, guest
/// rax and rcx saved (both free) and `gs:[IS2]` free; keeps rdx and the flags.
fn fallback_routine(f: &Fallback, arg2: i32, at: u64) -> Option<Vec<u8>> {
    let mut a = Asm::new(at as usize);
    let (after_fast, done) = (a.new_dynamic_label(), a.new_dynamic_label());
    dynasm!(a
        ; .arch x64
        // `arg0` again for the slow routine: the fast one's result takes its slot.
        ; gs mov rax, QWORD [ARG0]
        ; gs mov QWORD [IS2], rax
        ; gs mov rax, QWORD [SCAN_RSP]
        ; gs mov QWORD [ARG1], rax
        ; gs mov QWORD [ARG2], arg2
    );
    trampoline_call(&mut a, f.fast.func, true, after_fast);
    dynasm!(a
        ; .arch x64
        ; =>after_fast
        ; gs mov rcx, QWORD [ARG0]
        ; jrcxz =>done
        ; gs mov rax, QWORD [IS2]
        ; gs mov QWORD [ARG0], rax
    );
    trampoline_call(&mut a, f.slow.func, f.slow.integer_only, done);
    dynasm!(a ; .arch x64 ; =>done ; ret);
    a.finalize().ok()
}

/// Calls `shared_fallback`'s routine with `arg0` on the thread's scan stack (the guest's
/// stays untouched), guest rax and rcx saved in `gs:[IS0]`/`gs:[IS1]`, and puts them back.
fn enter_shared_fallback(a: &mut Asm, arg0: u64, routine: u64) {
    call_on_scan_stack(a, RAX, arg0, routine);
    dynasm!(a
        ; .arch x64
        ; gs mov rcx, QWORD [IS1]
        ; gs mov rax, QWORD [IS0]
    );
}

/// The words of the tool's running cost before its miss slots (`InlineJump::cost_words`):
/// Ir and the four static events of `InlineJump::eager`.
const N_STATIC_WORDS: i32 = 5;

/// Byte offsets of the `JumpState` and `InlineRec` fields the inline jump and return paths
/// read and write (`calltrack`'s layout contract).
#[derive(Clone, Copy)]
struct JumpOffsets {
    expect: i32,
    lcount: i32,
    ir: i32,
    uncounted: i32,
    exit: i32,
    frame: i32,
    base_neg: i32,
    run_ir: i32,
    cur_miss: i32,
    cur_stride: i32,
    stat: i32,
    fn_active: i32,
    fn_len: i32,
    fn_base: i32,
    fn_top: i32,
    fn_end: i32,
    stack_last: i32,
    nonskipped: i32,
    negk: i32,
    rcount: i32,
    rmiss: i32,
    rplan: i32,
}

/// Byte offsets of the `CallPlan` fields the inline call case reads.
#[derive(Clone, Copy)]
struct PlanOffsets {
    callee: i32,
    ret_addr: i32,
    to_fn: i32,
    lo: i32,
    span: i32,
    inc: i32,
    push_fn: i32,
    arc_cxt: i32,
    arc_count: i32,
    arc_incl: i32,
    caller_cxt: i32,
    to_fn_hi: i32,
    ret_key: i32,
    callee_count: i32,
    callee_miss: i32,
    callee_plan: i32,
    callee_expect: i32,
    drop_hi: i32,
    stub: i32,
    sink: i32,
    stub_count: i32,
    from_bbcc: i32,
    armed_by: i32,
}

/// The size of a `CallPlan`: a cost centre's second plan follows its first.
const PLAN_BYTES: i32 = size_of::<super::calltrack::CallPlan>() as i32;

const PLAN_OFF: PlanOffsets = {
    use super::calltrack::CallPlan as P;
    use core::mem::offset_of;
    PlanOffsets {
        callee: offset_of!(P, callee) as i32,
        ret_addr: offset_of!(P, ret_addr) as i32,
        to_fn: offset_of!(P, to_fn) as i32,
        lo: offset_of!(P, lo) as i32,
        span: offset_of!(P, span) as i32,
        inc: offset_of!(P, inc) as i32,
        push_fn: offset_of!(P, push_fn) as i32,
        arc_cxt: offset_of!(P, arc_cxt) as i32,
        arc_count: offset_of!(P, arc_count) as i32,
        arc_incl: offset_of!(P, arc_incl) as i32,
        caller_cxt: offset_of!(P, caller_cxt) as i32,
        to_fn_hi: offset_of!(P, to_fn_hi) as i32,
        ret_key: offset_of!(P, ret_key) as i32,
        callee_count: offset_of!(P, callee_count) as i32,
        callee_miss: offset_of!(P, callee_miss) as i32,
        callee_plan: offset_of!(P, callee_plan) as i32,
        callee_expect: offset_of!(P, callee_expect) as i32,
        drop_hi: offset_of!(P, drop_hi) as i32,
        stub: offset_of!(P, stub) as i32,
        sink: offset_of!(P, sink) as i32,
        stub_count: offset_of!(P, stub_count) as i32,
        from_bbcc: offset_of!(P, from_bbcc) as i32,
        armed_by: offset_of!(P, armed_by) as i32,
    }
};

const JUMP_OFF: JumpOffsets = {
    use super::calltrack::{InlineRec as R, JumpState as S};
    use core::mem::offset_of;
    JumpOffsets {
        expect: offset_of!(S, expect) as i32,
        lcount: offset_of!(S, last_count) as i32,
        ir: offset_of!(S, ir) as i32,
        uncounted: offset_of!(S, uncounted) as i32,
        exit: offset_of!(S, exit) as i32,
        frame: offset_of!(S, ret_frame) as i32,
        base_neg: offset_of!(S, stack_base_neg) as i32,
        run_ir: offset_of!(S, run_ir) as i32,
        cur_miss: offset_of!(S, cur_miss) as i32,
        cur_stride: offset_of!(S, cur_stride) as i32,
        stat: offset_of!(S, stat) as i32,
        fn_active: offset_of!(S, fn_active) as i32,
        fn_len: offset_of!(S, fn_len) as i32,
        fn_base: offset_of!(S, fn_base) as i32,
        fn_top: offset_of!(S, fn_top) as i32,
        fn_end: offset_of!(S, fn_end) as i32,
        stack_last: offset_of!(S, stack_last) as i32,
        nonskipped: offset_of!(S, nonskipped) as i32,
        negk: offset_of!(R, neg_key) as i32,
        rcount: offset_of!(R, count) as i32,
        rmiss: offset_of!(R, miss) as i32,
        rplan: offset_of!(R, plan) as i32,
    }
};

/// Callgrind (clginline): the plain-jump case of the block-start routine (see
/// `calltrack::JumpState`). Goes to `done` when it applied; otherwise falls through with
/// every register and the flags as they were (the calls follow). Borrows rax, rcx, rdx.
fn inline_jump(
    a: &mut Asm,
    j: &super::calltrack::InlineJump,
    (done, (try_alt, alt_back), fail): (DynamicLabel, (DynamicLabel, DynamicLabel), DynamicLabel),
    flags_dead: bool,
) {
    let st = j.state as *const super::calltrack::JumpState as i64;
    let rec = j.rec as *const super::calltrack::InlineRec as i64;
    let JumpOffsets {
        expect,
        frame,
        negk,
        ..
    } = JUMP_OFF;
    dynasm!(a
        ; .arch x64
        ; gs mov QWORD [IS0], rax
        ; gs mov QWORD [IS1], rcx
        ; gs mov QWORD [IS2], rdx
    );
    // Live flags are kept in `gs:[instr_flags]` around the compares; every way out puts
    // them back (the return case, reached with them still saved, does so itself).
    let fail_here = if flags_dead {
        fail
    } else {
        save_flags(a);
        a.new_dynamic_label()
    };
    mov_addr(a, RDX, st as u64);
    mov_addr(a, RAX, rec as u64);
    dynasm!(a
        ; .arch x64
        ; mov rcx, QWORD [rdx + expect]
        ; add rcx, QWORD [rax + negk]
        ; jnz =>try_alt
        ; =>alt_back
        ; mov rcx, QWORD [rdx + frame]
        ; cmp rsp, QWORD [rcx + j.frame.sp]
        ; ja =>fail_here
    );
    enter_inline(a, j, Bases::REGS, true);
    if !j.ends_plain {
        dynasm!(a ; .arch x64 ; mov QWORD [rdx + expect], -1);
    }
    restore_to(a, flags_dead, done);
    if !flags_dead {
        dynasm!(a ; .arch x64 ; =>fail_here);
        restore_flags(a);
    }
    dynasm!(a ; .arch x64 ; =>fail);
    restore_scratch(a);
}

/// The jump case's common way (either entry, nothing to unwind) when the state and the
/// record lie below 2 GiB: addressed with 32-bit displacements, it borrows one register — a
/// guest register dead at the block's start (`dead`, a mask) when there is one and the flags
/// are dead, else rcx, or rax when the flags must be saved — instead of three.
///
/// Split for the layout: the first entry (`ShortForm::emit_hot`) is inline at the block's
/// start and falls through into the body when it applies; everything else (the second
/// entry, the way on to the return and call cases and the Rust fallback) is out of
/// line (`SlowKind::JumpCold`), so that a block's hot code is ~60 bytes followed by its body
/// instead of a jump over ~700 bytes of rarely run code.
#[derive(Clone, Copy)]
struct ShortForm {
    st: u64,
    rec: u64,
    /// The borrowed register.
    x: u8,
    /// Whether `x` is guest rcx, saved in `gs:[IS1]` (flags dead).
    borrowed: bool,
    flags_dead: bool,
}

impl ShortForm {
    /// `None` when the state or the record lies above 2 GiB (the full form is the common
    /// way then).
    fn new(j: &super::calltrack::InlineJump, flags_dead: bool, dead: u16) -> Option<ShortForm> {
        if !below_2gib(j.state) || !below_2gib(j.rec) {
            return None;
        }
        let st = j.state as *const super::calltrack::JumpState as u64;
        let rec = j.rec as *const super::calltrack::InlineRec as u64;
        let x = if !flags_dead {
            RAX
        } else {
            (0..16u8).find(|&n| dead & (1 << n) != 0).unwrap_or(RCX)
        };
        Some(ShortForm {
            st,
            rec,
            x,
            borrowed: x == RCX && dead & (1 << RCX) == 0,
            flags_dead,
        })
    }

    fn s(&self, off: i32) -> i32 {
        self.st as i32 + off
    }

    fn r(&self, off: i32) -> i32 {
        self.rec as i32 + off
    }

    /// Borrows `x` (and saves the flags when they are live); `restore` puts them back.
    fn save(&self, a: &mut Asm) {
        if !self.flags_dead {
            dynasm!(a ; .arch x64 ; gs mov QWORD [IS0], rax);
            save_flags(a);
        } else if self.borrowed {
            dynasm!(a ; .arch x64 ; gs mov QWORD [IS1], rcx);
        }
    }

    fn restore(&self, a: &mut Asm) {
        if !self.flags_dead {
            restore_flags(a);
            dynasm!(a ; .arch x64 ; gs mov rax, QWORD [IS0]);
        } else if self.borrowed {
            dynasm!(a ; .arch x64 ; gs mov rcx, QWORD [IS1]);
        }
    }

    /// The key test of the entry at byte `e` of the record (0, or `InlineRec::ALT`): to
    /// `other` when it is not the expected one.
    #[allow(clippy::useless_conversion)] // dynasm's `Rq(x)` converts the register number
    fn key_test(&self, a: &mut Asm, e: i32, other: DynamicLabel) {
        let o = JUMP_OFF;
        dynasm!(a
            ; .arch x64
            ; mov Rq(self.x), QWORD [self.s(o.expect)]
            ; add Rq(self.x), QWORD [self.r(e + o.negk)]
            ; jnz =>other
        );
    }

    /// Enters the block with the entry at byte `e` and puts back what was borrowed. There is
    /// nothing to unwind: the previous block ended plainly with the state armed, so it began
    /// with `rsp` at most the top frame's sp and, where it may have raised `rsp` above that,
    /// disarmed the state (`Instrumenter::disarm_if_unwound`).
    fn enter(&self, a: &mut Asm, j: &super::calltrack::InlineJump, e: i32) {
        let o = JUMP_OFF;
        let b = Bases {
            st: Base::Abs(self.st as i32),
            rec: Base::Abs(self.r(e)),
            x: self.x,
        };
        enter_inline(a, j, b, true);
        if !j.ends_plain {
            store_imm(a, b.st, o.expect, -1);
        }
        self.restore(a);
    }

    /// At a return site (flags dead), before anything is borrowed: to `entry` (the return
    /// case's first entry, out of line) when the previous block ended in a `ret`. The short form
    /// and its second entry never apply then (a `ret` leaves no expected key), so the
    /// return case is tried first and, where it does not apply, goes on as after them.
    fn ret_test(&self, a: &mut Asm, entry: DynamicLabel) {
        dynasm!(a
            ; .arch x64
            ; cmp QWORD [self.s(JUMP_OFF.exit)], EXIT_RET as i32
            ; je =>entry
        );
    }

    /// The inline part: borrows, tests the first entry (to `second`, out of line, when it
    /// is not the expected one) and enters with it, falling through.
    #[allow(clippy::useless_conversion)] // dynasm's `Rq(x)` converts the register number
    fn emit_hot(&self, a: &mut Asm, j: &super::calltrack::InlineJump, second: DynamicLabel) {
        self.save(a);
        self.key_test(a, 0, second);
        self.enter(a, j, 0);
    }

    /// The out-of-line part, from `second` (placed by the caller) with the register
    /// borrowed: the second entry (python3's interpreter loop runs its blocks at two
    /// recursion levels in turn: 40M of 357M block starts in the 3M loop), to `done` when it
    /// applies; at `miss` on to the return case (`try_ret`, entered as from the full jump
    /// case: rax, rcx and rdx saved, rdx = the state, rax = the record, the flags saved
    /// unless dead), which checks that the previous block ended in a `ret` and otherwise
    /// goes on to the call case and the Rust fallback. The full jump case (`inline_jump`)
    /// is not emitted with a short form: its checks are the short form's, so it never
    /// applies where they failed.
    fn emit_cold(
        &self,
        a: &mut Asm,
        j: &super::calltrack::InlineJump,
        (miss, done, try_ret): (DynamicLabel, DynamicLabel, DynamicLabel),
    ) {
        let alt = super::calltrack::InlineRec::ALT;
        self.key_test(a, alt, miss);
        self.enter(a, j, alt);
        dynasm!(a ; .arch x64 ; jmp =>done ; =>miss);
        let saved_rax = !self.flags_dead;
        let saved_rcx = self.flags_dead && self.borrowed;
        if !saved_rax {
            dynasm!(a ; .arch x64 ; gs mov QWORD [IS0], rax);
        }
        if !saved_rcx {
            dynasm!(a ; .arch x64 ; gs mov QWORD [IS1], rcx);
        }
        dynasm!(a
            ; .arch x64
            ; gs mov QWORD [IS2], rdx
        );
        mov_addr(a, RDX, self.st);
        mov_addr(a, RAX, self.rec);
        dynasm!(a ; .arch x64 ; jmp =>try_ret);
    }
}

/// The jump case with the record's second entry (out of line; rax = the record, rdx = the
/// state, the flags saved or dead): when its key is the expected one, rax points at it (it
/// is laid out like the first) and the jump case goes on at `back`; else to `fail`.
fn inline_jump_alt(a: &mut Asm, back: DynamicLabel, fail: DynamicLabel) {
    let JumpOffsets { expect, negk, .. } = JUMP_OFF;
    let alt = super::calltrack::InlineRec::ALT;
    dynasm!(a
        ; .arch x64
        ; mov rcx, QWORD [rdx + expect]
        ; add rcx, QWORD [rax + alt + negk]
        ; jnz =>fail
        ; lea rax, [rax + alt]
        ; jmp =>back
    );
}

/// Callgrind's inline return case (see [`super::calltrack::InlineJump`]), out of line: on
/// entry rax, rcx, rdx are saved, rdx is the state and the flags are saved in
/// `gs:[instr_flags]` (unless `flags_dead`); on the way to `done` or `fail` the flags are
/// put back (rax, rcx, rdx are restored at `done` and after `fail`).
fn inline_ret(
    a: &mut Asm,
    j: &super::calltrack::InlineJump,
    (done, fail, first): (DynamicLabel, DynamicLabel, Option<DynamicLabel>),
    flags_dead: bool,
) {
    if !j.ret_case {
        // No return case here: straight on to the call case (or the call), flags back.
        if !flags_dead {
            restore_flags(a);
        }
        dynasm!(a ; .arch x64 ; jmp =>fail);
        return;
    }
    let rec = j.rec as *const super::calltrack::InlineRec as i64;
    let JumpOffsets {
        expect,
        exit,
        frame,
        negk,
        fn_base,
        fn_top,
        ..
    } = JUMP_OFF;
    let fl = j.frame;
    let (fail_r, tail, after_charge) = (
        a.new_dynamic_label(),
        a.new_dynamic_label(),
        a.new_dynamic_label(),
    );
    // With the state and the record at 32-bit addresses rdx is free once the arc is
    // charged, and the frame stays in rax to the end (else rax is loaded again twice).
    let abs = below_2gib(j.state) && below_2gib(j.rec);
    let b = if abs {
        Bases {
            st: Base::Abs(j.state as *const super::calltrack::JumpState as i32),
            rec: Base::Abs(rec as i32),
            x: RCX,
        }
    } else {
        Bases::REGS
    };
    // The frame at rax has this block's key and rsp is its sp + 8 (to `fail_r` if not).
    let frame_fits = |a: &mut Asm| {
        if abs {
            load(a, RCX, b.rec, negk);
        } else {
            mov_addr(a, RCX, rec as u64);
            dynasm!(a ; .arch x64 ; mov rcx, QWORD [rcx + negk]);
        }
        dynasm!(a
            ; .arch x64
            ; add rcx, QWORD [rax + fl.key]
            ; jnz =>fail_r
            ; lea rcx, [rsp - 8]
            ; cmp rcx, QWORD [rax + fl.sp]
            ; jne =>fail_r
        );
    };
    // The previous block ended in a `ret` to the top frame's return address, rsp is the
    // frame's sp + 8 and this block's key is the frame's. The top frames may be tail calls'
    // (return address 0) above that frame: `tail`.
    dynasm!(a
        ; .arch x64
        ; cmp QWORD [rdx + exit], EXIT_RET as i32
        ; jne =>fail_r
    );
    if let Some(first) = first {
        // The entry from the block's start (`ShortForm::ret_test`), where the previous
        // block is known to end in a `ret`: saved here as the miss path saved them.
        dynasm!(a
            ; .arch x64
            ; jmp >checked
            ; =>first
            ; gs mov QWORD [IS0], rax
            ; gs mov QWORD [IS1], rcx
            ; gs mov QWORD [IS2], rdx
        );
        mov_addr(a, RDX, j.state as *const super::calltrack::JumpState as u64);
        dynasm!(a ; .arch x64 ; checked:);
    }
    dynasm!(a
        ; .arch x64
        ; mov rax, QWORD [rdx + frame]
    );
    frame_fits(a);
    dynasm!(a
        ; .arch x64
        ; mov rcx, QWORD j.addr as i64
        ; cmp rcx, QWORD [rax + fl.ret_addr]
        ; jne =>tail
    );
    // The arc's inclusive cost += the running cost (with the inline deltas) - the cost at
    // entry: Ir, or with eager charging every word of the running cost, before this block
    // is charged (rax = the frame); lazily the previous block (the callee's last) is charged
    // first.
    if j.eager.is_some() {
        dynasm!(a
            ; .arch x64
            ; =>after_charge
            ; gs mov QWORD [IS3], rbx
            ; gs mov QWORD [IS4], rsi
        );
        add_incl_eager(a, j, (RBX, RAX));
        dynasm!(a
            ; .arch x64
            ; gs mov rsi, QWORD [IS4]
            ; gs mov rbx, QWORD [IS3]
        );
    } else {
        dynasm!(a ; .arch x64 ; =>after_charge);
        // rdx is free once the state is addressed absolutely.
        let incl = if abs { RDX } else { RAX };
        add_incl_lazy(a, j, (RAX, incl), b.st);
    }
    if !abs {
        mov_addr(a, RAX, rec as u64);
    }
    enter_inline(a, j, b, false);
    // The callee's activation count and the function stack as before the call.
    if abs {
        restore_active(a, j, RAX, RDX, b.st);
    } else {
        dynasm!(a ; .arch x64 ; mov rax, QWORD [rdx + frame]);
        restore_active(a, j, RAX, RAX, b.st);
        dynasm!(a ; .arch x64 ; mov rax, QWORD [rdx + frame]);
    }
    load(a, RCX, Base::Rax, fl.fn_off);
    add_load(a, RCX, b.st, fn_base);
    store(a, b.st, fn_top, RCX);
    // The blocks that follow: the frame's key.
    if j.ends_plain {
        load(a, RCX, Base::Rax, fl.key);
        store(a, b.st, expect, RCX);
    } else {
        store_imm(a, b.st, expect, -1);
    }
    // The frame `drop` bytes below becomes the top one (below the bottom frame, the stack's
    // sentinel), and its sp the top sp.
    dynasm!(a
        ; .arch x64
        ; mov ecx, DWORD [rax + fl.drop]
        ; sub rax, rcx
    );
    store(a, b.st, frame, RAX);
    restore_to(a, flags_dead, done);
    inline_ret_tail(a, j, (tail, fail_r, after_charge), frame_fits);
    dynasm!(a ; .arch x64 ; =>fail_r);
    if !flags_dead {
        restore_flags(a);
    }
    dynasm!(a ; .arch x64 ; jmp =>fail);
}

/// With lazy charging, a popped frame's arc (`frame`: the frame's register, the state at
/// `st`): its inclusive Ir += the running Ir (the state's `ir`, lazily the running Ir
/// itself) - the Ir at the frame's entry. Clobbers `incl` and rcx.
#[allow(clippy::useless_conversion)] // dynasm's `Rq(n)` converts the register number
fn add_incl_lazy(a: &mut Asm, j: &super::calltrack::InlineJump, (frame, incl): (u8, u8), st: Base) {
    let fl = j.frame;
    load(a, RCX, st, JUMP_OFF.ir);
    dynasm!(a
        ; .arch x64
        ; sub rcx, QWORD [Rq(frame) + fl.enter_ir]
        ; mov Rq(incl), QWORD [Rq(frame) + fl.incl]
        ; add QWORD [Rq(incl)], rcx
    );
}

/// A popped frame's callee gets back its activation count from before the call (`frame`:
/// the frame's register, the state at `st`). Clobbers `val` and rcx.
#[allow(clippy::useless_conversion)] // dynasm's `Rq(n)` converts the register number
fn restore_active(a: &mut Asm, j: &super::calltrack::InlineJump, frame: u8, val: u8, st: Base) {
    let fn_active = JUMP_OFF.fn_active;
    let fl = j.frame;
    dynasm!(a
        ; .arch x64
        ; mov ecx, DWORD [Rq(frame) + fl.to_fn]
        ; shl rcx, 2
    );
    add_load(a, RCX, st, fn_active);
    dynasm!(a
        ; .arch x64
        ; mov Rd(val), DWORD [Rq(frame) + fl.active]
        ; mov DWORD [rcx], Rd(val)
    );
}

/// With eager charging, a popped frame's arc: its inclusive cost += the running cost (every
/// word in use, with the inline deltas) - the cost at the frame's entry (`frame`: the frame's
/// register; `run` and rsi are clobbered, rcx too).
#[allow(clippy::useless_conversion)] // dynasm's `Rq(n)` converts the register number
fn add_incl_eager(a: &mut Asm, j: &super::calltrack::InlineJump, (run, frame): (u8, u8)) {
    let JumpOffsets { run_ir, .. } = JUMP_OFF;
    let fl = j.frame;
    dynasm!(a
        ; .arch x64
        ; mov Rq(run), QWORD [rdx + run_ir]
        ; mov rsi, QWORD [Rq(frame) + fl.incl]
    );
    for k in 0..j.cost_words as i32 {
        dynasm!(a ; .arch x64 ; mov rcx, QWORD [Rq(run) + 8 * k]);
        if let Some(d) = cost_delta(k) {
            dynasm!(a ; .arch x64 ; add rcx, QWORD [rdx + d]);
        }
        dynasm!(a
            ; .arch x64
            ; sub rcx, QWORD [Rq(frame) + fl.enter_ir + 8 * k]
            ; add QWORD [rsi + 8 * k], rcx
        );
    }
}

/// The return case when the top frames are tail calls' (`inline_tail_call`: return address
/// 0, the key of the frame below), reached with rax = the top frame (this block's key, rsp
/// its sp + 8): the frames down to the first real call frame must fit too, and that one's
/// return address must be this block. Then (lazily) the previous block is charged, each tail
/// frame popped (its arc's inclusive cost, its callee's activation count) and the return
/// case goes on at `after_charge` with the call frame on top (and in rax); else to
/// `fail_r`.
fn inline_ret_tail(
    a: &mut Asm,
    j: &super::calltrack::InlineJump,
    (tail, fail_r, after_charge): (DynamicLabel, DynamicLabel, DynamicLabel),
    frame_fits: impl Fn(&mut Asm),
) {
    let JumpOffsets {
        frame, base_neg, ..
    } = JUMP_OFF;
    let fl = j.frame;
    let (walk, found, pop) = (
        a.new_dynamic_label(),
        a.new_dynamic_label(),
        a.new_dynamic_label(),
    );
    dynasm!(a
        ; .arch x64
        ; =>tail
        ; cmp QWORD [rax + fl.ret_addr], 0
        ; jne =>fail_r
        ; =>walk
        // The frame below (past a tail call's stub frame too), which must exist.
        ; mov ecx, DWORD [rax + fl.drop]
        ; sub rax, rcx
        ; mov rcx, QWORD [rdx + base_neg]
        ; add rcx, rax
        ; js =>fail_r
    );
    frame_fits(a);
    dynasm!(a
        ; .arch x64
        ; mov rcx, QWORD j.addr as i64
        ; cmp rcx, QWORD [rax + fl.ret_addr]
        ; je =>found
        ; cmp QWORD [rax + fl.ret_addr], 0
        ; jne =>fail_r
        ; jmp =>walk
        ; =>found
    );
    // The running cost (Ir, or eagerly every word) goes to the arcs before this block is
    // entered (at `after_charge`).
    let eager = j.eager.is_some();
    dynasm!(a ; .arch x64 ; gs mov QWORD [IS3], rbx);
    if eager {
        dynasm!(a ; .arch x64 ; gs mov QWORD [IS4], rsi);
    }
    dynasm!(a ; .arch x64 ; mov rbx, QWORD [rdx + frame] ; =>pop);
    if eager {
        add_incl_eager(a, j, (RAX, RBX));
    } else {
        add_incl_lazy(a, j, (RBX, RAX), Base::Rdx);
    }
    restore_active(a, j, RBX, RAX, Base::Rdx);
    dynasm!(a
        ; .arch x64
        ; mov ecx, DWORD [rbx + fl.drop]
        ; sub rbx, rcx
        ; cmp QWORD [rbx + fl.ret_addr], 0
        ; je =>pop
        ; mov QWORD [rdx + frame], rbx
    );
    if eager {
        dynasm!(a ; .arch x64 ; gs mov rsi, QWORD [IS4]);
    }
    dynasm!(a
        ; .arch x64
        ; mov rax, rbx
        ; gs mov rbx, QWORD [IS3]
        ; jmp =>after_charge
    );
}

/// The end of every inline case (the state at `b.st`): the entered block notes how it ends
/// (`JumpState::exit`): a call arms the call case for the next block (its cost centre's
/// plan, read at `b.rec + at`), a plain `ret` the return case. Flag-free.
fn note_exit(a: &mut Asm, j: &super::calltrack::InlineJump, at: i32, b: Bases) {
    let exit = JUMP_OFF.exit;
    if j.ends_call {
        load(a, b.x, b.rec, at);
        store(a, b.st, exit, b.x);
    } else {
        let e = if j.ends_ret { EXIT_RET } else { EXIT_OTHER };
        store_imm(a, b.st, exit, e as i32);
    }
}

/// Callgrind: the call case of the block-start routine (see `calltrack::CallPlan`), at the
/// start of a function's entry block (`at_start`: it saves rax, rcx, rdx itself, and falls
/// through to `fail`, which it places, when the case does not apply), or out of line (they
/// are saved; it jumps to `fail`, where they are restored). Goes to `done` when it applied,
/// with every register and the flags as they were. Borrows rax, rcx, rdx, rbx, rsi.
fn inline_call(
    a: &mut Asm,
    j: &super::calltrack::InlineJump,
    (done, fail): (DynamicLabel, DynamicLabel),
    flags_dead: bool,
    at_start: bool,
) {
    let JumpOffsets {
        expect, nonskipped, ..
    } = JUMP_OFF;
    let p = PLAN_OFF;
    let fl = j.frame;
    let (fail_here, fail_saved) = (a.new_dynamic_label(), a.new_dynamic_label());
    let (tail, entered) = (a.new_dynamic_label(), a.new_dynamic_label());
    plan_checks(a, j, (fail_here, Some(tail)), flags_dead, at_start);
    let via_stub = a.new_dynamic_label();
    dynasm!(a
        ; .arch x64
        // A direct call: nothing to unwind and the frame below stays (rsp + 8 <= its sp).
        ; cmp QWORD [rdx + nonskipped], -1
        ; jne =>via_stub
        ; cmp QWORD [rax + p.stub], 0
        ; jne =>fail_here
    );
    save_top_frame(a, FrameRegs::RbxRsi);
    dynasm!(a
        ; .arch x64
        ; lea rcx, [rsp + 8]
        ; cmp rcx, QWORD [rsi + fl.sp]
        ; ja =>fail_saved
    );
    // The two kinds of call each have their own copy of the rest, so that neither tests
    // the skipped state again (three tests a call, ~1% of a call-bound run). The direct
    // call runs straight through to the way out; the other forms jump back to it.
    call_frame(a, j, StubState::Clear, fail_saved);
    dynasm!(a ; .arch x64 ; =>entered);
    if j.ends_plain {
        dynasm!(a
            ; .arch x64
            ; mov rcx, QWORD [rax + p.callee_expect]
            ; mov QWORD [rdx + expect], rcx
        );
    } else {
        dynasm!(a ; .arch x64 ; mov QWORD [rdx + expect], -1);
    }
    case_applied(a, flags_dead, FrameRegs::RbxRsi, done);
    dynasm!(a
        ; .arch x64
        // Through a stub (the stub case ran): the stub's frame is the top one, at rsp.
        ; =>via_stub
        ; cmp QWORD [rax + p.stub], 0
        ; je =>fail_here
    );
    save_top_frame(a, FrameRegs::RbxRsi);
    dynasm!(a
        ; .arch x64
        ; cmp rsp, QWORD [rsi + fl.sp]
        ; jne =>fail_saved
    );
    call_frame(a, j, StubState::Set, fail_saved);
    dynasm!(a ; .arch x64 ; jmp =>entered ; =>tail);
    inline_tail_call(a, j, (fail_here, fail_saved));
    dynasm!(a ; .arch x64 ; jmp =>entered);
    case_failed(
        a,
        fail,
        (fail_here, fail_saved),
        flags_dead,
        (at_start, FrameRegs::RbxRsi),
    );
}

/// Whether the stub case ran before a call case (the skipped state is set, its frame the
/// top one), where the emitted code knows it; `Tested` at run time.
#[derive(Clone, Copy, PartialEq, Eq)]
enum StubState {
    Clear,
    Set,
    Tested,
}

/// The call case's frame and entry after its checks (rax = the plan, rdx = the state),
/// for a direct call (`Clear`) or one through a stub (`Set`: the frame after the stub's,
/// with its skipped state). Else to `fail_saved`.
fn call_frame(
    a: &mut Asm,
    j: &super::calltrack::InlineJump,
    stub: StubState,
    fail_saved: DynamicLabel,
) {
    let p = PLAN_OFF;
    let fl = j.frame;
    call_frame_slot(a, j, fail_saved);
    call_frame_arc(a, j, stub);
    dynasm!(a
        ; .arch x64
        ; mov QWORD [rsi + fl.sp], rsp
        ; mov rcx, QWORD [rax + p.ret_addr]
        ; mov QWORD [rsi + fl.ret_addr], rcx
        ; mov rcx, QWORD [rax + p.ret_key]
        ; mov QWORD [rsi + fl.key], rcx
    );
    frame_top(a, j);
    call_frame_enter(a, j, stub);
}

/// The call case's tail form (entered from `plan_checks` with rax = a plan whose return
/// address is 0, rdx = the state): a `jmp` from the planning cost centre into this entry
/// block, which Callgrind treats as a call whose frame takes the top frame's sp (nothing to
/// unwind: rsp <= that sp), with no return address; or, after a tail jump into a PLT stub
/// (the stub case's tail form ran), the stub's jump into the library, whose frame lies on
/// the stub's. Its return plan is the frame's below (below the stub's): the return case
/// pops it (with the stub's: the plan's `drop`) and goes on with that frame (the `ret` pops
/// them all). Ends as the call case does before its `expect` (rbx and rsi saved, the callee
/// entered), else to `fail_here` / `fail_saved`.
fn inline_tail_call(
    a: &mut Asm,
    j: &super::calltrack::InlineJump,
    (fail_here, fail_saved): (DynamicLabel, DynamicLabel),
) {
    let JumpOffsets {
        frame,
        base_neg,
        nonskipped,
        ..
    } = JUMP_OFF;
    let fl = j.frame;
    dynasm!(a
        ; .arch x64
        ; cmp QWORD [rdx + nonskipped], -1
        ; jne >stub_tail
    );
    tail_from_top(a, j, fail_here);
    dynasm!(a
        ; .arch x64
        ; jmp >checked
        // After a tail jump into a PLT stub (the stub case ran): the stub's frame (return
        // address 0) on top at rsp, and the frame below it returns into a known context.
        ; stub_tail:
        ; mov rcx, QWORD [rdx + frame]
        ; cmp rsp, QWORD [rcx + fl.sp]
        ; jne =>fail_here
        ; cmp QWORD [rcx + fl.ret_addr], 0
        ; jne =>fail_here
        ; sub rcx, fl.size
        ; add rcx, QWORD [rdx + base_neg]
        ; js =>fail_here
        ; mov rcx, QWORD [rdx + frame]
        ; cmp QWORD [rcx + fl.key - fl.size], -1
        ; je =>fail_here
        ; checked:
    );
    save_top_frame(a, FrameRegs::RbxRsi);
    call_frame_slot(a, j, fail_saved);
    call_frame_arc(a, j, StubState::Tested);
    dynasm!(a
        ; .arch x64
        // The frame lies at the old top's (right below it) sp, not at rsp.
        ; mov rcx, QWORD [rsi + fl.sp - fl.size]
        ; mov QWORD [rsi + fl.sp], rcx
        ; mov QWORD [rsi + fl.ret_addr], 0
        // The key of the frame it returns through (below the stub's frame, if any).
        ; mov rcx, QWORD [rdx + frame]
        ; cmp QWORD [rdx + nonskipped], -1
        ; je >own
        ; sub rcx, fl.size
        ; own:
        ; mov rcx, QWORD [rcx + fl.key]
        ; mov QWORD [rsi + fl.key], rcx
    );
    frame_top(a, j);
    call_frame_enter(a, j, StubState::Tested);
}

/// A tail jump out of the top frame's function (rdx = the state; no skipped function
/// active): nothing to unwind (rsp <= the top frame's sp) and the top frame returns into a
/// known context (the sentinel's and the disarmed frame's key is none); else to `fail_here`.
fn tail_from_top(a: &mut Asm, j: &super::calltrack::InlineJump, fail_here: DynamicLabel) {
    let JumpOffsets { frame, .. } = JUMP_OFF;
    dynasm!(a
        ; .arch x64
        ; mov rcx, QWORD [rdx + frame]
        ; cmp rsp, QWORD [rcx + j.frame.sp]
        ; ja =>fail_here
        ; cmp QWORD [rcx + j.frame.key], -1
        ; je =>fail_here
    );
}

/// The call cases' checks before a frame is pushed (rax = the plan, rdx = the state, rsi =
/// the top frame, `save_top_frame`): the callee's activation count (rbx then points at it)
/// gives the planned recursion level (`lo ..= lo + span`), rsi = a free frame slot and the
/// function stack has room. Else to `fail_saved`, as always while the frame cases are
/// disarmed: the state then holds no functions (`JumpState::fn_len` 0).
fn call_frame_slot(a: &mut Asm, j: &super::calltrack::InlineJump, fail_saved: DynamicLabel) {
    let JumpOffsets {
        fn_active,
        fn_len,
        fn_top,
        fn_end,
        ..
    } = JUMP_OFF;
    let p = PLAN_OFF;
    dynasm!(a
        ; .arch x64
        ; mov rbx, QWORD [rax + p.to_fn]
        ; cmp rbx, QWORD [rdx + fn_len]
        ; jae =>fail_saved
        ; shl rbx, 2
        ; add rbx, QWORD [rdx + fn_active]
        ; mov ecx, DWORD [rbx]
        ; sub ecx, DWORD [rax + p.lo]
        ; cmp ecx, DWORD [rax + p.span]
        ; ja =>fail_saved
    );
    frame_slot(a, j, fail_saved);
    dynasm!(a
        ; .arch x64
        ; mov rcx, QWORD [rdx + fn_top]
        ; cmp rcx, QWORD [rdx + fn_end]
        ; jae =>fail_saved
    );
}

/// The commit of every call case (rsi = the frame, rbx = the callee's activation count): with
/// lazy charging the previous block is charged (`lazy_call_charge`), then the frame's fields
/// that come from the plan and the state alike: the activation count
/// before (then the plan's increment), the arc (its count + 1), its inclusive Ir, the
/// caller's context, the skipped state and the bytes its return pops.
fn call_frame_arc(a: &mut Asm, j: &super::calltrack::InlineJump, stub: StubState) {
    if j.eager.is_none() {
        lazy_call_charge(a, stub);
    }
    let JumpOffsets { nonskipped, .. } = JUMP_OFF;
    let p = PLAN_OFF;
    let fl = j.frame;
    dynasm!(a
        ; .arch x64
        // The activation count before the call, with the bytes its return pops.
        ; mov ecx, DWORD [rbx]
        ; or rcx, QWORD [rax + p.drop_hi]
        ; mov QWORD [rsi + fl.active], rcx
        ; mov ecx, DWORD [rax + p.inc]
        ; add DWORD [rbx], ecx
        ; mov rcx, QWORD [rax + p.arc_count]
        ; inc QWORD [rcx]
        // Two `u32` fields a store (`FrameLayout::arc`): the arc and the caller's context,
        // then the skipped state and the callee function.
        ; mov rcx, QWORD [rax + p.arc_cxt]
        ; mov QWORD [rsi + fl.arc], rcx
        ; mov ecx, DWORD [rdx + nonskipped]
        ; or rcx, QWORD [rax + p.to_fn_hi]
        ; mov QWORD [rsi + fl.nonskipped], rcx
        ; mov rcx, QWORD [rax + p.arc_incl]
        ; mov QWORD [rsi + fl.incl], rcx
    );
}

/// After a call case pushed its frame (`frame_top`): the skipped state ends, the callee's
/// function goes on the function stack (when the plan says so) and this block, with the
/// planned cost centre, is the last one.
fn call_frame_enter(a: &mut Asm, j: &super::calltrack::InlineJump, stub: StubState) {
    let JumpOffsets {
        fn_top, nonskipped, ..
    } = JUMP_OFF;
    let p = PLAN_OFF;
    match stub {
        StubState::Clear => {}
        StubState::Set => dynasm!(a ; .arch x64 ; mov QWORD [rdx + nonskipped], -1),
        // Stored only after the stub case: a store costs more than the test.
        StubState::Tested => dynasm!(a
            ; .arch x64
            ; cmp QWORD [rdx + nonskipped], -1
            ; je >ended
            ; mov QWORD [rdx + nonskipped], -1
            ; ended:
        ),
    }
    dynasm!(a
        ; .arch x64
        ; cmp QWORD [rax + p.push_fn], 0
        ; je >pushed
        ; mov rcx, QWORD [rdx + fn_top]
        ; mov rbx, QWORD [rax + p.to_fn]
        ; mov DWORD [rcx], ebx
        ; add rcx, 4
        ; mov QWORD [rdx + fn_top], rcx
        ; pushed:
    );
    enter_block(
        a,
        j,
        (p.callee_count, p.callee_miss, p.callee_plan),
        Bases::REGS,
        false,
    );
    if j.eager.is_some() {
        // The miss helpers count into the callee's array again (after the stub case's sink).
        let cur_stride = JUMP_OFF.cur_stride;
        let slots = j.cost_words as i32 - N_STATIC_WORDS;
        dynasm!(a ; .arch x64 ; mov QWORD [rdx + cur_stride], slots);
    }
}

/// The call case's charge of the previous block (lazy charging; rax = the plan, rbx = the
/// callee's activation count): as the jump case does, or after the stub case the stub's Ir
/// to the caller's skipped-cost sink, without an execution (the running Ir has it since
/// the stub case).
fn lazy_call_charge(a: &mut Asm, stub: StubState) {
    let JumpOffsets {
        lcount,
        uncounted,
        nonskipped,
        fn_active,
        ..
    } = JUMP_OFF;
    let p = PLAN_OFF;
    if stub == StubState::Tested {
        dynasm!(a
            ; .arch x64
            ; cmp QWORD [rdx + nonskipped], -1
            ; jne >stub_charge
        );
    }
    if stub != StubState::Set {
        count_previous(a, Bases::REGS);
    }
    if stub == StubState::Tested {
        dynasm!(a ; .arch x64 ; jmp >charged ; stub_charge:);
    }
    if stub != StubState::Clear {
        dynasm!(a
            ; .arch x64
            // The stub's execution, counted on no counter.
            ; inc QWORD [rdx + uncounted]
            ; mov rcx, QWORD [rax + p.sink]
            ; mov rbx, QWORD [rdx + lcount]
            ; mov rbx, QWORD [rbx + 8]
            ; add QWORD [rcx], rbx
            ; mov rbx, QWORD [rax + p.to_fn]
            ; shl rbx, 2
            ; add rbx, QWORD [rdx + fn_active]
        );
    }
    if stub == StubState::Tested {
        dynasm!(a ; .arch x64 ; charged:);
    }
}

/// Charges `n` executions of a self-loop's block that its later copies deferred
/// (`Plan::loop_lite`): `n` on the last block's counter and `n` times its Ir, with
/// what `short` borrows put back after.
#[allow(clippy::useless_conversion)] // dynasm's `Rq(x)` converts the register number
fn loop_charge(a: &mut Asm, short: &ShortForm, j: &super::calltrack::InlineJump, n: i32) {
    let o = JUMP_OFF;
    let st = Base::Abs(short.st as i32);
    short.save(a);
    load(a, short.x, st, o.lcount);
    dynasm!(a ; .arch x64 ; add QWORD [Rq(short.x)], n);
    add_imm(a, st, o.ir, n * j.ir as i32);
    short.restore(a);
}

/// Whether all of `*x` lies below 2 GiB, where code addresses it with a 32-bit displacement.
fn below_2gib<T>(x: &T) -> bool {
    x as *const T as u64 + size_of::<T>() as u64 <= 1 << 31
}

/// Where a block whose instructions are `insns` may leave `rsp` above where it found it: the
/// index after its last write to `rsp` (from there on `rsp` is the one the block leaves
/// with). `None` when every write is a known step and together they do not raise it: pushes
/// and pops, `add`/`sub` of an immediate, `lea rsp, [rsp + d]`, `and` with a negative
/// immediate (an alignment). Anything else (`mov rsp`, `leave`, `pop rsp`, `xchg`) may
/// raise it.
pub(super) fn after_rsp_rise<'a>(
    insns: impl IntoIterator<Item = &'a Instruction>,
    info: &mut InstructionInfoFactory,
) -> Option<usize> {
    let mut rise = 0i64;
    let mut unknown = false;
    let mut last = None;
    for (i, insn) in insns.into_iter().enumerate() {
        if !writes_rsp(info, insn) {
            continue;
        }
        last = Some(i + 1);
        match rsp_step(insn) {
            Some(d) => rise += d,
            None => unknown = true,
        }
    }
    last.filter(|_| unknown || rise > 0)
}

/// The change a known step makes to `rsp` (an upper bound for `and`), else `None`.
fn rsp_step(insn: &Instruction) -> Option<i64> {
    use iced_x86::Mnemonic as M;
    let rsp_dest = insn.op0_kind() == OpKind::Register && insn.op0_register() == Register::RSP;
    let imm = || match insn.op1_kind() {
        OpKind::Immediate8to64
        | OpKind::Immediate32to64
        | OpKind::Immediate8
        | OpKind::Immediate32 => Some(insn.immediate(1) as i64),
        _ => None,
    };
    match insn.mnemonic() {
        M::Push | M::Pop | M::Pushf | M::Pushfq | M::Popf | M::Popfq if !rsp_dest => {
            Some(i64::from(insn.stack_pointer_increment()))
        }
        M::Add if rsp_dest => imm(),
        M::Sub if rsp_dest => imm().map(|v| v.wrapping_neg()),
        M::And if rsp_dest => imm().filter(|&v| v < 0).map(|_| 0),
        M::Lea
            if rsp_dest
                && insn.memory_base() == Register::RSP
                && insn.memory_index() == Register::None =>
        {
            Some(insn.memory_displacement64() as i64)
        }
        _ => None,
    }
}

/// Whether `insn` may change `rsp` (a memory operand's base is a read).
fn writes_rsp(info: &mut InstructionInfoFactory, insn: &Instruction) -> bool {
    info.info(insn).used_registers().iter().any(|r| {
        r.register().full_register() == Register::RSP
            && !matches!(
                r.access(),
                OpAccess::Read | OpAccess::None | OpAccess::NoMemAccess
            )
    })
}

/// Lazy charging of the previous block (the state at `b.st`, `b.x` free, flags saved or
/// dead): one execution on its counter. Its Ir went to the running Ir's delta when it was
/// entered (`enter_block`), so that this charge is one load and one increment instead of
/// a chain of two dependent loads.
fn count_previous(a: &mut Asm, b: Bases) {
    let x = b.x;
    load(a, x, b.st, JUMP_OFF.lcount);
    inc_at(a, x);
}

/// Where an inline case finds the state and the block's record (or plan): in rdx and rax
/// with rcx free (`Bases::REGS`, the full forms), or at 32-bit absolute addresses with one
/// free register (`inline_jump_low`).
#[derive(Clone, Copy)]
struct Bases {
    st: Base,
    rec: Base,
    /// The scratch register.
    x: u8,
}

/// A base register is named statically: dynasm gives a memory operand on a dynamic base
/// register a SIB byte (it could be rsp), one byte more on every access of the full forms.
#[derive(Clone, Copy)]
enum Base {
    Rdx,
    Rax,
    Abs(i32),
}

impl Bases {
    const REGS: Bases = Bases {
        st: Base::Rdx,
        rec: Base::Rax,
        x: RCX,
    };
}

/// `mov x, [base + off]`.
#[allow(clippy::useless_conversion)] // dynasm's `Rq(n)` converts the register number
fn load(a: &mut Asm, x: u8, base: Base, off: i32) {
    match base {
        Base::Rdx => dynasm!(a ; .arch x64 ; mov Rq(x), QWORD [rdx + off]),
        Base::Rax => dynasm!(a ; .arch x64 ; mov Rq(x), QWORD [rax + off]),
        Base::Abs(at) => dynasm!(a ; .arch x64 ; mov Rq(x), QWORD [at + off]),
    }
}

/// `mov reg, addr` in five bytes where `addr` fits 32 bits (zero-extended), else ten.
#[allow(clippy::useless_conversion)] // dynasm's `Rd(x)` converts the register number
fn mov_addr(a: &mut Asm, reg: u8, addr: u64) {
    match u32::try_from(addr) {
        Ok(v) => dynasm!(a ; .arch x64 ; mov Rd(reg), DWORD v as i32),
        Err(_) => dynasm!(a ; .arch x64 ; mov Rq(reg), QWORD addr as i64),
    }
}

/// `add x, [base + off]`.
#[allow(clippy::useless_conversion)] // dynasm's `Rq(n)` converts the register number
fn add_load(a: &mut Asm, x: u8, base: Base, off: i32) {
    match base {
        Base::Rdx => dynasm!(a ; .arch x64 ; add Rq(x), QWORD [rdx + off]),
        Base::Rax => dynasm!(a ; .arch x64 ; add Rq(x), QWORD [rax + off]),
        Base::Abs(at) => dynasm!(a ; .arch x64 ; add Rq(x), QWORD [at + off]),
    }
}

/// `mov [base + off], x`.
#[allow(clippy::useless_conversion)] // dynasm's `Rq(n)` converts the register number
fn store(a: &mut Asm, base: Base, off: i32, x: u8) {
    match base {
        Base::Rdx => dynasm!(a ; .arch x64 ; mov QWORD [rdx + off], Rq(x)),
        Base::Rax => dynasm!(a ; .arch x64 ; mov QWORD [rax + off], Rq(x)),
        Base::Abs(at) => dynasm!(a ; .arch x64 ; mov QWORD [at + off], Rq(x)),
    }
}

/// `mov qword [base + off], imm` (sign-extended).
fn store_imm(a: &mut Asm, base: Base, off: i32, imm: i32) {
    match base {
        Base::Rdx => dynasm!(a ; .arch x64 ; mov QWORD [rdx + off], imm),
        Base::Rax => dynasm!(a ; .arch x64 ; mov QWORD [rax + off], imm),
        Base::Abs(at) => dynasm!(a ; .arch x64 ; mov QWORD [at + off], imm),
    }
}

/// `add qword [base + off], imm` (sign-extended).
fn add_imm(a: &mut Asm, base: Base, off: i32, imm: i32) {
    match base {
        Base::Rdx => dynasm!(a ; .arch x64 ; add QWORD [rdx + off], imm),
        Base::Rax => dynasm!(a ; .arch x64 ; add QWORD [rax + off], imm),
        Base::Abs(at) => dynasm!(a ; .arch x64 ; add QWORD [at + off], imm),
    }
}

/// `inc qword [x]` (rcx named statically, as `Base`).
#[allow(clippy::useless_conversion)] // dynasm's `Rq(n)` converts the register number
fn inc_at(a: &mut Asm, x: u8) {
    if x == RCX {
        dynasm!(a ; .arch x64 ; inc QWORD [rcx]);
    } else {
        dynasm!(a ; .arch x64 ; inc QWORD [Rq(x)]);
    }
}

/// The start of every case on a `CallPlan`: rax, rcx, rdx saved (`at_start`; else they are)
/// and the flags (unless dead), then the checks: rdx = the state, rax = the armed cost
/// centre's plan that names this block (`callee`, or `stub` for the stub case: the first
/// plan or the second after it), whose return address is `[rsp]`. Else to `fail`; a tail
/// call's plan (return address 0) to `tail` (to `fail` without one). Whether the frame
/// cases are armed is left to the cases (one test fewer a call): the call cases find out
/// by the function count (`call_frame_slot`), the stub case by the stack's base.
fn plan_checks(
    a: &mut Asm,
    j: &super::calltrack::InlineJump,
    (fail, tail): (DynamicLabel, Option<DynamicLabel>),
    flags_dead: bool,
    at_start: bool,
) {
    if at_start {
        dynasm!(a
            ; .arch x64
            ; gs mov QWORD [IS0], rax
            ; gs mov QWORD [IS1], rcx
            ; gs mov QWORD [IS2], rdx
        );
    }
    if !flags_dead {
        save_flags(a);
    }
    let JumpOffsets { exit, .. } = JUMP_OFF;
    let p = PLAN_OFF;
    let target = if j.stub { p.stub } else { p.callee };
    mov_addr(a, RDX, j.state as *const super::calltrack::JumpState as u64);
    dynasm!(a
        ; .arch x64
        ; mov rax, QWORD [rdx + exit]
        ; cmp rax, EXIT_OTHER as i32
        ; jbe =>fail
        ; mov rcx, QWORD j.bb as i64
        ; cmp rcx, QWORD [rax + target]
        ; je >named
        // The calling cost centre's second plan (`CallPlan`) lies right after its first.
        ; add rax, PLAN_BYTES
        ; cmp rcx, QWORD [rax + target]
    );
    if j.own_plan != 0 && !j.stub {
        // The block's own plan, when the armed cost centre made it.
        dynasm!(a
            ; .arch x64
            ; je >named
            ; sub rax, PLAN_BYTES
        );
        mov_addr(a, RCX, j.own_plan);
        dynasm!(a
            ; .arch x64
            ; cmp rax, QWORD [rcx + p.armed_by]
            ; jne =>fail
            ; mov rax, rcx
        );
    } else {
        dynasm!(a ; .arch x64 ; jne =>fail);
    }
    dynasm!(a
        ; .arch x64
        ; named:
        ; mov rcx, QWORD [rax + p.ret_addr]
        ; test rcx, rcx
        ; jz =>tail.unwrap_or(fail)
        ; cmp rcx, QWORD [rsp]
        ; jne =>fail
    );
}

/// The registers a plan case borrows besides rax, rcx and rdx: rbx and rsi for the call
/// cases (rbx points at the callee's activation count), rsi alone for the stub case.
#[derive(Clone, Copy, PartialEq, Eq)]
enum FrameRegs {
    RbxRsi,
    Rsi,
}

/// rsi (and rbx, with `RbxRsi`) saved, rsi = the top frame (the stack's sentinel when it is
/// empty), whose `sp` the cases check before the frame slot (`frame_slot`).
fn save_top_frame(a: &mut Asm, regs: FrameRegs) {
    if regs == FrameRegs::RbxRsi {
        dynasm!(a ; .arch x64 ; gs mov QWORD [IS3], rbx);
    }
    dynasm!(a
        ; .arch x64
        ; gs mov QWORD [IS4], rsi
        ; mov rsi, QWORD [rdx + JUMP_OFF.frame]
    );
}

/// rsi (and rbx) back from where `save_top_frame` put them.
fn restore_top_frame_regs(a: &mut Asm, regs: FrameRegs) {
    dynasm!(a ; .arch x64 ; gs mov rsi, QWORD [IS4]);
    if regs == FrameRegs::RbxRsi {
        dynasm!(a ; .arch x64 ; gs mov rbx, QWORD [IS3]);
    }
}

/// rsi (the top frame, `save_top_frame`) = the slot of a new frame above it; to `fail` when
/// the shadow stack's capacity has none.
fn frame_slot(a: &mut Asm, j: &super::calltrack::InlineJump, fail: DynamicLabel) {
    let stack_last = JUMP_OFF.stack_last;
    let fl = j.frame;
    dynasm!(a
        ; .arch x64
        ; add rsi, fl.size
        ; cmp rsi, QWORD [rdx + stack_last]
        ; ja =>fail
    );
}

/// The end of a frame push (rsi = the new frame, its other fields written): the running
/// cost at entry (lazily the Ir, which the state's `ir` is; with eager charging every word
/// in use, before the callee is charged, with the inline deltas) and the function stack's
/// depth; the frame becomes the top one.
fn frame_top(a: &mut Asm, j: &super::calltrack::InlineJump) {
    let JumpOffsets {
        frame,
        run_ir,
        fn_base,
        fn_top,
        ..
    } = JUMP_OFF;
    let fl = j.frame;
    if j.eager.is_none() {
        dynasm!(a
            ; .arch x64
            ; mov rcx, QWORD [rdx + JUMP_OFF.ir]
            ; mov QWORD [rsi + fl.enter_ir], rcx
        );
    } else {
        for k in 0..j.cost_words as i32 {
            dynasm!(a
                ; .arch x64
                ; mov rcx, QWORD [rdx + run_ir]
                ; mov rcx, QWORD [rcx + 8 * k]
            );
            if let Some(d) = cost_delta(k) {
                dynasm!(a ; .arch x64 ; add rcx, QWORD [rdx + d]);
            }
            dynasm!(a ; .arch x64 ; mov QWORD [rsi + fl.enter_ir + 8 * k], rcx);
        }
    }
    dynasm!(a
        ; .arch x64
        ; mov rcx, QWORD [rdx + fn_top]
        ; sub rcx, QWORD [rdx + fn_base]
        ; mov QWORD [rsi + fl.fn_off], rcx
        ; mov QWORD [rdx + frame], rsi
    );
}

/// Where the state keeps the inline delta of the tool's running-cost word `k` (`JumpState`
/// `ir` for Ir, `stat` for the next four static events; the miss words have none: the
/// helpers count into the running cost directly).
fn cost_delta(k: i32) -> Option<i32> {
    let JumpOffsets { ir, stat, .. } = JUMP_OFF;
    match k {
        0 => Some(ir),
        1..=4 => Some(stat + 8 * (k - 1)),
        _ => None,
    }
}

/// The flags (from `gs:[instr_flags]`, unless dead) and rax, rcx, rdx (from
/// `gs:[instr_scratch]`) put back, then to `done`.
fn restore_to(a: &mut Asm, flags_dead: bool, done: DynamicLabel) {
    if !flags_dead {
        restore_flags(a);
    }
    restore_scratch(a);
    dynasm!(a ; .arch x64 ; jmp =>done);
}

/// rax, rcx and rdx back from `gs:[instr_scratch]`, where the inline cases saved them.
fn restore_scratch(a: &mut Asm) {
    dynasm!(a
        ; .arch x64
        ; gs mov rdx, QWORD [IS2]
        ; gs mov rcx, QWORD [IS1]
        ; gs mov rax, QWORD [IS0]
    );
}

/// The way out of a plan case that applied: rsi (and rbx), the flags and rax/rcx/rdx
/// restored, to `done`.
fn case_applied(a: &mut Asm, flags_dead: bool, regs: FrameRegs, done: DynamicLabel) {
    restore_top_frame_regs(a, regs);
    restore_to(a, flags_dead, done);
}

/// The ways out of a plan case that did not apply: `fail_saved` (rbx and rsi saved) and
/// `fail_here` lead to `fail` (placed here when `at_start`).
fn case_failed(
    a: &mut Asm,
    fail: DynamicLabel,
    (fail_here, fail_saved): (DynamicLabel, DynamicLabel),
    flags_dead: bool,
    (at_start, regs): (bool, FrameRegs),
) {
    dynasm!(a ; .arch x64 ; =>fail_saved);
    restore_top_frame_regs(a, regs);
    dynasm!(a ; .arch x64 ; =>fail_here);
    if !flags_dead {
        restore_flags(a);
    }
    if at_start {
        dynasm!(a ; .arch x64 ; =>fail);
        restore_scratch(a);
    } else {
        dynasm!(a ; .arch x64 ; jmp =>fail);
    }
}

/// Callgrind: the stub case at the start of a skipped function's block (see
/// `calltrack::CallPlan::stub`), as `inline_call` at a block's start; it borrows rsi but
/// not rbx.
fn inline_stub(
    a: &mut Asm,
    j: &super::calltrack::InlineJump,
    (done, fail): (DynamicLabel, DynamicLabel),
    flags_dead: bool,
) {
    let JumpOffsets {
        expect,
        lcount,
        uncounted,
        nonskipped,
        ..
    } = JUMP_OFF;
    let p = PLAN_OFF;
    let fl = j.frame;
    let (fail_here, fail_saved) = (a.new_dynamic_label(), a.new_dynamic_label());
    let (tail, entered) = (a.new_dynamic_label(), a.new_dynamic_label());
    plan_checks(a, j, (fail_here, Some(tail)), flags_dead, true);
    // A call into the stub: its frame at rsp, the frame below stays (rsp + 8 <= its sp). A
    // tail call (`jmp` into the stub, see `inline_tail_call`): at the top frame's sp (rsp <=
    // that sp), with no skipped function active, that frame returning into a known context. The frame cases must be armed (the call cases find
    // them disarmed by the function count, `call_frame_slot`).
    dynasm!(a
        ; .arch x64
        ; cmp QWORD [rdx + JUMP_OFF.base_neg], 0
        ; je =>fail_here
    );
    save_top_frame(a, FrameRegs::Rsi);
    dynasm!(a
        ; .arch x64
        ; lea rcx, [rsp + 8]
        ; cmp rcx, QWORD [rsi + fl.sp]
        ; ja =>fail_saved
    );
    // After `save_top_frame`.
    let commit = |a: &mut Asm, tail: bool| {
        frame_slot(a, j, fail_saved);
        // Commit: charge the caller's block, as the jump case does (with eager charging it
        // was charged when it started).
        if j.eager.is_none() {
            count_previous(a, Bases::REGS);
        } else {
            // The caller's block was counted on its counter when it started; the stub's
            // execution goes to the skipped-cost sink, counted on no counter.
            dynasm!(a ; .arch x64 ; inc QWORD [rdx + uncounted]);
        }
        dynasm!(a
            ; .arch x64
            // The stub's frame: no arc, no return plan (so the rest of the plan is never
            // read).
            ; mov DWORD [rsi + fl.arc], -1
            ; mov rcx, QWORD [rax + p.caller_cxt]
            ; mov DWORD [rsi + fl.cxt], ecx
            ; mov DWORD [rsi + fl.nonskipped], -1
            ; mov rcx, QWORD [rax + p.ret_addr]
            ; mov QWORD [rsi + fl.ret_addr], rcx
            ; mov QWORD [rsi + fl.key], -1
        );
        if tail {
            dynasm!(a
                ; .arch x64
                ; mov rcx, QWORD [rsi + fl.sp - fl.size]
                ; mov QWORD [rsi + fl.sp], rcx
            );
        } else {
            dynasm!(a ; .arch x64 ; mov QWORD [rsi + fl.sp], rsp);
        }
        frame_top(a, j);
        // The stub is entered after its frame took the running cost.
        if let Some(more) = j.eager {
            stub_eager_charge(a, j, more);
        } else {
            dynasm!(a ; .arch x64 ; add QWORD [rdx + JUMP_OFF.ir], j.ir as i32);
        }
    };
    commit(a, false);
    dynasm!(a
        ; .arch x64
        ; =>entered
        ; mov rcx, QWORD [rax + p.from_bbcc]
        ; mov QWORD [rdx + nonskipped], rcx
        // The stub, with its cost centre, is the last block; the plan stays armed.
        ; mov rcx, QWORD [rax + p.stub_count]
        ; mov QWORD [rdx + lcount], rcx
        ; mov QWORD [rdx + expect], -1
    );
    // A call into the stub runs straight through to the way out; the tail form jumps back.
    case_applied(a, flags_dead, FrameRegs::Rsi, done);
    dynasm!(a
        ; .arch x64
        ; =>tail
        ; cmp QWORD [rdx + nonskipped], -1
        ; jne =>fail_here
    );
    tail_from_top(a, j, fail_here);
    save_top_frame(a, FrameRegs::Rsi);
    commit(a, true);
    dynasm!(a ; .arch x64 ; jmp =>entered);
    case_failed(
        a,
        fail,
        (fail_here, fail_saved),
        flags_dead,
        (true, FrameRegs::Rsi),
    );
}

/// Eager charging (`--cache-sim=yes`): the stub case charges the stub, after its frame took
/// the running cost, to the running cost and to the caller's skipped-cost sink (rax = the
/// plan, whose `sink` is the sink's Ir word, the other static events after it, then the
/// miss slots), and points the miss helpers at the sink with stride 0 (as `setup` does in a
/// skipped function; the call case that follows sets the stride back).
fn stub_eager_charge(a: &mut Asm, j: &super::calltrack::InlineJump, more: [u32; 4]) {
    let JumpOffsets {
        ir,
        stat,
        cur_miss,
        cur_stride,
        ..
    } = JUMP_OFF;
    let p = PLAN_OFF;
    dynasm!(a
        ; .arch x64
        ; mov rcx, QWORD [rax + p.sink]
        ; add QWORD [rcx], j.ir as i32
        ; add QWORD [rdx + ir], j.ir as i32
    );
    for (k, &n) in more.iter().enumerate() {
        if n != 0 {
            let k = k as i32;
            dynasm!(a
                ; .arch x64
                ; add QWORD [rcx + 8 * (k + 1)], n as i32
                ; add QWORD [rdx + stat + 8 * k], n as i32
            );
        }
    }
    // The sink's miss slots follow its static events (Ir and the four in `more`).
    let misses = 8 * (1 + more.len() as i32);
    dynasm!(a
        ; .arch x64
        ; add rcx, misses
        ; mov QWORD [rdx + cur_miss], rcx
        ; mov QWORD [rdx + cur_stride], 0
    );
}

/// Emits one out-of-line path: `s.entry`, then the code of its kind, which ends by jumping
/// to `s.back`.
fn emit_slow(a: &mut Asm, s: Slow) -> Result<(), String> {
    let (entry, back) = (s.entry, s.back);
    mark(
        a,
        match s.kind {
            SlowKind::InlineAlt { .. } => "clg-alt",
            SlowKind::InlineRet { .. } => "clg-ret",
            SlowKind::InlineCall { .. } => "clg-call",
            SlowKind::Data { .. } => "cache-scan",
            SlowKind::FetchSlots { .. } => "fetch-slots",
            SlowKind::JumpCold { .. } => "clg-cold",
            SlowKind::LoopLiteFail { .. } | SlowKind::LoopBack { .. } => "clg-loop-fail",
            SlowKind::Saving { .. } => "slow-call",
        },
    );
    dynasm!(a ; .arch x64 ; =>entry);
    match s.kind {
        SlowKind::LoopLiteFail { short } => {
            short.restore(a);
            dynasm!(a ; .arch x64 ; jmp =>back);
        }
        SlowKind::LoopBack { short, jump, owed } => {
            loop_charge(a, &short, &jump, owed);
            dynasm!(a ; .arch x64 ; jmp =>back);
        }
        SlowKind::Saving { entry: inner, kind } => {
            dynasm!(a ; .arch x64 ; gs mov QWORD [IS0], rax ; gs mov QWORD [IS1], rcx);
            let restore = a.new_dynamic_label();
            emit_slow(
                a,
                Slow {
                    entry: inner,
                    back: restore,
                    kind: *kind,
                },
            )?;
            dynasm!(a
                ; .arch x64
                ; =>restore
                ; gs mov rcx, QWORD [IS1]
                ; gs mov rax, QWORD [IS0]
                ; jmp =>back
            );
        }
        SlowKind::Data {
            acc,
            offset,
            cache,
            helper,
            after_miss,
            size,
            saved,
            line_row,
            shared,
            lane,
        } => {
            let mut after_miss = after_miss;
            if let (
                Some(
                    am @ AfterMiss {
                        whole_lines: true, ..
                    },
                ),
                Some(line_row),
            ) = (after_miss, line_row)
            {
                if let Some(scale) = row_scale(cache) {
                    scale_row(a, line_row.1, scale);
                }
                data_way1(a, cache, line_row, back);
                if data_scan(a, cache, (helper, am, shared), line_row, back) {
                    return Ok(());
                }
                // Only an access spanning two lines gets past it: the whole access by `helper`.
                after_miss = None;
            }
            data_slow(
                a,
                (&acc, offset, lane),
                cache,
                (helper, after_miss),
                (size, saved),
                back,
            )?
        }
        SlowKind::JumpCold {
            short,
            jump,
            labels: [miss, try_ret, fail],
            fallback,
            shared,
        } => {
            short.emit_cold(a, &jump, (miss, back, try_ret));
            // The return and call cases end here when they do not apply (the flags put
            // back).
            // rax and rcx stay saved for the fallback, which puts them back.
            dynasm!(a ; .arch x64 ; =>fail ; gs mov rdx, QWORD [IS2]);
            match shared.then(|| shared_fallback(&fallback)).flatten() {
                Some(routine) => enter_shared_fallback(a, fallback.fast.arg0, routine),
                None => call_fallback_saved(a, &fallback)?,
            }
            dynasm!(a ; .arch x64 ; jmp =>back);
        }
        SlowKind::InlineAlt { fail } => inline_jump_alt(a, back, fail),
        SlowKind::InlineRet {
            jump,
            fail,
            flags_dead,
            first,
        } => inline_ret(a, &jump, (back, fail, first), flags_dead),
        SlowKind::InlineCall {
            jump,
            fail,
            flags_dead,
        } => inline_call(a, &jump, (back, fail), flags_dead, false),
        SlowKind::FetchSlots {
            cache,
            after_miss,
            flags_dead,
            addr,
            len,
            record,
            end,
        } => {
            let first = addr >> cache.line_bits;
            let straddle = (addr + len - 1) >> cache.line_bits != first;
            // Keep the flags (unless dead) and rdx for the way back.
            if !flags_dead {
                save_flags(a);
            }
            let (looked_up, restore) = (a.new_dynamic_label(), a.new_dynamic_label());
            dynasm!(a
                ; .arch x64
                ; gs mov QWORD [IS2], rdx
                ; lea rax, [=>end]
                ; gs mov QWORD [ARG1], rax
                ; lea rax, [=>record]
                ; gs mov QWORD [ARG2], rax
            );
            let lookup = Helper {
                func: fetch_slots_slow,
                arg0: cache as *const SlotI1 as u64,
                integer_only: true,
            };
            helper_call_same_arg2(a, lookup, looked_up);
            dynasm!(a
                ; .arch x64
                ; =>looked_up
                // The flags are saved or dead here.
                ; gs cmp QWORD [ARG0], 0
                ; je =>restore
            );
            // Within one line the LL part of the fetch is that of the line's first byte
            // (`whole_lines`).
            let queue = after_miss
                .queue
                .filter(|_| !straddle && after_miss.whole_lines);
            if let (Some(ll), false) = (after_miss.ll_mru, straddle) {
                let call = a.new_dynamic_label();
                dynasm!(a ; .arch x64 ; mov rax, QWORD (addr >> ll.line_bits) as i64);
                ll_mru_hit(a, ll, (after_miss, false), call, restore);
                dynasm!(a ; .arch x64 ; =>call);
                if queue.is_some() {
                    queued_line_becomes_mru(a);
                }
            }
            if let Some(q) = queue {
                dynasm!(a ; .arch x64 ; mov rax, QWORD first as i64);
                queue_push(
                    a,
                    cache.line_bits,
                    (q, after_miss.helper.arg0, false),
                    restore,
                );
            } else {
                dynasm!(a
                    ; .arch x64
                    ; mov rax, QWORD addr as i64
                    ; gs mov QWORD [ARG1], rax
                );
                helper_call(a, after_miss.helper, len, restore);
            }
            dynasm!(a ; .arch x64 ; =>restore ; gs mov rdx, QWORD [IS2]);
            if !flags_dead {
                restore_flags(a);
            }
            dynasm!(a ; .arch x64 ; jmp =>back);
        }
    }
    Ok(())
}

/// The part of the jump and return cases (the state and the block's record at `b`, `b.x`
/// free, the flags saved or dead): charge the previous block lazily (its counter, the
/// running Ir), and enter this one with the record's cost centre.
/// `after_plain`: the jump case, taken only when the state held the previous block's key,
/// so that block ended plainly and `exit` already reads `EXIT_OTHER`
/// (`InlineJump::ends_plain`); a block that ends plainly too leaves it as it is, one store
/// less at most block starts.
fn enter_inline(a: &mut Asm, j: &super::calltrack::InlineJump, b: Bases, after_plain: bool) {
    let JumpOffsets {
        rcount,
        rmiss,
        rplan,
        ..
    } = JUMP_OFF;
    if j.eager.is_none() {
        count_previous(a, b);
    }
    enter_block(a, j, (rcount, rmiss, rplan), b, after_plain);
}

/// Makes this block the last one (the state at `b.st`, the record or plan holding its cost
/// centre's counter, miss array and plan at `b.rec + (count, miss, plan)`, `b.x` free, the
/// flags saved or dead): its Ir goes to the running Ir's delta; with `InlineJump::eager` it
/// is charged now (its counter and further static costs too) and the miss helpers are
/// pointed at its cost centre; it notes
/// whether the block ends in a `ret` or call the next block may take inline.
#[allow(clippy::useless_conversion)] // dynasm's `Rq(n)` converts the register number
fn enter_block(
    a: &mut Asm,
    j: &super::calltrack::InlineJump,
    (count, miss, plan): (i32, i32, i32),
    b: Bases,
    after_plain: bool,
) {
    let JumpOffsets {
        lcount,
        ir,
        cur_miss,
        stat,
        ..
    } = JUMP_OFF;
    let x = b.x;
    load(a, x, b.rec, count);
    store(a, b.st, lcount, x);
    // Lazily too, the block's Ir goes to the running Ir's delta now (`count_previous`);
    // the tool takes it off again while the block is the last one (`inline_pull`).
    add_imm(a, b.st, ir, j.ir as i32);
    if let Some(more) = j.eager {
        inc_at(a, x);
        load(a, x, b.rec, miss);
        store(a, b.st, cur_miss, x);
        for (k, &n) in more.iter().enumerate() {
            if n != 0 {
                add_imm(a, b.st, stat + 8 * k as i32, n as i32);
            }
        }
    }
    if !(after_plain && j.ends_plain) {
        note_exit(a, j, plan, b);
    }
}

/// The first thing a data check's out-of-line part with `near_rows` does (the flags free,
/// the line in `l` and the row offset in `w` as the check left them): a hit in way 1 or 2 —
/// most of the non-MRU hits, python3: 203M and 48M of 252M — moves the ways in front of it
/// down, puts the line in way 0 and goes back at once, with one register borrowed (through
/// `gs:[IS4]`) instead of the three `data_scan` sets up and the call into the shared
/// routine. The line found in the first byte's set means the access lies in one line (the
/// next line belongs to the next set). Otherwise falls through with everything as on entry.
#[allow(clippy::useless_conversion)] // dynasm's `Rq(n)` converts the register number
fn data_way1(a: &mut Asm, cache: MruCache, (l, w): (u8, u8), back: DynamicLabel) {
    let t = [RAX, RCX, RDX]
        .into_iter()
        .find(|&r| r != l && r != w)
        .unwrap_or(RDX);
    let tg = cache.tags as i32;
    for way in 1..cache.assoc.min(3) as i32 {
        let rest = a.new_dynamic_label();
        dynasm!(a
            ; .arch x64
            ; cmp Rq(l), QWORD [Rq(w) + tg + 8 * way]
            ; jne =>rest
            ; gs mov QWORD [IS4], Rq(t)
        );
        move_to_front(a, way, (l, w, t), tg);
        dynasm!(a
            ; .arch x64
            ; gs mov Rq(t), QWORD [IS4]
            ; jmp =>back
            ; =>rest
        );
    }
}

/// The common part of a data check's out-of-line part with `near_rows` (entered like
/// `data_slow`, which must follow it): the L1 lookup of an access within one line from the
/// line and row the check left in `line_row`, without the guest registers; the LL part on a
/// miss with the line's first byte as the address (the same LL access). An access spanning
/// two lines goes on to `data_slow` with everything as on entry.
#[allow(clippy::useless_conversion)] // dynasm's `Rq(n)` converts the register number
fn data_scan(
    a: &mut Asm,
    cache: MruCache,
    (helper, after_miss, shared): (Helper, AfterMiss, bool),
    (l, w): (u8, u8),
    back: DynamicLabel,
) -> bool {
    // rax, rcx and rdx are put back from their slots at the end (`restore_to`); those that
    // hold the line or row are the check's (dead, or saved by it already).
    let spare = |r: u8| r != l && r != w;
    let slots = [(RAX, IS0), (RCX, IS1), (RDX, IS2)];
    for &(r, slot) in &slots {
        if spare(r) {
            dynasm!(a ; .arch x64 ; gs mov QWORD [slot], Rq(r));
        }
    }
    // rax = line, rcx = row offset.
    if l == RCX && w == RAX {
        dynasm!(a ; .arch x64 ; xchg rax, rcx);
    } else if w == RAX {
        dynasm!(a ; .arch x64 ; mov rcx, rax ; mov rax, Rq(l));
    } else {
        if l != RAX {
            dynasm!(a ; .arch x64 ; mov rax, Rq(l));
        }
        if w != RCX {
            dynasm!(a ; .arch x64 ; mov rcx, Rq(w));
        }
    }
    if let Some(routine) = shared
        .then(|| shared_data_access(cache, after_miss, helper))
        .flatten()
    {
        enter_shared_scan(a, after_miss.helper.arg0, routine);
        restore_to(a, true, back);
        return true;
    }
    let (straddle, ret) = (a.new_dynamic_label(), a.new_dynamic_label());
    one_line_or(a, cache, straddle);
    match shared
        .then(|| shared_data_scan(cache, after_miss))
        .flatten()
    {
        Some(routine) => enter_shared_scan(a, after_miss.helper.arg0, routine),
        None => scan_and_miss(a, cache, (after_miss, false), ret),
    }
    dynasm!(a ; .arch x64 ; =>ret);
    restore_to(a, true, back);
    dynasm!(a ; .arch x64 ; =>straddle);
    for &(r, slot) in &slots {
        if spare(r) {
            dynasm!(a ; .arch x64 ; gs mov Rq(r), QWORD [slot]);
        }
    }
    false
}

/// The out-of-line part of a data check (`SlowKind::Data`): puts every guest register the
/// check borrowed back (the dead ones hold anything), borrows rax, rcx and rdx itself and
/// returns to `back` with all three as the check left them.
fn data_slow(
    a: &mut Asm,
    (acc, offset, lane): (&MemAccess, i32, Option<LaneRef>),
    cache: MruCache,
    (helper, after_miss): (Helper, Option<AfterMiss>),
    (size, saved): (u64, [bool; 2]),
    back: DynamicLabel,
) -> Result<(), String> {
    let ret = a.new_dynamic_label();
    if saved[0] {
        dynasm!(a ; .arch x64 ; gs mov rax, QWORD [IS0]);
    } else {
        dynasm!(a ; .arch x64 ; gs mov QWORD [IS0], rax);
    }
    if saved[1] {
        dynasm!(a ; .arch x64 ; gs mov rcx, QWORD [IS1]);
    } else {
        dynasm!(a ; .arch x64 ; gs mov QWORD [IS1], rcx);
    }
    dynasm!(a ; .arch x64 ; gs mov QWORD [IS2], rdx);
    // Such an address had no inline check of the most recently used way.
    let out_of_line = computed_out_of_line(acc, lane);
    if out_of_line {
        element_address(a, (acc, offset, lane), ret)?;
    } else {
        // The fast path already encoded this address computation, so it cannot fail here.
        let _ = effective_address(a, acc, offset, Register::RDX, Register::RCX);
    }
    dynasm!(a ; .arch x64 ; gs mov QWORD [ARG1], rdx);
    if let Some(after_miss) = after_miss {
        let bits = cache.line_bits as i8;
        let (straddle, miss) = (a.new_dynamic_label(), a.new_dynamic_label());
        dynasm!(a
            ; .arch x64
            ; lea rax, [rdx + (size - 1) as i32]
            ; shr rax, bits
            ; shr rdx, bits
            ; cmp rax, rdx
            ; jne =>straddle
            ; mov rcx, rdx
            ; and rcx, DWORD cache.set_mask as i32
            ; imul rcx, rcx, cache.row_bytes as i32
            ; mov rdx, QWORD cache.tags as i64
            ; add rcx, rdx
        );
        if out_of_line {
            dynasm!(a ; .arch x64 ; cmp rax, QWORD [rcx] ; je =>ret);
        }
        l1_scan(a, cache, ret, miss);
        dynasm!(a ; .arch x64 ; =>miss);
        if let Some(ll) = after_miss.ll_mru {
            let call = a.new_dynamic_label();
            dynasm!(a
                ; .arch x64
                ; gs mov rax, QWORD [ARG1]
                ; shr rax, ll.line_bits as i8
            );
            ll_mru_hit(a, ll, (after_miss, false), call, ret);
            dynasm!(a ; .arch x64 ; =>call);
        }
        helper_call(a, after_miss.helper, size, ret);
        dynasm!(a ; .arch x64 ; =>straddle);
    }
    helper_call(a, helper, size, ret);
    dynasm!(a ; .arch x64 ; =>ret);
    restore_to(a, true, back);
    Ok(())
}

/// Whether the address of a data check is computed only out of line, where the flags are
/// free (no inline check then): one with a run-time term or an element's.
fn computed_out_of_line(acc: &MemAccess, lane: Option<LaneRef>) -> bool {
    lane.is_some() || acc.term != AddressTerm::None
}

/// `rdx` = the address of an access with a run-time term or of one element of an
/// element-wise access (`data_slow`: guest rax, rcx and rdx in their registers and in
/// `gs:[IS0..IS2]`, the flags free); clobbers rax and rcx. A disabled element that is
/// skipped jumps to `skip`; one at the stack pointer takes `rsp`. Counts an enabled
/// element at its `enabled_count`.
fn element_address(
    a: &mut Asm,
    (acc, offset, lane): (&MemAccess, i32, Option<LaneRef>),
    skip: DynamicLabel,
) -> Result<(), String> {
    let done = a.new_dynamic_label();
    let element = acc.lanes.zip(lane);
    if let Some((lanes, lane)) = element {
        let (w, i) = (i32::from(lanes.elem), i32::from(lane.index));
        let enabled = a.new_dynamic_label();
        if lanes.mask.is_gpr() {
            // The guest's own register, in its place here.
            let reg = lanes.mask.full_register32();
            encode(
                a,
                &Instruction::with2(Code::Bt_rm32_imm8, reg, i as u32)
                    .map_err(|e| e.to_string())?,
            )?;
            dynasm!(a ; .arch x64 ; jc =>enabled);
        } else if lanes.mask.is_k() {
            // rax back to the guest's at once (`mov` leaves the flags alone).
            encode(
                a,
                &Instruction::with2(Code::VEX_Kmovw_r32_kr, Register::EAX, lanes.mask)
                    .map_err(|e| e.to_string())?,
            )?;
            dynasm!(a
                ; .arch x64
                ; bt eax, i as i8
                ; gs mov rax, QWORD [IS0]
                ; jc =>enabled
            );
        } else {
            store_vector(a, lanes.mask)?;
            dynasm!(a ; .arch x64 ; gs cmp BYTE [LANES + i * w + w - 1], 0 ; jl =>enabled);
        }
        match lanes.masked_off {
            MaskedOff::Skipped => dynasm!(a ; .arch x64 ; jmp =>skip),
            MaskedOff::AtStackPointer => dynasm!(a ; .arch x64 ; mov rdx, rsp ; jmp =>done),
        }
        dynasm!(a ; .arch x64 ; =>enabled);
    }
    let gather = element.and_then(|(l, lane)| l.index.map(|ix| (ix, lane.index, acc.scale)));
    let base_part = MemAccess {
        index: if gather.is_some() {
            Register::None
        } else {
            acc.index
        },
        ..*acc
    };
    effective_address(a, &base_part, offset, Register::RDX, Register::RCX)?;
    // effective_address may have used rcx as its scratch.
    dynasm!(a ; .arch x64 ; gs mov rcx, QWORD [IS1]);
    match acc.term {
        AddressTerm::None => {}
        AddressTerm::ZeroExtendedAl => {
            dynasm!(a ; .arch x64 ; movzx eax, al ; add rdx, rax);
        }
        AddressTerm::BitOffset(r) | AddressTerm::MaskedBitOffset(r) => {
            let bytes = r.size();
            let src = if r.full_register() == Register::RDX {
                dynasm!(a ; .arch x64 ; gs mov rax, QWORD [IS2]);
                match bytes {
                    2 => Register::AX,
                    4 => Register::EAX,
                    _ => Register::RAX,
                }
            } else {
                r
            };
            let code = match bytes {
                2 => Code::Movsx_r64_rm16,
                4 => Code::Movsxd_r64_rm32,
                _ => Code::Mov_r64_rm64,
            };
            encode(
                a,
                &Instruction::with2(code, Register::RAX, src).map_err(|e| e.to_string())?,
            )?;
            if matches!(acc.term, AddressTerm::MaskedBitOffset(_)) {
                dynasm!(a ; .arch x64 ; and rax, (bytes * 8 - 1) as i32);
            }
            dynasm!(a ; .arch x64 ; sar rax, 3 ; add rdx, rax);
        }
    }
    if let Some(((index, index_bytes), i, scale)) = gather {
        store_vector(a, index)?;
        let at = LANES + i32::from(i) * i32::from(index_bytes);
        let code = if index_bytes == 4 {
            Code::Movsxd_r64_rm32
        } else {
            Code::Mov_r64_rm64
        };
        encode(
            a,
            &Instruction::with2(code, Register::RAX, lane_operand(at))
                .map_err(|e| e.to_string())?,
        )?;
        if scale > 1 {
            dynasm!(a ; .arch x64 ; shl rax, scale.trailing_zeros() as i8);
        }
        dynasm!(a ; .arch x64 ; add rdx, rax);
    }
    dynasm!(a ; .arch x64 ; =>done);
    if let Some(counter) = lane.map(|l| l.enabled_count).filter(|c| !c.is_null()) {
        dynasm!(a ; .arch x64 ; mov rax, QWORD counter as i64 ; inc QWORD [rax]);
    }
    Ok(())
}

/// `gs:[at]`, in the thread's context.
fn lane_operand(at: i32) -> MemoryOperand {
    MemoryOperand::new(
        Register::None,
        Register::None,
        1,
        i64::from(at),
        4,
        false,
        Register::GS,
    )
}

/// Stores the guest's vector register `reg` (xmm, ymm or zmm) in `gs:[LANES]`.
fn store_vector(a: &mut Asm, reg: Register) -> Result<(), String> {
    // xmm16-31 and ymm16-31 only have EVEX encodings.
    let high = reg.number() >= 16;
    let code = if reg.is_zmm() {
        Code::EVEX_Vmovdqu64_zmmm512_k1z_zmm
    } else if reg.is_ymm() && high {
        Code::EVEX_Vmovdqu64_ymmm256_k1z_ymm
    } else if reg.is_ymm() {
        Code::VEX_Vmovdqu_ymmm256_ymm
    } else if reg.is_xmm() && high {
        Code::EVEX_Vmovdqu64_xmmm128_k1z_xmm
    } else if reg.is_xmm() {
        Code::VEX_Vmovdqu_xmmm128_xmm
    } else {
        return Err(format!("no element-wise access with {reg:?}"));
    };
    encode(
        a,
        &Instruction::with2(code, lane_operand(LANES), reg).map_err(|e| e.to_string())?,
    )
}

/// `w` = a set number shifted left by the line bits (`addr & set_mask << line_bits`)
/// becomes that set's byte offset in the tag array (flags clobbered): a shift for rows of a
/// power of two of bytes (every `cachesim::FlatCache`), else a multiplication.
#[allow(clippy::useless_conversion)] // dynasm's `Rq(w)` converts the register number
fn scale_to_row(a: &mut Asm, w: u8, cache: MruCache) {
    let row = cache.row_bytes;
    let (row_log, line_log) = (row.trailing_zeros() as i8, cache.line_bits as i8);
    if !row.is_power_of_two() {
        dynasm!(a ; .arch x64 ; shr Rq(w), line_log ; imul Rq(w), Rq(w), row as i32);
    } else if row_log > line_log {
        dynasm!(a ; .arch x64 ; shl Rq(w), row_log - line_log);
    } else if row_log < line_log {
        dynasm!(a ; .arch x64 ; shr Rq(w), line_log - row_log);
    }
}

/// Whether the inline data check of `cache` leaves the row's offset in the tag array in its
/// second register, with the tags addressed by a 32-bit displacement (several sets whose
/// row offsets fit in 32 bits, all below 2 GiB): `data_slow` can then reuse the line and
/// row the check computed.
fn near_rows(cache: MruCache) -> bool {
    i32::try_from(cache.set_mask << cache.line_bits).is_ok()
        && cache.set_mask >= 1
        && (cache.set_mask + 1) * cache.row_bytes + cache.tags <= 1 << 31
}

/// `w *= scale` (1, 2, 4 or 8), flag-free.
#[allow(clippy::useless_conversion)] // dynasm's `Rq(w)` converts the register number
fn scale_row(a: &mut Asm, w: u8, scale: i32) {
    match scale {
        2 => dynasm!(a ; .arch x64 ; lea Rq(w), [Rq(w) * 2]),
        4 => dynasm!(a ; .arch x64 ; lea Rq(w), [Rq(w) * 4]),
        8 => dynasm!(a ; .arch x64 ; lea Rq(w), [Rq(w) * 8]),
        _ => {}
    }
}

/// With `near_rows`, the addressing mode's scale that takes `(line & set_mask) <<
/// line_bits` to the set's row offset, when there is one (rows of a power of two of bytes,
/// one to eight lines' worth: the padded rows of `cachesim::FlatCache`). The inline data
/// check then leaves that unscaled value in its second register, and the out-of-line part
/// scales it first (`SlowKind::Data`'s `line_row`).
fn row_scale(cache: MruCache) -> Option<i32> {
    let (row_log, line_log) = (cache.row_bytes.trailing_zeros(), cache.line_bits);
    (near_rows(cache)
        && cache.row_bytes.is_power_of_two()
        && (line_log..=line_log + 3).contains(&row_log))
    .then(|| 1 << (row_log - line_log))
}

/// At `ll_mru_hit`'s `call` (rdx + rcx = the set's MRU line, rax = the line) when the LL
/// parts are queued (`AfterMiss::queue`): `ll_mru` is the queue's copy of the MRU lines,
/// where the line about to be queued becomes its set's, as in the LL once it runs.
fn queued_line_becomes_mru(a: &mut Asm) {
    dynasm!(a ; .arch x64 ; mov QWORD [rdx + rcx], rax);
}

/// After an L1 miss (the flags free, rax = the LL line, rcx and rdx free): if the line is
/// the MRU tag of its LL set (`AfterMiss::ll_mru`), counts the LL hit as the helper would
/// (`AfterMiss::ll_hit`) and jumps to `done`; otherwise jumps to `call`. Clobbers rax, rcx
/// and rdx. With `arg0_in_slot` the count follows the `arg0` in `gs:[ARG0]` (a shared
/// routine's caller's) instead of the helper's own.
fn ll_mru_hit(
    a: &mut Asm,
    ll: MruCache,
    (after_miss, arg0_in_slot): (AfterMiss, bool),
    call: DynamicLabel,
    done: DynamicLabel,
) {
    let stride = ll.row_bytes as i32;
    dynasm!(a
        ; .arch x64
        ; mov rcx, QWORD ll.set_mask as i64
        ; and rcx, rax
        ; imul rcx, rcx, stride
        ; mov rdx, QWORD ll.tags as i64
        ; cmp rax, QWORD [rdx + rcx]
        ; jne =>call
    );
    match after_miss.ll_hit {
        LlHitCount::Arg0 if arg0_in_slot => dynasm!(a
            ; .arch x64
            ; gs mov rax, QWORD [ARG0]
            ; inc QWORD [rax]
        ),
        LlHitCount::Arg0 => dynasm!(a
            ; .arch x64
            ; mov rax, QWORD after_miss.helper.arg0 as i64
            ; inc QWORD [rax]
        ),
        LlHitCount::CostCentre {
            base,
            stride,
            total,
            index,
            slot,
        } => {
            dynasm!(a
                ; .arch x64
                ; mov rax, QWORD base as i64
                ; mov rax, QWORD [rax]
                ; test rax, rax
                ; jz =>done
                ; mov rcx, QWORD stride as i64
                ; mov rcx, QWORD [rcx]
            );
            if arg0_in_slot {
                // The check's `arg0` is `index << 8 | slot` (`shared_data_scan`).
                dynasm!(a
                    ; .arch x64
                    ; gs mov rdx, QWORD [ARG0]
                    ; shr rdx, 8
                    ; imul rcx, rdx
                    ; gs movzx edx, BYTE [ARG0]
                    ; add rcx, rdx
                    ; inc QWORD [rax + rcx * 8]
                    ; mov rax, QWORD total as i64
                    ; mov rax, QWORD [rax]
                    ; inc QWORD [rax + rdx * 8]
                );
            } else {
                dynasm!(a
                    ; .arch x64
                    ; imul rcx, rcx, index as i32
                    ; lea rax, [rax + rcx * 8]
                    ; inc QWORD [rax + (slot * 8) as i32]
                    ; mov rax, QWORD total as i64
                    ; mov rax, QWORD [rax]
                    ; inc QWORD [rax + (slot * 8) as i32]
                );
            }
        }
    }
    dynasm!(a ; .arch x64 ; jmp =>done);
}

/// Routines that the cache checks of every translation share: the L1 way scan past the MRU
/// way and the miss path behind it, one per cache, LL and helper. Per check they were ~400
/// bytes of scans; a large program's translations were 85% scans, thrashing the host's
/// instruction cache and branch predictors (a Python thread pool under `--cache-sim=yes`:
/// 22.9 -> 18.2 s; sqlite -12%). They live in memory that counts as code cache, so signals
/// step through them as through translated code.
struct SharedScans {
    /// The free part of the current mapping.
    next: u64,
    end: u64,
    /// What each routine does -> where it is.
    routines: std::collections::HashMap<RoutineKey, u64>,
    /// Every mapping's start, the current one last (for `dump_shared_scans`).
    maps: Vec<u64>,
}

/// A shared routine's identity.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum RoutineKey {
    /// The scan past way 2 and the miss path (`shared_data_scan`): cache tags, helper, LL
    /// tags or queue, 0 or Callgrind's cost-centre base.
    Scan(u64, u64, u64, u64),
    /// A data check's whole out-of-line part past way 2 (`shared_data_access`): the scan's
    /// key and the straddle helper.
    Access(u64, u64, u64, u64, u64),
    /// Callgrind's block-start fallback (`shared_fallback`): the fast and slow routines and
    /// the second argument.
    Fallback(u64, u64, u64),
}

static SHARED_SCANS: std::sync::Mutex<Option<SharedScans>> = std::sync::Mutex::new(None);

impl Default for SharedScans {
    /// With the first mapping already made.
    fn default() -> SharedScans {
        let base = crate::cache::map_shared_code(SHARED_MAP_BYTES).unwrap_or(0);
        SharedScans {
            maps: vec![base],
            next: base,
            end: base
                + if base == 0 {
                    0
                } else {
                    SHARED_MAP_BYTES as u64
                },
            routines: Default::default(),
        }
    }
}

/// Maps the shared routines' first memory now, before the guest maps anything: made at the
/// first data check instead, it would move the guest's later mappings (and their costs)
/// between runs with and without sharing (`RGRIND_NO_SHARED_SCANS`).
pub(crate) fn map_shared_scans() {
    SHARED_SCANS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(SharedScans::default);
}

/// Debugging aid (`RGRIND_DUMP_CACHE`): writes the used part of each mapping of shared
/// routines to `dir/chunk-<address>.bin`, as the code cache's chunks are written.
pub(crate) fn dump_shared_scans(dir: &std::path::Path) -> std::io::Result<()> {
    let shared = SHARED_SCANS.lock().unwrap_or_else(|p| p.into_inner());
    let Some(shared) = shared.as_ref() else {
        return Ok(());
    };
    for (k, &base) in shared.maps.iter().enumerate() {
        if base == 0 {
            continue;
        }
        let used = if k + 1 == shared.maps.len() {
            shared.next - base
        } else {
            SHARED_MAP_BYTES as u64
        };
        // SAFETY: [base, base + used) of a live shared mapping is written code (the rest
        // of a full mapping is zero-filled, still readable); mappings are never unmapped.
        let bytes = unsafe { core::slice::from_raw_parts(base as *const u8, used as usize) };
        std::fs::write(dir.join(format!("chunk-{base:x}.bin")), bytes)?;
    }
    Ok(())
}

/// Bytes mapped at a time for shared routines.
const SHARED_MAP_BYTES: usize = 64 << 10;

/// The shared way scan and miss path for the checks of `cache` with `after_miss` (data
/// accesses and fetches within one line; the LL hit counted at `arg0`, or Callgrind's
/// cost-centre slot), emitted on first use. Entered with rax = the line, rcx = its set row
/// and `gs:[ARG0]` = the helper's `arg0`, by a `call` on the thread's scan stack
/// (`enter_shared_scan`); returns with `ret`; rdx and the flags are free. Leaves rax and rcx
/// as `l1_scan` does, or as the helper call leaves them. `None` where the check keeps its own
/// copy (helpers that need the vector state, no memory for code).
fn shared_data_scan(cache: MruCache, after_miss: AfterMiss) -> Option<u64> {
    let kind = shared_ll_kind(after_miss)?;
    let key = RoutineKey::Scan(
        cache.tags,
        after_miss.helper.func as usize as u64,
        ll_key(after_miss),
        kind,
    );
    shared_routine(key, |at| data_scan_routine(cache, after_miss, at))
}

/// What a shared routine's key holds of `after_miss`'s LL part: the LL's MRU tags or the
/// queue's producer record (never both).
fn ll_key(after_miss: AfterMiss) -> u64 {
    match (after_miss.ll_mru, after_miss.queue) {
        (Some(l), _) => l.tags,
        (None, Some(q)) => q.producer,
        (None, None) => 0,
    }
}

/// How a shared routine counts an LL hit for `after_miss` (0: at the helper's `arg0`; else
/// Callgrind's cost-centre base), or `None` where no routine may be shared (a helper that
/// needs the vector state, a slot the routine cannot derive).
fn shared_ll_kind(after_miss: AfterMiss) -> Option<u64> {
    if !after_miss.helper.integer_only {
        return None;
    }
    // Callgrind's count of an LL hit goes to the running cost centre's miss slot of the
    // instruction, which the routine finds from its helper's `arg0` (`index << 8 | slot`).
    match after_miss.ll_hit {
        LlHitCount::Arg0 => Some(0),
        LlHitCount::CostCentre {
            base, index, slot, ..
        } if slot < 256 && after_miss.helper.arg0 == u64::from(index) << 8 | u64::from(slot) => {
            Some(base)
        }
        LlHitCount::CostCentre { .. } => None,
    }
}

/// A data check's whole out-of-line part past way 2, shared (the check's own code is then
/// the register moves and the call): entered with rax = the line of the access's last byte
/// and rcx = the row offset of its first byte's set, it tells an access within one line
/// from one across two, and goes on as `shared_data_scan`'s routine or calls `helper` for
/// the whole access (`straddle_call`). `None` where either could not be shared, or the two
/// helpers would need different `arg0`s.
fn shared_data_access(cache: MruCache, after_miss: AfterMiss, helper: Helper) -> Option<u64> {
    let kind = shared_ll_kind(after_miss)?;
    if !helper.integer_only || helper.arg0 != after_miss.helper.arg0 {
        return None;
    }
    let key = RoutineKey::Access(
        cache.tags,
        after_miss.helper.func as usize as u64,
        ll_key(after_miss),
        kind,
        helper.func as usize as u64,
    );
    shared_routine(key, |at| {
        let mut a = Asm::new(at as usize);
        let (hit, straddle, done) = (
            a.new_dynamic_label(),
            a.new_dynamic_label(),
            a.new_dynamic_label(),
        );
        one_line_or(&mut a, cache, straddle);
        scan_and_miss(&mut a, cache, (after_miss, true), hit);
        dynasm!(a ; .arch x64 ; =>hit ; ret ; =>straddle);
        straddle_call(&mut a, helper, cache.line_bits, done);
        dynasm!(a ; .arch x64 ; =>done ; ret);
        a.finalize().ok()
    })
}

/// With rax = the line of an access's last byte and rcx = the row offset of its first
/// byte's set: to `straddle` unless the last byte's line is in that set (one line; the next
/// line belongs to the next set), else rcx = the row's address. Clobbers rdx and the flags.
fn one_line_or(a: &mut Asm, cache: MruCache, straddle: DynamicLabel) {
    dynasm!(a
        ; .arch x64
        ; mov rdx, rax
        ; shl rdx, cache.line_bits as i8
        ; and edx, DWORD (cache.set_mask << cache.line_bits) as i32
    );
    scale_to_row(a, RDX, cache);
    dynasm!(a
        ; .arch x64
        ; cmp rdx, rcx
        ; jne =>straddle
        ; add rcx, cache.tags as i32
    );
}

/// The guest's own line comes after the simulator's LL lookup; for a walk over memory that
/// the host's caches do not hold (`stride`: each step ~25 ns of the walk's ~50 waited on the
/// guest's line although the miss path asked for it) the line arrives too late. With rax =
/// the line of an L1 data miss that the LL's MRU way does not hold (every L1 data miss
/// where the code has no MRU test of its own; rcx, rdx and the flags free), this
/// prefetches the line eight steps on when the miss's distance from the previous one of
/// its check repeats the distance before: a stream, as the host's own prefetchers would
/// see it without the simulator's work between the guest's accesses. Checks share
/// `ThreadContext::miss_streams` by the low bits of their address (a shared routine's
/// return address); a check with its own copy of the miss path takes the next entry in
/// turn. Random accesses (`chase`) rarely repeat a distance and prefetch nothing.
fn prefetch_stream(a: &mut Asm, cache: MruCache, in_routine: bool) {
    const MASK: i32 = (MISS_STREAMS as i32 - 1) * 16;
    static NEXT_SITE: core::sync::atomic::AtomicI32 = core::sync::atomic::AtomicI32::new(0);
    if in_routine {
        dynasm!(a ; .arch x64 ; mov rcx, QWORD [rsp] ; and ecx, MASK);
    } else {
        let site = NEXT_SITE.fetch_add(16, core::sync::atomic::Ordering::Relaxed) & MASK;
        dynasm!(a ; .arch x64 ; mov ecx, site);
    }
    let skip = a.new_dynamic_label();
    dynasm!(a
        ; .arch x64
        ; mov rdx, rax
        ; gs sub rdx, QWORD [rcx + STREAMS]
        ; gs mov QWORD [rcx + STREAMS], rax
        ; gs cmp rdx, QWORD [rcx + STREAMS + 8]
        ; gs mov QWORD [rcx + STREAMS + 8], rdx
        ; jne =>skip
        ; lea rdx, [rax + rdx * 8]
        ; shl rdx, cache.line_bits as i8
        ; prefetcht0 [rdx]
        ; =>skip
    );
}

/// A shared routine's call of the integer-only `helper` for a data access across two lines
/// (what `data_slow` does per check, from the access's address), from rax = the line of its
/// last byte: it passes the bytes `(rax << line_bits) - 1` and the next one, which touch the
/// same two lines, and lie within one line of any LL whose lines are no smaller
/// (`whole_lines`), so the same accesses and counts. Comes back to `done`.
fn straddle_call(a: &mut Asm, helper: Helper, line_bits: u32, done: DynamicLabel) {
    dynasm!(a
        ; .arch x64
        ; shl rax, line_bits as i8
        ; dec rax
        ; gs mov QWORD [ARG1], rax
    );
    routine_helper_call(a, helper, 2, done);
}

/// The shared routine `key` names, emitted by `code` (given its address) on first use.
fn shared_routine(key: RoutineKey, code: impl Fn(u64) -> Option<Vec<u8>>) -> Option<u64> {
    let mut shared = SHARED_SCANS.lock().unwrap_or_else(|p| p.into_inner());
    let shared = shared.get_or_insert_with(SharedScans::default);
    if let Some(&at) = shared.routines.get(&key) {
        return Some(at);
    }
    let first = code(shared.next)?;
    let code = if shared.next + first.len() as u64 <= shared.end {
        first
    } else {
        let base = crate::cache::map_shared_code(SHARED_MAP_BYTES)?;
        (shared.next, shared.end) = (base, base + SHARED_MAP_BYTES as u64);
        shared.maps.push(base);
        code(base)?
    };
    let at = shared.next;
    if code.len() > (shared.end - at) as usize {
        return None;
    }
    // SAFETY: `at..at + len` is unused space of a writable code mapping (`map_shared_code`);
    // nothing jumps there before this routine is returned.
    unsafe { core::ptr::copy_nonoverlapping(code.as_ptr(), at as *mut u8, code.len()) };
    let name = match key {
        RoutineKey::Fallback(..) => "shared-fallback",
        RoutineKey::Scan(..) | RoutineKey::Access(..) => "shared-scan",
    };
    crate::perfmap::publish_one(at, code.len(), name);
    shared.next = (at + code.len() as u64 + 63) & !63;
    shared.routines.insert(key, at);
    Some(at)
}

/// The code of `shared_data_scan`'s routine placed at `at`.
fn data_scan_routine(cache: MruCache, after_miss: AfterMiss, at: u64) -> Option<Vec<u8>> {
    let mut a = Asm::new(at as usize);
    let hit = a.new_dynamic_label();
    scan_and_miss(&mut a, cache, (after_miss, true), hit);
    dynasm!(a ; .arch x64 ; =>hit ; ret);
    a.finalize().ok()
}

/// Calls a shared scan routine (`shared_data_scan`) with rax = the line and rcx = its row as
/// it expects them, on the thread's scan stack (the guest's stays untouched); it comes back
/// to the code after this with rdx and the flags clobbered.
fn enter_shared_scan(a: &mut Asm, arg0: u64, routine: u64) {
    call_on_scan_stack(a, RDX, arg0, routine);
}

/// Calls a shared routine with `arg0` in `gs:[ARG0]` on the thread's scan stack (the guest's
/// stays untouched; the routine finds the guest rsp in `gs:[SCAN_RSP]`), clobbering
/// `scratch`.
#[allow(clippy::useless_conversion)] // dynasm's `Rq(x)` converts the register number
fn call_on_scan_stack(a: &mut Asm, scratch: u8, arg0: u64, routine: u64) {
    dynasm!(a
        ; .arch x64
        ; mov Rq(scratch), QWORD arg0 as i64
        ; gs mov QWORD [ARG0], Rq(scratch)
        ; gs mov QWORD [SCAN_RSP], rsp
        ; gs mov rsp, QWORD [SCAN_TOP]
        ; mov Rq(scratch), QWORD routine as i64
        ; call Rq(scratch)
        ; gs mov rsp, QWORD [SCAN_RSP]
    );
}

/// The L1 lookup of a data line past ways 0 to 2, which its caller tests first
/// (`data_way1`; rax = the line, rcx = its row), and on a miss the LL part (`after_miss`),
/// ending at `done` (the helper returns there through `gs:[HRET]`). In a shared routine
/// (`in_routine`) the helper's `arg0` is the caller's, in `gs:[ARG0]`, and `done` is the
/// routine's `ret`.
fn scan_and_miss(
    a: &mut Asm,
    cache: MruCache,
    (after_miss, in_routine): (AfterMiss, bool),
    done: DynamicLabel,
) {
    let miss = a.new_dynamic_label();
    l1_scan_past(a, cache, 2, (done, miss));
    // `l1_scan` leaves the line in rax; it waits in `gs:[IS3]` while the LL part uses rax.
    // The guest's own access comes after the simulator's LL lookup, whose rows miss the
    // host's caches as the guest's line may: asking for the line now overlaps the two.
    dynasm!(a
        ; .arch x64
        ; =>miss
        ; gs mov QWORD [IS3], rax
        ; mov rdx, rax
        ; shl rdx, cache.line_bits as i8
        ; prefetcht0 [rdx]
    );
    if let Some(ll) = after_miss.ll_mru {
        let call = a.new_dynamic_label();
        if ll.line_bits > cache.line_bits {
            dynasm!(a ; .arch x64 ; shr rax, (ll.line_bits - cache.line_bits) as i8);
        }
        ll_mru_hit(a, ll, (after_miss, in_routine), call, done);
        dynasm!(a ; .arch x64 ; =>call);
        if after_miss.queue.is_some() {
            queued_line_becomes_mru(a);
        }
        if let Some(rows) = after_miss.ll_rows {
            // The row the helper reads next (rax = the LL line still): started while the
            // MRU test's own load is in flight, as the branch to here is predicted.
            dynasm!(a
                ; .arch x64
                ; mov rcx, QWORD ll.set_mask as i64
                ; and rcx, rax
                ; imul rcx, rcx, rows.row_bytes as i32
                ; mov rdx, QWORD rows.base as i64
                ; add rcx, rdx
            );
            // Its first two host lines: a 64-way row of narrow tags is four, which the
            // helper reads up to the line's way. Two: stride (always the last way) -14%,
            // four no better there and chase (a random way) +2.5%.
            for line in 0..rows.row_bytes.div_ceil(64).min(2) as i32 {
                dynasm!(a ; .arch x64 ; prefetcht0 [rcx + line * 64]);
            }
        }
    }
    dynasm!(a ; .arch x64 ; gs mov rax, QWORD [IS3]);
    prefetch_stream(a, cache, in_routine);
    if let Some(q) = after_miss.queue.filter(|_| after_miss.whole_lines) {
        queue_push(
            a,
            cache.line_bits,
            (q, after_miss.helper.arg0, in_routine),
            done,
        );
        return;
    }
    dynasm!(a
        ; .arch x64
        ; shl rax, cache.line_bits as i8
        ; gs mov QWORD [ARG1], rax
    );
    if !in_routine {
        helper_call(a, after_miss.helper, 1, done);
        return;
    }
    routine_helper_call(a, after_miss.helper, 1, done);
}

/// Queues the LL part of an L1 miss (`AfterMiss::queue`) from rax = its L1 line: counts the
/// miss in its slot (`arg0`, or the shared routine's caller's in `gs:[ARG0]`), writes the
/// entry (the line's first byte, size 1: `whole_lines`) and, when it ends a segment, calls
/// `segment_end`; then to `done`. Clobbers rax, rcx, rdx and the flags.
fn queue_push(
    a: &mut Asm,
    line_bits: u32,
    (queue, arg0, in_routine): (LlQueue, u64, bool),
    done: DynamicLabel,
) {
    dynasm!(a
        ; .arch x64
        ; shl rax, line_bits as i8
        ; mov rcx, QWORD queue.producer as i64
        ; mov rdx, QWORD [rcx]
        ; mov QWORD [rdx], rax
    );
    if in_routine {
        dynasm!(a ; .arch x64 ; gs mov rax, QWORD [ARG0]);
    } else {
        dynasm!(a ; .arch x64 ; mov rax, QWORD arg0 as i64);
    }
    // The LL-miss slot follows the L1-miss slot; the size is 1.
    dynasm!(a
        ; .arch x64
        ; inc QWORD [rax]
        ; shl rax, 8
        ; add rax, (8 << 8) | 1
        ; mov QWORD [rdx + 8], rax
        ; add rdx, 16
        ; mov QWORD [rcx], rdx
        ; cmp rdx, QWORD [rcx + 8]
        ; jb =>done
    );
    if in_routine {
        routine_helper_call(a, queue.segment_end, 0, done);
    } else {
        helper_call(a, queue.segment_end, 0, done);
    }
}

/// A shared routine's call of the integer-only `helper` (its `arg0` in `gs:[ARG0]` from the
/// routine's caller, `arg1` in `gs:[ARG1]`) with `arg2`: the trampoline comes back to
/// `done`, the routine's `ret`, with rsp on the scan stack again.
fn routine_helper_call(a: &mut Asm, helper: Helper, arg2: i32, done: DynamicLabel) {
    dynasm!(a
        ; .arch x64
        ; mov eax, arg2
        ; gs mov QWORD [ARG2], rax
    );
    trampoline_call(a, helper.func, true, done);
}

/// Caches of up to this many ways get `l1_scan`'s straight-line way scan and shift; larger
/// ones (rare user geometries: a 512-way D1 would take ~13 KB per check unrolled) loop.
const UNROLLED_WAYS: u64 = 16;

/// One step of `l1_scan` (at least `way + 1` ways, the ways before `way` tested): when rax,
/// the line, is in way `way` of the row at rcx, moves ways `0..way` down one, puts the line
/// in way 0 and jumps to `hit`; else falls through. Clobbers rdx and the flags. Way 2 is
/// tested here only in the shared routine for fetches: inline in each fetch check's
/// out-of-line part it made sqlite 9% slower, while for data checks the inline form
/// (`data_way1`) made it 6% faster.
fn way_hit(a: &mut Asm, way: i32, hit: DynamicLabel) {
    let other = a.new_dynamic_label();
    dynasm!(a ; .arch x64 ; cmp rax, QWORD [rcx + 8 * way] ; jne =>other);
    move_to_front(a, way, (RAX, RCX, RDX), 0);
    dynasm!(a ; .arch x64 ; jmp =>hit ; =>other);
}

/// The LRU update of a hit in way `way` of the row at `row + disp` (registers `(line, row,
/// tmp)`; `tmp` is clobbered): ways `0..way` move down one and the line goes to way 0.
#[allow(clippy::useless_conversion)] // dynasm's `Rq(n)` converts the register number
fn move_to_front(a: &mut Asm, way: i32, (line, row, tmp): (u8, u8, u8), disp: i32) {
    for k in (1..=way).rev() {
        dynasm!(a
            ; .arch x64
            ; mov Rq(tmp), QWORD [Rq(row) + disp + 8 * (k - 1)]
            ; mov QWORD [Rq(row) + disp + 8 * k], Rq(tmp)
        );
    }
    dynasm!(a ; .arch x64 ; mov QWORD [Rq(row) + disp], Rq(line));
}

/// The way scan and LRU update after a failed MRU check (the flags are free): on entry rax =
/// line, rcx = address of its set row. A hit in way `k` moves ways `0..k` down by one, puts
/// the line in way 0 and jumps to `hit`; a miss moves every way down (the LRU tag falls off),
/// installs the line and jumps to `miss`. Clobbers rdx and the flags; rax and rcx stay.
///
/// Ways 1 and 2 are tested and moved first, on their own: they take ~98% of the hits that
/// reach here (python3: 203M in way 1, 48M in way 2, 0.7M beyond). The other ways are
/// compared one after the other without a loop (the loops' exits were a mispredicted branch
/// each, ~30% of matmul's time in this code); a hit in way `k` jumps into the miss's shift
/// sequence at the move into way `k`, and the zero flag of the last compare, which no `mov`
/// changes, tells the two apart after the install.
fn l1_scan(a: &mut Asm, cache: MruCache, hit: DynamicLabel, miss: DynamicLabel) {
    if cache.assoc >= 2 {
        way_hit(a, 1, hit);
    }
    l1_scan_past_way1(a, cache, hit, miss);
}

/// `l1_scan` for a line that its caller already found not to be in way 1.
fn l1_scan_past_way1(a: &mut Asm, cache: MruCache, hit: DynamicLabel, miss: DynamicLabel) {
    l1_scan_past(a, cache, 1, (hit, miss));
}

/// `l1_scan` for a line that its caller already found in none of ways `1..=tested` (1 or
/// 2; the scan past them starts at way 3 either way).
fn l1_scan_past(
    a: &mut Asm,
    cache: MruCache,
    tested: i32,
    (hit, miss): (DynamicLabel, DynamicLabel),
) {
    let assoc = cache.assoc as i32;
    if assoc <= 1 {
        dynasm!(a ; .arch x64 ; mov QWORD [rcx], rax ; jmp =>miss);
        return;
    }
    if assoc >= 3 && tested < 2 {
        way_hit(a, 2, hit);
    }
    if cache.assoc > UNROLLED_WAYS {
        l1_scan_loop(a, assoc, hit, miss);
        return;
    }
    // found[k]: the line is in way k (>= 3).
    let found: Vec<DynamicLabel> = (0..assoc).map(|_| a.new_dynamic_label()).collect();
    for (k, &f) in found.iter().enumerate().skip(3) {
        dynasm!(a ; .arch x64 ; cmp rax, QWORD [rcx + 8 * k as i32] ; je =>f);
    }
    for k in (1..assoc).rev() {
        if k >= 3 {
            dynasm!(a ; .arch x64 ; =>found[k as usize]);
        }
        dynasm!(a
            ; .arch x64
            ; mov rdx, QWORD [rcx + 8 * (k - 1)]
            ; mov QWORD [rcx + 8 * k], rdx
        );
    }
    dynasm!(a ; .arch x64 ; mov QWORD [rcx], rax);
    if assoc >= 4 {
        dynasm!(a ; .arch x64 ; je =>hit);
    }
    dynasm!(a ; .arch x64 ; jmp =>miss);
}

/// `l1_scan` from way 3 on for a cache of more than `UNROLLED_WAYS` ways: a compare loop and
/// a shift loop (the line waits in `gs:[IS4]` while rax carries the tags).
fn l1_scan_loop(a: &mut Asm, assoc: i32, hit: DynamicLabel, miss: DynamicLabel) {
    let row = assoc * 8;
    let found = a.new_dynamic_label();
    dynasm!(a
        ; .arch x64
        ; mov edx, 24
        ; top:
        ; cmp rax, QWORD [rcx + rdx]
        ; je =>found
        ; add rdx, 8
        ; cmp rdx, row
        ; jne <top
    );
    // rdx = 8k with k >= 1: ways k-1..0 move to k..1, then the line goes to way 0.
    let shift_install = |a: &mut Asm| {
        dynasm!(a
            ; .arch x64
            ; gs mov QWORD [IS4], rax
            ; shift:
            ; mov rax, QWORD [rcx + rdx - 8]
            ; mov QWORD [rcx + rdx], rax
            ; sub rdx, 8
            ; jnz <shift
            ; gs mov rax, QWORD [IS4]
            ; mov QWORD [rcx], rax
        );
    };
    dynasm!(a ; .arch x64 ; mov edx, row - 8);
    shift_install(a);
    dynasm!(a ; .arch x64 ; jmp =>miss ; =>found);
    shift_install(a);
    dynasm!(a ; .arch x64 ; jmp =>hit);
}

/// `eax = 1` if the conditional branch `insn` will be taken, else 0; flags untouched.
fn taken(a: &mut Asm, insn: &Instruction) -> Result<(), String> {
    match insn.code() {
        Code::Jrcxz_rel8_64 | Code::Jecxz_rel8_64 => {
            dynasm!(a ; .arch x64 ; mov eax, 1 ; jrcxz >t ; mov eax, 0 ; t:);
        }
        Code::Loop_rel8_64_RCX
        | Code::Loop_rel8_64_ECX
        | Code::Loope_rel8_64_RCX
        | Code::Loope_rel8_64_ECX
        | Code::Loopne_rel8_64_RCX
        | Code::Loopne_rel8_64_ECX => {
            dynasm!(a
                ; .arch x64
                ; gs mov QWORD [IS1], rcx
                ; lea rcx, [rcx - 1]
                ; mov eax, 0
                ; jrcxz >d
                ; mov eax, 1
            );
            match insn.code() {
                Code::Loope_rel8_64_RCX | Code::Loope_rel8_64_ECX => {
                    dynasm!(a ; .arch x64 ; je >d ; mov eax, 0);
                }
                Code::Loopne_rel8_64_RCX | Code::Loopne_rel8_64_ECX => {
                    dynasm!(a ; .arch x64 ; jne >d ; mov eax, 0);
                }
                _ => {}
            }
            dynasm!(a ; .arch x64 ; d: ; gs mov rcx, QWORD [IS1]);
        }
        _ => {
            let cc = crate::translate::cc_number(insn.condition_code())
                .ok_or("branch without a condition")?;
            a.extend([0x0f, 0x90 + cc, 0xc0, 0x0f, 0xb6, 0xc0]); // setcc al; movzx eax, al
        }
    }
    Ok(())
}

/// `rax = target of the indirect jump/call insn` (rax still holds the guest value).
fn target(a: &mut Asm, insn: &Instruction) -> Result<(), String> {
    if insn.op0_kind() == OpKind::Register {
        let mov = Instruction::with2(Code::Mov_r64_rm64, Register::RAX, insn.op0_register())
            .map_err(|e| e.to_string())?;
        return encode(a, &mov);
    }
    if insn.is_ip_rel_memory_operand() {
        let abs = insn.ip_rel_memory_address() as i64;
        dynasm!(a ; .arch x64 ; mov rax, QWORD abs ; mov rax, QWORD [rax]);
        return Ok(());
    }
    let m = crate::translate::memory_operand(insn);
    let mov =
        Instruction::with2(Code::Mov_r64_rm64, Register::RAX, m).map_err(|e| e.to_string())?;
    encode(a, &mov)
}

/// Legacy and REX-less prefixes that may precede a string opcode.
fn is_prefix(b: u8) -> bool {
    matches!(
        b,
        0xf0 | 0xf2 | 0xf3 | 0x2e | 0x36 | 0x3e | 0x26 | 0x64 | 0x65 | 0x66 | 0x67
    )
}

/// The lines a fetch of `len` bytes at `addr` touches in `cache`.
fn fetched_lines(cache: &SlotI1, addr: u64, len: u32) -> FetchedLines {
    let last = addr + u64::from(len.max(1)) - 1;
    FetchedLines {
        tags: cache.base,
        line_bits: cache.line_bits,
        first: addr >> cache.line_bits,
        last: last >> cache.line_bits,
    }
}

/// A fetch check's hit: per line, `clock += 1; stamp = clock` for its set's clock and the
/// slot the check names, in scratch register `r`, without the flags; each stamp's address
/// field goes to `fields`.
// dynasm's dynamic registers (`Rq(n)`) expand to a `.into()` of the `u8` given.
#[allow(clippy::useless_conversion)]
fn stamp_slots(
    a: &mut Asm,
    r: u8,
    cache: &SlotI1,
    (lines, slots): (&[u64], &[u64]),
    fields: &mut [Vec<(SlotField, usize)>],
) {
    for ((&line, &slot), fields) in lines.iter().zip(slots).zip(fields) {
        let clock = cache.clock(line) as i32;
        dynasm!(a
            ; .arch x64
            ; mov Rq(r), QWORD [clock]
            ; lea Rq(r), [Rq(r) + 1]
            ; mov QWORD [clock], Rq(r)
        );
        let stamp = slot + SlotField::Stamp as u64;
        fields.push((
            SlotField::Stamp,
            abs_mem(a, (Some(0x48), 0x89, r), stamp, None),
        ));
    }
}

/// Emits `op` with a memory operand at the absolute 32-bit address `addr` (ModRM r/m 100,
/// SIB without base or index) and an optional 32-bit immediate: `(rex, opcode, reg)` with
/// `reg` the ModRM reg field (a register, or the opcode's extension). Returns the offset of
/// the address field, which a slow path may rewrite (`fetch_slots_slow`).
fn abs_mem(
    a: &mut Asm,
    (rex, opcode, reg): (Option<u8>, u8, u8),
    addr: u64,
    imm: Option<i32>,
) -> usize {
    let mut bytes = Vec::with_capacity(12);
    let rex = rex.unwrap_or(0) | if reg >= 8 { 0x44 } else { 0 };
    if rex != 0 {
        bytes.push(rex);
    }
    bytes.extend([opcode, ((reg & 7) << 3) | 4, 0x25]);
    let field = a.offset().0 + bytes.len();
    bytes.extend((addr as u32).to_le_bytes());
    if let Some(imm) = imm {
        bytes.extend(imm.to_le_bytes());
    }
    a.extend(bytes);
    field
}

/// `lahf; seto al; mov gs:[instr_flags], rax` (rax already saved).
fn save_flags(a: &mut Asm) {
    a.extend([0x9f, 0x0f, 0x90, 0xc0]);
    dynasm!(a ; .arch x64 ; gs mov QWORD [FLAGS], rax);
}

/// Inverse of `save_flags` (clobbers rax).
fn restore_flags(a: &mut Asm) {
    dynasm!(a ; .arch x64 ; gs mov rax, QWORD [FLAGS]);
    a.extend([0x04, 0x7f, 0x9e]);
}

/// Adds 1 to the u64 at `ctr`.
// dynasm's dynamic registers (`Rq(n)`) expand to a `.into()` of the `u8` given.
#[allow(clippy::useless_conversion)]
fn add_one(a: &mut Asm, host: u64, ctr: *mut u64, (flags_live, scratch): (bool, Option<u8>)) {
    let ctr = ctr as u64;
    let at = host + a.offset().0 as u64;
    if !flags_live {
        if let Ok(d) = i32::try_from(ctr as i64 - (at as i64 + 7)) {
            // inc qword [rip + d]
            a.extend([0x48, 0xff, 0x05]);
            a.extend(d.to_le_bytes());
            return;
        }
    }
    if let (Some(r), Ok(dl)) = (scratch, i32::try_from(ctr as i64 - (at as i64 + 7))) {
        // Flags live, a dead guest register: a flag-free increment with nothing to save.
        let rex = 0x48 | (r >> 3) << 2;
        let modrm = (r & 7) << 3 | 5;
        a.extend([rex, 0x8b, modrm]); // mov r, [rip + dl]
        a.extend(dl.to_le_bytes());
        dynasm!(a ; .arch x64 ; lea Rq(r), [Rq(r) + 1]);
        let store_end = host + a.offset().0 as u64 + 7;
        if let Ok(ds) = i32::try_from(ctr as i64 - store_end as i64) {
            a.extend([rex, 0x89, modrm]); // mov [rip + ds], r
            a.extend(ds.to_le_bytes());
            return;
        }
        // The store is out of reach: the ways below load the counter again (r is dead, its
        // value does not matter).
    }
    // Flags live: a flag-free increment through one borrowed register, rip-relative when the
    // counter is within reach (the load ends 9 + 7 bytes after here, the store 4 + 7 after
    // that). Not from `at`: the way above may have emitted a load before it found the store
    // out of reach.
    let load_end = (host + a.offset().0 as u64) as i64 + 9 + 7;
    let store_end = load_end + 4 + 7;
    if let (Ok(dl), Ok(ds)) = (
        i32::try_from(ctr as i64 - load_end),
        i32::try_from(ctr as i64 - store_end),
    ) {
        dynasm!(a ; .arch x64 ; gs mov QWORD [IS0], rax);
        a.extend([0x48, 0x8b, 0x05]); // mov rax, [rip + dl]
        a.extend(dl.to_le_bytes());
        dynasm!(a ; .arch x64 ; lea rax, [rax + 1]);
        a.extend([0x48, 0x89, 0x05]); // mov [rip + ds], rax
        a.extend(ds.to_le_bytes());
        dynasm!(a ; .arch x64 ; gs mov rax, QWORD [IS0]);
        return;
    }
    dynasm!(a
        ; .arch x64
        ; gs mov QWORD [IS0], rax
        ; gs mov QWORD [IS1], rcx
        ; mov rax, QWORD ctr as i64
        ; mov rcx, QWORD [rax]
        ; lea rcx, [rcx + 1]
        ; mov QWORD [rax], rcx
        ; gs mov rcx, QWORD [IS1]
        ; gs mov rax, QWORD [IS0]
    );
}

/// Sets up `gs:[helper_*]` (argument 1 already stored) and jumps to the trampoline, which
/// comes back at `back`. Clobbers rax.
/// Computes a helper's first argument into rax (saved by the caller) and stores it in
/// `gs:[helper_args + 8]`.
fn store_arg1(a: &mut Asm, insn: &Instruction, arg1: CallArg) -> Result<(), String> {
    match arg1 {
        CallArg::Imm(v) => dynasm!(a ; .arch x64 ; mov rax, QWORD v as i64),
        CallArg::Taken => taken(a, insn)?,
        CallArg::Target => target(a, insn)?,
        // The guest rsp, untouched so far (callgrind).
        CallArg::Sp => {
            dynasm!(a ; .arch x64 ; gs mov QWORD [ARG1], rsp);
            return Ok(());
        }
    }
    dynasm!(a ; .arch x64 ; gs mov QWORD [ARG1], rax);
    Ok(())
}

fn helper_call(a: &mut Asm, helper: Helper, arg2: u64, back: DynamicLabel) {
    match i32::try_from(arg2 as i64) {
        Ok(v) => dynasm!(a ; .arch x64 ; gs mov QWORD [ARG2], v),
        Err(_) => dynasm!(a
            ; .arch x64
            ; mov rax, QWORD arg2 as i64
            ; gs mov QWORD [ARG2], rax
        ),
    }
    helper_call_same_arg2(a, helper, back);
}

/// `helper_call` after another call with the same `arg2` (the trampolines leave
/// `gs:[helper_args + 16]` alone; only `arg0` is overwritten, with the result).
fn helper_call_same_arg2(a: &mut Asm, helper: Helper, back: DynamicLabel) {
    dynasm!(a
        ; .arch x64
        ; mov rax, QWORD helper.arg0 as i64
        ; gs mov QWORD [ARG0], rax
    );
    trampoline_call(a, helper.func, helper.integer_only, back);
}

/// Calls `func` (its arguments in `gs:[helper_args]` already) through the lean trampoline
/// (`integer_only`) or the full one, which comes back to `back`; clobbers rax.
fn trampoline_call(
    a: &mut Asm,
    func: extern "C" fn(u64, u64, u64) -> u64,
    integer_only: bool,
    back: DynamicLabel,
) {
    dynasm!(a
        ; .arch x64
        ; mov rax, QWORD func as usize as i64
        ; gs mov QWORD [HFN], rax
        ; lea rax, [=>back]
        ; gs mov QWORD [HRET], rax
    );
    if integer_only {
        dynasm!(a ; .arch x64 ; gs jmp QWORD [TRAMP_INT]);
    } else {
        dynasm!(a ; .arch x64 ; gs jmp QWORD [TRAMP]);
    }
}

fn encode(a: &mut Asm, insn: &Instruction) -> Result<(), String> {
    let mut enc = Encoder::new(64);
    // The instructions encoded here have no RIP-relative operand: any address works.
    enc.encode(insn, 0).map_err(|e| e.to_string())?;
    a.extend(enc.take_buffer());
    Ok(())
}

/// `dst = effective address of acc + offset` from the guest registers (rax, rcx, rdx still
/// hold guest values); clobbers `scratch` for FS-relative accesses and far displacements.
fn effective_address(
    a: &mut Asm,
    acc: &MemAccess,
    offset: i32,
    dst: Register,
    scratch: Register,
) -> Result<(), String> {
    let displ = acc.displ.wrapping_add(offset as i64 as u64);
    let d = displ as i64;
    if matches!(acc.base, Register::RIP | Register::EIP)
        || (acc.base == Register::None && acc.index == Register::None)
    {
        encode(
            a,
            &Instruction::with2(Code::Mov_r64_imm64, dst, displ).map_err(|e| e.to_string())?,
        )?;
    } else {
        // A gather's vector index is an element's business (`element_address`).
        let index = if acc.index.is_vector_register() {
            Register::None
        } else {
            acc.index
        };
        let (disp, dsize) = if i32::try_from(d).is_ok() {
            // 1: the encoder picks the smallest displacement that fits.
            (d, 1)
        } else {
            (0, 0)
        };
        let base = if acc.base == Register::None && index == Register::None {
            Register::None
        } else {
            acc.base
        };
        let m = MemoryOperand::new(
            base,
            index,
            if index == Register::None {
                1
            } else {
                acc.scale
            },
            disp,
            dsize,
            false,
            Register::None,
        );
        encode(
            a,
            &Instruction::with2(Code::Lea_r64_m, dst, m).map_err(|e| e.to_string())?,
        )?;
        if dsize == 0 && d != 0 {
            // A displacement beyond rel32 (only with 32-bit wraparound forms): add it flag-free.
            encode(
                a,
                &Instruction::with2(Code::Mov_r64_imm64, scratch, displ)
                    .map_err(|e| e.to_string())?,
            )?;
            add_flag_free(a, dst, scratch)?;
        }
    }
    if acc.seg == Register::FS {
        encode(
            a,
            &Instruction::with1(Code::Rdfsbase_r64, scratch).map_err(|e| e.to_string())?,
        )?;
        add_flag_free(a, dst, scratch)?;
    }
    Ok(())
}

/// `lea dst, [dst + src]`.
fn add_flag_free(a: &mut Asm, dst: Register, src: Register) -> Result<(), String> {
    let m = MemoryOperand::with_base_index(dst, src);
    encode(
        a,
        &Instruction::with2(Code::Lea_r64_m, dst, m).map_err(|e| e.to_string())?,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::{Decoder, DecoderOptions};

    fn rise(code: &[u8]) -> Option<usize> {
        let insns: Vec<Instruction> = Decoder::with_ip(64, code, 0x1000, DecoderOptions::NONE)
            .into_iter()
            .collect();
        after_rsp_rise(&insns, &mut InstructionInfoFactory::new())
    }

    #[test]
    fn blocks_that_may_raise_rsp_are_found() {
        // push rbx; pop rbx; jmp $: nothing raised.
        assert_eq!(rise(&[0x53, 0x5b, 0xeb, 0xfe]), None);
        // sub rsp, 0x18; add rsp, 0x18; lea rsp, [rsp - 8]; and rsp, -16; jmp $
        assert_eq!(
            rise(&[
                0x48, 0x83, 0xec, 0x18, 0x48, 0x83, 0xc4, 0x18, 0x48, 0x8d, 0x64, 0x24, 0xf8, 0x48,
                0x83, 0xe4, 0xf0, 0xeb, 0xfe
            ]),
            None
        );
        // pop rcx; xor eax, eax; jmp $: raised by the pop, checked after it.
        assert_eq!(rise(&[0x59, 0x31, 0xc0, 0xeb, 0xfe]), Some(1));
        // push rbx; add rsp, 16; nop: raised by 8, checked after the add.
        assert_eq!(rise(&[0x53, 0x48, 0x83, 0xc4, 0x10, 0x90]), Some(2));
        // lea rsp, [rsp + 8]: raised; pop rcx as the last instruction: checked at the end.
        assert_eq!(rise(&[0x48, 0x8d, 0x64, 0x24, 0x08]), Some(1));
        assert_eq!(rise(&[0x90, 0x59]), Some(2));
        // mov rsp, rbp; leave; pop rsp; and rsp, 16: unknown.
        for code in [
            &[0x48, 0x89, 0xec][..],
            &[0xc9],
            &[0x5c],
            &[0x48, 0x83, 0xe4, 0x10],
        ] {
            assert_eq!(rise(code), Some(1), "{code:x?}");
        }
    }
}
