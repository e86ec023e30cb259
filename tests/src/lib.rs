//! Harness for rgrind's integration tests: runs a command natively, under rgrind and under
//! Valgrind, captures stdout, stderr and the wait status, and compares them.
//!
//! # Invariants
//! - Every child runs in its own process group with stdin from `/dev/null`, and is killed (with
//!   its whole group) after [`TIMEOUT`], so a hung translation fails a test instead of the suite.
//! - Outputs are compared as bytes; rgrind's own `==PID==` lines are the only thing ever filtered
//!   out of stderr, and only when comparing against a native run.
//! - Guest programs come from `tests/guests/`, built by `build.rs`; nothing here reads the
//!   shared tree of the project's authors.
//!
//! It deliberately does not build rgrind: the tests use an existing binary (see [`rgrind`]) so
//! that `cargo test -p rgrind-tests` never triggers a second, differently-configured build.

use std::ffi::{OsStr, OsString};
use std::fmt::Write as _;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Longest a single process (native or translated) may run before it is killed.
pub const TIMEOUT: Duration = Duration::from_secs(120);

/// Folder holding the compiled guest programs (set by `build.rs`).
pub const GUESTS_DIR: &str = env!("RGRIND_GUESTS");

/// Errors of the harness itself (as opposed to differences found in a guest's behaviour).
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// Bad setup: no rgrind binary where the tests look for one.
    #[error("build rgrind first: cargo build --release (looked for {0})")]
    RgrindNotBuilt(String),
    /// Bad setup: a guest program is missing from the build folder.
    #[error("guest program {0} is missing: rebuild rgrind-tests (cargo test -p rgrind-tests)")]
    GuestMissing(PathBuf),
    /// The OS refused to start the process.
    #[error("cannot start {program}: {source}")]
    Spawn {
        /// The program that could not start.
        program: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The process ran past [`TIMEOUT`] and was killed.
    #[error("{0} ran longer than {TIMEOUT:?} and was killed")]
    Timeout(String),
    /// Waiting for or reading from the child failed.
    #[error("i/o error while running {program}: {source}")]
    Io {
        /// The program being run.
        program: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// The workspace root (the parent of this crate).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from(".."), Path::to_path_buf)
}

/// Finds the rgrind binary: `$RGRIND`, else `<workspace>/target/release/rgrind`, else
/// `<workspace>/target/debug/rgrind`.
pub fn find_rgrind() -> Result<PathBuf, HarnessError> {
    if let Some(p) = std::env::var_os("RGRIND") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(HarnessError::RgrindNotBuilt(format!(
                "$RGRIND={}",
                p.display()
            )))
        };
    }
    let target = workspace_root().join("target");
    let candidates = [target.join("release/rgrind"), target.join("debug/rgrind")];
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or_else(|| {
            HarnessError::RgrindNotBuilt(
                candidates
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            )
        })
}

/// The rgrind binary under test; panics (failing the test) with
/// "build rgrind first: cargo build --release" when there is none.
pub fn rgrind() -> &'static Path {
    static RGRIND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match RGRIND.get_or_init(|| find_rgrind().map_err(|e| e.to_string())) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    }
}

/// Path of a compiled guest program; panics if the build did not produce it.
pub fn guest(name: &str) -> PathBuf {
    let p = Path::new(GUESTS_DIR).join(name);
    assert!(p.is_file(), "{}", HarnessError::GuestMissing(p));
    p
}

/// Callgrind's name compression (`--compress-strings=yes`): `(id) name` defines an id, a later
/// `(id)` refers to it. One table per name space (`fn`, `fl`/`fi`/`fe`, `ob`...), keyed here by
/// the caller's space character.
#[derive(Default)]
pub struct CallgrindNames(std::collections::BTreeMap<(char, String), String>);

impl CallgrindNames {
    /// The name a value of space `space` stands for (uncompressed values stand for themselves).
    pub fn resolve(&mut self, space: char, value: &str) -> String {
        let v = value.trim();
        if let Some((id, n)) = v.strip_prefix('(').and_then(|rest| rest.split_once(')')) {
            let key = (space, id.to_string());
            let n = n.trim();
            if !n.is_empty() {
                self.0.insert(key.clone(), n.to_string());
            }
            return self.0.get(&key).cloned().unwrap_or_default();
        }
        v.to_string()
    }
}

