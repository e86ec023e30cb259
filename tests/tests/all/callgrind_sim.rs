//! `--tool=callgrind --cache-sim=yes` / `--branch-sim=yes`: event counts per source line of a
//! stride kernel whose misses are known (analytic), per function against Valgrind's own file
//! for the same run, the `events:` line, the summary/totals rule for the last block, and that
//! `callgrind_annotate --inclusive=yes` reads the files; and the simulations combined with
//! `--separate-threads`, `--dump-before` and `--dump-every-bb` (per thread and per part).
//!
//! The guests are compiled here from the sources below (gcc; skipped with a message when gcc
//! is missing), with explicit cache geometries so the host's caches do not matter.

use rgrind_tests::{run, run_rgrind, run_valgrind, scratch_dir, valgrind, which, Cmd, End};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const GEOMETRY: [&str; 3] = ["--I1=32768,8,64", "--D1=32768,8,64", "--LL=8388608,16,64"];

/// A stride kernel: three passes over 4096 cache lines (256 KiB, 8 times D1, 1/32 of LL) with
/// a load, a store and a read-modify-write, then `exit_group(0)`. Every instruction has its
/// own line (`gcc -g` on a `.S` file).
const STRIDE_S: &str = r#"    .globl _start; .type _start, @function
    .text
_start:
    lea buf(%rip), %rdi
    mov $4096, %ecx
1:  mov (%rdi), %rax
    add $64, %rdi
    dec %ecx
    jnz 1b
    lea buf(%rip), %rdi
    mov $4096, %ecx
2:  movq $1, (%rdi)
    add $64, %rdi
    dec %ecx
    jnz 2b
    lea buf(%rip), %rdi
    mov $4096, %ecx
3:  addq $1, 8(%rdi)
    add $64, %rdi
    dec %ecx
    jnz 3b
    mov $231, %eax
    xor %edi, %edi
    syscall
    .size _start, .-_start
    .bss
    .balign 4096
buf:
    .zero 262144
"#;

/// A C guest with calls, recursion, loops over arrays, an indirect call, string
/// instructions and an atomic read-modify-write.
const MIX_C: &str = r#"#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static long table[1 << 16];
__attribute__((noinline)) long fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
__attribute__((noinline)) long sweep(int stride) {
    long s = 0;
    for (int r = 0; r < 4; r++)
        for (int i = 0; i < (1 << 16); i += stride) { table[i] += i; s += table[i]; }
    return s;
}
__attribute__((noinline)) long twice(long x) { return 2 * x; }
__attribute__((noinline)) long thrice(long x) { return 3 * x; }
__attribute__((noinline)) long apply(long (*f)(long), int n) {
    long s = 0;
    for (int i = 0; i < n; i++) s += f(i);
    return s;
}
__attribute__((noinline)) void copy(char *d, const char *s, unsigned long n) {
    __asm__ volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
}
/* Tail calls with -foptimize-sibling-calls: a jump into twice, and a jump into strlen's
 * PLT stub. */
__attribute__((noinline)) long tail_twice(long x) { return twice(x + 1); }
__attribute__((noinline)) unsigned long tail_len(const char *s) { return strlen(s); }
static long counter;
__attribute__((noinline)) void bump(int n) {
    for (int i = 0; i < n; i++) __atomic_fetch_add(&counter, 1, __ATOMIC_SEQ_CST);
}
int main(int argc, char **argv) {
    (void)argv;
    char *a = malloc(100000), *b = malloc(100000);
    memset(a, argc, 100000);
    copy(b, a, 100000);
    bump(5000);
    long r = fib(18) + sweep(8) + sweep(1) + apply(argc > 5 ? thrice : twice, 3000)
        + apply(thrice, 2000) + b[777] + counter;
    for (int i = 0; i < 3000; i++) r += tail_twice(i) + (long)tail_len(i & 1 ? "ab" : a + 99990);
    printf("%ld\n", r);
    return 0;
}
"#;

