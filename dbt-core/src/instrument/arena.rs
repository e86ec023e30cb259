//! Cost arrays: zeroed `u64` arrays, one per guest block, placed near the guest code so that
//! translated code can bump them with one RIP-relative instruction.
//!
//! # Invariants
//! * An array is never freed or moved: its address is embedded in translations and read by
//!   the tool at the end.
//! * The same `(start, end, n)` key always gives the same array (retranslation keeps counts).
//!
//! Translated code writes the arrays without a lock (guest threads run one at a time); this
//! module's own lock is taken only by the translator and by tools outside translated code.
use std::collections::HashMap;
use std::sync::Mutex;

/// Bytes per arena chunk (address space only; pages are touched on use).
const CHUNK: u64 = 16 << 20;
/// A chunk serves translations within this distance of its start (rel32 reach with margin).
const NEAR: u64 = 1 << 30;

struct Chunk {
    base: u64,
    used: u64,
    /// Not near any translation: reached with absolute addresses.
    far: bool,
}

#[derive(Default)]
struct Arena {
    chunks: Vec<Chunk>,
    arrays: HashMap<(u64, u64, usize), u64>,
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
    let bytes = ((n.max(1) * 8) as u64 + 63) & !63;
    let fits = |c: &Chunk| CHUNK - c.used >= bytes;
    let near = a
        .chunks
        .iter()
        .position(|c| !c.far && c.base.abs_diff(host) < NEAR && fits(c));
    let i = near
        .or_else(|| {
            let base = new_near_chunk(host)?;
            a.chunks.push(Chunk {
                base,
                used: 0,
                far: false,
            });
            Some(a.chunks.len() - 1)
        })
        .or_else(|| a.chunks.iter().position(|c| c.far && fits(c)))
        .or_else(|| {
            let base = map(0, 0)?;
            a.chunks.push(Chunk {
                base,
                used: 0,
                far: true,
            });
            Some(a.chunks.len() - 1)
        });
    let found = i.map(|i| &mut a.chunks[i]);
    let p = match found {
        Some(c) => {
            let p = c.base + c.used;
            c.used += bytes;
            p
        }
        None => crate::core_state::fatal("cannot map memory for cost arrays"),
    };
    a.arrays.insert((start, end, n), p);
    p as *mut u64
}
