//! System calls of the guest: a table says which ones pass straight to the kernel and which
//! rgrind emulates, and why.
//!
//! Register convention (x86-64 Linux): number in rax, arguments in rdi, rsi, rdx, r10, r8, r9;
//! the result goes to rax, and like the kernel we set rcx to the return address and r11 to the
//! flags.
//!
//! # Invariants
//! * A guest system call never maps over, unmaps or re-protects memory that is not the guest's
//!   (see `crate::aspace`).
//! * Translations of guest code that is unmapped or loses PROT_EXEC are discarded before the
//!   guest runs again.
pub mod raw;

use crate::aspace::{host_mapped, page_up, PAGE};
use crate::context::{reg, ThreadContext};
use crate::core_state::{core, die_by_signal, finish};
use crate::tool::FiniReason;
use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;

const ENOSYS: i64 = 38;
const ENOMEM: i64 = 12;
const EINVAL: i64 = 22;
const EFAULT: i64 = 14;

/// Why a system call is emulated rather than passed to the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Disposition {
    /// The kernel does it; rgrind does not need to know.
    Pass,
    /// brk: the guest's heap is a region rgrind reserved after the image.
    Brk,
    /// mmap/munmap/mprotect/mremap: guard rgrind's memory, track guest mappings, invalidate code.
    Memory,
    /// arch_prctl: the guest's FS base lives in the thread context.
    ArchPrctl,
    /// exit/exit_group: write the profile first.
    Exit,
    /// readlink/open of /proc/self/{exe,auxv,cmdline} show the guest.
    ProcSelf,
    /// fork/vfork/clone: vfork runs as fork; threads get their own context.
    Clone,
    /// execve: write the profile, and follow the child with --trace-children=yes.
    Exec,
    /// rseq, clone3: answered ENOSYS so glibc falls back, as under Valgrind.
    NoSys,
    /// rt_sigaction, sigaltstack: guest dispositions are virtualised (see `crate::signal`).
    Signal,
    /// rt_sigreturn: reload the guest context from its signal frame.
    SigReturn,
    /// rt_sigprocmask: rgrind's private signal stays unblocked.
    Mask,
    /// personality: the persona bit of rgrind's fixed layout stays hidden (`crate::layout`).
    Personality,
}

fn disposition(nr: u64) -> Disposition {
    use Disposition::*;
    match nr as i64 {
        libc::SYS_brk => Brk,
        libc::SYS_mmap | libc::SYS_munmap | libc::SYS_mprotect | libc::SYS_mremap => Memory,
        libc::SYS_shmat | libc::SYS_shmdt => Memory,
        libc::SYS_arch_prctl => ArchPrctl,
        libc::SYS_exit | libc::SYS_exit_group => Exit,
        libc::SYS_readlink | libc::SYS_readlinkat | libc::SYS_open | libc::SYS_openat => ProcSelf,
        libc::SYS_fork | libc::SYS_vfork | libc::SYS_clone => Clone,
        libc::SYS_execve | libc::SYS_execveat => Exec,
        libc::SYS_rseq | libc::SYS_clone3 => NoSys,
        libc::SYS_rt_sigaction | libc::SYS_sigaltstack => Signal,
        libc::SYS_rt_sigreturn => SigReturn,
        libc::SYS_rt_sigprocmask => Mask,
        libc::SYS_personality => Personality,
        _ => Pass,
    }
}

