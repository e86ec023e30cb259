//! The code cache: executable memory placed near the guest code it translates, the table from
//! guest block addresses to their translations, the exit records translated code leaves
//! through, and chaining.
//!
//! # Invariants
//! * Every translation lives inside one `Chunk`, its hot part in `[base, used)`, its cold
//!   part (if placed apart, `cold_room`) in `[cold, end)`; a chunk is never unmapped (discarded
//!   translations are unlinked and forgotten, their bytes stay dead).
//! * A chunk is placed within `NEAR` bytes of the guest address that caused its creation, and a
//!   block is only put into a chunk within `NEAR` of its guest address, so RIP-relative operands
//!   of a module smaller than 2 GiB - 2 * NEAR re-encode with a rel32.
//! * A chained exit's `patch_site` holds `target_host - (patch_site + 4)`; unchained it points
//!   at the exit's own stub. `incoming` of a block lists every exit record chained into it.
//! * Patch sites are 4-byte aligned so a patch is one atomic store.
use crate::fast_hash::FastMap;
use std::collections::BTreeMap;

/// Bytes of address space per chunk.
const CHUNK_SIZE: u64 = 64 << 20;
/// How far a chunk may be from the guest code it serves: a module up to 512 MiB keeps every
/// RIP-relative operand within rel32 reach.
const NEAR: u64 = 1536 << 20;
/// Guest addresses are grouped in windows of this size for [`CodeCache::no_room_near`].
const WINDOW_SHIFT: u32 = 26;

struct Chunk {
    base: u64,
    end: u64,
    /// Translations' hot parts grow up from `base` to `used`...
    used: u64,
    /// ... and their cold parts (`CodeCache::cold_room`) down from `end` to `cold`.
    cold: u64,
    /// Placed wherever the kernel put it because nothing near was free: serves any guest
    /// address (RIP-relative operands then go through a scratch register).
    far: bool,
}

/// What an exit does once control is back in the dispatcher.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitKind {
    /// A direct branch (or fall-through) to `target`; may be chained.
    Direct,
    /// A `syscall` instruction; `target` is the address after it.
    Syscall,
    /// A `cpuid` instruction; `target` is the address after it.
    Cpuid,
    /// A Valgrind client request (`crate::clientreq`); `target` is the address after it.
    ClientRequest,
    /// An instruction that traps natively (`int3`, `ud2`, undecodable bytes, ...); `target` is
    /// its address and `signal` what the kernel would deliver.
    Trap { signal: i32, next: u64 },
    /// The block's guest bytes changed since translation (entry check failed); `target` is the
    /// block start, to retranslate.
    SmcMismatch,
}

#[derive(Clone, Copy, Debug)]
pub struct ExitRecord {
    pub kind: ExitKind,
    pub target: u64,
    /// Address of the rel32 to patch when chaining, or 0.
    pub patch_site: u64,
    /// Address of this exit's stub (the unchained destination of `patch_site`).
    pub stub: u64,
    /// Guest start of the block the exit belongs to.
    pub from_block: u64,
    /// The lines the block's last fetch check before the exit left most recently used
    /// (`Block::line_entry`).
    pub fetched: Option<FetchedLines>,
}

/// Lines of a simulated cache that a fetch check leaves in its sets' most-recently-used way,
/// with nothing after it touching that cache: a fetch of any of them from there on is an MRU
/// hit, which changes no cache state and counts nothing, so its check may be skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FetchedLines {
    /// The cache's tag array (its identity).
    pub tags: u64,
    pub line_bits: u32,
    /// First and last line (equal, or consecutive for a fetch across two lines).
    pub first: u64,
    pub last: u64,
}

impl FetchedLines {
    /// Whether a fetch of `other` (one line) right after this one is an MRU hit.
    pub fn covers(&self, other: &FetchedLines) -> bool {
        self.tags == other.tags
            && self.line_bits == other.line_bits
            && other.first == other.last
            && (other.first == self.first || other.first == self.last)
    }
}

