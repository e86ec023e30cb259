//! Cost arrays: zeroed `u64` arrays, one per guest block, placed near the guest code so that
//! translated code can bump them with one RIP-relative instruction.
//!
//! # Invariants
//! * An array is never freed or moved: its address is embedded in translations and read by
//!   the tool at the end.
//! * The same `(start, end, n)` key always gives the same array (retranslation keeps counts).
//! * A block counter's loop shares (`loop_shares`) are found again by the counter's address,
//!   and `fold_loop_shares` moves their counts into it: a counter plus its shares is the
//!   block's execution count at every moment the guest is stopped.
//!
//! Translated code writes the arrays without a lock (guest threads run one at a time); this
//! module's own lock is taken only by the translator and by tools outside translated code.
use crate::fast_hash::FastMap;
use std::sync::Mutex;

/// Bytes per arena chunk (address space only; pages are touched on use).
const CHUNK: u64 = 16 << 20;
/// A chunk serves translations within this distance of its start (rel32 reach with margin).
const NEAR: u64 = 1 << 30;
/// Translations are grouped in windows of this size for [`Arena::no_room_near`].
const WINDOW_SHIFT: u32 = 26;

struct Chunk {
    base: u64,
    used: u64,
    /// Not near any translation: reached with absolute addresses.
    far: bool,
}

#[derive(Default)]
struct Arena {
    chunks: Vec<Chunk>,
    arrays: FastMap<(u64, u64, usize), u64>,
    /// Block counter -> its loop shares (`loop_shares`): first share, count.
    shares: FastMap<u64, (u64, usize)>,
    /// Windows of translations (`host >> WINDOW_SHIFT`) near which no chunk could be mapped:
    /// the search is up to 128 failing `mmap` calls, which a JVM (whose reservations fill
    /// the space around its code) made for every new block.
    no_room_near: crate::fast_hash::FastSet<u64>,
}

static ARENA: Mutex<Option<Arena>> = Mutex::new(None);

fn map(hint: u64, extra: i32) -> Option<u64> {
    // SAFETY: anonymous private mapping; with MAP_FIXED_NOREPLACE nothing existing is replaced.
    let p = unsafe {
        libc::mmap(
            hint as *mut libc::c_void,
            CHUNK as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | extra,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED || (extra != 0 && p as u64 != hint) {
        if p != libc::MAP_FAILED {
            // SAFETY: unmapping the mapping just made at the wrong place.
            unsafe { libc::munmap(p, CHUNK as usize) };
        }
        return None;
    }
    Some(p as u64)
}

fn new_near_chunk(near: u64) -> Option<u64> {
    let page = near & !0xffff;
    for k in 0..(NEAR / CHUNK) {
        let d = k * CHUNK;
        for c in [page.wrapping_add(d), page.wrapping_sub(d + CHUNK)] {
            if !(0x10000..0x7fff_0000_0000).contains(&c) {
                continue;
            }
            if let Some(p) = map(c, libc::MAP_FIXED_NOREPLACE) {
                return Some(p);
            }
        }
    }
    None
}

/// The cost array for the guest block `[start, end)` with `n` entries, placed near the host
/// address `host` when first created.
pub fn cost_array(start: u64, end: u64, n: usize, host: u64) -> *mut u64 {
    let mut guard = ARENA.lock().unwrap_or_else(|p| p.into_inner());
    let a = guard.get_or_insert_with(Arena::default);
    if let Some(&p) = a.arrays.get(&(start, end, n)) {
        return p as *mut u64;
    }
    let p = a.alloc(n, host);
    a.arrays.insert((start, end, n), p);
    p as *mut u64
}

/// `n` zeroed counters that share the count of block counter `counter` (the translator gives
/// each unrolled copy of a self-loop its own counter, so that consecutive iterations do not
/// wait on one another's read-modify-write). The same counter gets the same shares again.
pub fn loop_shares(counter: *mut u64, n: usize, host: u64) -> Vec<*mut u64> {
    let mut guard = ARENA.lock().unwrap_or_else(|p| p.into_inner());
    let a = guard.get_or_insert_with(Arena::default);
    let key = counter as u64;
    let base = match a.shares.get(&key) {
        Some(&(base, have)) if have >= n => base,
        _ => {
            // A longer list replaces a shorter one: the old shares are folded first.
            if let Some((base, have)) = a.shares.remove(&key) {
                fold_one(key, base, have);
            }
            let base = a.alloc(n, host);
            a.shares.insert(key, (base, n));
            base
        }
    };
    (0..n).map(|i| (base + 8 * i as u64) as *mut u64).collect()
}

/// Moves the counts of every loop share into its block counter. Call with no guest code
/// running (a tool's `fini`, a client request, a dump), before reading block counters.
pub fn fold_loop_shares() {
    let guard = ARENA.lock().unwrap_or_else(|p| p.into_inner());
    let Some(a) = guard.as_ref() else { return };
    for (&counter, &(base, n)) in &a.shares {
        fold_one(counter, base, n);
    }
}

fn fold_one(counter: u64, base: u64, n: usize) {
    for i in 0..n {
        // SAFETY: arena memory is never freed; `base` holds `n` counters of `counter`, which
        // translated code only writes while the guest runs (it does not, see the callers).
        unsafe {
            let s = (base + 8 * i as u64) as *mut u64;
            let c = counter as *mut u64;
            *c = (*c).wrapping_add(core::mem::take(&mut *s));
        }
    }
}

impl Arena {
    /// `n` zeroed words near `host` (or anywhere, when nothing near can be mapped).
    fn alloc(&mut self, n: usize, host: u64) -> u64 {
        let bytes = ((n.max(1) * 8) as u64 + 63) & !63;
        let fits = |c: &Chunk| CHUNK - c.used >= bytes;
        let near = self
            .chunks
            .iter()
            .position(|c| !c.far && c.base.abs_diff(host) < NEAR && fits(c));
        let i = near
            .or_else(|| {
                let window = host >> WINDOW_SHIFT;
                if self.no_room_near.contains(&window) {
                    return None;
                }
                let Some(base) = new_near_chunk(host) else {
                    self.no_room_near.insert(window);
                    return None;
                };
                self.chunks.push(Chunk {
                    base,
                    used: 0,
                    far: false,
                });
                Some(self.chunks.len() - 1)
            })
            .or_else(|| self.chunks.iter().position(|c| c.far && fits(c)))
            .or_else(|| {
                let base = map(0, 0)?;
                self.chunks.push(Chunk {
                    base,
                    used: 0,
                    far: true,
                });
                Some(self.chunks.len() - 1)
            });
        match i.map(|i| &mut self.chunks[i]) {
            Some(c) => {
                let p = c.base + c.used;
                c.used += bytes;
                p
            }
            None => crate::core_state::fatal("cannot map memory for cost arrays"),
        }
    }
}