/// Whether system call `nr` returns at once whatever other threads do (identity and time
/// queries, limits, `lseek`): it need not give up the run lock.
fn never_blocks(nr: u64) -> bool {
    matches!(
        nr as i64,
        libc::SYS_getpid
            | libc::SYS_getppid
            | libc::SYS_gettid
            | libc::SYS_getuid
            | libc::SYS_geteuid
            | libc::SYS_getgid
            | libc::SYS_getegid
            | libc::SYS_getresuid
            | libc::SYS_getresgid
            | libc::SYS_getpgrp
            | libc::SYS_getpgid
            | libc::SYS_getsid
            | libc::SYS_getgroups
            | libc::SYS_uname
            | libc::SYS_getrusage
            | libc::SYS_getrlimit
            | libc::SYS_times
            | libc::SYS_sysinfo
            | libc::SYS_umask
            | libc::SYS_getcpu
            | libc::SYS_clock_gettime
            | libc::SYS_clock_getres
            | libc::SYS_gettimeofday
            | libc::SYS_time
            | libc::SYS_sched_getaffinity
            | libc::SYS_sched_getparam
            | libc::SYS_sched_getscheduler
            | libc::SYS_set_robust_list
            | libc::SYS_set_tid_address
            | libc::SYS_lseek
    )
}

/// Handles the guest system call described by `ctx` (rip already past the instruction).
/// Returns false when the calling guest thread has ended.
pub fn handle(ctx: &mut ThreadContext) -> bool {
    let nr = ctx.gpr[reg::RAX];
    let args = [
        ctx.gpr[reg::RDI],
        ctx.gpr[reg::RSI],
        ctx.gpr[reg::RDX],
        ctx.gpr[reg::R10],
        ctx.gpr[reg::R8],
        ctx.gpr[reg::R9],
    ];
    let ret = match disposition(nr) {
        Disposition::Pass => {
            let target = match nr as i64 {
                libc::SYS_tgkill => Some((args[1], args[2])),
                libc::SYS_tkill => Some((args[0], args[1])),
                _ => None,
            };
            if let Some((tid, sig)) = target {
                crate::signal::snapshot_for_target(tid, sig, true);
            }
            // May block: let other guest threads run meanwhile. A call that cannot block
            // keeps the lock, as Valgrind keeps its own for calls without `SfMayBlock`: the
            // lock is FIFO, so giving it up sends the thread behind every waiting one.
            let r = if never_blocks(nr) {
                pass(nr, args)
            } else {
                crate::runlock::release();
                let r = pass(nr, args);
                crate::runlock::acquire();
                r
            };
            if let (Some((tid, sig)), true) = (target, r < 0) {
                // Not sent: the snapshot must not apply to a later signal.
                crate::signal::snapshot_for_target(tid, sig, false);
            }
            r
        }
        Disposition::Mask => crate::signal::sigprocmask(ctx, args[0], args[1], args[2], args[3]),
        Disposition::Brk => brk(args[0]),
        Disposition::Memory => memory(nr, args),
        Disposition::ArchPrctl => arch_prctl(ctx, args),
        Disposition::Exit => {
            exit(ctx, nr, args);
            return false;
        }
        Disposition::ProcSelf => proc_self(nr, args),
        Disposition::Clone => clone(ctx, nr, args),
        Disposition::Exec => exec(ctx, nr, args),
        Disposition::Personality => crate::layout::guest_personality(args[0]),
        Disposition::NoSys => -ENOSYS,
        Disposition::Signal => match nr as i64 {
            libc::SYS_rt_sigaction => crate::signal::sigaction(args[0], args[1], args[2], args[3]),
            _ => crate::signal::sigaltstack(ctx, args[0], args[1]),
        },
        Disposition::SigReturn => {
            crate::signal::sigreturn(ctx);
            return true;
        }
    };
    if core().process.trace_syscalls {
        eprintln!(
            "--rgrind-- syscall {nr}({:#x}, {:#x}, {:#x}, ...) = {ret}",
            args[0], args[1], args[2]
        );
    }
    ctx.gpr[reg::RAX] = ret as u64;
    ctx.gpr[reg::RCX] = ctx.rip;
    ctx.gpr[reg::R11] = ctx.rflags;
    true
}

fn pass(nr: u64, args: [u64; 6]) -> i64 {
    // SAFETY: calls in the Pass class cannot change rgrind's memory map or thread state; their
    // pointer arguments refer to guest memory the kernel validates.
    unsafe { raw::syscall6(nr, args) }
}

