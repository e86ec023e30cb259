//! Starting a guest: load it, build the main thread's context and hand it to the dispatcher.
use crate::cache::CodeCache;
use crate::context::{reg, ThreadContext};
use crate::core_state::{install, Core, Process};
use crate::loader::{self, GuestProgram, LoadError, LoadOptions};
use crate::tool::Tool;
use crate::translate::TranslateOptions;
use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// Core options, parsed by the launcher.
#[derive(Clone, Debug)]
pub struct CoreOptions {
    /// Log each translation (guest range, host address).
    pub trace_blocks: bool,
    /// Log each system call and its result.
    pub trace_syscalls: bool,
    /// One guest instruction per block and no chaining: every instruction returns to the
    /// dispatcher (for bisecting translation bugs).
    pub single_step: bool,
    /// Chain direct branches (off with --single-step or --chain=no).
    pub chaining: bool,
    /// Which exec'd programs run under rgrind too.
    pub trace_children: crate::children::ChildTracing,
    /// A preload object rgrind put into the guest's `LD_PRELOAD` (`--guest-env=valgrind`);
    /// taken out again when the guest execs a program rgrind does not follow, as Valgrind does.
    pub preload: Option<PathBuf>,
    /// rgrind's own executable and the options to pass it again for --trace-children.
    pub rgrind_exe: PathBuf,
    pub rgrind_args: Vec<OsString>,
    /// Instructions per block at most.
    pub max_block_insns: usize,
    /// Print dispatcher statistics at exit.
    pub stats: bool,
    /// Run one guest thread at a time (required by instrumenting tools for exact counts).
    pub serialise_threads: bool,
}

