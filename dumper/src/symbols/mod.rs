//! Symbolisation: runtime guest address -> object, file, function, line, as Valgrind shows them.
//!
//! The caller lists every mapped module ([`ModuleInfo`]: executable, loader, libraries and the
//! vDSO, whose image is passed in memory). [`Symbolizer::lookup`] finds the module by its
//! mapped ranges and answers from that module's tables, which are built on first use and then
//! kept, so symbolising many addresses of a large binary costs one table build per module and a
//! binary search per address.
//!
//! # Invariants
//! * `ranges` is sorted by start and ranges do not overlap (later modules win on overlap).
//! * A module whose file cannot be read or parsed still gives its object name, with `???`
//!   for function and file (what Valgrind shows for code without a DebugInfo).
//!
//! This module deliberately does no output formatting beyond names: the writers decide how
//! `???`, hex names and relative addresses are printed.

mod cache;
pub mod demangle;
pub(crate) mod elf;
mod tables;
pub mod unwind;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

pub use cache::map_entries as map_cache_entries;
pub use elf::{InlinedFrame, SectionKind};

use crate::error::DumpError;
use elf::ModuleTables;

/// Where a module's ELF image comes from.
#[derive(Debug, Clone, Default)]
pub enum ModuleSource {
    /// Read `ModuleInfo::path` from disk (and its separate debug file, if any).
    #[default]
    File,
    /// The image bytes, for modules with no file (the vDSO).
    Memory(Vec<u8>),
}

/// One mapped ELF module.
#[derive(Debug, Clone)]
pub struct ModuleInfo {
    /// The object name printed in `ob=` (the mapped file after symlink resolution, or e.g.
    /// `[vdso]`).
    pub path: PathBuf,
    /// Runtime address minus link-time address (0 for a non-PIE executable).
    pub load_bias: u64,
    /// The runtime `[start, end)` ranges mapped from this module (its executable segments at
    /// least).
    pub ranges: Vec<(u64, u64)>,
    /// Where the image is read from.
    pub source: ModuleSource,
}

impl ModuleInfo {
    /// A module read from `path`.
    pub fn file(path: impl Into<PathBuf>, load_bias: u64, ranges: Vec<(u64, u64)>) -> Self {
        ModuleInfo {
            path: path.into(),
            load_bias,
            ranges,
            source: ModuleSource::File,
        }
    }

    /// A module whose image is in memory (the vDSO).
    pub fn memory(
        name: impl Into<PathBuf>,
        load_bias: u64,
        ranges: Vec<(u64, u64)>,
        image: Vec<u8>,
    ) -> Self {
        ModuleInfo {
            path: name.into(),
            load_bias,
            ranges,
            source: ModuleSource::Memory(image),
        }
    }
}

/// What a runtime address means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The object (module path), `None` for an unmapped address or one outside the
    /// module's `.text` (Valgrind prints `???`).
    pub object: Option<Arc<str>>,
    /// Link-time address: runtime address minus the module's load bias (the address itself
    /// when `object` is `None`).
    pub offset: u64,
    /// Source file (`dir/name` as in the line table), `None` when unknown.
    pub file: Option<Arc<str>>,
    /// Function name, demangled, version suffix kept, `(below main)` applied; `None` when no
    /// symbol covers the address.
    pub function: Option<String>,
    /// Runtime start address of the symbol, when there is one.
    pub function_start: Option<u64>,
    /// Source line, 0 when unknown.
    pub line: u32,
    /// The section kind of the address.
    pub section: SectionKind,
    /// Inlined frames, innermost first (only filled by [`Symbolizer::lookup`]).
    pub inlined: Vec<InlinedFrame>,
}

impl Location {
    /// The function name as Cachegrind prints it (`???` when unknown).
    pub fn fn_name(&self) -> &str {
        self.function.as_deref().unwrap_or("???")
    }

    /// The file name as both tools print it (`???` when unknown).
    pub fn file_name(&self) -> &str {
        self.file.as_deref().unwrap_or("???")
    }

    /// The object name as Callgrind prints it (`???` when unknown).
    pub fn object_name(&self) -> &str {
        self.object.as_deref().unwrap_or("???")
    }
}

