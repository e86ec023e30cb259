//! Turns the Callgrind tool's runtime data into a [`ClPart`] ready to write.
//!
//! Input: the contexts in creation order (a context is a function entry plus, with
//! `--separate-callers`, its callers), per-(context, recursion level, instruction) self costs,
//! call arcs with inclusive costs and optional jump arcs. Output: one function block per
//! (context, level) with Callgrind's names (`fib'2`, `a'b'c`), ids (context base number plus
//! level, bases counted in creation order, each context reserving `n_ids` numbers), per-line
//! or per-instruction positions, `fi=`/`fe=` for inlined code, and `calls=` lines.
//!
//! # Invariants
//! * A function's own file is the file of its entry instruction; lines whose file differs are
//!   written under `fi=`.
//! * Consecutive instructions with the same position are merged into one cost line, and a
//!   call instruction always ends a line (its calls follow it), as Callgrind's `fprint_bbcc`.
//! * Arcs with an all-zero inclusive cost are not written.
//!
//! This module deliberately does not build contexts itself from a trace; see
//! [`CallgrindData::from_flat`] for the simple symbol-based grouping.

use std::collections::{BTreeMap, HashMap};

use super::{ClEntry, ClFunction, ClHeader, ClPart, FnName, PosKind};
use crate::error::DumpError;
use crate::symbols::{Brief, Location, Symbolizer};

/// One Callgrind context: the function (by entry address) and its callers, innermost first
/// (empty unless `--separate-callers` is used).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FnContext {
    /// Runtime address of the function's first basic block.
    pub entry: u64,
    /// Entry addresses of the callers that are part of this context, nearest first.
    pub callers: Vec<u64>,
    /// How many ids this context reserves (`--separate-recs` for its function, default 2).
    pub n_ids: u32,
}

/// A call arc between two (context, recursion level) pairs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallArc {
    /// Index of the calling context in [`CallgrindData::contexts`].
    pub from_ctx: usize,
    /// Recursion level of the caller (0 = first activation).
    pub from_rec: u32,
    /// Runtime address of the call instruction.
    pub call_addr: u64,
    /// Index of the called context.
    pub to_ctx: usize,
    /// Recursion level of the callee.
    pub to_rec: u32,
    /// Number of calls (`calls=`).
    pub count: u64,
    /// Inclusive cost of those calls, one entry per event.
    pub inclusive: Vec<u64>,
}

/// A jump arc (`--collect-jumps=yes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JumpArc {
    /// Context of the jump.
    pub ctx: usize,
    /// Its recursion level.
    pub rec: u32,
    /// Runtime address of the jump instruction.
    pub from_addr: u64,
    /// Runtime address of the target.
    pub to_addr: u64,
    /// Times executed.
    pub executed: u64,
    /// `Some(times followed)` for a conditional jump (`jcnd=`), `None` for `jump=`.
    pub followed: Option<u64>,
}

/// Options that change what Callgrind writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallgrindOptions {
    /// `--dump-instr=yes`: `positions: instr line` (or `instr`).
    pub dump_instr: bool,
    /// `--dump-line=yes` (default): line positions.
    pub dump_line: bool,
    /// `--compress-strings`.
    pub compress_strings: bool,
    /// `--compress-pos`.
    pub compress_pos: bool,
    /// A later part appended to a combined file (`--combine-dumps=yes`).
    pub continued: bool,
}

impl Default for CallgrindOptions {
    fn default() -> Self {
        CallgrindOptions {
            dump_instr: false,
            dump_line: true,
            compress_strings: true,
            compress_pos: true,
            continued: false,
        }
    }
}

/// A cost table key: (context index, recursion level, instruction runtime address).
pub type CostKey = (usize, u32, u64);

/// Self costs by [`CostKey`], in key order, one row of costs per key in one flat array: a
/// dump of a large program holds one row per instruction that ran (a map of vectors took
/// ~130 bytes per row, this ~32 with one event).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CostTable {
    keys: Vec<CostKey>,
    values: Vec<u64>,
    /// Costs per row (the first row's length).
    width: usize,
    /// The first row given with another length: (its key, its length).
    bad: Option<(CostKey, usize)>,
}

