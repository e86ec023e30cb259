//! rgrind's own messages: the `==PID==` lines, on stderr or in `--log-file`.
//!
//! The log descriptor is moved above the guest's usual range at startup, so a guest that closes
//! or reuses fd 2 does not lose or corrupt rgrind's output.
use std::io::Write;
use std::os::fd::{FromRawFd, RawFd};
use std::sync::Mutex;

static LOG: Mutex<Option<std::fs::File>> = Mutex::new(None);

/// Lowest descriptor number rgrind uses for itself.
pub const RGRIND_FD_BASE: RawFd = 1000;

/// Opens the log: file `path` (expanded already, [`file_name`]) or a duplicate of stderr.
pub fn open(path: Option<&str>) -> std::io::Result<()> {
    let fd = match path {
        Some(p) => {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(true)
                .open(p)?;
            use std::os::fd::IntoRawFd;
            f.into_raw_fd()
        }
        // SAFETY: dup of fd 2, checked below.
        None => unsafe { libc::dup(2) },
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fcntl on a descriptor we own; the old one is closed after.
    let high = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, RGRIND_FD_BASE) };
    // SAFETY: closing the descriptor we just duplicated.
    unsafe { libc::close(fd) };
    if high < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `high` is a fresh descriptor owned by nobody else.
    *LOG.lock().unwrap_or_else(|p| p.into_inner()) =
        Some(unsafe { std::fs::File::from_raw_fd(high) });
    Ok(())
}

/// The log file's name for template `value` (`--log-file`): `%p` and `%q{VAR}` expanded as
/// Valgrind does, or Valgrind's lines for a bad option (an unset variable, a stray `%`).
pub fn file_name(value: &str) -> Result<String, Vec<String>> {
    dumper::outfile::OutFileTemplate::parse(value)
        .and_then(|t| t.expand(std::process::id(), |v| std::env::var(v).ok()))
        .map_err(|e| e.valgrind_lines("--log-file", value))
}

/// Whether the guest's last `VALGRIND_PRINTF` text ended in the middle of a line.
static CLIENT_MID_LINE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Writes the guest's `VALGRIND_PRINTF` text as Valgrind does: `**PID** ` at the start of
/// each line, a line left open continued by the next text. Shown with `-q` too.
pub fn client_text(text: &str) {
    use std::sync::atomic::Ordering;
    let pid = std::process::id();
    let mut out = String::new();
    let mut mid = CLIENT_MID_LINE.load(Ordering::Relaxed);
    for piece in text.split_inclusive('\n') {
        if !mid {
            out.push_str(&format!("**{pid}** "));
        }
        out.push_str(piece);
        mid = !piece.ends_with('\n');
    }
    CLIENT_MID_LINE.store(mid, Ordering::Relaxed);
    if let Some(f) = LOG.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
        let _ = f.write_all(out.as_bytes());
    }
}

/// Writes one `==PID== ` line.
pub fn line(text: &str) {
    let pid = std::process::id();
    if let Some(f) = LOG.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
        let _ = writeln!(f, "=={pid}== {text}");
    }
}

/// Writes one `--PID-- ` line (Valgrind's debug/warning prefix).
pub fn dline(text: &str) {
    let pid = std::process::id();
    if let Some(f) = LOG.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
        let _ = writeln!(f, "--{pid}-- {text}");
    }
}
