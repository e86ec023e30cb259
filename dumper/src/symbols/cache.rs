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
use super::tables::{Bytes, Tables, MAGIC};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// Found once per run: every module's load asked again, which in an empty environment
/// read `/etc/passwd` each time.
fn dir() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        if std::env::var_os("RGRIND_SYMBOL_CACHE").is_some_and(|v| v == "0") {
            return None;
        }
        let base = std::env::var_os("XDG_CACHE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| home_dir().map(|h| h.join(".cache")))?;
        Some(base.join("rgrind").join("symbols"))
    })
    .as_deref()
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

/// Whether entries are mapped rather than read (`map_entries`).
static MAP_ENTRIES: AtomicBool = AtomicBool::new(false);

/// From now on, maps cache entries instead of reading them: for a tool to call once the guest
/// can no longer read its `/proc/self/maps` (its exit). Until then entries are read, as
/// the tables live for the rest of the run and a mapping would add lines to the guest's
/// maps, which Rust programs parse at start-up (their counts would change with rgrind's
/// cache). Mapped, a dump that loads the tables at exit (cachegrind's) touches only the
/// pages of the symbols and rows it looks up: a Rust program's `--help` under cachegrind
/// 27.8 ms read, 25.5 ms mapped.
pub fn map_entries() {
    MAP_ENTRIES.store(true, Ordering::Relaxed);
}

/// The entry for `key`, if there is a complete one.
pub(crate) fn load(key: u64) -> Option<Tables> {
    let path = dir()?.join(format!("{key:016x}"));
    let bytes = if MAP_ENTRIES.load(Ordering::Relaxed) {
        Bytes::Mapped(map_entry(&std::fs::File::open(path).ok()?)?)
    } else {
        Bytes::Owned(std::fs::read(path).ok()?)
    };
    Tables::parse(bytes, key)
}

#[allow(unsafe_code)]
fn map_entry(file: &std::fs::File) -> Option<memmap2::Mmap> {
    // SAFETY: entries are never written in place (`store` writes a temporary file and renames
    // it over the entry, `trim` unlinks), so the mapped file keeps its contents for as long
    // as the mapping (and the tables reading it) live.
    unsafe { memmap2::MmapOptions::new().map(file) }.ok()
}

/// Writes `bytes` (encoded tables) as the entry for `key` (best effort).
pub(crate) fn store(key: u64, bytes: &[u8]) {
    let Some(dir) = dir() else { return };
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let path = dir.join(format!("{key:016x}"));
    let tmp = dir.join(format!("{key:016x}.{}", std::process::id()));
    if std::fs::write(&tmp, bytes).is_ok() && std::fs::rename(&tmp, &path).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    trim(dir, &path, TRIM_ABOVE, TRIM_TO);
}

/// The cache's size that makes a store trim it, and the size it trims it to. Every rebuild
/// of a program (a benchmark edited and run again) adds an entry of up to tens of
/// megabytes, and nothing else ever removes one.
const TRIM_ABOVE: u64 = 512 << 20;
const TRIM_TO: u64 = 256 << 20;

/// When the entries in `dir` take more than `above` bytes, removes the oldest written
/// (never `keep`) until they take at most `to`; also removes temporary files left more
/// than an hour ago by a process that died while writing. Best effort: a store has just
/// parsed a program's debug information, which costs far more than listing the folder.
fn trim(dir: &Path, keep: &Path, above: u64, to: u64) {
    let Ok(list) = std::fs::read_dir(dir) else {
        return;
    };
    let now = std::time::SystemTime::now();
    let mut entries = Vec::new();
    let mut total = 0u64;
    for e in list.flatten() {
        let (path, Ok(meta)) = (e.path(), e.metadata()) else {
            continue;
        };
        let written = meta.modified().unwrap_or(now);
        if e.file_name().to_string_lossy().contains('.') {
            let stale = now
                .duration_since(written)
                .is_ok_and(|age| age.as_secs() > 3600);
            if stale {
                let _ = std::fs::remove_file(&path);
            }
            continue;
        }
        total += meta.len();
        entries.push((written, meta.len(), path));
    }
    if total <= above {
        return;
    }
    entries.sort();
    for (_, len, path) in entries {
        if total <= to {
            break;
        }
        if path != keep && std::fs::remove_file(&path).is_ok() {
            total -= len;
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Over the limit, the oldest entries go first, never the one just written; stale
    /// temporary files go whatever the size.
    #[test]
    fn a_full_cache_loses_its_oldest_entries() {
        let dir = std::env::temp_dir().join(format!("rgrind-cache-trim-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let hour = std::time::Duration::from_secs(3600);
        let now = std::time::SystemTime::now();
        let put = |name: &str, len: usize, age_hours: u32| {
            let path = dir.join(name);
            std::fs::write(&path, vec![0u8; len]).unwrap();
            let f = std::fs::File::options().write(true).open(&path).unwrap();
            f.set_modified(now - hour * age_hours).unwrap();
            path
        };
        let oldest = put("0000000000000001", 400, 50);
        let kept = put("0000000000000002", 300, 40);
        let newer = put("0000000000000003", 300, 30);
        let newest = put("0000000000000004", 300, 20);
        let stale_tmp = put("0000000000000005.123", 10, 2);
        let fresh_tmp = put("0000000000000006.124", 10, 0);
        let exists = |p: &Path| p.exists();

        trim(&dir, &kept, 2000, 1000);
        assert!(
            [&oldest, &kept, &newer, &newest].iter().all(|p| exists(p)),
            "under the limit"
        );
        assert!(
            !exists(&stale_tmp) && exists(&fresh_tmp),
            "only the stale temporary file"
        );

        trim(&dir, &kept, 1000, 700);
        assert!(!exists(&oldest), "the oldest entry goes first");
        assert!(exists(&kept), "the entry just written stays, old as it is");
        assert!(!exists(&newer), "then the next oldest, down to the target");
        assert!(exists(&newest));
        let _ = std::fs::remove_dir_all(&dir);
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
