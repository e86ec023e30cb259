//! Guest loading: finds the program the user named, maps it (and its PT_INTERP loader) into
//! rgrind's own address space and builds the guest's initial stack, so the translator can start
//! at [`LoadedGuest::entry`] with `rsp = `[`LoadedGuest::initial_rsp`].
//!
//! Pipeline: [`resolve_program`] (PATH search, `#!` scripts, the checks `execve` and Valgrind
//! make, with Valgrind's error wording) -> [`load`] (reserve, map PT_LOADs, reserve the brk
//! region, map the interpreter, build the stack and auxv).
//!
//! # Invariants
//! * Every guest mapping the loader makes lies inside one reservation per module, made before any
//!   segment is mapped; a segment is only ever mapped with `MAP_FIXED` inside its own module's
//!   reservation, so the loader never clobbers memory it does not own.
//! * `exe.end == brk_start` and `[brk_start, brk_limit)` is `PROT_NONE`, `MAP_NORESERVE`, and
//!   directly follows the exe image (for ET_DYN it is part of the same reservation).
//! * `initial_rsp` is 16-byte aligned and points at argc; `auxv` is exactly what was written on the
//!   guest stack, `AT_NULL` included.
//! * On error, everything the failed call mapped is unmapped again.
//!
//! # Deliberately not done here
//! * No guest code runs and no register state is set up (the dispatcher enters at `entry` with a
//!   clean register file, `rdx = 0`).
//! * The brk is only reserved; growing it (mprotect inside the reservation) is the syscall layer's
//!   job. `/proc/self/{exe,auxv,cmdline}` faking uses [`GuestProgram`] and [`LoadedGuest::auxv`]
//!   but lives elsewhere.
//! * No ASLR-style randomisation of the stack top or brk start: the layout is deterministic apart
//!   from the addresses the kernel picks for the reservations.

mod elf;
mod resolve;
mod stack;

pub use self::{elf::*, resolve::*, stack::*};

use std::ffi::CString;
use std::path::PathBuf;

/// The program to run after PATH lookup and `#!` handling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestProgram {
    /// The ELF file to map (absolute or as given, but openable).
    pub exe_path: PathBuf,
    /// The guest's argv (for scripts: `[interp, optarg?, script, args...]`).
    pub argv: Vec<CString>,
    /// AT_EXECFN string: the path as the kernel would see it (`/usr/bin/ls` for `ls` found via
    /// PATH; for a script, the script's path).
    pub execfn: CString,
}

/// What [`load`] needs besides the program.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// The guest's environment, `NAME=value` strings.
    pub envp: Vec<CString>,
    /// Bytes of address space reserved after the image for the emulated brk (rounded up to
    /// whole pages).
    pub brk_reserve: u64,
    /// Guest main stack size in bytes (rounded up to whole pages; a guard page is added below).
    pub stack_size: u64,
    /// Build the auxv Valgrind gives its guests: no vDSO (`AT_SYSINFO_EHDR`),
    /// `AT_MINSIGSTKSZ` or `AT_HWCAP2` (glibc then takes the system-call paths for the time
    /// functions, as under Valgrind).
    pub valgrind_auxv: bool,
}

/// One ELF module (the exe or its interpreter) as mapped into guest memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappedModule {
    /// The file that was mapped.
    pub path: PathBuf,
    /// Added to every `p_vaddr`; 0 for ET_EXEC.
    pub load_bias: u64,
    /// Page-aligned start of the span of all PT_LOADs.
    pub start: u64,
    /// Page-aligned end of the span of all PT_LOADs.
    pub end: u64,
    /// `e_entry + load_bias`.
    pub entry: u64,
    /// Address of the program headers in guest memory.
    pub phdr: u64,
    /// Number of program headers.
    pub phnum: u64,
    /// Page-aligned `[start, end)` spans of the PF_X segments, in program-header order.
    pub exec_ranges: Vec<(u64, u64)>,
}

