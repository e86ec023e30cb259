//! `rgrind annotate`, `rgrind diff` and `rgrind merge` on top of the readers.
//!
//! * `annotate [--inclusive=yes|no] [--auto=yes|no] [--threshold=P] FILE` prints the program
//!   totals, a per-function table (file:function, sorted by the first event) like
//!   `cg_annotate` / `callgrind_annotate`, and, with `--auto=yes` (default), every source file
//!   that can be found with its per-line counts. Per-function totals follow
//!   `callgrind_annotate`'s rules for Callgrind files (functions keyed by the current `fi=`
//!   file; `--inclusive=yes` uses the inclusive costs of calls into each function).
//! * `diff A B` writes B - A: for Cachegrind files a Cachegrind file with signed counts (like
//!   `cg_diff`), for Callgrind files a per-function table of differences.
//! * `merge [-o OUT] A B...` adds profiles of the same kind and events and writes the sum.
//!
//! # Invariants
//! * Output goes to the writer given (stdout for the CLI) or the `-o` file; nothing else is
//!   written. Bad files or arguments give a [`DumpError`], never a panic.
//!
//! This module deliberately does not reproduce the annotators' exact column layout; it
//! reproduces their numbers.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::path::Path;

use crate::cachegrind::{parse_cachegrind, CgProfile};
use crate::callgrind::{parse_callgrind, ClEntry, ClPart, WriteOptions};
use crate::error::DumpError;

/// A profile of either kind.
#[derive(Debug, Clone)]
pub enum AnyProfile {
    /// A Cachegrind file.
    Cachegrind(CgProfile),
    /// A Callgrind file (one entry per part).
    Callgrind(Vec<ClPart>),
}

/// True if `text` looks like a Callgrind file rather than a Cachegrind one.
pub fn is_callgrind_text(text: &str) -> bool {
    for line in text.lines().take(64) {
        if line.starts_with("# callgrind format")
            || line.starts_with("version:")
            || line.starts_with("creator:")
            || line.starts_with("positions:")
            || line.starts_with("part:")
        {
            return true;
        }
        if line.starts_with("events:") {
            return false;
        }
    }
    false
}

/// Reads and parses a profile file of either kind.
pub fn read_profile(path: &Path) -> Result<AnyProfile, DumpError> {
    let bytes = std::fs::read(path).map_err(|e| DumpError::read(path, e))?;
    let text = String::from_utf8_lossy(&bytes);
    let name = path.display().to_string();
    if is_callgrind_text(&text) {
        Ok(AnyProfile::Callgrind(parse_callgrind(&name, &text)?))
    } else {
        Ok(AnyProfile::Cachegrind(parse_cachegrind(&name, &text)?))
    }
}

/// Per-function totals as `callgrind_annotate` computes them, keyed by (file, function).
/// With `inclusive`, a called function's total is the sum of the inclusive costs of the
/// calls into it; functions never called keep self plus call costs.
pub fn callgrind_function_totals(
    part: &ClPart,
    inclusive: bool,
) -> BTreeMap<(String, String), Vec<u64>> {
    let n = part.header.events.len();
    let mut fn_totals: BTreeMap<(String, String), Vec<u64>> = BTreeMap::new();
    let mut cfn_totals: BTreeMap<(String, String), Vec<u64>> = BTreeMap::new();
    for f in &part.functions {
        for e in &f.entries {
            match e {
                ClEntry::Cost { file, costs, .. } => {
                    let t = fn_totals
                        .entry((file.clone(), f.name.name.clone()))
                        .or_insert_with(|| vec![0; n]);
                    crate::cachegrind::add_into(t, costs);
                }
                ClEntry::Call {
                    file,
                    cfi,
                    cfn,
                    inclusive: incl,
                    ..
                } => {
                    let callee = (
                        cfi.clone().unwrap_or_else(|| file.clone()),
                        cfn.name.clone(),
                    );
                    crate::cachegrind::add_into(
                        cfn_totals.entry(callee).or_insert_with(|| vec![0; n]),
                        incl,
                    );
                    let t = fn_totals
                        .entry((file.clone(), f.name.name.clone()))
                        .or_insert_with(|| vec![0; n]);
                    if inclusive {
                        crate::cachegrind::add_into(t, incl);
                    }
                }
                ClEntry::Jump { .. } => {}
            }
        }
    }
    if inclusive {
        for (k, v) in cfn_totals {
            fn_totals.insert(k, v);
        }
    }
    fn_totals
}

