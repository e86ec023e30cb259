//! Symbolised costs and Valgrind-format profile files.
#![deny(unsafe_code)]

pub mod error;
pub mod outfile;
pub mod symbols;

pub use error::DumpError;
pub use outfile::{OutFileTemplate, TemplateError};
pub use symbols::{Location, ModuleInfo, ModuleSource, Symbolizer};
pub mod cachegrind;
pub use cachegrind::CgProfile;
pub mod callgrind;
pub mod annotate;
pub use annotate::run_subcommand;
