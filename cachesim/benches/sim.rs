//! Micro-benchmarks of the cache model: the inline MRU check (as generated code does it,
//! through the flat layout) and the `extern "C"` slow path in its three outcomes, plus the
//! branch predictor. Each benchmark performs `N` accesses per iteration and reports items/s,
//! so divan's time column divided by `N` is ns per access.
#![allow(unsafe_code)]

use std::hint::black_box;

use cachesim::raw::{cachesim_cond_branch, cachesim_data, mru_hit_raw};
use cachesim::{BranchPredictor, CacheGeometry, Hierarchy};
use divan::counter::ItemsCount;
use divan::Bencher;

const N: usize = 4096;

fn main() {
    divan::main();
}

fn hierarchy() -> Box<Hierarchy> {
    Hierarchy::new(
        CacheGeometry::new(32768, 8, 64),
        CacheGeometry::new(32768, 8, 64),
        CacheGeometry::new(8 << 20, 16, 64),
    )
    .expect("valid geometry")
}

/// Addresses whose every access is an MRU hit: 8-byte steps through one warm 4 KiB buffer
/// (each line is touched 8 times in a row).
fn mru_addrs() -> Vec<u64> {
    (0..N as u64).map(|i| 0x10_0000 + (i * 8) % 4096).collect()
}

/// A warmed hierarchy handed out as a raw pointer (as generated code holds it); freed by
/// [`free`].
fn warmed(addrs: &[u64]) -> *mut Hierarchy {
    let mut h = hierarchy();
    for &a in addrs {
        h.data(a, 8);
    }
    Box::into_raw(h)
}

fn free(hp: *mut Hierarchy) {
    // SAFETY: `hp` came from `Box::into_raw` in `warmed` and is freed once, after its last use.
    drop(unsafe { Box::from_raw(hp) });
}

/// The inline fast path: shift, mask, compare through the raw flat pointer.
#[divan::bench]
fn mru_fast_path(b: Bencher) {
    let addrs = mru_addrs();
    let hp = warmed(&addrs);
    let flat = Hierarchy::d1_flat_ptr_of(hp);
    b.counter(ItemsCount::new(N)).bench_local(|| {
        let mut hits = 0u32;
        for &a in &addrs {
            // SAFETY: `flat` points into the live, boxed hierarchy `h`, not mutated here.
            hits += u32::from(unsafe { mru_hit_raw(flat, black_box(a), 8) });
        }
        assert_eq!(hits, N as u32);
        hits
    });
    free(hp);
}

/// Inline check plus slow-path call for the rare non-MRU access, on the same MRU stream: what
/// generated code costs per access when everything hits in the MRU way.
#[divan::bench]
fn inline_check_then_call(b: Bencher) {
    let addrs = mru_addrs();
    let hp = warmed(&addrs);
    let flat = Hierarchy::d1_flat_ptr_of(hp);
    b.counter(ItemsCount::new(N)).bench_local(|| {
        let mut misses = 0u32;
        for &a in &addrs {
            // SAFETY: `flat` points to the live boxed hierarchy, not mutated during the check.
            if !unsafe { mru_hit_raw(flat, a, 8) } {
                // SAFETY: `hp` points to the live boxed hierarchy and nothing else uses it
                // during the call.
                misses += unsafe { cachesim_data(hp, a, 8) };
            }
        }
        misses
    });
    free(hp);
}

/// Runs `cachesim_data` over `addrs` (after one warm-up pass) and checks that every access
/// has outcome `expected`.
fn slow_path(b: Bencher, addrs: Vec<u64>, expected: u32) {
    let hp = warmed(&addrs);
    b.counter(ItemsCount::new(addrs.len())).bench_local(|| {
        let mut sum = 0u32;
        for &a in &addrs {
            // SAFETY: `hp` points to the live boxed hierarchy, used by nothing else here.
            sum += unsafe { cachesim_data(black_box(hp), a, 8) };
        }
        assert_eq!(sum, expected * addrs.len() as u32);
        sum
    });
    free(hp);
}

/// Slow path, D1 hit in a non-MRU way: two lines of one set alternate (way 1 each time).
#[divan::bench]
fn slow_path_l1_hit_not_mru(b: Bencher) {
    let addrs = (0..N as u64).map(|i| 0x20_0000 + (i % 2) * 4096).collect();
    slow_path(b, addrs, cachesim::OUTCOME_HIT);
}

/// Slow path, D1 miss and LL hit: a 256 KiB buffer (8× D1, 1/32 of LL), one access per line.
#[divan::bench]
fn slow_path_l1_miss_ll_hit(b: Bencher) {
    let addrs = (0..N as u64).map(|i| 0x100_0000 + i * 64).collect();
    slow_path(b, addrs, cachesim::OUTCOME_L1_MISS);
}

/// Slow path, miss in both: 4096 lines spread over 32 MiB (4× LL), each mapping to the same
/// few LL sets, so every access misses D1 and LL.
#[divan::bench]
fn slow_path_ll_miss(b: Bencher) {
    let addrs = (0..N as u64)
        .map(|i| 0x1000_0000 + (i * 8192 + (i % 128) * 64) % (32 << 20))
        .collect::<Vec<_>>();
    slow_path(b, addrs, cachesim::OUTCOME_LL_MISS);
}

/// Conditional-branch predictor through its `extern "C"` entry point.
#[divan::bench]
fn branch_cond(b: Bencher) {
    let mut p = BranchPredictor::new();
    let pp: *mut BranchPredictor = &mut *p;
    let pattern: Vec<(u64, u64)> = (0..N as u64)
        .map(|i| (0x40_0000 + (i % 37) * 5, u64::from(i % 3 != 0)))
        .collect();
    b.counter(ItemsCount::new(N)).bench_local(|| {
        let mut m = 0u32;
        for &(a, t) in &pattern {
            // SAFETY: `pp` points to the live boxed predictor, used by nothing else here.
            m += unsafe { cachesim_cond_branch(black_box(pp), a, t) };
        }
        m
    });
}