impl CostTable {
    /// Adds `costs` to the row of `key` (a new row when there is none). Rows given in key
    /// order are appended; others are inserted in place.
    pub fn add(&mut self, key: CostKey, costs: &[u64]) {
        if self.keys.is_empty() {
            self.width = costs.len();
        }
        if costs.len() != self.width {
            self.bad.get_or_insert((key, costs.len()));
            return;
        }
        let w = self.width;
        let at = match self.keys.last() {
            Some(last) if *last < key => Err(self.keys.len()),
            None => Err(0),
            _ => self.keys.binary_search(&key),
        };
        match at {
            Ok(i) => crate::cachegrind::add_into(&mut self.values[i * w..(i + 1) * w], costs),
            Err(i) => {
                self.keys.insert(i, key);
                self.values.splice(i * w..i * w, costs.iter().copied());
            }
        }
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The rows in key order.
    pub fn iter(&self) -> impl Iterator<Item = (CostKey, &[u64])> + '_ {
        let w = self.width;
        self.keys
            .iter()
            .enumerate()
            .map(move |(i, &k)| (k, &self.values[i * w..(i + 1) * w]))
    }

    /// The rows' costs in key order.
    pub fn values(&self) -> impl Iterator<Item = &[u64]> + '_ {
        self.iter().map(|(_, c)| c)
    }

    /// The sum of all rows, `n` events wide.
    pub fn totals(&self, n: usize) -> Vec<u64> {
        let mut t = vec![0; n];
        for c in self.values() {
            crate::cachegrind::add_into(&mut t, c);
        }
        t
    }
}

/// Everything one Callgrind dump needs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CallgrindData {
    /// Header fields. `positions` is overwritten from the options; `summary`/`totals` are
    /// computed when `None`.
    pub header: ClHeader,
    /// Contexts in creation order.
    pub contexts: Vec<FnContext>,
    /// Self costs per (context index, recursion level, instruction runtime address).
    pub costs: CostTable,
    /// Call arcs.
    pub calls: Vec<CallArc>,
    /// Jump arcs.
    pub jumps: Vec<JumpArc>,
}

/// Callgrind's header for a dump. `cache_desc` are the three `I1/D1/LL cache:` values (empty
/// strings when the simulator is off).
#[allow(clippy::too_many_arguments)]
pub fn callgrind_header(
    pid: u64,
    cmd: &str,
    part: u64,
    thread: Option<u64>,
    cache_desc: [&str; 3],
    timerange: (u64, u64),
    trigger: &str,
    events: Vec<String>,
) -> ClHeader {
    let mut desc = Vec::new();
    for (name, v) in ["I1", "D1", "LL"].iter().zip(cache_desc) {
        desc.push(format!("{name} cache: {v}"));
    }
    desc.push(format!(
        "Timerange: Basic block {} - {}",
        timerange.0, timerange.1
    ));
    desc.push(format!("Trigger: {trigger}"));
    ClHeader {
        creator: Some("callgrind-3.19.0".into()),
        pid: Some(pid),
        cmd: Some(cmd.to_string()),
        part: Some(part),
        thread,
        desc,
        events,
        ..ClHeader::default()
    }
}

struct FnInfo {
    object: Option<String>,
    file: String,
    name: String,
}

/// The name Callgrind gives code without a symbol at `offset` (`0x` and 16 hex digits) in a
/// section of kind `section` (a suffix outside code: ` [PLT]`).
pub fn unnamed_fn_name(offset: u64, section: crate::symbols::SectionKind) -> String {
    format!("0x{offset:016x}{}", section.unnamed_suffix())
}

/// The function name Callgrind gives the code at `loc`: its symbol's, else its offset in its
/// object (`0x` and 16 hex digits) and, outside code, the section's kind (` [PLT]`).
pub fn callgrind_fn_name(loc: &Location) -> String {
    match &loc.function {
        Some(f) => f.clone(),
        None => unnamed_fn_name(loc.offset, loc.section),
    }
}

impl CallgrindData {
    /// Groups flat per-instruction costs and arcs by function symbol: one context per
    /// function, created in address order, recursion level 0. `arcs` are
    /// `(call instruction address, callee entry address, count, inclusive costs)`. Use the
    /// explicit fields instead when the tool tracks contexts, so ids match Callgrind's.
    pub fn from_flat(
        header: ClHeader,
        sym: &Symbolizer,
        self_costs: &BTreeMap<u64, Vec<u64>>,
        arcs: &[(u64, u64, u64, Vec<u64>)],
    ) -> Self {
        let mut d = CallgrindData {
            header,
            ..Default::default()
        };
        let mut ctx_of_entry: HashMap<u64, usize> = HashMap::new();
        let mut ctx_for = |d: &mut CallgrindData, addr: u64| -> usize {
            let entry = sym.lookup_fast(addr).function_start.unwrap_or(addr);
            *ctx_of_entry.entry(entry).or_insert_with(|| {
                d.contexts.push(FnContext {
                    entry,
                    callers: Vec::new(),
                    n_ids: 2,
                });
                d.contexts.len() - 1
            })
        };
        for (&addr, c) in self_costs {
            let ctx = ctx_for(&mut d, addr);
            d.costs.add((ctx, 0, addr), c);
        }
        for (call, callee, count, incl) in arcs {
            let from_ctx = ctx_for(&mut d, *call);
            let to_ctx = ctx_for(&mut d, *callee);
            d.calls.push(CallArc {
                from_ctx,
                from_rec: 0,
                call_addr: *call,
                to_ctx,
                to_rec: 0,
                count: *count,
                inclusive: incl.clone(),
            });
        }
        d
    }

