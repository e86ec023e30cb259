//! Writes a [`ClPart`] in Callgrind 3.19's layout (`src:callgrind/dump.c`).
//!
//! # Invariants
//! * Subpositions are written relative to the last self-cost (or call-site / jump-source)
//!   line of the current function block when `compress_pos` is on, the reference is 0 after
//!   every `fn=`, and a value is written absolutely when the reference is 0 or the difference
//!   is 100 or more — so the reader in this crate, `callgrind_annotate`, KCachegrind and
//!   gprof2dot all decode the same numbers.
//! * Each name id is defined (`(id) name`) on first use and referenced (`(id)`) afterwards.
//! * Trailing zero costs are omitted, the first cost is always written; `calls=`, `jump=`,
//!   `jcnd=` and position-only lines end with a space, as Callgrind writes them.
//!
//! This module deliberately does not reorder anything: blocks and lines come out in model order.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::io::Write;

use super::{ClEntry, ClFunction, ClHeader, ClPart, FnName, PosKind, WriteOptions};

struct Names {
    compress: bool,
    ob: HashMap<String, u64>,
    fl: HashMap<String, u64>,
    ob_defined: HashSet<u64>,
    fl_defined: HashSet<u64>,
    next_ob: u64,
    next_fl: u64,
    fn_by_name: HashMap<String, u64>,
    fn_defined: HashSet<u64>,
    next_fn: u64,
}

impl Names {
    fn file_like(
        map: &mut HashMap<String, u64>,
        defined: &mut HashSet<u64>,
        next: &mut u64,
        key: String,
        name: &str,
    ) -> String {
        let id = *map.entry(key).or_insert_with(|| {
            let id = *next;
            *next += 1;
            id
        });
        if defined.insert(id) {
            format!("({id}) {name}")
        } else {
            format!("({id})")
        }
    }

    fn ob(&mut self, name: &str) -> String {
        if !self.compress {
            return name.to_string();
        }
        Self::file_like(
            &mut self.ob,
            &mut self.ob_defined,
            &mut self.next_ob,
            name.to_string(),
            name,
        )
    }

    /// File ids are per (object, file), as Callgrind's file nodes are.
    fn fl(&mut self, ob: Option<&String>, name: &str) -> String {
        if !self.compress {
            return name.to_string();
        }
        let key = fl_key(ob.map_or("", String::as_str), name);
        Self::file_like(
            &mut self.fl,
            &mut self.fl_defined,
            &mut self.next_fl,
            key,
            name,
        )
    }

    fn func(&mut self, f: &FnName) -> String {
        if !self.compress {
            return f.name.clone();
        }
        let id = match f.id {
            Some(id) => id,
            None => match self.fn_by_name.get(&f.name) {
                Some(id) => *id,
                None => {
                    let id = self.next_fn;
                    self.next_fn += 1;
                    self.fn_by_name.insert(f.name.clone(), id);
                    id
                }
            },
        };
        if self.fn_defined.insert(id) {
            format!("({id}) {}", f.name)
        } else {
            format!("({id})")
        }
    }
}

fn fl_key(ob: &str, name: &str) -> String {
    format!("{ob}\0{name}")
}

fn write_pos(s: &mut String, kinds: &[PosKind], pos: &[u64], last: &[u64], compress: bool) {
    for (i, k) in kinds.iter().enumerate() {
        let v = pos.get(i).copied().unwrap_or(0);
        let l = last.get(i).copied().unwrap_or(0);
        let diff = i128::from(v) - i128::from(l);
        if compress && l > 0 && diff > -100 && diff < 100 {
            match diff {
                0 => s.push_str("* "),
                d if d > 0 => {
                    let _ = write!(s, "+{d} ");
                }
                d => {
                    let _ = write!(s, "{d} ");
                }
            }
        } else {
            match k {
                PosKind::Line => {
                    let _ = write!(s, "{v} ");
                }
                // C's "%#lx" prints 0 without the 0x prefix.
                _ if v == 0 => s.push_str("0 "),
                _ => {
                    let _ = write!(s, "{v:#x} ");
                }
            }
        }
    }
}

fn write_costs(s: &mut String, costs: &[u64]) {
    let last_nz = costs.iter().rposition(|&c| c != 0).unwrap_or(0);
    let _ = write!(s, "{}", costs.first().copied().unwrap_or(0));
    for c in costs.iter().take(last_nz + 1).skip(1) {
        let _ = write!(s, " {c}");
    }
}

/// A `summary:`/`totals:` value: as a cost line, trailing zeros left out (Callgrind's
/// `totals: 0` of a run that collected nothing).
fn join(v: &[u64]) -> String {
    let mut s = String::new();
    write_costs(&mut s, v);
    s
}

