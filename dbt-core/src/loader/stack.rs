//! The guest's initial stack: maps the main stack and writes argc, argv, envp and auxv with the
//! strings above them, in the kernel's layout (`fs/binfmt_elf.c`, `create_elf_tables`).
//!
//! Layout, from the top of the mapping down:
//!
//! ```text
//!   stack_end -> 8 zero bytes
//!                execfn string (AT_EXECFN)
//!                envp strings, argv strings (argv[0] lowest)
//!                (align 16) "x86_64\0" (AT_PLATFORM), 16 random bytes (AT_RANDOM)
//!                (align 16) auxv pairs ... AT_NULL, NULL, envp[], NULL, argv[], argc <- initial_rsp
//!   stack_start -> guard page (PROT_NONE)
//! ```
//!
//! # Invariants
//! * `initial_rsp % 16 == 0` and everything between it and `stack_end` is initialised.
//! * The returned auxv is exactly the pairs written on the stack, ending with `AT_NULL`.
//!
//! # Deliberately not done here
//! * No random stack-top offset (the kernel's `arch_align_stack`): the layout is reproducible.
//! * AT_RSEQ_FEATURE_SIZE/ALIGN, AT_BASE_PLATFORM and any auxv entry unknown to this file are not
//!   passed on (rgrind answers rseq with ENOSYS).

use std::ffi::CString;
use std::path::Path;

use super::elf::Reservation;
use super::{last_errno, page_size, round_down, round_up, show, LoadError, MappedModule};

/// auxv tag: end of the vector.
pub const AT_NULL: u64 = 0;
/// An entry to skip (Valgrind's replacement for the entries it takes out).
pub const AT_IGNORE: u64 = 1;
/// auxv tag: address of the exe's program headers.
pub const AT_PHDR: u64 = 3;
/// auxv tag: size of one program header.
pub const AT_PHENT: u64 = 4;
/// auxv tag: number of program headers.
pub const AT_PHNUM: u64 = 5;
/// auxv tag: page size.
pub const AT_PAGESZ: u64 = 6;
/// auxv tag: interpreter load bias.
pub const AT_BASE: u64 = 7;
/// auxv tag: flags (always 0).
pub const AT_FLAGS: u64 = 8;
/// auxv tag: the exe's entry point.
pub const AT_ENTRY: u64 = 9;
/// auxv tag: real uid.
pub const AT_UID: u64 = 11;
/// auxv tag: effective uid.
pub const AT_EUID: u64 = 12;
/// auxv tag: real gid.
pub const AT_GID: u64 = 13;
/// auxv tag: effective gid.
pub const AT_EGID: u64 = 14;
/// auxv tag: address of the platform string.
pub const AT_PLATFORM: u64 = 15;
/// auxv tag: CPUID.1.EDX feature bits.
pub const AT_HWCAP: u64 = 16;
/// auxv tag: clock ticks per second.
pub const AT_CLKTCK: u64 = 17;
/// auxv tag: secure mode (setuid).
pub const AT_SECURE: u64 = 23;
/// auxv tag: address of 16 random bytes.
pub const AT_RANDOM: u64 = 25;
/// auxv tag: more feature bits (bit 1: FSGSBASE).
pub const AT_HWCAP2: u64 = 26;
/// auxv tag: address of the executed file name.
pub const AT_EXECFN: u64 = 31;
/// auxv tag: vDSO ELF header address.
pub const AT_SYSINFO_EHDR: u64 = 33;
/// auxv tag: minimal signal stack size (includes the XSAVE area).
pub const AT_MINSIGSTKSZ: u64 = 51;
/// AT_HWCAP2 bit saying user space may use rdfsbase/wrfsbase. rgrind clears it: FS is shared
/// between guest and rgrind (DESIGN "Process model"), so the guest must go through arch_prctl.
pub const HWCAP2_FSGSBASE: u64 = 1 << 1;
/// The AT_PLATFORM string on x86-64.
const PLATFORM: &[u8] = b"x86_64\0";

/// What [`build_stack`] needs.
pub(crate) struct StackInput<'a> {
    /// The exe, for messages.
    pub path: &'a Path,
    pub argv: &'a [CString],
    pub envp: &'a [CString],
    pub execfn: &'a CString,
    pub exe: &'a MappedModule,
    /// AT_BASE: the interpreter's load bias, 0 without one.
    pub interp_base: u64,
    /// Leave out what Valgrind leaves out (see `LoadOptions::valgrind_auxv`).
    pub valgrind_auxv: bool,
}

/// The mapped and written stack.
pub(crate) struct BuiltStack {
    pub initial_rsp: u64,
    pub stack_start: u64,
    pub stack_end: u64,
    pub auxv: Vec<(u64, u64)>,
}

/// Own auxv value for `tag` (0 when absent), as the kernel gave it. glibc's getauxval is not
/// used: on x86-64 it answers AT_HWCAP with its own platform mask, not the kernel's value.
fn host_auxv(tag: u64) -> u64 {
    host_auxv_all()
        .iter()
        .find(|&&(k, _)| k == tag)
        .map_or(0, |&(_, v)| v)
}