/// Compiles `source` (file name `file`) with `flags`; None (with a message) without gcc.
fn build(file: &str, source: &str, flags: &[&str]) -> Option<PathBuf> {
    let gcc = which("gcc").or_else(|| {
        println!("gcc not installed: callgrind simulation tests skipped");
        None
    })?;
    let dir = scratch_dir().join("clgsim");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let src = dir.join(file);
    std::fs::write(&src, source).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    let out = dir.join(file.split('.').next().unwrap_or(file));
    let o = run(&Cmd::new(gcc)
        .args(flags)
        .args(["-g", "-o"])
        .args([out.as_os_str(), src.as_os_str()]));
    assert_eq!(o.end(), End::Exit(0), "gcc failed: {}", o.describe());
    Some(out)
}

/// What a Callgrind file says, per function name (with `'2` suffixes), for the default
/// options (line positions, compressed names and positions).
#[derive(Default, Debug)]
struct Profile {
    events: Vec<String>,
    /// Self cost per function.
    self_cost: BTreeMap<String, Vec<u64>>,
    /// Self cost per (function, line).
    lines: BTreeMap<(String, u64), Vec<u64>>,
    /// (caller, callee) -> (calls, inclusive cost).
    arcs: BTreeMap<(String, String), (u64, Vec<u64>)>,
    summary: Vec<u64>,
    totals: Vec<u64>,
}

impl Profile {
    /// The value of event `e` in `v` (0 when absent).
    fn ev(&self, v: &[u64], e: &str) -> u64 {
        let i = self
            .events
            .iter()
            .position(|x| x == e)
            .unwrap_or_else(|| panic!("no event {e} in {:?}", self.events));
        v.get(i).copied().unwrap_or(0)
    }

    fn fn_ev(&self, f: &str, e: &str) -> u64 {
        self.self_cost.get(f).map_or(0, |v| self.ev(v, e))
    }

    fn line_ev(&self, f: &str, line: u64, e: &str) -> u64 {
        self.lines
            .get(&(f.to_string(), line))
            .map_or(0, |v| self.ev(v, e))
    }
}

fn nums(s: &str) -> Vec<u64> {
    s.split_whitespace()
        .map(|x| x.parse().unwrap_or_else(|_| panic!("bad number {x:?}")))
        .collect()
}

fn add(acc: &mut Vec<u64>, v: &[u64]) {
    if acc.len() < v.len() {
        acc.resize(v.len(), 0);
    }
    for (a, b) in acc.iter_mut().zip(v) {
        *a += b;
    }
}

fn parse(text: &str) -> Profile {
    let mut p = Profile::default();
    // One space: these readers only resolve function names.
    let mut names = rgrind_tests::CallgrindNames::default();
    let mut name = |v: &str| names.resolve('f', v);
    let (mut cur, mut callee, mut pending, mut last) = (String::new(), String::new(), None, 0u64);
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("events: ") {
            p.events = v.split_whitespace().map(String::from).collect();
        } else if let Some(v) = line.strip_prefix("summary: ") {
            p.summary = nums(v);
        } else if let Some(v) = line.strip_prefix("totals: ") {
            p.totals = nums(v);
        } else if let Some(v) = line.strip_prefix("fn=") {
            cur = name(v);
            last = 0;
        } else if let Some(v) = line.strip_prefix("cfn=") {
            callee = name(v);
        } else if let Some(v) = line.strip_prefix("calls=") {
            pending = v
                .split_whitespace()
                .next()
                .and_then(|c| c.parse::<u64>().ok());
        } else if line.starts_with(|c: char| c.is_ascii_digit() || "+-*".contains(c)) {
            let (pos, costs) = line.split_once(' ').unwrap_or((line, ""));
            let abs = match pos.as_bytes()[0] {
                b'*' => last,
                b'+' => last + pos[1..].parse::<u64>().unwrap_or(0),
                b'-' => last - pos[1..].parse::<u64>().unwrap_or(0),
                _ => pos.parse().unwrap_or(0),
            };
            let costs = nums(costs);
            match pending.take() {
                // The call-site line does not move the position reference.
                Some(calls) => {
                    let e = p.arcs.entry((cur.clone(), callee.clone())).or_default();
                    e.0 += calls;
                    add(&mut e.1, &costs);
                }
                None => {
                    last = abs;
                    add(p.self_cost.entry(cur.clone()).or_default(), &costs);
                    add(p.lines.entry((cur.clone(), abs)).or_default(), &costs);
                }
            }
        }
    }
    // Trailing zero events are left out of these lines, as of cost lines.
    let n = p.events.len();
    p.summary.resize(n.max(p.summary.len()), 0);
    p.totals.resize(n.max(p.totals.len()), 0);
    p
}

