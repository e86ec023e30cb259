//! The LL part of `--cache-sim=yes` on a thread of its own.
//!
//! An L1 miss is counted where it happens (the guest's thread: the L1 tags are its to read
//! and update inline); its LL part — the lookup in a many-megabyte tag array that misses
//! the host's caches, the time of LL-bound programs — goes into a ring that one consumer
//! thread works through in order, counting each LL miss into the slot the entry names. The
//! LL sees exactly the sequence of accesses it would see synchronously (guest threads run
//! one at a time under the run lock and share one ring), so every count is the same; only
//! when an LL miss reaches its slot differs, and nothing reads those slots before
//! [`drain`]. The consumer keeps its counts in a table of its own ([`Tally`]) and adds them
//! to the slots whenever it has caught up: an LL-miss slot shares its host cache line with
//! the L1-miss slot the guest thread bumps, and writing it on every LL miss moved that line
//! between the two cores each time (stride's fill loop, an LL miss per L1 miss: 9% of its
//! run time).
//!
//! Generated code writes entries itself (`dbt_core::tool::LlQueue`): the producer record
//! holds the next entry's address and the end of the current segment, where
//! [`segment_end`] publishes the segment to the consumer and makes room for the next one.
//!
//! # Invariants
//! * Only the running guest thread writes entries and the producer record (run lock); only
//!   the consumer touches the LL while entries are published and not yet done, and after
//!   [`drain`] nothing is outstanding.
//! * Entry number `n` lives at `ring[n % ENTRIES]`; `LAP` is the number of the entry at
//!   `ring[0]` in the producer's current lap. A segment (`SEGMENT` entries, which divide
//!   `ENTRIES`) is written only when the consumer is done with the entries a lap before it;
//!   the consumer never reads past `PUBLISHED`.
//! * In a forked child the consumer thread does not exist (`CONSUMER_PID` is the parent's):
//!   the producer works through the ring itself there. A fork is preceded by a [`drain`],
//!   so the child's copy of the LL is never caught mid-update.
//! * An entry's LL-miss slot is written only by the thread that simulates the entry, and
//!   read only after [`drain`], which waits for `COUNTED` (`COUNTED <= CONSUMED`): the
//!   consumer's [`Tally`] is empty whenever `COUNTED` equals what was published.
//! * The producer side allocates nothing, takes no lock and touches no TLS: it runs in
//!   translated code's helpers.
use cachesim::Hierarchy;
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;

/// Ring entries (16 bytes each: 512 KiB).
const ENTRIES: u64 = 1 << 15;
/// Entries per publication.
const SEGMENT: u64 = 256;
/// Polls of an empty ring before the consumer sleeps (tens of microseconds): while a
/// program streams LL accesses the consumer stays awake between segments, and the producer
/// makes no wake-up call (2,000: chase 0.47-0.56 s, stride 0.34 s; 20,000: 0.45-0.48 s and
/// 0.31-0.32 s; python3 -c pass 0.07 s more CPU time on the consumer's core).
const IDLE_SPINS: u32 = 20_000;

/// What generated code reads and writes (`LlQueue::producer`): the next entry's address,
/// and the address after the current segment's last entry.
#[repr(C, align(64))]
pub struct Producer {
    next: u64,
    segment_end: u64,
}

/// One cache line per value that a different thread writes.
#[repr(align(64))]
struct Line<T>(T);

static mut PRODUCER: Producer = Producer {
    next: 0,
    segment_end: 0,
};
static RING: AtomicPtr<[u64; 2]> = AtomicPtr::new(core::ptr::null_mut());
/// What `push` needs to keep the producer's copy of the LL's MRU lines.
static MRU: OnceLock<MruCopy> = OnceLock::new();
static CONSUMER_PID: AtomicI32 = AtomicI32::new(0);
/// The number of the entry at `ring[0]` in the producer's lap (producer only).
static LAP: AtomicU64 = AtomicU64::new(0);
/// Entries the consumer may read.
static PUBLISHED: Line<AtomicU64> = Line(AtomicU64::new(0));
/// Entries the consumer has done (their LL parts simulated, their slots free to reuse).
static CONSUMED: Line<AtomicU64> = Line(AtomicU64::new(0));
/// Entries whose LL misses are in their slots (the consumer's [`Tally`] added in).
static COUNTED: Line<AtomicU64> = Line(AtomicU64::new(0));
/// The consumer sleeps (`1`) on `WAKE` (a futex word bumped by each wake-up).
static SLEEPING: Line<AtomicU32> = Line(AtomicU32::new(0));
static WAKE: Line<AtomicU32> = Line(AtomicU32::new(0));
/// Set by the consumer once its thread runs: its start-up maps memory (a signal stack, the C
/// library's thread arena), which must be done before the guest maps anything, or where
/// the guest's own mappings land would depend on timing (and with them its cache misses).
static CONSUMER_STARTED: AtomicBool = AtomicBool::new(false);