pub(super) fn write_part(
    p: &ClPart,
    out: &mut dyn Write,
    opts: WriteOptions,
) -> std::io::Result<()> {
    let h = &p.header;
    // The totals are summed again as the blocks are written (`PartWriter::finish`).
    let summary = h.summary.clone().unwrap_or_else(|| p.self_totals());
    let max_id = p
        .functions
        .iter()
        .flat_map(|f| {
            std::iter::once(&f.name).chain(f.entries.iter().filter_map(|e| match e {
                ClEntry::Call { cfn, .. } => Some(cfn),
                ClEntry::Jump { jfn, .. } => jfn.as_ref(),
                ClEntry::Cost { .. } => None,
            }))
        })
        .filter_map(|n| n.id)
        .max();
    let mut w = PartWriter::begin(
        out,
        h,
        &summary,
        opts,
        &p.ob_ids,
        &p.fl_ids,
        max_id.map_or(0, |m| m + 1),
    )?;
    for f in &p.functions {
        w.function(f)?;
    }
    w.finish(h.totals.as_deref())
}

/// Writes a part's text one function block at a time, so that a dump need not hold the
/// whole file model (`CallgrindData::write_to` builds and writes each block in turn).
pub(super) struct PartWriter<'o> {
    out: &'o mut dyn Write,
    names: Names,
    kinds: Vec<PosKind>,
    compress_pos: bool,
    cur_ob: Option<String>,
    cur_fl: Option<(Option<String>, String)>,
    /// The self costs written so far (`totals:` unless the header gives them).
    totals: Vec<u64>,
    s: String,
}

impl<'o> PartWriter<'o> {
    /// Writes the header lines with `summary:`; `ob_ids`, `fl_ids` are the ids to reuse
    /// under name compression, `next_fn` the id for the first function given without one.
    pub(super) fn begin(
        out: &'o mut dyn Write,
        h: &ClHeader,
        summary: &[u64],
        opts: WriteOptions,
        ob_ids: &BTreeMap<String, u64>,
        fl_ids: &BTreeMap<(String, String), u64>,
        next_fn: u64,
    ) -> std::io::Result<PartWriter<'o>> {
        let mut s = String::new();
        write_header(&mut s, h, summary, opts);
        out.write_all(s.as_bytes())?;
        let ob: HashMap<String, u64> = ob_ids.iter().map(|(k, v)| (k.clone(), *v)).collect();
        let fl: HashMap<String, u64> = fl_ids
            .iter()
            .map(|((o, f), v)| (fl_key(o, f), *v))
            .collect();
        let names = Names {
            compress: opts.compress_strings,
            next_ob: ob.values().max().map_or(1, |m| m + 1),
            next_fl: fl.values().max().map_or(1, |m| m + 1),
            ob,
            fl,
            ob_defined: HashSet::new(),
            fl_defined: HashSet::new(),
            fn_by_name: HashMap::new(),
            fn_defined: HashSet::new(),
            next_fn,
        };
        Ok(PartWriter {
            out,
            names,
            kinds: h.positions.clone(),
            compress_pos: opts.compress_pos,
            cur_ob: None,
            cur_fl: None,
            totals: vec![0; h.events.len()],
            s,
        })
    }

    /// Writes one function block.
    pub(super) fn function(&mut self, f: &ClFunction) -> std::io::Result<()> {
        let PartWriter {
            names,
            kinds,
            cur_ob,
            cur_fl,
            s,
            ..
        } = self;
        let cp = self.compress_pos;
        let n = kinds.len();
        s.clear();
        if let Some(ob) = &f.object {
            if cur_ob.as_ref() != Some(ob) {
                let _ = writeln!(s, "ob={}", names.ob(ob));
                *cur_ob = Some(ob.clone());
            }
        }
        let fl_key = (cur_ob.clone(), f.file.clone());
        if cur_fl.as_ref() != Some(&fl_key) {
            let _ = writeln!(s, "fl={}", names.fl(cur_ob.as_ref(), &f.file));
            *cur_fl = Some(fl_key);
        }
        let _ = writeln!(s, "fn={}", names.func(&f.name));
        let mut last = vec![0u64; n];
        let mut cur_file = f.file.clone();
        for e in &f.entries {
            let file = match e {
                ClEntry::Cost { file, .. }
                | ClEntry::Call { file, .. }
                | ClEntry::Jump { file, .. } => file,
            };
            if *file != cur_file {
                let key = if *file == f.file { "fe" } else { "fi" };
                let _ = writeln!(s, "{key}={}", names.fl(cur_ob.as_ref(), file));
                cur_file = file.clone();
            }
            match e {
                ClEntry::Cost { pos, costs, .. } => {
                    write_pos(s, kinds, pos, &last, cp);
                    write_costs(s, costs);
                    s.push('\n');
                    last.clone_from(pos);
                    crate::cachegrind::add_into(&mut self.totals, costs);
                }
                ClEntry::Call {
                    cob,
                    cfi,
                    cfn,
                    count,
                    target,
                    pos,
                    inclusive,
                    ..
                } => {
                    let callee_ob = cob.as_ref().or(cur_ob.as_ref());
                    if callee_ob != cur_ob.as_ref() {
                        if let Some(o) = callee_ob {
                            let _ = writeln!(s, "cob={}", names.ob(o));
                        }
                    }
                    let callee_fl = cfi.as_ref().unwrap_or(&cur_file);
                    if callee_ob != cur_ob.as_ref() || *callee_fl != cur_file {
                        let _ = writeln!(s, "cfi={}", names.fl(callee_ob, callee_fl));
                    }
                    let _ = writeln!(s, "cfn={}", names.func(cfn));
                    let _ = write!(s, "calls={count} ");
                    write_pos(s, kinds, target, &last, cp);
                    s.push('\n');
                    write_pos(s, kinds, pos, &last, cp);
                    write_costs(s, inclusive);
                    s.push('\n');
                    last.clone_from(pos);
                }
                ClEntry::Jump {
                    followed,
                    executed,
                    jfi,
                    jfn,
                    target,
                    pos,
                    ..
                } => {
                    if let Some(fi) = jfi {
                        let _ = writeln!(s, "jfi={}", names.fl(cur_ob.as_ref(), fi));
                    }
                    if let Some(fun) = jfn {
                        let _ = writeln!(s, "jfn={}", names.func(fun));
                    }
                    match followed {
                        Some(fo) => {
                            let _ = write!(s, "jcnd={fo}/{executed} ");
                        }
                        None => {
                            let _ = write!(s, "jump={executed} ");
                        }
                    }
                    write_pos(s, kinds, target, &last, cp);
                    s.push('\n');
                    write_pos(s, kinds, pos, &last, cp);
                    s.push('\n');
                    last.clone_from(pos);
                }
            }
        }
        if cur_file != f.file {
            let _ = writeln!(s, "fe={}", names.fl(cur_ob.as_ref(), &f.file));
        }
        s.push('\n');
        self.out.write_all(s.as_bytes())
    }

    /// Writes `totals:`: `totals`, or the self costs of the blocks written.
    pub(super) fn finish(self, totals: Option<&[u64]>) -> std::io::Result<()> {
        let t = totals.unwrap_or(&self.totals);
        writeln!(self.out, "totals: {}", join(t))
    }
}