/// `1234567` -> `1,234,567`.
pub fn commify(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

fn commify_signed(n: i128) -> String {
    let abs = commify(u64::try_from(n.unsigned_abs()).unwrap_or(u64::MAX));
    if n < 0 {
        format!("-{abs}")
    } else {
        abs
    }
}

struct AnnotateOpts {
    inclusive: bool,
    auto: bool,
    threshold: f64,
}

fn parse_bool(opt: &str, v: &str) -> Result<bool, DumpError> {
    match v {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => Err(DumpError::Usage(format!(
            "Invalid boolean value '{v}' for {opt} (should be 'yes' or 'no')"
        ))),
    }
}

fn table(
    out: &mut dyn Write,
    events: &[String],
    totals: &[u64],
    rows: &[(String, Vec<u64>)],
    threshold: f64,
) -> std::io::Result<()> {
    let dash = "-".repeat(80);
    writeln!(out, "{dash}")?;
    let cells = |c: &[u64]| -> Vec<String> {
        c.iter()
            .zip(totals)
            .map(|(&x, &t)| {
                if x == 0 {
                    "0".to_string()
                } else {
                    let pct = if t == 0 {
                        0.0
                    } else {
                        100.0 * x as f64 / t as f64
                    };
                    format!("{} ({pct:5.2}%)", commify(x))
                }
            })
            .collect()
    };
    let mut widths: Vec<usize> = events.iter().map(String::len).collect();
    let tot_cells: Vec<String> = totals
        .iter()
        .map(|&t| format!("{} (100.0%)", commify(t)))
        .collect();
    let shown: Vec<(Vec<String>, &String)> = rows
        .iter()
        .filter(|(_, c)| {
            let first = c.first().copied().unwrap_or(0);
            let t = totals.first().copied().unwrap_or(0);
            t == 0 || (first as f64) * 100.0 / (t as f64) >= threshold || first == t
        })
        .map(|(name, c)| (cells(c), name))
        .collect();
    for row in std::iter::once(&tot_cells).chain(shown.iter().map(|r| &r.0)) {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.len());
        }
    }
    let line = |cells: &[String]| -> String {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:>w$}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    writeln!(out, "{}", line(events))?;
    writeln!(out, "{dash}")?;
    writeln!(out, "{}  PROGRAM TOTALS", line(&tot_cells))?;
    writeln!(out)?;
    writeln!(out, "{dash}")?;
    writeln!(out, "{}  file:function", line(events))?;
    writeln!(out, "{dash}")?;
    for (c, name) in shown {
        writeln!(out, "{}  {name}", line(&c))?;
    }
    Ok(())
}

fn sorted_rows(map: BTreeMap<(String, String), Vec<u64>>) -> Vec<(String, Vec<u64>)> {
    let mut rows: Vec<(String, Vec<u64>)> = map
        .into_iter()
        .map(|((fl, f), c)| (format!("{fl}:{f}"), c))
        .collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    rows
}

