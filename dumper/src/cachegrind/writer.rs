//! Writes a [`CgProfile`] byte-for-byte like Cachegrind 3.19's `fprint_CC_table_and_calc_totals`.
//!
//! # Invariants
//! * `fl=` is written whenever the file changes, `fn=` after every `fl=` and whenever the
//!   function changes; every count is written (no trailing-zero trimming); `summary:` is the
//!   column sum, recomputed here, and is the last line.
//!
//! This module deliberately does not sort: the model's `BTreeMap` is already in Cachegrind's order.

use std::io::Write;

use super::{add_into, CgProfile, EVENTS_CACHE};

pub(super) fn write(p: &CgProfile, out: &mut dyn Write) -> std::io::Result<()> {
    for d in &p.desc {
        writeln!(out, "desc: {d}")?;
    }
    writeln!(out, "cmd: {}", p.cmd)?;
    let ev = p.events.join(" ");
    // Cachegrind 3.19 writes the cache-only variant with a trailing space.
    let trailing = if p
        .events
        .iter()
        .map(String::as_str)
        .eq(EVENTS_CACHE.iter().copied())
    {
        " "
    } else {
        ""
    };
    writeln!(out, "events: {ev}{trailing}")?;
    let mut totals = vec![0u64; p.events.len()];
    let mut cur_file: Option<&str> = None;
    let mut line_buf = String::new();
    for ((file, func), lines) in &p.records {
        if cur_file != Some(file.as_str()) {
            writeln!(out, "fl={file}")?;
            cur_file = Some(file.as_str());
        }
        writeln!(out, "fn={func}")?;
        for (line, c) in lines {
            line_buf.clear();
            line_buf.push_str(&line.to_string());
            for x in c {
                line_buf.push(' ');
                line_buf.push_str(&x.to_string());
            }
            writeln!(out, "{line_buf}")?;
            add_into(&mut totals, c);
        }
    }
    let sum: Vec<String> = totals.iter().map(u64::to_string).collect();
    writeln!(out, "summary: {}", sum.join(" "))
}
