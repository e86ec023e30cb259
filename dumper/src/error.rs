//! Error types of the dumper.
//!
//! Every fallible public function returns [`DumpError`]. Parse errors always
//! name the file and the 1-based line so users can find the bad input.
//!
//! # Invariants
//! * No variant is produced by a panic path: bad input is always an `Err`.
//!
//! This module deliberately does not print anything; callers decide how to show errors.

use std::path::Path;

/// Everything that can go wrong while symbolising, writing or reading profile files.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    /// Bad input: a profile file does not follow the format.
    #[error("{path}:{line}: {msg}")]
    Parse {
        /// The file being read (or `<memory>`).
        path: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        msg: String,
    },
    /// An input file could not be read.
    #[error("cannot read '{path}': {source}")]
    Read {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// An output file could not be written.
    #[error("cannot write '{path}': {source}")]
    Write {
        /// The file (or `<stdout>`).
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// Bad input: an ELF or DWARF file could not be parsed.
    #[error("{path}: bad ELF/DWARF data: {msg}")]
    Elf {
        /// The module.
        path: String,
        /// What the parser said.
        msg: String,
    },
    /// Bad input: an output-file template was rejected (Valgrind's message).
    #[error(transparent)]
    Template(#[from] crate::outfile::TemplateError),
    /// Bad input: the caller gave inconsistent data (e.g. a cost vector of the wrong length).
    #[error("invalid profile data: {0}")]
    Invalid(String),
    /// Bad input: a subcommand was called with bad arguments.
    #[error("{0}")]
    Usage(String),
}

impl DumpError {
    /// A parse error at `line` of `path`.
    pub(crate) fn parse(path: &str, line: usize, msg: impl Into<String>) -> Self {
        DumpError::Parse {
            path: path.to_string(),
            line,
            msg: msg.into(),
        }
    }

    /// A read error for `path`.
    pub(crate) fn read(path: &Path, source: std::io::Error) -> Self {
        DumpError::Read {
            path: path.display().to_string(),
            source,
        }
    }

    /// A write error for `path`.
    pub(crate) fn write(path: &str, source: std::io::Error) -> Self {
        DumpError::Write {
            path: path.to_string(),
            source,
        }
    }
}