fn annotate_sources(
    out: &mut dyn Write,
    per_file_lines: &BTreeMap<String, BTreeMap<u64, Vec<u64>>>,
) -> std::io::Result<()> {
    for (file, lines) in per_file_lines {
        let path = Path::new(file);
        let Ok(src) = std::fs::read_to_string(path) else {
            continue;
        };
        writeln!(out, "{}", "-".repeat(80))?;
        writeln!(out, "-- Auto-annotated source: {file}")?;
        writeln!(out, "{}", "-".repeat(80))?;
        for (i, text) in src.lines().enumerate() {
            let ln = i as u64 + 1;
            let cells = match lines.get(&ln) {
                Some(c) => c.iter().map(|&x| commify(x)).collect::<Vec<_>>().join(" "),
                None => ".".to_string(),
            };
            writeln!(out, "{cells:>12}  {text}")?;
        }
        writeln!(out)?;
    }
    Ok(())
}

fn annotate(out: &mut dyn Write, path: &Path, o: &AnnotateOpts) -> Result<(), DumpError> {
    let prof = read_profile(path)?;
    let w = |e: std::io::Error| DumpError::write("<stdout>", e);
    let dash = "-".repeat(80);
    match prof {
        AnyProfile::Cachegrind(p) => {
            let totals = p.totals();
            if let Some(s) = &p.summary {
                if *s != totals {
                    return Err(DumpError::Invalid(format!(
                        "{}: 'summary:' line ({s:?}) differs from the totals of the data ({totals:?})",
                        path.display()
                    )));
                }
            }
            writeln!(out, "{dash}").map_err(w)?;
            for d in &p.desc {
                writeln!(out, "{d}").map_err(w)?;
            }
            writeln!(out, "Command:          {}", p.cmd).map_err(w)?;
            writeln!(out, "Data file:        {}", path.display()).map_err(w)?;
            writeln!(out, "Events recorded:  {}", p.events.join(" ")).map_err(w)?;
            writeln!(out).map_err(w)?;
            table(
                out,
                &p.events,
                &totals,
                &sorted_rows(p.function_totals()),
                o.threshold,
            )
            .map_err(w)?;
            if o.auto {
                let mut per_file: BTreeMap<String, BTreeMap<u64, Vec<u64>>> = BTreeMap::new();
                for ((fl, _), lines) in &p.records {
                    let e = per_file.entry(fl.clone()).or_default();
                    for (ln, c) in lines {
                        let slot = e.entry(u64::from(*ln)).or_insert_with(|| vec![0; c.len()]);
                        crate::cachegrind::add_into(slot, c);
                    }
                }
                annotate_sources(out, &per_file).map_err(w)?;
            }
        }
        AnyProfile::Callgrind(parts) => {
            for part in &parts {
                let h = &part.header;
                writeln!(out, "{dash}").map_err(w)?;
                writeln!(
                    out,
                    "Profile data file '{}' (creator: {})",
                    path.display(),
                    h.creator.as_deref().unwrap_or("?")
                )
                .map_err(w)?;
                writeln!(out, "{dash}").map_err(w)?;
                for d in &h.desc {
                    writeln!(out, "{d}").map_err(w)?;
                }
                writeln!(
                    out,
                    "Profiled target: {} (PID {}, part {})",
                    h.cmd.as_deref().unwrap_or("").trim_start(),
                    h.pid.unwrap_or(0),
                    h.part.unwrap_or(1)
                )
                .map_err(w)?;
                writeln!(out, "Events recorded:  {}", h.events.join(" ")).map_err(w)?;
                writeln!(out).map_err(w)?;
                let totals = match &h.summary {
                    Some(s) if s.iter().any(|&x| x != 0) && h.totals.is_none() => s.clone(),
                    _ => part.totals(),
                };
                let rows = sorted_rows(callgrind_function_totals(part, o.inclusive));
                table(out, &h.events, &totals, &rows, o.threshold).map_err(w)?;
                if o.auto && h.positions.contains(&crate::callgrind::PosKind::Line) {
                    let li = h
                        .positions
                        .iter()
                        .position(|k| *k == crate::callgrind::PosKind::Line)
                        .unwrap_or(0);
                    let mut per_file: BTreeMap<String, BTreeMap<u64, Vec<u64>>> = BTreeMap::new();
                    for f in &part.functions {
                        for e in &f.entries {
                            if let ClEntry::Cost { file, pos, costs } = e {
                                let ln = pos.get(li).copied().unwrap_or(0);
                                let slot = per_file
                                    .entry(file.clone())
                                    .or_default()
                                    .entry(ln)
                                    .or_insert_with(|| vec![0; h.events.len()]);
                                crate::cachegrind::add_into(slot, costs);
                            }
                        }
                    }
                    annotate_sources(out, &per_file).map_err(w)?;
                }
            }
        }
    }
    Ok(())
}

