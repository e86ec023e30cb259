//! A module's symbol, section and line tables in one byte buffer: the form the disk cache
//! stores, which lookups read in place. A short run under a benchmark harness loads several
//! megabytes of cached tables (glibc's line rows, a Rust benchmark's symbols) and looks up a
//! few thousand addresses in them; decoding each entry into vectors and one allocated name
//! per symbol, and building the page indexes again, was a tenth of such a run.
//!
//! Layout (little-endian, every part 8-byte aligned; counts are of records):
//!
//! ```text
//! magic, key, syms, sym page base, sym page shift, sym pages, rows, row page base,
//! row page shift, row pages, sections, files, string bytes        (12 u64 after the magic)
//! syms       [start u64, end u64, name offset u32, name length u32]   sorted by start
//! sym pages  [first symbol u32]                                      (padded to 8 bytes)
//! rows       [address u64, file u32, line u32]                       sorted by address
//! row pages  [first row u32]                                         (padded to 8 bytes)
//! sections   [start u64, end u64, kind u64]
//! files      [name offset u32, name length u32]
//! strings    the symbol and file names, UTF-8                        (padded to 8 bytes)
//! magic
//! ```
//!
//! # Invariants
//! * [`Tables::parse`] accepts only a buffer that is complete and consistent: every count
//!   fits the buffer, the string bytes are UTF-8 and every name lies on character
//!   boundaries within them. A damaged entry is rejected, never half used.
//! * Lookups never panic, whatever the page indexes say (their ranges are clamped).

use std::sync::Arc;

use super::elf::SectionKind;

/// The format's name and version (part of the cache key, so a new layout never reads an
/// old entry).
pub(crate) const MAGIC: &[u8; 8] = b"RGSYMv06";
const SYM_SIZE: usize = 24;
const ROW_SIZE: usize = 16;
const PAGE_SIZE: usize = 4;
const SECTION_SIZE: usize = 24;
const FILE_SIZE: usize = 8;

/// A symbol as the tables give it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sym<'a> {
    pub start: u64,
    pub end: u64,
    /// The chosen raw (mangled) name.
    pub raw: &'a str,
}

/// One line-table row; `file == NO_FILE` ends a sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Row {
    pub addr: u64,
    pub file: u32,
    pub line: u32,
}

/// The file index of a row that ends a sequence.
pub(crate) const NO_FILE: u32 = u32::MAX;

