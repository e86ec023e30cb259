//! `--tool=callgrind`: call-graph profiling. Every executed block first calls
//! `clg_setup_fast` (integer-only, lean trampoline: the common jump, call and return cases, see
//! [`runtime::Runtime::setup_fast`]) and, only when that declines, `clg_setup`
//! (Callgrind's `setup_bbcc`, see [`runtime`]) with the guest stack pointer; the routine
//! charges the previous block, maintains the thread's shadow call stack and picks the cost
//! centre of the new block. In Ir-only mode a block that is no function entry first tries the
//! plain-jump case inline, with no call at all (see `runtime::jump()` and `docs/callgrind.md`).
//! At the end (and on `CALLGRIND_DUMP_STATS`) the cost centres and
//! arcs are written as `callgrind.out.<pid>` through the dumper.
//!
//! `--collect-jumps=yes` adds `jump=`/`jcnd=` arcs (recorded by both routines, see
//! [`runtime::JumpExit`]); `--separate-threads=yes` gives each of Valgrind's thread slots
//! its own cost centres and file (`<base>[.part]-NN`; the core's `thread_start`/`thread_exit`
//! hooks keep the slots); `--dump-every-bb=N` makes `clg_setup` write a dump of every thread
//! before the block that takes the executed-block count more than N past the last one.
//!
//! # Invariants
//! * `instrument` is deterministic: a block's `BlockInfo` is created once per (start, end)
//!   and reused by every retranslation.
//! * `clg_setup` runs on the helper stack; it switches to rgrind's FS (`with_host_fs`) before
//!   touching Rust state, and guest threads run one at a time, so the runtime is never used
//!   from two threads at once.
//!
//! * `runtime::jump()` belongs to `LAST_THREAD`: `sync_in` folds its deltas back before any
//!   Rust code reads thread state (and disarms it); `clg_setup`/`clg_setup_fast` re-arm it.
//!
//! * The periodic dump runs inside `clg_setup` (on the helper stack, with rgrind's FS), reaching
//!   the tool through `TOOL`, which `instrument` points at the tool's place in the core's box.
//!
//! With `--cache-sim=yes` / `--branch-sim=yes` the block also gets the inline cache checks
//! (I1 per line, D1 per access) and branch-predictor calls cachegrind uses; their
//! out-of-line helpers (`clg_ll`, `clg_data`, `clg_cond`, `clg_ind`, integer-only) add
//! misses and mispredicts to the current cost centre through [`runtime::add_miss`]. Ir, Dr,
//! Dw, Bc and Bi are derived from execution counts. All options combine: cost centres are
//! partitioned by thread slot and carry every event.
//!
//! `--collect-systime` times each system call between the core's `pre_syscall` and
//! `post_syscall` hooks and charges it with [`Runtime::charge_syscall`].
//!
//! Signal handlers run on a logical stack of their own between the core's
//! `signal_delivered` and `signal_returned` hooks ([`Runtime::pre_signal`],
//! [`Runtime::post_signal`]), as Callgrind's `pre_signal`/`post_signal`.
//!
//! Not done yet: `--collect-bus`, `--simulate-wb`, `--simulate-hwpref`, `--cacheuse`. See
//! `docs/callgrind.md`.
pub mod options;
pub mod runtime;

use super::cachegrind::modules::{maps_memory, Modules};
use super::cachegrind::StartupLine;
use cachesim::{BranchPredictor, CacheGeometry, Hierarchy};
use dbt_core::fast_hash::{FastMap, FastSet};
use dbt_core::tool::{
    AfterMiss, BlockView, CallArg, ClientReply, FiniReason, FlowKind, Helper, InlineJump,
    Instrumenter, LlRows, MruCache, RepKind, SlotI1, Tool,
};
use dumper::callgrind::{CallArc, CallgrindData, CallgrindOptions, FnContext, JumpArc};
use options::SysTime;
use runtime::{BlockInfo, Exit, FnFlags, InsnStat, JumpExit, Runtime, ThreadState, Trigger};
use runtime::{CASE_CALL, CASE_RET};
use runtime::{N_STATIC, N_SYS, RUN, R_BC, R_BI, R_DR, R_DW, R_IR, R_MISS, R_SYS};
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

pub use options::accepts;

/// Callgrind's client requests (tool base 'C','T').
pub const DUMP_STATS: u64 = 0x4354_0000;
pub const ZERO_STATS: u64 = 0x4354_0001;
pub const TOGGLE_COLLECT: u64 = 0x4354_0002;
pub const DUMP_STATS_AT: u64 = 0x4354_0003;
pub const START_INSTRUMENTATION: u64 = 0x4354_0004;
pub const STOP_INSTRUMENTATION: u64 = 0x4354_0005;

static RT: AtomicPtr<Runtime> = AtomicPtr::new(core::ptr::null_mut());
static HIER: AtomicPtr<Hierarchy> = AtomicPtr::new(core::ptr::null_mut());
static BP: AtomicPtr<BranchPredictor> = AtomicPtr::new(core::ptr::null_mut());

/// Miss slots (see [`runtime::cur_stride`]); an LL miss slot is its L1 slot + 3.
const SLOT_I1MR: u64 = 0;
const SLOT_D1MR: u64 = 1;
const SLOT_D1MW: u64 = 2;

/// Helper argument 0: instruction `i`, miss slot `slot`.
fn slot_arg(i: usize, slot: u64) -> u64 {
    ((i as u64) << 8) | slot
}

/// Counts an outcome of the cache simulator (1: L1 miss, 2: LL miss too).
fn count_outcome(arg: u64, outcome: u32) {
    if outcome >= 1 {
        runtime::add_miss(arg, outcome >= 2);
    }
}

/// D1 slow path (read or write: the slot in `arg` says which). Integer-only.
extern "C" fn clg_data(arg: u64, addr: u64, size: u64) -> u64 {
    let h = HIER.load(Ordering::Relaxed);
    if !h.is_null() {
        // SAFETY: HIER is set once, before guest code runs, to a leaked Hierarchy used only by
        // translated code (guest threads run one at a time).
        count_outcome(arg, unsafe { cachesim::raw::cachesim_data(h, addr, size) });
    }
    0
}

/// The LL part of an access whose L1 miss the inline lookup already recorded in the L1 tags
/// (`Instrumenter::{fetch,data}_check_l1`). Integer-only.
extern "C" fn clg_ll(arg: u64, addr: u64, size: u64) -> u64 {
    let h = HIER.load(Ordering::Relaxed);
    if !h.is_null() {
        // SAFETY: as in `clg_data`.
        count_outcome(arg, unsafe {
            cachesim::raw::cachesim_ll_after_l1_miss(h, addr, size)
        });
    }
    0
}

/// Conditional branch at `addr`, `taken` 0/1. Integer-only.
extern "C" fn clg_cond(arg: u64, taken: u64, addr: u64) -> u64 {
    let p = BP.load(Ordering::Relaxed);
    if !p.is_null() {
        // SAFETY: BP is set once before guest code runs to a leaked predictor used only from
        // translated code.
        if unsafe { cachesim::raw::cachesim_cond_branch(p, addr, taken) } != 0 {
            runtime::add_miss(arg, false);
        }
    }
    0
}

/// Indirect jump or call at `addr` to `target`. Integer-only.
extern "C" fn clg_ind(arg: u64, target: u64, addr: u64) -> u64 {
    let p = BP.load(Ordering::Relaxed);
    if !p.is_null() {
        // SAFETY: as in `clg_cond`.
        if unsafe { cachesim::raw::cachesim_ind_branch(p, addr, target) } != 0 {
            runtime::add_miss(arg, false);
        }
    }
    0
}
static LAST_KEY: AtomicU64 = AtomicU64::new(0);
static LAST_THREAD: AtomicPtr<ThreadState> = AtomicPtr::new(core::ptr::null_mut());
/// The tool itself (inside the core's `Box<dyn Tool>`, which never moves), for the periodic
/// dump `clg_setup` writes; set by `instrument`.
static TOOL: AtomicPtr<Callgrind> = AtomicPtr::new(core::ptr::null_mut());