fn brk(want: u64) -> i64 {
    let mut c = core();
    let p = &mut c.process;
    if want < p.brk_start || want > p.brk_limit {
        return p.brk_cur as i64;
    }
    let need = page_up(want);
    if need > p.brk_mapped {
        // SAFETY: [brk_mapped, need) lies inside the brk reservation made by the loader.
        let r = unsafe {
            libc::mprotect(
                p.brk_mapped as *mut libc::c_void,
                (need - p.brk_mapped) as usize,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        if r != 0 {
            return p.brk_cur as i64;
        }
        p.mappings.insert(p.brk_mapped, need);
        p.writable.insert(p.brk_mapped, need);
        p.brk_mapped = need;
    } else if need < p.brk_mapped {
        // Shrinking gives the pages back and makes them inaccessible again, as natively.
        crate::guest_mem::forget_all();
        // SAFETY: as above, inside the reservation.
        unsafe {
            libc::mmap(
                need as *mut libc::c_void,
                (p.brk_mapped - need) as usize,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        // Another thread may have remembered one of the pages meanwhile (`guest_mem`).
        crate::guest_mem::forget_all();
        p.mappings.remove(need, p.brk_mapped);
        p.writable.remove(need, p.brk_mapped);
        p.brk_mapped = need;
    }
    p.brk_cur = want;
    want as i64
}

/// Whether the guest may change `[start, end)`: every page is the guest's or unmapped.
fn guest_may_touch(c: &crate::core_state::Core, start: u64, end: u64) -> bool {
    c.process
        .mappings
        .gaps(start, end)
        .into_iter()
        .all(|(s, e)| !host_mapped(s, e))
}

fn memory(nr: u64, a: [u64; 6]) -> i64 {
    // Pages `read_guest` remembers as readable may not stay so.
    crate::guest_mem::forget_all();
    let r = memory_change(nr, a);
    crate::guest_mem::forget_all();
    r
}

fn memory_change(nr: u64, a: [u64; 6]) -> i64 {
    let mut c = core();
    match nr as i64 {
        libc::SYS_shmat => {
            // shmat(shmid, addr, flags): a System V segment mapped where the kernel (or the
            // guest, with SHM_REMAP) says; record it like an mmap.
            let r = pass(nr, a);
            if r >= 0 {
                // SAFETY: shmid_ds is plain data the kernel fills.
                let mut ds: libc::shmid_ds = unsafe { core::mem::zeroed() };
                // SAFETY: IPC_STAT into our own buffer.
                let ok = unsafe { libc::shmctl(a[0] as i32, libc::IPC_STAT, &mut ds) } == 0;
                let size = if ok {
                    page_up(ds.shm_segsz as u64)
                } else {
                    PAGE
                };
                let start = r as u64;
                c.process.mappings.insert(start, start + size);
                c.process
                    .set_writable(start, start + size, a[2] as i32 & libc::SHM_RDONLY == 0);
                c.process.shm_segments.insert(start, size);
                crate::thread::forget_translations(&c.cache.invalidate(start, start + size));
            }
            r
        }
        libc::SYS_shmdt => {
            let r = pass(nr, a);
            if r == 0 {
                if let Some(size) = c.process.shm_segments.remove(&a[0]) {
                    c.process.mappings.remove(a[0], a[0] + size);
                    c.process.set_writable(a[0], a[0] + size, false);
                    crate::thread::forget_translations(&c.cache.invalidate(a[0], a[0] + size));
                }
            }
            r
        }
        libc::SYS_mmap => {
            let (addr, len, flags) = (a[0], a[1], a[3] as i32);
            let fixed = flags & (libc::MAP_FIXED | libc::MAP_FIXED_NOREPLACE) != 0;
            if fixed
                && flags & libc::MAP_FIXED != 0
                && !guest_may_touch(&c, addr, addr.saturating_add(page_up(len)))
            {
                return -ENOMEM;
            }
            let r = pass(nr, a);
            if r >= 0 {
                let start = r as u64;
                let end = start + page_up(len);
                c.process.mappings.insert(start, end);
                c.process
                    .set_writable(start, end, a[2] as i32 & libc::PROT_WRITE != 0);
                if fixed {
                    crate::thread::forget_translations(&c.cache.invalidate(start, end));
                }
            }
            r
        }
        libc::SYS_munmap | libc::SYS_mprotect => {
            let (addr, len) = (a[0], page_up(a[1]));
            if addr % PAGE != 0 {
                return -EINVAL;
            }
            if !c
                .process
                .mappings
                .gaps(addr, addr.saturating_add(len))
                .is_empty()
            {
                // Not (all) the guest's: refuse if any of it is rgrind's.
                if !guest_may_touch(&c, addr, addr.saturating_add(len)) {
                    return -EINVAL;
                }
            }
            let r = pass(nr, a);
            if r == 0 {
                if nr as i64 == libc::SYS_munmap {
                    c.process.mappings.remove(addr, addr + len);
                    c.process.set_writable(addr, addr + len, false);
                } else {
                    c.process
                        .set_writable(addr, addr + len, a[2] as i32 & libc::PROT_WRITE != 0);
                }
                // Unmapped, no longer executable, or newly writable: translations made from
                // this range are stale or would miss the checks writable code gets.
                crate::thread::forget_translations(&c.cache.invalidate(addr, addr + len));
            }
            r
        }
        _ => {
            // mremap(old, old_len, new_len, flags, new_addr)
            let (old, old_len, new_len, flags, new_addr) =
                (a[0], page_up(a[1]), page_up(a[2]), a[3] as i32, a[4]);
            if !guest_may_touch(&c, old, old + old_len) {
                return -EINVAL;
            }
            if flags & libc::MREMAP_FIXED != 0 && !guest_may_touch(&c, new_addr, new_addr + new_len)
            {
                return -ENOMEM;
            }
            let r = pass(nr, a);
            if r >= 0 {
                let was_writable = c.process.any_writable(old, old + old_len);
                c.process.mappings.remove(old, old + old_len);
                c.process.set_writable(old, old + old_len, false);
                c.process.mappings.insert(r as u64, r as u64 + new_len);
                c.process
                    .set_writable(r as u64, r as u64 + new_len, was_writable);
                crate::thread::forget_translations(&c.cache.invalidate(old, old + old_len));
            }
            r
        }
    }
}

const ARCH_SET_GS: u64 = 0x1001;
const ARCH_SET_FS: u64 = 0x1002;
const ARCH_GET_FS: u64 = 0x1003;
const ARCH_GET_GS: u64 = 0x1004;

fn arch_prctl(ctx: &mut ThreadContext, a: [u64; 6]) -> i64 {
    match a[0] {
        ARCH_SET_FS => {
            ctx.guest_fs = a[1];
            0
        }
        ARCH_GET_FS => write_guest_u64(a[1], ctx.guest_fs),
        ARCH_GET_GS => write_guest_u64(a[1], 0),
        ARCH_SET_GS => -EINVAL,
        _ => pass(libc::SYS_arch_prctl as u64, a),
    }
}

/// Thread ids are 32-bit words in guest memory; written alone, as the kernel does (not
/// read-modify-write of a wider word another thread may be changing).
pub(crate) fn write_guest_u32(addr: u64, v: u32) -> i64 {
    if crate::translate::write_guest(addr, &v.to_ne_bytes()) {
        0
    } else {
        -EFAULT
    }
}

pub(crate) fn write_guest_u64(addr: u64, v: u64) -> i64 {
    if crate::translate::write_guest(addr, &v.to_ne_bytes()) {
        0
    } else {
        -EFAULT
    }
}

/// exit/exit_group; returns only when just this thread ended.
fn exit(ctx: &mut ThreadContext, nr: u64, a: [u64; 6]) {
    let status = a[0] as i32;
    if nr as i64 == libc::SYS_exit && crate::thread::leave_unless_last() {
        core().tool.thread_exit(ctx as *const ThreadContext as u64);
        crate::thread::exit_current(ctx, status);
        return;
    }
    // exit_group, or exit of the last thread: the process ends with this status.
    finish(FiniReason::Exit(status & 0xff));
    // SAFETY: exit_group never returns.
    unsafe { raw::syscall6(libc::SYS_exit_group as u64, [status as u64, 0, 0, 0, 0, 0]) };
    die_by_signal(libc::SIGKILL)
}

/// Reads a NUL-terminated guest string (at most 4 KiB).
fn guest_cstr(addr: u64) -> Option<CString> {
    if addr == 0 {
        return None;
    }
    let mut out = Vec::new();
    let mut buf = [0u8; 256];
    while out.len() < 4096 {
        let n = crate::translate::read_guest(addr + out.len() as u64, &mut buf);
        if n == 0 {
            return None;
        }
        if let Some(z) = buf[..n].iter().position(|&b| b == 0) {
            out.extend_from_slice(&buf[..z]);
            return CString::new(out).ok();
        }
        out.extend_from_slice(&buf[..n]);
    }
    None
}

/// Which /proc/self file a path names, if any.
#[derive(PartialEq)]
enum ProcFile {
    Exe,
    Auxv,
    Cmdline,
    Personality,
}

fn proc_self_file(path: &CStr) -> Option<ProcFile> {
    let p = path.to_bytes();
    let pid = std::process::id().to_string();
    let rest = p
        .strip_prefix(b"/proc/self/")
        .or_else(|| p.strip_prefix(format!("/proc/{pid}/").as_bytes()))?;
    match rest {
        b"exe" => Some(ProcFile::Exe),
        b"auxv" => Some(ProcFile::Auxv),
        b"cmdline" => Some(ProcFile::Cmdline),
        b"personality" => Some(ProcFile::Personality),
        _ => None,
    }
}

fn proc_self(nr: u64, a: [u64; 6]) -> i64 {
    let (path_arg, is_at) = match nr as i64 {
        libc::SYS_readlink | libc::SYS_open => (a[0], false),
        _ => (a[1], true),
    };
    let Some(path) = guest_cstr(path_arg) else {
        return pass(nr, a);
    };
    let Some(file) = proc_self_file(&path) else {
        return pass(nr, a);
    };
    let c = core();
    match nr as i64 {
        libc::SYS_readlink | libc::SYS_readlinkat => {
            if file != ProcFile::Exe {
                return pass(nr, a);
            }
            let target = c.process.exe_path.as_os_str().as_bytes().to_vec();
            let (buf, size) = if is_at { (a[2], a[3]) } else { (a[1], a[2]) };
            let n = target.len().min(size as usize);
            if crate::translate::write_guest(buf, &target[..n]) {
                n as i64
            } else {
                -EFAULT
            }
        }
        _ => {
            let flags = if is_at { a[2] } else { a[1] };
            let mode = if is_at { a[3] } else { a[2] };
            match file {
                ProcFile::Exe => {
                    let p =
                        CString::new(c.process.exe_path.as_os_str().as_bytes()).unwrap_or_default();
                    pass(
                        libc::SYS_openat as u64,
                        [libc::AT_FDCWD as u64, p.as_ptr() as u64, flags, mode, 0, 0],
                    )
                }
                ProcFile::Auxv => memfd_with(&c.process.auxv),
                ProcFile::Cmdline => memfd_with(&c.process.cmdline),
                ProcFile::Personality => {
                    let p = crate::layout::guest_personality(0xffff_ffff);
                    memfd_with(format!("{:08x}\n", p.max(0)).as_bytes())
                }
            }
        }
    }
}

/// A read-only-in-spirit file descriptor holding `bytes`, positioned at 0.
fn memfd_with(bytes: &[u8]) -> i64 {
    let name = c"rgrind-proc";
    // SAFETY: memfd_create/write/lseek on a fresh fd rgrind owns until it hands it to the guest.
    unsafe {
        let fd = libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC);
        if fd < 0 {
            return -ENOMEM;
        }
        libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        libc::lseek(fd, 0, libc::SEEK_SET);
        fd as i64
    }
}

pub(crate) const CLONE_VM: u64 = 0x100;
pub(crate) const CLONE_VFORK: u64 = 0x4000;
pub(crate) const CLONE_SETTLS: u64 = 0x80000;
pub(crate) const CLONE_PARENT_SETTID: u64 = 0x100000;
pub(crate) const CLONE_CHILD_CLEARTID: u64 = 0x200000;
pub(crate) const CLONE_CHILD_SETTID: u64 = 0x1000000;

fn clone(ctx: &mut ThreadContext, nr: u64, a: [u64; 6]) -> i64 {
    // clone(flags, newsp, parent_tid, child_tid, tls); fork is clone(SIGCHLD), vfork
    // clone(CLONE_VM | CLONE_VFORK | SIGCHLD).
    let (flags, newsp, ptid, ctid, tls) = match nr as i64 {
        libc::SYS_clone => (a[0], a[1], a[2], a[3], a[4]),
        libc::SYS_vfork => (CLONE_VM | CLONE_VFORK | libc::SIGCHLD as u64, 0, 0, 0, 0),
        _ => (libc::SIGCHLD as u64, 0, 0, 0, 0),
    };
    if flags & CLONE_VM != 0 && flags & CLONE_VFORK == 0 {
        return crate::thread::spawn(ctx, flags, newsp, ptid, ctid, tls);
    }
    // A new process: vfork's shared memory becomes a plain fork (as under Valgrind), and the
    // child keeps rgrind's host stack (a copy), switching only the guest's stack and TLS.
    // vfork's suspended parent is kept: the parent waits until the child execs or exits, seen
    // as the end of a close-on-exec pipe only the child holds.
    let vfork = flags & CLONE_VFORK != 0;
    let wait_pipe = if vfork { vfork_pipe() } else { None };
    let host_flags = flags & !(CLONE_VM | CLONE_VFORK | CLONE_SETTLS);
    let r = fork_process(ctx, host_flags, ptid, ctid);
    if let Some((rd, wr)) = wait_pipe {
        // SAFETY: closing and reading descriptors this process created above.
        unsafe {
            if r == 0 {
                libc::close(rd);
            } else {
                libc::close(wr);
                if r > 0 {
                    crate::runlock::release();
                    let mut b = 0u8;
                    while libc::read(rd, (&mut b as *mut u8).cast(), 1) < 0
                        && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
                    {
                    }
                    crate::runlock::acquire();
                }
                libc::close(rd);
            }
        }
    }
    if r == 0 {
        if newsp != 0 {
            ctx.gpr[reg::RSP] = newsp;
        }
        if flags & CLONE_SETTLS != 0 {
            ctx.guest_fs = tls;
        }
    }
    r
}

/// Forks the process for a guest `clone` without CLONE_VM (`flags`: what remains for the
/// host). Other guest threads may hold rgrind's locks or be inside its allocator: the child
/// would inherit them held by threads it does not have. So the fork happens with the core,
/// the dispositions and the thread list held (by this thread: released in both processes),
/// through libc's `fork` (which makes its own allocator consistent in the child) when the
/// guest asked for nothing else than the thread-id words, which are then written as the
/// kernel would; and the child is made the only thread, holding the run lock.
fn fork_process(ctx: &ThreadContext, flags: u64, ptid: u64, ctid: u64) -> i64 {
    const TID_FLAGS: u64 = CLONE_PARENT_SETTID | CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID;
    // In the order the other users take them: core, dispositions, thread list.
    let core_guard = core();
    let actions = crate::signal::actions_guard();
    let mut list = crate::thread::list_guard();
    let r = if flags & !TID_FLAGS == libc::SIGCHLD as u64 {
        // SAFETY: fork in a process whose other threads are all parked outside the locks
        // taken above; the child continues on its copy of this stack.
        let r = unsafe { libc::fork() } as i64;
        if r < 0 {
            -(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EAGAIN) as i64)
        } else {
            if r == 0 {
                // SAFETY: gettid cannot fail.
                let tid = unsafe { libc::gettid() } as u64;
                if flags & CLONE_CHILD_SETTID != 0 {
                    let _ = write_guest_u32(ctid, tid as u32);
                }
                if flags & CLONE_CHILD_CLEARTID != 0 {
                    // SAFETY: records a guest address the kernel clears at this thread's exit.
                    unsafe {
                        raw::syscall6(libc::SYS_set_tid_address as u64, [ctid, 0, 0, 0, 0, 0])
                    };
                }
            } else if flags & CLONE_PARENT_SETTID != 0 {
                let _ = write_guest_u32(ptid, r as u32);
            }
            r
        }
    } else {
        // SAFETY: without CLONE_VM the child is a copy of this process; with newsp 0 it
        // continues on its copy of this very stack, so returning through Rust frames is
        // sound in both.
        unsafe { raw::syscall6(libc::SYS_clone as u64, [flags, 0, ptid, ctid, 0, 0]) }
    };
    if r == 0 {
        crate::thread::after_fork_child(&mut list, ctx);
        crate::runlock::after_fork_child();
    }
    drop(list);
    drop(actions);
    drop(core_guard);
    r
}

/// A close-on-exec pipe above the guest's usual descriptors, for vfork's wait.
fn vfork_pipe() -> Option<(i32, i32)> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2/fcntl/close on descriptors this process owns.
    unsafe {
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return None;
        }
        let high = |fd: i32| {
            let h = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 1000);
            libc::close(fd);
            h
        };
        let (rd, wr) = (high(fds[0]), high(fds[1]));
        (rd >= 0 && wr >= 0).then_some((rd, wr))
    }
}

