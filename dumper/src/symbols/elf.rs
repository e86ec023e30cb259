//! Per-module symbol, section and line tables, built once from an ELF image and its DWARF.
//!
//! Symbols come from `.dynsym` and `.symtab` of the image and of its separate debug file
//! (`/usr/lib/debug/.build-id/xx/rest.debug` or `.gnu_debuglink`). Aliases at one address are
//! resolved with Valgrind's `preferName` rule. Like Valgrind, version suffixes are not taken
//! from `.gnu.version`: a name such as `__libc_start_main@@GLIBC_2.34` is a literal `.symtab`
//! name (made by `.symver`). Line rows come from the DWARF line programs,
//! with file names built as Valgrind builds them (`dir/name`, no normalisation), a row on the
//! line number of the range before it merged into that range as Valgrind's `addLoc` does.
//!
//! # Invariants
//! * `syms` is sorted by `start` with unique starts; every symbol has `size > 0`.
//! * `rows` is sorted by address; a row with `file == NO_FILE` ends a sequence.
//! * All addresses here are link-time addresses (runtime address minus the load bias).
//!
//! This module deliberately does not know about runtime addresses or the output formats.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use object::{Object, ObjectSection, ObjectSymbol, SectionKind as ObjSectionKind, SymbolKind};

use super::cache;
use super::tables::{self, Tables};
use crate::error::DumpError;

/// Reader type used for DWARF.
pub(crate) type Reader = gimli::EndianArcSlice<gimli::RunTimeEndian>;

/// The kind of section an address lies in, as Valgrind's debug info classifies it
/// (`VG_(DebugInfo_sect_kind)`): Callgrind uses it for `--skip-plt`, to make jumps between
/// kinds calls, and to name unnamed code.
///
/// Valgrind's debug info covers a module's code by its `.text` section only: code anywhere
/// else (`.init`, `.fini`, `.plt`, `.plt.got`, `.plt.sec`) has no object, file, line or
/// symbol there ([`SectionKind::in_text`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SectionKind {
    /// `.text`, or an address in no section the tables list.
    Text,
    /// `.plt` (only: Valgrind 3.19 does not recognise `.plt.got` and `.plt.sec`).
    Plt,
    /// `.got`, `.got.plt`.
    Got,
    /// Initialised data.
    Data,
    /// `.bss`.
    Bss,
    /// Any other section: code outside `.text` that is not `.plt` (`.init`, `.fini`,
    /// `.plt.got`, `.plt.sec`), `.got.plt`, `.rodata`.
    Other,
}

impl SectionKind {
    /// Whether Valgrind's debug info covers an address of this kind (its `.text`).
    pub fn in_text(self) -> bool {
        self == SectionKind::Text
    }

    /// The suffix Callgrind puts after the address that names code without a symbol in
    /// this kind of section (`0x0000000000109030 [PLT]`).
    pub fn unnamed_suffix(self) -> &'static str {
        match self {
            SectionKind::Data => " [Data]",
            SectionKind::Bss => " [BSS]",
            SectionKind::Got => " [GOT]",
            SectionKind::Plt => " [PLT]",
            SectionKind::Text | SectionKind::Other => "",
        }
    }
}

pub(crate) use super::tables::{Row, Sym, NO_FILE};

/// The tables of one module.
pub(crate) struct ModuleTables {
    /// Symbols, sections, files and line rows, read in place (`tables.rs`).
    pub tables: Tables,
    /// The DWARF sections, loaded at build time or, for tables from the disk cache, on the
    /// first inlining lookup from `dwarf_from` (the image and its debug file).
    dwarf_sections: OnceLock<Option<HashMap<gimli::SectionId, Reader>>>,
    dwarf_from: Option<(PathBuf, Option<PathBuf>)>,
    endian: gimli::RunTimeEndian,
    inline_ctx: OnceLock<Option<addr2line::Context<Reader>>>,
}

/// One inlined frame, innermost first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InlinedFrame {
    /// The (demangled) name of the function at this level, if DWARF names it.
    pub function: Option<String>,
    /// The source file of this level's location.
    pub file: Option<String>,
    /// The source line (0 when unknown).
    pub line: u32,
}