static SCRATCH: OnceLock<PathBuf> = OnceLock::new();

/// A per-process scratch folder under the system temp dir (created on first use, removed
/// when the test process exits).
pub fn scratch_dir() -> &'static Path {
    SCRATCH.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("rgrind-tests.{}", std::process::id()));
        if let Err(e) = std::fs::create_dir_all(&d) {
            panic!("cannot create scratch dir {}: {e}", d.display());
        }
        // SAFETY: registers a plain function with no captured state; the C runtime calls it
        // once, at exit, on the exiting thread.
        unsafe { libc::atexit(remove_scratch) };
        d
    })
}

extern "C" fn remove_scratch() {
    if let Some(d) = SCRATCH.get() {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// Looks a program up in `$PATH` the way a shell would (first executable regular file).
pub fn which(program: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The Valgrind launcher, when installed.
pub fn valgrind() -> Option<PathBuf> {
    which("valgrind")
}

/// A command line to run: program, arguments, and optionally a fixed environment and folder.
#[derive(Clone, Debug)]
pub struct Cmd {
    /// The program as the user would type it (a path, or a name looked up through `$PATH`).
    pub program: OsString,
    /// Arguments after the program.
    pub args: Vec<OsString>,
    /// `Some(vars)`: run with exactly these variables; `None`: inherit the test's environment.
    pub env: Option<Vec<(OsString, OsString)>>,
    /// Working folder; `None` means the scratch folder.
    pub cwd: Option<PathBuf>,
}

impl Cmd {
    /// A command running `program` with no arguments.
    pub fn new(program: impl AsRef<OsStr>) -> Cmd {
        Cmd {
            program: program.as_ref().to_owned(),
            args: Vec::new(),
            env: None,
            cwd: None,
        }
    }

    /// A command running the compiled guest `name` (by absolute path).
    pub fn guest(name: &str) -> Cmd {
        Cmd::new(guest(name))
    }

    /// Appends arguments.
    pub fn args<I, S>(mut self, args: I) -> Cmd
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Runs with exactly the given environment (nothing inherited).
    pub fn env_exact(mut self, vars: &[(&str, &str)]) -> Cmd {
        self.env = Some(vars.iter().map(|(k, v)| (k.into(), v.into())).collect());
        self
    }

    /// Runs in the given folder.
    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Cmd {
        self.cwd = Some(dir.into());
        self
    }

    /// The whole command line, for messages.
    pub fn display(&self) -> String {
        std::iter::once(&self.program)
            .chain(&self.args)
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The same command behind a launcher: `launcher opts... program args...`.
    pub fn under(&self, launcher: &Path, opts: &[&str]) -> Cmd {
        let mut args: Vec<OsString> = opts.iter().map(OsString::from).collect();
        args.push(self.program.clone());
        args.extend(self.args.iter().cloned());
        Cmd {
            program: launcher.as_os_str().to_owned(),
            args,
            env: self.env.clone(),
            cwd: self.cwd.clone(),
        }
    }
}

/// What a finished process left behind.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The command that ran.
    pub cmd: String,
    /// Everything written to stdout.
    pub stdout: Vec<u8>,
    /// Everything written to stderr.
    pub stderr: Vec<u8>,
    /// The wait status.
    pub status: ExitStatus,
}

/// How a process ended, comparable across runs (a core dump flag is deliberately ignored).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// Exited with this status.
    Exit(i32),
    /// Killed by this signal.
    Signal(i32),
}

impl Outcome {
    /// Exit code or terminating signal.
    pub fn end(&self) -> End {
        match (self.status.code(), self.status.signal()) {
            (Some(c), _) => End::Exit(c),
            (None, Some(s)) => End::Signal(s),
            (None, None) => End::Exit(-1),
        }
    }

    /// stdout as text (lossy).
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// stderr as text (lossy).
    pub fn stderr_str(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }

    /// stderr without rgrind's (or Valgrind's) own `==PID==` lines: what the guest wrote.
    pub fn guest_stderr(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for line in self.stderr.split_inclusive(|&b| b == b'\n') {
            if tool_line_pid(line).is_none() {
                out.extend_from_slice(line);
            }
        }
        out
    }

    /// rgrind's own `==PID==` lines on stderr, as text.
    pub fn tool_lines(&self) -> Vec<String> {
        tool_lines(&self.stderr)
    }

    /// A multi-line report of this run, for assertion messages.
    pub fn describe(&self) -> String {
        format!(
            "$ {}\n  ended: {:?}\n  stdout ({} bytes):\n{}\n  stderr ({} bytes):\n{}",
            self.cmd,
            self.end(),
            self.stdout.len(),
            excerpt(&self.stdout),
            self.stderr.len(),
            excerpt(&self.stderr)
        )
    }
}

/// The pid of a `==PID==` line, or `None` for any other line.
pub fn tool_line_pid(line: &[u8]) -> Option<u32> {
    let rest = line.strip_prefix(b"==")?;
    let end = rest.iter().position(|&b| b == b'=')?;
    let digits = &rest[..end];
    if digits.is_empty()
        || !digits.iter().all(u8::is_ascii_digit)
        || !rest[end..].starts_with(b"==")
    {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// All `==PID==` lines of a text.
pub fn tool_lines(text: &[u8]) -> Vec<String> {
    text.split(|&b| b == b'\n')
        .filter(|l| tool_line_pid(l).is_some())
        .map(|l| String::from_utf8_lossy(l).into_owned())
        .collect()
}

/// The first and last lines of an output, indented, for messages.
fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().collect();
    let shown: Vec<String> = if lines.len() <= 40 {
        lines.iter().map(|l| format!("    |{l}")).collect()
    } else {
        let mut v: Vec<String> = lines[..20].iter().map(|l| format!("    |{l}")).collect();
        v.push(format!("    ... {} lines ...", lines.len() - 40));
        v.extend(
            lines[lines.len() - 20..]
                .iter()
                .map(|l| format!("    |{l}")),
        );
        v
    };
    shown.join("\n")
}

/// Runs a command to completion (killing its process group after [`TIMEOUT`]).
pub fn try_run(cmd: &Cmd) -> Result<Outcome, HarnessError> {
    let shown = cmd.display();
    let mut c = Command::new(&cmd.program);
    c.args(&cmd.args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .current_dir(cmd.cwd.as_deref().unwrap_or_else(|| scratch_dir()))
        .process_group(0);
    if let Some(vars) = &cmd.env {
        c.env_clear().envs(vars.iter().map(|(k, v)| (k, v)));
    }
    // A script the test just wrote can be "busy" for a moment: a process another test thread
    // forked meanwhile holds the write descriptor until it execs (ETXTBSY). Retry then.
    let mut attempts = 0;
    let mut child = loop {
        match c.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && attempts < 50 => {
                attempts += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            r => {
                break r.map_err(|source| HarnessError::Spawn {
                    program: shown.clone(),
                    source,
                })?
            }
        }
    };
    let pid = child.id();
    let readers = [
        child.stdout.take().map(drain),
        child.stderr.take().map(drain),
    ];
    let deadline = Instant::now() + TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Ok(st),
            Ok(None) if Instant::now() >= deadline => {
                break Err(HarnessError::Timeout(shown.clone()))
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(source) => {
                break Err(HarnessError::Io {
                    program: shown.clone(),
                    source,
                })
            }
        }
    };
    // Whatever happened, nothing of this group may outlive the call: a grandchild holding the
    // pipes open would otherwise block the readers forever. The group id is the child's pid.
    if let Ok(pgid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill(2) takes plain integers and touches no memory of ours; -pgid names the
        // process group created by `process_group(0)` above, which only holds our child's tree.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    }
    if status.is_err() {
        let _ = child.wait();
    }
    let [out, err] = readers.map(|r| r.map(|h| h.join().unwrap_or_default()).unwrap_or_default());
    Ok(Outcome {
        cmd: shown,
        stdout: out,
        stderr: err,
        status: status?,
    })
}

fn drain<R: Read + Send + 'static>(mut r: R) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        buf
    })
}

/// Runs a command natively; panics (failing the test) if it cannot run at all.
pub fn run(cmd: &Cmd) -> Outcome {
    try_run(cmd).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs a command under rgrind with the given options (e.g. `["--tool=none", "-q"]`).
pub fn run_rgrind(opts: &[&str], cmd: &Cmd) -> Outcome {
    run(&cmd.under(rgrind(), opts))
}

/// Runs a command under Valgrind with the given options.
pub fn run_valgrind(valgrind: &Path, opts: &[&str], cmd: &Cmd) -> Outcome {
    run(&cmd.under(valgrind, opts))
}

/// Compares a reference run with a translated one: same stdout, same end, and the same stderr
/// once the translated run's `==PID==` lines are removed. Returns a report of every difference.
pub fn compare(reference: &Outcome, translated: &Outcome) -> Result<(), String> {
    let mut diffs = String::new();
    if reference.end() != translated.end() {
        let _ = writeln!(
            diffs,
            "end differs: {:?} vs {:?}",
            reference.end(),
            translated.end()
        );
    }
    if reference.stdout != translated.stdout {
        let _ = writeln!(
            diffs,
            "stdout differs: {}",
            first_difference(&reference.stdout, &translated.stdout)
        );
    }
    let (ref_err, tr_err) = (reference.guest_stderr(), translated.guest_stderr());
    if ref_err != tr_err {
        let _ = writeln!(
            diffs,
            "stderr differs: {}",
            first_difference(&ref_err, &tr_err)
        );
    }
    if diffs.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{diffs}--- reference:\n{}\n--- translated:\n{}",
            reference.describe(),
            translated.describe()
        ))
    }
}

