//! rgrind's integration tests, linked into one binary: `cargo test -p rgrind-tests`.
//!
//! Each module runs real processes (guests from `tests/guests/`, or system programs) natively
//! and under rgrind, and compares what they print and how they end. The rgrind binary is found
//! by `rgrind_tests::rgrind()` (`$RGRIND`, else `target/release/rgrind`, else
//! `target/debug/rgrind`). Nothing here is `#[ignore]`d; cases that need a program that is not
//! installed say so on stdout and pass.

mod annotate_vs_valgrind;
mod bad_input;
mod cachegrind;
mod callgrind;
mod callgrind_opts;
mod callgrind_sim;
mod callgrind_systime;
mod client_requests;
mod exit;
mod guest_env;
mod harness;
mod helpers;
mod layout;
mod loader;
mod memory;
mod options;
mod process;
mod programs;
mod serialised;
mod startup;
mod symbol_names;
mod transparency;
mod vs_valgrind;