pub struct Block {
    /// Host offset (from `host`) and guest address of each guest instruction's first host
    /// byte (its instrumentation, then its own code), in order.
    pub insn_starts: Vec<(u32, u64)>,
    /// Indices into `insn_starts` of the instructions whose own code runs with the guest's
    /// arithmetic flags held in `instr_flags` (`Plan::flags_stashed`), ascending.
    pub flags_stashed: Vec<u32>,
    pub guest_start: u64,
    pub guest_end: u64,
    pub host: u64,
    pub host_len: u64,
    pub exits: Vec<u32>,
    /// Exit records chained into this block.
    pub incoming: Vec<u32>,
    /// A callgrind self-loop whose later copies defer their charges (`Plan::loop_lite`):
    /// the inline state and the block's Ir; a fault in copy `k` owes `k` executions.
    pub loop_owed: Option<LoopOwed>,
    /// Guest instructions of the block (a self-loop's translation holds several copies).
    pub guest_insns: u32,
    /// The end of the instructions the tool saw (`BlockView::end`; an ending `hlt` or
    /// system call is the translator's alone).
    pub tool_end: u64,
    /// The instruction before whose own code the block's counter (`Instrumenter::count_block`)
    /// is bumped, in every copy; `None` when the tool counts no block.
    pub counted_before: Option<u32>,
    /// A second entry past the block's first fetch check (of one line), for direct exits
    /// whose own last fetch check left that line most recently used
    /// (`ExitRecord::fetched`): Cachegrind's fall-throughs and short branches within a line.
    pub line_entry: Option<(u64, FetchedLines)>,
}

/// A run of a block that a fault cut short (`Tool::block_cut_short`); all zero for none (a
/// block never ends at 0). Kept in the `repr(C)` thread context, so `repr(C)` too.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CutShort {
    /// The block as the tool saw it.
    pub start: u64,
    pub end: u64,
    /// The faulting instruction's index in it.
    pub faulting: u32,
    /// Whether the block's counter had counted this run.
    pub counted: bool,
}

/// See [`Block::loop_owed`].
#[derive(Clone, Copy, Debug)]
pub struct LoopOwed {
    /// The `JumpState` (a leaked static).
    pub state: u64,
    pub ir: u32,
}

#[derive(Default)]
pub struct CodeCache {
    chunks: Vec<Chunk>,
    /// Guest windows (`guest >> WINDOW_SHIFT`) near which no chunk could be mapped: the search is up
    /// to 48 failing `mmap` calls, not to be repeated for every block there.
    no_room_near: crate::fast_hash::FastSet<u64>,
    /// Boxed: a `Block` is ~200 bytes, and moving every one at each of the table's growths
    /// (tens of thousands for a Python start-up) took ~5% of a callgrind start-up.
    pub blocks: FastMap<u64, Box<Block>>,
    /// Blocks ordered by guest start, for range invalidation.
    by_start: BTreeMap<u64, u64>,
    /// Translations ordered by host start (host start -> guest start), for mapping a host pc.
    by_host: BTreeMap<u64, u64>,
    /// Line entries (`Block::line_entry`) -> guest start: also block starts for a thread
    /// stepping towards one (a loop chained to its own line entry never passes its start).
    line_entries: FastMap<u64, u64>,
    /// Discarded translations by host start: a thread may still be running one (the block
    /// that asked for its own retranslation, or one reached through a stale table entry),
    /// and a fault or signal there must still map to its guest instruction.
    retired: BTreeMap<u64, Box<Block>>,
    pub exits: Vec<ExitRecord>,
    /// Longest guest block seen, bounding range queries.
    max_guest_len: u64,
}

impl CodeCache {
    /// Finds room for `len` bytes of code near `guest`; returns the host address.
    /// The space is only taken by `commit`.
    pub fn reserve(&mut self, guest: u64, len: u64) -> Option<u64> {
        let near = |c: &Chunk| c.base.abs_diff(guest) < NEAR && c.end.abs_diff(guest) < NEAR;
        if let Some(c) = self
            .chunks
            .iter()
            .find(|c| c.cold - c.used >= len && near(c))
        {
            return Some(c.used);
        }
        let window = guest >> WINDOW_SHIFT;
        if !self.no_room_near.contains(&window) {
            if let Some(base) = map_chunk_near(guest) {
                self.chunks.push(Chunk {
                    base,
                    end: base + CHUNK_SIZE,
                    used: base,
                    cold: base + CHUNK_SIZE,
                    far: false,
                });
                return Some(base);
            }
            self.no_room_near.insert(window);
        }
        if let Some(c) = self.chunks.iter().find(|c| c.far && c.cold - c.used >= len) {
            return Some(c.used);
        }
        let base = mmap_rwx(0, 0)?;
        self.chunks.push(Chunk {
            base,
            end: base + CHUNK_SIZE,
            used: base,
            cold: base + CHUNK_SIZE,
            far: true,
        });
        Some(base)
    }