/// `--collect-systime`'s clock readings, as Callgrind takes them: elapsed time in the
/// option's unit (milliseconds and nanoseconds of the monotonic clock, microseconds of the
/// time of day) and, with `nsec`, the thread's CPU time in nanoseconds. A system call costs
/// the difference of the readings around it.
fn sys_clock(unit: SysTime) -> [u64; 2] {
    let read = |clock: libc::clockid_t| {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a plain system call (vDSO) writing the local `ts`.
        unsafe { libc::clock_gettime(clock, &mut ts) };
        (ts.tv_sec as u64)
            .wrapping_mul(1_000_000_000)
            .wrapping_add(ts.tv_nsec as u64)
    };
    match unit {
        SysTime::No => [0, 0],
        SysTime::Msec => [read(libc::CLOCK_MONOTONIC) / 1_000_000, 0],
        SysTime::Usec => [read(libc::CLOCK_REALTIME) / 1_000, 0],
        SysTime::Nsec => [
            read(libc::CLOCK_MONOTONIC),
            read(libc::CLOCK_THREAD_CPUTIME_ID),
        ],
    }
}

/// The runtime and the running thread's state.
///
/// # Safety
/// Only one guest thread runs at a time and the tool's hooks run with the guest stopped, so
/// no two `&mut` to the runtime are live at once.
unsafe fn runtime_and_thread(key: u64) -> Option<(&'static mut Runtime, &'static mut ThreadState)> {
    let rt = RT.load(Ordering::Relaxed);
    if rt.is_null() {
        return None;
    }
    // SAFETY: as this function's.
    unsafe { sync_in() };
    // SAFETY: RT is a leaked Box set once at startup; see the function's contract.
    let rt = unsafe { &mut *rt };
    let mut t = LAST_THREAD.load(Ordering::Relaxed);
    if t.is_null() || LAST_KEY.load(Ordering::Relaxed) != key {
        t = rt.thread(key);
        LAST_KEY.store(key, Ordering::Relaxed);
        LAST_THREAD.store(t, Ordering::Relaxed);
    }
    // SAFETY: thread states are boxed and never freed.
    Some((rt, unsafe { &mut *t }))
}

/// Folds what the inline jump path did into the thread it belongs to (the last thread that
/// ran a block-start routine) and disarms it (`runtime::jump()`), before Rust code reads or
/// changes thread state; the next block-start routine arms it again.
///
/// # Safety
/// As [`runtime_and_thread`]: the guest is stopped or this is its block-start routine.
unsafe fn sync_in() {
    let rt = RT.load(Ordering::Relaxed);
    let t = LAST_THREAD.load(Ordering::Relaxed);
    if !rt.is_null() && !t.is_null() {
        // SAFETY: the leaked runtime and a boxed thread state; see the contract.
        unsafe { (*rt).inline_pull(&mut *t) };
    }
    Runtime::inline_disarm();
}

/// The run lock's switch hook: what the inline paths did belongs to the thread that ran
/// last, which may have been stopped by a time slice (no tool hook folded it first).
fn switch_threads() {
    // SAFETY: the hook runs holding the run lock, so the thread that ran last is stopped.
    unsafe { sync_in() };
}

/// Block-start routine: `info` is the block's leaked `BlockInfo`, `sp` the guest rsp.
extern "C" fn clg_setup(info: u64, sp: u64, _: u64) -> u64 {
    let key = dbt_core::tool::thread_key();
    let pending = dbt_core::tool::with_host_fs(|| {
        dump_if_due();
        // SAFETY: see `runtime_and_thread`; `info` was leaked by `instrument`.
        if let Some((rt, t)) = unsafe { runtime_and_thread(key) } {
            // SAFETY: `info` is a BlockInfo leaked by `instrument`, never freed.
            let bb = unsafe { &*(info as *const BlockInfo) };
            rt.setup(t, bb, sp);
            rt.inline_push(t);
            !rt.triggers.is_empty()
        } else {
            false
        }
    });
    if pending {
        dbt_core::tool::with_host_fs(triggers_now);
    }
    0
}

/// `--dump-before/--dump-after/--zero-before`: acted on when the function is entered or left,
/// as Callgrind does (before the entered block runs).
fn triggers_now() {
    let tool = TOOL.load(Ordering::Relaxed);
    if tool.is_null() {
        return;
    }
    // SAFETY: as in `dump_if_due`; the caller holds no reference to the runtime any more.
    unsafe { (*tool).handle_triggers() };
}

/// `--dump-every-bb`: writes the periodic dump before the block that makes it due (Callgrind
/// checks between blocks, when its scheduler runs a thread; see `docs/callgrind.md`).
fn dump_if_due() {
    let rt = RT.load(Ordering::Relaxed);
    let tool = TOOL.load(Ordering::Relaxed);
    if rt.is_null() || tool.is_null() {
        return;
    }
    // SAFETY: as in `runtime_and_thread`: the runtime and the tool (set by `instrument` to its
    // place in the core's box) are only used by the one running guest thread, and no other
    // reference to them is live while a block-start routine runs.
    unsafe {
        if (*rt).dump_due() {
            (*tool).dump_every();
        }
    }
}

/// The fast path of `clg_setup` (integer-only, no TLS, no allocation): returns 0 when it
/// handled the block, 1 when `clg_setup` must run. `jumps` is 1 with `--collect-jumps=yes`.
extern "C" fn clg_setup_fast(info: u64, sp: u64, jumps: u64) -> u64 {
    let key = dbt_core::tool::thread_key();
    let rt = RT.load(Ordering::Relaxed);
    let t = LAST_THREAD.load(Ordering::Relaxed);
    if rt.is_null() || t.is_null() || LAST_KEY.load(Ordering::Relaxed) != key {
        return 1;
    }
    // SAFETY: as in `runtime_and_thread` (leaked runtime, boxed thread states, one guest
    // thread at a time); `info` is a BlockInfo leaked by `instrument`, never freed.
    let done = unsafe {
        let (rt, t, bb) = (&mut *rt, &mut *t, &*(info as *const BlockInfo));
        rt.inline_pull(t);
        let done = if jumps != 0 {
            rt.setup_fast::<true>(t, bb, sp)
        } else {
            rt.setup_fast::<false>(t, bb, sp)
        };
        if done {
            rt.inline_push(t);
        }
        done
    };
    u64::from(!done)
}

/// Per-function data the tool keeps for naming and flags.
struct FnNode {
    first_bb: u64,
    /// Its name (for `--dump-before=NAME` triggers).
    name: String,
}

/// The simulated caches' inline-check constants and `desc:` values.
struct Caches {
    i1: &'static SlotI1,
    d1: MruCache,
    /// `AfterMiss::whole_lines`.
    whole_lines: bool,
    /// `AfterMiss::ll_mru`.
    ll_mru: Option<MruCache>,
    /// `AfterMiss::ll_rows`.
    ll_rows: Option<LlRows>,
    min_line: u64,
    geometry: [CacheGeometry; 3],
}

