//! `--tool=cachegrind`: instruction counts (always), cache simulation (`--cache-sim=yes`) and
//! branch prediction (`--branch-sim=yes`), written as `cachegrind.out.<pid>` with Valgrind's
//! summary on the log.
//!
//! # How counts are kept
//! Each block gets one cost array (`Instrumenter::cost_array`): slot 0 counts executions of
//! the block; then `SLOTS` slots per instruction for what can only be known at run time
//! (misses, mispredicts, `rep` entries and iterations). Ir, Dr, Dw, Bc and Bi are derived at
//! the end from the execution count and what the instruction statically does.
//!
//! # Invariants
//! * `instrument` is deterministic: it depends only on the block and the options (and on
//!   whether instrumentation is on, which changes only together with a full discard).
//! * The `extern "C"` routines below are called from translated code on the helper stack:
//!   they touch only the global simulators and the cost slot they are given; no allocation,
//!   lock, TLS or panic.
//!
//! Not done: Valgrind's IR-optimiser artefacts (dead loads dropped, the chase over-count) are
//! not reproduced; what really executed is counted (see `docs/cachegrind.md`).
mod ll_queue;
pub mod modules;
pub mod options;
pub mod summary;

use cachesim::{BranchPredictor, CacheLevel, Hierarchy};
use dbt_core::tool::{
    AccessKind, AfterMiss, BlockView, CallArg, ClientReply, DataRef, FiniReason, FlowKind, Helper,
    InsnView, Instrumenter, LlHitCount, LlQueue, LlRows, MaskedOff, MemAccess, MruCache, RepKind,
    SlotI1, Tool,
};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicPtr, Ordering};

pub use options::OPTION_NAMES;

/// Per-instruction slots: I1mr ILmr D1mr DLmr D1mw DLmw Bcm Bim rep-entries rep-iterations.
const SLOTS: usize = 10;
const S_I1MR: usize = 0;
const S_D1MR: usize = 2;
const S_D1MW: usize = 4;
const S_BCM: usize = 6;
const S_BIM: usize = 7;
const S_REP_ENTRIES: usize = 8;
const S_REP_ITERS: usize = 9;

/// `CACHEGRIND_START_INSTRUMENTATION` / `STOP` (tool base 'C','G').
pub const START_INSTRUMENTATION: u64 = 0x4347_0000;
pub const STOP_INSTRUMENTATION: u64 = 0x4347_0001;

static HIER: AtomicPtr<Hierarchy> = AtomicPtr::new(core::ptr::null_mut());
static BP: AtomicPtr<BranchPredictor> = AtomicPtr::new(core::ptr::null_mut());

/// A whole data access, as a data check hands some over (one across two lines, say): its
/// D1 part here, its LL part (on a D1 miss) through the LL queue. `slot` is the access's
/// D1-miss slot of a live cost array, the LL-miss slot after it.
extern "C" fn cg_data(slot: u64, addr: u64, size: u64) -> u64 {
    let h = HIER.load(Ordering::Relaxed);
    if h.is_null() {
        return 0;
    }
    // SAFETY: HIER is set once, before any guest code runs, to a leaked Hierarchy whose L1s
    // only translated code uses (guest threads run one at a time); `slot` is a cost-array
    // slot embedded at instrumentation.
    unsafe {
        if cachesim::raw::d1_part(h, addr, size) {
            l1_missed(slot, addr, size);
        }
    }
    0
}

/// The LL part of a fetch or data access whose L1 miss the inline code has already recorded
/// in the L1 tags.
extern "C" fn cg_ll(slot: u64, addr: u64, size: u64) -> u64 {
    if HIER.load(Ordering::Relaxed).is_null() {
        return 0;
    }
    // SAFETY: as in `cg_data`.
    unsafe { l1_missed(slot, addr, size) };
    0
}

/// An L1 miss: counted in its slot, its LL part queued (an LL miss counted in the slot
/// after).
///
/// # Safety
/// As in `cg_data`.
unsafe fn l1_missed(slot: u64, addr: u64, size: u64) {
    let slot = slot as *mut u64;
    // SAFETY: (caller) two live slots.
    unsafe {
        *slot += 1;
        ll_queue::push(addr, size, slot.add(1));
    }
}

