//! `--tool=callgrind` with `--collect-jumps=yes`, `--separate-threads=yes` and
//! `--dump-every-bb=N`: the files rgrind writes are compared with Valgrind's for the same
//! guest (when Valgrind is installed) and with values computed by hand, and every file is read
//! back by `callgrind_annotate` (when installed).
//!
//! The guests are small C programs kept in this file and compiled with gcc into the scratch
//! folder (skipped with a message without gcc), so their code does not depend on the project's
//! guest set. Only the guests' own functions are compared with Valgrind: the dynamic loader's
//! start-up work differs between the two (Valgrind's preload libraries and CPU features).

use rgrind_tests::{run, run_rgrind, run_valgrind, scratch_dir, valgrind, which, Cmd, End};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Conditional branches of both polarities, a switch through a jump table, `rep` string
/// instructions (after other instructions, first in their block, `repe`), branches to the next
/// instruction, a tail call.
const JUMPS_C: &str = r#"
#include <stdio.h>
#include <string.h>
static char src[256], dst[256];
__attribute__((noinline)) int classify(int x) {
    switch (x & 7) {
    case 0: return x * 3;
    case 1: return x + 11;
    case 2: return x ^ 5;
    case 3: return x - 2;
    case 4: return x << 1;
    case 5: return x >> 1;
    default: return 0;
    }
}
__attribute__((noinline)) long copy_rep(long n) {
    char *d = dst, *s = src;
    __asm__ volatile("mov %2, %%rcx\n\trep movsb" : "+D"(d), "+S"(s) : "r"(n) : "rcx", "memory");
    return d - dst;
}
__attribute__((noinline)) long fill_rep(long n) {
    char *d = dst;
    long c = n;
    __asm__ volatile("jmp 1f\n1:\trep stosb" : "+D"(d), "+c"(c) : "a"(0x41) : "memory");
    return d - dst;
}
__attribute__((noinline)) long cmp_rep(long n) {
    char *a = src, *b = dst;
    long c = n;
    __asm__ volatile("repe cmpsb" : "+D"(a), "+S"(b), "+c"(c) : : "memory", "cc");
    return c;
}
__attribute__((noinline)) int to_next(int x) {
    int r;
    __asm__ volatile("test %1, %1\n\tjz 1f\n1:\tjmp 2f\n2:\tmov %1, %0" : "=r"(r) : "r"(x) : "cc");
    return r;
}
__attribute__((noinline)) int leaf(int x) { return x * 7 + 1; }
__attribute__((noinline)) int tail(int x) { if (x > 1000) return x; return leaf(x + 1); }
int main(void) {
    long s = 0;
    for (int i = 0; i < 200; i++) {
        s += classify(i);
        if (i % 3 != 0) s += to_next(i);
        else s -= tail(i);
    }
    for (int i = 0; i < 256; i++) src[i] = (char)(i % 13);
    for (int n = 0; n < 40; n += 3) {
        s += copy_rep(n);
        s += fill_rep(n);
        memcpy(dst, src, sizeof dst);
        dst[n] ^= 1;
        s += cmp_rep(n + 1);
        s += cmp_rep(0);
    }
    printf("%ld\n", s);
    return 0;
}
"#;

/// The guest's own functions.
const JUMP_FNS: &[&str] = &[
    "main", "classify", "copy_rep", "fill_rep", "cmp_rep", "to_next", "leaf", "tail",
];