/// Valgrind's `preferName`: true if `a` is preferred over `b`.
pub(crate) fn prefer_name(a: &str, b: &str) -> bool {
    let blank = |s: &str| s.trim().is_empty();
    if blank(a) != blank(b) {
        return !blank(a);
    }
    let base = |s: &str| s.find('@').unwrap_or(s.len());
    let (la, lb) = (base(a), base(b));
    if la != lb {
        return la < lb;
    }
    let (va, vb) = (a.contains('@'), b.contains('@'));
    if va != vb {
        return va;
    }
    a < b
}

fn elf_err(path: &Path, e: impl std::fmt::Display) -> DumpError {
    DumpError::Elf {
        path: path.display().to_string(),
        msg: e.to_string(),
    }
}

impl ModuleTables {
    /// The tables of the ELF file at `path` when the disk cache has them, reading only the
    /// parts of the file that the cache key needs (headers, build id, debug link) instead of
    /// the whole image (rustup's 20 MB were a tenth of a short run under cachegrind).
    pub(crate) fn from_cache(path: &Path) -> Option<Self> {
        let data = object::read::ReadCache::new(std::fs::File::open(path).ok()?);
        let file = object::File::parse(&data).ok()?;
        let endian = if file.is_little_endian() {
            gimli::RunTimeEndian::Little
        } else {
            gimli::RunTimeEndian::Big
        };
        let debug_path = find_debug_file(path, &file);
        let key = cache::key(path, file.build_id().ok().flatten(), debug_path.as_deref())?;
        let c = cache::load(key)?;
        Some(ModuleTables::cached(c, path, debug_path, endian))
    }

    fn cached(
        tables: Tables,
        path: &Path,
        debug_path: Option<PathBuf>,
        endian: gimli::RunTimeEndian,
    ) -> Self {
        ModuleTables {
            tables,
            dwarf_sections: OnceLock::new(),
            dwarf_from: Some((path.to_path_buf(), debug_path)),
            endian,
            inline_ctx: OnceLock::new(),
        }
    }

    /// Builds the tables for an ELF image (`data`) whose name is `path`.
    pub(crate) fn build(path: &Path, data: &[u8], look_for_debug: bool) -> Result<Self, DumpError> {
        let file = object::File::parse(data).map_err(|e| elf_err(path, e))?;
        let endian = if file.is_little_endian() {
            gimli::RunTimeEndian::Little
        } else {
            gimli::RunTimeEndian::Big
        };
        let debug_path = look_for_debug
            .then(|| find_debug_file(path, &file))
            .flatten();
        // Tables of a module read from a file are cached on disk by what they are built from.
        let key = look_for_debug
            .then(|| cache::key(path, file.build_id().ok().flatten(), debug_path.as_deref()))
            .flatten();
        if let Some(c) = key.and_then(cache::load) {
            return Ok(ModuleTables::cached(c, path, debug_path, endian));
        }
        let mut named: HashMap<u64, (u64, Arc<str>)> = HashMap::new();
        let mut sections = Vec::new();
        collect_sections(&file, &mut sections);
        collect_symbols(&file, &mut named);

        let debug_data: Option<Vec<u8>> = debug_path.as_ref().and_then(|p| std::fs::read(p).ok());
        let debug_file = match &debug_data {
            Some(d) => object::File::parse(&d[..]).ok(),
            None => None,
        };
        if let Some(df) = &debug_file {
            collect_symbols(df, &mut named);
        }

        let mut syms: Vec<Sym> = named
            .iter()
            .map(|(&start, (size, raw))| Sym {
                start,
                end: start.saturating_add(*size),
                raw: raw.as_ref(),
            })
            .collect();
        syms.sort_by_key(|s| s.start);

        let dwarf_sections =
            dwarf_source(&file, debug_file.as_ref()).map(|f| load_sections(f, endian));
        let mut files = Vec::new();
        let mut rows = Vec::new();
        if let Some(secs) = &dwarf_sections {
            if let Some(dwarf) = make_dwarf(secs, endian) {
                // A broken line table loses line info but keeps symbols, as Valgrind does.
                let _ = read_lines(&dwarf, &mut files, &mut rows);
            }
        }
        rows.sort_by_key(|r| (r.addr, r.file != NO_FILE));
        let bytes = tables::encode(key.unwrap_or(0), &syms, &sections, &files, &rows);
        if let Some(k) = key {
            cache::store(k, &bytes);
        }
        let tables = Tables::parse(tables::Bytes::Owned(bytes), key.unwrap_or(0))
            .ok_or_else(|| elf_err(path, "symbol tables too large"))?;
        Ok(ModuleTables {
            tables,
            dwarf_sections: OnceLock::from(dwarf_sections),
            dwarf_from: None,
            endian,
            inline_ctx: OnceLock::new(),
        })
    }

