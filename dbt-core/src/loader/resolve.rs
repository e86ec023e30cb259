//! Program resolution: turns the command line the user gave rgrind into the ELF file to map and
//! the guest's argv, like `execvp` plus the kernel's `#!` handling, with Valgrind's checks and
//! messages (`coregrind/m_ume/main.c`, `do_exec_shell_followup`).
//!
//! # Invariants
//! * A returned [`GuestProgram::exe_path`] was checked to be an executable 64-bit x86-64 ET_EXEC
//!   or ET_DYN file at resolution time (it can still change on disk before [`super::load`]).
//! * `argv` is never empty; `execfn` is the path the first file was found at.
//!
//! # Deliberately not done here
//! * No mapping; nothing is kept open.
//! * Setuid/setgid bits are ignored (the guest runs with rgrind's credentials, AT_SECURE = 0).

use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use super::elf::{executable_by_us, is_elf, open_executable, parse_elf_header, read_prefix};
use super::{show, GuestProgram, LoadError};

/// How many `#!` interpreters may be chained (the kernel's BINPRM_MAX_RECURSION); one more fails
/// with ELOOP.
pub const MAX_SCRIPT_DEPTH: usize = 4;
/// Bytes of a `#!` line the kernel looks at (BINPRM_BUF_SIZE).
const SCRIPT_HEAD_LEN: usize = 256;
/// Bytes Valgrind inspects to decide that a file without `#!` is binary rather than a script.
const BINARY_SNIFF_LEN: usize = 80;
/// The shell Valgrind (and execvp) hands a text file without `#!` to.
const DEFAULT_SHELL: &str = "/bin/sh";
/// PATH used when the environment has none (glibc's default for execvp).
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// Resolve `program` like `execvp` would (PATH search when it contains no '/'), check it is a
/// runnable 64-bit x86-64 ELF (ET_EXEC or ET_DYN) or a `#!` script (then resolve its interpreter,
/// recursively up to [`MAX_SCRIPT_DEPTH`], building argv as the kernel does: interp, optional
/// single arg, script path, original `argv[1..]`). A text file with neither ELF magic nor `#!` is
/// run with /bin/sh, as Valgrind does.
///
/// `args` are the guest's arguments after the program name: the guest's argv is
/// `[program, args...]` (as given, so `ls` stays `ls` in `argv[0]` while `execfn` is `/usr/bin/ls`).
pub fn resolve_program(program: &OsStr, args: &[OsString]) -> Result<GuestProgram, LoadError> {
    resolve_with_path(program, args, std::env::var_os("PATH").as_deref())
}

/// [`resolve_program`] with an explicit PATH value (`None`: glibc's default).
pub fn resolve_with_path(
    program: &OsStr,
    args: &[OsString],
    path_var: Option<&OsStr>,
) -> Result<GuestProgram, LoadError> {
    let first = if program.as_bytes().contains(&b'/') {
        PathBuf::from(program)
    } else if program.is_empty() {
        return Err(LoadError::Os {
            path: String::new(),
            errno: libc::ENOENT,
        });
    } else {
        search_path(program, path_var.unwrap_or(OsStr::new(DEFAULT_PATH)))?
    };
    let execfn = cstring(first.as_os_str(), &first)?;
    let mut argv = Vec::with_capacity(args.len() + 1);
    argv.push(cstring(program, &first)?);
    for a in args {
        argv.push(cstring(a, &first)?);
    }

    let mut path = first.clone();
    // The script whose interpreter `path` is (None for the program itself).
    let mut script: Option<PathBuf> = None;
    for _depth in 0..=MAX_SCRIPT_DEPTH {
        let bad_interp = |e: LoadError, script: &Option<PathBuf>| match (script, e) {
            (None, e) => e,
            (Some(s), LoadError::Os { errno, .. }) => LoadError::BadInterpreter {
                path: show(s),
                errno,
            },
            (Some(s), LoadError::IsDirectory { .. }) => LoadError::BadInterpreter {
                path: show(s),
                errno: libc::EACCES,
            },
            (Some(_), e) => e,
        };
        let (file, _) = open_executable(&path).map_err(|e| bad_interp(e, &script))?;
        let head =
            read_prefix(&file, &path, 0, SCRIPT_HEAD_LEN).map_err(|e| bad_interp(e, &script))?;
        if is_elf(&head) {
            parse_elf_header(&path, &head)?;
            return Ok(GuestProgram {
                exe_path: path,
                argv,
                execfn,
            });
        }
        let (interp, optarg) = if let Some(line) = head.strip_prefix(b"#!") {
            match parse_hashbang(line) {
                Some(parsed) => parsed,
                // `#!` naming no interpreter: the kernel refuses it, and the shell (and Valgrind)
                // then run the file as a shell script.
                None if script.is_none() => (OsString::from(DEFAULT_SHELL), None),
                None => {
                    return Err(bad_interp(
                        LoadError::Os {
                            path: show(&path),
                            errno: libc::ENOEXEC,
                        },
                        &script,
                    ))
                }
            }
        } else if script.is_some() {
            return Err(bad_interp(
                LoadError::Os {
                    path: show(&path),
                    errno: libc::ENOEXEC,
                },
                &script,
            ));
        } else if looks_binary(&head) {
            return Err(LoadError::BinaryFile { path: show(&path) });
        } else {
            (OsString::from(DEFAULT_SHELL), None)
        };
        let mut new_argv = Vec::with_capacity(argv.len() + 2);
        new_argv.push(cstring(&interp, &path)?);
        if let Some(arg) = optarg {
            new_argv.push(cstring(&arg, &path)?);
        }
        new_argv.push(cstring(path.as_os_str(), &path)?);
        new_argv.extend(argv.drain(..).skip(1));
        argv = new_argv;
        script = Some(path);
        path = PathBuf::from(interp);
    }
    Err(LoadError::BadInterpreter {
        path: show(&first),
        errno: libc::ELOOP,
    })
}