    /// The part's header: this data's with the options' `positions:`.
    fn part_header(&self, opts: &CallgrindOptions) -> ClHeader {
        let mut header = self.header.clone();
        header.positions = match (opts.dump_instr, opts.dump_line) {
            (true, true) => vec![PosKind::Instr, PosKind::Line],
            (true, false) => vec![PosKind::Instr],
            (false, _) => vec![PosKind::Line],
        };
        header
    }

    /// Builds the file model. Fails if a context index is out of range or a cost vector has
    /// the wrong length.
    pub fn to_part(&self, sym: &Symbolizer, opts: &CallgrindOptions) -> Result<ClPart, DumpError> {
        let header = self.part_header(opts);
        let mut functions = Vec::new();
        self.each_function(sym, opts, &header.positions, &mut |f| {
            functions.push(f);
            Ok(())
        })?;
        Ok(ClPart {
            header,
            functions,
            ..ClPart::default()
        })
    }

    /// Builds the function blocks in file order, handing each to `sink` as it is made
    /// (positions of `kinds`). Fails, before the first block, if a context index is out
    /// of range or a cost vector has the wrong length.
    fn each_function(
        &self,
        sym: &Symbolizer,
        opts: &CallgrindOptions,
        kinds: &[PosKind],
        sink: &mut dyn FnMut(ClFunction) -> Result<(), DumpError>,
    ) -> Result<(), DumpError> {
        let n_ev = self.header.events.len();
        let nctx = self.contexts.len();
        let bad_ctx = |c: usize| {
            DumpError::Invalid(format!("context index {c} out of range ({nctx} contexts)"))
        };
        // Context bases and function identities.
        let mut bases = Vec::with_capacity(nctx);
        let mut next = 0u64;
        let mut infos = Vec::with_capacity(nctx);
        for c in &self.contexts {
            bases.push(next);
            next += u64::from(c.n_ids.max(1));
            let loc = sym.lookup_fast(c.entry);
            let mut name = callgrind_fn_name(&loc);
            for caller in &c.callers {
                name.push('\'');
                name.push_str(&callgrind_fn_name(&sym.lookup_fast(*caller)));
            }
            infos.push(FnInfo {
                object: Some(loc.object_name().to_string()),
                file: loc.file_name().to_string(),
                name,
            });
        }
        let fn_name = |ctx: usize, rec: u32| -> FnName {
            let info = &infos[ctx];
            let name = if rec == 0 {
                info.name.clone()
            } else {
                // fib'2, and with callers: even'2'odd'even.
                match info.name.split_once('\'') {
                    Some((base, callers)) => format!("{base}'{}'{callers}", rec + 1),
                    None => format!("{}'{}", info.name, rec + 1),
                }
            };
            FnName {
                id: Some(bases[ctx] + u64::from(rec)),
                name,
            }
        };
        let position_of = |k: &PosKind, loc: &Brief| match k {
            PosKind::Line => u64::from(loc.line),
            _ => loc.offset,
        };
        let position =
            |loc: &Brief| -> Vec<u64> { kinds.iter().map(|k| position_of(k, loc)).collect() };
        // Gather per-block instruction sets.
        #[derive(Default)]
        struct Block<'a> {
            instrs: BTreeMap<u64, Option<&'a [u64]>>,
            calls: HashMap<u64, Vec<&'a CallArc>>,
            jumps: HashMap<u64, Vec<&'a JumpArc>>,
        }
        let mut blocks: BTreeMap<(usize, u32), Block> = BTreeMap::new();
        // `costs` is ordered by (context, level, address): each group's instructions come
        // together and in order, for one bulk-built map per group.
        let mut group: Vec<(u64, Option<&[u64]>)> = Vec::new();
        let bad_len = |addr: u64, len: usize| {
            DumpError::Invalid(format!(
                "cost vector for {addr:#x} has {len} entries, events has {n_ev}"
            ))
        };
        if let Some(((_, _, addr), len)) = self.costs.bad {
            return Err(bad_len(addr, len));
        }
        let mut costs = self.costs.iter().peekable();
        while let Some(((ctx, rec, addr), c)) = costs.next() {
            if ctx >= nctx {
                return Err(bad_ctx(ctx));
            }
            if c.len() != n_ev {
                return Err(bad_len(addr, c.len()));
            }
            group.push((addr, Some(c)));
            if costs
                .peek()
                .is_none_or(|((x, r, _), _)| (*x, *r) != (ctx, rec))
            {
                blocks.insert(
                    (ctx, rec),
                    Block {
                        instrs: group.drain(..).collect(),
                        ..Block::default()
                    },
                );
            }
        }
        for a in &self.calls {
            if a.from_ctx >= nctx || a.to_ctx >= nctx {
                return Err(bad_ctx(a.from_ctx.max(a.to_ctx)));
            }
            if a.inclusive.len() != n_ev {
                return Err(DumpError::Invalid(format!(
                    "inclusive cost of call at {:#x} has {} entries, events has {n_ev}",
                    a.call_addr,
                    a.inclusive.len()
                )));
            }
            if a.inclusive.iter().all(|&x| x == 0) {
                continue;
            }
            let b = blocks.entry((a.from_ctx, a.from_rec)).or_default();
            b.instrs.entry(a.call_addr).or_insert(None);
            b.calls.entry(a.call_addr).or_default().push(a);
        }
        for j in &self.jumps {
            if j.ctx >= nctx {
                return Err(bad_ctx(j.ctx));
            }
            let b = blocks.entry((j.ctx, j.rec)).or_default();
            b.instrs.entry(j.from_addr).or_insert(None);
            b.jumps.entry(j.from_addr).or_default().push(j);
        }
        // Order blocks like Callgrind: by object, then file (first-creation order), then
        // context, then recursion level.
        let mut ob_rank: HashMap<&Option<String>, usize> = HashMap::new();
        let mut fl_rank: HashMap<(&Option<String>, &String), usize> = HashMap::new();
        for i in &infos {
            let n = ob_rank.len();
            ob_rank.entry(&i.object).or_insert(n);
            let n = fl_rank.len();
            fl_rank.entry((&i.object, &i.file)).or_insert(n);
        }
        let mut keys: Vec<(usize, u32)> = blocks.keys().copied().collect();
        keys.sort_by_key(|&(c, r)| {
            let i = &infos[c];
            (ob_rank[&i.object], fl_rank[&(&i.object, &i.file)], c, r)
        });

