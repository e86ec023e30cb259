//! The only module with `unsafe`: the flat `#[repr(C)]` cache layout that generated code
//! reads, its raw-pointer-owned tag array, and the `extern "C"` slow-path entry points.
//!
//! # Invariants
//! * [`FlatCache::tags`] points to an allocation of exactly `len = sets * row_ways` `u64`s
//!   (`row_ways` = `assoc` rounded up to a power of two) that
//!   the `FlatCache` owns (an anonymous mapping of its own when `mapped` is set, else a leaked
//!   `Box<[u64]>`; freed in `Drop`), so the pointer stays valid and fixed for the
//!   `FlatCache`'s whole life, wherever the struct moves.
//! * `set_mask == sets - 1` with `sets` a power of two, `assoc >= 1`, `line_bits < 64`, and
//!   `row_bytes == row_ways * 8` with `assoc <= row_ways`: so for any address,
//!   `(line & set_mask) * row_ways + w < len` for every way `w < assoc`. The entries of a
//!   row past its `assoc` ways stay 0 and are never read as ways. `FlatCache::new` is the
//!   only constructor.
//! * Rust code reaches the tags only through [`FlatCache::tags`] / `FlatCache::tags_mut`,
//!   which derive short-lived slices from the raw pointer; no `Box` or `Vec` keeps a
//!   uniqueness claim on the allocation, so the raw pointer handed to generated code is
//!   never invalidated by Rust-side accesses.
//!
//! # Entry points (called from generated code)
//! [`cachesim_fetch`], [`cachesim_data`], [`cachesim_ll_after_l1_miss`],
//! [`cachesim_cond_branch`] and [`cachesim_ind_branch`] take a raw pointer to their model
//! plus plain integers and return a small integer. They allocate nothing, take no lock, touch
//! no thread-local storage and contain no panicking operation (no indexing that can fail, no
//! arithmetic that can overflow-check, no `unwrap`): the code they reach is `Cache::access`,
//! `Hierarchy::{fetch,data,ll_after_l1_miss}` and `BranchPredictor::{cond,indirect}`,
//! written with iterators, masks and wrapping arithmetic only. [`l1_lookup_raw`] is the
//! reference for the L1 lookup generated code may do itself (tested against the model).
//!
//! # Not done here
//! No simulation logic beyond `l1_lookup_raw` (the generated code's algorithm spelled out over
//! the raw layout): it lives in safe code (`cache.rs`, `hierarchy.rs`, `branch.rs`).
#![allow(unsafe_code)]

use core::mem::offset_of;
use core::ptr::NonNull;

use crate::branch::BranchPredictor;
use crate::cache::Cache;
use crate::hierarchy::Hierarchy;
use crate::last_level::LastLevel;
use crate::slots::SlotCache;

/// The part of one cache level that inline code reads: `#[repr(C)]`, field offsets below.
///
/// Tag array layout: `sets` rows of `row_bytes / 8` `u64`s, row-major by set, way 0 of each
/// row = MRU, the ways past `assoc` unused. A tag is the full line number `addr >> line_bits`
/// (not the usual high bits), all tags start as 0, exactly as in Cachegrind. Rows are a
/// power of two of bytes (a 12-way row is 128 bytes, 32 of them padding): generated code
/// then finds a set's row from `(line & set_mask) << line_bits` with an addressing mode's
/// scale instead of a multiplication or two more instructions per check.
///
/// The inline MRU check (a hit changes no state, so it needs no write):
///
/// ```text
/// line = addr >> line_bits
/// if ((addr + size - 1) >> line_bits) == line            // within one line
///    && tags[(line & set_mask) * row_bytes / 8] == line   // MRU way of its set
/// { hit: nothing to do }
/// else { outcome = cachesim_data(hierarchy, addr, size) } // or cachesim_fetch
/// ```
///
/// (`addr + size - 1` wraps; `size` must already be clamped to `1..=min_line_size`, see
/// [`Hierarchy::clamp_size`].)
#[repr(C)]
#[derive(Debug)]
pub struct FlatCache {
    /// Start of the tag array (owned).
    tags: NonNull<u64>,
    /// `sets - 1`.
    set_mask: u64,
    /// `log2(line_size)`.
    line_bits: u64,
    /// Ways per set.
    assoc: u64,
    /// `assoc` rounded up to a power of two, times 8: bytes per set row.
    row_bytes: u64,
    /// `sets * row_bytes / 8`: number of entries.
    len: u64,
    /// Whether `tags` is a mapping of its own (else a leaked box).
    mapped: bool,
}