    /// Marks `[host, host+len)` as used; `host` must come from `reserve`.
    pub fn commit(&mut self, host: u64, len: u64) {
        for c in &mut self.chunks {
            if c.used == host {
                c.used = (host + len + 15) & !15;
                return;
            }
        }
    }

    /// Where the cold part (`len` bytes) of the translation being placed at `host` (from
    /// `reserve`, its hot part `hot_len` bytes) would go: the top of the same chunk, below
    /// the cold parts placed before, so that the hot parts lie together. `None` when the
    /// chunk has no room for both parts.
    pub fn cold_room(&self, host: u64, hot_len: u64, len: u64) -> Option<u64> {
        let c = self.chunks.iter().find(|c| c.used == host)?;
        let cold = c.cold.checked_sub(len)? & !15;
        (cold >= ((host + hot_len + 15) & !15)).then_some(cold)
    }

    /// Marks the cold part at `cold` (from `cold_room`) of the translation at `host` as used.
    pub fn commit_cold(&mut self, host: u64, cold: u64) {
        if let Some(c) = self.chunks.iter_mut().find(|c| c.used == host) {
            c.cold = cold;
        }
    }

    /// Writes each chunk's used bytes to `dir/chunk-<address>.bin`, the hot and the cold
    /// parts separately (for offline disassembly, e.g. `objdump -D -b binary -m i386:x86-64
    /// --adjust-vma=<address>`).
    pub fn dump_chunks(&self, dir: &std::path::Path) -> std::io::Result<()> {
        for c in &self.chunks {
            for (start, end) in [(c.base, c.used), (c.cold, c.end)] {
                if end > start {
                    // SAFETY: [base, used) and [cold, end) of a live chunk are initialised
                    // code bytes (cold parts are 16-aligned; the gaps are zeroes of the mapping).
                    let bytes = unsafe {
                        core::slice::from_raw_parts(start as *const u8, (end - start) as usize)
                    };
                    std::fs::write(dir.join(format!("chunk-{start:x}.bin")), bytes)?;
                }
            }
        }
        Ok(())
    }

    pub fn insert_block(&mut self, block: Block) {
        self.max_guest_len = self.max_guest_len.max(block.guest_end - block.guest_start);
        self.by_start.insert(block.guest_start, block.host);
        self.by_host.insert(block.host, block.guest_start);
        if let Some((alt, _)) = block.line_entry {
            self.line_entries.insert(alt, block.guest_start);
        }
        self.blocks.insert(block.guest_start, Box::new(block));
    }

    /// The guest instruction whose translation contains host address `pc`: its guest address,
    /// and whether its own code runs with the guest's arithmetic flags held in the thread's
    /// `instr_flags` rather than in rflags (a fault there must take them from there).
    pub fn guest_insn_at(&self, pc: u64) -> Option<(u64, bool)> {
        let (b, i) = self.insn_index_at(pc)?;
        let Some(i) = i.checked_sub(1) else {
            return Some((b.guest_start, false));
        };
        let (_, addr) = b.insn_starts[i];
        let stashed = b.flags_stashed.binary_search(&(i as u32)).is_ok();
        Some((addr, stashed))
    }

    /// The translation containing host address `pc` (also a retired one) and how many of its
    /// instructions start at or before `pc`.
    fn insn_index_at(&self, pc: u64) -> Option<(&Block, usize)> {
        let live = self
            .by_host
            .range(..=pc)
            .next_back()
            .and_then(|(_, g)| self.blocks.get(g));
        let retired = || self.retired.range(..=pc).next_back().map(|(_, b)| b);
        let b = live
            .filter(|b| pc < b.host + b.host_len)
            .or_else(|| retired().filter(|b| pc < b.host + b.host_len))?;
        let off = (pc - b.host) as u32;
        Some((b, b.insn_starts.partition_point(|&(o, _)| o <= off)))
    }