/// Threads with fixed Valgrind thread ids: A (2) waits until B (3) has run; C, created after
/// both ended, reuses slot 2.
pub(crate) const THREADS_C: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
static int p[2];
__attribute__((noinline)) long work_a(long n) { long s = 0; for (long i = 0; i < n; i++) s += i % 7; return s; }
__attribute__((noinline)) long work_b(long n) { long s = 0; for (long i = 0; i < n; i++) s ^= i * 3; return s; }
__attribute__((noinline)) long work_c(long n) { long s = 1; for (long i = 0; i < n; i++) s += s >> 3; return s; }
static void *ta(void *x) { char c; if (read(p[0], &c, 1) != 1) return 0; return (void *)work_a((long)x); }
static void *tb(void *x) { return (void *)work_b((long)x); }
static void *tc(void *x) { return (void *)work_c((long)x); }
int main(void) {
    pthread_t a, b, c;
    void *ra, *rb, *rc;
    if (pipe(p)) return 1;
    pthread_create(&a, 0, ta, (void *)30000);
    pthread_create(&b, 0, tb, (void *)20000);
    pthread_join(b, &rb);
    if (write(p[1], "x", 1) != 1) return 1;
    pthread_join(a, &ra);
    pthread_create(&c, 0, tc, (void *)10000);
    pthread_join(c, &rc);
    printf("%ld %ld %ld\n", (long)ra, (long)rb, (long)rc);
    return 0;
}
"#;

/// About 2.5 million blocks in one loop (at -O0 each iteration is one block).
pub(crate) const LOOP_C: &str = r#"
#include <stdio.h>
__attribute__((noinline)) long spin(long n) { long s = 0; for (long i = 0; i < n; i++) s += i % 7; return s; }
int main(void) { printf("%ld\n", spin(2470000)); return 0; }
"#;

/// Compiles `source` with `flags`; None (with a message) without gcc.
pub(crate) fn build(name: &str, source: &str, flags: &[&str]) -> Option<PathBuf> {
    let gcc = which("gcc").or_else(|| {
        println!("gcc not installed: callgrind option tests skipped");
        None
    })?;
    let dir = scratch_dir();
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    let out = dir.join(name);
    let o = run(&Cmd::new(gcc)
        .args(flags)
        .args(["-g", "-o"])
        .args([out.as_os_str(), src.as_os_str()]));
    assert_eq!(o.end(), End::Exit(0), "gcc failed: {}", o.describe());
    Some(out)
}

/// A fresh folder for one run's files.
pub(crate) fn fresh_dir(name: &str) -> PathBuf {
    let d = scratch_dir().join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
    d
}

/// Runs `exe` under rgrind (or Valgrind) with `--tool=callgrind`, the output file
/// `dir/cg.out` and `opts`; the run must succeed.
pub(crate) fn profile(vg: Option<&Path>, exe: &Path, dir: &Path, opts: &[&str]) {
    let file = format!("--callgrind-out-file={}", dir.join("cg.out").display());
    let mut all = vec!["--tool=callgrind", file.as_str()];
    all.extend_from_slice(opts);
    let cmd = Cmd::new(exe);
    let o = match vg {
        Some(v) => run_valgrind(v, &all, &cmd),
        None => run_rgrind(&all, &cmd),
    };
    assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
}

/// Every file of a run folder, by name.
pub(crate) fn files(dir: &Path) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.expect("dir entry").path();
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        m.insert(name.unwrap_or_default(), text);
    }
    m
}

/// `callgrind_annotate` must read the file and print its totals (when it is installed).
fn annotate_reads(path: &Path) {
    let Some(ca) = which("callgrind_annotate") else {
        println!("callgrind_annotate not installed: read-back skipped");
        return;
    };
    let o = run(&Cmd::new(ca).args([path]));
    assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
    assert!(
        o.stdout_str().contains("PROGRAM TOTALS"),
        "{}",
        o.describe()
    );
}

/// A jump record: (function, source position, target position, `jump`/`jcnd`, counts).
type JumpKey = (String, Vec<u64>, Vec<u64>, String, String);

/// What the tests read from a Callgrind file: self Ir per function, jump records, header.
#[derive(Default, Debug)]
struct ClFile {
    self_ir: BTreeMap<String, u64>,
    jumps: BTreeMap<JumpKey, u32>,
    header: BTreeMap<String, String>,
    totals: u64,
}