/// Tag arrays up to this size (every L1 in practice) are mapped below 2 GiB when the kernel
/// allows, so that generated code can address them with a 32-bit displacement
/// (`FlatCache::tags_ptr() as u64 < 1 << 31`) instead of loading a 64-bit constant.
const LOW_TAGS_MAX_BYTES: u64 = 1 << 20;

/// Tag arrays from this size on (an LL) get a mapping of their own with transparent huge
/// pages: the LL's accesses land on random sets of a many-megabyte array, and with 4 KiB
/// pages each is a TLB miss too.
const HUGE_TAGS_MIN_BYTES: u64 = 2 << 20;

/// Element types whose all-zero bit pattern is a valid value (so a zero-filled allocation is
/// an initialised array of them).
pub(crate) trait ZeroIsValid: Copy {}
impl ZeroIsValid for u32 {}
impl ZeroIsValid for u64 {}

/// An all-zero array of `len` `T`s: (pointer, whether it is a mapping of its own). `low`
/// allows the below-2-GiB mapping for small arrays (what generated code addresses).
fn alloc_zeroed<T: ZeroIsValid>(len: u64, low: bool) -> Option<(NonNull<T>, bool)> {
    let bytes = usize::try_from(len.checked_mul(core::mem::size_of::<T>() as u64)?).ok()?;
    let low = low && bytes > 0 && bytes as u64 <= LOW_TAGS_MAX_BYTES;
    if low || bytes as u64 >= HUGE_TAGS_MIN_BYTES {
        let where_ = if low { libc::MAP_32BIT } else { 0 };
        // SAFETY: a fresh private anonymous mapping (no file, no fixed address): it cannot
        // alias any existing Rust object. The kernel zero-fills it.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | where_,
                -1,
                0,
            )
        };
        if p != libc::MAP_FAILED {
            if !low {
                // SAFETY: advice on the mapping just made (only a hint; failure is harmless).
                unsafe { libc::madvise(p, bytes, libc::MADV_HUGEPAGE) };
            }
            if let Some(p) = NonNull::new(p.cast::<T>()) {
                return Some((p, true));
            }
        }
    }
    // SAFETY: `T: ZeroIsValid`, so zeroed memory is a valid `T`.
    let boxed: Box<[T]> =
        vec![unsafe { core::mem::zeroed::<T>() }; usize::try_from(len).ok()?].into_boxed_slice();
    Some((NonNull::from(Box::leak(boxed)).cast::<T>(), false))
}

/// Frees what `alloc_zeroed::<T>(len, _)` returned as `(ptr, mapped)`.
///
/// # Safety
/// `ptr`, `len` and `mapped` must be exactly one result of `alloc_zeroed` (with its `len`),
/// freed only once, with nothing referring to the array afterwards.
unsafe fn free_zeroed<T: ZeroIsValid>(ptr: NonNull<T>, len: u64, mapped: bool) {
    if mapped {
        // SAFETY: (caller) the start of a mapping of `len * size_of::<T>()` bytes.
        unsafe {
            libc::munmap(
                ptr.as_ptr().cast(),
                len as usize * core::mem::size_of::<T>(),
            )
        };
        return;
    }
    let slice = core::ptr::slice_from_raw_parts_mut(ptr.as_ptr(), len as usize);
    // SAFETY: (caller) a leaked `Box<[T]>` of length `len`.
    drop(unsafe { Box::from_raw(slice) });
}

/// An owned, zero-initialised array for the simulator's own tables (the LL's rows): like a
/// `Box<[T]>`, but a large one gets a mapping of its own with transparent huge pages (see
/// `HUGE_TAGS_MIN_BYTES`).
pub(crate) struct ZeroedArray<T: ZeroIsValid> {
    ptr: NonNull<T>,
    len: u64,
    mapped: bool,
    /// Whether it was asked for below 2 GiB (`new_low`); a clone is asked for the same.
    low: bool,
}

impl<T: ZeroIsValid> ZeroedArray<T> {
    /// `len` zeros; `None` if the size overflows or memory is exhausted.
    pub(crate) fn new(len: u64) -> Option<Self> {
        Self::alloc(len, false)
    }

    /// Like `new`, below 2 GiB when it is small enough and the kernel allows (what generated
    /// code addresses with a 32-bit displacement).
    pub(crate) fn new_low(len: u64) -> Option<Self> {
        Self::alloc(len, true)
    }