/// Describes the first differing line of two outputs.
pub fn first_difference(a: &[u8], b: &[u8]) -> String {
    let (la, lb): (Vec<&[u8]>, Vec<&[u8]>) = (
        a.split(|&c| c == b'\n').collect(),
        b.split(|&c| c == b'\n').collect(),
    );
    for (i, (x, y)) in la.iter().zip(&lb).enumerate() {
        if x != y {
            return format!(
                "line {}: {:?} vs {:?}",
                i + 1,
                String::from_utf8_lossy(x),
                String::from_utf8_lossy(y)
            );
        }
    }
    format!(
        "{} lines vs {} lines ({} vs {} bytes)",
        la.len(),
        lb.len(),
        a.len(),
        b.len()
    )
}

/// Runs `cmd` natively and under `rgrind --tool=none -q` and compares them (see [`compare`]).
/// Returns the native outcome so callers can assert more on it.
pub fn check_transparent(cmd: &Cmd) -> Result<Outcome, String> {
    let native = run(cmd);
    let translated = run_rgrind(&["--tool=none", "-q"], cmd);
    compare(&native, &translated).map(|()| native)
}

/// Checks that `cmd` natively gives exactly `stdout` and `end` (otherwise the guest or the test
/// is wrong, and the message says so), then that rgrind matches the native run (see [`compare`]).
pub fn check_expected(cmd: &Cmd, stdout: &str, end: End) -> Result<(), String> {
    let native = run(cmd);
    if native.stdout != stdout.as_bytes() || native.end() != end {
        return Err(format!(
            "the guest itself does not behave as the test expects when run natively (a test bug): \
             expected {end:?} and stdout:\n{stdout}\n{}",
            native.describe()
        ));
    }
    compare(&native, &run_rgrind(&["--tool=none", "-q"], cmd))
}

