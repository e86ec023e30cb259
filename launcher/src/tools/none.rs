//! `--tool=none`: translation only, like Valgrind's Nulgrind.
use dbt_core::tool::{FiniReason, Tool};

pub struct NoneTool {
    pub quiet: bool,
}

impl NoneTool {
    pub const BANNER: [&'static str; 2] = [
        "Nulgrind, the minimal Valgrind tool",
        "Copyright (C) 2002-2017, and GNU GPL'd, by Nicholas Nethercote.",
    ];
}

impl Tool for NoneTool {
    fn name(&self) -> &'static str {
        "none"
    }

    fn instruments(&self) -> bool {
        false
    }

    fn fini(&mut self, _reason: FiniReason) {
        if !self.quiet {
            crate::log::line("");
        }
    }
}
