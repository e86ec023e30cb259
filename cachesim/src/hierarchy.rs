//! The simulated hierarchy: I1 and D1 in front of one unified LL, with Cachegrind's miss
//! propagation (`cachesim_I1_doref_Gen` / `cachesim_D1_doref` in `cg_sim.c`, 3.19).
//!
//! # Invariants
//! * LL is consulted only on an L1 miss, with the *same* `(addr, size)`, so a straddling
//!   access probes both of its lines in LL even if only one missed in L1.
//! * Sizes are clamped to `1..=min_line_size` (the smallest of the three line sizes) before
//!   any level sees them, as Cachegrind clamps wide accesses; every level then touches at
//!   most two lines. Instruction fetches are one access of the instruction's length.
//! * No inclusion or back-invalidation: an L1 line may outlive its LL copy.
//! * State is per `Hierarchy` (no globals), so one per simulated thread is possible.
//!
//! # Not done here
//! No event counting: [`Outcome`] says which counters to bump (`Ir/Dr/Dw`, `X1m`, `XLm`).
//! No write-back or cache-use simulation (Callgrind's `--simulate-wb`, `--cacheuse`).

use core::mem::offset_of;

use crate::cache::Cache;
use crate::geometry::{CacheGeometry, CacheLevel, CheckError};
use crate::last_level::LastLevel;
use crate::raw::{FlatCache, OUTCOME_HIT, OUTCOME_L1_MISS, OUTCOME_LL_MISS};
use crate::slots::SlotCache;

/// The result of one reference.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Hit in I1/D1: count the access only.
    Hit = OUTCOME_HIT,
    /// Missed L1, hit LL: count `I1mr`/`D1mr`/`D1mw`.
    L1Miss = OUTCOME_L1_MISS,
    /// Missed both: count the L1 miss and `ILmr`/`DLmr`/`DLmw`.
    LlMiss = OUTCOME_LL_MISS,
}

impl Outcome {
    /// Decodes an `OUTCOME_*` code from the `extern "C"` entry points.
    pub fn from_code(code: u32) -> Option<Outcome> {
        match code {
            OUTCOME_HIT => Some(Outcome::Hit),
            OUTCOME_L1_MISS => Some(Outcome::L1Miss),
            OUTCOME_LL_MISS => Some(Outcome::LlMiss),
            _ => None,
        }
    }

    /// Whether L1 missed.
    pub fn l1_miss(self) -> bool {
        self != Outcome::Hit
    }

    /// Whether LL missed.
    pub fn ll_miss(self) -> bool {
        self == Outcome::LlMiss
    }
}

/// A geometry rejected when building a [`Hierarchy`] (bad input).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{level} cache {geometry}: {check}")]
pub struct HierarchyError {
    /// Which level.
    pub level: CacheLevel,
    /// The rejected geometry.
    pub geometry: CacheGeometry,
    /// Why.
    pub check: CheckError,
}

/// I1 + D1 + unified LL. Always boxed, so the I1 and the D1's flat part at
/// [`Hierarchy::D1_FLAT_OFFSET`] keep their addresses for generated code (which reads and
/// updates both itself: the D1's rows through [`Hierarchy::d1_flat_ptr_of`], the I1's slots
/// through [`Hierarchy::i1_ptr_of`]; LL only through [`LastLevel::mru_tags_ptr`]). The I1
/// is kept as slots with stamps ([`SlotCache`]), whose lines stay where they are until
/// evicted, the D1 as rows in recency order ([`Cache`]); both give Cachegrind's hits and
/// misses.
#[repr(C)]
#[derive(Clone, Debug)]
pub struct Hierarchy {
    i1: SlotCache,
    d1: Cache,
    ll: LastLevel,
    min_line_size: u64,
}