/// The producer's copy of each LL set's MRU line (`LastLevel::mru_tags_ptr`'s layout): the
/// line an LL access of the set touched last, as the LL's own way 0 is. A line found there
/// is an LL hit that changes nothing, which the producer counts without queueing.
struct MruCopy {
    /// One word per set (an address: the array is leaked).
    lines: usize,
    set_mask: u64,
    /// The LL's line size (log2).
    line_bits: u32,
    /// The smallest line size (accesses are clamped to it).
    min_line: u64,
}

fn producer() -> *mut Producer {
    core::ptr::addr_of_mut!(PRODUCER)
}

/// What generated code needs of a threaded LL: the producer record, and the producer's copy
/// of the LL's MRU lines (laid out as `LastLevel::mru_tags_ptr`'s) to look in first.
pub struct Started {
    pub producer: u64,
    pub mru: u64,
}

/// Sets up the LL parts of `hier`, the tool's `HIER` (once, before any guest code runs): on
/// a consumer thread if `threaded` and the thread could be made, else synchronously.
pub fn start(hier: *mut Hierarchy, threaded: bool) -> Option<Started> {
    if !threaded {
        return None;
    }
    // SAFETY: no guest code and no consumer run yet; `hier` is live.
    let (geometry, min_line) = unsafe { ((*hier).ll().geometry(), (*hier).min_line_size()) };
    // Copies the LL's start state (every set's MRU line 0).
    let lines: &'static mut [u64] =
        Box::leak(vec![0u64; geometry.sets() as usize].into_boxed_slice());
    let mru = MRU.get_or_init(|| MruCopy {
        lines: lines.as_mut_ptr() as usize,
        set_mask: u64::from(geometry.sets()) - 1,
        line_bits: geometry.line_size.trailing_zeros(),
        min_line,
    });
    let ring: &'static mut [[u64; 2]] =
        Box::leak(vec![[0u64; 2]; ENTRIES as usize].into_boxed_slice());
    let ring = ring.as_mut_ptr();
    // The consumer takes no signal: rgrind's handlers expect a guest thread's context, and a
    // process-directed signal must reach the guest's threads.
    // SAFETY: plain signal-mask calls on valid, local sigset_t values.
    let old = unsafe {
        let mut all: libc::sigset_t = core::mem::zeroed();
        let mut old: libc::sigset_t = core::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        old
    };
    let (ring_addr, hier_addr) = (ring as usize, hier as usize);
    let spawned = std::thread::Builder::new()
        .name("rgrind-ll".into())
        .spawn(move || consume(ring_addr as *mut [u64; 2], hier_addr as *mut Hierarchy));
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, core::ptr::null_mut()) };
    spawned.ok()?;
    while !CONSUMER_STARTED.load(Ordering::Acquire) {
        std::thread::yield_now();
    }
    // SAFETY: getpid has no preconditions.
    CONSUMER_PID.store(unsafe { libc::getpid() }, Ordering::Relaxed);
    // SAFETY: no guest code runs yet; the record is the producer's alone.
    unsafe {
        *producer() = Producer {
            next: ring as u64,
            segment_end: ring as u64 + SEGMENT * 16,
        }
    };
    RING.store(ring, Ordering::Release);
    Some(Started {
        producer: producer() as u64,
        mru: mru.lines as u64,
    })
}