/// Where a table's bytes live: a mapped cache entry, or a buffer read or built in memory.
pub(crate) enum Bytes {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

/// A byte range of the buffer.
#[derive(Debug, Clone, Copy, Default)]
struct Span {
    off: usize,
    len: usize,
}

/// Where the entries of each address range (a "page") of a table sorted by address begin,
/// so that a lookup searches one page's entries instead of the whole table: a big program's
/// line table has millions of rows, and the binary search over them, a host cache miss per
/// step, was most of the symbol lookups' time in a callgrind start-up (`cargo --version`).
#[derive(Debug, Clone, Copy, Default)]
struct Pages {
    base: u64,
    shift: u32,
    /// `u32` entries: the first entry at or above `base + (p << shift)`; none for a table
    /// searched whole.
    starts: Span,
}

/// A page index as it is built, before it is written.
struct PageStarts {
    base: u64,
    shift: u32,
    starts: Vec<u32>,
}

impl PageStarts {
    /// The index of `addrs` (ascending); pages of about one entry each. Small tables get
    /// none (searched whole).
    fn new(addrs: impl ExactSizeIterator<Item = u64> + Clone) -> PageStarts {
        let none = PageStarts {
            base: 0,
            shift: 0,
            starts: Vec::new(),
        };
        let n = addrs.len();
        let (Some(first), Some(last)) = (addrs.clone().next(), addrs.clone().last()) else {
            return none;
        };
        if n < 64 || u32::try_from(n).is_err() {
            return none;
        }
        let span = last - first;
        let shift = (64 - (span / n as u64).leading_zeros()).max(4);
        let pages = (span >> shift) as usize + 1;
        let mut starts = Vec::with_capacity(pages + 1);
        let mut i = 0u32;
        let mut it = addrs.peekable();
        for p in 0..=pages as u64 {
            let page_start = first + (p << shift);
            while it.next_if(|&a| a < page_start).is_some() {
                i += 1;
            }
            starts.push(i);
        }
        PageStarts {
            base: first,
            shift,
            starts,
        }
    }
}

/// The tables of one module (see the module documentation for the layout).
pub(crate) struct Tables {
    bytes: Bytes,
    syms: Span,
    sym_pages: Pages,
    rows: Span,
    row_pages: Pages,
    /// The names (a copy, checked once: a lookup takes its name with a bounds check only).
    strings: String,
    /// Section ranges and kinds (few: decoded once).
    pub sections: Vec<(u64, u64, SectionKind)>,
    /// File names by row file index (few: decoded once, shared by every location).
    pub files: Vec<Arc<str>>,
}

fn kind_code(k: SectionKind) -> u64 {
    match k {
        SectionKind::Text => 0,
        SectionKind::Plt => 1,
        SectionKind::Got => 2,
        SectionKind::Data => 3,
        SectionKind::Bss => 4,
        SectionKind::Other => 5,
    }
}

fn kind_of(c: u64) -> Option<SectionKind> {
    Some(match c {
        0 => SectionKind::Text,
        1 => SectionKind::Plt,
        2 => SectionKind::Got,
        3 => SectionKind::Data,
        4 => SectionKind::Bss,
        5 => SectionKind::Other,
        _ => return None,
    })
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    b.get(off..off + 8)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    b.get(off..off + 4)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}

/// The encoded tables for `key` (`syms` sorted by start, `rows` by address).
pub(crate) fn encode(
    key: u64,
    syms: &[Sym<'_>],
    sections: &[(u64, u64, SectionKind)],
    files: &[Arc<str>],
    rows: &[Row],
) -> Vec<u8> {
    let sym_pages = PageStarts::new(syms.iter().map(|s| s.start));
    let row_pages = PageStarts::new(rows.iter().map(|r| r.addr));
    let mut strings: Vec<u8> = Vec::new();
    // An offset or length past u32 (4 GiB of names) makes `parse` reject the entry: the
    // tables are then built again, never read wrong.
    let mut name = |s: &str| {
        let off = u32::try_from(strings.len()).unwrap_or(u32::MAX);
        strings.extend_from_slice(s.as_bytes());
        (off, u32::try_from(s.len()).unwrap_or(u32::MAX))
    };
    let sym_names: Vec<(u32, u32)> = syms.iter().map(|s| name(s.raw)).collect();
    let file_names: Vec<(u32, u32)> = files.iter().map(|f| name(f)).collect();

    let mut out = Vec::with_capacity(
        128 + syms.len() * SYM_SIZE + rows.len() * ROW_SIZE + strings.len() + 4 * 8,
    );
    let u64s = |out: &mut Vec<u8>, v: u64| out.extend_from_slice(&v.to_le_bytes());
    let u32s = |out: &mut Vec<u8>, v: u32| out.extend_from_slice(&v.to_le_bytes());
    let pad = |out: &mut Vec<u8>| out.resize(out.len().next_multiple_of(8), 0);
    out.extend_from_slice(MAGIC);
    for v in [
        key,
        syms.len() as u64,
        sym_pages.base,
        u64::from(sym_pages.shift),
        sym_pages.starts.len() as u64,
        rows.len() as u64,
        row_pages.base,
        u64::from(row_pages.shift),
        row_pages.starts.len() as u64,
        sections.len() as u64,
        files.len() as u64,
        strings.len() as u64,
    ] {
        u64s(&mut out, v);
    }
    for (s, &(off, len)) in syms.iter().zip(&sym_names) {
        u64s(&mut out, s.start);
        u64s(&mut out, s.end);
        u32s(&mut out, off);
        u32s(&mut out, len);
    }
    for &p in &sym_pages.starts {
        u32s(&mut out, p);
    }
    pad(&mut out);
    for r in rows {
        u64s(&mut out, r.addr);
        u32s(&mut out, r.file);
        u32s(&mut out, r.line);
    }
    for &p in &row_pages.starts {
        u32s(&mut out, p);
    }
    pad(&mut out);
    for &(s, e, k) in sections {
        u64s(&mut out, s);
        u64s(&mut out, e);
        u64s(&mut out, kind_code(k));
    }
    for &(off, len) in &file_names {
        u32s(&mut out, off);
        u32s(&mut out, len);
    }
    out.extend_from_slice(&strings);
    pad(&mut out);
    out.extend_from_slice(MAGIC);
    out
}

/// Reads a buffer front to back, each part a span of it.
struct Layout<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Layout<'_> {
    fn u64(&mut self) -> Option<u64> {
        let v = u64::from_le_bytes(self.b.get(self.pos..self.pos + 8)?.try_into().ok()?);
        self.pos += 8;
        Some(v)
    }
    /// The next `count` records of `size` bytes, the span padded to 8 bytes.
    fn span(&mut self, count: u64, size: usize) -> Option<Span> {
        let len = usize::try_from(count).ok()?.checked_mul(size)?;
        let off = self.pos;
        let end = off.checked_add(len)?.checked_next_multiple_of(8)?;
        (end <= self.b.len()).then(|| {
            self.pos = end;
            Span { off, len }
        })
    }
}

impl Tables {
    /// The tables in `bytes` if they are a complete entry for `key`.
    pub(crate) fn parse(bytes: Bytes, key: u64) -> Option<Tables> {
        let b: &[u8] = &bytes;
        if b.get(..8)? != MAGIC {
            return None;
        }
        let mut l = Layout { b, pos: 8 };
        if l.u64()? != key {
            return None;
        }
        let mut h = [0u64; 11];
        for v in &mut h {
            *v = l.u64()?;
        }
        let [n_syms, sym_base, sym_shift, n_sym_pages, n_rows, row_base, row_shift, n_row_pages, n_sections, n_files, n_strings] =
            h;
        let shift = |s: u64| u32::try_from(s).ok().filter(|&s| s < 64);
        let syms = l.span(n_syms, SYM_SIZE)?;
        let sym_pages = Pages {
            base: sym_base,
            shift: shift(sym_shift)?,
            starts: l.span(n_sym_pages, PAGE_SIZE)?,
        };
        let rows = l.span(n_rows, ROW_SIZE)?;
        let row_pages = Pages {
            base: row_base,
            shift: shift(row_shift)?,
            starts: l.span(n_row_pages, PAGE_SIZE)?,
        };
        let section_span = l.span(n_sections, SECTION_SIZE)?;
        let file_span = l.span(n_files, FILE_SIZE)?;
        let strings = l.span(n_strings, 1)?;
        if b.get(l.pos..)? != MAGIC {
            return None;
        }
        let text = std::str::from_utf8(&b[strings.off..strings.off + strings.len]).ok()?;
        let strings = text.to_owned();
        let name = |at: usize| -> Option<&str> {
            let (off, len) = (u32_at(b, at) as usize, u32_at(b, at + 4) as usize);
            text.get(off..off.checked_add(len)?)
        };
        for i in 0..syms.len / SYM_SIZE {
            name(syms.off + i * SYM_SIZE + 16)?;
        }
        let mut sections = Vec::with_capacity(section_span.len / SECTION_SIZE);
        for i in 0..section_span.len / SECTION_SIZE {
            let at = section_span.off + i * SECTION_SIZE;
            sections.push((
                u64_at(b, at),
                u64_at(b, at + 8),
                kind_of(u64_at(b, at + 16))?,
            ));
        }
        let mut files = Vec::with_capacity(file_span.len / FILE_SIZE);
        for i in 0..file_span.len / FILE_SIZE {
            files.push(Arc::from(name(file_span.off + i * FILE_SIZE)?));
        }
        Some(Tables {
            syms,
            sym_pages,
            rows,
            row_pages,
            strings,
            sections,
            files,
            bytes,
        })
    }

