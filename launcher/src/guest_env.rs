//! The environment the guest starts with. With `--guest-env=valgrind` it is the one a program
//! gets under `valgrind` on this system, because ld.so and glibc's start-up work (and so every
//! count) depends on it:
//! * Valgrind's core preload object first in `LD_PRELOAD` (rgrind's stand-in,
//!   `preload/vgpreload_core.c`, built by build.rs and written once to a cache directory);
//! * on Debian-family systems, where `valgrind` is a wrapper script run by `/bin/sh` (dash),
//!   the environment dash passes on: only variables with shell names, in the order of dash's
//!   variable table (`dash_order`), with `PWD` set, and the wrapper's variables:
//!   `LD_LIBRARY_PATH` ending in `/usr/lib/debug`, `GLIBCPP_FORCE_NEW=1`, `GLIBCXX_FORCE_NEW=1`.
//!   The environment's order and size are start-up work (`getenv` scans it, glibc's tunables
//!   parse every variable): `hello-static` runs ~500 instructions more with one variable more;
//! * the shell's `_`, where it names this rgrind, naming `valgrind` instead.
//!
//! # Invariants
//! * Applying it twice changes nothing (a program exec'd under `--trace-children=yes` gets
//!   rgrind again with the environment the parent guest passed on, as Valgrind runs it
//!   again without the wrapper: an environment whose `LD_PRELOAD` holds the preload object
//!   already is not passed through dash again).
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
    let preload = match valgrinds_preload() {
        Some(p) => p,
        None => install_preload()?,
    };
    let debian = Path::new("/etc/debian_version").exists();
    let traced_child = vars.iter().any(|(k, v)| {
        k == "LD_PRELOAD" && split_paths(v).any(|p| p == preload.as_os_str().as_bytes())
    });
    if !traced_child {
        as_if_valgrind_was_run(&mut vars);
    }
    if debian && !traced_child {
        let cwd = std::env::current_dir().ok();
        vars = through_dash(vars, cwd.as_deref());
    }
    add_preload(&mut vars, preload.as_os_str());
    Ok((to_envp(vars), Some(preload)))
}

/// The shell's `_` (the program it ran) names `valgrind` where it names this rgrind: a user
/// who typed `valgrind` would have given the program that (as found on `PATH`).
fn as_if_valgrind_was_run(vars: &mut [(OsString, OsString)]) {
    let Ok(me) = std::env::current_exe() else {
        return;
    };
    for (k, v) in vars.iter_mut() {
        if k == "_" && std::fs::canonicalize(&*v).is_ok_and(|p| p == me) {
            *v = valgrind_on_path().into_os_string();
        }
    }
}

/// The `valgrind` a shell would run (the first on `PATH`, else `/usr/bin/valgrind`).
fn valgrind_on_path() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    dbt_core::loader::search_path(OsStr::new("valgrind"), &path)
        .unwrap_or_else(|_| PathBuf::from("/usr/bin/valgrind"))
}

/// dash's `vartab` size and its variables made before the environment is read (`varinit`,
/// Debian's build), which each table chain starts with, last made first.
const DASH_TABLE: u32 = 39;
const DASH_VARINIT: [&str; 9] = [
    "IFS", "MAIL", "MAILPATH", "PATH", "PS1", "PS2", "PS4", "OPTIND", "LINENO",
];