/// Reads Callgrind's text format as 3.19 writes it: name compression, relative subpositions
/// (relative to the last self-cost line of the function block), `calls=`/`jump=`/`jcnd=`
/// records each followed by their source-position line.
fn read_cl(text: &str) -> ClFile {
    let mut f = ClFile::default();
    let mut names = rgrind_tests::CallgrindNames::default();
    let mut npos = 1;
    let mut cur = String::new();
    let mut last: Vec<u64> = Vec::new();
    // Some(None): the next line is a call site; Some(Some(..)): a jump's source line.
    let mut pending: Option<Option<(String, String, Vec<u64>)>> = None;
    let mut name = |space: char, v: &str| names.resolve(space, v);
    let pos = |toks: &[&str], last: &[u64]| -> Vec<u64> {
        toks.iter()
            .enumerate()
            .map(|(i, t)| {
                let l = last.get(i).copied().unwrap_or(0);
                if *t == "*" {
                    l
                } else if let Some(d) = t.strip_prefix('+') {
                    l + d.parse::<u64>().unwrap_or(0)
                } else if let Some(d) = t.strip_prefix('-') {
                    l - d.parse::<u64>().unwrap_or(0)
                } else if let Some(h) = t.strip_prefix("0x") {
                    u64::from_str_radix(h, 16).unwrap_or(0)
                } else {
                    t.parse().unwrap_or(0)
                }
            })
            .collect()
    };
    for line in text.lines() {
        if let Some((k, v)) = line.split_once(": ") {
            if !line.starts_with(|c: char| c.is_ascii_digit() || "+-*".contains(c)) {
                f.header.insert(k.to_string(), v.to_string());
                if k == "positions" {
                    npos = v.split_whitespace().count();
                }
                if k == "totals" {
                    f.totals = v.trim().parse().unwrap_or(0);
                }
                continue;
            }
        }
        if let Some((k, v)) = line.split_once('=') {
            match k {
                "fn" => {
                    cur = name('f', v);
                    last.clear();
                }
                "cfn" | "jfn" => {
                    name('f', v);
                }
                "ob" | "cob" => {
                    name('o', v);
                }
                "fl" | "fi" | "fe" | "cfi" | "jfi" => {
                    name('l', v);
                }
                "calls" => pending = Some(None),
                "jump" | "jcnd" => {
                    let mut it = v.splitn(2, ' ');
                    let counts = it.next().unwrap_or("").to_string();
                    let toks: Vec<&str> = it.next().unwrap_or("").split_whitespace().collect();
                    pending = Some(Some((k.to_string(), counts, pos(&toks, &last))));
                }
                _ => {}
            }
            continue;
        }
        if !line.starts_with(|c: char| c.is_ascii_digit() || "+-*".contains(c)) {
            continue;
        }
        let toks: Vec<&str> = line.split_whitespace().collect();
        let p = pos(&toks[..npos.min(toks.len())], &last);
        match pending.take() {
            Some(Some((kind, counts, target))) => {
                *f.jumps
                    .entry((cur.clone(), p, target, kind, counts))
                    .or_default() += 1;
            }
            Some(None) => {}
            None => {
                let ir: u64 = toks.get(npos).and_then(|x| x.parse().ok()).unwrap_or(0);
                *f.self_ir.entry(cur.clone()).or_default() += ir;
                last = p;
            }
        }
    }
    f
}

