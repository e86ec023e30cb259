//! Cachegrind profiles: the in-memory model, the writer and the reader of `cachegrind.out`.
//!
//! The model is what the file holds: `desc:` lines, `cmd:`, `events:`, and one cost vector per
//! (file, function, line). [`CgProfile::from_costs`] builds it from per-instruction costs
//! exactly as Cachegrind aggregates them (each instruction looked up on its own; inlined code
//! goes to the inlined file/line and the enclosing function).
//!
//! # Invariants
//! * Every cost vector in `records` has `events.len()` entries.
//! * `records` iterates in Cachegrind's output order: file, then function (both `strcmp`),
//!   then line (numeric), because `String` orders by bytes.
//!
//! This module deliberately does not compute cache statistics or print the `==PID==` summary.

pub(crate) mod reader;
mod writer;

use std::collections::{BTreeMap, HashMap};

use crate::error::DumpError;
use crate::symbols::Symbolizer;

pub use reader::parse_cachegrind;

/// The four `events:` lines Cachegrind 3.19 can write.
pub const EVENTS_CACHE: &[&str] = &[
    "Ir", "I1mr", "ILmr", "Dr", "D1mr", "DLmr", "Dw", "D1mw", "DLmw",
];

/// Costs per (file, function) and line.
pub type CgRecords = BTreeMap<(String, String), LineCosts>;

/// Costs per line of one (file, function).
pub type LineCosts = BTreeMap<u32, Vec<u64>>;

/// A Cachegrind profile as stored in a `cachegrind.out` file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CgProfile {
    /// The text of each `desc:` line (after `desc: `).
    pub desc: Vec<String>,
    /// The text of the `cmd:` line (after `cmd: `).
    pub cmd: String,
    /// Event names in column order.
    pub events: Vec<String>,
    /// Costs per (file, function) and line.
    pub records: CgRecords,
    /// The `summary:` line as read (the writer always recomputes it).
    pub summary: Option<Vec<u64>>,
}

/// Builds Cachegrind's `cmd:` text: the executable and each argument, space separated, with
/// no escaping.
pub fn cachegrind_cmd(exe: &str, args: &[String]) -> String {
    let mut s = exe.to_string();
    for a in args {
        s.push(' ');
        s.push_str(a);
    }
    s
}

impl CgProfile {
    /// An empty profile with the given header.
    pub fn new(desc: Vec<String>, cmd: String, events: Vec<String>) -> Self {
        CgProfile {
            desc,
            cmd,
            events,
            records: BTreeMap::new(),
            summary: None,
        }
    }

    /// Aggregates per-instruction costs (runtime address -> one count per event) into the
    /// profile, symbolising each address on its own.
    pub fn from_costs(
        desc: Vec<String>,
        cmd: String,
        events: Vec<String>,
        costs: &BTreeMap<u64, Vec<u64>>,
        sym: &Symbolizer,
    ) -> Result<Self, DumpError> {
        let mut p = CgProfile::new(desc, cmd, events);
        let n = p.events.len();
        // Consecutive instructions usually share a function and file: names are copied only
        // when they change, and each (file, function) is looked up once.
        let mut groups: Vec<((String, String), LineCosts)> = Vec::new();
        let mut index: HashMap<(String, String), usize> = HashMap::new();
        let mut cur: Option<usize> = None;
        for (&addr, c) in costs {
            if c.len() != n {
                return Err(DumpError::Invalid(format!(
                    "cost vector for {addr:#x} has {} entries, events has {n}",
                    c.len()
                )));
            }
            let loc = sym.lookup_fast(addr);
            let same = |i: usize| {
                let (f, g) = &groups[i].0;
                f == loc.file_name() && g == loc.fn_name()
            };
            let i = match cur {
                Some(i) if same(i) => i,
                _ => {
                    let key = (loc.file_name().to_string(), loc.fn_name().to_string());
                    *index.entry(key.clone()).or_insert_with(|| {
                        groups.push((key, BTreeMap::new()));
                        groups.len() - 1
                    })
                }
            };
            cur = Some(i);
            let slot = groups[i].1.entry(loc.line).or_insert_with(|| vec![0; n]);
            add_into(slot, c);
        }
        p.records.extend(groups);
        Ok(p)
    }

    /// Column sums over all records.
    pub fn totals(&self) -> Vec<u64> {
        let mut t = vec![0u64; self.events.len()];
        for lines in self.records.values() {
            for c in lines.values() {
                add_into(&mut t, c);
            }
        }
        t
    }

    /// Per-function totals keyed by (file, function).
    pub fn function_totals(&self) -> BTreeMap<(String, String), Vec<u64>> {
        self.records
            .iter()
            .map(|(k, lines)| {
                let mut t = vec![0u64; self.events.len()];
                for c in lines.values() {
                    add_into(&mut t, c);
                }
                (k.clone(), t)
            })
            .collect()
    }

    /// Writes the profile in Cachegrind's exact layout.
    pub fn write_to(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        writer::write(self, out)
    }

    /// Writes the profile to `path`.
    pub fn write_file(&self, path: &std::path::Path) -> Result<(), DumpError> {
        let name = path.display().to_string();
        let f = crate::create_output(path, false).map_err(|e| DumpError::write(&name, e))?;
        let mut w = std::io::BufWriter::new(f);
        self.write_to(&mut w)
            .and_then(|()| std::io::Write::flush(&mut w))
            .map_err(|e| DumpError::write(&name, e))
    }

    /// The profile as a string in Cachegrind's layout.
    pub fn to_text(&self) -> String {
        let mut v = Vec::new();
        // Writing to a Vec cannot fail.
        let _ = self.write_to(&mut v);
        String::from_utf8_lossy(&v).into_owned()
    }
}

/// `a += b`, element-wise, saturating (a wrapped Valgrind summary must not panic us).
pub(crate) fn add_into(a: &mut [u64], b: &[u64]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x = x.wrapping_add(*y);
    }
}