fn diff(out: &mut dyn Write, a: &Path, b: &Path) -> Result<(), DumpError> {
    let w = |e: std::io::Error| DumpError::write("<stdout>", e);
    let (pa, pb) = (read_profile(a)?, read_profile(b)?);
    let (ev, ta, tb) = match (&pa, &pb) {
        (AnyProfile::Cachegrind(x), AnyProfile::Cachegrind(y)) => {
            if x.events != y.events {
                return Err(DumpError::Usage(format!(
                    "events of '{}' and '{}' differ",
                    a.display(),
                    b.display()
                )));
            }
            // cg_diff: a Cachegrind file of per-line differences.
            let mut keys: BTreeMap<(String, String), BTreeMap<u32, Vec<i128>>> = BTreeMap::new();
            for (sign, p) in [(-1i128, x), (1, y)] {
                for (k, lines) in &p.records {
                    for (ln, c) in lines {
                        let slot = keys
                            .entry(k.clone())
                            .or_default()
                            .entry(*ln)
                            .or_insert_with(|| vec![0; c.len()]);
                        for (s, v) in slot.iter_mut().zip(c) {
                            *s += sign * i128::from(*v);
                        }
                    }
                }
            }
            writeln!(
                out,
                "desc: Files compared:   {}; {}",
                a.display(),
                b.display()
            )
            .map_err(w)?;
            writeln!(out, "cmd: {}; {}", x.cmd, y.cmd).map_err(w)?;
            writeln!(out, "events: {}", x.events.join(" ")).map_err(w)?;
            let mut total = vec![0i128; x.events.len()];
            let mut cur_fl = None;
            for ((fl, f), lines) in &keys {
                let nonzero: Vec<_> = lines
                    .iter()
                    .filter(|(_, c)| c.iter().any(|&v| v != 0))
                    .collect();
                if nonzero.is_empty() {
                    continue;
                }
                if cur_fl != Some(fl) {
                    writeln!(out, "fl={fl}").map_err(w)?;
                    cur_fl = Some(fl);
                }
                writeln!(out, "fn={f}").map_err(w)?;
                for (ln, c) in nonzero {
                    let s: Vec<String> = c.iter().map(i128::to_string).collect();
                    writeln!(out, "{ln} {}", s.join(" ")).map_err(w)?;
                    for (t, v) in total.iter_mut().zip(c) {
                        *t += v;
                    }
                }
            }
            let s: Vec<String> = total.iter().map(i128::to_string).collect();
            writeln!(out, "summary: {}", s.join(" ")).map_err(w)?;
            return Ok(());
        }
        (AnyProfile::Callgrind(x), AnyProfile::Callgrind(y)) => {
            let (Some(x0), Some(y0)) = (x.first(), y.first()) else {
                return Err(DumpError::Invalid("empty Callgrind file".into()));
            };
            if x0.header.events != y0.header.events {
                return Err(DumpError::Usage(format!(
                    "events of '{}' and '{}' differ",
                    a.display(),
                    b.display()
                )));
            }
            let sum = |parts: &Vec<ClPart>| {
                let mut m: BTreeMap<(String, String), Vec<u64>> = BTreeMap::new();
                for p in parts {
                    for (k, v) in callgrind_function_totals(p, false) {
                        crate::cachegrind::add_into(
                            m.entry(k).or_insert_with(|| vec![0; v.len()]),
                            &v,
                        );
                    }
                }
                m
            };
            (x0.header.events.clone(), sum(x), sum(y))
        }
        _ => {
            return Err(DumpError::Usage(
                "cannot diff a Cachegrind file against a Callgrind file".into(),
            ))
        }
    };
    let mut keys: Vec<&(String, String)> = ta.keys().chain(tb.keys()).collect();
    keys.sort();
    keys.dedup();
    let zero = vec![0u64; ev.len()];
    let mut rows: Vec<(Vec<i128>, String)> = keys
        .into_iter()
        .map(|k| {
            let (va, vb) = (ta.get(k).unwrap_or(&zero), tb.get(k).unwrap_or(&zero));
            let d: Vec<i128> = va
                .iter()
                .zip(vb)
                .map(|(x, y)| i128::from(*y) - i128::from(*x))
                .collect();
            (d, format!("{}:{}", k.0, k.1))
        })
        .filter(|(d, _)| d.iter().any(|&x| x != 0))
        .collect();
    rows.sort_by(|p, q| {
        q.0.first()
            .map(|v| v.abs())
            .cmp(&p.0.first().map(|v| v.abs()))
            .then(p.1.cmp(&q.1))
    });
    writeln!(out, "{}  file:function", ev.join(" ")).map_err(w)?;
    for (d, name) in rows {
        let cells: Vec<String> = d.into_iter().map(commify_signed).collect();
        writeln!(out, "{}  {name}", cells.join(" ")).map_err(w)?;
    }
    Ok(())
}

