//! The last-level cache: the same true-LRU model as [`crate::Cache`] (`cg_sim.c` 3.19), in a
//! layout only this crate reads and writes, made for a many-megabyte cache whose rows miss
//! the host's own caches.
//!
//! # Layout
//! * `mru`: each set's MRU line (full line number), which generated code reads to count an
//!   L1 miss that hits LL's MRU way inline ([`LastLevel::mru_tags_ptr`]). A lookup that
//!   finds its line there changes nothing and reads nothing else. A dense array of its own:
//!   with the heads (below) beside it, twice the size, matmul's LL-bound loop ran 11%
//!   slower.
//! * Each set's row is a **ring**: way `j` in LRU order (0 = MRU) is physical entry
//!   `(head + j) % assoc`. Valgrind's move-to-front becomes a move of at most half the row:
//!   a hit at way `j` shifts ways `0..j` back by one, or ways `j+1..` forward by one and
//!   moves the head back one entry, whichever is fewer; a miss overwrites the LRU entry and
//!   moves the head onto it, and so does a hit in the LRU way, both without moving any other
//!   way. Cachegrind's slowest patterns are exactly those: a miss shifted the whole row, and
//!   a stream over `assoc` lines per set hits the LRU way every time (64 ways shifted per
//!   access on the hosts' 64-way LL).
//! * Tags are *narrow* while they fit: a line's set bits are implied by its row, so a way
//!   holds `(line >> set_bits) + 1` in a `u32` (half the bytes per row: the simulator's cost
//!   on LL-bound programs is reading rows from host memory), `0` for an empty way. A line
//!   whose narrow tag would not fit (an address at or above `2^(32 + line_bits + set_bits)`,
//!   e.g. in the kernel's half) switches the cache to full `u64` line numbers for the rest of
//!   the run (`wide`, [`EMPTY`] for an empty way); the results are the same either way. The
//!   wide array is made with the narrow one, so that the switch, which runs inside the
//!   simulator's slow path, allocates nothing; a large one is a mapping of its own, whose
//!   pages take no memory until the switch writes them.
//! * Valgrind starts every way at tag 0. Only set 0 can ever hold line 0, and a lookup there
//!   finds the first of its copies, which stays ahead of the others in LRU order, so the
//!   others are never found again: they are empty ways here. No line is in a row twice,
//!   which lets a lookup scan the ring in memory order.
//!
//! # Invariants
//! * `mru[s]` is always way 0 of set `s` (decoded); `heads[s] < assoc`.
//! * Rows are `sets * assoc` entries; `set_mask == sets - 1`, `set_bits == log2(sets)`.
//! * No line is held by two ways of a row.

use crate::cache::access_lines;
use crate::geometry::{CacheGeometry, CheckError};
use crate::raw::ZeroedArray;

/// A wide row's empty way: no line number is this large (lines are addresses shifted right
/// by at least one bit).
const EMPTY: u64 = u64::MAX;

/// The unified last-level cache of a [`crate::Hierarchy`].
pub struct LastLevel {
    geometry: CacheGeometry,
    set_mask: u64,
    set_bits: u32,
    assoc: usize,
    /// Per set, its MRU line.
    mru: Box<[u64]>,
    /// Per set, its row's head (see the module documentation).
    heads: Box<[u32]>,
    /// `(line >> set_bits) + 1` per way while `!wide` (see the module documentation).
    narrow: ZeroedArray<u32>,
    /// Full line numbers per way once `wide`, as [`crate::Cache`] keeps them.
    wide: ZeroedArray<u64>,
    is_wide: bool,
}

impl Clone for LastLevel {
    fn clone(&self) -> Self {
        let Ok(mut copy) = LastLevel::new(self.geometry) else {
            // `new` succeeded for this geometry already; only memory exhaustion gets here.
            std::alloc::handle_alloc_error(std::alloc::Layout::new::<u64>());
        };
        copy.mru.copy_from_slice(&self.mru);
        copy.heads.copy_from_slice(&self.heads);
        copy.narrow.copy_from_slice(&self.narrow);
        if self.is_wide {
            copy.wide.copy_from_slice(&self.wide);
            copy.is_wide = true;
        }
        copy
    }
}

