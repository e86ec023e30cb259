//! The boundary between the core and the tools (none, cachegrind, callgrind): what a tool
//! supplies and what it gets. Tools import nothing from dbt-core except this module.
//!
//! A tool supplies `fini` (write results for the way the process ends) and, through its
//! default methods, opts into further hooks.

/// How the guest process is ending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FiniReason {
    /// exit/exit_group with this status.
    Exit(i32),
    /// execve is about to replace the process image.
    Exec,
    /// A fatal signal.
    Signal(i32),
}

pub trait Tool: Send {
    /// The tool's name as `--tool=` spells it.
    fn name(&self) -> &'static str;
    /// Called once when the process ends in any way, before it ends.
    fn fini(&mut self, reason: FiniReason) {
        let _ = reason;
    }
}