fn exec(ctx: &mut ThreadContext, nr: u64, a: [u64; 6]) -> i64 {
    let (path_arg, argv, envp) = match nr as i64 {
        libc::SYS_execve => (a[0], a[1], a[2]),
        _ => (a[1], a[2], a[3]),
    };
    let Some(mut path) = guest_cstr(path_arg) else {
        return -EFAULT;
    };
    let (tracing, rgrind_exe, rgrind_args, exe_path, preload) = {
        let c = core();
        (
            c.process.trace_children.clone(),
            c.process.rgrind_exe.clone(),
            c.process.rgrind_args.clone(),
            c.process.exe_path.clone(),
            c.process.preload.clone(),
        )
    };
    let guest_args = read_guest_ptr_array(argv);
    let trace = {
        let args: Vec<&[u8]> = guest_args.iter().map(|a| a.as_bytes()).collect();
        tracing.should_trace(path.as_bytes(), &args)
    };
    if proc_self_file(&path) == Some(ProcFile::Exe) {
        path = CString::new(exe_path.as_os_str().as_bytes()).unwrap_or_default();
    }
    // The tool writes nothing: as under Valgrind, the counts of the image an exec replaces
    // are lost (Callgrind's file, created at start, stays empty; Cachegrind writes none),
    // and after an exec that fails the process goes on and writes them at its end.
    if nr as i64 == libc::SYS_execveat && a[4] != 0 {
        // execveat with flags (AT_EMPTY_PATH...) is passed as is.
        return pass_exec(nr, a);
    }
    if !trace {
        // The native program gets neither rgrind's preload object nor a mask of rgrind's.
        let env_without_preload = preload.and_then(|p| env_without_preload(envp, &p));
        let envp = env_without_preload
            .as_ref()
            .map_or(envp, |(_, ptrs)| ptrs.as_ptr() as u64);
        let host_mask = crate::signal::exact_mask_for_exec(ctx);
        let r = pass_exec(
            libc::SYS_execve as u64,
            [path.as_ptr() as u64, argv, envp, 0, 0, 0],
        );
        crate::signal::restore_mask(host_mask);
        return r;
    }
    // Run rgrind again on the new program, with the same options.
    let mut new_argv: Vec<CString> = Vec::new();
    new_argv.push(CString::new(rgrind_exe.as_os_str().as_bytes()).unwrap_or_default());
    for o in &rgrind_args {
        new_argv.push(CString::new(o.as_bytes()).unwrap_or_default());
    }
    new_argv.push(path.clone());
    new_argv.extend(guest_args.into_iter().skip(1));
    let mut ptrs: Vec<*const libc::c_char> = new_argv.iter().map(|s| s.as_ptr()).collect();
    ptrs.push(core::ptr::null());
    let exe = CString::new(rgrind_exe.as_os_str().as_bytes()).unwrap_or_default();
    // Check the target exists and is executable first, so a failing exec fails like natively.
    // SAFETY: access() on a valid C string.
    if unsafe { libc::access(path.as_ptr(), libc::X_OK) } != 0 {
        return -i64::from(std::io::Error::last_os_error().raw_os_error().unwrap_or(2));
    }
    // The new rgrind fixes the layout again (`crate::layout::fix`).
    pass_exec(
        libc::SYS_execve as u64,
        [exe.as_ptr() as u64, ptrs.as_ptr() as u64, envp, 0, 0, 0],
    )
}