fn merge(out: &mut dyn Write, files: &[&Path]) -> Result<(), DumpError> {
    let w = |e: std::io::Error| DumpError::write("<output>", e);
    let mut cg: Option<CgProfile> = None;
    let mut cl: Option<ClPart> = None;
    for f in files {
        match read_profile(f)? {
            AnyProfile::Cachegrind(p) => {
                if cl.is_some() {
                    return Err(DumpError::Usage(
                        "cannot merge Cachegrind and Callgrind files".into(),
                    ));
                }
                match &mut cg {
                    None => cg = Some(p),
                    Some(acc) => {
                        if acc.events != p.events {
                            return Err(DumpError::Usage(format!(
                                "events of '{}' differ",
                                f.display()
                            )));
                        }
                        for (k, lines) in p.records {
                            let dst = acc.records.entry(k).or_default();
                            for (ln, c) in lines {
                                let slot = dst.entry(ln).or_insert_with(|| vec![0; c.len()]);
                                crate::cachegrind::add_into(slot, &c);
                            }
                        }
                    }
                }
            }
            AnyProfile::Callgrind(parts) => {
                if cg.is_some() {
                    return Err(DumpError::Usage(
                        "cannot merge Cachegrind and Callgrind files".into(),
                    ));
                }
                for mut p in parts {
                    // Ids from different files collide: let the writer renumber by name.
                    for func in &mut p.functions {
                        func.name.id = None;
                        for e in &mut func.entries {
                            match e {
                                ClEntry::Call { cfn, .. } => cfn.id = None,
                                ClEntry::Jump { jfn: Some(j), .. } => j.id = None,
                                _ => {}
                            }
                        }
                    }
                    let t = p.totals();
                    match &mut cl {
                        None => {
                            p.ob_ids.clear();
                            p.fl_ids.clear();
                            p.header.summary = Some(t.clone());
                            p.header.totals = Some(t);
                            cl = Some(p);
                        }
                        Some(acc) => {
                            if acc.header.events != p.header.events
                                || acc.header.positions != p.header.positions
                            {
                                return Err(DumpError::Usage(format!(
                                    "events or positions of '{}' differ",
                                    f.display()
                                )));
                            }
                            acc.functions.extend(p.functions);
                            for slot in [&mut acc.header.summary, &mut acc.header.totals]
                                .into_iter()
                                .flatten()
                            {
                                crate::cachegrind::add_into(slot, &t);
                            }
                        }
                    }
                }
            }
        }
    }
    if let Some(p) = cg {
        p.write_to(out).map_err(w)?;
    } else if let Some(p) = cl {
        p.write_to(out, WriteOptions::default()).map_err(w)?;
    }
    Ok(())
}

