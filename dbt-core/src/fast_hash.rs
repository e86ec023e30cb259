//! A multiply-xor hasher for the tables keyed by addresses, ids and names that are built
//! per translated block and looked up per block start or dispatch (the code cache, the cost
//! arrays, the tools' tables): SipHash (std's default, resistant to chosen keys, which
//! these tables never see) cost more than the rest of callgrind's `setup` together, and a
//! tenth of translating a block.
use std::hash::{BuildHasherDefault, Hasher};

#[derive(Default)]
pub struct FastHasher(u64);

impl Hasher for FastHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            self.write_u64(u64::from_le_bytes(b));
        }
        for &b in words.remainder() {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

pub type FastMap<K, V> = std::collections::HashMap<K, V, BuildHasherDefault<FastHasher>>;
pub type FastSet<T> = std::collections::HashSet<T, BuildHasherDefault<FastHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_differing_anywhere_hash_apart() {
        let h = |s: &str| {
            let mut x = FastHasher::default();
            std::hash::Hash::hash(s, &mut x);
            x.finish()
        };
        let base = "_ZN4core3fmt9Formatter3pad17h0123456789abcdefE";
        let mut seen = std::collections::HashSet::new();
        assert!(seen.insert(h(base)));
        for i in 0..base.len() {
            let mut v = base.as_bytes().to_vec();
            v[i] ^= 1;
            assert!(seen.insert(h(std::str::from_utf8(&v).unwrap())), "byte {i}");
        }
        assert_ne!(h("ab"), h("abc"));
    }
}