/// [`Location`] without copies: the names borrowed from the symboliser, no function name,
/// no inlined frames. What per-block and per-instruction lookups need, without touching a
/// reference count or allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Brief<'a> {
    /// As [`Location::object`].
    pub object: Option<&'a Arc<str>>,
    /// As [`Location::offset`].
    pub offset: u64,
    /// As [`Location::file`].
    pub file: Option<&'a Arc<str>>,
    /// As [`Location::function_start`] ([`Symbolizer::lookup_brief`] fills it,
    /// [`Symbolizer::lookup_line_brief`] does not).
    pub function_start: Option<u64>,
    /// As [`Location::line`].
    pub line: u32,
    /// As [`Location::section`].
    pub section: SectionKind,
}

impl Brief<'_> {
    /// The file name as both tools print it (`???` when unknown).
    pub fn file_name(&self) -> &str {
        self.file.map_or("???", |f| f)
    }

    /// The owned [`Location`] (without function name and inlined frames).
    pub fn to_location(&self) -> Location {
        Location {
            object: self.object.cloned(),
            offset: self.offset,
            file: self.file.cloned(),
            function: None,
            function_start: self.function_start,
            line: self.line,
            section: self.section,
            inlined: Vec::new(),
        }
    }
}

struct Module {
    info: ModuleInfo,
    name: Arc<str>,
    /// What the tables are built from, as [`Symbolizer::new_reusing`] compares it.
    ident: Option<SourceIdent>,
    tables: OnceLock<Option<ModuleTables>>,
    /// Demangled (and presented) function names by symbol start: the writers look up every
    /// instruction, and demangling a Rust or C++ name costs more than the lookup.
    names: Mutex<HashMap<u64, String>>,
}

/// A module file's identity (path, inode, size, modification time), or an in-memory
/// image's bytes: equal identities give equal tables.
#[derive(Clone, PartialEq, Eq)]
enum SourceIdent {
    File(PathBuf, u64, u64, u64, i64, i64),
    Memory(PathBuf, Vec<u8>),
}

impl SourceIdent {
    fn of(info: &ModuleInfo) -> Option<SourceIdent> {
        use std::os::unix::fs::MetadataExt;
        match &info.source {
            ModuleSource::File => {
                let m = std::fs::metadata(&info.path).ok()?;
                Some(SourceIdent::File(
                    info.path.clone(),
                    m.dev(),
                    m.ino(),
                    m.len(),
                    m.mtime(),
                    m.mtime_nsec(),
                ))
            }
            ModuleSource::Memory(b) => Some(SourceIdent::Memory(info.path.clone(), b.clone())),
        }
    }
}

/// Answers address lookups for a fixed set of modules. Cheap to create; each module's
/// tables are built on its first lookup.
pub struct Symbolizer {
    modules: Vec<Module>,
    /// `(start, end, module index)`, sorted, non-overlapping.
    ranges: Vec<(u64, u64, usize)>,
    /// Errors met while building tables (module path, message); lookups go on without them.
    errors: std::sync::Mutex<Vec<String>>,
}

impl Symbolizer {
    /// A symboliser for `modules`. Nothing is read yet.
    pub fn new(modules: Vec<ModuleInfo>) -> Self {
        Symbolizer::new_reusing(modules, None)
    }