        for key in keys {
            let b = &blocks[&key];
            let info = &infos[key.0];
            let mut entries: Vec<ClEntry> = Vec::new();
            // Pending merged cost line: (file, pos, costs).
            let mut run: Option<(String, Vec<u64>, Vec<u64>)> = None;
            let flush = |run: &mut Option<(String, Vec<u64>, Vec<u64>)>,
                         entries: &mut Vec<ClEntry>| {
                if let Some((file, pos, costs)) = run.take() {
                    entries.push(ClEntry::Cost { file, pos, costs });
                }
            };
            for (&addr, costs) in &b.instrs {
                let loc = sym.lookup_line_brief(addr);
                if let Some(c) = costs {
                    // Most instructions add to the run of their line: nothing allocated.
                    let same = |(f, p): (&String, &Vec<u64>)| {
                        f.as_str() == loc.file_name()
                            && p.len() == kinds.len()
                            && p.iter().zip(kinds).all(|(&v, k)| v == position_of(k, &loc))
                    };
                    match &mut run {
                        Some((f, p, acc)) if same((f, p)) => {
                            crate::cachegrind::add_into(acc, c);
                        }
                        _ => {
                            flush(&mut run, &mut entries);
                            run = Some((loc.file_name().to_string(), position(&loc), c.to_vec()));
                        }
                    }
                }
                let calls = b.calls.get(&addr);
                let jumps = b.jumps.get(&addr);
                if calls.is_none() && jumps.is_none() {
                    continue;
                }
                let file = loc.file_name().to_string();
                let pos = position(&loc);
                flush(&mut run, &mut entries);
                if let Some(jumps) = jumps {
                    for j in jumps {
                        let tloc = sym.lookup_line_brief(j.to_addr);
                        if !opts.dump_instr && tloc.line == 0 {
                            continue;
                        }
                        // Callgrind keeps the current file for a target without debug info.
                        let tfile = tloc.file.map_or(file.as_str(), |f| f).to_string();
                        entries.push(ClEntry::Jump {
                            file: file.clone(),
                            followed: j.followed,
                            executed: j.executed,
                            jfi: (tfile != file).then_some(tfile),
                            jfn: None,
                            target: position(&tloc),
                            pos: pos.clone(),
                        });
                    }
                }
                if let Some(calls) = calls {
                    let mut calls = calls.clone();
                    calls.sort_by_key(|a| (a.to_ctx, a.to_rec));
                    for a in calls {
                        let callee = &infos[a.to_ctx];
                        let tloc = sym.lookup_line_brief(self.contexts[a.to_ctx].entry);
                        entries.push(ClEntry::Call {
                            file: file.clone(),
                            cob: callee.object.clone(),
                            cfi: Some(callee.file.clone()),
                            cfn: fn_name(a.to_ctx, a.to_rec),
                            count: a.count,
                            target: position(&tloc),
                            pos: pos.clone(),
                            inclusive: a.inclusive.clone(),
                        });
                    }
                }
            }
            flush(&mut run, &mut entries);
            sink(ClFunction {
                object: info.object.clone(),
                file: info.file.clone(),
                name: fn_name(key.0, key.1),
                entries,
            })?;
        }
        Ok(())
    }

    /// Writes the part with the options' compression settings, each function block as
    /// soon as it is built (the text is what `to_part` and `ClPart::write_to` give).
    pub fn write_to(
        &self,
        sym: &Symbolizer,
        opts: &CallgrindOptions,
        out: &mut dyn std::io::Write,
    ) -> Result<(), DumpError> {
        let io = |e| DumpError::write("<output>", e);
        let header = self.part_header(opts);
        let summary = match &header.summary {
            Some(s) => s.clone(),
            None => self.costs.totals(header.events.len()),
        };
        let no_ids = BTreeMap::new();
        // Every block and callee is named with its context's id.
        let ids: u64 = self
            .contexts
            .iter()
            .map(|c| u64::from(c.n_ids.max(1)))
            .sum();
        let wopts = super::WriteOptions {
            compress_strings: opts.compress_strings,
            compress_pos: opts.compress_pos,
            continued: opts.continued,
        };
        let mut w = super::writer::PartWriter::begin(
            out,
            &header,
            &summary,
            wopts,
            &no_ids,
            &BTreeMap::new(),
            ids,
        )
        .map_err(io)?;
        self.each_function(sym, opts, &header.positions, &mut |f| {
            w.function(&f).map_err(io)
        })?;
        w.finish(header.totals.as_deref()).map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_table_keeps_key_order_and_adds_equal_keys() {
        let mut t = CostTable::default();
        t.add((0, 0, 0x20), &[1, 2]);
        t.add((1, 0, 0x10), &[3, 4]);
        // Out of order: inserted in place; an equal key: added.
        t.add((0, 1, 0x10), &[5, 6]);
        t.add((0, 0, 0x20), &[10, 20]);
        t.add((0, 0, 0x08), &[7, 8]);
        let rows: Vec<(CostKey, Vec<u64>)> = t.iter().map(|(k, c)| (k, c.to_vec())).collect();
        assert_eq!(
            rows,
            vec![
                ((0, 0, 0x08), vec![7, 8]),
                ((0, 0, 0x20), vec![11, 22]),
                ((0, 1, 0x10), vec![5, 6]),
                ((1, 0, 0x10), vec![3, 4]),
            ]
        );
        assert_eq!(t.len(), 4);
    }

    #[test]
    fn a_cost_row_of_the_wrong_length_is_an_error_when_built() {
        let mut d = CallgrindData {
            header: ClHeader {
                events: vec!["Ir".into()],
                ..ClHeader::default()
            },
            contexts: vec![FnContext {
                entry: 0x10,
                callers: Vec::new(),
                n_ids: 2,
            }],
            ..CallgrindData::default()
        };
        d.costs.add((0, 0, 0x10), &[1]);
        d.costs.add((0, 0, 0x14), &[1, 2]);
        let sym = Symbolizer::new(Vec::new());
        let e = d.to_part(&sym, &CallgrindOptions::default()).unwrap_err();
        assert!(e.to_string().contains("0x14"), "{e}");
    }
}
