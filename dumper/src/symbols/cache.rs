//! A per-user disk cache of built module tables (symbols, sections, line rows), so that the
//! runs after the first skip reading, decompressing and parsing a library's debug information
//! (for glibc with separate, compressed DWARF that is most of a short run's exit time).
//!
//! Entries live in `$XDG_CACHE_HOME/rgrind/symbols` (else `~/.cache/rgrind/symbols`, the home
//! from `$HOME` or, in an empty environment, `/etc/passwd`), one file
//! per key. The key covers everything the tables are built from: the image's path, size,
//! modification time and build id, and the same for the separate debug file used, plus the
//! format version. `RGRIND_SYMBOL_CACHE=0` turns the cache off.
//!
//! # Invariants
//! * The cache is only an accelerator: any failure to read or write it, or an entry that does
//!   not decode completely, means building the tables as without it.
//! * An entry is written whole (temporary file, then rename), so readers never see half of one.
use super::elf::{Row, SectionKind, Sym};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const MAGIC: &[u8; 8] = b"RGSYMv03";

/// The cached part of a module's tables.
pub(crate) struct Cached {
    pub syms: Vec<Sym>,
    pub sections: Vec<(u64, u64, SectionKind)>,
    pub files: Vec<Arc<str>>,
    pub rows: Vec<Row>,
}

fn dir() -> Option<PathBuf> {
    if std::env::var_os("RGRIND_SYMBOL_CACHE").is_some_and(|v| v == "0") {
        return None;
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| home_dir().map(|h| h.join(".cache")))?;
    Some(base.join("rgrind").join("symbols"))
}

/// `$HOME`, else the effective user's home in `/etc/passwd`: benchmark harnesses run the
/// profiler with an empty environment (gungraun's default), and without the cache each of
/// their runs read the benchmark's debug information again (0.13 s instead of 0.06 s per
/// run of a small Rust benchmark under callgrind). The file is read rather than asking the
/// name service, which may load modules into rgrind's process in the middle of a run.
fn home_dir() -> Option<PathBuf> {
    if let Some(home) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(home));
    }
    // `/proc/self` belongs to the effective user (of a dumpable process, as rgrind is).
    let uid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").ok()?);
    let passwd = std::fs::read("/etc/passwd").ok()?;
    passwd_home(&passwd, uid)
}

/// The home directory of `uid` in a passwd file's text (`name:pw:uid:gid:gecos:home:shell`).
fn passwd_home(passwd: &[u8], uid: u32) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    passwd.split(|&b| b == b'\n').find_map(|line| {
        let fields: Vec<&[u8]> = line.split(|&b| b == b':').collect();
        let (Some(id), Some(home)) = (fields.get(2), fields.get(5)) else {
            return None;
        };
        (std::str::from_utf8(id).ok()?.parse::<u32>().ok()? == uid && home.first() == Some(&b'/'))
            .then(|| PathBuf::from(std::ffi::OsStr::from_bytes(home)))
    })
}

/// The key of the tables built from `image` (with `build_id`) and `debug` (the separate debug
/// file used, if any); `None` when a file cannot be examined.
pub(crate) fn key(image: &Path, build_id: Option<&[u8]>, debug: Option<&Path>) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut h = Fnv::default();
    h.bytes(MAGIC);
    for p in std::iter::once(image).chain(debug) {
        let m = std::fs::metadata(p).ok()?;
        h.bytes(p.as_os_str().as_encoded_bytes());
        h.u64(m.len());
        h.u64(m.mtime() as u64);
        h.u64(m.mtime_nsec() as u64);
        h.u64(m.ino());
        h.u64(0xff);
    }
    h.bytes(build_id.unwrap_or_default());
    Some(h.0)
}

/// The entry for `key`, if there is a complete one.
pub(crate) fn load(key: u64) -> Option<Cached> {
    let file = std::fs::File::open(dir()?.join(format!("{key:016x}"))).ok()?;
    decode(&map_entry(&file)?, key)
}