    #[cfg(test)]
    fn sym_count(&self) -> usize {
        self.syms.len / SYM_SIZE
    }

    #[cfg(test)]
    fn row_count(&self) -> usize {
        self.rows.len / ROW_SIZE
    }

    /// The start and end of symbol `i` (in start order).
    fn sym_range(&self, i: usize) -> (u64, u64) {
        let at = self.syms.off + i * SYM_SIZE;
        (u64_at(&self.bytes, at), u64_at(&self.bytes, at + 8))
    }

    /// Symbol `i` (in start order).
    pub(crate) fn sym(&self, i: usize) -> Sym<'_> {
        let b: &[u8] = &self.bytes;
        let at = self.syms.off + i * SYM_SIZE;
        let (off, len) = (u32_at(b, at + 16) as usize, u32_at(b, at + 20) as usize);
        let (start, end) = self.sym_range(i);
        Sym {
            start,
            end,
            // `parse` checked every name; the fallback is unreachable.
            raw: self.strings.get(off..off + len).unwrap_or(""),
        }
    }

    /// Row `i` (in address order).
    pub(crate) fn row(&self, i: usize) -> Row {
        let b: &[u8] = &self.bytes;
        let at = self.rows.off + i * ROW_SIZE;
        Row {
            addr: u64_at(b, at),
            file: u32_at(b, at + 8),
            line: u32_at(b, at + 12),
        }
    }