/// The full line number a narrow way of set `set` holds ([`EMPTY`] for none).
fn decoded(tag: u32, set: u64, set_bits: u32) -> u64 {
    match tag {
        0 => EMPTY,
        tag => (u64::from(tag - 1) << set_bits) | set,
    }
}

/// A way's tag, with the search of a row for one (physical order: a row never holds a line
/// twice).
trait Way: Copy + PartialEq {
    fn position(row: &[Self], tag: Self) -> Option<usize>;
}

impl Way for u64 {
    fn position(row: &[u64], tag: u64) -> Option<usize> {
        row.iter().position(|&way| way == tag)
    }
}

impl Way for u32 {
    /// Four ways per test: two per `u64`, a zero half of `word ^ (tag, tag)` found with the
    /// borrow trick (exact for "any half is zero", and for the low half). Integer registers
    /// only, like the rest of the slow path.
    fn position(row: &[u32], tag: u32) -> Option<usize> {
        const ONES: u64 = 0x0000_0001_0000_0001;
        const HIGHS: u64 = 0x8000_0000_8000_0000;
        let pattern = u64::from(tag) * ONES;
        let zero_half = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
        let pair = |a: u32, b: u32| (u64::from(b) << 32 | u64::from(a)) ^ pattern;
        let mut quads = row.chunks_exact(4);
        for (i, quad) in quads.by_ref().enumerate() {
            let &[w0, w1, w2, w3] = quad else { break };
            let (low, high) = (pair(w0, w1), pair(w2, w3));
            if zero_half(low) | zero_half(high) != 0 {
                let (word, at) = if zero_half(low) != 0 {
                    (low, 0)
                } else {
                    (high, 2)
                };
                return Some(4 * i + at + usize::from(word as u32 != 0));
            }
        }
        let rest = quads.remainder();
        let start = row.len() - rest.len();
        rest.iter().position(|&way| way == tag).map(|at| start + at)
    }
}

/// Looks `tag` up in a ring row (see the module documentation) whose MRU way, at `head`, is
/// known not to hold it, and makes it the MRU way as [`crate::cache::set_ref_is_miss`] would.
/// Returns whether it missed and the row's new head.
///
/// No indexing that can fail, so no panic; the loops move one way at a time with a
/// wrap-around test, which the compiler neither vectorises nor turns into `memmove` (this
/// runs where vector registers are not saved).
fn ring_ref_is_miss<T: Way>(row: &mut [T], head: usize, tag: T) -> (bool, usize) {
    let ways = row.len();
    let Some(last) = ways.checked_sub(1) else {
        return (true, 0);
    };
    let head = head.min(last);
    let lru = if head == 0 { last } else { head - 1 };
    if row.get(lru) == Some(&tag) {
        return (false, lru);
    }
    // From the MRU way on, so that a line used again soon is found in the first few ways.
    let (older, newer) = row.split_at(head);
    let found = T::position(newer, tag).map(|at| head + at);
    let Some(found) = found.or_else(|| T::position(older, tag)) else {
        if let Some(way) = row.get_mut(lru) {
            *way = tag;
        }
        return (true, lru);
    };
    // Way `rank` in LRU order; 0 (the head) and `last` (lru) were tested above.
    let rank = if found >= head {
        found - head
    } else {
        found + ways - head
    };
    let (mut to, end) = (found, if rank <= last - rank { head } else { lru });
    while to != end {
        let from = match (end == head, to) {
            (true, 0) => last,
            (true, to) => to - 1,
            (false, to) if to == last => 0,
            (false, to) => to + 1,
        };
        if let Some(&moved) = row.get(from) {
            if let Some(way) = row.get_mut(to) {
                *way = moved;
            }
        }
        to = from;
    }
    if let Some(way) = row.get_mut(end) {
        *way = tag;
    }
    (false, end)
}

impl core::fmt::Debug for LastLevel {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LastLevel")
            .field("geometry", &self.geometry)
            .field("is_wide", &self.is_wide)
            .finish_non_exhaustive()
    }
}