/// The entry's bytes, mapped rather than read: a short run loads a few megabytes of entries
/// (glibc's lines), and reading them copied each page and touched as many fresh heap pages.
#[allow(unsafe_code)]
fn map_entry(file: &std::fs::File) -> Option<memmap2::Mmap> {
    // SAFETY: entries are never written in place (`store` writes a temporary file and renames
    // it over the entry), so the mapped file keeps its contents while `decode` copies out of
    // the mapping, which is dropped before `load` returns.
    unsafe { memmap2::MmapOptions::new().populate().map(file) }.ok()
}

/// Writes the entry for `key` (best effort).
pub(crate) fn store(
    key: u64,
    syms: &[Sym],
    sections: &[(u64, u64, SectionKind)],
    files: &[Arc<str>],
    rows: &[Row],
) {
    let Some(dir) = dir() else { return };
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    let path = dir.join(format!("{key:016x}"));
    let tmp = dir.join(format!("{key:016x}.{}", std::process::id()));
    let bytes = encode(key, syms, sections, files, rows);
    if std::fs::write(&tmp, bytes).is_ok() && std::fs::rename(&tmp, &path).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

#[derive(Clone, Copy)]
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        for &x in b {
            self.0 = (self.0 ^ u64::from(x)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn u64(&mut self, v: u64) {
        for x in v.to_le_bytes() {
            self.0 = (self.0 ^ u64::from(x)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

fn kind_code(k: SectionKind) -> u8 {
    match k {
        SectionKind::Text => 0,
        SectionKind::Plt => 1,
        SectionKind::Got => 2,
        SectionKind::Data => 3,
        SectionKind::Bss => 4,
    }
}

fn kind_of(c: u8) -> Option<SectionKind> {
    Some(match c {
        0 => SectionKind::Text,
        1 => SectionKind::Plt,
        2 => SectionKind::Got,
        3 => SectionKind::Data,
        4 => SectionKind::Bss,
        _ => return None,
    })
}

pub(crate) fn encode(
    key: u64,
    syms: &[Sym],
    sections: &[(u64, u64, SectionKind)],
    files: &[Arc<str>],
    rows: &[Row],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + rows.len() * 16 + syms.len() * 40);
    let u64s = |out: &mut Vec<u8>, v: u64| out.extend_from_slice(&v.to_le_bytes());
    let str_ = |out: &mut Vec<u8>, s: &str| {
        out.extend_from_slice(&(s.len() as u64).to_le_bytes());
        out.extend_from_slice(s.as_bytes());
    };
    out.extend_from_slice(MAGIC);
    u64s(&mut out, key);
    u64s(&mut out, syms.len() as u64);
    for s in syms {
        u64s(&mut out, s.start);
        u64s(&mut out, s.end);
        str_(&mut out, &s.raw);
    }
    u64s(&mut out, sections.len() as u64);
    for &(s, e, k) in sections {
        u64s(&mut out, s);
        u64s(&mut out, e);
        out.push(kind_code(k));
    }
    u64s(&mut out, files.len() as u64);
    for f in files {
        str_(&mut out, f);
    }
    u64s(&mut out, rows.len() as u64);
    for r in rows {
        u64s(&mut out, r.addr);
        out.extend_from_slice(&r.file.to_le_bytes());
        out.extend_from_slice(&r.line.to_le_bytes());
    }
    out.extend_from_slice(MAGIC);
    out
}

struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn count(&mut self, each: usize) -> Option<usize> {
        let n = usize::try_from(self.u64()?).ok()?;
        // A count the rest of the entry cannot hold is corruption, not a huge allocation.
        (n.checked_mul(each)? <= self.0.len()).then_some(n)
    }
    fn str_(&mut self) -> Option<Arc<str>> {
        let n = usize::try_from(self.u64()?).ok()?;
        Some(Arc::from(std::str::from_utf8(self.take(n)?).ok()?))
    }
}

pub(crate) fn decode(bytes: &[u8], key: u64) -> Option<Cached> {
    let mut c = Cursor(bytes);
    if c.take(8)? != MAGIC || c.u64()? != key {
        return None;
    }
    let n = c.count(24)?;
    let mut syms = Vec::with_capacity(n);
    for _ in 0..n {
        let (start, end) = (c.u64()?, c.u64()?);
        syms.push(Sym {
            start,
            end,
            raw: c.str_()?,
        });
    }
    let n = c.count(17)?;
    let mut sections = Vec::with_capacity(n);
    for _ in 0..n {
        let (s, e) = (c.u64()?, c.u64()?);
        sections.push((s, e, kind_of(c.take(1)?[0])?));
    }
    let n = c.count(8)?;
    let mut files = Vec::with_capacity(n);
    for _ in 0..n {
        files.push(c.str_()?);
    }
    let n = c.count(16)?;
    let mut rows = Vec::with_capacity(n);
    for _ in 0..n {
        rows.push(Row {
            addr: c.u64()?,
            file: c.u32()?,
            line: c.u32()?,
        });
    }
    (c.take(8)? == MAGIC && c.0.is_empty()).then_some(Cached {
        syms,
        sections,
        files,
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbols::elf::ModuleTables;

    #[test]
    fn entries_decode_to_what_was_encoded_and_reject_damage() {
        let exe = std::env::current_exe().unwrap();
        let t = ModuleTables::build(&exe, &std::fs::read(&exe).unwrap(), false).unwrap();
        assert!(
            !t.syms.is_empty() && !t.rows.is_empty(),
            "the test binary has symbols and lines"
        );
        let bytes = encode(7, &t.syms, &t.sections, &t.files, &t.rows);
        let c = decode(&bytes, 7).expect("decodes");
        assert_eq!(format!("{:?}", c.syms), format!("{:?}", t.syms));
        assert_eq!(format!("{:?}", c.sections), format!("{:?}", t.sections));
        assert_eq!(format!("{:?}", c.rows), format!("{:?}", t.rows));
        assert_eq!(c.files, t.files);
        assert!(decode(&bytes, 8).is_none(), "another key");
        assert!(decode(&bytes[..bytes.len() - 1], 7).is_none(), "truncated");
        let mut bad = bytes.clone();
        bad[16] = 0xff; // the symbol count: more than the entry holds
        assert!(decode(&bad, 7).is_none(), "corrupt count");
    }

    #[test]
    fn the_key_follows_the_files() {
        let exe = std::env::current_exe().unwrap();
        let a = key(&exe, Some(b"id"), None).unwrap();
        assert_eq!(key(&exe, Some(b"id"), None), Some(a));
        assert_ne!(key(&exe, Some(b"other"), None), Some(a));
        assert_ne!(
            key(&exe, Some(b"id"), Some(Path::new("/proc/self/exe"))),
            Some(a)
        );
        assert_eq!(key(Path::new("/nonexistent/x"), None, None), None);
    }

    #[test]
    fn a_home_is_found_in_the_passwd_text_by_uid() {
        let passwd = b"root:x:0:0:root:/root:/bin/bash\n\
            daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n\
            # a comment line\n\
            broken:x:1000\n\
            odd:x:1001:1001::relative:/bin/sh\n\
            user:x:1002:1002:A User,,,:/home/user:/bin/sh";
        assert_eq!(passwd_home(passwd, 0), Some(PathBuf::from("/root")));
        assert_eq!(passwd_home(passwd, 1002), Some(PathBuf::from("/home/user")));
        assert_eq!(passwd_home(passwd, 1000), None, "too few fields");
        assert_eq!(passwd_home(passwd, 1001), None, "not an absolute path");
        assert_eq!(passwd_home(passwd, 4242), None, "no such user");
    }
}
