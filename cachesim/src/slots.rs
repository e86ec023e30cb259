//! A set-associative true-LRU cache kept as slots with stamps instead of rows in recency
//! order: the I1, whose lines generated code finds again at a fixed place
//! (`docs/cachegrind.md`, thirty-third session).
//!
//! Each set is a row of `2 + 2 * assoc` words: the set's clock, one unused word, then per
//! way (slot) the line it holds and the stamp of its last use. A hit sets the line's stamp
//! to the set's clock plus one (the clock advancing with it); a miss puts the line in the
//! slot with the least stamp (the first such, going up). A line stays in its slot until it
//! is evicted, so code that fetches a fixed address can test the slot it found the line in
//! last time: two compares and two stores, no data-dependent branch.
//!
//! # Invariants
//! * Hits and misses are exactly those of [`crate::Cache`] (the ordered rows of Cachegrind's
//!   `cg_sim.c`) for every sequence of accesses: within a set, the order of the stamps of the
//!   lines used so far is their recency order, and the slots never used keep stamp 0 and
//!   line 0 — Cachegrind's start state, every tag 0, in which a line-0 access hits and the
//!   lines it has not yet pushed out are older than any used one. `cachesim/tests/lru_model.rs`
//!   compares the two on random sequences.
//! * A line is in at most one slot of its set, except line 0 before the start state's slots
//!   are all replaced; the slot a lookup finds is the first that holds the line.
//! * The words live in one allocation that never moves (below 2 GiB when the kernel allows):
//!   generated code keeps the addresses of slots and clocks.
//! * The geometry passed [`CacheGeometry::check`].
use crate::cache::access_lines;
use crate::geometry::{CacheGeometry, CheckError};
use crate::raw::ZeroedArray;

/// Words per slot: the line, then its stamp.
pub const SLOT_WORDS: u64 = 2;
/// Words before a set's first slot: its clock, then one unused word (slots 16-byte aligned).
pub const CLOCK_WORDS: u64 = 2;
// `SlotCache`'s rows are taken apart by pattern as clock, unused word, slots.
const _: () = assert!(CLOCK_WORDS == 2);

/// One cache level as slots with stamps (see the module documentation).
#[derive(Clone)]
pub struct SlotCache {
    words: ZeroedArray<u64>,
    geometry: CacheGeometry,
    set_mask: u64,
    line_bits: u32,
    /// `CLOCK_WORDS + assoc * SLOT_WORDS`.
    row_words: u64,
}

impl core::fmt::Debug for SlotCache {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SlotCache")
            .field("geometry", &self.geometry)
            .finish_non_exhaustive()
    }
}

/// Where one line was found or put: its slot's way in the set, and whether it missed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Touched {
    /// The slot's way in its set.
    pub way: u64,
    /// Whether the line was not there (it is now).
    pub missed: bool,
}

/// In a set's slots (line, stamp, line, stamp...): the way holding `line`, else the first
/// with the least stamp.
#[inline]
fn locate_in(slots: &[u64], line: u64) -> Result<u64, u64> {
    let mut lru = 0;
    let mut lru_stamp = u64::MAX;
    for (w, slot) in slots.chunks_exact(SLOT_WORDS as usize).enumerate() {
        if slot[0] == line {
            return Ok(w as u64);
        }
        if slot[1] < lru_stamp {
            (lru, lru_stamp) = (w as u64, slot[1]);
        }
    }
    Err(lru)
}

impl SlotCache {
    /// Builds an empty cache (every slot line 0, stamp 0) after checking the geometry like
    /// Valgrind.
    pub fn new(geometry: CacheGeometry) -> Result<SlotCache, CheckError> {
        geometry.check()?;
        let sets = u64::from(geometry.sets());
        let assoc = u64::from(geometry.assoc);
        let row_words = CLOCK_WORDS + assoc * SLOT_WORDS;
        let words = sets
            .checked_mul(row_words)
            .and_then(ZeroedArray::new_low)
            // The only failure left after check() is a size that does not fit (or memory
            // exhaustion), reported like `Cache::new` does.
            .ok_or(CheckError::SetCountNotPowerOfTwo)?;
        Ok(SlotCache {
            words,
            geometry,
            set_mask: sets - 1,
            line_bits: geometry.line_size.trailing_zeros(),
            row_words,
        })
    }

    /// The geometry this cache simulates.
    pub fn geometry(&self) -> CacheGeometry {
        self.geometry
    }

    /// `sets - 1`.
    pub fn set_mask(&self) -> u64 {
        self.set_mask
    }

    /// `log2(line_size)`.
    pub fn line_bits(&self) -> u32 {
        self.line_bits
    }

    /// Address of set 0's row: set `s`'s clock is at `base + s * row_bytes`, its way `w`'s
    /// line at `base + s * row_bytes + (CLOCK_WORDS + w * SLOT_WORDS) * 8`, the stamp 8
    /// bytes after the line.
    pub fn base(&self) -> u64 {
        self.words.as_ptr() as u64
    }

    /// Bytes from one set's row to the next.
    pub fn row_bytes(&self) -> u64 {
        self.row_words * 8
    }

