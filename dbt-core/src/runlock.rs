//! The run lock: with an instrumenting tool, one guest thread runs at a time, like Valgrind,
//! so per-block counters and the simulated caches are updated without races and the numbers
//! are those of one serial execution. `--tool=none` runs threads in parallel (lock disabled).
//!
//! A thread holds the lock while it runs translated code or the dispatcher, and releases it
//! around every system call passed to the kernel that may block (`syscall::never_blocks`
//! lists those that keep it, as Valgrind keeps its lock for calls without `SfMayBlock`).
//! The lock is a FIFO ticket lock; a waiter that has waited a whole time slice sends the
//! holder `YIELD_SIGNAL`, whose handler takes the holder out of translated code at the next
//! block start, where the dispatcher releases the lock and queues again.
//!
//! # Invariants
//! * Lock order: the run lock before the `Core` lock, never the reverse.
//! * `HOLDER` is the thread id of the holder (0: none).
use crate::syscall::raw;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// rgrind's private signal for time slicing; the guest cannot use it.
pub const YIELD_SIGNAL: usize = 64;
/// How long a waiter waits before asking the holder to yield.
const SLICE_NS: u64 = 10_000_000;

static ENABLED: AtomicBool = AtomicBool::new(false);
static NEXT: AtomicU64 = AtomicU64::new(0);
/// The ticket being served; waiters futex-wait on its low 32 bits.
static SERVING: AtomicU32 = AtomicU32::new(0);
static SERVING_FULL: AtomicU64 = AtomicU64::new(0);
static HOLDER: AtomicU64 = AtomicU64::new(0);
/// The thread that held the lock last, and what runs when another one takes it.
static LAST_HOLDER: AtomicU64 = AtomicU64::new(0);
static SWITCH_HOOK: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Sets a routine to run (in rgrind's Rust context, holding the lock) whenever the lock
/// passes to another thread than the one that held it last: tools keep per-thread state
/// for translated code in one place, which then belongs to another thread.
pub fn set_switch_hook(hook: fn()) {
    SWITCH_HOOK.store(hook as usize, Ordering::SeqCst);
}

pub fn enable() {
    ENABLED.store(true, Ordering::SeqCst);
}

pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

fn gettid() -> u64 {
    // SAFETY: gettid cannot fail.
    unsafe { raw::syscall6(libc::SYS_gettid as u64, [0; 6]) as u64 }
}

/// Takes the lock (no-op when disabled).
pub fn acquire() {
    if !enabled() {
        return;
    }
    let ticket = NEXT.fetch_add(1, Ordering::SeqCst);
    loop {
        let serving = SERVING_FULL.load(Ordering::SeqCst);
        if serving == ticket {
            break;
        }
        let word = SERVING.load(Ordering::SeqCst);
        if SERVING_FULL.load(Ordering::SeqCst) == ticket {
            break;
        }
        let ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: SLICE_NS as i64,
        };
        // SAFETY: FUTEX_WAIT on our own static word with a timeout.
        let r = unsafe {
            raw::syscall6(
                libc::SYS_futex as u64,
                [
                    SERVING.as_ptr() as u64,
                    (libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG) as u64,
                    u64::from(word),
                    &ts as *const _ as u64,
                    0,
                    0,
                ],
            )
        };
        if r == -(libc::ETIMEDOUT as i64) && SERVING_FULL.load(Ordering::SeqCst) == serving {
            let holder = HOLDER.load(Ordering::SeqCst);
            if holder != 0 {
                // SAFETY: tgkill to a thread of this process with rgrind's private signal.
                unsafe {
                    raw::syscall6(
                        libc::SYS_tgkill as u64,
                        [
                            std::process::id() as u64,
                            holder,
                            YIELD_SIGNAL as u64,
                            0,
                            0,
                            0,
                        ],
                    )
                };
            }
        }
    }
    become_holder();
}

/// Times the lock passed from one thread to another (`--stats=yes`).
static SWITCHES: AtomicU64 = AtomicU64::new(0);

/// How many times the lock passed from one thread to another.
pub fn switches() -> u64 {
    SWITCHES.load(Ordering::Relaxed)
}

/// Records the calling thread as the holder; runs the switch hook when the last holder was
/// another thread.
fn become_holder() {
    let me = gettid();
    HOLDER.store(me, Ordering::SeqCst);
    if LAST_HOLDER.swap(me, Ordering::SeqCst) != me {
        SWITCHES.fetch_add(1, Ordering::Relaxed);
        let hook = SWITCH_HOOK.load(Ordering::SeqCst);
        if hook != 0 {
            // SAFETY: only `set_switch_hook` stores here, a `fn()`.
            let hook: fn() = unsafe { core::mem::transmute::<usize, fn()>(hook) };
            hook();
        }
    }
}

/// Gives the lock to the next waiter (no-op when disabled).
pub fn release() {
    if !enabled() {
        return;
    }
    HOLDER.store(0, Ordering::SeqCst);
    SERVING_FULL.fetch_add(1, Ordering::SeqCst);
    SERVING.fetch_add(1, Ordering::SeqCst);
    // SAFETY: FUTEX_WAKE on our own static word.
    unsafe {
        raw::syscall6(
            libc::SYS_futex as u64,
            [
                SERVING.as_ptr() as u64,
                (libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG) as u64,
                i32::MAX as u64,
                0,
                0,
                0,
            ],
        )
    };
}

/// The tickets taken so far (for [`yield_to_newcomer`]).
pub fn tickets_taken() -> u64 {
    NEXT.load(Ordering::SeqCst)
}

/// How long the holder waits for a newcomer to queue.
const NEWCOMER_WAIT_NS: u64 = 100_000_000;

/// Lets a thread that queues for the lock after `taken` (`tickets_taken` before it was
/// started) run before the holder goes on, as Valgrind lets a new thread run after `clone`
/// (`VG_(vg_yield)` in its `POST(sys_clone)`): the holder waits until a ticket is taken
/// after `taken` (at most `NEWCOMER_WAIT_NS`), then queues again behind it. A thread's
/// creation and its first time slice then come in Valgrind's order, and so do the counts of
/// a program that joins its threads (its waits in `pthread_join`). No-op when disabled.
pub fn yield_to_newcomer(taken: u64) {
    if !enabled() {
        return;
    }
    let start = std::time::Instant::now();
    while NEXT.load(Ordering::SeqCst) <= taken {
        if start.elapsed().as_nanos() as u64 > NEWCOMER_WAIT_NS {
            return;
        }
        std::thread::yield_now();
    }
    release();
    acquire();
}

/// In the child of a fork made while holding the lock: the waiters' threads did not come
/// along, so the child holds the lock with nobody queued behind it.
pub fn after_fork_child() {
    if !enabled() {
        return;
    }
    NEXT.store(SERVING_FULL.load(Ordering::SeqCst) + 1, Ordering::SeqCst);
    become_holder();
}

/// Whether another thread waits for the lock.
pub fn contended() -> bool {
    enabled() && NEXT.load(Ordering::SeqCst) > SERVING_FULL.load(Ordering::SeqCst) + 1
}