    /// For a guest instruction faulting at host `pc` in a block with a counter: the run of
    /// the block it cut short.
    pub fn cut_short_at(&self, pc: u64) -> Option<CutShort> {
        let (b, i) = self.insn_index_at(pc)?;
        let counted_before = b.counted_before?;
        let faulting = (i.saturating_sub(1) as u32) % b.guest_insns.max(1);
        Some(CutShort {
            start: b.guest_start,
            end: b.tool_end,
            faulting,
            counted: faulting >= counted_before,
        })
    }

    /// For a guest instruction faulting at host `pc`: the executions a callgrind self-loop's
    /// later copies deferred until then (`Block::loop_owed`), and where they go.
    pub fn loop_owed_at(&self, pc: u64) -> Option<(LoopOwed, u64)> {
        let (b, i) = self.insn_index_at(pc)?;
        let owed = b.loop_owed?;
        let copy = (i.checked_sub(1)? / b.guest_insns.max(1) as usize) as u64;
        (copy > 0).then_some((owed, copy))
    }

    /// The guest start of the block whose translation begins, or has its line entry,
    /// exactly at `pc` (the guest state there is the block's start either way).
    pub fn block_start_at(&self, pc: u64) -> Option<u64> {
        self.by_host
            .get(&pc)
            .or_else(|| self.line_entries.get(&pc))
            .copied()
            .or_else(|| self.retired.get(&pc).map(|b| b.guest_start))
    }

    pub fn add_exit(&mut self, rec: ExitRecord) -> u32 {
        self.exits.push(rec);
        (self.exits.len() - 1) as u32
    }

    /// Chains exit `id` to the translation at `target_host` if a rel32 reaches it: to its
    /// line entry (`Block::line_entry`) when the exit's block left that line fetched.
    pub fn chain(&mut self, id: u32, target_guest: u64, target_host: u64) -> bool {
        let rec = self.exits[id as usize];
        if rec.patch_site == 0 {
            return false;
        }
        let target_host = match (rec.fetched, self.blocks.get(&target_guest)) {
            (Some(fetched), Some(b)) if b.host == target_host => match b.line_entry {
                Some((alt, entry)) if fetched.covers(&entry) => alt,
                _ => target_host,
            },
            _ => target_host,
        };
        let rel = target_host as i64 - (rec.patch_site as i64 + 4);
        let Ok(rel32) = i32::try_from(rel) else {
            return false;
        };
        // SAFETY: patch_site is a 4-byte aligned rel32 field inside a live translation in an
        // RWX chunk (ExitRecord invariant); an aligned 4-byte store is atomic for other threads.
        unsafe { core::ptr::write_volatile(rec.patch_site as *mut i32, rel32) };
        if let Some(b) = self.blocks.get_mut(&target_guest) {
            b.incoming.push(id);
        }
        true
    }

    fn unchain(&mut self, id: u32) {
        let rec = self.exits[id as usize];
        let rel = rec.stub as i64 - (rec.patch_site as i64 + 4);
        // SAFETY: as in `chain`; the stub is in the same translation, within rel32 range.
        unsafe { core::ptr::write_volatile(rec.patch_site as *mut i32, rel as i32) };
    }

    /// Forgets every translation whose guest code overlaps `[start, end)`; returns how many.
    /// Chained predecessors are unlinked so they exit to the dispatcher instead.
    pub fn invalidate(&mut self, start: u64, end: u64) -> Vec<u64> {
        let lo = start.saturating_sub(self.max_guest_len);
        let victims: Vec<u64> = self
            .by_start
            .range(lo..end)
            .map(|(&g, _)| g)
            .filter(|g| self.blocks.get(g).is_some_and(|b| b.guest_end > start))
            .collect();
        for &g in &victims {
            self.discard(g);
        }
        victims
    }