    /// Address of the line word of way `way` of `line`'s set.
    pub fn slot_addr(&self, line: u64, way: u64) -> u64 {
        self.base() + ((line & self.set_mask) * self.row_words + CLOCK_WORDS + way * SLOT_WORDS) * 8
    }

    /// Set `set`'s row (`None` past the array: unreachable for `set <= set_mask`, as the
    /// array holds `sets` rows).
    fn row(&self, set: u64) -> Option<&[u64]> {
        self.words.get(self.row_range(set))
    }

    /// Where set `set`'s row lies in the words.
    fn row_range(&self, set: u64) -> core::ops::Range<usize> {
        let start = (set * self.row_words) as usize;
        start..start.wrapping_add(self.row_words as usize)
    }

    /// The way holding `line` (`Ok`), or else the way a miss of it would fill now (`Err`);
    /// no state changes.
    pub fn locate(&self, line: u64) -> Result<u64, u64> {
        match self.row(line & self.set_mask) {
            Some([_, _, slots @ ..]) => locate_in(slots, line),
            _ => Err(0),
        }
    }

    /// One line's lookup and LRU update (`cachesim_setref_is_miss`). Panic- and
    /// allocation-free.
    #[inline]
    pub fn touch(&mut self, line: u64) -> Touched {
        let row = self.row_range(line & self.set_mask);
        // No indexing or splitting that could panic: this runs on the fetch checks' slow path.
        let Some([clock, _, slots @ ..]) = self.words.get_mut(row) else {
            return Touched {
                way: 0,
                missed: true,
            };
        };
        *clock = clock.wrapping_add(1);
        let now = *clock;
        let (way, missed) = match locate_in(slots, line) {
            Ok(w) => (w, false),
            Err(w) => (w, true),
        };
        let at = (way * SLOT_WORDS) as usize;
        if let Some([l, stamp]) = slots.get_mut(at..at.wrapping_add(2)) {
            *l = line;
            *stamp = now;
        }
        Touched { way, missed }
    }

    /// One reference of `size` bytes at `addr`, as [`crate::Cache::access`]: `true` on a
    /// miss; a two-line access touches both lines, first line first. Panic- and
    /// allocation-free.
    #[inline]
    pub fn access(&mut self, addr: u64, size: u64) -> bool {
        let line_size = u64::from(self.geometry.line_size);
        access_lines(addr, size, line_size, |line| self.touch(line).missed)
    }

    /// The lines of the set `addr` maps to, most recently used first (as
    /// [`crate::Cache::set_of`] has them).
    pub fn set_of(&self, addr: u64) -> Vec<u64> {
        self.ordered_row((addr >> self.line_bits) & self.set_mask)
    }

    /// Every set's lines, most recently used first, set after set (as
    /// [`crate::Cache::tags`]).
    pub fn tags(&self) -> Vec<u64> {
        (0..=self.set_mask)
            .flat_map(|set| self.ordered_row(set))
            .collect()
    }

    fn ordered_row(&self, set: u64) -> Vec<u64> {
        let Some([_, _, slots @ ..]) = self.row(set) else {
            return Vec::new();
        };
        let mut slots: Vec<(u64, u64)> = slots
            .chunks_exact(SLOT_WORDS as usize)
            .map(|s| (s[0], s[1]))
            .collect();
        // Stable: the start state's slots (stamp 0) keep their order, all line 0.
        slots.sort_by_key(|s| core::cmp::Reverse(s.1));
        slots.into_iter().map(|(line, _)| line).collect()
    }

    /// Back to the start state (every slot line 0, stamp 0, every clock 0).
    pub fn clear(&mut self) {
        self.words.fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Cache;

    #[test]
    fn same_misses_and_order_as_the_ordered_rows() {
        let g = CacheGeometry::new(1024, 4, 64);
        let (mut slots, mut rows) = (
            SlotCache::new(g).expect("valid"),
            Cache::new(g).expect("valid"),
        );
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Few lines, so that sets fill and hits land at every depth; line 0 too.
            let addr = (x % 96) * 64 + (x >> 60);
            let size = 1 + (x >> 40) % 16;
            assert_eq!(slots.access(addr, size), rows.access(addr, size));
        }
        assert_eq!(slots.tags(), rows.tags());
    }

    #[test]
    fn a_line_keeps_its_slot_until_evicted() {
        let mut c = SlotCache::new(CacheGeometry::new(256, 2, 64)).expect("valid");
        // Two sets of two ways; lines 2, 4, 6 all map to set 0.
        let a = c.touch(2);
        assert!(a.missed);
        let b = c.touch(4);
        assert!(b.missed && b.way != a.way);
        assert_eq!(
            c.touch(2),
            Touched {
                way: a.way,
                missed: false
            }
        );
        // 4 is now the least recently used: 6 takes its slot.
        assert_eq!(
            c.touch(6),
            Touched {
                way: b.way,
                missed: true
            }
        );
        assert_eq!(c.locate(2), Ok(a.way));
        // 6 is the more recent: a miss of 4 would take the slot of 2.
        assert_eq!(c.locate(4), Err(a.way));
        assert_eq!(c.set_of(6 * 64), vec![6, 2]);
        c.clear();
        assert_eq!(c.set_of(6 * 64), vec![0, 0]);
    }
}