impl LastLevel {
    /// Builds an empty cache (Valgrind's all-zero tags) after checking the geometry.
    pub fn new(geometry: CacheGeometry) -> Result<LastLevel, CheckError> {
        geometry.check()?;
        let sets = u64::from(geometry.sets());
        let assoc = u64::from(geometry.assoc);
        // check() guarantees a power-of-two set count and assoc >= 1; the only other failure
        // is a size that does not fit memory, reported as the set-count error.
        let too_big = CheckError::SetCountNotPowerOfTwo;
        let ways = sets.checked_mul(assoc).ok_or(too_big)?;
        let mut narrow = ZeroedArray::<u32>::new(ways).ok_or(too_big)?;
        // Line 0 in set 0's MRU way; every other way is empty (module documentation).
        if let Some(way) = narrow.first_mut() {
            *way = 1;
        }
        let wide = ZeroedArray::<u64>::new(ways).ok_or(too_big)?;
        let sets_len = usize::try_from(sets).map_err(|_| too_big)?;
        Ok(LastLevel {
            geometry,
            set_mask: sets - 1,
            set_bits: sets.trailing_zeros(),
            assoc: assoc as usize,
            mru: vec![0; sets_len].into_boxed_slice(),
            heads: vec![0; sets_len].into_boxed_slice(),
            narrow,
            wide,
            is_wide: false,
        })
    }

    /// The geometry this cache simulates.
    pub fn geometry(&self) -> CacheGeometry {
        self.geometry
    }

    /// Where code that only reads this level finds each set's MRU line: the address of set
    /// 0's and the distance between two sets' in `u64` words. Heap memory that lives as long
    /// as the cache; it changes only through `access` and `clear`.
    pub fn mru_tags_ptr(&self) -> (*const u64, u64) {
        (self.mru.as_ptr(), 1)
    }

    /// Where a lookup reads set `s`'s row: `(base, row_bytes)`, the row at `base + s *
    /// row_bytes`. A hint for reading ahead (the rows move to another array if the cache
    /// switches to full tags); generated code must not write there.
    pub fn rows_ptr(&self) -> (*const u8, u64) {
        if self.is_wide {
            (self.wide.as_ptr().cast(), self.assoc as u64 * 8)
        } else {
            (self.narrow.as_ptr().cast(), self.assoc as u64 * 4)
        }
    }

    /// One reference, exactly as [`crate::Cache::access`]: `true` on a miss.
    ///
    /// Panic- and allocation-free (it runs in the simulator's slow path).
    #[inline]
    pub fn access(&mut self, addr: u64, size: u64) -> bool {
        let line_size = u64::from(self.geometry.line_size);
        access_lines(addr, size, line_size, |line| self.lookup(line))
    }

    #[inline]
    fn lookup(&mut self, line: u64) -> bool {
        let set = (line & self.set_mask) as usize;
        let (Some(&mru), Some(&head)) = (self.mru.get(set), self.heads.get(set)) else {
            // Unreachable: set <= set_mask < sets (invariant). A miss rather than a panic.
            return true;
        };
        if mru == line {
            return false;
        }
        let start = set.wrapping_mul(self.assoc);
        let range = start..start.wrapping_add(self.assoc);
        let high = line >> self.set_bits;
        if high >= u64::from(u32::MAX) && !self.is_wide {
            self.widen();
        }
        let (miss, new_head) = if self.is_wide {
            match self.wide.get_mut(range) {
                Some(row) => ring_ref_is_miss(row, head as usize, line),
                None => return true,
            }
        } else {
            match self.narrow.get_mut(range) {
                Some(row) => ring_ref_is_miss(row, head as usize, high as u32 + 1),
                None => return true,
            }
        };
        if let (Some(mru), Some(head)) = (self.mru.get_mut(set), self.heads.get_mut(set)) {
            *mru = line;
            *head = new_head as u32;
        }
        miss
    }

    /// Switches to full line numbers (for a line whose narrow tag does not fit). Runs in the
    /// slow path: no allocation, and a loop the compiler cannot vectorise (`black_box`), as
    /// vector registers are not saved around it.
    #[cold]
    fn widen(&mut self) {
        let assoc = self.assoc.max(1);
        for (i, (wide, &tag)) in self.wide.iter_mut().zip(self.narrow.iter()).enumerate() {
            *wide = decoded(tag, (i / assoc) as u64, self.set_bits);
            core::hint::black_box(());
        }
        self.is_wide = true;
    }

