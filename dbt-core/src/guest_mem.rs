//! Reading and writing guest memory without faulting (`read`, `write`); reads fast.
//!
//! The translator reads the bytes of every block it translates, and the signal and system-call
//! code reads guest structures, at addresses the guest chose: they may be unmapped or
//! unreadable. `process_vm_readv` on our own thread reports such pages as an error instead of
//! faulting, but it is a system call that pins the pages (~6% of `python3 -c pass` under
//! callgrind, ~10% under cachegrind, for 38,000 blocks). So each page that call has read
//! from is remembered (`KNOWN`, direct-mapped by page number), and later reads of a
//! remembered page are a plain copy. Every change to the guest's address space (mmap, munmap,
//! mprotect, mremap, brk, shmat/shmdt: `syscall::memory`) forgets all pages, before and after
//! the system call.
//!
//! A copy from a remembered page can still fault: another thread may unmap the page between
//! the lookup and the copy (threads run in parallel under `--tool=none`), or change its
//! protection key with `wrpkru`. The copy is `rgrind_guest_copy`'s one `rep movsb`; the host
//! signal handler sends a fault there to `rgrind_guest_copy_fault` (`fault_fixup`), the copy
//! reports failure, and the read falls back to `process_vm_readv` for that page. (While the
//! guest blocks SIGSEGV or SIGBUS the kernel would kill the process for such a fault instead;
//! only remembered pages are copied directly, so that too needs one of these races.)
//!
//! # Invariants
//! * A page is in `KNOWN` only after `process_vm_readv` read from it and no address-space
//!   change started since (`forget_all` runs before and after each one).
//! * `rgrind_guest_copy` touches no memory but its source and destination.
use core::sync::atomic::{AtomicU64, Ordering};

/// Page size of the guest's address space.
const PAGE: u64 = 4096;
/// Entries of the remembered-page table (a power of two).
const KNOWN_SLOTS: usize = 1024;

/// Remembered readable pages: `page number + 1` (0: empty) in slot `page % KNOWN_SLOTS`.
static KNOWN: [AtomicU64; KNOWN_SLOTS] = [const { AtomicU64::new(0) }; KNOWN_SLOTS];

core::arch::global_asm!(
    // rgrind_guest_copy(dst: rdi, src: rsi, n: rdx) -> rax: bytes not copied (0: all).
    ".globl rgrind_guest_copy",
    "rgrind_guest_copy:",
    "mov rcx, rdx",
    ".globl rgrind_guest_copy_insn",
    "rgrind_guest_copy_insn:",
    "rep movsb",
    ".globl rgrind_guest_copy_fault",
    "rgrind_guest_copy_fault:",
    "mov rax, rcx",
    "ret",
);

extern "C" {
    fn rgrind_guest_copy(dst: *mut u8, src: *const u8, n: usize) -> usize;
    fn rgrind_guest_copy_insn();
    fn rgrind_guest_copy_fault();
}

/// Where the host signal handler resumes a fault at `pc`: the copy's way out when `pc` is
/// its `rep movsb` (rcx then holds the bytes not copied, which the copy returns).
pub(crate) fn fault_fixup(pc: u64) -> Option<u64> {
    (pc == rgrind_guest_copy_insn as *const () as u64)
        .then_some(rgrind_guest_copy_fault as *const () as u64)
}

/// Forgets every remembered page (the guest's address space is about to change or did).
pub(crate) fn forget_all() {
    for slot in &KNOWN {
        slot.store(0, Ordering::Relaxed);
    }
}

fn slot_of(page: u64) -> &'static AtomicU64 {
    &KNOWN[page as usize % KNOWN_SLOTS]
}

/// Copies guest memory at `addr` into `buf` without faulting; returns the bytes read (stops at
/// the first unreadable page).
pub fn read(addr: u64, buf: &mut [u8]) -> usize {
    let mut done = 0usize;
    while done < buf.len() {
        let a = addr.wrapping_add(done as u64);
        let page = a / PAGE;
        let n = ((PAGE - (a & (PAGE - 1))) as usize).min(buf.len() - done);
        let dst = &mut buf[done..done + n];
        if slot_of(page).load(Ordering::Relaxed) == page + 1 {
            // SAFETY: `dst` is a valid buffer of n bytes; the source lies in one page that
            // was readable when remembered, and a fault in the copy returns through
            // `fault_fixup` (nothing is written but `dst`).
            let left = unsafe { rgrind_guest_copy(dst.as_mut_ptr(), a as *const u8, n) };
            if left == 0 {
                done += n;
                continue;
            }
        }
        let got = read_via_kernel(a, dst);
        done += got;
        if got < n {
            break;
        }
        // Mappings, protections and a file mapping's end are per page: the part read
        // proves the page.
        slot_of(page).store(page + 1, Ordering::Relaxed);
    }
    done
}

/// Writes `bytes` to guest memory at `addr` without faulting; false if any of it is not
/// writable guest memory. (Rare: system-call results and signal frames; always the kernel.)
pub fn write(addr: u64, bytes: &[u8]) -> bool {
    let local = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: process_vm_writev reports bad guest addresses as errors instead of faulting;
    // the thread id as in `read_via_kernel`.
    let r = unsafe { libc::process_vm_writev(libc::gettid(), &local, 1, &remote, 1, 0) };
    r == bytes.len() as isize
}

/// `process_vm_readv` of `buf.len()` bytes at `addr`, within one page: the bytes read.
fn read_via_kernel(addr: u64, buf: &mut [u8]) -> usize {
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: process_vm_readv on our own thread reads through the kernel, which reports an
    // unmapped remote page as an error instead of faulting; `local` is a valid buffer. The
    // thread id, not the process id: once the thread-group leader has exited, the kernel no
    // longer finds the memory through it.
    let r = unsafe { libc::process_vm_readv(libc::gettid(), &local, 1, &remote, 1, 0) };
    r.max(0) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_mapped_memory_and_stops_at_an_unmapped_page() {
        // SAFETY: a fresh anonymous mapping of two pages, the second unmapped again below.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                2 * PAGE as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        } as *mut u8;
        assert_ne!(p as *mut libc::c_void, libc::MAP_FAILED);
        // SAFETY: inside the mapping.
        unsafe {
            p.add(PAGE as usize - 2).write(7);
            p.add(PAGE as usize - 1).write(8);
        }
        let base = p as u64;
        let mut buf = [0u8; 2];
        // The first read goes through the kernel and remembers the page, the second copies.
        for _ in 0..2 {
            assert_eq!(read(base + PAGE - 2, &mut buf), 2);
            assert_eq!(buf, [7, 8]);
        }
        assert_eq!(
            slot_of(base / PAGE).load(Ordering::Relaxed),
            base / PAGE + 1
        );
        // SAFETY: unmaps the second page of our own mapping.
        unsafe { libc::munmap(p.add(PAGE as usize).cast(), PAGE as usize) };
        let mut long = [0u8; 4];
        assert_eq!(
            read(base + PAGE - 2, &mut long),
            2,
            "stops at the unmapped page"
        );
        assert_eq!(slot_of(base / PAGE + 1).load(Ordering::Relaxed), 0);
        // (A remembered page that faults needs the host signal handler: guest `truncexec`.)
        forget_all();
        assert_eq!(slot_of(base / PAGE).load(Ordering::Relaxed), 0);
        // SAFETY: unmaps the rest of our mapping.
        unsafe { libc::munmap(p.cast(), PAGE as usize) };
    }
}