impl Default for CoreOptions {
    fn default() -> Self {
        Self {
            trace_blocks: false,
            trace_syscalls: false,
            single_step: false,
            chaining: true,
            trace_children: Default::default(),
            preload: None,
            rgrind_exe: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("rgrind")),
            rgrind_args: Vec::new(),
            max_block_insns: 60,
            stats: false,
            serialise_threads: false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Bad input: the message carries Valgrind's `rgrind: ` prefix already.
    /// Bad input: the message carries Valgrind's `rgrind: ` prefix already.
    #[error("{0}")]
    Load(#[from] LoadError),
    /// The host lacks something rgrind needs (a limit).
    #[error("rgrind: {0}")]
    Host(String),
}

/// Bytes of address space reserved for the guest's brk heap. Past it brk fails and malloc falls
/// back to mmap, as natively when brk runs into a mapping; it is kept below 2 GiB so that code
/// cache chunks after it stay within rel32 reach of the executable.
const BRK_RESERVE: u64 = 1 << 30;

fn stack_size() -> u64 {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    let r = unsafe { libc::getrlimit(libc::RLIMIT_STACK, &mut rl) };
    let cur = if r == 0 { rl.rlim_cur } else { 8 << 20 };
    cur.clamp(1 << 20, 1 << 30)
}

/// A guest mapped into memory with its initial stack, ready to start.
pub struct LoadedProgram {
    program: GuestProgram,
    loaded: loader::LoadedGuest,
}

/// What the guest is shown of the machine it runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presentation {
    /// The host as it is (the program behaves as natively).
    Native,
    /// What Valgrind shows its guests: its canned CPUID (`crate::cpu`) and its auxv. The
    /// profiling tools use it so that ld.so and glibc do the same work as under Valgrind.
    Valgrind,
}

/// Maps `program` (and its loader) and builds its initial stack; nothing runs yet. Selects
/// the CPU model of `shown` for the whole run.
pub fn load(
    program: GuestProgram,
    envp: Vec<CString>,
    shown: Presentation,
) -> Result<LoadedProgram, RunError> {
    if !crate::dispatch::fsgsbase_available() {
        return Err(RunError::Host(
            "the kernel does not allow the FSGSBASE instructions (Linux 5.9+ on a CPU with FSGSBASE is needed)".into(),
        ));
    }
    crate::cpu::select(match shown {
        Presentation::Native => crate::cpu::CpuModel::Host,
        Presentation::Valgrind => crate::cpu::CpuModel::Valgrind,
    });
    let opts = LoadOptions {
        envp,
        brk_reserve: BRK_RESERVE,
        stack_size: stack_size(),
        valgrind_auxv: shown == Presentation::Valgrind,
    };
    let loaded = loader::load(&program, &opts)?;
    Ok(LoadedProgram { program, loaded })
}

/// Runs a loaded guest to completion; never returns on success (the process exits with the
/// guest's status or signal).
pub fn start(
    guest: LoadedProgram,
    opts: CoreOptions,
    tool: Box<dyn Tool>,
) -> Result<std::convert::Infallible, RunError> {
    let LoadedProgram { program, loaded } = guest;
    let mut mappings = crate::aspace::GuestRanges::default();
    mappings.insert(loaded.exe.start, loaded.exe.end);
    if let Some(i) = &loaded.interp {
        mappings.insert(i.start, i.end);
    }
    mappings.insert(loaded.stack_start, loaded.stack_end);
    if let Some((s, e)) = loaded.vdso {
        mappings.insert(s, e);
    }
    let mut cmdline = Vec::new();
    for a in &program.argv {
        cmdline.extend_from_slice(a.as_bytes_with_nul());
    }
    let auxv: Vec<u8> = loaded
        .auxv
        .iter()
        .flat_map(|&(k, v)| k.to_ne_bytes().into_iter().chain(v.to_ne_bytes()))
        .collect();
    let exe_path =
        std::fs::canonicalize(&program.exe_path).unwrap_or_else(|_| program.exe_path.clone());
    let _ = exe_path.as_os_str().as_bytes();
    crate::instrument::map_shared_scans();
    install(Core {
        cache: CodeCache::default(),
        topts: TranslateOptions {
            max_insns: if opts.single_step {
                1
            } else {
                opts.max_block_insns
            },
            trace_blocks: opts.trace_blocks,
            line_entries: std::env::var_os("RGRIND_NO_LINE_ENTRIES").is_none(),
            shared_scans: std::env::var_os("RGRIND_NO_SHARED_SCANS").is_none(),
            cold_parts: std::env::var_os("RGRIND_NO_COLD_PARTS").is_none(),
            check_split: std::env::var_os("RGRIND_CHECK_SPLIT").is_some(),
        },
        chaining: opts.chaining && !opts.single_step,
        process: Process {
            exe_path,
            cmdline,
            auxv,
            brk_start: loaded.brk_start,
            brk_cur: loaded.brk_start,
            brk_mapped: loaded.brk_start,
            brk_limit: loaded.brk_limit,
            mappings,
            writable: {
                let mut w = crate::aspace::GuestRanges::default();
                w.insert(loaded.stack_start, loaded.stack_end);
                w
            },
            shm_segments: Default::default(),
            trace_children: opts.trace_children.clone(),
            preload: opts.preload.clone(),
            trace_syscalls: opts.trace_syscalls,
            rgrind_exe: opts.rgrind_exe.clone(),
            rgrind_args: opts.rgrind_args.clone(),
        },
        tool,
        finished: false,
        stats: opts.stats,
    });
    let ctx = ThreadContext::allocate()
        .ok_or_else(|| RunError::Host("cannot allocate a thread context".into()))?;
    ctx.gpr = [0; 16];
    ctx.gpr[reg::RSP] = loaded.initial_rsp;
    ctx.rip = loaded.entry;
    ctx.rflags = 0x202;
    ctx.guest_fs = 0;
    ctx.init_xstate();
    ctx.is_main_thread = true;
    if opts.serialise_threads {
        crate::runlock::enable();
    }
    crate::signal::init();
    crate::thread::register(ctx);
    crate::dispatch::run_thread(ctx);
    unreachable!("the main thread's exit does not return")
}