impl Hierarchy {
    /// Byte offset of D1's [`FlatCache`] inside a `Hierarchy`.
    pub const D1_FLAT_OFFSET: usize = offset_of!(Hierarchy, d1) + Self::CACHE_FLAT_OFFSET;
    const CACHE_FLAT_OFFSET: usize = Cache::FLAT_OFFSET;
    /// Byte offsets of the parts that [`Hierarchy::i1_ptr_of`], [`crate::raw::d1_part`] and
    /// [`crate::raw::ll_part`] reach without a reference to the whole hierarchy.
    pub(crate) const I1_OFFSET: usize = offset_of!(Hierarchy, i1);
    pub(crate) const D1_OFFSET: usize = offset_of!(Hierarchy, d1);
    pub(crate) const LL_OFFSET: usize = offset_of!(Hierarchy, ll);
    pub(crate) const MIN_LINE_OFFSET: usize = offset_of!(Hierarchy, min_line_size);

    /// Builds an empty hierarchy after checking each geometry like Valgrind.
    pub fn new(
        i1: CacheGeometry,
        d1: CacheGeometry,
        ll: CacheGeometry,
    ) -> Result<Box<Hierarchy>, HierarchyError> {
        let error = |level, geometry| {
            move |check| HierarchyError {
                level,
                geometry,
                check,
            }
        };
        let i1 = SlotCache::new(i1).map_err(error(CacheLevel::I1, i1))?;
        let d1 = Cache::new(d1).map_err(error(CacheLevel::D1, d1))?;
        let ll = LastLevel::new(ll).map_err(error(CacheLevel::LL, ll))?;
        let min_line_size = [i1.geometry(), d1.geometry(), ll.geometry()]
            .iter()
            .map(|g| u64::from(g.line_size))
            .min()
            .unwrap_or(u64::from(crate::geometry::MIN_LINE_SIZE));
        Ok(Box::new(Hierarchy {
            i1,
            d1,
            ll,
            min_line_size,
        }))
    }

    /// The size actually simulated for an access of `size` bytes: `1..=min_line_size`. The
    /// inline check must use this size too.
    #[inline]
    pub fn clamp_size(&self, size: u64) -> u64 {
        size.max(1).min(self.min_line_size)
    }

    /// Smallest line size of the three levels.
    pub fn min_line_size(&self) -> u64 {
        self.min_line_size
    }

    /// The instruction cache.
    pub fn i1(&self) -> &SlotCache {
        &self.i1
    }

    /// The data cache.
    pub fn d1(&self) -> &Cache {
        &self.d1
    }

    /// The unified last-level cache.
    pub fn ll(&self) -> &LastLevel {
        &self.ll
    }

    /// Raw pointer to D1's flat part.
    pub fn d1_flat_ptr(&self) -> *const FlatCache {
        self.d1.flat_ptr()
    }

    /// The D1's flat part inside the hierarchy at `hierarchy`, computed by byte offset only
    /// (no reference is created), as generated code does it. Use this with a pointer from
    /// `Box::into_raw` so that the flat pointers and the `*mut Hierarchy` handed to the
    /// slow paths share one provenance.
    pub fn d1_flat_ptr_of(hierarchy: *const Hierarchy) -> *const FlatCache {
        Self::part_ptr(hierarchy.cast_mut(), Self::D1_FLAT_OFFSET)
    }

    /// The part at byte `offset` (one of the `*_OFFSET`s) of the hierarchy at `hierarchy`,
    /// by pointer arithmetic only: no reference to the whole hierarchy is created.
    pub(crate) fn part_ptr<T>(hierarchy: *mut Hierarchy, offset: usize) -> *mut T {
        hierarchy.cast::<u8>().wrapping_add(offset).cast::<T>()
    }

    /// The I1 inside the hierarchy at `hierarchy`, by byte offset only (as
    /// [`Hierarchy::d1_flat_ptr_of`]): what [`crate::raw::slots_touch`] and
    /// [`crate::raw::slots_locate`] take.
    pub fn i1_ptr_of(hierarchy: *mut Hierarchy) -> *mut SlotCache {
        Self::part_ptr(hierarchy, Self::I1_OFFSET)
    }

    /// An instruction fetch: one I1 access of the instruction's length (a zero length counts
    /// as 1, as Cachegrind does for undecodable instructions), then LL on an I1 miss.
    /// Panic- and allocation-free.
    #[inline]
    pub fn fetch(&mut self, addr: u64, size: u64) -> Outcome {
        let size = self.clamp_size(size);
        let l1_miss = self.i1.access(addr, size);
        Self::behind(l1_miss, &mut self.ll, addr, size)
    }