/// The jump records of the functions in `fns`.
fn jumps_of(f: &ClFile, fns: &[&str]) -> BTreeMap<JumpKey, u32> {
    f.jumps
        .iter()
        .filter(|(k, _)| fns.contains(&k.0.as_str()))
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// The `jcnd=` counts written at the `rep` of `func`, sorted.
fn rep_counts(f: &ClFile, func: &str) -> Vec<String> {
    let mut v: Vec<String> = f
        .jumps
        .keys()
        .filter(|k| k.0 == func && k.3 == "jcnd" && k.1 == k.2)
        .map(|k| k.4.clone())
        .collect();
    v.sort();
    v
}

#[test]
fn jump_arcs_follow_callgrind_rules() {
    let Some(exe) = build("clg_jumps_o2", JUMPS_C, &["-O2"]) else {
        return;
    };
    let dir = fresh_dir("clg_jumps_hand");
    profile(
        None,
        &exe,
        &dir,
        &["--collect-jumps=yes", "--dump-instr=yes"],
    );
    let path = dir.join("cg.out");
    let f = read_cl(&files(&dir)["cg.out"]);
    annotate_reads(&path);
    // copy_rep runs `rep movsb` 14 times with n = 0, 3, .., 39 after other instructions:
    // the block ending at the rep jumps back to it when n > 0 (13 of 14); the rep's own
    // block then runs n times and jumps back n - 1 times (sum 273 - 13 = 260 of 273).
    assert_eq!(rep_counts(&f, "copy_rep"), ["13/14", "260/273"], "{f:?}");
    // fill_rep's rep starts its block (after a jump to the next instruction, which is no
    // arc): one block, 273 iterations went on out of 273 + 14 executions.
    assert_eq!(rep_counts(&f, "fill_rep"), ["273/287"], "{f:?}");
    let to_next: Vec<_> = f.jumps.keys().filter(|k| k.0 == "to_next").collect();
    assert!(
        to_next.is_empty(),
        "a branch to the next instruction is no jump arc: {to_next:?}"
    );
    // The switch's indirect jump: `jump=` arcs for the 150 calls with x & 7 < 6.
    let switch: u64 = f
        .jumps
        .keys()
        .filter(|k| k.0 == "classify" && k.3 == "jump")
        .map(|k| k.4.parse::<u64>().unwrap_or(0))
        .sum();
    assert!(switch >= 150, "{f:?}");
    // `tail`'s jump to `leaf` is a call (function entry), not a jump arc.
    assert!(
        f.jumps.keys().all(|k| !(k.0 == "tail" && k.3 == "jump")),
        "{f:?}"
    );
    // Without the option there is no jump record at all.
    let plain = fresh_dir("clg_jumps_plain");
    profile(None, &exe, &plain, &[]);
    assert!(read_cl(&files(&plain)["cg.out"]).jumps.is_empty());
}

#[test]
fn jump_arcs_match_valgrind() {
    let Some(vg) = valgrind() else {
        println!("valgrind not installed: comparison skipped");
        return;
    };
    for opt in ["-O0", "-O2"] {
        let Some(exe) = build(&format!("clg_jumps{opt}"), JUMPS_C, &[opt]) else {
            return;
        };
        // With both simulations too: eager charging must not change the arcs' counts.
        for (instr, sim) in [(true, false), (false, false), (false, true)] {
            let mut opts = vec!["--collect-jumps=yes"];
            if instr {
                opts.push("--dump-instr=yes");
            }
            if sim {
                opts.extend([
                    "--cache-sim=yes",
                    "--branch-sim=yes",
                    "--I1=32768,8,64",
                    "--D1=32768,8,64",
                    "--LL=8388608,16,64",
                ]);
            }
            let label = format!("clg_jumps{opt}_{instr}_{sim}");
            let (rd, vd) = (
                fresh_dir(&format!("{label}.rg")),
                fresh_dir(&format!("{label}.vg")),
            );
            profile(None, &exe, &rd, &opts);
            profile(Some(&vg), &exe, &vd, &opts);
            annotate_reads(&rd.join("cg.out"));
            let (mine, theirs) = (
                read_cl(&files(&rd)["cg.out"]),
                read_cl(&files(&vd)["cg.out"]),
            );
            let (a, b) = (jumps_of(&mine, JUMP_FNS), jumps_of(&theirs, JUMP_FNS));
            assert!(
                b.len() >= 10,
                "{label}: Valgrind wrote few jump arcs: {b:?}"
            );
            assert_eq!(a, b, "{label}: jump arcs differ from Valgrind's");
            for f in JUMP_FNS {
                assert_eq!(
                    mine.self_ir.get(*f),
                    theirs.self_ir.get(*f),
                    "{label}: Ir of {f}"
                );
            }
        }
    }
}

/// The per-thread files of a run: `cg.out-NN` → contents; the base file must be empty (it is
/// only created at start-up, as Callgrind does).
fn thread_files(dir: &Path) -> BTreeMap<String, ClFile> {
    let all = files(dir);
    assert_eq!(all.get("cg.out").map(String::as_str), Some(""), "{all:?}");
    all.iter()
        .filter_map(|(n, t)| {
            n.strip_prefix("cg.out-")
                .map(|s| (s.to_string(), read_cl(t)))
        })
        .collect()
}

#[test]
fn separate_threads_write_one_file_per_thread_slot() {
    let Some(exe) = build("clg_threads", THREADS_C, &["-O1", "-pthread"]) else {
        return;
    };
    let dir = fresh_dir("clg_threads.rg");
    profile(None, &exe, &dir, &["--separate-threads=yes"]);
    let mine = thread_files(&dir);
    assert_eq!(
        mine.keys().map(String::as_str).collect::<Vec<_>>(),
        ["01", "02", "03"],
        "thread C reuses slot 2"
    );
    for (n, f) in &mine {
        assert_eq!(
            f.header.get("thread"),
            Some(&n.trim_start_matches('0').to_string())
        );
        assert_eq!(f.header.get("part").map(String::as_str), Some("1"));
        assert_eq!(f.header.get("summary"), Some(&f.totals.to_string()));
        assert_eq!(f.totals, f.self_ir.values().sum::<u64>(), "thread {n}");
        annotate_reads(&dir.join(format!("cg.out-{n}")));
    }
    let ir = |t: &str, f: &str| mine[t].self_ir.get(f).copied().unwrap_or(0);
    // Each worker's loop runs in its own thread's file only.
    assert!(
        ir("02", "work_a") > 30000 && ir("02", "work_c") > 10000,
        "{mine:?}"
    );
    assert!(ir("03", "work_b") > 20000, "{mine:?}");
    for (t, f) in [
        ("01", "work_a"),
        ("01", "work_b"),
        ("03", "work_a"),
        ("02", "work_b"),
    ] {
        assert_eq!(ir(t, f), 0, "{f} in thread {t}");
    }
    // Without the option: one file with everything, no thread line.
    let one = fresh_dir("clg_threads.one");
    profile(None, &exe, &one, &[]);
    let all = files(&one);
    assert_eq!(all.len(), 1, "{:?}", all.keys());
    let f = read_cl(&all["cg.out"]);
    assert!(!f.header.contains_key("thread"));
    for w in ["work_a", "work_b", "work_c"] {
        let sum: u64 = mine
            .values()
            .map(|m| m.self_ir.get(w).copied().unwrap_or(0))
            .sum();
        assert_eq!(f.self_ir.get(w).copied(), Some(sum), "{w}");
    }

    let Some(vg) = valgrind() else {
        println!("valgrind not installed: comparison skipped");
        return;
    };
    let vd = fresh_dir("clg_threads.vg");
    profile(Some(&vg), &exe, &vd, &["--separate-threads=yes"]);
    let theirs = thread_files(&vd);
    assert_eq!(
        mine.keys().collect::<Vec<_>>(),
        theirs.keys().collect::<Vec<_>>()
    );
    for (t, f) in [
        ("02", "work_a"),
        ("02", "work_c"),
        ("03", "work_b"),
        ("03", "tb"),
    ] {
        assert_eq!(
            mine[t].self_ir.get(f),
            theirs[t].self_ir.get(f),
            "Ir of {f} in thread {t}"
        );
    }
}

#[test]
fn dump_every_bb_splits_the_run_into_parts() {
    let Some(exe) = build("clg_loop", LOOP_C, &["-O0"]) else {
        return;
    };
    let opts = ["--dump-every-bb=1000000"];
    let dir = fresh_dir("clg_every.rg");
    profile(None, &exe, &dir, &opts);
    let parts = files(&dir);
    // ~2.5 million blocks: dumps after 1 and 2 million, and the final one.
    assert_eq!(
        parts.keys().map(String::as_str).collect::<Vec<_>>(),
        ["cg.out", "cg.out.1", "cg.out.2"]
    );
    let read: BTreeMap<&str, ClFile> = parts
        .iter()
        .map(|(n, t)| (n.as_str(), read_cl(t)))
        .collect();
    for (n, f) in &read {
        annotate_reads(&dir.join(n));
        assert_eq!(f.header.get("summary"), Some(&f.totals.to_string()), "{n}");
    }
    let h = |n: &str, k: &str| read[n].header.get(k).cloned().unwrap_or_default();
    assert_eq!(h("cg.out.1", "part"), "1");
    assert_eq!(h("cg.out.2", "part"), "2");
    assert_eq!(h("cg.out", "part"), "3");
    let text = &parts["cg.out.1"];
    assert!(
        text.contains("desc: Trigger: --dump-every-bb=1000000\n"),
        "{text}"
    );
    assert!(
        text.contains("desc: Timerange: Basic block 0 - 1000001\n"),
        "{text}"
    );
    assert!(parts["cg.out.2"].contains("desc: Timerange: Basic block 1000001 - 2000003\n"));
    assert!(parts["cg.out"].contains("desc: Trigger: Program termination\n"));
    // The parts add up to the run without periodic dumps.
    let single = fresh_dir("clg_every.single");
    profile(None, &exe, &single, &[]);
    let whole = read_cl(&files(&single)["cg.out"]);
    assert_eq!(read.values().map(|f| f.totals).sum::<u64>(), whole.totals);
    let spin: u64 = read
        .values()
        .map(|f| f.self_ir.get("spin").copied().unwrap_or(0))
        .sum();
    assert_eq!(Some(spin), whole.self_ir.get("spin").copied());

    let Some(vg) = valgrind() else {
        println!("valgrind not installed: comparison skipped");
        return;
    };
    let vd = fresh_dir("clg_every.vg");
    profile(Some(&vg), &exe, &vd, &opts);
    let theirs = files(&vd);
    assert_eq!(
        parts.keys().collect::<Vec<_>>(),
        theirs.keys().collect::<Vec<_>>(),
        "number of parts"
    );
}

#[test]
fn dump_before_writes_a_part_when_the_function_is_entered() {
    let Some(exe) = build("clg_loop_db", LOOP_C, &["-O0"]) else {
        return;
    };
    let opts = ["--dump-before=spin"];
    let dir = fresh_dir("clg_dump_before.rg");
    profile(None, &exe, &dir, &opts);
    let parts = files(&dir);
    assert_eq!(
        parts.keys().map(String::as_str).collect::<Vec<_>>(),
        ["cg.out", "cg.out.1"]
    );
    assert!(parts["cg.out.1"].contains("desc: Trigger: --dump-before=spin\n"));
    let (before, after) = (read_cl(&parts["cg.out.1"]), read_cl(&parts["cg.out"]));
    // Everything up to the call is in part 1; spin's loop and the call to it in part 2.
    assert_eq!(before.self_ir.get("spin"), None, "{before:?}");
    assert!(after.self_ir.get("spin").copied().unwrap_or(0) > 2_470_000 * 10);
    let call = "cfn=(";
    assert!(parts["cg.out"].contains(call) && parts["cg.out"].contains("calls=1 "));
    for n in ["cg.out", "cg.out.1"] {
        annotate_reads(&dir.join(n));
    }

    let Some(vg) = valgrind() else {
        println!("valgrind not installed: comparison skipped");
        return;
    };
    let vd = fresh_dir("clg_dump_before.vg");
    profile(Some(&vg), &exe, &vd, &opts);
    let theirs = files(&vd);
    assert_eq!(
        parts.keys().collect::<Vec<_>>(),
        theirs.keys().collect::<Vec<_>>()
    );
    let (tb, ta) = (read_cl(&theirs["cg.out.1"]), read_cl(&theirs["cg.out"]));
    assert_eq!(before.self_ir.get("main"), tb.self_ir.get("main"));
    assert_eq!(after.self_ir.get("spin"), ta.self_ir.get("spin"));
    assert_eq!(after.self_ir.get("main"), ta.self_ir.get("main"));
}

/// Valgrind creates its profiles readable and writable by their owner only (mode 0600), the
/// log file as any file (0666 less the umask): so does rgrind, for both tools, the empty base
/// file `--separate-threads=yes` leaves and the per-thread ones.
#[test]
fn output_files_are_created_for_their_owner_only_like_valgrinds() {
    use std::os::unix::fs::PermissionsExt;
    let modes = |dir: &Path| -> BTreeMap<String, u32> {
        std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| {
                let e = e.expect("dir entry");
                let mode = e.metadata().expect("metadata").permissions().mode() & 0o777;
                // The number of thread files follows the scheduling: one name for them all.
                let name = e.file_name().to_string_lossy().into_owned();
                let name = match name.rsplit_once('-') {
                    Some((base, n)) if n.bytes().all(|b| b.is_ascii_digit()) => {
                        format!("{base}-NN")
                    }
                    _ => name,
                };
                (name, mode)
            })
            .collect()
    };
    let runs = |vg: Option<&Path>, tag: &str| -> BTreeMap<String, u32> {
        let dir = fresh_dir(&format!("modes.{tag}"));
        let d = dir.display().to_string();
        let cmd = rgrind_tests::guest_case("threads").cmd();
        let lines = [
            vec![
                "--tool=callgrind".to_string(),
                "--separate-threads=yes".to_string(),
                format!("--callgrind-out-file={d}/clg.out"),
                format!("--log-file={d}/clg.log"),
            ],
            vec![
                "--tool=cachegrind".to_string(),
                format!("--cachegrind-out-file={d}/cg.out"),
            ],
        ];
        for opts in &lines {
            let opts: Vec<&str> = opts.iter().map(String::as_str).collect();
            let o = match vg {
                Some(v) => run_valgrind(v, &opts, &cmd),
                None => run_rgrind(&opts, &cmd),
            };
            assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
        }
        modes(&dir)
    };
    let mine = runs(None, "rg");
    // SAFETY: umask only reads and sets this process's mask; it is put back at once.
    let umask = unsafe {
        let m = libc::umask(0o022);
        libc::umask(m);
        m
    };
    for (name, &mode) in &mine {
        let want = if name.ends_with(".log") {
            0o666 & !umask
        } else {
            0o600 & !umask
        };
        assert_eq!(mode, want, "{name}: {mode:o}");
    }
    assert!(mine.contains_key("clg.out-NN"), "{mine:?}");
    if let Some(vg) = valgrind() {
        assert_eq!(mine, runs(Some(&vg), "vg"), "the modes of Valgrind's files");
    } else {
        println!("valgrind not installed: compared with the known modes only");
    }
}