/// The auxv the kernel gave this process, in its order (`AT_NULL` left out).
fn host_auxv_all() -> &'static [(u64, u64)] {
    static AUXV: std::sync::OnceLock<Vec<(u64, u64)>> = std::sync::OnceLock::new();
    AUXV.get_or_init(|| {
        let bytes = std::fs::read("/proc/self/auxv").unwrap_or_default();
        bytes
            .chunks_exact(16)
            .map(|c| {
                let k = u64::from_ne_bytes(c[..8].try_into().unwrap_or([0; 8]));
                let v = u64::from_ne_bytes(c[8..].try_into().unwrap_or([0; 8]));
                (k, v)
            })
            .take_while(|&(k, _)| k != AT_NULL)
            .collect()
    })
}

/// Maps the guest main stack and writes the initial argc/argv/envp/auxv image into it.
/// Reserves the guest stack's address range (`stack_size` rounded up to pages, and a guard
/// page below), before anything else of the guest is mapped: the kernel hands out mappings
/// from the top down, so the stack lies above the program, its heap and its libraries, as it
/// does natively and under Valgrind (pointer comparisons between them come out the same).
pub(crate) fn reserve_stack(path: &Path, stack_size: u64) -> Result<Reservation, LoadError> {
    let page = page_size();
    let size = round_up(stack_size.max(page), page).ok_or(LoadError::Map {
        path: show(path),
        what: "the guest stack",
        errno: libc::ENOMEM,
    })?;
    Reservation::anywhere(size + page).map_err(|errno| LoadError::Map {
        path: show(path),
        what: "the guest stack",
        errno,
    })
}

/// Builds the initial stack in `res` (from [`reserve_stack`]).
pub(crate) fn build_stack(inp: &StackInput<'_>, res: Reservation) -> Result<BuiltStack, LoadError> {
    let page = page_size();
    let size = res.len - page;
    let stack_start = res.addr;
    let stack_end = res.addr + res.len;
    // SAFETY: [stack_start + page, stack_end) lies inside the reservation just made, which no
    // one else references; making it read-write changes nothing else.
    let r = unsafe {
        libc::mprotect(
            (stack_start + page) as *mut libc::c_void,
            size as usize,
            libc::PROT_READ | libc::PROT_WRITE,
        )
    };
    if r != 0 {
        return Err(LoadError::Map {
            path: show(inp.path),
            what: "the guest stack",
            errno: last_errno(),
        });
    }

    let mut random = [0u8; 16];
    fill_random(&mut random)?;
    let image = layout(inp, stack_end, &random);
    let needed = stack_end - image.sp;
    if needed > size {
        return Err(LoadError::StackTooSmall {
            path: show(inp.path),
            needed,
            size,
        });
    }
    // SAFETY: [image.sp, stack_end) is inside the read-write part of the reservation (checked
    // just above: needed <= size), and `image.bytes` has exactly `needed` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(image.bytes.as_ptr(), image.sp as *mut u8, image.bytes.len());
    }
    // Post-invariant: the stack is written; hand the mapping over.
    std::mem::forget(res);
    Ok(BuiltStack {
        initial_rsp: image.sp,
        stack_start,
        stack_end,
        auxv: image.auxv,
    })
}

/// The stack contents from `sp` to the top, ready to copy.
struct StackImage {
    sp: u64,
    bytes: Vec<u8>,
    auxv: Vec<(u64, u64)>,
}

/// Computes the kernel-style layout below `top` and renders it into a byte image.
fn layout(inp: &StackInput<'_>, top: u64, random: &[u8; 16]) -> StackImage {
    // Writes go into a list first; addresses are only known relative to `top`.
    let mut writes: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut p = top - 8; // 8 zero bytes at the very top, like the kernel.
    let execfn = inp.execfn.as_bytes_with_nul();
    p -= execfn.len() as u64;
    let execfn_addr = p;
    writes.push((p, execfn.to_vec()));
    let strings_len = |v: &[CString]| {
        v.iter()
            .map(|s| s.as_bytes_with_nul().len() as u64)
            .sum::<u64>()
    };
    p -= strings_len(inp.envp);
    let envp_addrs = place_strings(inp.envp, p, &mut writes);
    p -= strings_len(inp.argv);
    let argv_addrs = place_strings(inp.argv, p, &mut writes);
    p = round_down(p, 16);
    p -= PLATFORM.len() as u64;
    let platform_addr = p;
    writes.push((p, PLATFORM.to_vec()));
    p -= 16;
    let random_addr = p;
    writes.push((p, random.to_vec()));

    let auxv = auxv_entries(inp, execfn_addr, platform_addr, random_addr);
    let words = 1 + (argv_addrs.len() + 1) + (envp_addrs.len() + 1) + 2 * auxv.len();
    let sp = round_down(p - 8 * words as u64, 16);
    let mut table: Vec<u64> = Vec::with_capacity(words);
    table.push(argv_addrs.len() as u64);
    table.extend(&argv_addrs);
    table.push(0);
    table.extend(&envp_addrs);
    table.push(0);
    for &(k, v) in &auxv {
        table.push(k);
        table.push(v);
    }
    writes.push((sp, table.iter().flat_map(|w| w.to_le_bytes()).collect()));

    let mut bytes = vec![0u8; (top - sp) as usize];
    for (addr, data) in writes {
        let off = (addr - sp) as usize;
        bytes[off..off + data.len()].copy_from_slice(&data);
    }
    StackImage { sp, bytes, auxv }
}

