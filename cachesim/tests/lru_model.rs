//! Property tests: the cache and the hierarchy against a naive reference model (a list of
//! resident lines per set, most recent first, written from the textbook definition of LRU and
//! of Cachegrind's straddle and L1-to-LL rules, not from the implementation).

use cachesim::raw::{
    cachesim_data, cachesim_fetch, cachesim_ll_after_l1_miss, l1_lookup_raw, mru_hit_raw,
    slots_locate, slots_touch,
};
use cachesim::{Cache, CacheGeometry, Hierarchy, Outcome, SlotCache};
use proptest::prelude::*;
use std::collections::HashMap;

/// Naive LRU cache: `sets[s]` lists resident lines, most recently used first, starting as
/// `assoc` copies of line 0 (Cachegrind's all-zero tags).
#[derive(Clone, Debug)]
struct Model {
    line_size: u64,
    sets: Vec<Vec<u64>>,
    assoc: usize,
}

impl Model {
    fn new(g: CacheGeometry) -> Model {
        let sets = (g.size / g.line_size / g.assoc) as usize;
        Model {
            line_size: u64::from(g.line_size),
            sets: vec![vec![0; g.assoc as usize]; sets],
            assoc: g.assoc as usize,
        }
    }

    /// Touches one line; true on a miss.
    fn touch(&mut self, line: u64) -> bool {
        let n = self.sets.len() as u64;
        let set = &mut self.sets[(line % n) as usize];
        let hit = match set.iter().position(|&l| l == line) {
            Some(i) => {
                set.remove(i);
                true
            }
            None => {
                set.pop();
                false
            }
        };
        set.insert(0, line);
        assert_eq!(set.len(), self.assoc);
        !hit
    }

    /// One access of `size` bytes (already clamped by the caller): every line it covers is
    /// touched in address order; a miss if any of them missed.
    fn access(&mut self, addr: u64, size: u64) -> bool {
        let first = addr / self.line_size;
        let last = (addr + size - 1) / self.line_size;
        let mut miss = false;
        for line in first..=last {
            miss |= self.touch(line);
        }
        miss
    }

    fn is_mru(&self, line: u64) -> bool {
        let n = self.sets.len() as u64;
        self.sets[(line % n) as usize][0] == line
    }
}

/// The I1 protocol of the translator's generated code (`Plan::fetch`): each fetch site
/// (here: each address and size) keeps, per line, the address of the slot it found the
/// line in; the inline part compares that slot's line word and, when every line is there,
/// advances the set's clock and stamps the slot; anything else goes to `slots_touch`, line
/// by line, and the site keeps the slots it returns.
#[derive(Default)]
struct Sites {
    slots: HashMap<(u64, u64), [u64; 2]>,
}

impl Sites {
    /// `true` on an I1 hit.
    ///
    /// # Safety
    /// `hp` is a live hierarchy from `Box::into_raw` that nothing else accesses.
    unsafe fn fetch(&mut self, hp: *mut Hierarchy, addr: u64, size: u64) -> bool {
        let cache = Hierarchy::i1_ptr_of(hp);
        // SAFETY: (caller) live; read only here.
        let (bits, base, row_bytes, set_mask) = unsafe {
            let c: &SlotCache = &*cache;
            (c.line_bits(), c.base(), c.row_bytes(), c.set_mask())
        };
        let (first, last) = (addr >> bits, (addr + size - 1) >> bits);
        let lines = [first, last];
        let lines = &lines[..1 + usize::from(last != first)];
        let site = self.slots.entry((addr, size)).or_insert_with(|| {
            // At translation: where the line is now, else where a miss would put it.
            // SAFETY: (caller) live; `slots_locate` only reads.
            let at = |l: u64| unsafe { slots_locate(cache as u64, l) };
            [at(first), at(last)]
        });
        // SAFETY: the slot addresses lie in the live I1's words (found by the simulator).
        let inline_hit = lines
            .iter()
            .zip(site.iter())
            .all(|(&l, &slot)| unsafe { *(slot as *const u64) } == l);
        if inline_hit {
            for (&l, &slot) in lines.iter().zip(site.iter()) {
                let clock = (base + (l & set_mask) * row_bytes) as *mut u64;
                // SAFETY: the set's clock and the slot's stamp, in the live I1's words.
                unsafe {
                    *clock += 1;
                    *((slot + 8) as *mut u64) = *clock;
                }
            }
            return true;
        }
        let mut missed = false;
        for (k, &l) in lines.iter().enumerate() {
            // SAFETY: (caller) live, ours alone.
            let r = unsafe { slots_touch(cache as u64, l) };
            missed |= r & 1 != 0;
            site[k] = r & !1;
        }
        !missed
    }
}

