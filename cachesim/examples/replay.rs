//! Replays a Valgrind Lackey memory trace (`valgrind --tool=lackey --trace-mem=yes
//! --log-file=trace.log prog`) through the simulated hierarchy and prints Cachegrind's event
//! totals. The geometry is detected from the host like Valgrind, or given with
//! `--I1=… --D1=… --LL=…` before the trace file.
//!
//! ```text
//! cargo run -p cachesim --example replay -- [--I1=s,a,l] [--D1=…] [--LL=…] trace.log
//! ```
use std::process::ExitCode;

use cachesim::{cachegrind_desc_line, detect_host, CacheGeometry, CacheLevel, CacheOverrides};

fn addr_size(s: &str) -> Option<(u64, u64)> {
    let (a, n) = s.trim().split_once(',')?;
    Some((u64::from_str_radix(a, 16).ok()?, n.parse().ok()?))
}

fn main() -> ExitCode {
    let mut overrides = CacheOverrides::default();
    let mut path = None;
    for arg in std::env::args().skip(1) {
        if let Some((level, value)) = CacheLevel::split_option(&arg) {
            match CacheGeometry::parse(value) {
                Ok(g) => match level {
                    CacheLevel::I1 => overrides.i1 = Some(g),
                    CacheLevel::D1 => overrides.d1 = Some(g),
                    CacheLevel::LL => overrides.ll = Some(g),
                },
                Err(e) => {
                    for line in e.valgrind_lines(&arg) {
                        eprintln!("replay: {line}");
                    }
                    return ExitCode::FAILURE;
                }
            }
        } else {
            path = Some(arg);
        }
    }
    let Some(path) = path else {
        eprintln!("usage: replay [--I1=s,a,l] [--D1=s,a,l] [--LL=s,a,l] LACKEY_TRACE");
        return ExitCode::FAILURE;
    };
    let resolved = match detect_host().resolve(&overrides) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("replay: {e}");
            return ExitCode::FAILURE;
        }
    };
    for w in &resolved.warnings {
        eprintln!("-- {w}");
    }
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("replay: cannot read {path}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut h = match cachesim::Hierarchy::new(resolved.i1, resolved.d1, resolved.ll) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("replay: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw
    let mut t = [0u64; 9];
    for line in text.lines() {
        // A modify (M) is one reference counted as a read, as in Cachegrind.
        let (base, a, fetch) = if let Some(r) = line.strip_prefix("I  ") {
            (0, r, true)
        } else if let Some(r) = line
            .strip_prefix(" L ")
            .or_else(|| line.strip_prefix(" M "))
        {
            (3, r, false)
        } else if let Some(r) = line.strip_prefix(" S ") {
            (6, r, false)
        } else {
            continue;
        };
        let Some((addr, size)) = addr_size(a) else {
            continue;
        };
        let o = if fetch {
            h.fetch(addr, size)
        } else {
            h.data(addr, size)
        };
        t[base] += 1;
        t[base + 1] += u64::from(o.l1_miss());
        t[base + 2] += u64::from(o.ll_miss());
    }
    println!(
        "desc: {}",
        cachegrind_desc_line(CacheLevel::I1, &resolved.i1)
    );
    println!(
        "desc: {}",
        cachegrind_desc_line(CacheLevel::D1, &resolved.d1)
    );
    println!(
        "desc: {}",
        cachegrind_desc_line(CacheLevel::LL, &resolved.ll)
    );
    println!("events: Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw");
    let s: Vec<String> = t.iter().map(u64::to_string).collect();
    println!("summary: {}", s.join(" "));
    ExitCode::SUCCESS
}