/// The LL part of an access whose L1 part missed: simulated in order after every earlier
/// one, and on an LL miss `*ll_slot += 1`. What generated code does itself for a
/// single-line access.
///
/// # Safety
/// `ll_slot` is a live cost-array slot (never freed); called by the running guest thread.
#[inline]
pub unsafe fn push(addr: u64, size: u64, ll_slot: *mut u64) {
    let ring = RING.load(Ordering::Relaxed);
    if ring.is_null() {
        // SAFETY: without a consumer the LL is the calling (running) thread's.
        if unsafe { cachesim::raw::ll_part(super::HIER.load(Ordering::Relaxed), addr, size) } {
            // SAFETY: (caller) a live slot.
            unsafe { *ll_slot += 1 };
        }
        return;
    }
    // Set before the ring (`start`).
    let Some(mru) = MRU.get() else {
        return;
    };
    let lines = mru.lines as *mut u64;
    // The lines `cachesim::raw::ll_part` will touch.
    let size = size.max(1).min(mru.min_line);
    let (first, last) = (
        addr >> mru.line_bits,
        addr.wrapping_add(size - 1) >> mru.line_bits,
    );
    if first == last
        // SAFETY: `first & set_mask` indexes the copy (one word per set).
        && unsafe { *lines.add((first & mru.set_mask) as usize) } == first
    {
        return;
    }
    for line in [first, last] {
        // SAFETY: as above; the copy is the running thread's.
        unsafe { *lines.add((line & mru.set_mask) as usize) = line };
    }
    let p = producer();
    // SAFETY: the producer record is the running thread's (run lock); `next` is an entry of
    // the current segment, which the consumer will read only once published.
    unsafe {
        let at = (*p).next as *mut [u64; 2];
        *at = [addr, (ll_slot as u64) << 8 | size.min(255)];
        (*p).next += 16;
        if (*p).next == (*p).segment_end {
            segment_end(0, 0, 0);
        }
    }
}

/// The entries written so far.
///
/// # Safety
/// Called by the running guest thread (or with no guest thread running).
unsafe fn written(ring: *mut [u64; 2]) -> u64 {
    // SAFETY: (caller) the record is ours.
    let next = unsafe { (*producer()).next };
    LAP.load(Ordering::Relaxed) + (next - ring as u64) / 16
}

/// Called when the producer has written a segment's last entry (by generated code through
/// the helper trampoline): publishes the segment and makes room for the next one, waiting
/// for the consumer if it is a lap behind.
pub extern "C" fn segment_end(_: u64, _: u64, _: u64) -> u64 {
    let ring = RING.load(Ordering::Relaxed);
    if ring.is_null() {
        return 0;
    }
    // SAFETY: called by the running guest thread.
    let n = unsafe { written(ring) };
    let p = producer();
    // SAFETY: as in `written`.
    unsafe {
        if (*p).next == ring as u64 + ENTRIES * 16 {
            (*p).next = ring as u64;
            LAP.fetch_add(ENTRIES, Ordering::Relaxed);
        }
        (*p).segment_end = (*p).next + SEGMENT * 16;
    }
    // The next segment's entries held numbers a lap earlier.
    let free_from = (n + SEGMENT).saturating_sub(ENTRIES);
    if consumer_here() {
        publish(n);
        while CONSUMED.0.load(Ordering::Acquire) < free_from {
            pause();
        }
    } else {
        consume_here(ring, n);
    }
    0
}

/// Waits until every entry pushed so far is done, so that the LL slots and the LL itself
/// may be read (or copied by a fork).
pub fn drain() {
    let ring = RING.load(Ordering::Acquire);
    if ring.is_null() {
        return;
    }
    // SAFETY: called by the running guest thread (a tool hook or fini).
    let n = unsafe { written(ring) };
    if !consumer_here() {
        consume_here(ring, n);
        return;
    }
    publish(n);
    while COUNTED.0.load(Ordering::Acquire) < n {
        pause();
    }
}

/// Whether this process has the consumer thread (not a forked child).
fn consumer_here() -> bool {
    i64::from(CONSUMER_PID.load(Ordering::Relaxed)) == sys(libc::SYS_getpid, [0; 3])
}

/// The consumer's work on the calling thread (in a forked child, which has no consumer):
/// the entries up to number `n`.
fn consume_here(ring: *mut [u64; 2], n: u64) {
    let hier = super::HIER.load(Ordering::Relaxed);
    let mut done = CONSUMED.0.load(Ordering::Relaxed);
    while done < n {
        // SAFETY: an entry written and not yet done; the LL is this thread's (no consumer).
        if let Some(slot) = unsafe { simulate(hier, *ring.add((done % ENTRIES) as usize)) } {
            // SAFETY: `push` or generated code stored a live slot; no consumer writes it.
            unsafe { *slot += 1 };
        }
        done += 1;
    }
    CONSUMED.0.store(done, Ordering::Release);
    COUNTED.0.store(done, Ordering::Release);
    PUBLISHED.0.store(done, Ordering::Release);
}

/// A system call without libc (the producer side runs in integer-only helpers, which call
/// nothing that might use vector registers).
fn sys(nr: i64, a: [u64; 3]) -> i64 {
    // SAFETY: only getpid, sched_yield and futex on a static word, which write no memory.
    unsafe { dbt_core::syscall::raw::syscall6(nr as u64, [a[0], a[1], a[2], 0, 0, 0]) }
}