extern "C" fn cg_cond(slot: u64, taken: u64, addr: u64) -> u64 {
    let p = BP.load(Ordering::Relaxed);
    if p.is_null() {
        return 0;
    }
    // SAFETY: BP is set once before guest code runs to a leaked predictor used only from
    // translated code; `slot` is the instruction's Bcm slot.
    unsafe {
        *(slot as *mut u64) += u64::from(cachesim::raw::cachesim_cond_branch(p, addr, taken))
    };
    0
}

extern "C" fn cg_ind(slot: u64, target: u64, addr: u64) -> u64 {
    let p = BP.load(Ordering::Relaxed);
    if p.is_null() {
        return 0;
    }
    // SAFETY: as in `cg_cond`; `slot` is the instruction's Bim slot.
    unsafe {
        *(slot as *mut u64) += u64::from(cachesim::raw::cachesim_ind_branch(p, addr, target))
    };
    0
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BranchKind {
    None,
    Cond,
    Indirect,
}

/// What an instruction does on each execution (or each `rep` iteration).
struct InsnStatic {
    addr: u64,
    dr: u64,
    dw: u64,
    rep: RepKind,
    branch: BranchKind,
    /// A locked read-modify-write: VEX's CAS retry exit is one more `Bc` per execution.
    cas_exit: bool,
    /// Accesses with elements skipped while disabled (masked moves, AVX-512 gathers, the x87
    /// part of `xsave`): where in the block's cost array the enabled ones are counted (reads,
    /// then writes), on top of `dr` and `dw`.
    enabled: Option<usize>,
}

/// Whether access `a` has elements skipped while disabled (counted as they run).
fn skippable(a: &MemAccess) -> bool {
    a.lanes.is_some_and(|l| l.masked_off == MaskedOff::Skipped)
}

/// Whether an access of `v` is [`skippable`].
fn has_skippable_elements(v: &InsnView) -> bool {
    v.accesses.iter().any(skippable)
}

/// Whether VEX translates `v` into a compare-and-swap followed by a conditional exit back to
/// the instruction when it failed (a locked read-modify-write other than `cmpxchg*`, and
/// `xchg` with memory): Cachegrind and Callgrind count that exit as a conditional branch and,
/// with branch simulation, predict it (never taken: guest threads run one at a time).
pub(crate) fn vex_cas_exit(v: &InsnView) -> bool {
    use iced_x86::Mnemonic as M;
    let cas_only = matches!(v.insn.mnemonic(), M::Cmpxchg | M::Cmpxchg8b | M::Cmpxchg16b);
    v.locked && !cas_only && v.accesses.iter().any(|a| a.kind == AccessKind::Modify)
}

struct BlockRec {
    costs: *mut u64,
    /// Entries of `costs`: 1 + SLOTS per instruction + 2 per instruction with skippable
    /// elements.
    n_costs: usize,
    insns: Vec<InsnStatic>,
    /// Runs a fault cut short: (faulting instruction, whether the block's counter counted
    /// the run). See [`BlockRec::runs_of`].
    cut_short: Vec<(usize, bool)>,
}

impl BlockRec {
    /// How many times instruction `i` ran when the block's counter says `count`: a run cut
    /// short by a fault ran the instructions up to the faulting one (counted as the
    /// instruction's data accesses were simulated), whether or not the counter, bumped
    /// somewhere in the block, counted it.
    fn runs_of(&self, i: usize, count: u64) -> u64 {
        self.cut_short
            .iter()
            .fold(count, |n, &(faulting, counted)| {
                match (counted, i > faulting) {
                    (true, true) => n - 1,
                    (false, false) => n + 1,
                    _ => n,
                }
            })
    }
}

// SAFETY: `costs` points into the process-lifetime cost arena; the tool is used under the
// core lock only.
unsafe impl Send for BlockRec {}

struct Caches {
    i1: &'static SlotI1,
    d1: MruCache,
    /// `AfterMiss::ll_mru` (`cg_ll` only counts an LL hit).
    ll_mru: Option<MruCache>,
    /// `AfterMiss::ll_rows`.
    ll_rows: Option<LlRows>,
    /// `AfterMiss::queue`: the LL on a thread of its own (`ll_queue`).
    queue: Option<LlQueue>,
    whole_lines: bool,
    min_line: u64,
    desc: Vec<String>,
}

impl Caches {
    /// What an inline L1 check whose miss slot is `slot` does after an L1 miss: `cg_ll`
    /// with that slot.
    fn after_miss(&self, slot: u64) -> AfterMiss {
        AfterMiss {
            helper: Helper {
                func: cg_ll,
                arg0: slot,
                integer_only: true,
            },
            ll_mru: self.ll_mru,
            ll_rows: self.ll_rows,
            ll_hit: LlHitCount::Arg0,
            whole_lines: self.whole_lines,
            queue: self.queue,
        }
    }
}

/// A simulated cache hierarchy as both tools build it from their cache options.
pub(crate) struct SimCaches {
    /// The hierarchy, leaked: it lives as long as the process.
    pub hier: *mut Hierarchy,
    /// The I1's slots, leaked like the hierarchy (fetch checks keep its address).
    pub i1: &'static SlotI1,
    pub d1: MruCache,
    /// The LL's MRU tags for `AfterMiss::ll_mru`; `None` when an L1 line can span LL lines.
    pub ll_mru: Option<MruCache>,
    /// The LL's rows for `AfterMiss::ll_rows` (with `ll_mru`).
    pub ll_rows: Option<LlRows>,
    /// `AfterMiss::whole_lines`: the LL line is no smaller than either L1 line.
    pub whole_lines: bool,
    /// The smallest line size (accesses are clamped to it).
    pub min_line: u64,
    /// I1, D1, LL as simulated.
    pub geometry: [cachesim::CacheGeometry; 3],
}

/// The guest's widest register (ymm), which Valgrind requires a cache line to hold.
const MAX_REGISTER_BYTES: u64 = 32;

/// Builds the hierarchy for `overrides` on this host with Valgrind's geometry rules: its
/// warnings (debug lines) and messages go to `lines`; an unusable geometry is the error.
pub(crate) fn build_caches(
    tool: &str,
    overrides: &cachesim::CacheOverrides,
    lines: &mut Vec<StartupLine>,
) -> Result<SimCaches, Vec<String>> {
    let resolved = cachesim::detect_host().resolve(overrides).map_err(|u| {
        let mut l = u.warnings;
        l.extend(u.messages);
        l
    })?;
    lines.extend(resolved.warnings.iter().cloned().map(StartupLine::Debug));
    lines.extend(resolved.messages.iter().cloned().map(StartupLine::User));
    let h = Hierarchy::new(resolved.i1, resolved.d1, resolved.ll)
        .map_err(|e| vec![format!("cache configuration not supported: {e}")])?;
    let min_line = h.min_line_size();
    // Valgrind's check after the geometry (`VG_(min_line_size)` against the widest register,
    // 32 bytes with AVX): an access never spans more than two lines.
    if min_line < MAX_REGISTER_BYTES {
        return Err(vec![
            format!("{tool}: cannot continue: the minimum line size ({min_line})"),
            format!("  must be equal to or larger than the maximum register size ({MAX_REGISTER_BYTES})"),
            "  but it is not.  Exiting now.".to_string(),
        ]);
    }
    let (ll_tags, ll_stride) = h.ll().mru_tags_ptr();
    let ll = h.ll().geometry();
    let whole_lines = ll.line_size >= resolved.i1.line_size.max(resolved.d1.line_size);
    let ll_mru = whole_lines.then(|| MruCache {
        tags: ll_tags as u64,
        set_mask: u64::from(ll.sets()) - 1,
        line_bits: ll.line_size.trailing_zeros(),
        assoc: ll_stride,
        row_bytes: ll_stride * 8,
    });
    let (rows, row_bytes) = h.ll().rows_ptr();
    let ll_rows = whole_lines.then_some(LlRows {
        base: rows as u64,
        row_bytes,
    });
    let hier = Box::into_raw(h);
    Ok(SimCaches {
        hier,
        i1: slots(hier),
        d1: mru(Hierarchy::d1_flat_ptr_of(hier)),
        ll_mru,
        ll_rows,
        whole_lines,
        min_line,
        geometry: [resolved.i1, resolved.d1, resolved.ll],
    })
}

pub struct Cachegrind {
    opts: options::CgOptions,
    caches: Option<Caches>,
    quiet: bool,
    instrumenting: bool,
    blocks: dbt_core::fast_hash::FastMap<(u64, u64), BlockRec>,
    modules: modules::Modules,
    cmd: String,
    cwd: std::path::PathBuf,
}

/// What the launcher prints after the banner.
pub enum StartupLine {
    /// `--PID-- ` line.
    Debug(String),
    /// `==PID== ` line.
    User(String),
    /// `==PID== ` line printed even with `-q`.
    Notice(String),
}

/// The fetch checks' description of the I1 of the leaked, live hierarchy `hier`.
fn slots(hier: *mut Hierarchy) -> &'static SlotI1 {
    let cache = Hierarchy::i1_ptr_of(hier);
    // SAFETY: the I1 of a leaked, live hierarchy, read before any guest code runs.
    let c = unsafe { &*cache };
    Box::leak(Box::new(SlotI1 {
        base: c.base(),
        row_bytes: c.row_bytes(),
        set_mask: c.set_mask(),
        line_bits: c.line_bits(),
        cache: cache as u64,
        touch: cachesim::raw::slots_touch,
        locate: cachesim::raw::slots_locate,
    }))
}