/// Queues `strs` for writing consecutively from `start`; returns each one's address.
fn place_strings(strs: &[CString], start: u64, writes: &mut Vec<(u64, Vec<u8>)>) -> Vec<u64> {
    let mut at = start;
    strs.iter()
        .map(|s| {
            let b = s.as_bytes_with_nul();
            writes.push((at, b.to_vec()));
            let addr = at;
            at += b.len() as u64;
            addr
        })
        .collect()
}

/// The auxv in the kernel's order (x86-64 `ARCH_DLINFO` first), `AT_NULL` last.
fn auxv_entries(inp: &StackInput<'_>, execfn: u64, platform: u64, random: u64) -> Vec<(u64, u64)> {
    let mut v = Vec::with_capacity(24);
    let vdso = host_auxv(AT_SYSINFO_EHDR);
    if vdso != 0 && !inp.valgrind_auxv {
        v.push((AT_SYSINFO_EHDR, vdso));
    }
    let minsig = host_auxv(AT_MINSIGSTKSZ);
    if minsig != 0 && !inp.valgrind_auxv {
        v.push((AT_MINSIGSTKSZ, minsig));
    }
    let clktck = match host_auxv(AT_CLKTCK) {
        0 => 100,
        t => t,
    };
    v.extend([
        (AT_HWCAP, host_auxv(AT_HWCAP)),
        (AT_PAGESZ, page_size()),
        (AT_CLKTCK, clktck),
        (AT_PHDR, inp.exe.phdr),
        (AT_PHENT, 56),
        (AT_PHNUM, inp.exe.phnum),
        (AT_BASE, inp.interp_base),
        (AT_FLAGS, 0),
        (AT_ENTRY, inp.exe.entry),
        (AT_UID, host_auxv(AT_UID)),
        (AT_EUID, host_auxv(AT_EUID)),
        (AT_GID, host_auxv(AT_GID)),
        (AT_EGID, host_auxv(AT_EGID)),
        (AT_SECURE, 0),
        (AT_RANDOM, random),
        (AT_HWCAP2, host_auxv(AT_HWCAP2) & !HWCAP2_FSGSBASE),
        (AT_EXECFN, execfn),
        (AT_PLATFORM, platform),
        (AT_NULL, 0),
    ]);
    if inp.valgrind_auxv {
        v.retain(|&(k, _)| k != AT_HWCAP2);
        return as_valgrind_copies(&v, host_auxv_all());
    }
    v
}

/// Valgrind's auxv: a copy of the kernel's `host`, entry for entry, with its values where
/// `ours` has the type and every other entry (the vDSO's, `AT_MINSIGSTKSZ`, `AT_HWCAP2`,
/// types it does not know such as `AT_RSEQ_*`) made `AT_IGNORE`. ld.so walks the entries
/// (`_dl_parse_auxv`), so their number is start-up work. Types of `ours` the kernel did not
/// give come last, before `AT_NULL`.
fn as_valgrind_copies(ours: &[(u64, u64)], host: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let value = |t: u64| ours.iter().find(|e| e.0 == t).copied();
    let mut out: Vec<(u64, u64)> = host
        .iter()
        .map(|&(t, hv)| value(t).unwrap_or((AT_IGNORE, hv)))
        .collect();
    for &e in ours {
        if e.0 != AT_NULL && !host.iter().any(|h| h.0 == e.0) {
            out.push(e);
        }
    }
    out.push((AT_NULL, 0));
    out
}

/// Fills `buf` from getrandom(2).
fn fill_random(buf: &mut [u8]) -> Result<(), LoadError> {
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: the pointer and length describe the unfilled tail of `buf`, which we borrow
        // mutably.
        let n = unsafe { libc::getrandom(buf[got..].as_mut_ptr().cast(), buf.len() - got, 0) };
        if n < 0 {
            let errno = last_errno();
            if errno == libc::EINTR {
                continue;
            }
            return Err(LoadError::Random { errno });
        }
        got += n as usize;
    }
    Ok(())
}

/// `[start, end)` of this process's `[vdso]` mapping, from /proc/self/maps.
pub fn vdso_range() -> Option<(u64, u64)> {
    let maps = std::fs::read_to_string("/proc/thread-self/maps").ok()?;
    let line = maps.lines().find(|l| l.trim_end().ends_with("[vdso]"))?;
    let range = line.split_whitespace().next()?;
    let (s, e) = range.split_once('-')?;
    Some((
        u64::from_str_radix(s, 16).ok()?,
        u64::from_str_radix(e, 16).ok()?,
    ))
}