/// Runs `f` on every case on a few threads and panics with all failures together (each failure
/// names its case). Use it for data-driven tests whose cases are independent processes.
pub fn check_all<T: Sync>(
    cases: &[T],
    name: impl Fn(&T) -> String + Sync,
    f: impl Fn(&T) -> Result<(), String> + Sync,
) {
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(2, 4);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(case) = cases.get(i) else { break };
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(case)))
                    .unwrap_or_else(|p| Err(panic_text(&*p)));
                if let Err(e) = result {
                    failures
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((i, format!("[{}] {e}", name(case))));
                }
            });
        }
    });
    let mut failures = failures.into_inner().unwrap_or_else(|p| p.into_inner());
    failures.sort();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n\n{}",
        failures.len(),
        cases.len(),
        failures
            .into_iter()
            .map(|(_, e)| e)
            .collect::<Vec<_>>()
            .join("\n\n")
    );
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "panicked".to_owned())
}

/// One guest invocation of the standard table: a label, the guest binary and its arguments.
#[derive(Clone, Copy, Debug)]
pub struct GuestCase {
    /// Unique label for messages.
    pub label: &'static str,
    /// Guest binary name in [`GUESTS_DIR`].
    pub guest: &'static str,
    /// Arguments.
    pub args: &'static [&'static str],
}