    fn alloc(len: u64, low: bool) -> Option<Self> {
        let (ptr, mapped) = alloc_zeroed::<T>(len, low)?;
        Some(ZeroedArray {
            ptr,
            len,
            mapped,
            low,
        })
    }

    /// The first element's address.
    pub(crate) fn as_ptr(&self) -> *const T {
        self.ptr.as_ptr()
    }
}

impl<T: ZeroIsValid> core::ops::Deref for ZeroedArray<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` points to `len` initialised `T`s owned by `self`; the shared borrow
        // of `self` excludes `deref_mut` for the slice's lifetime.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len as usize) }
    }
}

impl<T: ZeroIsValid> core::ops::DerefMut for ZeroedArray<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, and `&mut self` guarantees no other borrow exists.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len as usize) }
    }
}

impl<T: ZeroIsValid> Clone for ZeroedArray<T> {
    fn clone(&self) -> Self {
        let Some(mut copy) = ZeroedArray::alloc(self.len, self.low) else {
            // This size was allocated already; only memory exhaustion gets here.
            std::alloc::handle_alloc_error(std::alloc::Layout::new::<T>());
        };
        copy.copy_from_slice(self);
        copy
    }
}

impl<T: ZeroIsValid> Drop for ZeroedArray<T> {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len`/`mapped` came from `alloc_zeroed` in `new`, freed only here.
        unsafe { free_zeroed(self.ptr, self.len, self.mapped) };
    }
}

// SAFETY: a ZeroedArray uniquely owns its allocation, like a Box<[T]> of plain integers.
unsafe impl<T: ZeroIsValid + Send> Send for ZeroedArray<T> {}
// SAFETY: `&ZeroedArray` only gives read access, like `&Box<[T]>`.
unsafe impl<T: ZeroIsValid + Sync> Sync for ZeroedArray<T> {}

// SAFETY: a FlatCache uniquely owns its tag allocation (like a Box<[u64]>), and the pointer
// is not shared with another FlatCache, so moving it to another thread moves the ownership.
unsafe impl Send for FlatCache {}
// SAFETY: `&FlatCache` only gives read access to the tags (`tags()`), like `&Box<[u64]>`.
unsafe impl Sync for FlatCache {}

impl FlatCache {
    /// Byte offset of the tag-array pointer (`*const u64`).
    pub const TAGS_OFFSET: usize = offset_of!(FlatCache, tags);
    /// Byte offset of `set_mask` (`u64`).
    pub const SET_MASK_OFFSET: usize = offset_of!(FlatCache, set_mask);
    /// Byte offset of `line_bits` (`u64`, the shift count).
    pub const LINE_BITS_OFFSET: usize = offset_of!(FlatCache, line_bits);
    /// Byte offset of `assoc` (`u64`).
    pub const ASSOC_OFFSET: usize = offset_of!(FlatCache, assoc);
    /// Byte offset of `row_bytes` (`u64`, bytes per row: `assoc` rounded up to a power of
    /// two, times 8).
    pub const ROW_BYTES_OFFSET: usize = offset_of!(FlatCache, row_bytes);

    /// Allocates an all-zero tag array for `sets` (a power of two) × `assoc` ways.
    /// Returns `None` if the parameters break the invariants or the size overflows.
    pub(crate) fn new(sets: u64, assoc: u64, line_bits: u32) -> Option<FlatCache> {
        if !sets.is_power_of_two() || assoc == 0 || line_bits >= 64 {
            return None;
        }
        let row_ways = assoc.checked_next_power_of_two()?;
        let len = sets.checked_mul(row_ways)?;
        let row_bytes = row_ways.checked_mul(8)?;
        let (tags, mapped) = alloc_zeroed::<u64>(len, true)?;
        Some(FlatCache {
            tags,
            set_mask: sets - 1,
            line_bits: u64::from(line_bits),
            assoc,
            row_bytes,
            len,
            mapped,
        })
    }

    /// The whole array: rows of `row_bytes / 8` entries by set, way 0 = MRU, the entries past
    /// `assoc` 0.
    pub fn tags(&self) -> &[u64] {
        // SAFETY: `tags` points to `len` initialised u64s owned by `self` (module
        // invariant); the shared borrow of `self` prevents `tags_mut` for its lifetime.
        unsafe { core::slice::from_raw_parts(self.tags.as_ptr(), self.len as usize) }
    }