    /// How many entries of the table (`count` records of `size` bytes at `table`, each
    /// starting with its address) are at or below `addr`.
    fn partition_point(&self, pages: Pages, table: Span, size: usize, addr: u64) -> usize {
        let b: &[u8] = &self.bytes;
        let len = table.len / size;
        let n_pages = pages.starts.len / PAGE_SIZE;
        let page_start = |p: usize| u32_at(b, pages.starts.off + p * PAGE_SIZE) as usize;
        let (mut lo, mut hi) = if n_pages == 0 {
            (0, len)
        } else {
            match addr
                .checked_sub(pages.base)
                .map(|o| (o >> pages.shift) as usize)
            {
                None => (0, 0),
                Some(p) if p + 1 < n_pages => (page_start(p), page_start(p + 1)),
                Some(_) => (page_start(n_pages - 1), len),
            }
        };
        hi = hi.min(len);
        lo = lo.min(hi);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if u64_at(b, table.off + mid * size) <= addr {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// The symbol containing `addr`.
    pub(crate) fn symbol(&self, addr: u64) -> Option<Sym<'_>> {
        let idx = self.partition_point(self.sym_pages, self.syms, SYM_SIZE, addr);
        // Nested symbols are rare; look back a few entries for one that contains addr.
        (idx.saturating_sub(8)..idx)
            .rev()
            .find(|&i| addr < self.sym_range(i).1)
            .map(|i| self.sym(i))
    }

    /// The (file id, line) of `addr`, if the line table covers it.
    pub(crate) fn line(&self, addr: u64) -> Option<(u32, u32)> {
        let idx = self.partition_point(self.row_pages, self.rows, ROW_SIZE, addr);
        let r = self.row(idx.checked_sub(1)?);
        (r.file != NO_FILE).then_some((r.file, r.line))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: Vec<u8>, key: u64) -> Option<Tables> {
        Tables::parse(Bytes::Owned(bytes), key)
    }

    fn rows_at(addrs: &[u64]) -> Vec<Row> {
        addrs
            .iter()
            .enumerate()
            .map(|(i, &addr)| Row {
                addr,
                file: 0,
                line: i as u32 + 1,
            })
            .collect()
    }

    /// The page index finds what a binary search over the whole table finds, for tables
    /// with gaps, runs of equal addresses and addresses outside them.
    #[test]
    fn page_index_agrees_with_a_full_binary_search() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for (n, spread) in [
            (0, 1),
            (10, 5),
            (64, 1),
            (1000, 3),
            (5000, 200),
            (3000, 1 << 20),
        ] {
            let mut addrs: Vec<u64> = Vec::with_capacity(n);
            let mut a = 0x40_0000u64;
            for i in 0..n {
                // Mostly small steps, a few large gaps and some repeated addresses.
                a += match i % 97 {
                    0 => next() % (spread * 1000 + 1),
                    1 | 2 => 0,
                    _ => next() % (spread + 1),
                };
                addrs.push(a);
            }
            let files = [Arc::from("f.c")];
            let t = parse(encode(1, &[], &[], &files, &rows_at(&addrs)), 1).expect("parses");
            let hi = addrs.last().copied().unwrap_or(0x40_0000) + 100;
            let mut probes: Vec<u64> = addrs.iter().flat_map(|&a| [a - 1, a, a + 1]).collect();
            probes.extend([0, 1, 0x3f_ffff, hi, u64::MAX]);
            probes.extend((0..2000).map(|_| 0x40_0000 + next() % (hi - 0x40_0000)));
            for x in probes {
                assert_eq!(
                    t.partition_point(t.row_pages, t.rows, ROW_SIZE, x),
                    addrs.partition_point(|&a| a <= x),
                    "n {n}, spread {spread}, address {x:#x}"
                );
            }
        }
    }