fn read_profile(out: &Path) -> Profile {
    let text = std::fs::read_to_string(out).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
    parse(&text)
}

/// Runs `exe` under rgrind's callgrind with `opts`; returns the profile and stderr.
fn rgrind_profile(exe: &Path, name: &str, opts: &[&str]) -> (Profile, String) {
    let out = scratch_dir().join("clgsim").join(name);
    let _ = std::fs::remove_file(&out);
    let file = format!("--callgrind-out-file={}", out.display());
    let mut all = vec!["--tool=callgrind", file.as_str()];
    all.extend_from_slice(opts);
    let o = run_rgrind(&all, &Cmd::new(exe));
    assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
    (read_profile(&out), o.stderr_str())
}

const FULL: &str = "Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw Bc Bcm Bi Bim";

#[test]
fn stride_kernel_misses_are_the_analytic_ones() {
    let Some(exe) = build(
        "clgsim_stride.S",
        STRIDE_S,
        &["-nostdlib", "-static", "-no-pie"],
    ) else {
        return;
    };
    let mut opts = vec!["--cache-sim=yes", "--branch-sim=yes"];
    opts.extend(GEOMETRY);
    let (p, err) = rgrind_profile(&exe, "stride.out", &opts);
    assert_eq!(p.events.join(" "), FULL, "{p:?}");
    // `_start` is one of the names Valgrind shows as "(below main)".
    let f = "(below main)";
    let n = 4096;
    // Loop 1 (lines 6-9): a load per line of the buffer; all cold, so D1 and LL miss.
    assert_eq!(p.line_ev(f, 6, "Ir"), n, "{p:?}");
    assert_eq!(p.line_ev(f, 6, "Dr"), n);
    assert_eq!(p.line_ev(f, 6, "D1mr"), n);
    assert_eq!(p.line_ev(f, 6, "DLmr"), n);
    assert_eq!(p.line_ev(f, 6, "Dw"), 0);
    // Loop 2: a store per line; D1 (32 KiB) holds only the last 512 lines of loop 1, LL
    // holds them all: every store misses D1 and hits LL.
    assert_eq!(p.line_ev(f, 12, "Dw"), n);
    assert_eq!(p.line_ev(f, 12, "D1mw"), n);
    assert_eq!(p.line_ev(f, 12, "DLmw"), 0);
    assert_eq!(p.line_ev(f, 12, "Dr"), 0);
    // Loop 3: Callgrind counts a read-modify-write as one write (Cachegrind as one read).
    assert_eq!(p.line_ev(f, 18, "Dw"), n);
    assert_eq!(p.line_ev(f, 18, "Dr"), 0);
    assert_eq!(p.line_ev(f, 18, "D1mw"), n);
    assert_eq!(p.line_ev(f, 18, "DLmw"), 0);
    for l in [7, 8, 13, 14, 19, 20] {
        assert_eq!(p.line_ev(f, l, "Ir"), n, "line {l}");
        assert_eq!(p.line_ev(f, l, "Dr") + p.line_ev(f, l, "Dw"), 0, "line {l}");
    }
    // Each jnz: 4096 conditional branches, a handful of mispredicts while the predictor's
    // history warms up and at the exit; no indirect branch.
    for l in [9, 15, 21] {
        assert_eq!(p.line_ev(f, l, "Bc"), n, "line {l}");
        let m = p.line_ev(f, l, "Bcm");
        assert!((1..=16).contains(&m), "line {l}: {m} mispredicts");
    }
    assert_eq!(p.fn_ev(f, "Bi"), 0);
    // The code (24 instructions, 84 bytes) spans at most 3 lines: each misses I1 once.
    let i1 = p.fn_ev(f, "I1mr");
    assert!((1..=3).contains(&i1), "I1mr {i1}");
    assert_eq!(p.fn_ev(f, "ILmr"), i1);
    // Callgrind dumps a cost centre only once an execution of it finished: the last block
    // (mov, xor, syscall) is in the summary but not in the totals.
    assert_eq!(p.line_ev(f, 22, "Ir"), 0, "{p:?}");
    assert_eq!(p.ev(&p.summary, "Ir"), p.ev(&p.totals, "Ir") + 3);
    assert_eq!(p.ev(&p.totals, "Ir"), 6 + 12 * n);
    assert!(err.contains("Events    : Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw Bc Bcm Bi Bim"));
    assert!(err.contains("D   refs:"), "{err}");
    assert!(err.contains(" rd + "), "Callgrind's spacing: {err}");
    assert!(err.contains("Mispred rate:"), "{err}");
}