    /// All tags, mutable (only the safe simulator in `cache.rs` uses this).
    pub(crate) fn tags_mut(&mut self) -> &mut [u64] {
        // SAFETY: as in `tags`, and `&mut self` guarantees no other Rust borrow exists. The
        // slice is derived from the raw pointer, which therefore stays valid afterwards.
        unsafe { core::slice::from_raw_parts_mut(self.tags.as_ptr(), self.len as usize) }
    }

    /// Raw pointer to the tag array (what `TAGS_OFFSET` holds).
    pub fn tags_ptr(&self) -> *const u64 {
        self.tags.as_ptr()
    }

    /// `sets - 1`.
    pub fn set_mask(&self) -> u64 {
        self.set_mask
    }

    /// `log2(line_size)`.
    pub fn line_bits(&self) -> u32 {
        self.line_bits as u32
    }

    /// Ways per set.
    pub fn assoc(&self) -> u64 {
        self.assoc
    }

    /// Bytes per set row: `assoc` rounded up to a power of two, times 8.
    pub fn row_bytes(&self) -> u64 {
        self.row_bytes
    }

    /// Entries per set row (`row_bytes / 8`): the index of set `s`'s way 0 is `s * row_ways`.
    pub fn row_ways(&self) -> u64 {
        self.row_bytes / 8
    }
}

impl Clone for FlatCache {
    /// A deep copy: a new tag array with the same contents (e.g. for a forked child).
    fn clone(&self) -> Self {
        let Some((tags, mapped)) = alloc_zeroed::<u64>(self.len, true) else {
            // `new` allocated this size already; only memory exhaustion gets here.
            std::alloc::handle_alloc_error(std::alloc::Layout::new::<u64>());
        };
        let mut copy = FlatCache {
            tags,
            mapped,
            ..*self
        };
        copy.tags_mut().copy_from_slice(self.tags());
        copy
    }
}

impl Drop for FlatCache {
    fn drop(&mut self) {
        // SAFETY: `tags`/`len`/`mapped` came from `alloc_zeroed::<u64>` in `new` or `clone`
        // and are freed only here, once; nothing refers to the array after `drop`.
        unsafe { free_zeroed(self.tags, self.len, self.mapped) };
    }
}

/// The inline MRU check, done through the raw flat layout exactly as generated code does it.
/// `true` means "hit in the MRU way, nothing to do"; `false` means "call the slow path".
///
/// # Safety
/// `flat` must point to a live [`FlatCache`] (e.g. from [`crate::Cache::flat_ptr`]) that no
/// one mutates during the call.
#[inline]
pub unsafe fn mru_hit_raw(flat: *const FlatCache, addr: u64, size: u64) -> bool {
    // SAFETY: the caller guarantees `flat` is valid for reads.
    let f = unsafe { &*flat };
    let line = addr >> f.line_bits;
    let last = addr.wrapping_add(size).wrapping_sub(1) >> f.line_bits;
    let idx = (line & f.set_mask) * f.row_ways();
    // SAFETY: `idx = set * row_ways` with `set <= set_mask`, so `idx < sets * row_ways =
    // len` (module invariant); the allocation is live as long as `*flat` is.
    last == line && unsafe { *f.tags.as_ptr().add(idx as usize) } == line
}

/// Outcome code returned by the entry points: hit in L1.
pub const OUTCOME_HIT: u32 = 0;
/// Outcome code: L1 miss, LL hit.
pub const OUTCOME_L1_MISS: u32 = 1;
/// Outcome code: L1 miss and LL miss.
pub const OUTCOME_LL_MISS: u32 = 2;

/// Slow path for an instruction fetch of `size` bytes at `addr`: I1, then LL on an I1 miss.
/// Returns [`OUTCOME_HIT`], [`OUTCOME_L1_MISS`] or [`OUTCOME_LL_MISS`].
///
/// # Safety
/// `hierarchy` must point to a live [`Hierarchy`] that nothing else accesses during the call
/// (one hierarchy per thread; generated code is the only user while it runs).
pub unsafe extern "C" fn cachesim_fetch(hierarchy: *mut Hierarchy, addr: u64, size: u64) -> u32 {
    // SAFETY: the caller guarantees a valid, exclusively accessible Hierarchy.
    let h = unsafe { &mut *hierarchy };
    h.fetch(addr, size) as u32
}