    /// Forgets the translation of the block starting at `guest` (if any) so that the next
    /// execution translates it again; chained predecessors are unlinked.
    pub fn discard(&mut self, guest: u64) -> bool {
        self.by_start.remove(&guest);
        let Some(mut b) = self.blocks.remove(&guest) else {
            return false;
        };
        self.by_host.remove(&b.host);
        if let Some((alt, _)) = b.line_entry {
            self.line_entries.remove(&alt);
        }
        for id in std::mem::take(&mut b.incoming) {
            self.unchain(id);
        }
        // Outgoing chains of the dead block are dead code now; drop them from the targets'
        // incoming lists so a later unchain does not touch freed logic.
        for id in std::mem::take(&mut b.exits) {
            let t = self.exits[id as usize].target;
            if let Some(tb) = self.blocks.get_mut(&t) {
                tb.incoming.retain(|&i| i != id);
            }
        }
        self.retired.insert(b.host, b);
        true
    }
}

/// Code-cache chunk ranges, readable without a lock (signal handlers ask whether a host pc
/// is in translated code). Append-only: an entry is written before the count is published.
static CHUNK_RANGES: [core::sync::atomic::AtomicU64; 2 * MAX_CHUNKS] =
    [const { core::sync::atomic::AtomicU64::new(0) }; 2 * MAX_CHUNKS];
static N_CHUNKS: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);
const MAX_CHUNKS: usize = 1024;

fn publish_chunk(base: u64) {
    publish_range(base, CHUNK_SIZE);
}

/// Records `base..base + len` as code cache for `in_code_cache`; false when the table is full.
fn publish_range(base: u64, len: u64) -> bool {
    use core::sync::atomic::Ordering;
    let n = N_CHUNKS.load(Ordering::Acquire);
    if n >= MAX_CHUNKS {
        return false;
    }
    CHUNK_RANGES[2 * n].store(base, Ordering::Relaxed);
    CHUNK_RANGES[2 * n + 1].store(base + len, Ordering::Relaxed);
    N_CHUNKS.store(n + 1, Ordering::Release);
    true
}

/// Maps `len` bytes of writable, executable memory for routines that translations share
/// (`instrument::emit`'s shared scans): it counts as code cache, so a signal arriving there
/// single-steps on as in translated code. Never unmapped.
pub fn map_shared_code(len: usize) -> Option<u64> {
    // SAFETY: a fresh anonymous mapping; nothing else refers to it.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    if !publish_range(p as u64, len as u64) {
        // SAFETY: the mapping just made, unused.
        unsafe { libc::munmap(p, len) };
        return None;
    }
    Some(p as u64)
}

/// Whether `pc` lies in the code cache. Lock-free, async-signal-safe.
pub fn in_code_cache(pc: u64) -> bool {
    use core::sync::atomic::Ordering;
    let n = N_CHUNKS.load(Ordering::Acquire);
    (0..n).any(|i| {
        let s = CHUNK_RANGES[2 * i].load(Ordering::Relaxed);
        let e = CHUNK_RANGES[2 * i + 1].load(Ordering::Relaxed);
        pc >= s && pc < e
    })
}

/// Maps an RWX chunk within `NEAR` of `guest`, nearest first, if any such space is free.
fn map_chunk_near(guest: u64) -> Option<u64> {
    let page = guest & !0xffff;
    let step = CHUNK_SIZE;
    for k in 1..(NEAR / step) {
        let d = k * step;
        for c in [page.wrapping_add(d), page.wrapping_sub(d + CHUNK_SIZE)] {
            if !(0x10000..0x7fff_0000_0000).contains(&c)
                || c.abs_diff(guest) >= NEAR
                || (c + CHUNK_SIZE).abs_diff(guest) >= NEAR
            {
                continue;
            }
            if let Some(p) = mmap_rwx(c, libc::MAP_FIXED_NOREPLACE) {
                return Some(p);
            }
        }
    }
    None
}

