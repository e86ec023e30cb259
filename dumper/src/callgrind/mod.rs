//! Callgrind profiles: the file model, the writer, the reader, and the conversion from the
//! tool's runtime data (contexts, per-instruction self costs, call and jump arcs).
//!
//! The model ([`ClPart`]) mirrors what a `callgrind.out` part holds: a header and a list of
//! function blocks, each with self-cost lines, call records and jump records, with names already
//! resolved and positions absolute. The writer turns it into text with or without name and
//! subposition compression; the reader turns any valid text back into it.
//!
//! # Invariants
//! * Positions in the model are absolute, one value per entry of `positions`.
//! * Cost vectors have at most `events.len()` entries (missing trailing entries are zero).
//! * Function ids (`fn=(id)`) are kept as given: a context's id is its base number plus the
//!   recursion level, exactly as Callgrind numbers them.
//!
//! This module deliberately does not simulate anything; inclusive costs come from the caller.

mod build;
mod reader;
mod writer;

pub use build::{
    callgrind_fn_name, callgrind_header, unnamed_fn_name, CallArc, CallgrindData, CallgrindOptions,
    CostKey, CostTable, FnContext, JumpArc,
};
pub use reader::parse_callgrind;

/// The kinds of subposition a `positions:` line can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PosKind {
    /// Instruction address (`instr`, also `addr`), written in hex.
    Instr,
    /// Basic-block address (`bb`), hex.
    Bb,
    /// Source line (`line`), decimal.
    Line,
}

impl PosKind {
    /// The keyword in the `positions:` line.
    pub fn name(self) -> &'static str {
        match self {
            PosKind::Instr => "instr",
            PosKind::Bb => "bb",
            PosKind::Line => "line",
        }
    }
}

/// A function name with the id it had (or should get) under name compression.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FnName {
    /// The id written as `(id)`; `None` lets the writer number it.
    pub id: Option<u64>,
    /// The name.
    pub name: String,
}

/// The header of one part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClHeader {
    /// `version:` (1 when absent).
    pub version: String,
    /// `creator:`.
    pub creator: Option<String>,
    /// `pid:`.
    pub pid: Option<u64>,
    /// `cmd:` text exactly as in the file (Callgrind's starts with a space).
    pub cmd: Option<String>,
    /// `part:`.
    pub part: Option<u64>,
    /// `thread:`.
    pub thread: Option<u64>,
    /// `desc:` lines (text after `desc: `), in order.
    pub desc: Vec<String>,
    /// `positions:` (default `line`).
    pub positions: Vec<PosKind>,
    /// `event:` long names: (short, long).
    pub event_names: Vec<(String, String)>,
    /// `events:`.
    pub events: Vec<String>,
    /// `summary:` as read/to write (`None`: the writer writes the totals).
    pub summary: Option<Vec<u64>>,
    /// `totals:` as read (`None`: the writer writes the computed totals).
    pub totals: Option<Vec<u64>>,
}

impl Default for ClHeader {
    fn default() -> Self {
        ClHeader {
            version: "1".into(),
            creator: None,
            pid: None,
            cmd: None,
            part: None,
            thread: None,
            desc: Vec::new(),
            positions: vec![PosKind::Line],
            event_names: Vec::new(),
            events: Vec::new(),
            summary: None,
            totals: None,
        }
    }
}

/// One line of a function block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClEntry {
    /// A self-cost line in `file` (the function's file, or a `fi=` file).
    Cost {
        /// Source file of this line.
        file: String,
        /// Absolute position.
        pos: Vec<u64>,
        /// Costs.
        costs: Vec<u64>,
    },
    /// A call record (`cob=`/`cfi=`/`cfn=`, `calls=`, then the call-site cost line).
    Call {
        /// File of the call site (current file).
        file: String,
        /// Callee object (`None`: the caller's object).
        cob: Option<String>,
        /// Callee file (`None`: the current file).
        cfi: Option<String>,
        /// Callee function.
        cfn: FnName,
        /// Call count.
        count: u64,
        /// Target position (callee's first instruction).
        target: Vec<u64>,
        /// Call-site position.
        pos: Vec<u64>,
        /// Inclusive costs of the calls.
        inclusive: Vec<u64>,
    },
    /// A jump record (`jump=` or `jcnd=`, then the source position line).
    Jump {
        /// File of the jump source.
        file: String,
        /// `Some(followed)` for `jcnd=followed/executed`, `None` for `jump=`.
        followed: Option<u64>,
        /// Executed count (`jump=` count).
        executed: u64,
        /// `jfi=` target file, if given.
        jfi: Option<String>,
        /// `jfn=` target function, if given.
        jfn: Option<FnName>,
        /// Target position.
        target: Vec<u64>,
        /// Source position.
        pos: Vec<u64>,
    },
}