pub struct Callgrind {
    opts: options::ClOptions,
    quiet: bool,
    instrumenting: bool,
    blocks: FastMap<(u64, u64), *const BlockInfo>,
    /// Targets of the direct calls and return addresses of the calls translated so far:
    /// the blocks that get the out-of-line call and return cases (see `instrument`).
    call_sites: FastSet<u64>,
    ret_sites: FastSet<u64>,
    fns: Vec<FnNode>,
    fn_map: FastMap<(u32, String, String), u32>,
    /// `fn_node`'s results by (symbol start, file name's address, section kind), for named
    /// functions; emptied whenever the symboliser is rebuilt.
    fn_by_symbol: FastMap<(u64, *const u8, u8), (u32, u32, FnFlags)>,
    /// `fn_node`'s functions named by their address (no symbol, no file), by object and
    /// offset, with their flags.
    fn_by_offset: FastMap<(u32, u64), (u32, FnFlags)>,
    objs: FastMap<String, u32>,
    /// `objs` by the address of the symboliser's object name (0: none); emptied with
    /// `fn_by_symbol`.
    obj_by_name_ptr: FastMap<usize, u32>,
    modules: Modules,
    sym: Option<dumper::Symbolizer>,
    exe: String,
    args: Vec<String>,
    cwd: std::path::PathBuf,
    /// Dumps written so far (the next intermediate dump is `.N+1`).
    dumps: u32,
    bbs_done: u64,
    /// The output file's name and the process it was made for: a fork child makes its own
    /// (`%p` is its pid), as Callgrind's `init_dumps` after a fork.
    base: Option<(u32, String)>,
    caches: Option<Caches>,
    /// Slots of the branch mispredicts (`Bcm`; `Bim` is the next) when simulating branches.
    branch_slot: Option<u64>,
    /// Sum of everything dumped (`Collected :`), output event order.
    collected: Vec<u64>,
}

// SAFETY: the raw pointers are leaked BlockInfo values, only read; the tool is used under the
// core lock.
unsafe impl Send for Callgrind {}

impl Callgrind {
    pub const BANNER: [&'static str; 2] = [
        "Callgrind, a call-graph generating cache profiler",
        "Copyright (C) 2002-2017, and GNU GPL'd, by Josef Weidendorfer et al.",
    ];

    /// Builds the tool; returns it and the lines to print after the banner, or Valgrind's
    /// error lines for a bad option or an unsupported cache.
    pub fn new(
        tool_options: &[(String, String)],
        quiet: bool,
        exe: String,
        args: Vec<String>,
    ) -> Result<(Callgrind, Vec<StartupLine>), Vec<String>> {
        let opts = options::parse(tool_options).map_err(|e| e.0)?;
        runtime::init_jump();
        let mut lines = Vec::new();
        if !opts.dump_line && !opts.dump_instr {
            // Callgrind falls back to line positions, and says so even with -q.
            lines.push(StartupLine::Notice(
                "Using source line as position.".to_string(),
            ));
        }
        let caches = if opts.cache_sim {
            // Same geometry rules, warnings and simulator as cachegrind.
            let sim = super::cachegrind::build_caches("Callgrind", &opts.caches, &mut lines)?;
            HIER.store(sim.hier, Ordering::Relaxed);
            Some(Caches {
                i1: sim.i1,
                d1: sim.d1,
                whole_lines: sim.whole_lines,
                ll_mru: sim.ll_mru,
                ll_rows: sim.ll_rows,
                min_line: sim.min_line,
                geometry: sim.geometry,
            })
        } else {
            None
        };
        if opts.branch_sim {
            BP.store(Box::into_raw(BranchPredictor::new()), Ordering::Relaxed);
        }
        let mut rt = Runtime::new(opts.skip_direct_rec, opts.collect_atstart);
        rt.set_simulation(opts.cache_sim, opts.branch_sim);
        rt.collect_jumps = opts.collect_jumps;
        rt.separate_threads = opts.separate_threads;
        rt.set_dump_every(opts.dump_every_bb);
        // Branch simulation alone charges lazily with more than Ir, which the inline path
        // does not carry; with cache simulation it charges the entered block (eagerly) and
        // points the miss helpers at it. So the path only runs where misses are counted
        // exactly when charging is eager.
        rt.inline_jumps =
            (opts.cache_sim || !opts.branch_sim) && !opts.collect_jumps && opts.dump_every_bb == 0;
        let branch_slot = opts
            .branch_sim
            .then(|| rt.miss_events.iter().position(|&e| e == "Bcm"))
            .flatten()
            .map(|p| p as u64);
        RT.store(Box::into_raw(Box::new(rt)), Ordering::Relaxed);
        // The inline paths' state belongs to the thread that ran last; another thread's
        // blocks must not take them before Rust has switched to it (`runtime_and_thread`).
        dbt_core::tool::set_thread_switch_hook(switch_threads);
        let instrumenting = opts.instr_atstart;
        let cwd = std::env::current_dir().unwrap_or_default();
        let mut t = Callgrind {
            opts,
            quiet,
            instrumenting,
            blocks: FastMap::default(),
            call_sites: FastSet::default(),
            ret_sites: FastSet::default(),
            fns: Vec::new(),
            fn_map: FastMap::default(),
            fn_by_symbol: FastMap::default(),
            obj_by_name_ptr: FastMap::default(),
            fn_by_offset: FastMap::default(),
            objs: FastMap::default(),
            modules: Modules::default(),
            sym: None,
            exe,
            args,
            cwd,
            dumps: 0,
            bbs_done: 0,
            base: None,
            caches,
            branch_slot,
            collected: Vec::new(),
        };
        t.collected = vec![0; t.events().len()];
        // Callgrind creates the output file at startup (checks it is writable).
        let base = t
            .base_name()
            .map_err(|e| e.valgrind_lines("--callgrind-out-file", t.opts.out_file.as_str()))?;
        let _ = dumper::create_output(std::path::Path::new(&base), false);
        t.base = Some((std::process::id(), base));
        lines.push(StartupLine::User(
            "For interactive control, run 'callgrind_control -h'.".to_string(),
        ));
        Ok((t, lines))
    }

    fn base_name(&self) -> Result<String, dumper::outfile::TemplateError> {
        self.opts
            .out_file
            .expand_in(&self.cwd, std::process::id(), |v| std::env::var(v).ok())
            .map(|p| p.to_string_lossy().into_owned())
    }

