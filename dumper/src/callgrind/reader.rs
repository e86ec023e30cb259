//! Reads Callgrind profile files (format version 1), including everything the format
//! reference allows: several parts (`--combine-dumps=yes`), name compression, subposition
//! compression, hex positions, `positions:` with `instr`/`bb`/`line`, `fi=`/`fe=`, `cfl=`,
//! `jump=`/`jcnd=` with `jfi=`/`jfn=`, `event:` long names, comments and blank lines.
//!
//! # Invariants
//! * Never panics on any input: every problem is a [`DumpError::Parse`] naming the file and
//!   the 1-based line.
//! * Relative subpositions are resolved against the last cost, call-site or jump-source line
//!   (never against a `calls=`/`jump=` target), the way `callgrind_annotate` reads them; the
//!   reference is carried across `fn=` lines.
//!
//! This module deliberately does not interpret costs (no inclusive-cost computation).

use std::collections::HashMap;

use super::{ClEntry, ClFunction, ClHeader, ClPart, FnName, PosKind};
use crate::cachegrind::reader::clip;
use crate::error::DumpError;

#[derive(Default)]
struct NameTables {
    ob: HashMap<u64, String>,
    fl: HashMap<u64, String>,
    func: HashMap<u64, String>,
}

enum Space {
    Ob,
    Fl,
    Fn,
}

enum Pending {
    None,
    Call {
        count: u64,
        target: Vec<u64>,
    },
    Jump {
        followed: Option<u64>,
        executed: u64,
        target: Vec<u64>,
    },
}

struct Reader<'a> {
    path: &'a str,
    lno: usize,
    names: NameTables,
    parts: Vec<ClPart>,
    in_body: bool,
    ob: Option<String>,
    fl: Option<String>,
    cur_file: Option<String>,
    cob: Option<String>,
    cfi: Option<String>,
    cfn: Option<FnName>,
    jfi: Option<String>,
    jfn: Option<FnName>,
    pending: Pending,
    last: Vec<u64>,
}

/// Parses a Callgrind profile; `path` is only used in error messages. Returns one
/// [`ClPart`] per part in the file.
pub fn parse_callgrind(path: &str, text: &str) -> Result<Vec<ClPart>, DumpError> {
    let mut r = Reader {
        path,
        lno: 0,
        names: NameTables::default(),
        parts: vec![ClPart::default()],
        in_body: false,
        ob: None,
        fl: None,
        cur_file: None,
        cob: None,
        cfi: None,
        cfn: None,
        jfi: None,
        jfn: None,
        pending: Pending::None,
        last: Vec::new(),
    };
    for (i, raw) in text.lines().enumerate() {
        r.lno = i + 1;
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        r.line(line)?;
    }
    if !matches!(r.pending, Pending::None) {
        return Err(r.err("file ends after a 'calls='/'jump=' line"));
    }
    for p in &r.parts {
        if p.header.events.is_empty() {
            return Err(DumpError::parse(
                path,
                r.lno.max(1),
                "missing 'events:' line",
            ));
        }
    }
    Ok(r.parts)
}

fn parse_num(s: &str) -> Option<u64> {
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()
    } else if s.bytes().all(|b| b.is_ascii_digit()) && !s.is_empty() {
        s.parse().ok()
    } else {
        None
    }
}