/// A function block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClFunction {
    /// Object (`ob=`), `None` if the file gives none.
    pub object: Option<String>,
    /// The function's own file (`fl=`).
    pub file: String,
    /// The function (`fn=`).
    pub name: FnName,
    /// Its lines in order.
    pub entries: Vec<ClEntry>,
}

/// One part (one dump) of a Callgrind file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClPart {
    /// The header.
    pub header: ClHeader,
    /// Function blocks in file order.
    pub functions: Vec<ClFunction>,
    /// Object ids to reuse under name compression (filled by the reader).
    pub ob_ids: std::collections::BTreeMap<String, u64>,
    /// File ids per (object, file) to reuse under name compression (filled by the reader).
    pub fl_ids: std::collections::BTreeMap<(String, String), u64>,
}

/// Writer switches that change the text but not the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOptions {
    /// `--compress-strings`.
    pub compress_strings: bool,
    /// `--compress-pos`.
    pub compress_pos: bool,
    /// A later part appended to a combined file (`--combine-dumps=yes`): no file header.
    pub continued: bool,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            compress_strings: true,
            compress_pos: true,
            continued: false,
        }
    }
}

impl ClPart {
    /// Sum of all self costs.
    pub fn self_totals(&self) -> Vec<u64> {
        let mut t = vec![0u64; self.header.events.len()];
        for f in &self.functions {
            for e in &f.entries {
                if let ClEntry::Cost { costs, .. } = e {
                    crate::cachegrind::add_into(&mut t, costs);
                }
            }
        }
        t
    }

    /// The totals a reader should trust: `totals:` if present, else the computed self totals.
    pub fn totals(&self) -> Vec<u64> {
        match &self.header.totals {
            Some(t) => t.clone(),
            None => self.self_totals(),
        }
    }

    /// Writes this part.
    pub fn write_to(
        &self,
        out: &mut dyn std::io::Write,
        opts: WriteOptions,
    ) -> std::io::Result<()> {
        writer::write_part(self, out, opts)
    }

    /// The part as text.
    pub fn to_text(&self, opts: WriteOptions) -> String {
        let mut v = Vec::new();
        // Writing to a Vec cannot fail.
        let _ = self.write_to(&mut v, opts);
        String::from_utf8_lossy(&v).into_owned()
    }

    /// Writes this part to `path` (created or truncated).
    pub fn write_file(
        &self,
        path: &std::path::Path,
        opts: WriteOptions,
    ) -> Result<(), crate::DumpError> {
        let name = path.display().to_string();
        let f = crate::create_output(path, false).map_err(|e| crate::DumpError::write(&name, e))?;
        let mut w = std::io::BufWriter::new(f);
        self.write_to(&mut w, opts)
            .and_then(|()| std::io::Write::flush(&mut w))
            .map_err(|e| crate::DumpError::write(&name, e))
    }
}

/// Callgrind's `cmd:` text: a leading space, then the executable and each argument, each
/// preceded by a space, with `\n` and `\\` escaped — so the file line reads `cmd:  ./prog a`.
pub fn callgrind_cmd(exe: &str, args: &[String]) -> String {
    let mut s = String::new();
    for a in std::iter::once(exe).chain(args.iter().map(String::as_str)) {
        s.push(' ');
        for ch in a.chars() {
            match ch {
                '\n' => s.push_str("\\n"),
                '\\' => s.push_str("\\\\"),
                c => s.push(c),
            }
        }
    }
    s
}
