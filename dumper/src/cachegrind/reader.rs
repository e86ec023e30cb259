//! Reads `cachegrind.out` files: everything the format allows, not just what rgrind writes.
//!
//! Accepted: any number of `desc:` lines, then `cmd:` (optional here, cg_annotate 3.19 wants
//! it), `events:`; in the body `fl=`, `fi=`, `fe=`, `fn=`, count lines (`line c1 c2 ...`,
//! missing trailing counts are zero), blank lines and `#` comments; a final `summary:`.
//! Records with the same (file, function, line) are added together.
//!
//! # Invariants
//! * Never panics: every malformed line is an error naming the file and the line.
//!
//! This module deliberately does not check `summary:` against the totals (see
//! [`CgProfile::totals`]); annotate reports a mismatch.

use super::{add_into, CgProfile};
use crate::error::DumpError;

/// Parses a Cachegrind profile; `path` is only used in error messages.
pub fn parse_cachegrind(path: &str, text: &str) -> Result<CgProfile, DumpError> {
    let mut p = CgProfile::default();
    let mut have_events = false;
    let mut have_cmd = false;
    let mut file: Option<String> = None;
    let mut func: Option<String> = None;
    let mut fn_file: Option<String> = None;
    for (i, raw) in text.lines().enumerate() {
        let lno = i + 1;
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        if !have_events {
            if let Some(d) = line.strip_prefix("desc:") {
                p.desc.push(d.strip_prefix(' ').unwrap_or(d).to_string());
            } else if let Some(c) = line.strip_prefix("cmd:") {
                if have_cmd {
                    return Err(DumpError::parse(path, lno, "duplicate 'cmd:' line"));
                }
                p.cmd = c.strip_prefix(' ').unwrap_or(c).to_string();
                have_cmd = true;
            } else if let Some(e) = line.strip_prefix("events:") {
                p.events = e.split_whitespace().map(str::to_string).collect();
                if p.events.is_empty() {
                    return Err(DumpError::parse(path, lno, "empty 'events:' line"));
                }
                have_events = true;
            } else {
                return Err(DumpError::parse(
                    path,
                    lno,
                    format!(
                        "expected 'desc:', 'cmd:' or 'events:', found '{}'",
                        clip(line)
                    ),
                ));
            }
            continue;
        }
        if p.summary.is_some() {
            return Err(DumpError::parse(
                path,
                lno,
                "data after the 'summary:' line",
            ));
        }
        if let Some(f) = line.strip_prefix("fl=") {
            file = Some(f.to_string());
            fn_file = Some(f.to_string());
            func = None;
        } else if let Some(f) = line
            .strip_prefix("fi=")
            .or_else(|| line.strip_prefix("fe="))
        {
            if func.is_none() {
                return Err(DumpError::parse(path, lno, "'fi='/'fe=' before any 'fn='"));
            }
            file = Some(f.to_string());
        } else if let Some(f) = line.strip_prefix("fn=") {
            if fn_file.is_none() {
                return Err(DumpError::parse(path, lno, "'fn=' before any 'fl='"));
            }
            file.clone_from(&fn_file);
            func = Some(f.to_string());
        } else if let Some(s) = line.strip_prefix("summary:") {
            let v = parse_counts(path, lno, s)?;
            if v.len() > p.events.len() {
                return Err(DumpError::parse(
                    path,
                    lno,
                    format!(
                        "'summary:' has {} counts but there are {} events",
                        v.len(),
                        p.events.len()
                    ),
                ));
            }
            let mut full = vec![0; p.events.len()];
            full[..v.len()].copy_from_slice(&v);
            p.summary = Some(full);
        } else if line.as_bytes()[0].is_ascii_digit() {
            let (Some(fl), Some(f)) = (&file, &func) else {
                return Err(DumpError::parse(
                    path,
                    lno,
                    "count line before 'fl=' and 'fn='",
                ));
            };
            let mut it = line.split_whitespace();
            let ln = it.next().unwrap_or("");
            let ln: u32 = ln.parse().map_err(|_| {
                DumpError::parse(path, lno, format!("bad line number '{}'", clip(ln)))
            })?;
            let rest: Vec<&str> = it.collect();
            if rest.len() > p.events.len() {
                return Err(DumpError::parse(
                    path,
                    lno,
                    format!(
                        "{} counts but there are {} events",
                        rest.len(),
                        p.events.len()
                    ),
                ));
            }
            let mut c = vec![0u64; p.events.len()];
            for (slot, tok) in c.iter_mut().zip(&rest) {
                *slot = parse_u64(path, lno, tok)?;
            }
            let e = p
                .records
                .entry((fl.clone(), f.clone()))
                .or_default()
                .entry(ln)
                .or_insert_with(|| vec![0; c.len()]);
            add_into(e, &c);
        } else {
            return Err(DumpError::parse(
                path,
                lno,
                format!("unexpected line '{}'", clip(line)),
            ));
        }
    }
    if !have_events {
        return Err(DumpError::parse(
            path,
            text.lines().count().max(1),
            "missing 'events:' line",
        ));
    }
    Ok(p)
}

pub(crate) fn clip(s: &str) -> String {
    let mut t: String = s.chars().take(60).collect();
    if s.chars().count() > 60 {
        t.push_str("...");
    }
    t
}

pub(crate) fn parse_u64(path: &str, lno: usize, tok: &str) -> Result<u64, DumpError> {
    tok.parse::<u64>()
        .map_err(|_| DumpError::parse(path, lno, format!("bad count '{}'", clip(tok))))
}

pub(crate) fn parse_counts(path: &str, lno: usize, s: &str) -> Result<Vec<u64>, DumpError> {
    s.split_whitespace()
        .map(|t| parse_u64(path, lno, t))
        .collect()
}