/// Splits the rest of a `#!` line (after the `#!`) like the kernel: the interpreter is the first
/// blank-separated word, the optional argument is the rest of the line with surrounding blanks
/// removed. None when there is no interpreter.
fn parse_hashbang(rest: &[u8]) -> Option<(OsString, Option<OsString>)> {
    let line = match rest.iter().position(|&b| b == b'\n') {
        Some(n) => &rest[..n],
        None => rest,
    };
    let blank = |b: &u8| *b == b' ' || *b == b'\t';
    let line = trim(line, blank);
    if line.is_empty() {
        return None;
    }
    let (interp, arg) = match line.iter().position(blank) {
        Some(n) => (&line[..n], trim(&line[n..], blank)),
        None => (line, &line[line.len()..]),
    };
    let arg = (!arg.is_empty()).then(|| OsString::from_vec(arg.to_vec()));
    Some((OsString::from_vec(interp.to_vec()), arg))
}

fn trim(mut s: &[u8], blank: impl Fn(&u8) -> bool) -> &[u8] {
    while let [first, rest @ ..] = s {
        if !blank(first) {
            break;
        }
        s = rest;
    }
    while let [rest @ .., last] = s {
        if !blank(last) {
            break;
        }
        s = rest;
    }
    s
}

/// The first PATH entry holding `name` as a regular file we may execute. An empty entry means
/// the current directory (and yields `name` itself, like glibc).
pub fn search_path(name: &OsStr, path_var: &OsStr) -> Result<PathBuf, LoadError> {
    for dir in path_var.as_bytes().split(|&b| b == b':') {
        let candidate = if dir.is_empty() {
            PathBuf::from(name)
        } else {
            Path::new(OsStr::from_bytes(dir)).join(name)
        };
        if is_executable_file(&candidate) {
            return Ok(candidate);
        }
    }
    Err(LoadError::CommandNotFound {
        name: name.to_string_lossy().into_owned(),
    })
}

fn is_executable_file(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file()) && executable_by_us(p)
}

/// `s` as a C string; an embedded NUL (impossible for a real command line) is reported as EINVAL
/// against `path`.
fn cstring(s: &OsStr, path: &Path) -> Result<CString, LoadError> {
    CString::new(s.as_bytes()).map_err(|_| LoadError::Os {
        path: show(path),
        errno: libc::EINVAL,
    })
}

/// Whether a file that is neither ELF nor `#!` is binary data rather than a shell script:
/// Valgrind's test (a byte above 127 in the first 80), or a NUL byte there, or a control
/// character in the first line (a shell script's first line is text).
fn looks_binary(head: &[u8]) -> bool {
    let sniff = &head[..head.len().min(BINARY_SNIFF_LEN)];
    let first_line = sniff.split(|&b| b == b'\n').next().unwrap_or(&[]);
    let control = |b: &u8| b.is_ascii_control() && !matches!(b, b'\t' | b'\r' | 0x0b | 0x0c);
    sniff.iter().any(|&b| b > 127 || b == 0) || first_line.iter().any(control)
}