/// The part's header lines, up to `summary:` and the blank lines after it.
fn write_header(s: &mut String, h: &ClHeader, summary: &[u64], opts: WriteOptions) {
    if !opts.continued {
        s.push_str("# callgrind format\n");
        let _ = writeln!(s, "version: {}", h.version);
        if let Some(c) = &h.creator {
            let _ = writeln!(s, "creator: {c}");
        }
        if let Some(pid) = h.pid {
            let _ = writeln!(s, "pid: {pid}");
        }
        if let Some(c) = &h.cmd {
            let _ = writeln!(s, "cmd: {c}");
        }
    } else {
        s.push('\n');
    }
    if let Some(part) = h.part {
        let _ = writeln!(s, "part: {part}");
    }
    if let Some(t) = h.thread {
        let _ = writeln!(s, "thread: {t}");
    }
    s.push('\n');
    let is_run = |d: &&String| d.starts_with("Timerange:") || d.starts_with("Trigger:");
    let cache: Vec<&String> = h.desc.iter().filter(|d| !is_run(d)).collect();
    let run: Vec<&String> = h.desc.iter().filter(is_run).collect();
    // A later part of a combined file (`--combine-dumps=yes`) leaves out the file's header
    // and the cache descriptions, as Callgrind does.
    if !opts.continued {
        s.push('\n');
        for d in &cache {
            let _ = writeln!(s, "desc: {d}");
        }
        if !cache.is_empty() {
            s.push('\n');
        }
    }
    if !run.is_empty() {
        for d in run {
            let _ = writeln!(s, "desc: {d}");
        }
        s.push('\n');
    }
    let kinds: Vec<&str> = h.positions.iter().map(|k| k.name()).collect();
    let _ = writeln!(s, "positions: {}", kinds.join(" "));
    for (short, long) in &h.event_names {
        let _ = writeln!(s, "event: {short} : {long}");
    }
    let _ = writeln!(s, "events: {}", h.events.join(" "));
    let _ = writeln!(s, "summary: {}", join(summary));
    s.push_str("\n\n");
}