fn mmap_rwx(hint: u64, extra: i32) -> Option<u64> {
    // SAFETY: anonymous mapping; with MAP_FIXED_NOREPLACE the kernel refuses to replace
    // anything, so no existing mapping (guest or rgrind) is touched.
    let p = unsafe {
        libc::mmap(
            hint as *mut libc::c_void,
            CHUNK_SIZE as usize,
            libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | extra,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED || (extra != 0 && p as u64 != hint) {
        return None;
    }
    publish_chunk(p as u64);
    Some(p as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(guest: u64, host: u64) -> Block {
        Block {
            insn_starts: vec![(0, guest), (5, guest + 3)],
            flags_stashed: vec![1],
            loop_owed: None,
            guest_insns: 2,
            tool_end: guest + 6,
            counted_before: None,
            line_entry: None,
            guest_start: guest,
            guest_end: guest + 6,
            host,
            host_len: 40,
            exits: Vec::new(),
            incoming: Vec::new(),
        }
    }

    #[test]
    fn a_discarded_translation_is_forgotten_but_still_maps_back() {
        let mut c = CodeCache::default();
        c.insert_block(block(0x1000, 0x9000));
        assert!(c.discard(0x1000));
        assert!(
            !c.blocks.contains_key(&0x1000),
            "looked up again: translated anew"
        );
        assert!(!c.discard(0x1000), "nothing left to discard");
        // A thread still running the old code: faults and signals map to guest addresses.
        assert_eq!(c.guest_insn_at(0x9004), Some((0x1000, false)));
        assert_eq!(c.guest_insn_at(0x9007), Some((0x1003, true)));
        assert_eq!(c.block_start_at(0x9000), Some(0x1000));
        assert_eq!(c.guest_insn_at(0x9000 + 40), None);
        // The new translation is the one found at its own addresses.
        c.insert_block(block(0x1000, 0xa000));
        assert_eq!(c.guest_insn_at(0xa005), Some((0x1003, true)));
        assert_eq!(c.guest_insn_at(0x9005), Some((0x1003, true)));
    }

    #[test]
    fn discarding_unlinks_chained_predecessors_to_their_stubs() {
        let mut c = CodeCache::default();
        c.insert_block(block(0x1000, 0x9000));
        c.insert_block(block(0x2000, 0xa000));
        let mut site = [0i32; 2];
        let patch = site.as_mut_ptr() as u64;
        let id = c.add_exit(ExitRecord {
            kind: ExitKind::Direct,
            target: 0x2000,
            patch_site: patch,
            stub: patch + 64,
            from_block: 0x1000,
            fetched: None,
        });
        // The chained target's address only has to be within rel32 reach of the site.
        assert!(c.chain(id, 0x2000, patch + 0x100));
        assert_eq!(site[0], 0x100 - 4);
        c.invalidate(0x2000, 0x2001);
        assert_eq!(site[0], 60, "back to the exit's own stub");
    }

    #[test]
    fn an_exit_that_left_the_targets_first_line_fetched_chains_past_its_check() {
        let lines = |first, last| FetchedLines {
            tags: 0x4000,
            line_bits: 6,
            first,
            last,
        };
        let mut site = [0i32; 5];
        let base = site.as_mut_ptr() as u64;
        // Within rel32 reach of the sites: only the distances matter.
        let (host, alt) = (base + 0x1000, base + 0x1020);
        let mut c = CodeCache::default();
        let mut target = block(0x2000, host);
        target.line_entry = Some((alt, lines(0x80, 0x80)));
        c.insert_block(target);
        let elsewhere = FetchedLines {
            tags: 0x5000,
            ..lines(0x80, 0x80)
        };
        let fetched = [
            Some(lines(0x80, 0x80)),
            Some(lines(0x7f, 0x80)),
            Some(lines(0x81, 0x81)),
            None,
            Some(elsewhere),
        ];
        for (k, fetched) in fetched.into_iter().enumerate() {
            let id = c.add_exit(ExitRecord {
                kind: ExitKind::Direct,
                target: 0x2000,
                patch_site: base + 4 * k as u64,
                stub: base + 64,
                from_block: 0x1000,
                fetched,
            });
            assert!(c.chain(id, 0x2000, host));
        }
        let to = |k: u64| (i64::from(site[k as usize]) + (base + 4 * k + 4) as i64) as u64;
        assert_eq!(to(0), alt, "the same line");
        assert_eq!(to(1), alt, "the second line of a fetch across two");
        assert_eq!(to(2), host, "another line: the full entry");
        assert_eq!(to(3), host, "nothing fetched: the full entry");
        assert_eq!(to(4), host, "another cache's line");
        // A thread stepping towards a block start stops at either entry.
        assert_eq!(c.block_start_at(alt), Some(0x2000));
        c.discard(0x2000);
        assert_eq!(c.block_start_at(alt), None);
        assert_eq!(c.block_start_at(host), Some(0x2000), "retired");
    }
}