/// Slow path for a data access (load, store or modify: all are the same) of `size` bytes at
/// `addr`: D1, then LL on a D1 miss. Returns an `OUTCOME_*` code.
///
/// # Safety
/// As for [`cachesim_fetch`].
pub unsafe extern "C" fn cachesim_data(hierarchy: *mut Hierarchy, addr: u64, size: u64) -> u32 {
    // SAFETY: the caller guarantees a valid, exclusively accessible Hierarchy.
    let h = unsafe { &mut *hierarchy };
    h.data(addr, size) as u32
}

/// The LL part of a data access or instruction fetch whose L1 lookup inline code has already
/// done and recorded as a miss (see [`l1_lookup_raw`]): LL only. Returns [`OUTCOME_L1_MISS`]
/// (LL hit) or [`OUTCOME_LL_MISS`].
///
/// # Safety
/// As for [`cachesim_fetch`].
pub unsafe extern "C" fn cachesim_ll_after_l1_miss(
    hierarchy: *mut Hierarchy,
    addr: u64,
    size: u64,
) -> u32 {
    // SAFETY: the caller guarantees a valid, exclusively accessible Hierarchy.
    let h = unsafe { &mut *hierarchy };
    h.ll_after_l1_miss(addr, size) as u32
}

/// The D1 part alone of [`Hierarchy::data`]: `true` on a D1 miss, whose LL part
/// [`ll_part`] does, in the same order relative to the other LL parts. Reaches the D1 by
/// offset, without a reference to the whole hierarchy, so that another thread may run LL
/// parts meanwhile. (The I1's Rust-side part is [`slots_touch`].) Panic- and
/// allocation-free.
///
/// # Safety
/// `hierarchy` points to a live hierarchy (from `Box::into_raw`) whose D1 nothing else
/// accesses during the call.
#[inline]
pub unsafe fn d1_part(hierarchy: *mut Hierarchy, addr: u64, size: u64) -> bool {
    // SAFETY: (caller) live, and the D1, a `Cache` at its offset, is ours alone for the call.
    unsafe {
        let size = clamped_size(hierarchy, size);
        let d1 = &mut *Hierarchy::part_ptr::<Cache>(hierarchy, Hierarchy::D1_OFFSET);
        d1.access(addr, size)
    }
}

/// The L1 part of an instruction fetch for one line, for generated code that keeps where
/// the line was ([`SlotCache::touch`]): the address of the slot that now holds `line`
/// (its line word; 16-byte aligned), plus 1 if it missed. Panic- and allocation-free.
///
/// # Safety
/// `cache` is [`Hierarchy::i1_ptr_of`] of a live hierarchy whose I1 nothing else accesses
/// during the call.
pub unsafe extern "C" fn slots_touch(cache: u64, line: u64) -> u64 {
    // SAFETY: (caller) a live SlotCache, ours alone for the call.
    let c = unsafe { &mut *(cache as *mut SlotCache) };
    let t = c.touch(line);
    c.slot_addr(line, t.way) | u64::from(t.missed)
}

/// The address of the slot that holds `line` (its line word), or else of the one a miss of
/// it would fill now; changes nothing.
///
/// # Safety
/// `cache` is [`Hierarchy::i1_ptr_of`] of a live hierarchy that nothing writes during the
/// call.
pub unsafe extern "C" fn slots_locate(cache: u64, line: u64) -> u64 {
    // SAFETY: (caller) a live SlotCache, not written meanwhile.
    let c = unsafe { &*(cache as *const SlotCache) };
    let (Ok(way) | Err(way)) = c.locate(line);
    c.slot_addr(line, way)
}

/// The LL part of an access whose L1 part missed ([`d1_part`], or generated code): `true`
/// on an LL miss.
/// Panic- and allocation-free.
///
/// # Safety
/// `hierarchy` points to a live hierarchy whose LL nothing else accesses during the call.
#[inline]
pub unsafe fn ll_part(hierarchy: *mut Hierarchy, addr: u64, size: u64) -> bool {
    // SAFETY: (caller) live, and the LL at its offset is ours alone for the call.
    unsafe {
        let size = clamped_size(hierarchy, size);
        let ll = &mut *Hierarchy::part_ptr::<LastLevel>(hierarchy, Hierarchy::LL_OFFSET);
        ll.access(addr, size)
    }
}