    /// A data access (load, store or modify, all the same): D1, then LL on a D1 miss.
    /// Panic- and allocation-free.
    #[inline]
    pub fn data(&mut self, addr: u64, size: u64) -> Outcome {
        let size = self.clamp_size(size);
        let l1_miss = self.d1.access(addr, size);
        Self::behind(l1_miss, &mut self.ll, addr, size)
    }

    /// The LL part of an access whose L1 lookup (of a single-line access) has already been
    /// done and missed, with the L1 tags already updated — by inline code that does the L1
    /// LRU update itself ([`crate::raw::l1_lookup_raw`] is the reference). Returns
    /// [`Outcome::L1Miss`] or [`Outcome::LlMiss`]; `data`/`fetch` of the same access would have
    /// returned the same. Panic- and allocation-free.
    #[inline]
    pub fn ll_after_l1_miss(&mut self, addr: u64, size: u64) -> Outcome {
        let size = self.clamp_size(size);
        if !self.ll.access(addr, size) {
            Outcome::L1Miss
        } else {
            Outcome::LlMiss
        }
    }

    #[inline]
    fn behind(l1_miss: bool, ll: &mut LastLevel, addr: u64, size: u64) -> Outcome {
        if !l1_miss {
            Outcome::Hit
        } else if !ll.access(addr, size) {
            Outcome::L1Miss
        } else {
            Outcome::LlMiss
        }
    }