#[test]
fn events_lines_follow_the_simulation_options() {
    let Some(exe) = build(
        "clgsim_stride2.S",
        STRIDE_S,
        &["-nostdlib", "-static", "-no-pie"],
    ) else {
        return;
    };
    for (opts, want) in [
        (vec!["--branch-sim=yes"], "Ir Bc Bcm Bi Bim"),
        (
            vec!["--cache-sim=yes"],
            "Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw",
        ),
        // A cache geometry switches the cache simulation on, as in Callgrind.
        (
            vec!["--D1=32768,8,64"],
            "Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw",
        ),
        (vec![], "Ir"),
    ] {
        let (p, _) = rgrind_profile(&exe, "events.out", &opts);
        assert_eq!(p.events.join(" "), want, "{opts:?}");
        assert_eq!(p.ev(&p.totals, "Ir"), 6 + 12 * 4096, "{opts:?}");
        if opts == ["--branch-sim=yes"] {
            // Without cache simulation Callgrind charges a block when the next one starts:
            // the last block is in neither the summary nor the totals.
            assert_eq!(p.summary, p.totals, "{opts:?}");
            assert_eq!(p.fn_ev("(below main)", "Bc"), 3 * 4096);
        }
    }
}

/// `exe`'s profiles under rgrind and Valgrind (`vg`) with `--tool=callgrind` and `opts`
/// (files `<scratch>/clgsim/<name>.rg` and `.vg`); Valgrind's run must exit 0.
fn mine_and_valgrinds(vg: &Path, exe: &Path, name: &str, opts: &[&str]) -> (Profile, Profile) {
    let (mine, _) = rgrind_profile(exe, &format!("{name}.rg"), opts);
    let out = scratch_dir().join("clgsim").join(format!("{name}.vg"));
    let file = format!("--callgrind-out-file={}", out.display());
    let mut vopts = vec!["--tool=callgrind", file.as_str()];
    vopts.extend(opts);
    let o = run_valgrind(vg, &vopts, &Cmd::new(exe));
    assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
    (mine, read_profile(&out))
}

