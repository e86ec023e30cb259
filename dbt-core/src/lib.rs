//! The dynamic binary translator: loads a guest, translates its basic blocks into a code cache,
//! and runs them, handing system calls to the host kernel or emulating them.
pub mod loader;