    /// Set `set`'s ways in LRU order, MRU first, as Valgrind's tags (an empty way is tag 0).
    fn row_in_order(&self, set: usize) -> Vec<u64> {
        let assoc = self.assoc.max(1);
        let head = self.heads.get(set).map_or(0, |&h| h as usize);
        let physical = |way: usize| -> u64 {
            let i = set * assoc + way;
            let line = if self.is_wide {
                self.wide.get(i).copied().unwrap_or(EMPTY)
            } else {
                let tag = self.narrow.get(i).copied().unwrap_or(0);
                decoded(tag, set as u64, self.set_bits)
            };
            if line == EMPTY {
                0
            } else {
                line
            }
        };
        (0..assoc).map(|j| physical((head + j) % assoc)).collect()
    }

    /// All tags as full line numbers (Valgrind's), row-major by set, way 0 = MRU (for
    /// inspection and tests).
    pub fn tags(&self) -> Vec<u64> {
        (0..=self.set_mask as usize)
            .flat_map(|set| self.row_in_order(set))
            .collect()
    }

    /// The tags of the set that `addr` maps to, MRU first, as full line numbers.
    pub fn set_of(&self, addr: u64) -> Vec<u64> {
        let set = (addr >> self.geometry.line_size.trailing_zeros()) & self.set_mask;
        self.row_in_order(set as usize)
    }

    /// Resets every tag to the start state, in place: generated code keeps the address of
    /// `mru` (Callgrind clears the caches whenever instrumentation is switched on or off).
    pub fn clear(&mut self) {
        self.mru.fill(0);
        self.heads.fill(0);
        self.narrow.fill(0);
        if let Some(way) = self.narrow.first_mut() {
            *way = 1;
        }
        self.is_wide = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::set_ref_is_miss;
    use crate::Cache;

    fn mru_lines(ll: &LastLevel) -> Vec<u64> {
        ll.mru.to_vec()
    }

    /// `accesses` through both models, which must agree on every result and every tag.
    fn agree(geometry: CacheGeometry, accesses: impl Iterator<Item = (u64, u64)>) {
        let mut ll = LastLevel::new(geometry).expect("valid geometry");
        let mut reference = Cache::new(geometry).expect("valid geometry");
        for (i, (addr, size)) in accesses.enumerate() {
            assert_eq!(
                ll.access(addr, size),
                reference.access(addr, size),
                "access {i} at {addr:#x}"
            );
        }
        assert_eq!(ll.tags(), reference.tags());
        let mru: Vec<u64> = reference
            .tags()
            .chunks_exact(geometry.assoc as usize)
            .map(|row| row[0])
            .collect();
        assert_eq!(mru_lines(&ll), mru);
    }

    /// Lines that share sets and revisit each other, with straddles, through both models.
    fn same_as_cache(geometry: CacheGeometry, high: u64) {
        let sets = u64::from(geometry.sets());
        let line = u64::from(geometry.line_size);
        let mut x: u64 = 12345;
        agree(
            geometry,
            (0..100_000u64).map(|i| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let region = (x >> 33) % 40;
                let base = if i > 50_000 && region == 0 { high } else { 0 };
                let addr = base + region * sets * line + ((x >> 20) % 4) * line + (x >> 60) * 4;
                (addr, 1 + (x >> 8) % 16)
            }),
        );
    }

    #[test]
    fn gives_the_results_of_the_wide_model() {
        same_as_cache(CacheGeometry::new(1 << 24, 16, 64), 0);
        same_as_cache(CacheGeometry::new(8192, 4, 32), 0);
        same_as_cache(CacheGeometry::new(6 << 20, 12, 128), 0);
        same_as_cache(CacheGeometry::new(1 << 22, 64, 64), 0);
        same_as_cache(CacheGeometry::new(3 << 12, 3, 64), 0);
        same_as_cache(CacheGeometry::new(4096, 1, 64), 0);
        same_as_cache(CacheGeometry::new(2048, 32, 64), 0);
    }

