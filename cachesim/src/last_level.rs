//! The last-level cache: the same true-LRU model as [`crate::Cache`] (`cg_sim.c` 3.19), in a
//! layout only this crate reads and writes, made for a many-megabyte cache whose rows miss
//! the host's own caches.
//!
//! # Layout
//! * `mru`: each set's MRU line (full line number, `u64`), which generated code reads to count
//!   an L1 miss that hits LL's MRU way inline ([`LastLevel::mru_tags_ptr`]). A lookup that
//!   finds its line there changes nothing and reads nothing else.
//! * `narrow`: every set's ways, MRU first, as [`crate::Cache`]'s tags but *narrow*: a line's
//!   set bits are implied by its row, so a way holds `(line >> set_bits) + 1` in a `u32`
//!   (half the bytes per row: the simulator's cost on LL-bound programs is reading rows from
//!   host memory). `0` stands for Valgrind's start tag 0 in every set but 0, where it can
//!   never match; set 0's ways start as `1`, which is line 0, Valgrind's tag 0 there.
//! * A line whose narrow tag would not fit a `u32` (an address at or above `2^(32 +
//!   line_bits + set_bits)`, e.g. in the kernel's half) switches the cache to full `u64`
//!   tags for the rest of the run (`wide`); the results are the same either way. The wide
//!   array is made with the narrow one, so that the switch, which runs inside the
//!   simulator's slow path, allocates nothing; a large one is a mapping of its own, whose
//!   pages take no memory until the switch writes them.
//!
//! # Invariants
//! * `mru[s]` is always way 0 of set `s`'s row, decoded.
//! * Rows are `sets * assoc` entries; `set_mask == sets - 1`, `set_bits == log2(sets)`.

use crate::cache::{access_lines, set_ref_is_miss};
use crate::geometry::{CacheGeometry, CheckError};
use crate::raw::{as_tag_pairs, ZeroedArray};

/// The unified last-level cache of a [`crate::Hierarchy`].
pub struct LastLevel {
    geometry: CacheGeometry,
    set_mask: u64,
    set_bits: u32,
    assoc: usize,
    mru: Box<[u64]>,
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
        copy.narrow.copy_from_slice(&self.narrow);
        if self.is_wide {
            copy.wide.copy_from_slice(&self.wide);
            copy.is_wide = true;
        }
        copy
    }
}

/// The full line numbers of narrow rows of `assoc` ways (the set is the row's index).
fn decoded(narrow: &[u32], assoc: usize, set_bits: u32) -> impl Iterator<Item = u64> + '_ {
    let assoc = assoc.max(1);
    narrow.iter().enumerate().map(move |(i, &tag)| match tag {
        0 => 0,
        tag => (u64::from(tag - 1) << set_bits) | (i / assoc) as u64,
    })
}