/// The environment Debian's `valgrind` wrapper, a dash script, gives Valgrind: the
/// variables with shell names (the value of the last of a name, at the place of its first),
/// `IFS`, `OPTIND` and `PPID` reset where present, `PWD` set (kept when it names the working
/// directory `cwd`; empty, as dash leaves it, when the working directory has no path, for
/// one removed), then the wrapper's exports (`LD_LIBRARY_PATH` ending in
/// `/usr/lib/debug`, `GLIBCPP_FORCE_NEW=1`, `GLIBCXX_FORCE_NEW=1`), all in dash's table order
/// (`dash_order`).
fn through_dash(vars: Vec<(OsString, OsString)>, cwd: Option<&Path>) -> Vec<(OsString, OsString)> {
    let mut out: Vec<(OsString, OsString)> = Vec::new();
    let mut at: std::collections::HashMap<OsString, usize> = std::collections::HashMap::new();
    for (k, v) in vars {
        if !is_shell_name(k.as_bytes()) {
            continue;
        }
        match at.get(&k) {
            Some(&i) => out[i].1 = v,
            None => {
                at.insert(k.clone(), out.len());
                out.push((k, v));
            }
        }
    }
    for (k, v) in out.iter_mut() {
        match k.to_str() {
            Some("IFS") => *v = " \t\n".into(),
            Some("OPTIND") => *v = "1".into(),
            // SAFETY: getppid has no preconditions.
            Some("PPID") => *v = unsafe { libc::getppid() }.to_string().into(),
            _ => {}
        }
    }
    update(&mut out, "PWD", |old| match old {
        Some(p) if names_dir(Path::new(p), cwd.unwrap_or(Path::new("."))) => p.to_owned(),
        _ => cwd.map_or_else(OsString::new, |c| c.as_os_str().to_owned()),
    });
    let debug = OsStr::new(DEBIAN_DEBUG_PATH);
    update(&mut out, "LD_LIBRARY_PATH", |old| match old {
        Some(o) if !o.is_empty() => join(o, debug),
        _ => debug.to_owned(),
    });
    for k in ["GLIBCPP_FORCE_NEW", "GLIBCXX_FORCE_NEW"] {
        update(&mut out, k, |_| "1".into());
    }
    dash_order(&mut out);
    out
}

/// Whether `p` is an absolute path to the directory `cwd` (dash keeps such a `PWD`).
fn names_dir(p: &Path, cwd: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let same =
        |a: &std::fs::Metadata, b: &std::fs::Metadata| a.dev() == b.dev() && a.ino() == b.ino();
    p.is_absolute()
        && matches!((std::fs::metadata(p), std::fs::metadata(cwd)), (Ok(a), Ok(b)) if same(&a, &b))
}

/// A shell variable name (`[A-Za-z_][A-Za-z0-9_]*`): dash passes on no other.
fn is_shell_name(k: &[u8]) -> bool {
    k.first()
        .is_some_and(|&c| c.is_ascii_alphabetic() || c == b'_')
        && k.iter().all(|&c| c.is_ascii_alphanumeric() || c == b'_')
}

/// dash's table chain of a variable name (`hashvar`).
fn dash_chain(k: &[u8]) -> u32 {
    let first = u32::from(k.first().copied().unwrap_or(0)) << 4;
    k.iter().fold(first, |h, &c| h.wrapping_add(u32::from(c))) % DASH_TABLE
}

/// Puts `vars` (in the order dash made them) in the order dash lists its exported
/// variables: by table chain; on a chain, `DASH_VARINIT`'s variables first (last made
/// first), then the others as made. Stable, so applying it again changes nothing.
fn dash_order(vars: &mut [(OsString, OsString)]) {
    vars.sort_by_key(|(k, _)| {
        let init = k
            .to_str()
            .and_then(|n| DASH_VARINIT.iter().position(|&v| v == n));
        (
            dash_chain(k.as_bytes()),
            init.map_or(0, |i| -(i as i64) - 1),
        )
    });
}