    fn runtime(&self) -> Option<&'static mut Runtime> {
        // SAFETY: tool hooks run with the guest stopped.
        unsafe { sync_in() };
        let rt = RT.load(Ordering::Relaxed);
        // SAFETY: see `runtime_and_thread`: tool hooks run with the guest stopped.
        (!rt.is_null()).then(|| unsafe { &mut *rt })
    }

    fn flags_for(&self, name: &str, plt: bool) -> FnFlags {
        let m = |list: &[String]| list.iter().any(|p| options::pattern_matches(p, name));
        let find = |list: &[(String, u32)]| {
            list.iter()
                .rev()
                .find(|(p, _)| options::pattern_matches(p, name))
                .map(|x| x.1)
        };
        let o = &self.opts;
        FnFlags {
            skip: (o.skip_plt && plt) || m(&o.fn_skip),
            pop_on_jump: name.starts_with("_dl_runtime_resolve") || m(&o.pop_on_jump),
            toggle_collect: m(&o.toggle_collect),
            dump_before: m(&o.dump_before),
            dump_after: m(&o.dump_after),
            zero_before: m(&o.zero_before),
            separate_recs: find(&o.recs_for).unwrap_or(o.separate_recs),
            separate_callers: find(&o.callers_for).unwrap_or(o.separate_callers),
        }
    }

    /// The id of the object named `name` (`???` for none), found by the name's address
    /// after its first time.
    fn obj_id(&mut self, name: Option<&std::sync::Arc<str>>) -> u32 {
        let key = name.map_or(0, |n| n.as_ptr() as usize);
        if let Some(&o) = self.obj_by_name_ptr.get(&key) {
            return o;
        }
        let name = name.map_or("???", |n| n);
        let o = match self.objs.get(name) {
            Some(&o) => o,
            None => {
                let n = self.objs.len() as u32;
                self.objs.insert(name.to_string(), n);
                n
            }
        };
        self.obj_by_name_ptr.insert(key, o);
        o
    }

    /// The object id, function id (a new node for a new function) and flags of the block at
    /// `start`, whose location `loc` has a symbol or a file (`fn_by_address` for the rest).
    fn fn_node(&mut self, loc: &dumper::Location, start: u64) -> (u32, u32, FnFlags) {
        let obj = self.obj_id(loc.object.as_ref());
        let nf = self.fns.len() as u32;
        let file = loc.file_name().to_string();
        let name = dumper::callgrind::callgrind_fn_name(loc);
        let fn_id = *self.fn_map.entry((obj, file, name.clone())).or_insert(nf);
        if fn_id == nf {
            self.fns.push(FnNode {
                first_bb: start,
                name: name.clone(),
            });
        }
        let plt = loc.section == dumper::symbols::SectionKind::Plt;
        (obj, fn_id, self.flags_for(&name, plt))
    }

    /// `fn_node` of code without symbol and file, named by its address as Callgrind names
    /// it: in a stripped program (python3) most blocks are such functions of their own, so
    /// they are keyed by object and offset, without names to hash.
    fn fn_by_address(
        &mut self,
        obj: u32,
        offset: u64,
        section: dumper::symbols::SectionKind,
        start: u64,
    ) -> (u32, u32, FnFlags) {
        if let Some(&(fn_id, flags)) = self.fn_by_offset.get(&(obj, offset)) {
            return (obj, fn_id, flags);
        }
        let nf = self.fns.len() as u32;
        let name = dumper::callgrind::unnamed_fn_name(offset, section);
        let flags = self.flags_for(&name, section == dumper::symbols::SectionKind::Plt);
        self.fn_by_offset.insert((obj, offset), (nf, flags));
        self.fns.push(FnNode {
            first_bb: start,
            name,
        });
        (obj, nf, flags)
    }

    fn block_info(&mut self, b: &BlockView, ins: &mut Instrumenter) -> *const BlockInfo {
        if let Some(&p) = self.blocks.get(&(b.start, b.end)) {
            // The rep counters were allocated with the block; request them again.
            // SAFETY: leaked BlockInfo.
            let info = unsafe { &*p };
            for &(i, ctr) in &info.rep {
                ins.count_rep(i, ctr, ctr.wrapping_add(1));
            }
            return p;
        }
        if !self.modules.covers(b.start) && self.modules.refresh() {
            // Keys hold name pointers of the symboliser being replaced.
            self.fn_by_symbol.clear();
            self.obj_by_name_ptr.clear();
            let old = self.sym.take();
            self.sym = Some(dumper::Symbolizer::new_reusing(self.modules.infos(), old));
        }
        // Out of `self` while its lookups are borrowed.
        let sym = self
            .sym
            .take()
            .unwrap_or_else(|| dumper::Symbolizer::new(self.modules.infos()));
        let loc = sym.lookup_brief(b.start);
        let sect = loc.section as u8;
        let is_entry = loc.function_start == Some(b.start);
        // A direct `jmp` to a function's first byte, into a PLT stub or from `.text` into
        // other code (a tail call); or a stub outside `.text` (`.plt.got`, `.plt.sec`: a
        // function of its own for Callgrind) jumping through its GOT slot into the function
        // it stands for.
        let tail_jump = b.insns.last().is_some_and(|v| {
            if v.rep != RepKind::None {
                return false;
            }
            match v.flow {
                FlowKind::Jump => {
                    let t = v.insn.near_branch_target();
                    let at = sym.lookup_brief(t);
                    let outside = at.section == dumper::symbols::SectionKind::Other
                        && loc.section != at.section;
                    t != b.end
                        && (at.function_start == Some(t)
                            || at.section == dumper::symbols::SectionKind::Plt
                            || outside)
                }
                FlowKind::IndirectJump => loc.section == dumper::symbols::SectionKind::Other,
                _ => false,
            }
        });
        // The function node of a symbol's blocks with one source file is found again by the
        // symbol's start and the file's shared name, without the names' copies and hashes.
        let file_ptr = loc.file.as_ref().map_or(core::ptr::null(), |f| f.as_ptr());
        let by_symbol = loc.function_start.map(|start| (start, file_ptr, sect));
        let cached = by_symbol.and_then(|k| self.fn_by_symbol.get(&k).copied());
        let (obj, fn_id, flags, named) = match cached {
            Some((obj, fn_id, flags)) => (obj, fn_id, flags, true),
            // No symbol: the full lookup would find no name either.
            None if by_symbol.is_none() && loc.file.is_none() => {
                let obj = self.obj_id(loc.object);
                let (obj, fn_id, flags) = self.fn_by_address(obj, loc.offset, loc.section, b.start);
                (obj, fn_id, flags, false)
            }
            None if by_symbol.is_none() => {
                let (obj, fn_id, flags) = self.fn_node(&loc.to_location(), b.start);
                (obj, fn_id, flags, false)
            }
            None => {
                let full = sym.lookup_fast(b.start);
                let named = full.function.is_some();
                let (obj, fn_id, flags) = self.fn_node(&full, b.start);
                if let Some(k) = by_symbol.filter(|_| named) {
                    self.fn_by_symbol.insert(k, (obj, fn_id, flags));
                }
                (obj, fn_id, flags, named)
            }
        };
        self.sym = Some(sym);
        let last = b.insns.last();
        let exit = match last.map(|v| v.flow) {
            Some(FlowKind::Call | FlowKind::IndirectCall) => Exit::Call,
            Some(FlowKind::Return) => Exit::Return,
            _ => Exit::Other,
        };
        let n_rep = b.insns.iter().filter(|v| v.rep != RepKind::None).count();
        let jump = match last {
            Some(v) if v.flow == FlowKind::IndirectJump => JumpExit::Indirect,
            Some(v) if matches!(v.flow, FlowKind::Jump | FlowKind::CondBranch) => {
                let target = v.insn.near_branch_target();
                if target == b.end {
                    JumpExit::None
                } else if v.flow == FlowKind::Jump {
                    JumpExit::Direct
                } else {
                    JumpExit::Cond(target)
                }
            }
            _ => JumpExit::None,
        };
        let mut rep = Vec::new();
        if n_rep > 0 {
            let arr = ins.cost_array(2 * n_rep);
            for (i, v) in b.insns.iter().enumerate() {
                if v.rep != RepKind::None {
                    let ctr = arr.wrapping_add(2 * rep.len());
                    ins.count_rep(i, ctr, ctr.wrapping_add(1));
                    rep.push((i, ctr));
                }
            }
        }
        let insn_stat: Vec<InsnStat> = b.insns.iter().map(|v| self.insn_stat(v)).collect();
        let mut stat = [0u64; N_STATIC];
        stat[R_IR] = b.insns.len() as u64;
        for (v, st) in b.insns.iter().zip(&insn_stat) {
            if v.rep == RepKind::None {
                stat[R_DR] += st.dr;
                stat[R_DW] += st.dw;
            } else {
                // The first entry's `rcx == 0` exit.
                stat[R_BC] += 1;
            }
            stat[R_BC] += u64::from(st.cond) + u64::from(st.cas_exit);
            stat[R_BI] += u64::from(st.ind);
        }
        let info = Box::new(BlockInfo {
            addr: b.start,
            last_insn: last.map_or(b.start, |v| v.addr),
            end: b.end,
            n_insns: b.insns.len() as u64,
            exit,
            is_entry,
            named,
            obj,
            sect,
            fn_id,
            flags,
            insn_addrs: b.insns.iter().map(|v| v.addr).collect(),
            rep,
            last: std::cell::Cell::new((u32::MAX, u32::MAX, u32::MAX)),
            fast_key: std::cell::Cell::new(u64::MAX),
            fast_count: std::cell::Cell::new(core::ptr::null_mut()),
            alt_key: std::cell::Cell::new(u64::MAX),
            alt_bbcc: std::cell::Cell::new(u32::MAX),
            plain_exit: exit == Exit::Other && n_rep == 0,
            tail_jump: tail_jump && exit == Exit::Other && n_rep == 0,
            jump,
            rep_cond: b
                .insns
                .iter()
                .filter(|v| v.rep != RepKind::None)
                .map(|v| v.rep == RepKind::Cond)
                .collect(),
            insn_stat,
            insn_rep: b.insns.iter().map(|v| v.rep).collect(),
            stat,
            jrec: dbt_core::tool::leak_low(dbt_core::tool::InlineRec::new()),
            own_plan: std::cell::OnceCell::new(),
            cases_missing: std::cell::Cell::new(0),
            cases_wanted: std::cell::Cell::new(0),
        });
        let p = Box::into_raw(info) as *const BlockInfo;
        self.blocks.insert((b.start, b.end), p);
        p
    }

    /// What instruction `v` statically does (Callgrind's counting rules).
    fn insn_stat(&self, v: &dbt_core::tool::InsnView) -> InsnStat {
        let mut st = InsnStat {
            cond: v.flow == FlowKind::CondBranch,
            ind: matches!(v.flow, FlowKind::IndirectJump | FlowKind::IndirectCall),
            cas_exit: crate::tools::cachegrind::vex_cas_exit(v),
            ..InsnStat::default()
        };
        let min_line = self.caches.as_ref().map_or(64, |c| c.min_line);
        for k in 0..v.accesses.len() {
            let (refs, extra_r, extra_w) = super::cachegrind::data_refs(v, k, min_line, true);
            for (_, write) in refs {
                if write {
                    st.dw += 1;
                } else {
                    st.dr += 1;
                }
            }
            st.dr += extra_r;
            st.dw += extra_w;
        }
        st
    }

    /// The inline cache checks and branch-predictor calls of one translation.
    fn instrument_sim(&self, b: &BlockView, ins: &mut Instrumenter) {
        let mut last_line = None;
        for (i, v) in b.insns.iter().enumerate() {
            if let Some(c) = &self.caches {
                let first = v.addr >> c.i1.line_bits;
                let last = (v.addr + u64::from(v.len.max(1)) - 1) >> c.i1.line_bits;
                // Later fetches from the line just fetched are MRU hits.
                if last_line != Some(first) || first != last {
                    let after_miss = AfterMiss {
                        helper: Helper {
                            func: clg_ll,
                            arg0: slot_arg(i, SLOT_I1MR),
                            integer_only: true,
                        },
                        ll_mru: c.ll_mru,
                        ll_rows: c.ll_rows,
                        ll_hit: runtime::ll_hit_count(i, SLOT_I1MR),
                        whole_lines: c.whole_lines,
                        queue: None,
                    };
                    ins.fetch_check_l1(i, c.i1, after_miss);
                }
                last_line = Some(last);
                for k in 0..v.accesses.len() {
                    let (refs, _, _) = super::cachegrind::data_refs(v, k, c.min_line, true);
                    for (dref, write) in refs {
                        let slot = if write { SLOT_D1MW } else { SLOT_D1MR };
                        let h = Helper {
                            func: clg_data,
                            arg0: slot_arg(i, slot),
                            integer_only: true,
                        };
                        let after_miss = AfterMiss {
                            helper: Helper { func: clg_ll, ..h },
                            ll_mru: c.ll_mru,
                            ll_rows: c.ll_rows,
                            ll_hit: runtime::ll_hit_count(i, slot),
                            whole_lines: c.whole_lines,
                            queue: None,
                        };
                        ins.data_check_l1(i, dref, c.d1, h, after_miss);
                    }
                }
            }
            if let Some(bs) = self.branch_slot {
                let cond = Helper {
                    func: clg_cond,
                    arg0: slot_arg(i, bs),
                    integer_only: true,
                };
                if v.rep != RepKind::None {
                    // VEX's exits of a `rep` instruction: Callgrind inverts the `rcx == 0`
                    // test when it is the block's last exit (plain `rep`).
                    ins.rep_branch(i, cond, v.rep == RepKind::Plain);
                }
                if self.insn_stat(v).cas_exit {
                    // The CAS retry exit, not taken (no other writer: threads run serially).
                    ins.call(i, cond, CallArg::Imm(0), v.addr);
                }
                match v.flow {
                    FlowKind::CondBranch => ins.call(
                        i,
                        Helper {
                            func: clg_cond,
                            arg0: slot_arg(i, bs),
                            integer_only: true,
                        },
                        CallArg::Taken,
                        v.addr,
                    ),
                    FlowKind::IndirectJump | FlowKind::IndirectCall => ins.call(
                        i,
                        Helper {
                            func: clg_ind,
                            arg0: slot_arg(i, bs + 1),
                            integer_only: true,
                        },
                        CallArg::Target,
                        v.addr,
                    ),
                    _ => {}
                }
            }
        }
    }

    /// The events written, in Callgrind's order, each with its index in the running-cost
    /// layout (`runtime::RUN`).
    fn event_map(&self) -> Vec<(&'static str, usize)> {
        let mut out = vec![("Ir", R_IR)];
        let miss = |name: &str| {
            self.runtime()
                .and_then(|rt| rt.miss_events.iter().position(|&e| e == name))
                .map(|p| R_MISS + p)
        };
        if self.caches.is_some() {
            out.push(("Dr", R_DR));
            out.push(("Dw", R_DW));
            for e in ["I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw"] {
                if let Some(i) = miss(e) {
                    out.push((e, i));
                }
            }
        }
        if self.branch_slot.is_some() {
            for (e, i) in [
                ("Bc", Some(R_BC)),
                ("Bcm", miss("Bcm")),
                ("Bi", Some(R_BI)),
                ("Bim", miss("Bim")),
            ] {
                if let Some(i) = i {
                    out.push((e, i));
                }
            }
        }
        let sys: &[&str] = match self.opts.collect_systime {
            SysTime::No => &[],
            SysTime::Msec | SysTime::Usec => &["sysCount", "sysTime"],
            SysTime::Nsec => &["sysCount", "sysTime", "sysCpuTime"],
        };
        out.extend(sys.iter().zip(R_SYS..).map(|(&e, i)| (e, i)));
        out
    }

    /// The `event:` lines Callgrind writes for its system-call events: (name, description).
    fn event_names(&self) -> Vec<(String, String)> {
        let unit = match self.opts.collect_systime {
            SysTime::No => return Vec::new(),
            SysTime::Msec => "ms",
            SysTime::Usec => "us",
            SysTime::Nsec => "ns",
        };
        let mut out = vec![("sysTime".into(), format!("sysTime (elapsed {unit})"))];
        if self.opts.collect_systime == SysTime::Nsec {
            out.push(("sysCpuTime".into(), "sysCpuTime (system cpu ns)".into()));
        }
        out
    }

    fn events(&self) -> Vec<String> {
        self.event_map().iter().map(|e| e.0.to_string()).collect()
    }

    /// Builds the dump data from the runtime's cost centres and arcs of partition `th`
    /// (`None`: all): self costs of cost centres with a finished execution
    /// ([`Runtime::finished_counts`]) and their skipped costs; takes the jump arcs to
    /// write.
    fn collect(&self, rt: &mut Runtime, th: Option<u32>) -> CallgrindData {
        let done = rt.finished_counts();
        let mut jumps = rt.take_jumps(th, &done);
        // Callgrind writes a function's blocks by start address, each exit's newest arc first.
        jumps.sort_by_key(|j| (j.cxt, j.rec, j.block, std::cmp::Reverse(j.seq)));
        let rt: &Runtime = rt;
        let map = self.event_map();
        let project = |r: &[u64; RUN]| -> Vec<u64> { map.iter().map(|&(_, i)| r[i]).collect() };
        let mut d = CallgrindData::default();
        for c in &rt.cxts {
            d.contexts.push(FnContext {
                entry: c.entry,
                callers: c.fns[1..]
                    .iter()
                    .map(|&f| self.fns.get(f as usize).map_or(0, |n| n.first_bb))
                    .collect(),
                n_ids: c.recs,
            });
        }
        // The cost centres to write, grouped by (context, level); per group their
        // instructions by address, summed per address (blocks overlapping there add up):
        // sorted input for a bulk build of the map, instead of a map lookup per instruction.
        let s = rt.miss_slots;
        let insn_cost = |b: &runtime::Bbcc, info: &BlockInfo, i: usize| -> [u64; RUN] {
            let c = b.count;
            let st = info.insn_stat.get(i).copied().unwrap_or_default();
            let kind = info.insn_rep.get(i).copied().unwrap_or(RepKind::None);
            // The first entry of a `rep` is counted with the block.
            let (extra, iters) = info
                .rep
                .iter()
                .position(|&(ri, _)| ri == i)
                .map_or((0, 0), |k| (b.rep_extra[k], b.rep_iters[k]));
            let per = match kind {
                RepKind::None => c,
                RepKind::Plain => extra,
                RepKind::Cond => iters,
            };
            let mut r = [0u64; RUN];
            r[R_IR] = c + extra;
            r[R_DR] = per * st.dr;
            r[R_DW] = per * st.dw;
            r[R_BC] = match kind {
                RepKind::None => 0,
                RepKind::Plain => c + extra,
                RepKind::Cond => c + extra + iters,
            } + if st.cond { c } else { 0 }
                + if st.cas_exit { c } else { 0 };
            r[R_BI] = if st.ind { c } else { 0 };
            for m in 0..s {
                r[R_MISS + m] = b.miss.get(i * s + m).copied().unwrap_or(0);
            }
            r
        };
        // Per cost centre: (self costs, skipped costs) to write, only with a finished
        // execution (they stay for a later dump otherwise, see `Runtime::finished`): a
        // system call made while not collecting is written once its block has run with
        // collection on, as Callgrind does.
        let parts = |id: usize, b: &runtime::Bbcc| -> (bool, bool) {
            if th.is_some_and(|x| x != b.th) {
                return (false, false);
            }
            let fin = done.get(id).is_some_and(|&n| n > 0);
            (fin, fin && b.skipped.iter().any(|&x| x != 0))
        };
        let mut keyed: Vec<(u32, u32, usize)> = rt
            .bbccs
            .iter()
            .enumerate()
            .filter(|&(id, b)| parts(id, b) != (false, false))
            .map(|(id, b)| (b.cxt, b.rec, id))
            .collect();
        keyed.sort_unstable();
        let ids: Vec<usize> = keyed.into_iter().map(|k| k.2).collect();
        /// The instruction index that stands for a cost centre's skipped-function costs.
        const SKIPPED: usize = usize::MAX;
        let mut group: Vec<(u64, usize, usize)> = Vec::new();
        for same in ids.chunk_by(|&x, &y| {
            let (x, y) = (&rt.bbccs[x], &rt.bbccs[y]);
            (x.cxt, x.rec) == (y.cxt, y.rec)
        }) {
            group.clear();
            for &id in same {
                let b = &rt.bbccs[id];
                // SAFETY: leaked BlockInfo.
                let info = unsafe { &*b.bb };
                let (fin, skipped) = parts(id, b);
                if fin {
                    group.extend(info.insn_addrs.iter().enumerate().map(|(i, &a)| (a, id, i)));
                }
                if skipped {
                    group.push((info.last_insn, id, SKIPPED));
                }
            }
            group.sort_unstable();
            let first = &rt.bbccs[same[0]];
            let (cx, rec) = (first.cxt as usize, first.rec);
            let mut acc = vec![0u64; map.len()];
            for at in group.chunk_by(|x, y| x.0 == y.0) {
                acc.fill(0);
                for &(_, id, i) in at {
                    let b = &rt.bbccs[id];
                    let r = if i == SKIPPED {
                        b.skipped
                    } else {
                        // SAFETY: leaked BlockInfo.
                        let info = unsafe { &*b.bb };
                        insn_cost(b, info, i)
                    };
                    for (x, &(_, k)) in acc.iter_mut().zip(&map) {
                        *x += r[k];
                    }
                }
                // In key order: appended.
                d.costs.add((cx, rec, at[0].0), &acc);
            }
        }
        for j in &rt.jccs {
            let (f, t) = (&rt.bbccs[j.from as usize], &rt.bbccs[j.to as usize]);
            let inclusive = project(&j.incl);
            if inclusive.iter().all(|&x| x == 0) || th.is_some_and(|x| x != f.th) {
                continue;
            }
            // SAFETY: leaked BlockInfo.
            let fb = unsafe { &*f.bb };
            d.calls.push(CallArc {
                from_ctx: f.cxt as usize,
                from_rec: f.rec,
                call_addr: fb.last_insn,
                to_ctx: t.cxt as usize,
                to_rec: t.rec,
                count: j.count,
                inclusive,
            });
        }
        d.jumps = jumps
            .into_iter()
            .map(|j| JumpArc {
                ctx: j.cxt as usize,
                rec: j.rec,
                from_addr: j.from_addr,
                to_addr: j.to_addr,
                executed: j.executed.unwrap_or(j.followed),
                followed: j.executed.map(|_| j.followed),
            })
            .collect();
        d
    }

    /// Writes one dump (`trigger` None: the final one) and zeroes what it wrote. With
    /// `--separate-threads=yes` each thread slot gets its own file (`only_current`: the
    /// running thread's alone, as for client requests); all share the part number.
    fn dump(&mut self, trigger: Option<&str>, only_current: bool) {
        self.dump_then_zero(trigger, only_current, true);
    }

    /// `dump`, zeroing what it wrote only when `zero` (the last dump of a process that
    /// exits needs no zeroing: a tenth of a short run's dump time went there).
    fn dump_then_zero(&mut self, trigger: Option<&str>, only_current: bool, zero: bool) {
        let Some(rt) = self.runtime() else { return };
        self.modules.refresh();
        let part = self.dumps + 1;
        if self.opts.separate_threads {
            let slots: Vec<usize> = match current_slot(rt) {
                Some(i) if only_current => vec![i],
                _ => (0..rt.threads.len()).collect(),
            };
            for i in slots {
                rt.flush_active(Some(i));
                self.write_part(rt, trigger, part, Some(i));
                if zero {
                    rt.zero(Some(i), true);
                }
            }
        } else {
            rt.flush_active(None);
            self.write_part(rt, trigger, part, None);
            if zero {
                rt.zero(None, true);
            }
        }
        self.dumps = part;
        // As Callgrind, a dump counts as an executed block.
        self.bbs_done = rt.count_dump();
    }

    /// The periodic dump (`--dump-every-bb`), of every thread.
    fn dump_every(&mut self) {
        let trigger = format!("--dump-every-bb={}", self.opts.dump_every_bb);
        self.dump(Some(&trigger), false);
        if let Some(rt) = self.runtime() {
            rt.every_dumped();
        }
    }

    /// Writes the file of one part: everything (`slot` None) or the thread slot's costs.
    fn write_part(
        &mut self,
        rt: &mut Runtime,
        trigger: Option<&str>,
        part: u32,
        slot: Option<usize>,
    ) {
        // The instrumentation's tables serve the dump too (and come back for later blocks).
        self.fn_by_symbol.clear();
        self.obj_by_name_ptr.clear();
        let sym = dumper::Symbolizer::new_reusing(self.modules.infos(), self.sym.take());
        let th = slot.and_then(|i| rt.threads.get(i)).map(|t| (t.th, t.tid));
        let mut data = self.collect(rt, th.map(|x| x.0));
        let cmd = dumper::callgrind::callgrind_cmd(&self.exe, &self.args);
        let desc: Vec<String> = match &self.caches {
            Some(c) => c.geometry.iter().map(|g| g.desc()).collect(),
            None => vec![String::new(); 3],
        };
        data.header = dumper::callgrind::callgrind_header(
            u64::from(std::process::id()),
            &cmd,
            u64::from(part),
            th.map(|x| u64::from(x.1)),
            [&desc[0], &desc[1], &desc[2]],
            (self.bbs_done, rt.bb_executions()),
            trigger.unwrap_or("Program termination"),
            self.events(),
        );
        data.header.event_names = self.event_names();
        // The summary is the running cost since the last dump of the threads written (it
        // includes a held back cost centre); `Collected :` is what the dumps wrote.
        let map = self.event_map();
        let mut summary = vec![0u64; map.len()];
        for (_, t) in rt
            .threads
            .iter()
            .enumerate()
            .filter(|(i, _)| slot.is_none_or(|s| s == *i))
        {
            for (s, &(_, i)) in summary.iter_mut().zip(&map) {
                *s = s.wrapping_add(t.run[i].wrapping_sub(t.lastdump[i]));
            }
        }
        data.header.summary = Some(summary);
        let written = data.costs.totals(self.collected.len());
        for (x, y) in self.collected.iter_mut().zip(written) {
            *x += y;
        }
        let pid = std::process::id();
        let base = match &self.base {
            Some((p, b)) if *p == pid => b.clone(),
            _ => match self.base_name() {
                Ok(b) => {
                    self.base = Some((pid, b.clone()));
                    b
                }
                Err(e) => {
                    crate::log::line(&format!("error: {e}"));
                    return;
                }
            },
        };
        let name = if self.opts.combine_dumps {
            base
        } else {
            dumper::outfile::callgrind_dump_name(&base, trigger.map(|_| part), th.map(|x| x.1))
        };
        let append = self.opts.combine_dumps && (part > 1 || slot.is_some_and(|i| i > 0));
        let copts = CallgrindOptions {
            dump_instr: self.opts.dump_instr,
            dump_line: self.opts.dump_line,
            compress_strings: self.opts.compress_strings,
            compress_pos: self.opts.compress_pos,
            continued: append,
        };
        let result = (|| -> Result<(), String> {
            let f = dumper::create_output(std::path::Path::new(&name), append)
                .map_err(|e| format!("{name}: {e}"))?;
            let mut w = std::io::BufWriter::with_capacity(1 << 16, f);
            data.write_to(&sym, &copts, &mut w)
                .map_err(|e| format!("{name}: {e}"))?;
            use std::io::Write;
            w.flush().map_err(|e| format!("{name}: {e}"))
        })();
        if let Err(e) = result {
            crate::log::line(&format!(
                "Error: can not write the Callgrind output file: {e}"
            ));
        }
        self.sym = Some(sym);
    }

    /// Acts on the function entry/exit triggers met by the block-start routine, then charges
    /// the entered block (with `--cache-sim=yes` its charge waits for them, as Callgrind's
    /// dump comes before the block runs).
    fn handle_triggers(&mut self) {
        let Some(rt) = self.runtime() else { return };
        let trig = std::mem::take(&mut rt.triggers);
        for t in trig {
            let name = |f: u32| self.fns.get(f as usize).map_or("", |n| n.name.as_str());
            match t {
                Trigger::ZeroBefore => self.zero_current(true),
                Trigger::DumpBefore(f) => {
                    let trigger = format!("--dump-before={}", name(f));
                    self.dump(Some(&trigger), true);
                }
                Trigger::DumpAfter(f) => {
                    let trigger = format!("--dump-after={}", name(f));
                    self.dump(Some(&trigger), true);
                }
            }
        }
        rt.charge_pending();
    }

    /// Zeroes the running thread's costs (all costs unless `--separate-threads=yes`, where
    /// one thread's are its own); `jumps`: its jump counts too (`CALLGRIND_ZERO_STATS`).
    fn zero_current(&mut self, jumps: bool) {
        let Some(rt) = self.runtime() else { return };
        let slot = if self.opts.separate_threads {
            current_slot(rt)
        } else {
            None
        };
        rt.zero(slot, false);
        if jumps {
            let th = slot.and_then(|i| rt.threads.get(i)).map(|t| t.th);
            rt.zero_jumps(th);
        }
    }
}