/// Passes an `execve`/`execveat` to the kernel without rgrind's layout persona (put back
/// if the call returns: the guest goes on here).
fn pass_exec(nr: u64, args: [u64; 6]) -> i64 {
    let persona = crate::layout::before_exec();
    let r = pass(nr, args);
    crate::layout::after_failed_exec(persona);
    r
}

/// The guest environment at `envp` with `preload` taken out of `LD_PRELOAD` (the variable is
/// dropped when nothing else is left in it); `None` when it is not there. Returns the strings
/// and the null-terminated pointer array into them.
fn env_without_preload(
    envp: u64,
    preload: &std::path::Path,
) -> Option<(Vec<CString>, Vec<*const libc::c_char>)> {
    let mut env = read_guest_ptr_array(envp);
    let i = env
        .iter()
        .position(|v| v.as_bytes().starts_with(b"LD_PRELOAD="))?;
    let value = &env[i].as_bytes()[b"LD_PRELOAD=".len()..];
    let p = preload.as_os_str().as_bytes();
    let entries: Vec<&[u8]> = value
        .split(|&b| b == b':' || b == b' ')
        .filter(|x| !x.is_empty())
        .collect();
    if !entries.contains(&p) {
        return None;
    }
    let rest: Vec<&[u8]> = entries.into_iter().filter(|x| *x != p).collect();
    if rest.is_empty() {
        env.remove(i);
    } else {
        env[i] = CString::new([b"LD_PRELOAD=".as_slice(), &rest.join(&b':')].concat()).ok()?;
    }
    let mut ptrs: Vec<*const libc::c_char> = env.iter().map(|s| s.as_ptr()).collect();
    ptrs.push(core::ptr::null());
    Some((env, ptrs))
}

fn read_guest_ptr_array(addr: u64) -> Vec<CString> {
    let mut out = Vec::new();
    if addr == 0 {
        return out;
    }
    for i in 0..4096u64 {
        let mut b = [0u8; 8];
        if crate::translate::read_guest(addr + i * 8, &mut b) != 8 {
            break;
        }
        let p = u64::from_ne_bytes(b);
        if p == 0 {
            break;
        }
        match guest_cstr(p) {
            Some(s) => out.push(s),
            None => break,
        }
    }
    out
}