impl GuestCase {
    /// The command line of this case.
    pub fn cmd(&self) -> Cmd {
        Cmd::guest(self.guest).args(self.args)
    }
}

const fn gc(label: &'static str, guest: &'static str, args: &'static [&'static str]) -> GuestCase {
    GuestCase { label, guest, args }
}

/// Every guest program with the arguments that exercise it; the transparency test runs them all.
pub const GUEST_CASES: &[GuestCase] = &[
    gc("hello", "hello", &["a", "b"]),
    gc("hello-nopie", "hello-nopie", &["a"]),
    gc("hello-static", "hello-static", &[]),
    gc("hello-static-pie", "hello-static-pie", &["x", "y", "z"]),
    gc("hello-O0", "hello-O0", &[]),
    gc("tiny", "tiny", &["1", "2"]),
    gc("branchy", "branchy", &[]),
    gc("dflag", "dflag", &[]),
    gc("gotswap", "gotswap", &[]),
    gc("exit42", "exit", &["exit42"]),
    gc("return7", "exit", &["return7"]),
    gc("_exit3", "exit", &["_exit3"]),
    gc("abort", "exit", &["abort"]),
    gc("stderr", "exit", &["stderr"]),
    gc("exit42-static", "exit-static", &["exit42"]),
    gc("abort-static", "exit-static", &["abort"]),
    gc("auxv", "auxv", &["one", "two words", ""]),
    gc("auxv-nopie", "auxv-nopie", &["one"]),
    gc("auxv-static", "auxv-static", &["one"]),
    gc("auxv-static-pie", "auxv-static-pie", &["one"]),
    gc("brk", "brk", &[]),
    gc("brk-static", "brk-static", &[]),
    gc("stack", "stack", &[]),
    gc("stack-O0", "stack-O0", &[]),
    gc("fork", "proc", &["fork"]),
    gc("forkexec", "proc", &["forkexec"]),
    gc("vfork", "proc", &["vfork"]),
    gc("execve", "proc", &["execve"]),
    gc("spawn", "proc", &["spawn"]),
    gc("pipeline", "proc", &["pipeline"]),
    gc("fork-static", "proc-static", &["fork"]),
    gc("vfork-static", "proc-static", &["vfork"]),
    gc("insns", "insns", &[]),
    gc("insns-O0", "insns-O0", &[]),
    gc("insns-static", "insns-static", &[]),
    gc("cxx", "cxx", &[]),
    gc("cxx-static", "cxx-static", &[]),
    gc("sigs", "sigs", &[]),
    gc("sigs-static", "sigs-static", &[]),
    gc("sigs-abort", "sigs", &["abort"]),
    gc("sigs-segv", "sigs", &["segv"]),
    gc("sigs-kill", "sigs", &["kill"]),
    gc("threads", "threads", &[]),
    gc("threads-static", "threads-static", &[]),
    gc("jit", "jit", &[]),
    gc("jitthreads", "jitthreads", &[]),
    gc("jitdiscard", "jitdiscard", &[]),
    gc("forkthreads", "forkthreads", &[]),
    gc("spin", "spin", &[]),
    gc("vecstate", "vecstate", &[]),
    gc("cpuview", "cpuview", &[]),
    gc("execmask", "execmask", &[]),
    gc("shm", "shm", &[]),
    gc("vforkorder", "vforkorder", &[]),
    gc("pthexit", "pthexit", &[]),
    gc("truncexec", "truncexec", &[]),
    gc("acflag", "acflag", &[]),
];