impl Tool for Callgrind {
    fn name(&self) -> &'static str {
        "callgrind"
    }

    /// Not while instrumentation is off (`--instr-atstart=no` until the client request
    /// starts it, which retranslates everything): no block view is built then.
    fn instruments(&self) -> bool {
        self.instrumenting
    }

    fn instrument(&mut self, b: &BlockView, ins: &mut Instrumenter) {
        if !self.instrumenting || b.insns.is_empty() {
            return;
        }
        TOOL.store(self, Ordering::Relaxed);
        let info = self.block_info(b, ins);
        // SAFETY: a leaked BlockInfo, never freed.
        let bb: &'static BlockInfo = unsafe { &*info };
        if let Some(last) = b.insns.last() {
            if matches!(last.flow, FlowKind::Call | FlowKind::IndirectCall) {
                self.ret_sites.insert(b.end);
            }
            // A direct call's target, or a direct tail jump's (a call for Callgrind).
            if last.flow == FlowKind::Call || (last.flow == FlowKind::Jump && bb.tail_jump) {
                self.call_sites.insert(last.insn.near_branch_target());
            }
        }
        // The block-start routine first: it points the simulator helpers at this block's
        // cost centre.
        let fast = Helper {
            func: clg_setup_fast,
            arg0: info as u64,
            integer_only: true,
        };
        let slow = Helper {
            func: clg_setup,
            arg0: info as u64,
            integer_only: false,
        };
        let jumps = u64::from(self.opts.collect_jumps);
        let inline = self.runtime().is_some_and(|rt| rt.inline_jumps);
        if inline && bb.plain_exit {
            // The next block's short form leaves the unwind check to this one.
            ins.disarm_if_unwound(runtime::jump(), runtime::frame_layout().sp);
        }
        // The call case (`CallPlan`) where a fast-path call into the block could be made: no
        // trigger, toggle or skipped function. A function's entry block takes only
        // that case; other blocks (calls into functions without symbols) try it after the
        // jump and return cases.
        let fl = &bb.flags;
        let call_case =
            !(fl.skip || fl.dump_before || fl.zero_before || fl.toggle_collect || fl.dump_after);
        // A skipped function's first block (a PLT stub's) takes the stub case instead.
        let stub = fl.skip && (bb.is_entry || bb.sect == dumper::symbols::SectionKind::Plt as u8);
        if inline && (!bb.is_entry || call_case || stub) {
            // Outside entry blocks the call case is for functions without symbols (a call
            // into a named function starts at its entry); elsewhere it would only be code.
            // There, and the return case, only in blocks calls or returns were seen to land
            // in: the target of a direct call or the return address of a call translated
            // before, or one the Rust path saw (`BlockInfo::entered_from`).
            let call_out = call_case && !bb.is_entry && !bb.named;
            let wanted = bb.cases_wanted.get();
            let call_here =
                call_out && (self.call_sites.contains(&b.start) || wanted & CASE_CALL != 0);
            let call_case = call_case && (bb.is_entry || call_here);
            let ret_case =
                !bb.is_entry && (self.ret_sites.contains(&b.start) || wanted & CASE_RET != 0);
            let mut missing = 0;
            if call_out && !call_here {
                missing |= CASE_CALL;
            }
            if !bb.is_entry && !ret_case {
                missing |= CASE_RET;
            }
            bb.cases_missing.set(missing);
            // A plain jump into this block (or a call into it) is handled inline (see
            // `runtime::jump()`).
            let jump = InlineJump {
                state: runtime::jump(),
                rec: bb.jrec,
                bb: info as u64,
                ir: bb.n_insns as u32,
                ends_plain: bb.arms_jump_key(),
                addr: bb.addr,
                ends_ret: bb.plain_ret(),
                ends_call: bb.arms_plans(),
                entry: bb.is_entry,
                call_case,
                ret_case,
                stub,
                own_plan: if call_case && !stub {
                    let own = bb
                        .own_plan
                        .get_or_init(|| dbt_core::tool::leak_low(dbt_core::tool::CallPlan::new()));
                    *own as *const dbt_core::tool::CallPlan as u64
                } else {
                    0
                },
                cost_words: self.runtime().map_or(1, |rt| rt.n_cost as u32),
                frame: runtime::frame_layout(),
                eager: self.runtime().filter(|rt| rt.eager).map(|rt| {
                    let n = rt.n_cost.min(N_STATIC);
                    let mut more = [0u32; 4];
                    for (k, m) in more.iter_mut().enumerate() {
                        if R_IR + 1 + k < n {
                            *m = bb.stat[R_IR + 1 + k] as u32;
                        }
                    }
                    more
                }),
            };
            ins.call_with_fallback_inline(0, fast, slow, CallArg::Sp, jumps, jump);
        } else {
            ins.call_with_fallback(0, fast, slow, CallArg::Sp, jumps);
        }
        if self.caches.is_some() || self.branch_slot.is_some() {
            self.instrument_sim(b, ins);
        }
    }

    fn client_request(&mut self, args: &[u64; 6]) -> ClientReply {
        self.handle_triggers();
        let done = ClientReply {
            value: Some(0),
            discard_translations: false,
        };
        match args[0] {
            DUMP_STATS => self.dump(Some("Client Request"), true),
            DUMP_STATS_AT => {
                let s = read_c_string(args[1]);
                self.dump(Some(&format!("Client Request: {s}")), true);
            }
            ZERO_STATS => self.zero_current(true),
            TOGGLE_COLLECT => {
                let key = dbt_core::tool::thread_key();
                // SAFETY: tool hooks run with the guest stopped.
                if let Some((rt, t)) = unsafe { runtime_and_thread(key) } {
                    rt.toggle_collect(t);
                }
            }
            START_INSTRUMENTATION | STOP_INSTRUMENTATION => {
                let on = args[0] == START_INSTRUMENTATION;
                if on == self.instrumenting {
                    return done;
                }
                self.instrumenting = on;
                if let Some(rt) = self.runtime() {
                    rt.switch_instrumentation();
                }
                let h = HIER.load(Ordering::Relaxed);
                if !h.is_null() {
                    // Callgrind clears the simulated caches when instrumentation switches.
                    // SAFETY: the leaked hierarchy; guest code is stopped in this hook.
                    unsafe { (*h).clear() };
                }
                return ClientReply {
                    value: Some(0),
                    discard_translations: true,
                };
            }
            _ => return ClientReply::default(),
        }
        done
    }

    fn signal_delivered(&mut self, _sig: i32, handler_stack: (u64, u64)) {
        // SAFETY: tool hooks run with the guest stopped.
        if let Some((rt, t)) = unsafe { runtime_and_thread(dbt_core::tool::thread_key()) } {
            rt.pre_signal(t, handler_stack);
        }
    }

    fn signal_returned(&mut self) {
        // SAFETY: tool hooks run with the guest stopped.
        if let Some((rt, t)) = unsafe { runtime_and_thread(dbt_core::tool::thread_key()) } {
            rt.post_signal(t);
        }
    }

    fn pre_syscall(&mut self, _nr: u64) {
        let unit = self.opts.collect_systime;
        if unit == SysTime::No {
            return;
        }
        // SAFETY: tool hooks run with the guest stopped.
        if let Some((_, t)) = unsafe { runtime_and_thread(dbt_core::tool::thread_key()) } {
            t.sys_start = sys_clock(unit);
        }
    }

    fn post_syscall(&mut self, nr: u64, result: i64) {
        if result >= 0 && maps_memory(nr) {
            self.modules.mappings_changed();
        }
        let unit = self.opts.collect_systime;
        if unit == SysTime::No {
            return;
        }
        let now = sys_clock(unit);
        // SAFETY: tool hooks run with the guest stopped.
        if let Some((rt, t)) = unsafe { runtime_and_thread(dbt_core::tool::thread_key()) } {
            let mut cost = [0; N_SYS];
            cost[0] = 1;
            cost[1] = now[0].wrapping_sub(t.sys_start[0]);
            cost[2] = now[1].wrapping_sub(t.sys_start[1]);
            rt.charge_syscall(t, cost);
        }
    }

    fn thread_start(&mut self, parent: u64, child: u64) {
        if let Some(rt) = self.runtime() {
            // The parent first (the main thread is slot 1 even before its first block).
            rt.thread(parent);
            rt.thread_start(child);
        }
    }

    fn thread_exit(&mut self, key: u64) {
        if let Some(rt) = self.runtime() {
            rt.thread_exit(key);
        }
        // The next thread with this key (a reused context) must look its slot up again.
        LAST_KEY.store(0, Ordering::Relaxed);
        LAST_THREAD.store(core::ptr::null_mut(), Ordering::Relaxed);
    }

    fn fini(&mut self, _reason: FiniReason) {
        dumper::symbols::map_cache_entries();
        self.handle_triggers();
        self.dump_then_zero(None, false, false);
        if self.quiet {
            return;
        }
        let total = &self.collected;
        let names = self.events();
        crate::log::line("");
        crate::log::line(&format!("Events    : {}", names.join(" ")));
        let vals: Vec<String> = total.iter().map(u64::to_string).collect();
        crate::log::line(&format!("Collected : {}", vals.join(" ")));
        crate::log::line("");
        let get = |n: &str| names.iter().position(|x| x == n).map_or(0, |i| total[i]);
        let t = super::cachegrind::summary::Totals {
            ir: get("Ir"),
            i1mr: get("I1mr"),
            ilmr: get("ILmr"),
            dr: get("Dr"),
            d1mr: get("D1mr"),
            dlmr: get("DLmr"),
            dw: get("Dw"),
            d1mw: get("D1mw"),
            dlmw: get("DLmw"),
            bc: get("Bc"),
            bcm: get("Bcm"),
            bi: get("Bi"),
            bim: get("Bim"),
        };
        for l in summary_lines(&t, self.caches.is_some(), self.branch_slot.is_some()) {
            crate::log::line(&l);
        }
    }
}