/// Everything the dispatcher and the syscall layer need to know about a freshly loaded guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedGuest {
    /// Where translation starts: the interpreter's entry, or the exe's when there is no PT_INTERP.
    pub entry: u64,
    /// Guest rsp: points at argc; 16-byte aligned.
    pub initial_rsp: u64,
    /// The main executable.
    pub exe: MappedModule,
    /// The PT_INTERP loader, if the exe names one.
    pub interp: Option<MappedModule>,
    /// Page-aligned end of the exe image: the initial program break.
    pub brk_start: u64,
    /// End of the brk reservation (`brk_start + brk_reserve`); `PROT_NONE`, `MAP_NORESERVE`.
    pub brk_limit: u64,
    /// Lowest address of the guest main-stack mapping (its lowest page is a `PROT_NONE` guard).
    pub stack_start: u64,
    /// End (exclusive) of the guest main-stack mapping.
    pub stack_end: u64,
    /// The auxv pairs exactly as written on the stack, `AT_NULL` included.
    pub auxv: Vec<(u64, u64)>,
    /// `[start, end)` of the kernel vDSO mapping the guest shares with rgrind, if there is one.
    pub vdso: Option<(u64, u64)>,
}

/// Why a program could not be resolved or loaded. The `Display` text is the whole line the
/// launcher prints (Valgrind's wording with "rgrind" as the program name); all variants mean bad
/// input or a resource limit, never an rgrind bug.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Bad input: a name without '/' that no PATH directory holds as an executable file.
    #[error("rgrind: {name}: command not found")]
    CommandNotFound {
        /// The name as given.
        name: String,
    },
    /// Bad input: the program path names a directory.
    #[error("rgrind: {path}: is a directory")]
    IsDirectory {
        /// The path as given.
        path: String,
    },
    /// Bad input: the file could not be opened or executed (missing, no execute permission, ...).
    #[error("rgrind: {path}: {}", strerror(*errno))]
    Os {
        /// The path as given.
        path: String,
        /// The errno (`ENOENT`, `EACCES`, `E2BIG`, ...).
        errno: i32,
    },
    /// Bad input: neither ELF nor `#!` script, and not text either (Valgrind runs text files
    /// without `#!` with /bin/sh, and so do we).
    #[error("rgrind: {path}: cannot execute binary file")]
    BinaryFile {
        /// The path as given.
        path: String,
    },
    /// Bad input: a `#!` script whose interpreter cannot be run.
    #[error("rgrind: {path}: bad interpreter: {}", strerror(*errno))]
    BadInterpreter {
        /// The script's path.
        path: String,
        /// Why the interpreter failed (`ENOENT`, `EACCES`, `ENOEXEC`, `ELOOP` for too deep a
        /// chain of scripts).
        errno: i32,
    },
    /// Bad input: an ELF file for a platform rgrind does not run (32-bit, not x86-64).
    #[error(
        "rgrind: {path}: cannot execute binary file: platform '{platform}' is not supported \
         (rgrind runs amd64-linux programs only)"
    )]
    UnsupportedPlatform {
        /// The path as given.
        path: String,
        /// Valgrind's platform name for the file (`x86-linux`, `arm64-linux`, ...).
        platform: String,
    },
    /// Bad input: an x86-64 ELF file that is neither ET_EXEC nor ET_DYN (object file, core).
    #[error("rgrind: {path}: this is not an executable")]
    NotExecutable {
        /// The path as given.
        path: String,
    },
    /// Bad input: the ELF headers are inconsistent or truncated.
    #[error("rgrind: {path}: malformed ELF file: {what}")]
    Malformed {
        /// The file.
        path: String,
        /// What is wrong.
        what: String,
    },
    /// Bad input: the exe's PT_INTERP loader could not be opened or is not a usable ELF file.
    #[error("rgrind: {path}: can't open interpreter {interp}: {}", strerror(*errno))]
    Interpreter {
        /// The exe.
        path: String,
        /// The PT_INTERP path.
        interp: String,
        /// Why (`ENOENT`, `EACCES`, `ENOEXEC`, ...).
        errno: i32,
    },
    /// Limit: an ET_EXEC program's fixed address range (or the brk reservation right after it)
    /// is already occupied in rgrind's process.
    #[error(
        "rgrind: {path}: cannot map {what} at its fixed address range {start:#x}-{end:#x}: \
         the range is already in use"
    )]
    AddressInUse {
        /// The file.
        path: String,
        /// "the program" or "the brk reservation".
        what: &'static str,
        /// Start of the wanted range.
        start: u64,
        /// End of the wanted range.
        end: u64,
    },
    /// Limit: an mmap/mprotect the loader needs failed (out of address space or memory).
    #[error("rgrind: {path}: cannot map {what}: {}", strerror(*errno))]
    Map {
        /// The file (or "stack").
        path: String,
        /// What was being mapped.
        what: &'static str,
        /// The errno.
        errno: i32,
    },
    /// Limit: argv, envp and auxv do not fit in the guest stack.
    #[error(
        "rgrind: {path}: Argument list too long (needs {needed} bytes of a {size}-byte stack)"
    )]
    StackTooSmall {
        /// The program.
        path: String,
        /// Bytes the initial stack contents need.
        needed: u64,
        /// The stack size.
        size: u64,
    },
    /// Limit: the kernel gave no random bytes for AT_RANDOM.
    #[error("rgrind: getrandom failed: {}", strerror(*errno))]
    Random {
        /// The errno.
        errno: i32,
    },
}