/// The case of [`GUEST_CASES`] with this label; panics if there is none.
pub fn guest_case(label: &str) -> GuestCase {
    GUEST_CASES
        .iter()
        .find(|c| c.label == label)
        .copied()
        .unwrap_or_else(|| panic!("no guest case labelled {label}"))
}

/// The counts of a plain run of the `loops` guest (`tests/guests/loops.S`), whatever the
/// tool: `ir(line)` is the profile's Ir of a source line, `text` the profile (for messages).
/// The loop runs 1..=9 times (45 iterations of lines 14-16); the spin loop (lines 36-38),
/// stopped by SIGALRM, makes the guest exit with its iteration count's low byte, which the
/// profile must agree with.
pub fn check_loops_run(o: &Outcome, ir: &dyn Fn(u32) -> u64, text: &str) {
    assert_eq!([ir(14), ir(15), ir(16)], [45; 3], "{text}");
    assert_eq!([ir(13), ir(17), ir(18), ir(19)], [9; 4], "{text}");
    let spins = ir(36);
    assert!(spins > 0 && ir(37) == spins && ir(38) == spins, "{text}");
    assert_eq!(
        o.end(),
        End::Exit((spins & 0xff) as i32),
        "{}",
        o.describe()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_rgrind_message_says_how_to_build_it() {
        let e = HarnessError::RgrindNotBuilt("target/release/rgrind".into()).to_string();
        assert!(
            e.starts_with("build rgrind first: cargo build --release"),
            "{e}"
        );
    }

    #[test]
    fn tool_line_pids() {
        let check = |line: &str, want: Option<u32>| {
            assert_eq!(tool_line_pid(line.as_bytes()), want, "{line:?}")
        };
        check("==123== Command: ./a", Some(123));
        check("==1==", Some(1));
        check("== Command", None);
        check("==12a== x", None);
        check("hello ==12== x", None);
        check("====", None);
        check("==12= x", None);
    }

    #[test]
    fn guest_stderr_drops_only_tool_lines() {
        let o = Outcome {
            cmd: String::new(),
            stdout: Vec::new(),
            stderr: b"==7== Memcheck\nerr 0\n==7==\n==x== kept\nerr 1".to_vec(),
            status: ExitStatus::from_raw(0),
        };
        assert_eq!(o.guest_stderr(), b"err 0\n==x== kept\nerr 1");
        assert_eq!(o.tool_lines(), vec!["==7== Memcheck", "==7=="]);
    }

    #[test]
    fn compare_reports_each_difference() {
        let mk = |out: &[u8], err: &[u8], raw: i32| Outcome {
            cmd: "x".into(),
            stdout: out.to_vec(),
            stderr: err.to_vec(),
            status: ExitStatus::from_raw(raw),
        };
        assert!(compare(&mk(b"a\n", b"e\n", 0), &mk(b"a\n", b"==9== hi\ne\n", 0)).is_ok());
        let e = compare(&mk(b"a\nb\n", b"", 0), &mk(b"a\nc\n", b"", 42 << 8)).unwrap_err();
        assert!(e.contains("end differs: Exit(0) vs Exit(42)"), "{e}");
        assert!(e.contains("line 2: \"b\" vs \"c\""), "{e}");
        let e = compare(&mk(b"", b"", 6), &mk(b"", b"x", 6)).unwrap_err();
        assert!(
            e.contains("stderr differs") && !e.contains("end differs"),
            "{e}"
        );
    }

    #[test]
    fn runs_and_times_out_nothing_quick() {
        let o = run(&Cmd::new("/bin/sh").args(["-c", "echo out; echo err >&2; exit 3"]));
        assert_eq!(
            (o.stdout_str().as_str(), o.stderr_str().as_str(), o.end()),
            ("out\n", "err\n", End::Exit(3))
        );
        let o = run(&Cmd::new("/bin/sh").args(["-c", "kill -ABRT $$"]));
        assert_eq!(o.end(), End::Signal(libc::SIGABRT));
        let o = run(&Cmd::new("/bin/sh")
            .args(["-c", "echo $X-$Y"])
            .env_exact(&[("X", "1")]));
        assert_eq!(o.stdout_str(), "1-\n");
    }
}