#[test]
fn events_match_valgrind_per_function() {
    let Some(vg) = valgrind() else {
        println!("valgrind not installed: comparison skipped");
        return;
    };
    let Some(exe) = build("clgsim_mix.c", MIX_C, &["-O1", "-foptimize-sibling-calls"]) else {
        return;
    };
    for (tag, sim) in [
        ("both", vec!["--cache-sim=yes", "--branch-sim=yes"]),
        ("branch", vec!["--branch-sim=yes"]),
    ] {
        let mut opts = sim.clone();
        opts.extend(GEOMETRY);
        let (mine, theirs) = mine_and_valgrinds(&vg, &exe, &format!("mix-{tag}"), &opts);
        assert_eq!(mine.events, theirs.events, "{tag}");
        for f in [
            "fib",
            "fib'2",
            "sweep",
            "apply",
            "twice",
            "thrice",
            "copy",
            "bump",
            "tail_twice",
            "tail_len",
        ] {
            assert!(
                mine.self_cost.contains_key(f),
                "{tag}: no {f} in rgrind's file"
            );
            assert!(
                theirs.self_cost.contains_key(f),
                "{tag}: no {f} in Valgrind's file"
            );
            same_fn(&mine, &theirs, f, tag);
        }
        for (caller, callee) in [
            ("main", "fib"),
            ("fib", "fib'2"),
            ("fib'2", "fib'2"),
            ("main", "sweep"),
            ("apply", "twice"),
            ("apply", "thrice"),
            ("main", "bump"),
            // Tail calls (inline after the first few, frames popped by the callee's return).
            ("main", "tail_twice"),
            ("tail_twice", "twice"),
            ("main", "tail_len"),
        ] {
            let key = (caller.to_string(), callee.to_string());
            let (m, t) = (&mine.arcs[&key], &theirs.arcs[&key]);
            assert_eq!(m.0, t.0, "{tag}: calls {caller} -> {callee}");
            let (a, b) = (mine.ev(&m.1, "Ir"), theirs.ev(&t.1, "Ir"));
            assert!(
                a.abs_diff(b) * 50 <= b,
                "{tag}: inclusive Ir {caller} -> {callee}: {a} vs {b}"
            );
        }
    }
}

/// Reads `k` lines `way` bytes apart (one set of a cache whose way is `way` bytes) round
/// after round: once they are in, each read hits in way `k - 1` of its set when `k` is at
/// most the associativity, and misses when it is more. All in `main`, with no call between
/// the rounds: a return address read in the same set would take a way, and where the stack
/// lies differs between rgrind and Valgrind.
const WAYS_C: &str = r#"#include <stdlib.h>
#include <stdio.h>
int main(void) {
    static const long ways[] = {256, 2048, 4096, 8192};
    static const int ks[] = {2, 3, 4, 7, 12, 13, 16, 31, 32, 33};
    const volatile char *buf = calloc(8192, 34);
    if (!buf) return 1;
    long s = 0;
    for (int w = 0; w < 4; w++)
        for (int j = 0; j < 10; j++)
            for (int r = 0; r < 40; r++)
                for (int i = 0; i < ks[j]; i++) s += buf[(long)i * ways[w]];
    printf("%ld\n", s);
    return 0;
}
"#;

/// The inline L1 scan has one form per associativity range (direct-mapped; ways 1 and 2
/// tested one by one; up to 16 ways in straight-line code, where a hit jumps into the miss's
/// shift; more in loops) and the LL has its own: each must leave the tags as Valgrind's
/// simulator does, so the misses of reads that hit in every way of a set (`WAYS_C`) agree
/// with Valgrind's under caches of 1, 2, 3, 12 and 32 ways.
#[test]
fn associativities_match_valgrind() {
    let Some(vg) = valgrind() else {
        println!("valgrind not installed: comparison skipped");
        return;
    };
    let Some(exe) = build("clgsim_ways.c", WAYS_C, &["-O1"]) else {
        return;
    };
    for (tag, geometry) in [
        (
            "w1",
            ["--I1=2048,1,64", "--D1=2048,1,64", "--LL=65536,2,64"],
        ),
        (
            "w2",
            ["--I1=4096,2,64", "--D1=4096,2,64", "--LL=65536,4,64"],
        ),
        (
            "w3",
            ["--I1=6144,3,64", "--D1=6144,3,64", "--LL=98304,3,64"],
        ),
        (
            "w12",
            ["--I1=49152,12,64", "--D1=49152,12,64", "--LL=1572864,12,64"],
        ),
        (
            "w32",
            ["--I1=8192,32,64", "--D1=8192,32,64", "--LL=262144,32,64"],
        ),
    ] {
        let mut opts = vec!["--cache-sim=yes"];
        opts.extend(geometry);
        let (mine, theirs) = mine_and_valgrinds(&vg, &exe, &format!("ways-{tag}"), &opts);
        same_fn(&mine, &theirs, "main", tag);
        // Thousands of reads miss and hit in every geometry (not a comparison of all-misses
        // or of zeros).
        let (reads, misses) = (mine.fn_ev("main", "Dr"), mine.fn_ev("main", "D1mr"));
        let hits = reads - misses.min(reads);
        let enough = if tag == "w1" { 100 } else { 1000 };
        assert!(
            misses > 1000 && hits > enough,
            "{tag}: main's D1 misses {misses} of {reads}"
        );
    }
}

