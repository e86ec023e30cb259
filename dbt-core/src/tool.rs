//! The boundary between the core and the tools (none, cachegrind, callgrind): what a tool
//! supplies and what it gets. Tools import nothing from dbt-core except this module.
//!
//! A tool supplies `fini` (write results for the way the process ends) and, through its
//! default methods, opts into further hooks: `instrument` (add counting code to each block,
//! deterministically: a block may be translated again), `client_request`, thread start and
//! exit, the system-call pair `pre_syscall`/`post_syscall` and the signal-handler pair
//! `signal_delivered`/`signal_returned`.
//!
//! It gets a read-only [`BlockView`] of each block and an [`Instrumenter`] with a few
//! primitives; code generation stays in the core.
pub use crate::clientreq::{set_backtrace_printer, set_client_output, set_source_locator};
pub use crate::dispatch::request_retranslation;
/// Block counters (`Instrumenter::count_block`) of self-loops are spread over loop shares by
/// the translator; this folds them back. Call it before reading block counters.
pub use crate::instrument::arena::fold_loop_shares as fold_block_counters;
pub use crate::instrument::{
    AccessKind, AfterMiss, BlockView, CallArg, DataRef, FlowKind, Helper, InsnView, Instrumenter,
    LaneRef, Lanes, LlHitCount, LlQueue, LlRows, MaskedOff, MemAccess, MruCache, RepKind, SlotI1,
};
pub use crate::runlock::set_switch_hook as set_thread_switch_hook;
// Callgrind (callgrind branch): per-thread key and host-FS switch for tool routines.
pub use crate::instrument::calltrack::{
    leak_low, thread_key, with_host_fs, CallPlan, FrameLayout, InlineJump, InlineRec, JumpState,
    EXIT_OTHER, EXIT_RET,
};

/// How the guest process is ending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FiniReason {
    /// exit/exit_group with this status.
    Exit(i32),
    /// A fatal signal.
    Signal(i32),
}

/// A tool's answer to a client request it recognised.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientReply {
    /// The request's result (the guest's rdx); `None` leaves the caller's default.
    pub value: Option<u64>,
    /// Discard every translation (instrumentation changed, as Cachegrind's start/stop do).
    pub discard_translations: bool,
}

pub trait Tool: Send {
    /// The tool's name as `--tool=` spells it.
    fn name(&self) -> &'static str;
    /// Whether `instrument` may add anything (false: the core skips building the block's
    /// view, which costs more than translating it).
    fn instruments(&self) -> bool {
        true
    }
    /// Adds instrumentation to one block. The same block may be translated more than once
    /// (`request_retranslation`, discarded code) and must count the same each time (only
    /// fast paths may differ).
    fn instrument(&mut self, block: &BlockView, ins: &mut Instrumenter) {
        let _ = (block, ins);
    }
    /// A client request whose code is not a core one: `args` = `{request, arg1..arg5}`.
    /// The default ignores it (the caller's default value is returned, as Valgrind does).
    fn client_request(&mut self, args: &[u64; 6]) -> ClientReply {
        let _ = args;
        ClientReply::default()
    }
    /// A guest thread (`child`, a [`thread_key`]) was created by `parent`, before it runs.
    fn thread_start(&mut self, parent: u64, child: u64) {
        let _ = (parent, child);
    }
    /// A guest thread (not the last one) is ending, before its CLONE_CHILD_CLEARTID wake-up
    /// (so a joiner sees the thread gone, as under Valgrind, whose thread slot is free then).
    fn thread_exit(&mut self, key: u64) {
        let _ = key;
    }
    /// Guest system call `nr` is about to run (Valgrind's `pre_syscall`): with the guest
    /// stopped, on the calling thread ([`thread_key`]), before it may block.
    fn pre_syscall(&mut self, nr: u64) {
        let _ = nr;
    }
    /// Guest system call `nr` returned `result` to the calling thread (Valgrind's
    /// `post_syscall`); for `exit` and `exit_group`, with result 0 before the thread or
    /// process ends, as Valgrind. Not called for a successful `execve`, the child side of a
    /// new thread, `rt_sigreturn`.
    fn post_syscall(&mut self, nr: u64, result: i64) {
        let _ = (nr, result);
    }
    /// A handler for signal `sig` is about to run on the calling thread, its frame built
    /// (Valgrind's `pre_deliver_signal`). While it runs, the guest's rsp stays within
    /// `handler_stack` (`[low, high)`: below the interrupted rsp, or on the alternate stack);
    /// outside it, the handler was left without `rt_sigreturn` (`siglongjmp`).
    fn signal_delivered(&mut self, sig: i32, handler_stack: (u64, u64)) {
        let _ = (sig, handler_stack);
    }
    /// The calling thread's innermost handler returned through `rt_sigreturn`, the
    /// interrupted context restored (Valgrind's `post_deliver_signal`). A handler left by
    /// `longjmp` gets no such call.
    fn signal_returned(&mut self) {}
    /// A fault cut a run of block `block` (start, end) short: its instruction `faulting` ran
    /// its instrumentation and faulted in its own code, the instructions after it did not
    /// run. `counted`: whether the block's counter (`Instrumenter::count_block`, bumped
    /// somewhere in the block) counted this run. Then the signal is delivered.
    fn block_cut_short(&mut self, block: (u64, u64), faulting: usize, counted: bool) {
        let _ = (block, faulting, counted);
    }
    /// Called once when the process ends in any way, before it ends.
    fn fini(&mut self, reason: FiniReason) {
        let _ = reason;
    }
}