    /// A symboliser for `modules` that takes over `previous`'s tables of the modules that are
    /// still the same files (or images), so that a tool refreshing its module list after each
    /// `dlopen` builds (or reads from the disk cache, or reads the image of) each module once
    /// instead of once per refresh.
    pub fn new_reusing(modules: Vec<ModuleInfo>, previous: Option<Symbolizer>) -> Self {
        type Built = (OnceLock<Option<ModuleTables>>, Mutex<HashMap<u64, String>>);
        let mut built: Vec<(SourceIdent, Built)> = previous
            .map(|p| {
                p.modules
                    .into_iter()
                    .filter(|m| m.tables.get().is_some())
                    .filter_map(|m| Some((m.ident?, (m.tables, m.names))))
                    .collect()
            })
            .unwrap_or_default();
        let mut ranges = Vec::new();
        for (i, m) in modules.iter().enumerate() {
            for &(s, e) in &m.ranges {
                if s < e {
                    ranges.push((s, e, i));
                }
            }
        }
        ranges.sort_by_key(|r| (r.0, std::cmp::Reverse(r.2)));
        // Drop overlaps: keep the first (the later module on equal starts).
        let mut clean: Vec<(u64, u64, usize)> = Vec::with_capacity(ranges.len());
        for r in ranges {
            match clean.last() {
                Some(last) if r.0 < last.1 => {
                    if r.1 > last.1 {
                        clean.push((last.1, r.1, r.2));
                    }
                }
                _ => clean.push(r),
            }
        }
        Symbolizer {
            modules: modules
                .into_iter()
                .map(|info| {
                    let ident = SourceIdent::of(&info);
                    let (tables, names) =
                        match built.iter().position(|b| Some(&b.0) == ident.as_ref()) {
                            Some(i) => built.swap_remove(i).1,
                            None => Default::default(),
                        };
                    Module {
                        name: Arc::from(info.path.to_string_lossy().as_ref()),
                        info,
                        ident,
                        tables,
                        names,
                    }
                })
                .collect(),
            ranges: clean,
            errors: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// A symboliser that knows no module: every address is `???`.
    pub fn empty() -> Self {
        Symbolizer::new(Vec::new())
    }

    /// Problems met while reading modules (each `path: message`).
    pub fn errors(&self) -> Vec<String> {
        self.errors.lock().map(|e| e.clone()).unwrap_or_default()
    }

    fn module_of(&self, addr: u64) -> Option<usize> {
        let idx = self.ranges.partition_point(|r| r.0 <= addr);
        let r = self.ranges.get(idx.checked_sub(1)?)?;
        (addr < r.1).then_some(r.2)
    }

    fn tables<'a>(&'a self, m: &'a Module) -> Option<&'a ModuleTables> {
        m.tables
            .get_or_init(|| {
                let built = match &m.info.source {
                    ModuleSource::Memory(bytes) => ModuleTables::build(&m.info.path, bytes, false),
                    ModuleSource::File => match ModuleTables::from_cache(&m.info.path) {
                        Some(t) => Ok(t),
                        None => match std::fs::read(&m.info.path) {
                            Ok(bytes) => ModuleTables::build(&m.info.path, &bytes, true),
                            Err(e) => Err(DumpError::read(&m.info.path, e)),
                        },
                    },
                };
                match built {
                    Ok(t) => Some(t),
                    Err(e) => {
                        if let Ok(mut errs) = self.errors.lock() {
                            errs.push(e.to_string());
                        }
                        None
                    }
                }
            })
            .as_ref()
    }

    /// Full lookup, including the inlined-frame chain.
    pub fn lookup(&self, addr: u64) -> Location {
        let mut loc = self.lookup_fast(addr);
        if let Some(mi) = self.module_of(addr) {
            let m = &self.modules[mi];
            if let Some(t) = self.tables(m) {
                loc.inlined = t.inlined(addr.wrapping_sub(m.info.load_bias));
            }
        }
        loc
    }

    /// Lookup without the inlined chain (what the writers need; much cheaper).
    pub fn lookup_fast(&self, addr: u64) -> Location {
        let (brief, found) = self.lookup_symbol(addr);
        let mut loc = brief.to_location();
        if let Some((m, sym)) = found {
            let mut names = m.names.lock().unwrap_or_else(|e| e.into_inner());
            let name = names
                .entry(sym.start)
                .or_insert_with(|| demangle::present(demangle::demangle(sym.raw)));
            loc.function = Some(name.clone());
        }
        loc
    }

    /// [`Symbolizer::lookup_fast`] borrowed and without the name: `function_start` is
    /// filled (no demangling, no copies), for callers that key on the symbol.
    pub fn lookup_brief(&self, addr: u64) -> Brief<'_> {
        self.lookup_symbol(addr).0
    }

    /// `position` with the symbol covering `addr` (and its module), whose runtime start goes
    /// to `function_start`.
    fn lookup_symbol(&self, addr: u64) -> (Brief<'_>, Option<(&Module, elf::Sym<'_>)>) {
        let (mut loc, found) = self.position(addr);
        let sym = found.and_then(|(m, t)| Some((m, t.symbol(loc.offset)?)));
        loc.function_start = sym.map(|(m, sym)| sym.start.wrapping_add(m.info.load_bias));
        (loc, sym)
    }