#[test]
fn callgrind_annotate_reads_the_files() {
    let Some(annotate) = which("callgrind_annotate") else {
        println!("callgrind_annotate not installed: skipped");
        return;
    };
    let Some(exe) = build("clgsim_mix2.c", MIX_C, &["-O1"]) else {
        return;
    };
    for (tag, sim) in [
        ("both", vec!["--cache-sim=yes", "--branch-sim=yes"]),
        ("cache", vec!["--cache-sim=yes"]),
        ("branch", vec!["--branch-sim=yes"]),
    ] {
        let mut opts = sim;
        opts.extend(GEOMETRY);
        let name = format!("annotate-{tag}.out");
        let (p, _) = rgrind_profile(&exe, &name, &opts);
        let out = scratch_dir().join("clgsim").join(&name);
        let o = run(&Cmd::new(&annotate).args(["--inclusive=yes".as_ref(), out.as_os_str()]));
        assert_eq!(o.end(), End::Exit(0), "{tag}: {}", o.describe());
        let text = o.stdout_str();
        assert!(
            text.contains(&format!("Events recorded:  {}", p.events.join(" "))),
            "{tag}: {text}"
        );
        assert!(text.contains(":sweep ["), "{tag}: {text}");
        assert!(text.contains(":main ["), "{tag}: {text}");
        assert!(
            !o.stderr_str().contains("uninitialized"),
            "{tag}: {}",
            o.describe()
        );
    }
}

/// Runs `exe` under rgrind (or Valgrind, `vg`) with `--tool=callgrind`, the output file
/// `<scratch>/clgsim/<name>/cg.out` and `opts`; returns every non-empty file it wrote, by name.
fn profiles(vg: Option<&Path>, exe: &Path, name: &str, opts: &[&str]) -> BTreeMap<String, Profile> {
    use crate::callgrind_opts::{files, fresh_dir, profile};
    let dir = fresh_dir(&format!("clgsim/{name}"));
    profile(vg, exe, &dir, opts);
    files(&dir)
        .into_iter()
        .filter(|(_, text)| !text.is_empty())
        .map(|(n, text)| (n, parse(&text)))
        .collect()
}

/// The events of a file's self-cost lines, summed.
fn self_sum(p: &Profile) -> Vec<u64> {
    let mut acc = vec![0; p.events.len()];
    for v in p.self_cost.values() {
        add(&mut acc, v);
    }
    acc
}

/// `self` and `theirs` agree on function `f`: Ir exactly, the other events within 2% (or 3).
fn same_fn(mine: &Profile, theirs: &Profile, f: &str, what: &str) {
    assert_eq!(mine.events, theirs.events, "{what}");
    for e in &mine.events {
        let (a, b) = (mine.fn_ev(f, e), theirs.fn_ev(f, e));
        if e == "Ir" {
            assert_eq!(a, b, "{what}: self Ir of {f}");
        } else {
            assert!(
                a.abs_diff(b) * 50 <= b || a.abs_diff(b) <= 3,
                "{what}: {e} of {f}: {a} vs Valgrind's {b}"
            );
        }
    }
}

