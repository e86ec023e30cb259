//! One set-associative, true-LRU cache level, exactly as `cachegrind/cg_sim.c` (3.19)
//! simulates it: write-allocate, writes treated like reads, tags = full line numbers,
//! set = `line & (sets - 1)`, every tag 0 at start.
//!
//! # Invariants
//! * Each set row is ordered MRU first. A hit moves the tag to way 0 and shifts the ways in
//!   front of it down by one; a miss shifts the whole row down (dropping the LRU tag) and
//!   installs the tag in way 0. A hit in way 0 writes nothing, which is what makes the inline
//!   check in [`crate::raw::FlatCache`] exact.
//! * An access touches at most two lines: its size is clamped to `1..=line_size` first (see
//!   [`Cache::access`]). A two-line access looks up both lines, in address order, and is one
//!   miss if either line misses.
//! * The geometry passed [`CacheGeometry::check`].
//!
//! # Not done here
//! No counting, no L1-to-LL propagation ([`crate::Hierarchy`] does that), no dirty bits or
//! write-backs (Cachegrind has none; Callgrind's `--simulate-wb` is not modelled), no
//! prefetching.

use crate::geometry::{CacheGeometry, CheckError};
use crate::raw::FlatCache;

/// One cache level. Its first field is the flat `#[repr(C)]` part ([`FlatCache`]) that inline
/// code reads; everything else is for Rust-side callers.
#[repr(C)]
#[derive(Clone, Debug)]
pub struct Cache {
    flat: FlatCache,
    geometry: CacheGeometry,
}

/// The LRU update of one set (`cachesim_setref_is_miss`). Returns `true` on a miss.
///
/// Written as one pass that carries the displaced tag down the row: when the tag is found at
/// way `i`, ways `0..i` have been shifted down and the tag is in way 0; when it is not found,
/// the whole row has shifted and the LRU tag has fallen off. No indexing, so no panic.
#[inline]
pub(crate) fn set_ref_is_miss<T: Copy + PartialEq>(row: &mut [T], tag: T) -> bool {
    if row.first() == Some(&tag) {
        return false;
    }
    let mut carried = tag;
    for way in row.iter_mut() {
        let current = core::mem::replace(way, carried);
        if current == tag {
            return false;
        }
        carried = current;
    }
    true
}

/// The lines one reference of `size` bytes at `addr` touches, each passed to `lookup` (which
/// returns whether it missed); returns whether any missed. `size` is clamped to
/// `1..=line_size` (a power of two), so at most two lines are touched, in address order.
#[inline]
pub(crate) fn access_lines(
    addr: u64,
    size: u64,
    line_size: u64,
    mut lookup: impl FnMut(u64) -> bool,
) -> bool {
    let bits = line_size.trailing_zeros();
    // Not `clamp`, which has a (here unreachable) panic path for min > max.
    let size = size.max(1).min(line_size);
    let line1 = addr >> bits;
    let line2 = addr.wrapping_add(size - 1) >> bits;
    if line1 == line2 {
        lookup(line1)
    } else {
        // The clamp makes this exactly line1 + 1 (with wrap-around at the top).
        let miss1 = lookup(line1);
        let miss2 = lookup(line2);
        miss1 || miss2
    }
}

impl Cache {
    /// Byte offset of the [`FlatCache`] inside a `Cache` (it is the first field).
    pub const FLAT_OFFSET: usize = core::mem::offset_of!(Cache, flat);

    /// Builds an empty cache (all tags 0) after checking the geometry like Valgrind.
    pub fn new(geometry: CacheGeometry) -> Result<Cache, CheckError> {
        geometry.check()?;
        let sets = u64::from(geometry.sets());
        let flat = FlatCache::new(
            sets,
            u64::from(geometry.assoc),
            geometry.line_size.trailing_zeros(),
        )
        // check() guarantees a power-of-two set count and assoc >= 1; the only other failure
        // is an allocation size that does not fit usize, reported as the set-count error.
        .ok_or(CheckError::SetCountNotPowerOfTwo)?;
        Ok(Cache { flat, geometry })
    }

    /// The geometry this cache simulates.
    pub fn geometry(&self) -> CacheGeometry {
        self.geometry
    }

    /// The flat part generated code reads.
    pub fn flat(&self) -> &FlatCache {
        &self.flat
    }