/// The inline-check constants of the D1 (shared with callgrind).
fn mru(flat: *const cachesim::FlatCache) -> MruCache {
    // SAFETY: `flat` comes from `Hierarchy::d1_flat_ptr_of` on a leaked, live hierarchy.
    let f = unsafe { &*flat };
    MruCache {
        tags: f.tags_ptr() as u64,
        set_mask: f.set_mask(),
        line_bits: f.line_bits(),
        assoc: f.assoc(),
        row_bytes: f.row_bytes(),
    }
}

impl Cachegrind {
    pub const BANNER: [&'static str; 2] = [
        "Cachegrind, a cache and branch-prediction profiler",
        "Copyright (C) 2002-2017, and GNU GPL'd, by Nicholas Nethercote et al.",
    ];

    /// Builds the tool from its options; returns it and the lines to print after the banner,
    /// or the error lines (Valgrind's) for a bad option or an unsupported cache.
    pub fn new(
        tool_options: &[(String, String)],
        quiet: bool,
        cmd: String,
    ) -> Result<(Cachegrind, Vec<StartupLine>), Vec<String>> {
        let opts = options::parse(tool_options).map_err(|e| e.0)?;
        let mut lines = Vec::new();
        let caches = if opts.cache_sim {
            let sim = build_caches("Cachegrind", &opts.caches, &mut lines)?;
            HIER.store(sim.hier, Ordering::Relaxed);
            // With the LL on its own thread the generated code must not read its MRU tags.
            let started = ll_queue::start(sim.hier, std::env::var_os("RGRIND_SYNC_LL").is_none());
            let queue = started.as_ref().map(|s| LlQueue {
                producer: s.producer,
                segment_end: Helper {
                    func: ll_queue::segment_end,
                    arg0: 0,
                    integer_only: true,
                },
            });
            // The producer's own copy of the MRU lines in place of the LL's.
            let ll_mru = match (sim.ll_mru, &started) {
                (Some(m), Some(s)) => Some(MruCache { tags: s.mru, ..m }),
                (m, _) => m,
            };
            let [i1g, d1g, llg] = &sim.geometry;
            Some(Caches {
                i1: sim.i1,
                d1: sim.d1,
                ll_mru,
                ll_rows: sim.ll_rows.filter(|_| queue.is_none()),
                queue,
                whole_lines: sim.whole_lines,
                min_line: sim.min_line,
                desc: vec![
                    cachesim::cachegrind_desc_line(CacheLevel::I1, i1g),
                    cachesim::cachegrind_desc_line(CacheLevel::D1, d1g),
                    cachesim::cachegrind_desc_line(CacheLevel::LL, llg),
                ],
            })
        } else {
            None
        };
        if opts.branch_sim {
            BP.store(Box::into_raw(BranchPredictor::new()), Ordering::Relaxed);
        }
        let instrumenting = opts.instr_at_start;
        Ok((
            Cachegrind {
                opts,
                caches,
                quiet,
                instrumenting,
                blocks: Default::default(),
                modules: modules::Modules::default(),
                cmd,
                cwd: std::env::current_dir().unwrap_or_default(),
            },
            lines,
        ))
    }

