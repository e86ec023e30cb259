//! Builds the benchmark guests (`benches/guests/*.c`, embedded in the binary) with gcc, or reuses
//! an earlier build.
//!
//! # Invariants
//! - A cached executable is reused only when the source saved beside it (`NAME.c`) is byte-for-byte
//!   the embedded source, so editing a guest always rebuilds it.
//! - Executables are written to a temporary name and renamed, so an interrupted build never
//!   leaves a half-written binary that a later run would reuse.
//!
//! It deliberately does not build anything but these few C files, and never compiles in
//! parallel: a few small files are not worth it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A benchmark guest: its name and C source.
pub struct GuestSource {
    /// Executable name.
    pub name: &'static str,
    /// The C source text.
    pub source: &'static str,
}

/// All guests; their command lines are in `main.rs`.
pub const GUESTS: &[GuestSource] = &[
    GuestSource {
        name: "matmul",
        source: include_str!("../guests/matmul.c"),
    },
    GuestSource {
        name: "chase",
        source: include_str!("../guests/chase.c"),
    },
    GuestSource {
        name: "calls",
        source: include_str!("../guests/calls.c"),
    },
    GuestSource {
        name: "stride",
        source: include_str!("../guests/stride.c"),
    },
    GuestSource {
        name: "hello",
        source: include_str!("../guests/hello.c"),
    },
];

/// Why a guest could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// Bad setup: gcc is not installed.
    #[error("gcc is needed to build the benchmark guests but could not be run: {0} (Debian: apt-get install gcc)")]
    NoCompiler(std::io::Error),
    /// gcc rejected a guest (a bug in the guest, or an unusual toolchain).
    #[error("gcc failed on guest {name}:\n{stderr}")]
    Compile {
        /// The guest.
        name: String,
        /// What gcc printed.
        stderr: String,
    },
    /// Reading or writing the build folder failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BuildError + '_ {
    move |source| BuildError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Makes sure `dir/NAME` is an up-to-date build of `guest` and returns its path.
pub fn build(dir: &Path, guest: &GuestSource) -> Result<PathBuf, BuildError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let exe = dir.join(guest.name);
    let src = dir.join(format!("{}.c", guest.name));
    let cached = std::fs::read_to_string(&src).is_ok_and(|s| s == guest.source) && exe.is_file();
    if cached {
        return Ok(exe);
    }
    // Compile from a temporary copy and install the source only after the executable, so a
    // failed build can never make a stale executable look current.
    let tmp_src = dir.join(format!(".{}.tmp.c", guest.name));
    let tmp_exe = dir.join(format!(".{}.tmp", guest.name));
    std::fs::write(&tmp_src, guest.source).map_err(io(&tmp_src))?;
    let out = Command::new("gcc")
        .args(["-O2", "-g", "-o"])
        .arg(&tmp_exe)
        .arg(&tmp_src)
        .output()
        .map_err(BuildError::NoCompiler)?;
    if !out.status.success() {
        return Err(BuildError::Compile {
            name: guest.name.to_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    std::fs::rename(&tmp_exe, &exe).map_err(io(&exe))?;
    std::fs::rename(&tmp_src, &src).map_err(io(&src))?;
    // Post-invariant: `src` holds exactly `guest.source` and `exe` was built from it.
    Ok(exe)
}
