//! Which parts of the address space belong to the guest.
//!
//! The guest may map, unmap and protect only its own memory and free space; rgrind's code,
//! heap, stacks and code cache are refused to it (a `MAP_FIXED` over them fails with ENOMEM,
//! munmap/mprotect of them with EINVAL), never obeyed.
//!
//! # Invariants
//! * `ranges` holds disjoint, non-adjacent, page-aligned `[start, end)` intervals keyed by start.
use std::collections::BTreeMap;

#[derive(Default)]
pub struct GuestRanges {
    ranges: BTreeMap<u64, u64>,
}

pub const PAGE: u64 = 4096;

pub fn page_up(x: u64) -> u64 {
    x.wrapping_add(PAGE - 1) & !(PAGE - 1)
}

impl GuestRanges {
    pub fn insert(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let (mut s, mut e) = (start, end);
        let overlapping: Vec<(u64, u64)> = self
            .ranges
            .range(..=e)
            .rev()
            .take_while(|(_, &re)| re >= s)
            .map(|(&rs, &re)| (rs, re))
            .collect();
        for (rs, re) in overlapping {
            self.ranges.remove(&rs);
            s = s.min(rs);
            e = e.max(re);
        }
        self.ranges.insert(s, e);
        // Post-invariant: disjoint and non-adjacent (merged with every touching range).
    }

    pub fn remove(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let overlapping: Vec<(u64, u64)> = self
            .ranges
            .range(..end)
            .rev()
            .take_while(|(_, &re)| re > start)
            .map(|(&rs, &re)| (rs, re))
            .collect();
        for (rs, re) in overlapping {
            self.ranges.remove(&rs);
            if rs < start {
                self.ranges.insert(rs, start);
            }
            if re > end {
                self.ranges.insert(end, re);
            }
        }
    }

    /// The parts of `[start, end)` not covered by guest ranges.
    pub fn gaps(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut cur = start;
        let first = self
            .ranges
            .range(..=start)
            .next_back()
            .map(|(&s, &e)| (s, e));
        let rest = self
            .ranges
            .range(start.saturating_add(1)..end)
            .map(|(&s, &e)| (s, e));
        for (rs, re) in first.into_iter().chain(rest) {
            if re <= cur {
                continue;
            }
            if rs > cur {
                out.push((cur, rs.min(end)));
            }
            cur = re;
            if cur >= end {
                return out;
            }
        }
        if cur < end {
            out.push((cur, end));
        }
        out
    }
}

/// Whether any byte of `[start, end)` is mapped in this process (reads /proc/self/maps).
pub fn host_mapped(start: u64, end: u64) -> bool {
    let Ok(maps) = std::fs::read_to_string("/proc/thread-self/maps") else {
        return true;
    };
    maps.lines().any(|l| {
        let range = l.split(' ').next().unwrap_or("");
        let mut it = range.split('-');
        let s = it
            .next()
            .and_then(|x| u64::from_str_radix(x, 16).ok())
            .unwrap_or(0);
        let e = it
            .next()
            .and_then(|x| u64::from_str_radix(x, 16).ok())
            .unwrap_or(0);
        s < end && e > start
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_merges_and_remove_splits() {
        let mut g = GuestRanges::default();
        g.insert(0x1000, 0x3000);
        g.insert(0x3000, 0x5000);
        assert_eq!(g.gaps(0x0, 0x6000), vec![(0x0, 0x1000), (0x5000, 0x6000)]);
        g.remove(0x2000, 0x4000);
        assert_eq!(g.gaps(0x1000, 0x5000), vec![(0x2000, 0x4000)]);
        assert!(g.gaps(0x1000, 0x2000).is_empty());
        assert_eq!(g.gaps(0x1800, 0x4800), vec![(0x2000, 0x4000)]);
    }
}