    fn events(&self) -> Vec<String> {
        let mut e = vec!["Ir"];
        if self.opts.cache_sim {
            e.extend(["I1mr", "ILmr", "Dr", "D1mr", "DLmr", "Dw", "D1mw", "DLmw"]);
        }
        if self.opts.branch_sim {
            e.extend(["Bc", "Bcm", "Bi", "Bim"]);
        }
        e.into_iter().map(String::from).collect()
    }

    /// Per-instruction costs (runtime address -> one count per event) and the totals.
    fn collect(&self) -> (BTreeMap<u64, Vec<u64>>, summary::Totals) {
        dbt_core::tool::fold_block_counters();
        let n_events = self.events().len();
        // Every instruction's costs, sorted and summed per address afterwards (blocks overlap)
        // for a bulk build of the map, instead of a map lookup per instruction.
        let n_insns = self.blocks.values().map(|r| r.insns.len()).sum();
        // Per instruction: its address and index, and its `n_events` costs in `vals`.
        let mut order: Vec<(u64, usize)> = Vec::with_capacity(n_insns);
        let mut vals: Vec<u64> = Vec::with_capacity(n_insns * n_events);
        let mut t = summary::Totals::default();
        for rec in self.blocks.values() {
            // SAFETY: the cost array has `n_costs` entries (allocated so in `instrument`) and
            // lives for the whole process; no guest code runs now.
            let arr = unsafe { std::slice::from_raw_parts(rec.costs, rec.n_costs) };
            for (i, s) in rec.insns.iter().enumerate() {
                let count = rec.runs_of(i, arr[0]);
                let slot = &arr[1 + SLOTS * i..1 + SLOTS * (i + 1)];
                let extra = slot[S_REP_ENTRIES];
                let iters = slot[S_REP_ITERS];
                let ir = count + extra;
                let per = match s.rep {
                    RepKind::None => count,
                    RepKind::Plain => extra,
                    RepKind::Cond => iters,
                };
                let (dr, dw) = match s.enabled {
                    Some(e) => (per * s.dr + arr[e], per * s.dw + arr[e + 1]),
                    None => (per * s.dr, per * s.dw),
                };
                let bc = match (s.branch, s.rep) {
                    (BranchKind::Cond, _) => count,
                    (_, RepKind::Plain) => ir,
                    (_, RepKind::Cond) => ir + iters,
                    _ => 0,
                } + if s.cas_exit { count } else { 0 };
                let bi = if s.branch == BranchKind::Indirect {
                    count
                } else {
                    0
                };
                let mut v = [0u64; 13];
                let mut k = 0;
                let mut push = |vals: &[u64]| {
                    v[k..k + vals.len()].copy_from_slice(vals);
                    k += vals.len();
                };
                push(&[ir]);
                if self.opts.cache_sim {
                    push(&[slot[0], slot[1], dr, slot[2], slot[3], dw, slot[4], slot[5]]);
                    t.i1mr += slot[0];
                    t.ilmr += slot[1];
                    t.dr += dr;
                    t.d1mr += slot[2];
                    t.dlmr += slot[3];
                    t.dw += dw;
                    t.d1mw += slot[4];
                    t.dlmw += slot[5];
                }
                if self.opts.branch_sim {
                    push(&[bc, slot[S_BCM], bi, slot[S_BIM]]);
                    t.bc += bc;
                    t.bcm += slot[S_BCM];
                    t.bi += bi;
                    t.bim += slot[S_BIM];
                }
                t.ir += ir;
                order.push((s.addr, order.len()));
                vals.extend_from_slice(&v[..n_events]);
            }
        }
        order.sort_unstable();
        let mut costs: Vec<(u64, Vec<u64>)> = Vec::with_capacity(order.len());
        for (addr, i) in order {
            let v = &vals[i * n_events..(i + 1) * n_events];
            match costs.last_mut() {
                Some((a, acc)) if *a == addr => {
                    for (x, y) in acc.iter_mut().zip(v) {
                        *x += y;
                    }
                }
                _ => costs.push((addr, v.to_vec())),
            }
        }
        (costs.into_iter().collect(), t)
    }