    /// What is encoded reads back the same; other keys, truncation and damage are refused.
    #[test]
    fn tables_read_back_what_was_encoded_and_reject_damage() {
        let names: Vec<String> = (0..200).map(|i| format!("fn_{i}_é")).collect();
        let syms: Vec<Sym> = names
            .iter()
            .enumerate()
            .map(|(i, n)| Sym {
                start: 0x1000 + 16 * i as u64,
                end: 0x1000 + 16 * i as u64 + 12,
                raw: n,
            })
            .collect();
        let sections = [
            (0x1000, 0x3000, SectionKind::Text),
            (0x900, 0x1000, SectionKind::Plt),
        ];
        let files: Vec<Arc<str>> = vec![Arc::from("a.c"), Arc::from("dir/b.h")];
        let mut rows = rows_at(&(0..300).map(|i| 0x1000 + 10 * i).collect::<Vec<_>>());
        rows[7].file = 1;
        rows.push(Row {
            addr: 0x2000,
            file: NO_FILE,
            line: 0,
        });
        let bytes = encode(7, &syms, &sections, &files, &rows);
        let t = parse(bytes.clone(), 7).expect("parses");
        assert_eq!(
            (0..t.sym_count()).map(|i| t.sym(i)).collect::<Vec<_>>(),
            syms
        );
        assert_eq!(
            (0..t.row_count()).map(|i| t.row(i)).collect::<Vec<_>>(),
            rows
        );
        assert_eq!(t.sections, sections);
        assert_eq!(t.files, files);
        assert_eq!(t.symbol(0x1000 + 16 * 5 + 3).map(|s| s.raw), Some("fn_5_é"));
        assert_eq!(t.symbol(0x1000 + 16 * 5 + 13), None, "in a gap");
        assert_eq!(t.line(0x1000 + 10 * 7 + 2), Some((1, 8)));
        assert_eq!(t.line(0x2004), None, "past the end of the sequence");
        assert_eq!(t.line(0xfff), None, "before the table");

        assert!(parse(bytes.clone(), 8).is_none(), "another key");
        assert!(
            parse(bytes[..bytes.len() - 1].to_vec(), 7).is_none(),
            "truncated"
        );
        let mut bad = bytes.clone();
        bad[16] = 0xff; // the symbol count: more than the entry holds
        assert!(parse(bad, 7).is_none(), "corrupt count");
        let mut bad = bytes.clone();
        let first_name_len = 8 + 12 * 8 + 20;
        bad[first_name_len + 2] = 0xff; // a name running past the strings
        assert!(parse(bad, 7).is_none(), "corrupt name");
        let mut bad = bytes;
        let strings_at = bad.len() - 8 - t.strings.len().next_multiple_of(8);
        bad[strings_at + 3] = 0xc3; // not UTF-8 any more
        assert!(parse(bad, 7).is_none(), "corrupt text");
    }
}