    /// Streams over `lines_per_set` lines in every set, again and again: with as many lines
    /// as ways every access hits the LRU way (the ring's cheapest case), with one more every
    /// access misses, with fewer the hits fall in the middle of the row.
    #[test]
    fn streams_hit_and_miss_as_in_the_wide_model() {
        for (size, assoc) in [(1 << 16, 16u32), (3 << 12, 3), (1 << 14, 64), (4096, 64)] {
            let g = CacheGeometry::new(size, assoc, 64);
            let sets = u64::from(g.sets());
            for lines_per_set in [assoc as u64, assoc as u64 + 1, assoc as u64 / 2 + 1] {
                let lines = sets * lines_per_set;
                agree(g, (0..6 * lines).map(|i| ((i % lines) * 64 + 8, 8)));
                // Backwards, so that a stream meets the row's far end first.
                agree(g, (0..6 * lines).map(|i| ((lines - 1 - i % lines) * 64, 4)));
            }
        }
    }

    #[test]
    fn ring_moves_the_line_to_the_front_like_the_shift() {
        // Every way of every rotation of a row of distinct tags, and a missing tag.
        for ways in 1..=9u32 {
            let ordered: Vec<u32> = (0..ways).map(|way| 100 + way).collect();
            for head in 0..ways as usize {
                let mut ring = ordered.clone();
                ring.rotate_right(head);
                for tag in (101..100 + ways).chain([7]) {
                    let mut shifted = ordered.clone();
                    let mut moved = ring.clone();
                    let (miss, new_head) = ring_ref_is_miss(&mut moved, head, tag);
                    assert_eq!(
                        miss,
                        set_ref_is_miss(&mut shifted, tag),
                        "{ways}/{head}/{tag}"
                    );
                    moved.rotate_left(new_head);
                    assert_eq!(moved, shifted, "{ways} ways, head {head}, tag {tag}");
                }
            }
        }
    }

    #[test]
    fn widens_for_a_line_past_the_narrow_range_and_still_agrees() {
        // 16 sets of 64 B: narrow tags cover addresses below 2^42.
        let g = CacheGeometry::new(4096, 4, 64);
        same_as_cache(g, 1 << 42);
        same_as_cache(g, !0xfff);
        let mut ll = LastLevel::new(g).expect("valid geometry");
        ll.access(1 << 42, 8);
        assert!(ll.is_wide);
    }

    #[test]
    fn line_zero_is_present_at_start_as_in_valgrind() {
        let g = CacheGeometry::new(8192, 4, 64);
        let mut ll = LastLevel::new(g).expect("valid geometry");
        let mut reference = Cache::new(g).expect("valid geometry");
        // Line 0 and the lines at the start of other sets' first tag; then enough lines of
        // set 0 to push Valgrind's copies of line 0 out, and line 0 again.
        let set0 = (1..6).map(|k| k * 0x800);
        for addr in [0u64, 64, 0x800, 0, 0x40 * 32 * 5]
            .into_iter()
            .chain(set0)
            .chain([0])
        {
            assert_eq!(ll.access(addr, 4), reference.access(addr, 4), "{addr:#x}");
            assert_eq!(ll.tags(), reference.tags(), "after {addr:#x}");
        }
        let meta = ll.mru_tags_ptr();
        ll.access(1 << 42, 8);
        ll.clear();
        assert_eq!(
            ll.mru_tags_ptr(),
            meta,
            "generated code keeps reading there"
        );
        assert_eq!(ll.tags(), LastLevel::new(g).expect("valid geometry").tags());
        assert!(!ll.is_wide);
        assert!(!ll.access(0, 1));
    }

    #[test]
    fn mru_tags_ptr_finds_each_sets_mru_line() {
        let g = CacheGeometry::new(1 << 24, 16, 64);
        let mut ll = LastLevel::new(g).expect("valid geometry");
        let sets = u64::from(g.sets());
        for addr in [0x1234_5678u64, 0x40, 0x7fff_0000, 0x40 * sets + 0x40] {
            ll.access(addr, 8);
            let (base, stride) = ll.mru_tags_ptr();
            assert_eq!((base, stride), (ll.mru.as_ptr(), 1));
            let set = (addr >> 6) & (sets - 1);
            assert_eq!(ll.mru[set as usize], addr >> 6);
        }
    }
}