#[test]
fn separate_threads_with_cache_simulation_match_valgrind() {
    let Some(exe) = build(
        "clgsim_threads.c",
        crate::callgrind_opts::THREADS_C,
        &["-O1", "-pthread"],
    ) else {
        return;
    };
    let mut opts = vec!["--separate-threads=yes", "--cache-sim=yes"];
    opts.extend(GEOMETRY);
    let mine = profiles(None, &exe, "threads.rg", &opts);
    assert_eq!(
        mine.keys().map(String::as_str).collect::<Vec<_>>(),
        ["cg.out-01", "cg.out-02", "cg.out-03"],
        "one file per thread slot (the base file stays empty)"
    );
    for (n, p) in &mine {
        assert_eq!(
            p.events.join(" "),
            "Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw",
            "{n}"
        );
        // Each file holds its own thread's costs of every event.
        assert_eq!(self_sum(p), p.totals, "{n}");
        // The thread's last block ran but did not finish: in the summary, not the totals.
        assert!(
            p.ev(&p.summary, "Ir") > p.ev(&p.totals, "Ir"),
            "{n}: {:?} {:?}",
            p.summary,
            p.totals
        );
    }
    assert!(mine["cg.out-02"].fn_ev("work_a", "Ir") > 30000);
    assert_eq!(mine["cg.out-01"].fn_ev("work_a", "Ir"), 0);
    assert_eq!(mine["cg.out-03"].fn_ev("work_a", "Ir"), 0);

    let Some(vg) = valgrind() else {
        println!("valgrind not installed: comparison skipped");
        return;
    };
    let theirs = profiles(Some(&vg), &exe, "threads.vg", &opts);
    assert_eq!(
        mine.keys().collect::<Vec<_>>(),
        theirs.keys().collect::<Vec<_>>()
    );
    for (n, f) in [
        ("cg.out-02", "work_a"),
        ("cg.out-02", "work_c"),
        ("cg.out-02", "ta"),
        ("cg.out-03", "work_b"),
        ("cg.out-03", "tb"),
        ("cg.out-01", "main"),
    ] {
        same_fn(&mine[n], &theirs[n], f, n);
    }
    for n in mine.keys() {
        let gap = |p: &Profile| p.ev(&p.summary, "Ir") - p.ev(&p.totals, "Ir");
        assert_eq!(gap(&mine[n]), gap(&theirs[n]), "{n}: unfinished last block");
    }
}

#[test]
fn dump_before_with_cache_simulation_dumps_before_the_block_runs() {
    let Some(exe) = build("clgsim_loop.c", crate::callgrind_opts::LOOP_C, &["-O0"]) else {
        return;
    };
    let mut opts = vec!["--cache-sim=yes"];
    opts.extend(GEOMETRY);
    let whole = &profiles(None, &exe, "loop-whole.rg", &opts)["cg.out"];
    opts.push("--dump-before=spin");
    let mine = profiles(None, &exe, "loop-db.rg", &opts);
    assert_eq!(
        mine.keys().map(String::as_str).collect::<Vec<_>>(),
        ["cg.out", "cg.out.1"]
    );
    let (before, after) = (&mine["cg.out.1"], &mine["cg.out"]);
    // The dump comes before `spin`'s first block runs: part 1's running cost (summary) is
    // exactly what it wrote, and `spin` is all in part 2.
    assert_eq!(before.summary, before.totals, "part 1: summary and totals");
    assert_eq!(before.fn_ev("spin", "Ir"), 0);
    assert!(after.fn_ev("spin", "Ir") > 2_470_000 * 10);
    // The two parts add up to the run without the trigger, event by event.
    let mut sum = before.totals.clone();
    add(&mut sum, &after.totals);
    assert_eq!(sum, whole.totals);

    let Some(vg) = valgrind() else {
        println!("valgrind not installed: comparison skipped");
        return;
    };
    let theirs = profiles(Some(&vg), &exe, "loop-db.vg", &opts);
    assert_eq!(
        mine.keys().collect::<Vec<_>>(),
        theirs.keys().collect::<Vec<_>>()
    );
    let (tb, ta) = (&theirs["cg.out.1"], &theirs["cg.out"]);
    assert_eq!(tb.summary, tb.totals, "Valgrind's part 1");
    same_fn(before, tb, "main", "part 1");
    same_fn(after, ta, "spin", "part 2");
    same_fn(after, ta, "main", "part 2");
}