/// What Valgrind itself adds to the environment: `preload` first in `LD_PRELOAD`, where
/// that is or at the end (`preload:` for an empty one). Idempotent.
fn add_preload(vars: &mut Vec<(OsString, OsString)>, preload: &OsStr) {
    update(vars, "LD_PRELOAD", |old| match old {
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

/// Where an installed Valgrind keeps its core preload object (`$VALGRIND_LIB`, else the
/// usual library folders), if one does: that file at that path is what Valgrind gives the
/// program, and ld.so's work on it (its path's length and prefix in every name comparison,
/// its `.init`) is start-up work: with the stand-in, `sqlite3` ran ~900 Ir of `strcmp`
/// fewer.
fn valgrinds_preload() -> Option<PathBuf> {
    let lib = std::env::var_os("VALGRIND_LIB").filter(|d| !d.is_empty());
    let dirs = lib.map(PathBuf::from).into_iter().chain(
        [
            "/usr/libexec/valgrind",
            "/usr/local/libexec/valgrind",
            "/usr/lib/x86_64-linux-gnu/valgrind",
            "/usr/lib64/valgrind",
            "/usr/lib/valgrind",
        ]
        .map(PathBuf::from),
    );
    // An x86-64 ELF object: anything else ld.so would refuse, with a message of its own.
    let is_x86_64_elf = |p: &Path| {
        let mut head = [0u8; 20];
        std::fs::File::open(p)
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
            .is_ok_and(|()| head[..4] == *b"\x7fELF" && head[4] == 2 && head[18..20] == [62, 0])
    };
    dirs.map(|d| d.join(PRELOAD_NAME))
        .find(|p| is_x86_64_elf(p))
}

/// Writes rgrind's stand-in preload object to a per-user cache directory (once per
/// content) and returns its path.
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

    /// What `env -i A=1 LD_PRELOAD=/x.so B=2 valgrind /usr/bin/env` printed in `/tmp`
    /// (Debian 12, Valgrind 3.19), with rgrind's preload object in Valgrind's place.
    #[test]
    fn the_environment_is_the_one_valgrind_gives_through_its_debian_wrapper() {
        let tmp = Path::new("/tmp");
        let mut v = through_dash(
            vars(&[("A", "1"), ("LD_PRELOAD", "/x.so"), ("B", "2")]),
            Some(tmp),
        );
        add_preload(&mut v, OsStr::new("/p.so"));
        let want = vars(&[
            ("LD_LIBRARY_PATH", "/usr/lib/debug"),
            ("A", "1"),
            ("GLIBCPP_FORCE_NEW", "1"),
            ("LD_PRELOAD", "/p.so:/x.so"),
            ("B", "2"),
            ("PWD", "/tmp"),
            ("GLIBCXX_FORCE_NEW", "1"),
        ]);
        assert_eq!(v, want);
        add_preload(&mut v, OsStr::new("/p.so"));
        assert_eq!(v, want, "idempotent");
        // dash's own variables first on their chain, names that are no shell names left
        // out, the last value of a name, IFS and OPTIND reset, a PWD that is no path to the
        // working directory replaced (checked against Valgrind in `/`).
        let v = through_dash(
            vars(&[
                ("PS1", "abc"),
                ("OPTIND", "7"),
                ("x-y", "1"),
                ("A", "1"),
                ("LD_LIBRARY_PATH", "/l"),
                ("A", "2"),
                ("PWD", "/nonexist"),
                ("1BAD", "z"),
                ("TERM", "xterm"),
                ("IFS", "q"),
            ]),
            Some(Path::new("/")),
        );
        let want = vars(&[
            ("LD_LIBRARY_PATH", "/l:/usr/lib/debug"),
            ("OPTIND", "1"),
            ("PS1", "abc"),
            ("A", "2"),
            ("TERM", "xterm"),
            ("GLIBCPP_FORCE_NEW", "1"),
            ("IFS", " \t\n"),
            ("PWD", "/"),
            ("GLIBCXX_FORCE_NEW", "1"),
        ]);
        assert_eq!(v, want);
        let mut again = v.clone();
        dash_order(&mut again);
        assert_eq!(again, v, "the order is stable");
        // In a removed folder dash's `getcwd` fails: `PWD` is empty (Valgrind ran there).
        let v = through_dash(vars(&[("PWD", "/gone")]), None);
        assert!(v.contains(&("PWD".into(), "".into())), "{v:?}");
        let mut v = vars(&[("A", "1"), ("LD_PRELOAD", "")]);
        add_preload(&mut v, OsStr::new("/p.so"));
        assert_eq!(v, vars(&[("A", "1"), ("LD_PRELOAD", "/p.so:")]));
    }

    #[test]
    fn the_shells_underscore_names_valgrind_where_it_names_rgrind() {
        let me = std::env::current_exe().unwrap();
        let mut v = vec![
            (OsString::from("_"), me.clone().into_os_string()),
            (OsString::from("A"), me.into_os_string()),
        ];
        as_if_valgrind_was_run(&mut v);
        let valgrind = valgrind_on_path();
        assert_eq!(v[0].1, valgrind.as_os_str());
        assert_ne!(v[1].1, valgrind.as_os_str(), "only `_`");
        let mut other = vars(&[("_", "/usr/bin/env")]);
        as_if_valgrind_was_run(&mut other);
        assert_eq!(other, vars(&[("_", "/usr/bin/env")]));
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