    /// The symbol containing `addr` (link-time).
    pub(crate) fn symbol(&self, addr: u64) -> Option<Sym<'_>> {
        self.tables.symbol(addr)
    }

    /// The (file id, line) of `addr`, if the line table covers it.
    pub(crate) fn line(&self, addr: u64) -> Option<(u32, u32)> {
        self.tables.line(addr)
    }

    /// The section kind of `addr`.
    pub(crate) fn section_kind(&self, addr: u64) -> SectionKind {
        self.tables
            .sections
            .iter()
            .find(|(s, e, _)| *s <= addr && addr < *e)
            .map_or(SectionKind::Text, |x| x.2)
    }

    /// The inlined frames at `addr`, innermost first (empty without DWARF or inlining).
    pub(crate) fn inlined(&self, addr: u64) -> Vec<InlinedFrame> {
        let ctx = self.inline_ctx.get_or_init(|| {
            let secs = self
                .dwarf_sections
                .get_or_init(|| {
                    let (image, debug) = self.dwarf_from.as_ref()?;
                    let image = std::fs::read(image).ok()?;
                    let debug = debug.as_ref().and_then(|p| std::fs::read(p).ok());
                    let file = object::File::parse(&image[..]).ok()?;
                    let debug_file = debug
                        .as_ref()
                        .and_then(|d| object::File::parse(&d[..]).ok());
                    dwarf_source(&file, debug_file.as_ref()).map(|f| load_sections(f, self.endian))
                })
                .as_ref()?;
            addr2line::Context::from_dwarf(make_dwarf(secs, self.endian)?).ok()
        });
        let Some(ctx) = ctx else { return Vec::new() };
        let mut out = Vec::new();
        let Ok(mut frames) = ctx.find_frames(addr).skip_all_loads() else {
            return out;
        };
        while let Ok(Some(f)) = frames.next() {
            let function = f.function.as_ref().and_then(|n| {
                n.raw_name()
                    .ok()
                    .map(|s| super::demangle::demangle(s.as_ref()))
            });
            let (file, line) = match &f.location {
                Some(l) => (l.file.map(str::to_string), l.line.unwrap_or(0)),
                None => (None, 0),
            };
            out.push(InlinedFrame {
                function,
                file,
                line,
            });
        }
        out
    }
}

fn collect_sections(file: &object::File, out: &mut Vec<(u64, u64, SectionKind)>) {
    for s in file.sections() {
        // Valgrind's names (readelf.c); `.text` is the default kind.
        let kind = match s.name().unwrap_or("") {
            ".text" => continue,
            ".plt" => SectionKind::Plt,
            ".got" => SectionKind::Got,
            ".data" | ".sdata" => SectionKind::Data,
            ".bss" | ".sbss" | ".dynbss" => SectionKind::Bss,
            // `.got.plt` (Valgrind's GOTPLT kind, no name suffix) and `.rodata` (no kind).
            ".got.plt" | ".rodata" => SectionKind::Other,
            _ if s.kind() == ObjSectionKind::Text => SectionKind::Other,
            _ => continue,
        };
        if s.address() != 0 && s.size() != 0 {
            out.push((s.address(), s.address().saturating_add(s.size()), kind));
        }
    }
}