/// The index in `rt.threads` of the thread that ran the last block.
fn current_slot(rt: &Runtime) -> Option<usize> {
    let cur = LAST_THREAD.load(Ordering::Relaxed);
    rt.threads.iter().position(|x| core::ptr::eq(&**x, cur))
}

/// Callgrind's end-of-run summary: Cachegrind's layout with `rd + wr` and `x%   + y%`
/// spacing in the cache lines (`cachesim_printstat`); the branch lines are the same.
fn summary_lines(t: &super::cachegrind::summary::Totals, cache: bool, branch: bool) -> Vec<String> {
    super::cachegrind::summary::lines(t, cache, branch)
        .into_iter()
        .map(|l| {
            if l.starts_with('D') || l.starts_with("LL") {
                l.replace(" rd   + ", " rd + ")
                    .replace("%     + ", "%   + ")
            } else {
                l
            }
        })
        .collect()
}

/// Reads a NUL-terminated guest string (at most 4 KiB).
fn read_c_string(addr: u64) -> String {
    let mut out = Vec::new();
    if addr == 0 {
        return String::new();
    }
    for i in 0..4096u64 {
        // SAFETY: the guest passed this pointer to a client request; guest memory is mapped in
        // this process. A bad pointer would fault the guest under Valgrind too.
        let b = unsafe { core::ptr::read_volatile((addr + i) as *const u8) };
        if b == 0 {
            break;
        }
        out.push(b);
    }
    String::from_utf8_lossy(&out).into_owned()
}