    /// Raw pointer to the flat part, for generated code. Valid while this `Cache` is neither
    /// moved nor dropped (a [`crate::Hierarchy`] is boxed, so its caches do not move).
    pub fn flat_ptr(&self) -> *const FlatCache {
        &self.flat
    }

    /// All tags, row-major by set, way 0 = MRU, without the rows' padding (for inspection
    /// and tests).
    pub fn tags(&self) -> Vec<u64> {
        (0..=self.flat.set_mask())
            .flat_map(|set| self.row(set))
            .copied()
            .collect()
    }

    /// The ways of set `set`, MRU first (empty past the last set).
    fn row(&self, set: u64) -> &[u64] {
        let start = (set * self.flat.row_ways()) as usize;
        self.flat
            .tags()
            .get(start..start + self.flat.assoc() as usize)
            .unwrap_or(&[])
    }

    /// The tags of the set that `addr` maps to, MRU first.
    pub fn set_of(&self, addr: u64) -> &[u64] {
        self.row((addr >> self.flat.line_bits()) & self.flat.set_mask())
    }

    /// The inline fast-path check, done safely: `true` if `[addr, addr+size-1]` lies in one
    /// line and that line is the MRU way of its set (an access that would change no state).
    pub fn is_mru_hit(&self, addr: u64, size: u64) -> bool {
        let bits = self.flat.line_bits();
        let line = addr >> bits;
        let last = addr.wrapping_add(size.max(1)).wrapping_sub(1) >> bits;
        last == line && self.set_of(addr).first() == Some(&line)
    }

    /// One reference of `size` bytes at `addr` (`cachesim_ref_is_miss`). Returns `true` on a
    /// miss. `size` is clamped to `1..=line_size`, so at most two lines are touched; a
    /// two-line access updates both lines (first line first) and is one miss if either
    /// misses. Loads, stores and modifies all call this (write-allocate, no dirty state).
    ///
    /// Panic-free and allocation-free: it is reached from the `extern "C"` slow path.
    #[inline]
    pub fn access(&mut self, addr: u64, size: u64) -> bool {
        let set_mask = self.flat.set_mask();
        let assoc = self.flat.assoc() as usize;
        let row_ways = self.flat.row_ways() as usize;
        let line_size = u64::from(self.geometry.line_size);
        let tags = self.flat.tags_mut();
        access_lines(addr, size, line_size, |line| {
            let start = ((line & set_mask) as usize).wrapping_mul(row_ways);
            match tags.get_mut(start..start.wrapping_add(assoc)) {
                Some(row) => set_ref_is_miss(row, line),
                // Unreachable: set <= set_mask < sets and the array has sets rows (FlatCache
                // invariant). Reported as a miss rather than a panic.
                None => true,
            }
        })
        // Post-invariant: each touched line is now the MRU way of its set.
    }

