//! Rust names as Valgrind shows them: trait impls, a generic impl and a drop glue (legacy
//! symbols with `..` and `$LT$` escapes in their paths; built again with v0 mangling).
use std::fmt;

struct Thing {
    v: Vec<u64>,
}

impl fmt::Display for Thing {
    #[inline(never)]
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}", self.v.iter().sum::<u64>())
    }
}

impl Drop for Thing {
    #[inline(never)]
    fn drop(&mut self) {
        println!("dropping {}", self.v.len());
    }
}

trait Work {
    fn work(&self) -> u64;
}

impl<T: AsRef<[u64]>> Work for T {
    #[inline(never)]
    fn work(&self) -> u64 {
        self.as_ref().iter().map(|x| x * 3).sum()
    }
}

fn main() {
    let t = Thing {
        v: (0..1000).collect(),
    };
    println!("{t} {}", std::hint::black_box(&t.v).work());
}