fn publish(n: u64) {
    PUBLISHED.0.store(n, Ordering::SeqCst);
    if SLEEPING.0.load(Ordering::SeqCst) != 0 {
        SLEEPING.0.store(0, Ordering::SeqCst);
        WAKE.0.fetch_add(1, Ordering::SeqCst);
        let wake = (libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG) as u64;
        sys(libc::SYS_futex, [WAKE.0.as_ptr() as u64, wake, 1]);
    }
}

/// One entry's LL part: its LL-miss slot if it missed.
///
/// # Safety
/// The LL is the calling thread's for the call.
#[inline]
unsafe fn simulate(hier: *mut Hierarchy, [addr, slot_size]: [u64; 2]) -> Option<*mut u64> {
    // SAFETY: (caller) the LL is ours.
    unsafe { cachesim::raw::ll_part(hier, addr, slot_size & 0xff) }
        .then_some((slot_size >> 8) as *mut u64)
}

/// The consumer's LL misses not yet added to their slots: a direct-mapped table of (slot,
/// count), an entry added to its slot when another slot needs its place or at [`flush`].
///
/// [`flush`]: Tally::flush
struct Tally {
    entries: Box<[(u64, u64)]>,
    /// The indices of the entries in use (never more than `entries.len()`: no reallocation).
    used: Vec<usize>,
}

impl Tally {
    const ENTRIES: usize = 4096;

    fn new() -> Tally {
        Tally {
            entries: vec![(0, 0); Self::ENTRIES].into_boxed_slice(),
            used: Vec::with_capacity(Self::ENTRIES),
        }
    }

    /// # Safety
    /// `slot` is a live cost-array slot that only the consumer writes while it runs.
    unsafe fn count(&mut self, slot: *mut u64) {
        let i = (slot as usize >> 3) & (Self::ENTRIES - 1);
        let entry = &mut self.entries[i];
        if entry.0 == slot as u64 {
            entry.1 += 1;
            return;
        }
        if entry.0 == 0 {
            self.used.push(i);
        } else {
            // SAFETY: (`count`'s caller, when it was counted) a live slot, the consumer's.
            unsafe { *(entry.0 as *mut u64) += entry.1 };
        }
        *entry = (slot as u64, 1);
    }

    /// Adds every count to its slot.
    fn flush(&mut self) {
        for i in self.used.drain(..) {
            let (slot, n) = core::mem::take(&mut self.entries[i]);
            // SAFETY: as in `count`.
            unsafe { *(slot as *mut u64) += n };
        }
    }
}

fn pause() {
    for _ in 0..16 {
        core::hint::spin_loop();
    }
    sys(libc::SYS_sched_yield, [0; 3]);
}

fn consume(ring: *mut [u64; 2], hier: *mut Hierarchy) {
    let mut tally = Tally::new();
    CONSUMER_STARTED.store(true, Ordering::Release);
    let mut done = 0u64;
    loop {
        let available = PUBLISHED.0.load(Ordering::Acquire);
        if available <= done {
            idle(done);
            continue;
        }
        while done < available {
            // SAFETY: a published entry not yet done; the LL is this thread's while entries
            // are outstanding (module invariants).
            if let Some(slot) = unsafe { simulate(hier, *ring.add((done % ENTRIES) as usize)) } {
                // SAFETY: `push` or generated code stored a live slot; LL-miss slots are
                // written only by the consumer while it runs (module invariants).
                unsafe { tally.count(slot) };
            }
            done += 1;
            if done.is_multiple_of(SEGMENT) {
                CONSUMED.0.store(done, Ordering::Release);
            }
        }
        CONSUMED.0.store(done, Ordering::Release);
        // Caught up (as when `drain` waits): the counts go to their slots.
        if PUBLISHED.0.load(Ordering::Acquire) == done {
            tally.flush();
            COUNTED.0.store(done, Ordering::Release);
        }
    }
}

fn idle(done: u64) {
    for _ in 0..IDLE_SPINS {
        if PUBLISHED.0.load(Ordering::Relaxed) > done {
            return;
        }
        core::hint::spin_loop();
    }
    let seq = WAKE.0.load(Ordering::SeqCst);
    SLEEPING.0.store(1, Ordering::SeqCst);
    if PUBLISHED.0.load(Ordering::SeqCst) > done {
        SLEEPING.0.store(0, Ordering::SeqCst);
        return;
    }
    // Returns when woken or when the word is no longer `seq` (no timeout).
    let wait = (libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG) as u64;
    sys(
        libc::SYS_futex,
        [WAKE.0.as_ptr() as u64, wait, u64::from(seq)],
    );
}
