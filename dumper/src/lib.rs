//! Symbolised costs and Valgrind-format profile files.
//!
//! The dumper turns raw counts into the files users read: it symbolises guest addresses
//! against the mapped ELF modules, aggregates per-instruction costs the way Cachegrind and
//! Callgrind do, writes `cachegrind.out` / `callgrind.out` files byte-compatible with
//! Valgrind 3.19, reads both formats back, and implements `rgrind annotate|diff|merge`.
//!
//! # Interface for the tools
//!
//! * **Modules** — [`ModuleInfo`] `{ path, load_bias, ranges, source }` for every mapped ELF
//!   (executable, ld.so, libraries: `ModuleInfo::file(path, bias, ranges)`) and the vDSO
//!   (`ModuleInfo::memory("[vdso]", bias, ranges, image_bytes)`). `load_bias` is runtime minus
//!   link-time address; `ranges` are the runtime ranges it maps.
//! * **Symbolisation** — [`Symbolizer::new`]`(modules)` builds nothing up front; each module's
//!   tables (symtab/dynsym with Valgrind's alias choice, DWARF line rows, separate debug file by
//!   build-id or debuglink) are built on its first lookup. [`Symbolizer::lookup`]`(addr)` gives
//!   a [`Location`] `{ object, offset, file, function, function_start, line, section, inlined }`;
//!   [`Symbolizer::lookup_fast`] is the same without the inlined chain. `offset` is the
//!   link-time address Valgrind prints.
//! * **Cachegrind** — [`CgProfile::from_costs`]`(desc_lines, cmd, events, &BTreeMap<addr,
//!   Vec<u64>>, &sym)` aggregates per (file, function, line) exactly as Cachegrind and
//!   [`CgProfile::write_file`] writes it (`events:` spacing, sorting, `summary:`). Events are
//!   given in Cachegrind's order (`Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw`, then `Bc Bcm Bi Bim`);
//!   [`cachegrind::cachegrind_cmd`] builds `cmd:`.
//! * **Callgrind** — [`callgrind::CallgrindData`] holds the header
//!   ([`callgrind::callgrind_header`]: pid, cmd, part, thread, cache `desc:` values, time range,
//!   trigger, events), the contexts in creation order ([`callgrind::FnContext`]: entry address,
//!   callers, ids reserved = `--separate-recs`), self costs per (context, recursion level,
//!   instruction address), call arcs ([`callgrind::CallArc`]: caller context and call
//!   instruction, callee context, count, inclusive costs) and jumps. `to_part(&sym, &opts)`
//!   numbers `fn=(id)` as Callgrind does (context base + level) and
//!   [`callgrind::ClPart::write_file`] writes it with or without `--compress-strings` /
//!   `--compress-pos`; [`callgrind::CallgrindOptions`] selects `--dump-instr`/`--dump-line`.
//!   `CallgrindData::from_flat` accepts the simple form (self costs plus
//!   `(call addr, callee entry, count, inclusive)` arcs) when the tool has no contexts.
//!   [`callgrind::callgrind_cmd`] builds `cmd:` (leading space, escapes).
//! * **File names** — [`OutFileTemplate::parse`]`("callgrind.out.%p")` checks a template with
//!   Valgrind's messages ([`TemplateError::valgrind_lines`]); `expand(pid, env)` /
//!   `expand_in(cwd, pid, env)` expand `%p`, `%n`, `%q{VAR}`, `%%`;
//!   [`outfile::callgrind_dump_name`] adds `.N` parts and `-NN` threads.
//! * **Readers** — [`cachegrind::parse_cachegrind`] and [`callgrind::parse_callgrind`] accept
//!   everything the formats allow and report malformed input as [`DumpError::Parse`] with
//!   file and line.
//! * **Subcommands** — [`run_subcommand`]`("annotate" | "diff" | "merge", args)` writes to
//!   stdout (or `-o FILE` for merge) and returns the exit status.
//!
//! # Invariants
//! * No unsafe code; no panics on bad input (errors are [`DumpError`]).
//! * The dumper does no IO of its own except reading ELF/DWARF/source/profile files and
//!   writing the file it is asked to write (or stdout for the subcommands).
//!
//! It deliberately does not simulate caches or track calls: the tools hand it finished counts.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod annotate;
pub mod cachegrind;
pub mod callgrind;
pub mod error;
pub mod outfile;
pub mod symbols;

pub use annotate::run_subcommand;
pub use cachegrind::CgProfile;
pub use error::DumpError;
pub use outfile::{create_output, OutFileTemplate, TemplateError};
pub use symbols::{Brief, Location, ModuleInfo, ModuleSource, Symbolizer};