/// Ten threads, each created and joined before the next: how many had run (set their flag)
/// when `pthread_create` returned to their creator.
const CREATE_JOIN_C: &str = r#"
#include <pthread.h>
#include <stdio.h>
static volatile int ran[10];
static void *w(void *a) { ran[(long)a] = 1; return a; }
int main(void) {
    int first = 0;
    for (long i = 0; i < 10; i++) {
        pthread_t th; void *r;
        pthread_create(&th, 0, w, (void *)i);
        first += ran[i];
        pthread_join(th, &r);
    }
    printf("%d\n", first);
    return 0;
}
"#;

/// Valgrind lets a thread it creates run before its creator goes on (`VG_(vg_yield)` after
/// `clone`: 9 of these 10 threads on this host), and so does rgrind
/// (`runlock::yield_to_newcomer`). Before, the creator ran on until its time slice ended (0
/// of 10) and waited in `pthread_join` each time: a create-and-join loop's main thread ran
/// 830 Ir (0.6%) above Valgrind's, now 0.1% below.
#[test]
fn a_new_thread_runs_before_its_creator_goes_on() {
    let Some(exe) = build("clg_create_join", CREATE_JOIN_C, &["-O1", "-pthread"]) else {
        return;
    };
    let o = run_rgrind(
        &["--tool=callgrind", "--callgrind-out-file=/dev/null", "-q"],
        &Cmd::new(&exe),
    );
    assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
    let first: u32 = o.stdout_str().trim().parse().expect("a count");
    // (A thread the host has not started within 100 ms lets its creator go on.)
    assert!(first >= 8, "{first} of 10 threads ran first");
}