fn geometry() -> impl Strategy<Value = CacheGeometry> {
    (0u32..4, 1u32..6, 4u32..8)
        .prop_map(|(log_sets, assoc, log_line)| {
            let line = 1 << log_line;
            CacheGeometry::new((1 << log_sets) * assoc * line, assoc, line)
        })
        // Valgrind rejects a cache of a single line (size <= line size).
        .prop_filter("valid geometry", |g| g.check().is_ok())
}

/// Addresses from a small window (so lines collide and get reused), away from the top of
/// the address space so the model's plain arithmetic cannot overflow.
fn accesses() -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec((0u64..16384, 0u64..80), 1..400)
}

/// Every level's tags, set by set, equal its model's (I1, D1, LL).
fn final_state_matches(
    h: &Hierarchy,
    levels: [(CacheGeometry, &Model); 3],
) -> Result<(), TestCaseError> {
    let tags = [
        h.i1().tags().to_vec(),
        h.d1().tags().to_vec(),
        h.ll().tags(),
    ];
    for (tags, (geometry, model)) in tags.iter().zip(levels) {
        let rows: Vec<Vec<u64>> = tags
            .chunks(geometry.assoc as usize)
            .map(|r| r.to_vec())
            .collect();
        prop_assert_eq!(&rows, &model.sets);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn cache_matches_naive_lru(g in geometry(), trace in accesses()) {
        let mut cache = Cache::new(g).expect("valid geometry");
        let mut model = Model::new(g);
        for (addr, size) in trace {
            let clamped = size.clamp(1, u64::from(g.line_size));
            let line = addr / u64::from(g.line_size);
            let single = (addr + clamped - 1) / u64::from(g.line_size) == line;
            prop_assert_eq!(cache.is_mru_hit(addr, clamped), single && model.is_mru(line));
            prop_assert_eq!(cache.access(addr, size), model.access(addr, clamped));
        }
        // Final state: same resident lines in the same order, set by set.
        let rows: Vec<Vec<u64>> = cache
            .tags()
            .chunks(g.assoc as usize)
            .map(|r| r.to_vec())
            .collect();
        prop_assert_eq!(rows, model.sets);
    }

    #[test]
    fn hierarchy_matches_model_and_fast_path_is_exact(
        i1 in geometry(),
        d1 in geometry(),
        ll in geometry(),
        trace in prop::collection::vec((any::<bool>(), 0u64..16384, 0u64..80), 1..400),
    ) {
        let h = Hierarchy::new(i1, d1, ll).expect("valid geometry");
        let min_line = u64::from(i1.line_size.min(d1.line_size).min(ll.line_size));
        let (mut mi, mut md, mut ml) = (Model::new(i1), Model::new(d1), Model::new(ll));
        // Drive the hierarchy the way generated code does: inline check through the raw
        // flat layout, then the extern "C" slow path.
        let hp = Box::into_raw(h);
        let flat_d = Hierarchy::d1_flat_ptr_of(hp);
        for (is_fetch, addr, size) in trace {
            let size = size.clamp(1, min_line);
            let l1 = if is_fetch { &mut mi } else { &mut md };
            let want = if !l1.access(addr, size) {
                Outcome::Hit
            } else if !ml.access(addr, size) {
                Outcome::L1Miss
            } else {
                Outcome::LlMiss
            };
            // SAFETY: `hp` is the live hierarchy from Box::into_raw; the flat pointers were
            // derived from it by offset; nothing else accesses it.
            let got = if is_fetch {
                // SAFETY: as above.
                Outcome::from_code(unsafe { cachesim_fetch(hp, addr, size) }).expect("code")
            } else if unsafe { mru_hit_raw(flat_d, addr, size) } {
                Outcome::Hit
            } else {
                // SAFETY: as above.
                Outcome::from_code(unsafe { cachesim_data(hp, addr, size) }).expect("code")
            };
            prop_assert_eq!(got, want);
        }
        // SAFETY: `hp` came from Box::into_raw and is not used after this.
        let h = unsafe { Box::from_raw(hp) };
        final_state_matches(&h, [(i1, &mi), (d1, &md), (ll, &ml)])?;
    }
    #[test]
    fn inline_l1_lookup_then_ll_matches_model(
        i1 in geometry(),
        d1 in geometry(),
        ll in geometry(),
        trace in prop::collection::vec((any::<bool>(), 0u64..16384, 0u64..80), 1..400),
    ) {
        let h = Hierarchy::new(i1, d1, ll).expect("valid geometry");
        let min_line = u64::from(i1.line_size.min(d1.line_size).min(ll.line_size));
        let (mut mi, mut md, mut ml) = (Model::new(i1), Model::new(d1), Model::new(ll));
        // The protocol of the translator's generated code with the L1 lookup done inline:
        // straddles go to the full slow path; a single-line access checks the MRU way, then
        // scans and updates the L1 set itself, and calls the LL-only path on an L1 miss.
        let hp = Box::into_raw(h);
        let flat_d = Hierarchy::d1_flat_ptr_of(hp);
        let mut sites = Sites::default();
        for (is_fetch, addr, size) in trace {
            let size = size.clamp(1, min_line);
            let (l1, line_size) = if is_fetch {
                (&mut mi, u64::from(i1.line_size))
            } else {
                (&mut md, u64::from(d1.line_size))
            };
            let want = if !l1.access(addr, size) {
                Outcome::Hit
            } else if !ml.access(addr, size) {
                Outcome::L1Miss
            } else {
                Outcome::LlMiss
            };
            let single = addr / line_size == (addr + size - 1) / line_size;
            // `hp` is the live hierarchy from Box::into_raw, the flat pointers were derived
            // from it by offset and nothing else accesses it (the safety condition of every
            // raw call below); `l1_lookup_raw` is only called for a single-line access.
            // SAFETY: see above; `l1_lookup_raw` only runs for a single-line access.
            let l1_hit = !is_fetch
                && single
                && unsafe { mru_hit_raw(flat_d, addr, size) || l1_lookup_raw(flat_d, addr) };
            let got = if is_fetch {
                // SAFETY: see above.
                let l1_hit = unsafe { sites.fetch(hp, addr, size) };
                if l1_hit {
                    Outcome::Hit
                } else {
                    // SAFETY: see above.
                    Outcome::from_code(unsafe { cachesim_ll_after_l1_miss(hp, addr, size) })
                        .expect("code")
                }
            } else if !single {
                // SAFETY: see above.
                Outcome::from_code(unsafe { cachesim_data(hp, addr, size) }).expect("code")
            } else if l1_hit {
                Outcome::Hit
            } else {
                // SAFETY: see above.
                Outcome::from_code(unsafe { cachesim_ll_after_l1_miss(hp, addr, size) })
                    .expect("code")
            };
            prop_assert_eq!(got, want);
        }
        // SAFETY: `hp` came from Box::into_raw and is not used after this.
        let h = unsafe { Box::from_raw(hp) };
        final_state_matches(&h, [(i1, &mi), (d1, &md), (ll, &ml)])?;
    }
}