    fn write_profile(&mut self, costs: &BTreeMap<u64, Vec<u64>>) -> Result<(), String> {
        self.modules.refresh();
        let sym = dumper::Symbolizer::new(self.modules.infos());
        let desc = self
            .caches
            .as_ref()
            .map(|c| c.desc.clone())
            .unwrap_or_default();
        let profile =
            dumper::CgProfile::from_costs(desc, self.cmd.clone(), self.events(), costs, &sym)
                .map_err(|e| e.to_string())?;
        let path = self
            .opts
            .out_file
            .expand_in(&self.cwd, std::process::id(), |v| std::env::var(v).ok())
            .map_err(|e| e.to_string())?;
        profile.write_file(&path).map_err(|e| e.to_string())
    }
}

/// The data references Cachegrind makes for access `k` of `v`: (what to simulate, is a
/// write), plus how many extra reads and writes count without simulation (the second,
/// always-hitting access of a locked read-modify-write).
///
/// Shared with callgrind (`callgrind`: Callgrind's rules, where VEX's "modify" is counted as
/// a write: a read-modify-write is one Dw, `cmpxchg` one Dw, a locked RMW a simulated read
/// plus an always-hitting write, XSAVE's XSTATE_BV update a write).
pub(crate) fn data_refs(
    v: &InsnView,
    k: usize,
    min_line: u64,
    callgrind: bool,
) -> (Vec<(DataRef, bool)>, u64, u64) {
    use iced_x86::Mnemonic as M;
    let a = v.accesses[k];
    let clamp = |s: u64| s.clamp(1, min_line) as u32;
    let one = |offset: i32, size: u64, write: bool| (DataRef::at(k, offset, clamp(size)), write);
    let m = v.insn.mnemonic();
    let state = |write: bool, ymm: bool| {
        // XRSTOR first reads the header's three words (XSTATE_BV, XCOMP_BV and the reserved
        // one VEX checks), then the x87 block (clamped; for XSAVE and XRSTOR only when eax
        // asks for it: element 0 of the access), MXCSR, 16 XMM registers, then for XSAVE the
        // YMM upper halves and the XSTATE_BV read-modify-write.
        let mut r = Vec::new();
        if ymm && !write {
            r.extend((0..3).map(|i| one(512 + 8 * i, 8, false)));
        }
        let x87 = one(0, 160, write);
        r.push(match a.lanes {
            Some(lanes) => (lanes.element(k, 0, x87.0.size, std::ptr::null_mut()), write),
            None => x87,
        });
        r.push(one(24, 4, write));
        r.extend((0..16).map(|i| one(160 + 16 * i, 16, write)));
        if ymm {
            if write {
                // XSAVE updates XSTATE_BV (a modify: Callgrind counts it as a write).
                r.push(one(512, 8, callgrind));
            }
            r.extend((0..16).map(|i| one(576 + 16 * i, 16, write)));
        }
        r
    };
    match m {
        M::Fxsave | M::Fxsave64 => return (state(true, false), 0, 0),
        M::Fxrstor | M::Fxrstor64 => return (state(false, false), 0, 0),
        M::Xsave | M::Xsave64 | M::Xsavec | M::Xsavec64 | M::Xsaveopt | M::Xsaveopt64 => {
            return (state(true, true), 0, 0)
        }
        M::Xrstor | M::Xrstor64 => return (state(false, true), 0, 0),
        _ => {}
    }
    if let Some(lanes) = a.lanes {
        // Enabled elements of a masked move count as they run (`cachegrind`'s caller
        // supplies the counter; Callgrind counts every element).
        let write = a.kind != AccessKind::Read;
        let size = clamp(u64::from(lanes.elem));
        let refs =
            (0..lanes.count).map(|i| (lanes.element(k, i, size, std::ptr::null_mut()), write));
        return (refs.collect(), 0, 0);
    }
    if let Some((count, elem, stride)) = vex_split(v) {
        let write = a.kind != AccessKind::Read;
        let refs = (0..count).map(|i| one(i * stride, elem, write));
        return (refs.collect(), 0, 0);
    }
    let kind = if matches!(m, M::Maskmovdqu | M::Vmaskmovdqu) {
        // VEX loads the 16 bytes, merges and stores them back.
        AccessKind::Modify
    } else {
        a.kind
    };
    let size = u64::from(a.size);
    match kind {
        AccessKind::Read => (vec![one(0, size, false)], 0, 0),
        AccessKind::Write => (vec![one(0, size, true)], 0, 0),
        AccessKind::Modify => {
            let cas_only = matches!(m, M::Cmpxchg | M::Cmpxchg8b | M::Cmpxchg16b);
            let extra = u64::from(v.locked && !cas_only);
            let size = if m == M::Cmpxchg16b { 16 } else { size };
            if callgrind {
                // Callgrind: explicit load (a read) then the CAS (a modify = write), or the
                // modify alone.
                (vec![one(0, size, extra == 0)], 0, extra)
            } else {
                (vec![one(0, size, false)], extra, 0)
            }
        }
    }
}

