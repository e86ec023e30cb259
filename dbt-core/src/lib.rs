//! The dynamic binary translator: loads a guest, translates its basic blocks into a code
//! cache, and runs them, handing system calls to the host kernel or emulating them.
//!
//! ```text
//!  loader ──entry──▶ dispatch ──miss──▶ translate (decode → emit) ──▶ cache (publish, chain)
//!                       ▲  │ enter                                        │
//!                       │  ▼                                              │
//!                 exit (ExitKind) ◀──────── translated code ◀─────────────┘
//!                       │
//!                       └─▶ syscall (pass / emulate)   cpuid   trap
//! ```
//!
//! # Invariants
//! * While guest code runs, FS is the guest's TLS base and GS is the thread's `ThreadContext`.
//! * At every guest instruction boundary the host registers hold the exact guest state.
//! * rgrind's Rust code runs only with rgrind's FS (switched by `dispatch::enter`).
pub mod asm;
pub mod aspace;
pub mod cache;
pub mod children;
pub mod clientreq;
pub mod context;
pub mod core_state;
pub mod cpu;
pub mod dispatch;
pub mod fast_hash;
pub mod guest_mem;
pub mod instrument;
pub mod layout;
pub mod loader;
pub mod pattern;
pub mod perfmap;
mod run;
pub mod runlock;
pub mod signal;
pub mod syscall;
pub mod thread;
pub mod tool;
pub mod translate;

pub use run::{load, start, CoreOptions, LoadedProgram, Presentation, RunError};