    /// The demangled name of the function at `addr` without Valgrind's renaming of the
    /// functions below `main` (stack traces with `--show-below-main=yes`).
    pub fn demangled_name(&self, addr: u64) -> Option<String> {
        let (_, sym) = self.lookup_symbol(addr).1?;
        Some(demangle::demangle(sym.raw))
    }

    /// [`Symbolizer::lookup_fast`] without the function (no symbol search, no demangling):
    /// the object, offset, file, line and section, what a position in an output file needs.
    pub fn lookup_line(&self, addr: u64) -> Location {
        self.position(addr).0.to_location()
    }

    /// [`Symbolizer::lookup_line`] borrowed (no copies).
    pub fn lookup_line_brief(&self, addr: u64) -> Brief<'_> {
        self.position(addr).0
    }

    /// `lookup_line_brief`, with the module and its tables when there are both.
    fn position(&self, addr: u64) -> (Brief<'_>, Option<(&Module, &ModuleTables)>) {
        let mut loc = Brief {
            object: None,
            offset: addr,
            file: None,
            function_start: None,
            line: 0,
            section: SectionKind::Text,
        };
        let Some(mi) = self.module_of(addr) else {
            return (loc, None);
        };
        let m = &self.modules[mi];
        let off = addr.wrapping_sub(m.info.load_bias);
        loc.object = Some(&m.name);
        loc.offset = off;
        let Some(t) = self.tables(m) else {
            return (loc, None);
        };
        loc.section = t.section_kind(off);
        if !loc.section.in_text() {
            // Valgrind's debug info knows the module by its `.text` only: no object, no
            // symbol, no line, the address itself as the offset.
            loc.object = None;
            loc.offset = addr;
            return (loc, None);
        }
        if let Some((f, line)) = t.line(off) {
            loc.file = t.tables.files.get(f as usize);
            loc.line = line;
        }
        (loc, Some((m, t)))
    }

    /// The path of the module mapping `addr`, wherever in it `addr` lies (Valgrind's stack
    /// traces name the mapped file even outside the code its debug info covers).
    pub fn mapped_object(&self, addr: u64) -> Option<Arc<str>> {
        self.module_of(addr).map(|m| self.modules[m].name.clone())
    }

    /// The load bias of the module mapping `addr` (0 when unmapped).
    pub fn bias_of(&self, addr: u64) -> u64 {
        self.module_of(addr)
            .map_or(0, |m| self.modules[m].info.load_bias)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tables (here: the failure to build them from a file that is not ELF, which is
    /// reported once per build) pass to the next symboliser while the file stays the same,
    /// and are built again once it changes.
    #[test]
    fn a_refreshed_symbolizer_keeps_the_tables_of_unchanged_files() {
        let path = std::env::temp_dir().join(format!("rgrind-sym-reuse-{}", std::process::id()));
        std::fs::write(&path, b"not an ELF file").unwrap();
        let info = || vec![ModuleInfo::file(&path, 0, vec![(0x1000, 0x2000)])];
        let first = Symbolizer::new(info());
        assert_eq!(first.lookup_fast(0x1800).fn_name(), "???");
        assert_eq!(first.errors().len(), 1);
        let same = Symbolizer::new_reusing(info(), Some(first));
        assert_eq!(same.lookup_fast(0x1800).fn_name(), "???");
        assert!(same.errors().is_empty(), "built again: {:?}", same.errors());
        std::fs::write(&path, b"still not an ELF file, longer").unwrap();
        let changed = Symbolizer::new_reusing(info(), Some(same));
        assert_eq!(changed.lookup_fast(0x1800).fn_name(), "???");
        assert_eq!(changed.errors().len(), 1);
        let _ = std::fs::remove_file(&path);
    }
}