/// The SIMD loads VEX splits into one load per element (measured on Valgrind 3.19): the
/// packed FMA forms, SSE4.1's `roundps`/`roundpd`, `cvtps2pd` and `vcvtps2pd`, and
/// `vmovddup` of a ymm register (two 8-byte loads, 16 bytes apart). (count, bytes, stride).
fn vex_split(v: &InsnView) -> Option<(i32, u64, i32)> {
    use iced_x86::{EncodingKind, Mnemonic as M};
    let insn = v.insn;
    let mem = insn.memory_size();
    let (size, elem) = (mem.size() as i32, mem.element_size() as i32);
    if elem == 0 || size <= elem {
        return None;
    }
    let per_element = Some((size / elem, elem as u64, elem));
    match (insn.mnemonic(), insn.encoding()) {
        (M::Roundps | M::Roundpd | M::Cvtps2pd, EncodingKind::Legacy) => per_element,
        (M::Vcvtps2pd, EncodingKind::VEX) => per_element,
        (M::Vmovddup, EncodingKind::VEX) if size == 32 => Some((2, 8, 16)),
        (_, EncodingKind::VEX) if insn.cpuid_features().contains(&iced_x86::CpuidFeature::FMA) => {
            per_element
        }
        _ => None,
    }
}

impl Tool for Cachegrind {
    fn name(&self) -> &'static str {
        "cachegrind"
    }

    /// Not while instrumentation is off (`--instr-at-start=no` until the client request
    /// starts it, which retranslates everything): no block view is built then.
    fn instruments(&self) -> bool {
        self.instrumenting
    }

    fn instrument(&mut self, b: &BlockView, ins: &mut Instrumenter) {
        if !self.instrumenting || b.insns.is_empty() {
            return;
        }
        if !self.modules.covers(b.start) {
            self.modules.refresh();
        }
        let with_skippable = if self.caches.is_some() {
            b.insns.iter().filter(|v| has_skippable_elements(v)).count()
        } else {
            0
        };
        let n_costs = 1 + SLOTS * b.insns.len() + 2 * with_skippable;
        let costs = ins.cost_array(n_costs);
        let mut next_enabled = 1 + SLOTS * b.insns.len();
        ins.count_block(costs);
        let mut statics = Vec::with_capacity(b.insns.len());
        let mut last_line = None;
        for (i, v) in b.insns.iter().enumerate() {
            // SAFETY: the array has 1 + SLOTS * n entries; this is instruction i's first slot.
            let slot = unsafe { costs.add(1 + SLOTS * i) };
            let at = |s: usize| slot.wrapping_add(s);
            if v.rep != RepKind::None {
                ins.count_rep(i, at(S_REP_ENTRIES), at(S_REP_ITERS));
                if self.opts.branch_sim {
                    // VEX's `rep` exits: `rcx == 0` to the next instruction (inverted, as
                    // Cachegrind sees an exit to the fall-through address) at every entry, and
                    // for repe/repne the repeat test after every iteration.
                    let h = Helper {
                        func: cg_cond,
                        arg0: at(S_BCM) as u64,
                        integer_only: true,
                    };
                    ins.rep_branch(i, h, true);
                }
            }
            let cas_exit = vex_cas_exit(v);
            if cas_exit && self.opts.branch_sim {
                let h = Helper {
                    func: cg_cond,
                    arg0: at(S_BCM) as u64,
                    integer_only: true,
                };
                ins.call(i, h, CallArg::Imm(0), v.addr);
            }
            let (mut dr, mut dw) = (0, 0);
            let mut enabled = None;
            if let Some(c) = &self.caches {
                let first = v.addr >> c.i1.line_bits;
                let last = (v.addr + u64::from(v.len.max(1)) - 1) >> c.i1.line_bits;
                if last_line != Some(first) || first != last {
                    ins.fetch_check_l1(i, c.i1, c.after_miss(at(S_I1MR) as u64));
                }
                last_line = Some(last);
                if has_skippable_elements(v) {
                    enabled = Some(next_enabled);
                    next_enabled += 2;
                }
                for k in 0..v.accesses.len() {
                    let (refs, extra_reads, _) = data_refs(v, k, c.min_line, false);
                    dr += extra_reads;
                    let skippable = skippable(&v.accesses[k]);
                    for (mut dref, write) in refs {
                        let slot = if write { at(S_D1MW) } else { at(S_D1MR) };
                        match (dref.lane.as_mut(), enabled) {
                            (Some(lane), Some(e)) if skippable => {
                                // SAFETY: entries e and e + 1 lie in the block's array.
                                lane.enabled_count = unsafe { costs.add(e + usize::from(write)) };
                            }
                            _ if write => dw += 1,
                            _ => dr += 1,
                        }
                        let h = Helper {
                            func: cg_data,
                            arg0: slot as u64,
                            integer_only: true,
                        };
                        ins.data_check_l1(i, dref, c.d1, h, c.after_miss(h.arg0));
                    }
                }
            }
            let branch = match v.flow {
                FlowKind::CondBranch => BranchKind::Cond,
                FlowKind::IndirectJump | FlowKind::IndirectCall => BranchKind::Indirect,
                _ => BranchKind::None,
            };
            if self.opts.branch_sim {
                match branch {
                    BranchKind::Cond => ins.call(
                        i,
                        Helper {
                            func: cg_cond,
                            arg0: at(S_BCM) as u64,
                            integer_only: true,
                        },
                        CallArg::Taken,
                        v.addr,
                    ),
                    BranchKind::Indirect => ins.call(
                        i,
                        Helper {
                            func: cg_ind,
                            arg0: at(S_BIM) as u64,
                            integer_only: true,
                        },
                        CallArg::Target,
                        v.addr,
                    ),
                    BranchKind::None => {}
                }
            }
            statics.push(InsnStatic {
                addr: v.addr,
                dr,
                dw,
                rep: v.rep,
                branch,
                cas_exit,
                enabled,
            });
        }
        // A translation again of the same block: its cost array and the runs cut short stand.
        let cut_short = self
            .blocks
            .remove(&(b.start, b.end))
            .map(|r| r.cut_short)
            .unwrap_or_default();
        self.blocks.insert(
            (b.start, b.end),
            BlockRec {
                costs,
                n_costs,
                insns: statics,
                cut_short,
            },
        );
    }

    fn client_request(&mut self, args: &[u64; 6]) -> ClientReply {
        let enable = match args[0] {
            START_INSTRUMENTATION => true,
            STOP_INSTRUMENTATION => false,
            _ => return ClientReply::default(),
        };
        if enable == self.instrumenting {
            let (name, state) = if enable {
                ("START", "enabled")
            } else {
                ("STOP", "disabled")
            };
            crate::log::line(&format!(
                "warning: CACHEGRIND_{name}_INSTRUMENTATION called, but instrumentation is already {state}"
            ));
            return ClientReply {
                value: Some(0),
                discard_translations: false,
            };
        }
        self.instrumenting = enable;
        ClientReply {
            value: Some(0),
            discard_translations: true,
        }
    }

    fn block_cut_short(&mut self, block: (u64, u64), faulting: usize, counted: bool) {
        if let Some(rec) = self.blocks.get_mut(&block) {
            rec.cut_short.push((faulting, counted));
        }
    }

    fn pre_syscall(&mut self, nr: u64) {
        // A child gets a copy of the LL and the counts: none of them half done.
        if matches!(
            nr as i64,
            libc::SYS_clone | libc::SYS_fork | libc::SYS_vfork
        ) {
            ll_queue::drain();
        }
    }

    fn post_syscall(&mut self, nr: u64, result: i64) {
        if result >= 0 && modules::maps_memory(nr) {
            self.modules.mappings_changed();
        }
    }

    fn fini(&mut self, _reason: FiniReason) {
        ll_queue::drain();
        dumper::symbols::map_cache_entries();
        let (costs, totals) = self.collect();
        let named = self
            .opts
            .out_file
            .expand_in(&self.cwd, std::process::id(), |v| std::env::var(v).ok());
        if let Err(e) = named {
            // As Cachegrind, which expands the name only now: a bad option, exit status 1.
            let value = self.opts.out_file.as_str();
            for l in e.valgrind_lines("--cachegrind-out-file", value) {
                crate::log::line(&l);
            }
            std::process::exit(1);
        }
        if let Err(e) = self.write_profile(&costs) {
            crate::log::line(&format!(
                "error: cannot write the Cachegrind output file: {e}"
            ));
        }
        if self.quiet {
            return;
        }
        crate::log::line("");
        for l in summary::lines(&totals, self.opts.cache_sim, self.opts.branch_sim) {
            crate::log::line(&l);
        }
    }
}