impl LoadError {
    /// The exit status Valgrind (and a shell) uses for this failure: 127 when the program does
    /// not exist, 126 when it exists but cannot be run, 1 for loader failures after that.
    pub fn exit_code(&self) -> i32 {
        match self {
            LoadError::CommandNotFound { .. } => 127,
            LoadError::Os { errno, .. } if *errno == libc::ENOENT => 127,
            LoadError::IsDirectory { .. }
            | LoadError::Os { .. }
            | LoadError::BinaryFile { .. }
            | LoadError::BadInterpreter { .. }
            | LoadError::UnsupportedPlatform { .. }
            | LoadError::NotExecutable { .. } => 126,
            _ => 1,
        }
    }
}

/// The C library's message for `errno`, without Rust's " (os error N)" suffix.
pub(crate) fn strerror(errno: i32) -> String {
    let full = std::io::Error::from_raw_os_error(errno).to_string();
    match full.rfind(" (os error ") {
        Some(cut) => full[..cut].to_string(),
        None => full,
    }
}

/// The current `errno` as an i32 (EIO if none is set).
pub(crate) fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Lossy display form of a path, for messages.
pub(crate) fn show(path: &std::path::Path) -> String {
    path.to_string_lossy().into_owned()
}

/// Maps `program` and its interpreter, reserves the brk region and builds the initial stack.
///
/// On success the caller owns all the mappings (they are never unmapped by the loader); on
/// error nothing stays mapped.
/// Where a position-independent program goes (with its brk reservation after it): the first
/// of these whose range is free. The first is where the kernel puts one natively (0x55..-0x56..,
/// above rgrind's own binary when randomisation is off), below the libraries and the stack,
/// which the kernel places from the top of the address space down, so that the program, its
/// heap, the libraries and the stack come in the order they come natively (and under Valgrind),
/// and the sanitizers' fixed shadow ranges stay clear of the program. Where randomisation stays
/// on (`--tool=none`, or a persona that cannot be set) rgrind's own binary and heap lie anywhere
/// in the terabyte above 0x5555_5555_4000, on the first range about once in a thousand runs; the
/// others are 256 GiB away on either side, so one of them is free and the order holds.
pub(crate) const PIE_BASES: [u64; 3] = [0x5600_0000_0000, 0x5640_0000_0000, 0x55c0_0000_0000];