    /// Resets every tag to 0 (the start state).
    pub fn clear(&mut self) {
        self.flat.tags_mut().fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(size: u32, assoc: u32, line: u32) -> Cache {
        Cache::new(CacheGeometry::new(size, assoc, line)).expect("valid geometry")
    }

    /// Accesses every `stride`-th byte of `[base, base+len)` `passes` times; returns misses.
    fn walk(c: &mut Cache, base: u64, len: u64, stride: u64, size: u64, passes: u32) -> u64 {
        let mut misses = 0;
        for _ in 0..passes {
            let mut a = base;
            while a < base + len {
                misses += u64::from(c.access(a, size));
                a += stride;
            }
        }
        misses
    }

    #[test]
    fn new_rejects_bad_geometry() {
        assert_eq!(
            Cache::new(CacheGeometry::new(1000, 3, 64)).err(),
            Some(CheckError::SetCountNotPowerOfTwo)
        );
        assert_eq!(
            Cache::new(CacheGeometry::new(32768, 8, 8)).err(),
            Some(CheckError::LineSizeTooSmall)
        );
    }

    #[test]
    fn sequential_walk_smaller_than_cache_misses_once_per_line() {
        // 32 KiB, 8-way, 64 B: a 16 KiB buffer fits; 8-byte loads.
        let mut c = cache(32768, 8, 64);
        let base = 0x10_0000;
        assert_eq!(walk(&mut c, base, 16384, 8, 8, 1), 16384 / 64);
        // Second and third passes: all hits.
        assert_eq!(walk(&mut c, base, 16384, 8, 8, 2), 0);
    }

    #[test]
    fn sequential_walk_exactly_cache_size_then_hits() {
        let mut c = cache(32768, 8, 64);
        assert_eq!(walk(&mut c, 0x40_0000, 32768, 64, 4, 1), 512);
        assert_eq!(walk(&mut c, 0x40_0000, 32768, 64, 4, 3), 0);
    }

    #[test]
    fn sequential_walk_larger_than_cache_thrashes_lru() {
        // Twice the cache size, repeated: LRU evicts each line before its reuse, so every
        // line misses on every pass (the classic LRU cyclic pathology).
        let mut c = cache(32768, 8, 64);
        assert_eq!(walk(&mut c, 0x80_0000, 65536, 8, 8, 3), 3 * 1024);
    }

    #[test]
    fn strided_walk_uses_only_some_sets() {
        // Stride 4096 with 64 sets of 64 B lines: every access maps to set 0 (4096 = 64*64).
        // 8 distinct lines fit in 8 ways; 9 do not.
        let mut c = cache(32768, 8, 64);
        assert_eq!(walk(&mut c, 0x100_0000, 8 * 4096, 4096, 8, 1), 8);
        assert_eq!(walk(&mut c, 0x100_0000, 8 * 4096, 4096, 8, 4), 0);
        let mut c = cache(32768, 8, 64);
        assert_eq!(walk(&mut c, 0x100_0000, 9 * 4096, 4096, 8, 4), 36);
        // Stride 128: every other set, 128 lines over 32 sets = 4 per set, fits in 8 ways.
        let mut c = cache(32768, 8, 64);
        assert_eq!(walk(&mut c, 0x200_0000, 16384, 128, 8, 2), 128);
    }

    #[test]
    fn n_plus_one_lines_in_an_n_way_set() {
        for assoc in [1u32, 2, 4, 8, 12] {
            let sets = 16u64;
            let mut c = cache(sets as u32 * assoc * 64, assoc, 64);
            let stride = sets * 64; // same set every time
                                    // N lines: N cold misses, then all hits, any order.
            for round in 0..3 {
                for k in 0..u64::from(assoc) {
                    let miss = c.access(0x1000_0000 + k * stride, 8);
                    assert_eq!(miss, round == 0, "assoc {assoc} round {round} line {k}");
                }
            }
            // N+1 lines cycled: every access misses.
            let mut c = cache(sets as u32 * assoc * 64, assoc, 64);
            for _ in 0..3 {
                for k in 0..=u64::from(assoc) {
                    assert!(c.access(0x1000_0000 + k * stride, 8));
                }
            }
            // N+1 lines, but re-touching line 0 between the others keeps it resident
            // and evicts the true LRU instead.
            if assoc >= 2 {
                let mut c = cache(sets as u32 * assoc * 64, assoc, 64);
                let line = |k: u64| 0x1000_0000 + k * stride;
                for k in 0..u64::from(assoc) {
                    c.access(line(k), 8);
                }
                assert!(!c.access(line(0), 8), "line 0 still resident");
                assert!(c.access(line(u64::from(assoc)), 8), "new line misses");
                assert!(!c.access(line(0), 8), "line 0 survived: it was MRU");
                assert!(c.access(line(1), 8), "line 1 was the LRU and got evicted");
            }
        }
    }

    #[test]
    fn lru_order_is_visible_in_the_set() {
        let mut c = cache(4 * 4 * 64, 4, 64); // 4 sets, 4 ways
        let stride = 4 * 64u64;
        for k in 0..4u64 {
            c.access(k * stride, 1);
        }
        assert_eq!(c.set_of(0), &[12, 8, 4, 0]);
        c.access(4 * 64, 1); // line 4 -> to front
        assert_eq!(c.set_of(0), &[4, 12, 8, 0]);
        c.access(16 * 64, 1); // miss, line 0 (LRU) dropped
        assert_eq!(c.set_of(0), &[16, 4, 12, 8]);
    }

    #[test]
    fn rows_of_twelve_ways_are_padded_to_sixteen_and_the_padding_stays_empty() {
        let mut c = cache(4 * 12 * 64, 12, 64); // 4 sets, 12 ways
        assert_eq!(c.flat().row_bytes(), 128);
        assert_eq!(c.flat().tags().len(), 4 * 16);
        let stride = 4 * 64u64;
        for k in 1..=13u64 {
            c.access(k * stride, 1);
        }
        let set0: Vec<u64> = (2..=13).rev().map(|k| k * 4).collect();
        assert_eq!(c.set_of(0), set0.as_slice());
        assert!(c.flat().tags()[12..16].iter().all(|&t| t == 0));
        assert_eq!(c.tags().len(), 4 * 12);
        assert!(c.is_mru_hit(13 * stride, 1));
    }

    #[test]
    fn line_zero_hits_initially_like_valgrind() {
        let mut c = cache(32768, 8, 64);
        assert!(c.is_mru_hit(0, 8));
        assert!(!c.access(0, 8));
        assert!(c.access(64, 8));
    }

    #[test]
    fn straddling_access_is_one_access_with_at_most_one_miss() {
        let mut c = cache(32768, 8, 64);
        let buf = 0x5000u64;
        // Both lines cold: one miss (not two), and both lines are now resident.
        assert!(c.access(buf + 60, 8));
        assert!(c.is_mru_hit(buf, 8));
        assert!(c.is_mru_hit(buf + 64, 8));
        // Both warm: hit.
        assert!(!c.access(buf + 60, 8));
        // Reference §3.2: line 0 warm, line 1 cold -> one miss; then a hit.
        let mut c = cache(32768, 8, 64);
        assert!(c.access(buf, 8));
        assert!(c.access(buf + 60, 8));
        assert!(!c.access(buf + 60, 8));
        // Line 0 cold, line 1 warm -> miss too.
        let mut c = cache(32768, 8, 64);
        assert!(c.access(buf + 64, 8));
        assert!(c.access(buf + 60, 8));
        // A straddle is never an MRU fast-path hit, even with both lines resident.
        assert!(!c.is_mru_hit(buf + 60, 8));
    }

    #[test]
    fn straddle_updates_lru_of_both_lines_in_order() {
        // Direct-mapped, 2 sets: lines 0 and 1 map to different sets.
        let mut c = cache(128 * 2, 1, 128);
        c.access(0x1000 - 4, 8); // lines 0x1f and 0x20
        assert_eq!(c.tags(), &[0x20, 0x1f]);
    }

    #[test]
    fn wide_access_is_clamped_to_one_line() {
        let mut c = cache(32768, 8, 64);
        // 512 bytes at a line start: only that line is touched.
        assert!(c.access(0x8000, 512));
        assert!(c.access(0x8040, 8), "next line was not fetched");
        // 512 bytes in mid-line: clamped to 64, so two lines.
        let mut c = cache(32768, 8, 64);
        assert!(c.access(0x9020, 512));
        assert!(!c.access(0x9040, 8));
        assert!(c.access(0x9080, 8));
        // Size 0 is taken as 1.
        let mut c = cache(32768, 8, 64);
        assert!(c.access(0xa03f, 0));
        assert!(c.access(0xa040, 1), "size 0 did not touch the next line");
    }

    #[test]
    fn writes_allocate_like_reads() {
        // There is no read/write distinction at all: a "store" miss installs the line and a
        // later "load" hits it, and the same sequence gives the same results either way.
        let mut c = cache(32768, 8, 64);
        assert!(c.access(0x7000, 8)); // store
        assert!(!c.access(0x7008, 4)); // load of the same line
    }

    #[test]
    fn top_of_address_space_wraps_without_panicking() {
        let mut c = cache(32768, 8, 64);
        assert!(c.access(u64::MAX - 3, 8)); // straddles the last line and line 0
        assert!(!c.access(0, 1));
        assert!(!c.access(u64::MAX, 1));
    }

    #[test]
    fn clone_is_deep() {
        let mut a = cache(32768, 8, 64);
        a.access(0x1234_0000, 8);
        let mut b = a.clone();
        assert!(b.access(0x5678_0000, 8));
        assert!(!a.is_mru_hit(0x5678_0000, 8));
        assert!(b.is_mru_hit(0x5678_0000, 8));
        assert_ne!(a.flat().tags_ptr(), b.flat().tags_ptr());
        a.clear();
        assert!(a.tags().iter().all(|&t| t == 0));
    }
}