/// Runs `rgrind <name> args...` for `annotate`, `diff` and `merge`, writing to stdout (or the
/// `-o` file for merge). Returns the exit status.
pub fn run_subcommand(name: &str, args: &[OsString]) -> Result<i32, DumpError> {
    let stdout = std::io::stdout();
    let mut lock = stdout.lock();
    run_subcommand_to(name, args, &mut lock)
}

/// [`run_subcommand`] with an explicit output (for tests and embedding).
pub fn run_subcommand_to(
    name: &str,
    args: &[OsString],
    out: &mut dyn Write,
) -> Result<i32, DumpError> {
    let args: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    match name {
        "annotate" => {
            let mut o = AnnotateOpts {
                inclusive: false,
                auto: true,
                threshold: 0.1,
            };
            let mut files = Vec::new();
            for a in &args {
                if let Some(v) = a.strip_prefix("--inclusive=") {
                    o.inclusive = parse_bool("--inclusive", v)?;
                } else if let Some(v) = a
                    .strip_prefix("--auto=")
                    .or_else(|| a.strip_prefix("--annotate="))
                {
                    o.auto = parse_bool("--auto", v)?;
                } else if let Some(v) = a.strip_prefix("--threshold=") {
                    o.threshold = v
                        .parse()
                        .ok()
                        .filter(|t: &f64| (0.0..=100.0).contains(t))
                        .ok_or_else(|| DumpError::Usage(format!("bad --threshold value '{v}'")))?;
                } else if a.starts_with("--") {
                    return Err(DumpError::Usage(format!("annotate: unknown option '{a}'")));
                } else {
                    files.push(a);
                }
            }
            let [file] = files.as_slice() else {
                return Err(DumpError::Usage(
                    "usage: rgrind annotate [--inclusive=yes|no] [--auto=yes|no] [--threshold=P] FILE".into(),
                ));
            };
            annotate(out, Path::new(file), &o)?;
            Ok(0)
        }
        "diff" => {
            let [a, b] = args.as_slice() else {
                return Err(DumpError::Usage("usage: rgrind diff FILE1 FILE2".into()));
            };
            diff(out, Path::new(a), Path::new(b))?;
            Ok(0)
        }
        "merge" => {
            let mut files: Vec<&Path> = Vec::new();
            let mut outfile: Option<&str> = None;
            let mut it = args.iter();
            while let Some(a) = it.next() {
                if a == "-o" {
                    outfile =
                        Some(it.next().ok_or_else(|| {
                            DumpError::Usage("merge: -o needs a file name".into())
                        })?);
                } else if let Some(v) = a.strip_prefix("--out=") {
                    outfile = Some(v);
                } else {
                    files.push(Path::new(a));
                }
            }
            if files.is_empty() {
                return Err(DumpError::Usage(
                    "usage: rgrind merge [-o OUT] FILE...".into(),
                ));
            }
            match outfile {
                Some(o) => {
                    let f = std::fs::File::create(o).map_err(|e| DumpError::write(o, e))?;
                    let mut bw = std::io::BufWriter::new(f);
                    merge(&mut bw, &files)?;
                    bw.flush().map_err(|e| DumpError::write(o, e))?;
                }
                None => merge(out, &files)?,
            }
            Ok(0)
        }
        _ => Err(DumpError::Usage(format!("unknown subcommand '{name}'"))),
    }
}