pub fn load(program: &GuestProgram, opts: &LoadOptions) -> Result<LoadedGuest, LoadError> {
    let page = page_size();
    let brk_reserve = round_up(opts.brk_reserve, page).ok_or_else(|| LoadError::Map {
        path: show(&program.exe_path),
        what: "the brk reservation",
        errno: libc::ENOMEM,
    })?;
    let exe_file = elf::ElfFile::open(&program.exe_path)?;
    let stack_res = stack::reserve_stack(&program.exe_path, opts.stack_size)?;
    let exe_res = exe_file.map(brk_reserve, &PIE_BASES)?;
    let interp_res = match exe_file.interp_path()? {
        Some(interp_path) => {
            let interp_file = elf::ElfFile::open(&interp_path)
                .map_err(|e| interp_error(&program.exe_path, &interp_path, e))?;
            Some(interp_file.map(0, &[])?)
        }
        None => None,
    };
    let exe = exe_res.module.clone();
    let interp = interp_res.as_ref().map(|r| r.module.clone());
    let brk_start = exe.end;
    let brk_limit = brk_start + brk_reserve;
    let built = build_stack(
        &StackInput {
            path: &program.exe_path,
            argv: &program.argv,
            envp: &opts.envp,
            execfn: &program.execfn,
            exe: &exe,
            interp_base: interp.as_ref().map_or(0, |m| m.load_bias),
            valgrind_auxv: opts.valgrind_auxv,
        },
        stack_res,
    )?;
    let entry = interp.as_ref().map_or(exe.entry, |m| m.entry);
    // Post-invariant: from here on nothing can fail, so keep the mappings.
    exe_res.keep();
    if let Some(r) = interp_res {
        r.keep();
    }
    Ok(LoadedGuest {
        entry,
        initial_rsp: built.initial_rsp,
        exe,
        interp,
        brk_start,
        brk_limit,
        stack_start: built.stack_start,
        stack_end: built.stack_end,
        auxv: built.auxv,
        vdso: vdso_range(),
    })
}

impl LoadedGuest {
    /// Unmaps everything [`load`] mapped for this guest: the exe image with its brk reservation,
    /// the interpreter and the stack.
    ///
    /// # Safety
    /// No guest code may run any more and nothing may still point into guest memory.
    pub unsafe fn unmap(&self) {
        elf::unmap(self.exe.start, self.brk_limit - self.exe.start);
        if let Some(i) = &self.interp {
            elf::unmap(i.start, i.end - i.start);
        }
        elf::unmap(self.stack_start, self.stack_end - self.stack_start);
    }
}

/// Turns an error about the interpreter file into one that names both files.
fn interp_error(exe: &std::path::Path, interp: &std::path::Path, e: LoadError) -> LoadError {
    let errno = match e {
        LoadError::Os { errno, .. } => errno,
        LoadError::IsDirectory { .. } => libc::EISDIR,
        LoadError::NotExecutable { .. } => libc::ENOEXEC,
        // These already name the interpreter file and say what is wrong with it.
        _ => return e,
    };
    LoadError::Interpreter {
        path: show(exe),
        interp: show(interp),
        errno,
    }
}

/// The host page size (4096 on x86-64 Linux).
pub(crate) fn page_size() -> u64 {
    // SAFETY: getauxval only reads the process's auxv; it has no preconditions.
    let v = unsafe { libc::getauxval(libc::AT_PAGESZ) };
    if v.is_power_of_two() {
        v
    } else {
        4096
    }
}

/// `v` rounded up to a multiple of the power of two `align`, or None on overflow.
pub(crate) fn round_up(v: u64, align: u64) -> Option<u64> {
    Some(v.checked_add(align - 1)? & !(align - 1))
}

/// `v` rounded down to a multiple of the power of two `align`.
pub(crate) fn round_down(v: u64, align: u64) -> u64 {
    v & !(align - 1)
}

#[cfg(test)]
mod tests;