/// Adds the usable function symbols of `file` (`.symtab` and `.dynsym`) to `named`.
fn collect_symbols(file: &object::File, named: &mut HashMap<u64, (u64, Arc<str>)>) {
    for sym in file.symbols().chain(file.dynamic_symbols()) {
        if sym.kind() != SymbolKind::Text || sym.is_undefined() {
            continue;
        }
        let (addr, size) = (sym.address(), sym.size());
        if addr == 0 || size == 0 {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        if name.is_empty() {
            continue;
        }
        add_name(named, addr, size, name);
    }
}

fn add_name(named: &mut HashMap<u64, (u64, Arc<str>)>, addr: u64, size: u64, name: &str) {
    match named.get_mut(&addr) {
        Some((sz, cur)) => {
            *sz = (*sz).max(size);
            if prefer_name(name, cur) {
                *cur = Arc::from(name);
            }
        }
        None => {
            named.insert(addr, (size, Arc::from(name)));
        }
    }
}

/// Finds the separate debug file: build-id first, then `.gnu_debuglink` next to the file,
/// in `.debug/` and under `/usr/lib/debug`.
fn find_debug_file<'d, R: object::ReadRef<'d>>(
    path: &Path,
    file: &object::File<'d, R>,
) -> Option<PathBuf> {
    if let Ok(Some(id)) = file.build_id() {
        if id.len() >= 2 {
            let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
            let p = PathBuf::from(format!(
                "/usr/lib/debug/.build-id/{}/{}.debug",
                &hex[..2],
                &hex[2..]
            ));
            if p.is_file() {
                return Some(p);
            }
        }
    }
    if let Ok(Some((name, _crc))) = file.gnu_debuglink() {
        let name = std::str::from_utf8(name).ok()?;
        let dir = path.parent()?;
        let cands = [
            dir.join(name),
            dir.join(".debug").join(name),
            Path::new("/usr/lib/debug")
                .join(dir.strip_prefix("/").unwrap_or(dir))
                .join(name),
        ];
        return cands.into_iter().find(|p| p.is_file() && p != path);
    }
    None
}

/// The file whose DWARF describes the image: the image if it has a line table, else its
/// debug file if that has one.
fn dwarf_source<'a, 'd>(
    file: &'a object::File<'d>,
    debug_file: Option<&'a object::File<'d>>,
) -> Option<&'a object::File<'d>> {
    let has_lines = |f: &object::File| {
        f.section_by_name(".debug_line")
            .is_some_and(|s| s.size() > 0 && s.kind() != ObjSectionKind::UninitializedData)
    };
    if has_lines(file) {
        Some(file)
    } else {
        debug_file.filter(|f| has_lines(f))
    }
}

fn load_sections(
    file: &object::File,
    endian: gimli::RunTimeEndian,
) -> HashMap<gimli::SectionId, Reader> {
    // Only what line tables and inlined-call lookup read: location lists (often the biggest
    // compressed section) and type units are never needed, so they are not decompressed.
    let ids = [
        gimli::SectionId::DebugAbbrev,
        gimli::SectionId::DebugAddr,
        gimli::SectionId::DebugAranges,
        gimli::SectionId::DebugInfo,
        gimli::SectionId::DebugLine,
        gimli::SectionId::DebugLineStr,
        gimli::SectionId::DebugRanges,
        gimli::SectionId::DebugRngLists,
        gimli::SectionId::DebugStr,
        gimli::SectionId::DebugStrOffsets,
    ];
    let mut map = HashMap::new();
    for id in ids {
        let data: Cow<[u8]> = match file.section_by_name(id.name()) {
            Some(s) => s.uncompressed_data().unwrap_or(Cow::Borrowed(&[])),
            None => Cow::Borrowed(&[]),
        };
        map.insert(id, gimli::EndianArcSlice::new(Arc::from(&*data), endian));
    }
    map
}

fn make_dwarf(
    secs: &HashMap<gimli::SectionId, Reader>,
    endian: gimli::RunTimeEndian,
) -> Option<gimli::Dwarf<Reader>> {
    let empty = gimli::EndianArcSlice::new(Arc::from(&[][..]), endian);
    let load = |id: gimli::SectionId| -> Result<Reader, gimli::Error> {
        Ok(secs.get(&id).cloned().unwrap_or_else(|| empty.clone()))
    };
    gimli::Dwarf::load(load).ok()
}

fn read_lines(
    dwarf: &gimli::Dwarf<Reader>,
    files: &mut Vec<Arc<str>>,
    rows: &mut Vec<Row>,
) -> Result<(), gimli::Error> {
    use gimli::Reader as _;
    let mut interned: HashMap<String, u32> = HashMap::new();
    let mut units = dwarf.units();
    while let Some(header) = units.next()? {
        let Ok(unit) = dwarf.unit(header) else {
            continue;
        };
        let Some(program) = unit.line_program.clone() else {
            continue;
        };
        let mut cache: HashMap<u64, u32> = HashMap::new();
        let comp_dir = unit
            .comp_dir
            .as_ref()
            .and_then(|d| d.to_string_lossy().ok().map(|c| c.into_owned()))
            .unwrap_or_default();
        let mut state = program.rows();
        // Rows of the current sequence start here; a row followed by another at the same
        // address covers no byte and is dropped (Valgrind keeps only non-empty ranges), so a
        // sequence's last row does not outlive its end for the code after it.
        let mut seq_start = rows.len();
        while let Some((header, row)) = state.next_row()? {
            if rows.len() > seq_start && rows.last().is_some_and(|r| r.addr == row.address()) {
                rows.pop();
            }
            if row.end_sequence() {
                rows.push(Row {
                    addr: row.address(),
                    file: NO_FILE,
                    line: 0,
                });
                seq_start = rows.len();
                continue;
            }
            let fidx = row.file_index();
            let fid = match cache.get(&fidx) {
                Some(f) => *f,
                None => {
                    let name = match header.file(fidx) {
                        Some(entry) => {
                            let name = dwarf
                                .attr_string(&unit, entry.path_name())
                                .ok()
                                .and_then(|s| s.to_string_lossy().ok().map(|c| c.into_owned()))
                                .unwrap_or_default();
                            let dir = entry
                                .directory(header)
                                .and_then(|d| dwarf.attr_string(&unit, d).ok())
                                .and_then(|s| s.to_string_lossy().ok().map(|c| c.into_owned()))
                                .unwrap_or_default();
                            // Valgrind prefixes a relative directory with the unit's
                            // DW_AT_comp_dir (DWARF 4's implicit directory 0 *is* comp_dir),
                            // giving e.g. "./elf/./elf/dl-deps.c"; no normalisation.
                            let implicit0 = header.version() <= 4 && entry.directory_index() == 0;
                            let dir = if dir.starts_with('/') || implicit0 || comp_dir.is_empty() {
                                dir
                            } else if dir.is_empty() {
                                comp_dir.clone()
                            } else {
                                format!("{comp_dir}/{dir}")
                            };
                            if dir.is_empty() || name.starts_with('/') {
                                name
                            } else {
                                format!("{dir}/{name}")
                            }
                        }
                        None => "???".to_string(),
                    };
                    let next = u32::try_from(files.len()).unwrap_or(NO_FILE - 1);
                    let id = *interned.entry(name.clone()).or_insert_with(|| {
                        files.push(Arc::from(name.as_str()));
                        next
                    });
                    cache.insert(fidx, id);
                    id
                }
            };
            let line = row
                .line()
                .map_or(0, |l| u32::try_from(l.get()).unwrap_or(u32::MAX));
            // Valgrind's `addLoc` extends the range before instead of adding one that
            // follows it on the same line number, whatever the file (a header's code inlined
            // on a line of the same number keeps the file before it), also over the end of
            // a sequence that ends where this one starts.
            match rows.as_slice() {
                [.., prev] if prev.file != NO_FILE && prev.line == line => continue,
                [.., prev, end]
                    if end.file == NO_FILE
                        && end.addr == row.address()
                        && prev.file != NO_FILE
                        && prev.line == line =>
                {
                    rows.pop();
                    continue;
                }
                _ => {}
            }
            rows.push(Row {
                addr: row.address(),
                file: fid,
                line,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefer_name_rules() {
        assert!(prefer_name("bcmp", "memcmp"));
        assert!(prefer_name(
            "__libc_start_main@@GLIBC_2.34",
            "__libc_start_main"
        ));
        assert!(!prefer_name(
            "__libc_start_main",
            "__libc_start_main@@GLIBC_2.34"
        ));
        assert!(prefer_name("abc", "abd"));
        assert!(prefer_name("x", " "));
    }
}