    /// Resets all three caches to the start state (all tags 0).
    pub fn clear(&mut self) {
        self.i1.clear();
        self.d1.clear();
        self.ll.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Box<Hierarchy> {
        // I1/D1: 1 KiB, 2-way, 64 B (8 sets). LL: 8 KiB, 4-way, 64 B (32 sets).
        Hierarchy::new(
            CacheGeometry::new(1024, 2, 64),
            CacheGeometry::new(1024, 2, 64),
            CacheGeometry::new(8192, 4, 64),
        )
        .expect("valid")
    }

    fn walk_data(h: &mut Hierarchy, base: u64, len: u64, stride: u64) -> [u64; 3] {
        let mut n = [0u64; 3];
        let mut a = base;
        while a < base + len {
            n[h.data(a, 8) as usize] += 1;
            a += stride;
        }
        n
    }

    #[test]
    fn rejects_bad_level_with_its_name() {
        let err = Hierarchy::new(
            CacheGeometry::new(1024, 2, 64),
            CacheGeometry::new(1000, 3, 64),
            CacheGeometry::new(8192, 4, 64),
        )
        .err();
        assert_eq!(
            err.map(|e| e.to_string()),
            Some("D1 cache 1000,3,64: Cache set count is not a power of two.".to_string())
        );
    }

    #[test]
    fn buffer_fitting_l1_misses_once_per_line_in_both_levels() {
        let mut h = small();
        // 512 B = 8 lines: cold misses in D1 and LL.
        assert_eq!(walk_data(&mut h, 0x10000, 512, 8), [64 - 8, 0, 8]);
        assert_eq!(walk_data(&mut h, 0x10000, 512, 8), [64, 0, 0]);
    }

    #[test]
    fn buffer_between_l1_and_ll_misses_l1_only_after_warmup() {
        let mut h = small();
        // 4 KiB = 64 lines: bigger than D1 (16 lines), fits in LL (128 lines).
        assert_eq!(walk_data(&mut h, 0x20000, 4096, 64), [0, 0, 64]);
        assert_eq!(walk_data(&mut h, 0x20000, 4096, 64), [0, 64, 0]);
        assert_eq!(walk_data(&mut h, 0x20000, 4096, 8), [448, 64, 0]);
    }

    #[test]
    fn buffer_larger_than_ll_misses_everywhere() {
        let mut h = small();
        // 16 KiB = 256 lines, twice LL: LRU thrash at both levels.
        assert_eq!(walk_data(&mut h, 0x40000, 16384, 64), [0, 0, 256]);
        assert_eq!(walk_data(&mut h, 0x40000, 16384, 64), [0, 0, 256]);
    }

    #[test]
    fn ll_is_unified_between_code_and_data() {
        let mut h = small();
        assert_eq!(h.data(0x9000, 8), Outcome::LlMiss);
        // Same line fetched as code: I1 misses, LL hits (reference §3.3, test:dead.S).
        assert_eq!(h.fetch(0x9010, 4), Outcome::L1Miss);
        assert_eq!(h.fetch(0x9010, 4), Outcome::Hit);
    }

    #[test]
    fn ll_not_probed_on_l1_hit() {
        let mut h = small();
        // Warm a line in D1 and LL, then evict it from LL only using I-fetches that conflict
        // in LL's set but not in D1 (which they never touch).
        assert_eq!(h.data(0x0, 8), Outcome::Hit); // line 0 hits initially everywhere
        assert_eq!(h.data(0x100_0000, 8), Outcome::LlMiss);
        let ll_stride = 32 * 64u64;
        for k in 1..=4 {
            h.fetch(0x100_0000 + k * ll_stride, 1);
        }
        // D1 still hits, so LL is never asked and its miss is not seen.
        assert_eq!(h.data(0x100_0000, 8), Outcome::Hit);
        let ll_line = 0x100_0000u64 >> 6;
        assert!(!h.ll().set_of(0x100_0000).contains(&ll_line));
    }

    #[test]
    fn straddle_probes_both_lines_in_ll() {
        let mut h = small();
        // Line A = 0x30000 (D1 warm, LL warm), line B = 0x30040 cold everywhere.
        assert_eq!(h.data(0x30000, 8), Outcome::LlMiss);
        assert_eq!(h.data(0x3003c, 8), Outcome::LlMiss, "B missed in LL");
        // Both lines are now in D1 and LL; LL saw A touched again (MRU of its set).
        assert_eq!(h.data(0x3003c, 8), Outcome::Hit);
        let a = 0x30000u64 >> 6;
        assert_eq!(h.ll().set_of(0x30000)[0], a);
    }

    #[test]
    fn instruction_spanning_two_lines_is_one_fetch() {
        let mut h = small();
        assert_eq!(h.fetch(0x5003e, 5), Outcome::LlMiss);
        assert_eq!(h.fetch(0x50040, 4), Outcome::Hit);
        assert_eq!(h.fetch(0x5003c, 2), Outcome::Hit);
        // Line 1 warm, line 2 cold: still one miss.
        assert_eq!(h.fetch(0x5007e, 3), Outcome::LlMiss);
    }

    #[test]
    fn sizes_are_clamped_to_min_line() {
        let h = Hierarchy::new(
            CacheGeometry::new(32768, 8, 64),
            CacheGeometry::new(32768, 8, 32),
            CacheGeometry::new(1 << 20, 16, 128),
        )
        .expect("valid");
        assert_eq!(h.min_line_size(), 32);
        assert_eq!(h.clamp_size(0), 1);
        assert_eq!(h.clamp_size(512), 32);
        assert_eq!(h.clamp_size(19), 19);
    }

    #[test]
    fn writes_allocate_in_both_levels() {
        let mut h = small();
        assert_eq!(h.data(0x60000, 8), Outcome::LlMiss); // a store
        assert_eq!(h.data(0x60008, 8), Outcome::Hit); // a load of the same line
        h.clear();
        assert_eq!(h.data(0x60008, 8), Outcome::LlMiss);
    }

    #[test]
    fn outcome_codes_round_trip() {
        for o in [Outcome::Hit, Outcome::L1Miss, Outcome::LlMiss] {
            assert_eq!(Outcome::from_code(o as u32), Some(o));
        }
        assert_eq!(Outcome::from_code(3), None);
        assert!(Outcome::LlMiss.l1_miss() && Outcome::LlMiss.ll_miss());
        assert!(Outcome::L1Miss.l1_miss() && !Outcome::L1Miss.ll_miss());
    }

    #[test]
    fn flat_offsets_point_at_the_flat_parts() {
        let h = small();
        let base = (&*h as *const Hierarchy).cast::<u8>();
        assert_eq!(
            base.wrapping_add(Hierarchy::D1_FLAT_OFFSET)
                .cast::<FlatCache>(),
            h.d1_flat_ptr()
        );
        assert_eq!(Hierarchy::d1_flat_ptr_of(&*h), h.d1_flat_ptr());
    }
}