/// [`set_ref_is_miss`] for a narrow row whose way 0 is known not to hold `tag` (the MRU copy
/// was compared first): two ways per `u64` word where the row is whole words, so that a row
/// of 64 ways, which a lookup reading its last way shifts entirely, takes 32 loads and
/// stores instead of 64. Integer registers only (the simulator's slow path may not touch
/// vector registers): the loop exits early, which keeps the compiler from vectorising it.
fn narrow_ref_is_miss(row: &mut [u32], tag: u32) -> bool {
    let Some(words) = as_tag_pairs(row) else {
        return set_ref_is_miss(row, tag);
    };
    // x86-64 is little-endian: a word's low half is the earlier (more recent) way.
    let mut carried = u64::from(tag);
    for word in words.iter_mut() {
        let pair = *word;
        if pair as u32 == tag {
            *word = (pair & !u64::from(u32::MAX)) | carried;
            return false;
        }
        *word = (pair << 32) | carried;
        carried = pair >> 32;
        if carried as u32 == tag {
            return false;
        }
    }
    true
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
        narrow
            .iter_mut()
            .take(assoc as usize)
            .for_each(|way| *way = 1);
        let wide = ZeroedArray::<u64>::new(ways).ok_or(too_big)?;
        let mru = vec![0u64; usize::try_from(sets).map_err(|_| too_big)?].into_boxed_slice();
        Ok(LastLevel {
            geometry,
            set_mask: sets - 1,
            set_bits: sets.trailing_zeros(),
            assoc: assoc as usize,
            mru,
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
    /// 0's and the distance between two sets' in tags (always 1). Heap memory that lives as
    /// long as the cache; it changes only through `access` and `clear`.
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
        let Some(mru) = self.mru.get_mut(set) else {
            // Unreachable: set <= set_mask < sets (invariant). A miss rather than a panic.
            return true;
        };
        if *mru == line {
            return false;
        }
        *mru = line;
        let start = set.wrapping_mul(self.assoc);
        let range = start..start.wrapping_add(self.assoc);
        let high = line >> self.set_bits;
        if high >= u64::from(u32::MAX) && !self.is_wide {
            self.widen();
        }
        if self.is_wide {
            self.wide
                .get_mut(range)
                .is_none_or(|row| set_ref_is_miss(row, line))
        } else {
            self.narrow
                .get_mut(range)
                .is_none_or(|row| narrow_ref_is_miss(row, high as u32 + 1))
        }
    }

    /// Switches to full line numbers (for a line whose narrow tag does not fit). Runs in the
    /// slow path: no allocation, and a loop the compiler cannot vectorise (`black_box`), as
    /// vector registers are not saved around it.
    #[cold]
    fn widen(&mut self) {
        let lines = decoded(&self.narrow, self.assoc, self.set_bits);
        for (wide, line) in self.wide.iter_mut().zip(lines) {
            *wide = line;
            core::hint::black_box(());
        }
        self.is_wide = true;
    }

    /// All tags as full line numbers (Valgrind's), row-major by set, way 0 = MRU (for
    /// inspection and tests).
    pub fn tags(&self) -> Vec<u64> {
        if self.is_wide {
            return self.wide.to_vec();
        }
        decoded(&self.narrow, self.assoc, self.set_bits).collect()
    }

    /// The tags of the set that `addr` maps to, MRU first, as full line numbers.
    pub fn set_of(&self, addr: u64) -> Vec<u64> {
        let set = (addr >> self.geometry.line_size.trailing_zeros()) & self.set_mask;
        self.tags()
            .chunks_exact(self.assoc.max(1))
            .nth(set as usize)
            .map(<[u64]>::to_vec)
            .unwrap_or_default()
    }

    /// Resets every tag to the start state.
    pub fn clear(&mut self) {
        if let Ok(empty) = LastLevel::new(self.geometry) {
            *self = empty;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Cache;

    /// Lines that share sets and revisit each other, with straddles, through both models.
    fn same_as_cache(geometry: CacheGeometry, high: u64) {
        let mut ll = LastLevel::new(geometry).expect("valid geometry");
        let mut reference = Cache::new(geometry).expect("valid geometry");
        let sets = u64::from(geometry.sets());
        let line = u64::from(geometry.line_size);
        let mut x: u64 = 12345;
        for i in 0..100_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let region = (x >> 33) % 40;
            let base = if i > 50_000 && region == 0 { high } else { 0 };
            let addr = base + region * sets * line + ((x >> 20) % 4) * line + (x >> 60) * 4;
            let size = 1 + (x >> 8) % 16;
            assert_eq!(
                ll.access(addr, size),
                reference.access(addr, size),
                "access {i}"
            );
        }
        assert_eq!(ll.tags(), reference.tags());
        let mru: Vec<u64> = reference
            .tags()
            .chunks_exact(geometry.assoc as usize)
            .map(|row| row[0])
            .collect();
        assert_eq!(&*ll.mru, &mru[..]);
    }

    #[test]
    fn gives_the_results_of_the_wide_model() {
        same_as_cache(CacheGeometry::new(1 << 24, 16, 64), 0);
        same_as_cache(CacheGeometry::new(8192, 4, 32), 0);
        same_as_cache(CacheGeometry::new(6 << 20, 12, 128), 0);
        same_as_cache(CacheGeometry::new(1 << 22, 64, 64), 0);
        same_as_cache(CacheGeometry::new(3 << 12, 3, 64), 0);
    }

    #[test]
    fn paired_ways_shift_as_single_ways_do() {
        for assoc in [2usize, 3, 8, 64] {
            let row: Vec<u32> = (0..assoc as u32).map(|way| 100 + way).collect();
            // Every way but the MRU one (which the caller has compared), and a missing tag.
            for tag in (101..100 + assoc as u32).chain([7]) {
                let (mut paired, mut single) = (row.clone(), row.clone());
                let miss = narrow_ref_is_miss(&mut paired, tag);
                assert_eq!(
                    miss,
                    set_ref_is_miss(&mut single, tag),
                    "{assoc} ways, {tag}"
                );
                assert_eq!(paired, single, "{assoc} ways, {tag}");
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
        // Line 0 and the lines at the start of other sets' first tag.
        for addr in [0u64, 64, 0x800, 0, 0x40 * 32 * 5] {
            assert_eq!(ll.access(addr, 4), reference.access(addr, 4), "{addr:#x}");
        }
        assert_eq!(ll.tags(), reference.tags());
        ll.clear();
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
            assert_eq!(ll.mru[((addr >> 6) & (sets - 1)) as usize], addr >> 6);
        }
    }
}
