//! The environment the guest starts with. With `--guest-env=valgrind` it is the one a program
//! gets under `valgrind` on this system, because ld.so and glibc's start-up work (and so every
//! count) depends on it:
//! * Valgrind's core preload object first in `LD_PRELOAD` (rgrind's stand-in,
//!   `preload/vgpreload_core.c`, built by build.rs and written once to a cache directory);
//! * on Debian-family systems, where `valgrind` is a wrapper script, the wrapper's variables:
//!   `LD_LIBRARY_PATH` ending in `/usr/lib/debug`, `GLIBCPP_FORCE_NEW=1`, `GLIBCXX_FORCE_NEW=1`.
//!
//! # Invariants
//! * Applying it twice changes nothing (a program exec'd under `--trace-children=yes` gets
//!   rgrind again with the environment the parent guest passed on).
//!
//! The CPU and auxv parts of the presentation are the core's (`dbt_core::Presentation`).
use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// rgrind's stand-in for `vgpreload_core-amd64-linux.so`.
const PRELOAD: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/vgpreload_core-amd64-linux.so"));
const PRELOAD_NAME: &str = "vgpreload_core-amd64-linux.so";
/// Where Debian's `valgrind` wrapper points `LD_LIBRARY_PATH` (separate debug libraries).
const DEBIAN_DEBUG_PATH: &str = "/usr/lib/debug";

/// The guest's environment: this process's, with Valgrind's additions when `valgrind`;
/// also the preload object's path (to be taken out of `LD_PRELOAD` again when the guest
/// execs a program rgrind does not follow).
pub fn build(valgrind: bool) -> Result<(Vec<CString>, Option<PathBuf>), String> {
    let mut vars: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    if !valgrind {
        return Ok((to_envp(vars), None));
    }
    let preload = install_preload()?;
    let debian = Path::new("/etc/debian_version").exists();
    add_valgrind_vars(&mut vars, preload.as_os_str(), debian);
    Ok((to_envp(vars), Some(preload)))
}

/// What `valgrind` adds to the environment: `preload` first in `LD_PRELOAD`, and with
/// `debian` the wrapper script's variables. Idempotent.
fn add_valgrind_vars(vars: &mut Vec<(OsString, OsString)>, preload: &OsStr, debian: bool) {
    if debian {
        let debug = OsStr::new(DEBIAN_DEBUG_PATH);
        update(vars, "LD_LIBRARY_PATH", |old| match old {
            Some(o) if o.is_empty() => debug.to_owned(),
            Some(o) if split_paths(o).any(|p| p == debug.as_bytes()) => o.to_owned(),
            Some(o) => join(o, debug),
            None => debug.to_owned(),
        });
        for k in ["GLIBCPP_FORCE_NEW", "GLIBCXX_FORCE_NEW"] {
            update(vars, k, |old| old.unwrap_or(OsStr::new("1")).to_owned());
        }
    }
    update(vars, "LD_PRELOAD", |old| match old {
        Some(o) if o.is_empty() => preload.to_owned(),
        Some(o) if split_paths(o).any(|x| x == preload.as_bytes()) => o.to_owned(),
        Some(o) => join(preload, o),
        None => preload.to_owned(),
    });
}

fn split_paths(v: &OsStr) -> impl Iterator<Item = &[u8]> {
    v.as_bytes().split(|&b| b == b':' || b == b' ')
}

fn join(a: &OsStr, b: &OsStr) -> OsString {
    let mut s = a.to_owned();
    s.push(":");
    s.push(b);
    s
}

/// Sets `key` to `f(old value)`, in place if present, else appended.
fn update(
    vars: &mut Vec<(OsString, OsString)>,
    key: &str,
    f: impl FnOnce(Option<&OsStr>) -> OsString,
) {
    match vars.iter_mut().find(|(k, _)| k == key) {
        Some((_, v)) => *v = f(Some(v)),
        None => vars.push((key.into(), f(None))),
    }
}

fn to_envp(vars: Vec<(OsString, OsString)>) -> Vec<CString> {
    vars.into_iter()
        .filter_map(|(k, v)| {
            let mut kv = k.into_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            CString::new(kv).ok()
        })
        .collect()
}

/// Writes the preload object to a per-user cache directory (once per content) and returns
/// its path.
fn install_preload() -> Result<PathBuf, String> {
    let hash = PRELOAD.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let sub = format!("rgrind/{hash:016x}");
    let mut candidates = Vec::new();
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        candidates.push(PathBuf::from(d).join(&sub));
    }
    if let Some(h) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        candidates.push(PathBuf::from(h).join(".cache").join(&sub));
    }
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    candidates.push(std::env::temp_dir().join(format!("rgrind-{uid}/{hash:016x}")));
    let mut last_err = String::new();
    for dir in candidates {
        let path = dir.join(PRELOAD_NAME);
        if std::fs::read(&path).is_ok_and(|b| b == PRELOAD) {
            return Ok(path);
        }
        match write_atomically(&dir, &path) {
            Ok(()) => return Ok(path),
            Err(e) => last_err = format!("{}: {e}", path.display()),
        }
    }
    Err(format!(
        "cannot write the preload object for --guest-env=valgrind ({last_err}); use --guest-env=native"
    ))
}

fn write_atomically(dir: &Path, path: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!("{PRELOAD_NAME}.{}", std::process::id()));
    std::fs::write(&tmp, PRELOAD)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(v: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        v.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect()
    }

    #[test]
    fn valgrind_vars_are_added_in_place_once() {
        let mut v = vars(&[
            ("A", "1"),
            ("LD_PRELOAD", "/x.so"),
            ("LD_LIBRARY_PATH", "/l"),
        ]);
        add_valgrind_vars(&mut v, OsStr::new("/p.so"), true);
        let want = vars(&[
            ("A", "1"),
            ("LD_PRELOAD", "/p.so:/x.so"),
            ("LD_LIBRARY_PATH", "/l:/usr/lib/debug"),
            ("GLIBCPP_FORCE_NEW", "1"),
            ("GLIBCXX_FORCE_NEW", "1"),
        ]);
        assert_eq!(v, want);
        add_valgrind_vars(&mut v, OsStr::new("/p.so"), true);
        assert_eq!(v, want, "idempotent");
        let mut v = vars(&[("A", "1")]);
        add_valgrind_vars(&mut v, OsStr::new("/p.so"), false);
        assert_eq!(v, vars(&[("A", "1"), ("LD_PRELOAD", "/p.so")]));
    }

    #[test]
    fn preload_is_a_shared_object_with_valgrinds_symbols() {
        assert_eq!(&PRELOAD[..4], b"\x7fELF");
        assert_eq!(PRELOAD[16], 3, "ET_DYN");
        let text = String::from_utf8_lossy(PRELOAD);
        assert!(text.contains("_vgnU_freeres") && text.contains("_vgnU_ifunc_wrapper"));
        let path = install_preload().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), PRELOAD);
        assert_eq!(
            install_preload().unwrap(),
            path,
            "found again, not rewritten"
        );
    }
}