impl Reader<'_> {
    fn err(&self, msg: impl Into<String>) -> DumpError {
        DumpError::parse(self.path, self.lno, msg)
    }

    fn part(&mut self) -> &mut ClPart {
        // `parts` always holds at least one element (created in parse_callgrind).
        let n = self.parts.len();
        &mut self.parts[n - 1]
    }

    fn header(&mut self) -> &mut ClHeader {
        &mut self.part().header
    }

    /// A header line seen after the body started opens a new part that inherits the
    /// process-level fields.
    fn maybe_new_part(&mut self) {
        if self.in_body {
            let prev = &self.part().header;
            let h = ClHeader {
                version: prev.version.clone(),
                creator: prev.creator.clone(),
                pid: prev.pid,
                cmd: prev.cmd.clone(),
                thread: prev.thread,
                positions: prev.positions.clone(),
                events: prev.events.clone(),
                ..ClHeader::default()
            };
            self.parts.push(ClPart {
                header: h,
                ..ClPart::default()
            });
            self.in_body = false;
            self.last.clear();
        }
    }

    fn name(&mut self, space: Space, s: &str) -> Result<(Option<u64>, String), DumpError> {
        let s = s.trim_start();
        let Some(rest) = s.strip_prefix('(') else {
            return Ok((None, s.to_string()));
        };
        let Some(close) = rest.find(')') else {
            return Ok((None, s.to_string()));
        };
        let Ok(id) = rest[..close].trim().parse::<u64>() else {
            // Not an id: a plain name that starts with '(' such as "(below main)".
            return Ok((None, s.to_string()));
        };
        let after = rest[close + 1..].trim_start();
        let table = match space {
            Space::Ob => &mut self.names.ob,
            Space::Fl => &mut self.names.fl,
            Space::Fn => &mut self.names.func,
        };
        if after.is_empty() {
            match table.get(&id) {
                Some(n) => Ok((Some(id), n.clone())),
                None => Err(self.err(format!("name id ({id}) used before it is defined"))),
            }
        } else {
            table.insert(id, after.to_string());
            Ok((Some(id), after.to_string()))
        }
    }

    fn positions(
        &self,
        toks: &[&str],
        update: bool,
        last: &mut Vec<u64>,
    ) -> Result<Vec<u64>, DumpError> {
        let kinds = self.parts.last().map_or(1, |p| p.header.positions.len());
        if toks.len() < kinds {
            return Err(self.err(format!("expected {kinds} position(s)")));
        }
        last.resize(kinds, 0);
        let mut out = Vec::with_capacity(kinds);
        for (i, t) in toks.iter().take(kinds).enumerate() {
            let l = last[i];
            let v = if *t == "*" {
                Some(l)
            } else if let Some(d) = t.strip_prefix('+') {
                parse_num(d).and_then(|d| l.checked_add(d))
            } else if let Some(d) = t.strip_prefix('-') {
                parse_num(d).and_then(|d| l.checked_sub(d))
            } else {
                parse_num(t)
            };
            match v {
                Some(v) => out.push(v),
                None => return Err(self.err(format!("bad position '{}'", clip(t)))),
            }
        }
        if update {
            last.clone_from(&out);
        }
        Ok(out)
    }

    fn costs(&self, toks: &[&str]) -> Result<Vec<u64>, DumpError> {
        let n = self.parts.last().map_or(0, |p| p.header.events.len());
        if toks.len() > n {
            return Err(self.err(format!("{} costs but there are {n} events", toks.len())));
        }
        toks.iter()
            .map(|t| parse_num(t).ok_or_else(|| self.err(format!("bad cost '{}'", clip(t)))))
            .collect()
    }

    fn current_fn(&mut self) -> Result<&mut ClFunction, DumpError> {
        let lno = self.lno;
        let path = self.path;
        self.part()
            .functions
            .last_mut()
            .ok_or_else(|| DumpError::parse(path, lno, "cost or call line before any 'fn='"))
    }

    fn line(&mut self, line: &str) -> Result<(), DumpError> {
        if line.trim().is_empty() || line.starts_with('#') {
            return Ok(());
        }
        let first = line.as_bytes()[0];
        if first.is_ascii_digit() || first == b'+' || first == b'-' || first == b'*' {
            return self.cost_line(line);
        }
        if !matches!(self.pending, Pending::None) {
            return Err(self.err("expected a position line after 'calls='/'jump='"));
        }
        if let Some((key, val)) = line.split_once('=') {
            if !key.contains(':') && !key.contains(' ') {
                return self.spec_line(key, val);
            }
        }
        let Some((key, val)) = line.split_once(':') else {
            return Err(self.err(format!("unexpected line '{}'", clip(line))));
        };
        let val = val.strip_prefix(' ').unwrap_or(val);
        match key {
            "version" => {
                self.maybe_new_part();
                let v = val.trim();
                if v.split('.')
                    .next()
                    .and_then(|m| m.parse::<u64>().ok())
                    .is_none_or(|m| m >= 2)
                {
                    return Err(self.err(format!("unsupported format version '{}'", clip(v))));
                }
                self.header().version = v.to_string();
            }
            "creator" => {
                self.maybe_new_part();
                self.header().creator = Some(val.to_string());
            }
            "pid" | "part" | "thread" => {
                self.maybe_new_part();
                let n = val
                    .trim()
                    .parse::<u64>()
                    .map_err(|_| self.err(format!("bad '{key}:' value '{}'", clip(val))))?;
                let h = self.header();
                match key {
                    "pid" => h.pid = Some(n),
                    "part" => h.part = Some(n),
                    _ => h.thread = Some(n),
                }
            }
            "cmd" => {
                self.maybe_new_part();
                self.header().cmd = Some(val.to_string());
            }
            "desc" => {
                self.maybe_new_part();
                self.header().desc.push(val.to_string());
            }
            "positions" => {
                self.maybe_new_part();
                let mut kinds = Vec::new();
                for w in val.split_whitespace() {
                    kinds.push(match w {
                        "instr" | "addr" => PosKind::Instr,
                        "bb" => PosKind::Bb,
                        "line" => PosKind::Line,
                        _ => return Err(self.err(format!("unknown position kind '{}'", clip(w)))),
                    });
                }
                if kinds.is_empty() {
                    return Err(self.err("empty 'positions:' line"));
                }
                self.header().positions = kinds;
            }
            "event" => {
                self.maybe_new_part();
                let (short, long) = match val.split_once(':') {
                    Some((s, l)) => (s.trim().to_string(), l.trim().to_string()),
                    None => (val.trim().to_string(), String::new()),
                };
                self.header().event_names.push((short, long));
            }
            "events" => {
                self.maybe_new_part();
                let ev: Vec<String> = val.split_whitespace().map(str::to_string).collect();
                if ev.is_empty() {
                    return Err(self.err("empty 'events:' line"));
                }
                self.header().events = ev;
            }
            "summary" | "totals" => {
                let n = self.header().events.len();
                if n == 0 {
                    return Err(self.err(format!("'{key}:' before 'events:'")));
                }
                let toks: Vec<&str> = val.split_whitespace().collect();
                let mut v = self.costs(&toks)?;
                v.resize(n, 0);
                let h = self.header();
                if key == "summary" {
                    h.summary = Some(v);
                } else {
                    h.totals = Some(v);
                }
            }
            _ => return Err(self.err(format!("unknown line '{}'", clip(line)))),
        }
        Ok(())
    }

    fn spec_line(&mut self, key: &str, val: &str) -> Result<(), DumpError> {
        if self.header().events.is_empty() {
            return Err(self.err(format!("'{key}=' before 'events:'")));
        }
        self.in_body = true;
        match key {
            "ob" => {
                let (id, n) = self.name(Space::Ob, val)?;
                self.note_ob(id, &n);
                self.ob = Some(n);
            }
            "fl" => {
                let (id, n) = self.name(Space::Fl, val)?;
                self.note_fl(id, self.ob.clone(), &n);
                self.fl = Some(n.clone());
                self.cur_file = Some(n);
            }
            "fi" | "fe" => {
                let (id, n) = self.name(Space::Fl, val)?;
                self.current_fn()?;
                self.note_fl(id, self.ob.clone(), &n);
                self.cur_file = Some(n);
            }
            "fn" => {
                let (id, name) = self.name(Space::Fn, val)?;
                let Some(file) = self.fl.clone() else {
                    return Err(self.err("'fn=' before any 'fl='"));
                };
                self.cur_file = Some(file.clone());
                let object = self.ob.clone();
                self.part().functions.push(ClFunction {
                    object,
                    file,
                    name: FnName { id, name },
                    entries: Vec::new(),
                });
            }
            "cob" => {
                let (id, n) = self.name(Space::Ob, val)?;
                self.note_ob(id, &n);
                self.cob = Some(n);
            }
            "cfi" | "cfl" => {
                let (id, n) = self.name(Space::Fl, val)?;
                self.note_fl(id, self.cob.clone().or_else(|| self.ob.clone()), &n);
                self.cfi = Some(n);
            }
            "cfn" => {
                let (id, name) = self.name(Space::Fn, val)?;
                self.cfn = Some(FnName { id, name });
            }
            "jfi" => {
                let (id, n) = self.name(Space::Fl, val)?;
                self.note_fl(id, self.ob.clone(), &n);
                self.jfi = Some(n);
            }
            "jfn" => {
                let (id, name) = self.name(Space::Fn, val)?;
                self.jfn = Some(FnName { id, name });
            }
            "calls" => {
                if self.cfn.is_none() {
                    return Err(self.err("'calls=' without a preceding 'cfn='"));
                }
                let toks: Vec<&str> = val.split_whitespace().collect();
                let count = toks
                    .first()
                    .and_then(|t| parse_num(t))
                    .ok_or_else(|| self.err("bad 'calls=' count"))?;
                let mut last = self.last.clone();
                let target = self.positions(&toks[1..], false, &mut last)?;
                self.pending = Pending::Call { count, target };
            }
            "jump" | "jcnd" => {
                let toks: Vec<&str> = val.split_whitespace().collect();
                let first = toks.first().copied().unwrap_or("");
                let (followed, executed) = match first.split_once('/') {
                    Some((a, b)) => (parse_num(a), parse_num(b)),
                    None => (None, parse_num(first)),
                };
                let Some(executed) = executed else {
                    return Err(self.err(format!("bad '{key}=' count '{}'", clip(first))));
                };
                if key == "jcnd" && followed.is_none() && first.contains('/') {
                    return Err(self.err(format!("bad 'jcnd=' count '{}'", clip(first))));
                }
                // The format reference writes "jcnd=exe-count jump-count"; Callgrind writes
                // "followed/executed". Accept both.
                let (followed, rest) = if key == "jcnd" && followed.is_none() {
                    let fo = toks.get(1).and_then(|t| parse_num(t));
                    match fo {
                        Some(f) if toks.len() > 1 + self.npos() => (Some(f), &toks[2..]),
                        _ => (Some(0), &toks[1..]),
                    }
                } else {
                    (followed, toks.get(1..).unwrap_or(&[]))
                };
                let mut last = self.last.clone();
                let target = self.positions(rest, false, &mut last)?;
                self.pending = Pending::Jump {
                    followed: if key == "jump" { None } else { followed },
                    executed,
                    target,
                };
            }
            _ => return Err(self.err(format!("unknown specification '{}='", clip(key)))),
        }
        Ok(())
    }

    fn note_ob(&mut self, id: Option<u64>, name: &str) {
        if let Some(id) = id {
            self.part().ob_ids.insert(name.to_string(), id);
        }
    }

    fn note_fl(&mut self, id: Option<u64>, ob: Option<String>, name: &str) {
        if let Some(id) = id {
            self.part()
                .fl_ids
                .insert((ob.unwrap_or_default(), name.to_string()), id);
        }
    }

    fn npos(&self) -> usize {
        self.parts.last().map_or(1, |p| p.header.positions.len())
    }

    fn cost_line(&mut self, line: &str) -> Result<(), DumpError> {
        if self.header().events.is_empty() {
            return Err(self.err("cost line before 'events:'"));
        }
        self.in_body = true;
        let toks: Vec<&str> = line.split_whitespace().collect();
        let mut last = std::mem::take(&mut self.last);
        let pos = self.positions(&toks, true, &mut last);
        self.last = last;
        let pos = pos?;
        let costs = self.costs(&toks[self.npos()..])?;
        let file = match &self.cur_file {
            Some(f) => f.clone(),
            None => return Err(self.err("cost line before any 'fl='")),
        };
        let entry = match std::mem::replace(&mut self.pending, Pending::None) {
            Pending::None => ClEntry::Cost { file, pos, costs },
            Pending::Call { count, target } => {
                let cob = self.cob.take().or_else(|| self.ob.clone());
                let cfi = self.cfi.take().or_else(|| Some(file.clone()));
                let cfn = self
                    .cfn
                    .take()
                    .ok_or_else(|| self.err("call without 'cfn='"))?;
                ClEntry::Call {
                    file,
                    cob,
                    cfi,
                    cfn,
                    count,
                    target,
                    pos,
                    inclusive: costs,
                }
            }
            Pending::Jump {
                followed,
                executed,
                target,
            } => ClEntry::Jump {
                file,
                followed,
                executed,
                jfi: self.jfi.take(),
                jfn: self.jfn.take(),
                target,
                pos,
            },
        };
        self.current_fn()?.entries.push(entry);
        Ok(())
    }
}