#[test]
fn periodic_dumps_with_simulation_and_jumps_add_up_to_one_run() {
    let Some(exe) = build("clgsim_loop2.c", crate::callgrind_opts::LOOP_C, &["-O0"]) else {
        return;
    };
    let mut opts = vec!["--cache-sim=yes", "--branch-sim=yes", "--collect-jumps=yes"];
    opts.extend(GEOMETRY);
    let whole = &profiles(None, &exe, "loop-every-whole.rg", &opts)["cg.out"];
    opts.push("--dump-every-bb=1000000");
    let parts = profiles(None, &exe, "loop-every.rg", &opts);
    assert_eq!(
        parts.keys().map(String::as_str).collect::<Vec<_>>(),
        ["cg.out", "cg.out.1", "cg.out.2"]
    );
    let mut sum = Vec::new();
    for (n, p) in &parts {
        assert_eq!(p.events.join(" "), FULL, "{n}");
        assert_eq!(self_sum(p), p.totals, "{n}");
        add(&mut sum, &p.totals);
    }
    assert_eq!(sum, whole.totals, "the parts add up to one run");
    // A middle part is all loop (one 19-instruction block with one conditional branch per
    // iteration, about N of them), and every block of it finished.
    let mid = &parts["cg.out.2"];
    assert_eq!(mid.summary, mid.totals);
    let bc = mid.fn_ev("spin", "Bc");
    assert!((990_000..=1_000_001).contains(&bc), "Bc of spin: {bc}");
    assert_eq!(mid.fn_ev("spin", "Ir"), 19 * bc);
}

/// Instrumentation switched on and off from the guest, with work in between that is not
/// simulated.
const TOGGLED_C: &str = r#"#include <stdio.h>
#include <valgrind/callgrind.h>
static long table[1 << 17];
__attribute__((noinline)) long sweep(int stride) {
    long s = 0;
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < (1 << 17); i += stride) { table[i] += i; s += table[i]; }
    return s;
}
int main(void) {
    long s = sweep(8);
    for (int k = 0; k < 3; k++) {
        CALLGRIND_START_INSTRUMENTATION;
        s += sweep(8 + k);
        CALLGRIND_STOP_INSTRUMENTATION;
        s += sweep(1);
    }
    printf("%ld\n", s);
    return 0;
}
"#;

/// Callgrind clears the simulated caches whenever instrumentation is switched on or off;
/// the LL's MRU copy that generated code reads must stay where it was. Until the
/// twenty-fourth session a clear reallocated it, and with an LL of 16384 sets or more (the
/// host's own 64 MiB LL here, and CodSpeed-like runs on large hosts) the first
/// `CALLGRIND_START_INSTRUMENTATION` left the inline check reading an unmapped page (that
/// build crashes here with every LL of 32 MiB and up; whether freed memory is unmapped
/// depends on the allocator, so `cachesim`'s unit test that `clear` keeps the address is the
/// exact guard). The events after each switch must be Valgrind's.
#[test]
fn instrumentation_switches_clear_a_large_ll_in_place() {
    if !Path::new("/usr/include/valgrind/callgrind.h").exists() {
        println!("valgrind/callgrind.h not installed: test skipped");
        return;
    }
    let Some(vg) = valgrind() else {
        println!("valgrind not installed: comparison skipped");
        return;
    };
    let Some(exe) = build("clgsim_toggled.c", TOGGLED_C, &["-O1"]) else {
        return;
    };
    let opts = [
        "--cache-sim=yes",
        "--instr-atstart=no",
        "--I1=32768,8,64",
        "--D1=32768,8,64",
        "--LL=67108864,16,64",
    ];
    let (mine, theirs) = mine_and_valgrinds(&vg, &exe, "toggled", &opts);
    same_fn(&mine, &theirs, "sweep", "toggled");
    // Each instrumented sweep starts from cleared caches: its first pass misses LL once per
    // line it reads (a stride of 8 or more longs reads a new line each time), and the table
    // (1 MiB) stays in LL for the other two.
    let reads = |stride: u64| (1u64 << 17).div_ceil(stride);
    let misses = mine.fn_ev("sweep", "DLmr") + mine.fn_ev("sweep", "DLmw");
    assert_eq!(
        misses,
        reads(8) + reads(9) + reads(10),
        "LL misses of sweep"
    );
}