/// [`Hierarchy::clamp_size`] by offset, without a reference to the whole hierarchy.
///
/// # Safety
/// `hierarchy` points to a live hierarchy.
#[inline]
unsafe fn clamped_size(hierarchy: *mut Hierarchy, size: u64) -> u64 {
    // SAFETY: (caller) live; `min_line_size` is never written after `new`.
    let min_line = unsafe { *Hierarchy::part_ptr::<u64>(hierarchy, Hierarchy::MIN_LINE_OFFSET) };
    size.max(1).min(min_line)
}

/// The L1 part of a single-line access done through the raw flat layout, step by step as the
/// translator's generated code does it after a failed MRU check: scan ways `1..assoc` of the
/// set for the line; on a hit at way `k`, move ways `0..k` down by one and put the line in way
/// 0 (`true`); on a miss, move every way down by one (dropping the LRU one) and put the line
/// in way 0 (`false`; the caller then does the LL part, [`cachesim_ll_after_l1_miss`]). Same
/// result and same tags as [`crate::Cache::access`] for an access within one line.
///
/// # Safety
/// `flat` must point to a live [`FlatCache`] that nothing else accesses during the call; the
/// access at `addr` must lie within one line (the caller checked it).
pub unsafe fn l1_lookup_raw(flat: *const FlatCache, addr: u64) -> bool {
    // SAFETY: the caller guarantees `flat` is valid for reads.
    let f = unsafe { &*flat };
    let line = addr >> f.line_bits;
    // `row + way < len` for every `way < assoc` (module invariant).
    let row = f
        .tags
        .as_ptr()
        .wrapping_add(((line & f.set_mask) * f.row_ways()) as usize);
    // SAFETY: in bounds (see `row`); the allocation is live and ours for the call.
    let get = |way: u64| unsafe { *row.add(way as usize) };
    // SAFETY: as for `get`.
    let set = |way: u64, tag: u64| unsafe { *row.add(way as usize) = tag };
    if get(0) == line {
        return true;
    }
    let mut k = 1;
    while k < f.assoc && get(k) != line {
        k += 1;
    }
    let hit = k < f.assoc;
    let mut j = if hit { k } else { f.assoc - 1 };
    while j > 0 {
        set(j, get(j - 1));
        j -= 1;
    }
    set(0, line);
    hit
}

/// Conditional branch at `instr_addr`, taken iff `taken != 0`. Returns 1 on a mispredict.
///
/// # Safety
/// `predictor` must point to a live [`BranchPredictor`] that nothing else accesses during
/// the call.
pub unsafe extern "C" fn cachesim_cond_branch(
    predictor: *mut BranchPredictor,
    instr_addr: u64,
    taken: u64,
) -> u32 {
    // SAFETY: the caller guarantees a valid, exclusively accessible BranchPredictor.
    let p = unsafe { &mut *predictor };
    u32::from(p.cond(instr_addr, taken != 0))
}

/// Indirect branch at `instr_addr` that went to `target`. Returns 1 on a mispredict.
///
/// # Safety
/// As for [`cachesim_cond_branch`].
pub unsafe extern "C" fn cachesim_ind_branch(
    predictor: *mut BranchPredictor,
    instr_addr: u64,
    target: u64,
) -> u32 {
    // SAFETY: the caller guarantees a valid, exclusively accessible BranchPredictor.
    let p = unsafe { &mut *predictor };
    u32::from(p.indirect(instr_addr, target))
}

// Layout the generated code depends on.
const _: () = {
    assert!(FlatCache::TAGS_OFFSET == 0);
    assert!(FlatCache::SET_MASK_OFFSET == 8);
    assert!(FlatCache::LINE_BITS_OFFSET == 16);
    assert!(FlatCache::ASSOC_OFFSET == 24);
    assert!(FlatCache::ROW_BYTES_OFFSET == 32);
};

/// Executes CPUID on the host. `[0; 4]` on non-x86-64 targets (detection then falls back to
/// the defaults, as Valgrind does for an unknown vendor).
pub(crate) fn host_cpuid(leaf: u32, subleaf: u32) -> [u32; 4] {
    #[cfg(target_arch = "x86_64")]
    {
        // `__cpuid_count` is a safe fn on recent toolchains and `unsafe` on older ones.
        #[allow(unused_unsafe)]
        // SAFETY: CPUID exists on every x86-64 CPU and has no side effects.
        let r = unsafe { core::arch::x86_64::__cpuid_count(leaf, subleaf) };
        [r.eax, r.ebx, r.ecx, r.edx]
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (leaf, subleaf);
        [0; 4]
    }
}
