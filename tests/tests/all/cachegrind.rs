//! `--tool=cachegrind`: exact per-instruction counts on a tiny assembly guest, the stderr
//! summary layout.

use rgrind_tests::{
    check_loops_run, guest_case, run, run_rgrind, run_valgrind, scratch_dir, valgrind, Cmd, End,
};
use std::collections::BTreeMap;

/// Runs `label` under cachegrind with `opts`; returns the outcome and the profile text.
fn profile(label: &str, name: &str, opts: &[&str]) -> (rgrind_tests::Outcome, String) {
    profile_cmd(&guest_case(label).cmd(), name, opts)
}

/// Runs `cmd` under cachegrind with `opts`; returns the outcome and the profile text.
fn profile_cmd(cmd: &Cmd, name: &str, opts: &[&str]) -> (rgrind_tests::Outcome, String) {
    let out = scratch_dir().join(name);
    let _ = std::fs::remove_file(&out);
    let file_opt = format!("--cachegrind-out-file={}", out.display());
    let mut all = vec!["--tool=cachegrind", file_opt.as_str()];
    all.extend_from_slice(opts);
    let o = run_rgrind(&all, cmd);
    let text = std::fs::read_to_string(&out)
        .unwrap_or_else(|e| panic!("no profile at {}: {e}\n{}", out.display(), o.describe()));
    (o, text)
}

/// Runs `cmd` under Valgrind's Cachegrind with `opts`; its outcome and profile text, or
/// `None` (saying so) without Valgrind.
fn valgrind_cachegrind(
    cmd: &Cmd,
    name: &str,
    opts: &[&str],
) -> Option<(rgrind_tests::Outcome, String)> {
    let Some(vg) = valgrind() else {
        println!("valgrind is not installed: not compared");
        return None;
    };
    let out = scratch_dir().join(name);
    let file_opt = format!("--cachegrind-out-file={}", out.display());
    let mut all = vec!["--tool=cachegrind", file_opt.as_str()];
    all.extend_from_slice(opts);
    let o = run_valgrind(&vg, &all, cmd);
    let text = std::fs::read_to_string(&out)
        .unwrap_or_else(|e| panic!("no profile at {}: {e}\n{}", out.display(), o.describe()));
    Some((o, text))
}

/// Cost lines of a profile: source line -> counts.
fn lines(text: &str) -> BTreeMap<u32, Vec<u64>> {
    text.lines()
        .filter(|l| l.starts_with(|c: char| c.is_ascii_digit()))
        .map(|l| {
            let mut it = l.split(' ').map(|x| x.parse::<u64>().unwrap());
            (it.next().unwrap() as u32, it.collect())
        })
        .collect()
}

#[test]
fn tiny_counts_each_instruction_once() {
    // tiny 1 2: argc = 3, so `jbe` skips the clamp at line 9: 14 instructions run.
    let (o, text) = profile("tiny", "tiny.cg", &[]);
    assert_eq!(o.end(), End::Exit(5), "{}", o.describe());
    assert!(text.contains("\nevents: Ir\n"), "{text}");
    let l = lines(&text);
    let ir: BTreeMap<u32, u64> = l.iter().map(|(k, v)| (*k, v[0])).collect();
    let want: BTreeMap<u32, u64> = [6, 7, 8, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]
        .into_iter()
        .map(|n| (n, 1))
        .collect();
    assert_eq!(ir, want, "{text}");
    assert!(text.ends_with("summary: 14\n"), "{text}");
    assert!(
        o.stderr_str().contains("== I   refs:      14\n"),
        "{}",
        o.describe()
    );
}

/// `loops.S`: self-loops, which the translator unrolls with one share of the block counter
/// per copy, count every iteration exactly, whatever the iteration count modulo the copies,
/// when a signal arrives in the middle of the unrolled code, and when an iteration faults
/// (up to the faulting instruction).
#[test]
fn self_loops_count_every_iteration() {
    let (o, text) = profile_cmd(&Cmd::guest("loops"), "loops.cg", &[]);
    let l = lines(&text);
    let ir = |line: u32| l.get(&line).map_or(0, |v| v[0]);
    check_loops_run(&o, &ir, &text);
    let total: u64 = l.values().map(|v| v[0]).sum();
    assert!(text.ends_with(&format!("summary: {total}\n")), "{text}");

    // The 6th iteration faults at line 50: the profile is written, with the 6th run of the
    // loop block counted up to the faulting load (Valgrind's 5 leave out the whole run).
    let (o, text) = profile_cmd(&Cmd::guest("loops").args(["fault"]), "loops-fault.cg", &[]);
    assert_eq!(o.end(), End::Signal(libc::SIGSEGV), "{}", o.describe());
    let l = lines(&text);
    let ir = |line: u32| l.get(&line).map_or(0, |v| v[0]);
    assert_eq!(
        (47..=52).map(ir).collect::<Vec<_>>(),
        [6, 6, 6, 6, 5, 5],
        "{text}"
    );
    assert_eq!([ir(14), ir(15), ir(16)], [45; 3], "{text}");

    // Valgrind (without its speculative chase over-count) agrees on the unrolled loop.
    let opts = ["--cache-sim=no", "--vex-guest-chase=no"];
    if let Some((_, vtext)) = valgrind_cachegrind(&Cmd::guest("loops"), "loops-vg.cg", &opts) {
        let vl = lines(&vtext);
        for line in [13, 14, 15, 16, 17, 18, 19] {
            assert_eq!(
                vl.get(&line).map(|v| v[0]),
                Some(ir(line)),
                "line {line}:\n{vtext}"
            );
        }
    }
}

/// `loops.S` with `--cache-sim=yes`: self-loops with data checks are unrolled too (each
/// copy its own check and share of the block counter), and still count every iteration's
/// read exactly: the spin loop's compare reads once per iteration wherever SIGALRM lands,
/// the fault loop's 6th iteration (in the second copy) is counted up to its faulting load,
/// and the lines before the spin loop equal Valgrind's in every event.
#[test]
fn self_loops_with_cache_checks_count_every_iteration() {
    let (o, text) = profile_cmd(&Cmd::guest("loops"), "loops-sim.cg", &SIMULATED_GEOMETRY);
    let l = lines(&text);
    let event = |line: u32, k: usize| l.get(&line).map_or(0, |v| v[k]);
    let ir = |line: u32| event(line, 0);
    check_loops_run(&o, &ir, &text);
    // Ir I1mr ILmr Dr ...: the spin loop's `cmpb $0, flag(%rip)` is line 37.
    assert_eq!(event(37, 3), ir(37), "{text}");
    assert_eq!(event(37, 4), 1, "one cold D1 miss at the flag:\n{text}");
    let run_text = text;

    let (o, text) = profile_cmd(
        &Cmd::guest("loops").args(["fault"]),
        "loops-sim-fault.cg",
        &SIMULATED_GEOMETRY,
    );
    assert_eq!(o.end(), End::Signal(libc::SIGSEGV), "{}", o.describe());
    let l = lines(&text);
    let event = |line: u32, k: usize| l.get(&line).map_or(0, |v| v[k]);
    assert_eq!(
        (47..=52).map(|line| event(line, 0)).collect::<Vec<_>>(),
        [6, 6, 6, 6, 5, 5],
        "{text}"
    );
    // The load is simulated before it faults: six reads, the first a miss.
    assert_eq!([event(50, 3), event(50, 4)], [6, 1], "{text}");

    let mut vg_opts = SIMULATED_GEOMETRY.to_vec();
    vg_opts.push("--vex-guest-chase=no");
    if let Some((_, vtext)) = valgrind_cachegrind(&Cmd::guest("loops"), "loops-sim-vg.cg", &vg_opts)
    {
        let (l, vl) = (lines(&run_text), lines(&vtext));
        for line in 11..=22 {
            assert_eq!(
                l.get(&line),
                vl.get(&line),
                "line {line}:\n{run_text}\n{vtext}"
            );
        }
    }
}

/// `fetchloop.S`: the later copies of an unrolled self-loop skip its fetch checks only
/// when the loop's lines lie in distinct I1 sets (each then its set's MRU line). Its three
/// lines in one two-way set miss on every one of the 1000 iterations; with 64 sets, once.
/// Every line's events equal Valgrind's in both geometries.
#[test]
fn self_loop_fetches_skipped_only_where_each_line_keeps_its_set() {
    for (i1, loop_misses) in [("--I1=128,2,64", 3000), ("--I1=32768,8,64", 3)] {
        let opts = [
            "--cache-sim=yes",
            i1,
            "--D1=32768,8,64",
            "--LL=8388608,16,64",
        ];
        let (o, text) = profile_cmd(&Cmd::guest("fetchloop"), "fetchloop.cg", &opts);
        assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
        let l = lines(&text);
        // Ir I1mr ...: the loop is lines 14 to 18.
        let i1mr: u64 = (14..=18).map(|line| l.get(&line).map_or(0, |v| v[1])).sum();
        assert_eq!(i1mr, loop_misses, "{i1}:\n{text}");
        let mut vg_opts = opts.to_vec();
        vg_opts.push("--vex-guest-chase=no");
        if let Some((_, vtext)) =
            valgrind_cachegrind(&Cmd::guest("fetchloop"), "fetchloop-vg.cg", &vg_opts)
        {
            assert_eq!(l, lines(&vtext), "{i1}:\n{text}\n{vtext}");
        }
    }
}

/// `succlive.S`: the checks at a block's end borrow only registers (and flags) that every
/// successor overwrites before reading; a byte write, a `cmov` or `inc` (which keeps CF), the
/// other side of a conditional branch, the rest of a self-loop, a callee and a system call
/// all keep what they read. Each case sets a bit of the exit status, natively 0x7f; the
/// same under cachegrind with simulation and under callgrind with and without it.
#[test]
fn values_a_successor_reads_survive_the_checks_before_it() {
    let cmd = Cmd::guest("succlive");
    assert_eq!(run(&cmd).end(), End::Exit(0x7f));
    for opts in [
        &[
            "--tool=cachegrind",
            "--cache-sim=yes",
            "--cachegrind-out-file=/dev/null",
        ][..],
        &["--tool=callgrind", "--callgrind-out-file=/dev/null"],
        &[
            "--tool=callgrind",
            "--cache-sim=yes",
            "--callgrind-out-file=/dev/null",
        ],
    ] {
        let o = run_rgrind(opts, &cmd);
        assert_eq!(o.end(), End::Exit(0x7f), "{opts:?}: {}", o.describe());
    }
}

/// All events per (file name, line) of a profile, summed over the functions that share a
/// line.
fn file_line_events(text: &str) -> BTreeMap<(String, u32), Vec<u64>> {
    let mut file = String::new();
    let mut out = BTreeMap::new();
    for l in text.lines() {
        if let Some(f) = l.strip_prefix("fl=") {
            file = f.rsplit('/').next().unwrap_or(f).to_string();
        } else if l.starts_with(|c: char| c.is_ascii_digit()) {
            let mut it = l.split(' ').map(|x| x.parse::<u64>().unwrap());
            let line = it.next().unwrap() as u32;
            let sums: &mut Vec<u64> = out.entry((file.clone(), line)).or_default();
            for (k, v) in it.enumerate() {
                if sums.len() <= k {
                    sums.push(0);
                }
                sums[k] += v;
            }
        }
    }
    out
}

/// Ir per (file name, line) of a profile.
fn file_lines(text: &str) -> BTreeMap<(String, u32), u64> {
    file_line_events(text)
        .into_iter()
        .map(|(at, events)| (at, events[0]))
        .collect()
}

/// Consecutive line ranges with one line number are one range, in the first one's file, as
/// Valgrind's reader stores them (`samelines.S`).
#[test]
fn ranges_on_one_line_number_keep_the_first_file_as_in_valgrind() {
    let (o, text) = profile_cmd(&Cmd::guest("samelines"), "samelines.cg", &[]);
    assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
    let mine = file_lines(&text);
    let want: BTreeMap<(String, u32), u64> =
        [(("one.c", 50), 3), (("two.h", 51), 2), (("one.c", 52), 3)]
            .into_iter()
            .map(|((f, l), n)| ((f.to_string(), l), n))
            .collect();
    assert_eq!(mine, want, "{text}");
    let cmd = Cmd::guest("samelines");
    let Some((v, vtext)) = valgrind_cachegrind(&cmd, "samelines.vg.cg", &["--cache-sim=no"]) else {
        return;
    };
    assert!(v.status.success(), "{}", v.describe());
    let theirs = file_lines(&vtext);
    assert_eq!(mine, theirs, "per file and line equal to Valgrind's");
}

/// A block cut short by a fault before its counter was bumped (`cutshort.S`): the
/// instructions up to the faulting one count once, the rest not at all.
#[test]
fn a_fault_before_the_block_counter_counts_what_ran() {
    let (o, text) = profile_cmd(&Cmd::guest("cutshort"), "cutshort.cg", &[]);
    assert_eq!(o.end(), End::Signal(libc::SIGSEGV), "{}", o.describe());
    let l = lines(&text);
    let ir = |line: u32| l.get(&line).map_or(0, |v| v[0]);
    assert_eq!(
        (8..=15).map(ir).collect::<Vec<_>>(),
        [1, 1, 1, 1, 1, 1, 0, 0],
        "{text}"
    );
}

#[test]
fn tiny_data_and_branch_events() {
    let (o, text) = profile(
        "tiny",
        "tiny-sim.cg",
        &[
            "--cache-sim=yes",
            "--branch-sim=yes",
            "--I1=32768,8,64",
            "--D1=32768,8,64",
            "--LL=8388608,16,64",
        ],
    );
    assert_eq!(o.end(), End::Exit(5), "{}", o.describe());
    let l = lines(&text);
    // Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw Bc Bcm Bi Bim
    assert_eq!(l[&6][3], 1, "mov (%rsp),%rax reads once: {text}");
    assert_eq!(l[&6][4], 1, "the stack line is cold in D1: {text}");
    assert_eq!(l[&12][6], 1, "mov %al,(%rdi) writes once: {text}");
    assert_eq!(l[&8][9], 1, "jbe is one conditional branch: {text}");
    assert_eq!(l[&6][1], 1, "the first fetch misses I1: {text}");
    assert_eq!(l[&7][1], 0, "the next fetch in the same line hits: {text}");
    let err = o.stderr_str();
    for want in [
        "== D   refs:",
        "== D1  misses:",
        "== LL refs:",
        "== Branches:",
        "== Mispred rate:",
    ] {
        assert!(err.contains(want), "missing {want:?}\n{}", o.describe());
    }
}

/// VEX's exits counted as conditional branches (one instruction per line of `branchy.S`): the
/// CAS retry exit of a locked read-modify-write and of `xchg` with memory, none for
/// `cmpxchg`, the `rcx == 0` test at every entry of a `rep`, and the repeat test of
/// `repe`/`repne`. Mispredictions come from the same predictor calls in the same order, so
/// they equal Valgrind's line for line.
#[test]
fn branch_rules_of_locked_and_rep_instructions() {
    let (o, text) = profile("branchy", "branchy.cg", &["--branch-sim=yes"]);
    assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
    let l = lines(&text);
    // Ir Bc Bcm Bi Bim
    let ir_bc = |line: u32| (l[&line][0], l[&line][1]);
    assert_eq!(ir_bc(10), (1, 1), "lock add: one CAS exit\n{text}");
    assert_eq!(ir_bc(11), (1, 1), "xchg with memory: one CAS exit\n{text}");
    assert_eq!(ir_bc(12), (1, 0), "lock cmpxchg: no exit\n{text}");
    assert_eq!(
        ir_bc(16),
        (4, 4),
        "rep movsb, rcx = 3: four entries\n{text}"
    );
    assert_eq!(
        ir_bc(20),
        (2, 4),
        "repe cmpsb: two entries, two repeat tests\n{text}"
    );
    let opts = ["--cache-sim=no", "--branch-sim=yes", "--vex-guest-chase=no"];
    let cmd = guest_case("branchy").cmd();
    let Some((r, vtext)) = valgrind_cachegrind(&cmd, "branchy.vg.cg", &opts) else {
        return;
    };
    assert!(r.status.success(), "{}", r.describe());
    let theirs = lines(&vtext);
    assert_eq!(l, theirs, "per-line Ir Bc Bcm Bi Bim equal to Valgrind's");
}

/// Cache simulation with the geometry (not the host's), for exact counts.
const SIMULATED_GEOMETRY: [&str; 4] = [
    "--cache-sim=yes",
    "--I1=32768,8,64",
    "--D1=32768,8,64",
    "--LL=8388608,16,64",
];

/// The line of guest source `src` that the comment `/* name */` ends.
fn named_line(src: &str, name: &str) -> u32 {
    let tag = format!("/* {name} */");
    let n = src
        .lines()
        .position(|l| l.trim_end().ends_with(&tag))
        .unwrap_or_else(|| panic!("no line {tag}"));
    n as u32 + 1
}

/// The line of `tests/guests/memops.S` that the comment `/* name */` ends.
fn memops_line(name: &str) -> u32 {
    named_line(include_str!("../../guests/memops.S"), name)
}

/// Data accesses whose address the operand alone does not give, counted and simulated where
/// the instruction really goes, and SIMD accesses in elements as VEX makes them (one
/// instruction per line of `memops.S`, with Valgrind's rules measured on 3.19): the byte a
/// register bit offset selects (`bt`/`bts`/`btc`, also backwards), `xlat`'s table entry,
/// every element of a gather (a disabled one at the stack pointer), the enabled elements of
/// masked moves, the packed FMA forms, `roundps`, `cvtps2pd` and a ymm `vmovddup` element by
/// element, `maskmovdqu` as a read-modify-write, the bit instructions on registers through
/// VEX's stack slot. Each line equals Valgrind's.
#[test]
fn run_time_addresses_and_elements_count_as_in_valgrind() {
    if !(std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma"))
    {
        println!("the CPU lacks AVX2 or FMA: memops not run");
        return;
    }
    let opts = SIMULATED_GEOMETRY;
    let (o, text) = profile_cmd(&Cmd::guest("memops"), "memops.cg", &opts);
    assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
    let l = lines(&text);
    // Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw: (Dr, D1mr, Dw, D1mw) of a named line.
    let data = |name: &str| {
        let c = &l[&memops_line(name)];
        (c[3], c[4], c[6], c[7])
    };
    for (name, want) in [
        ("bt+200", (1, 1, 0, 0)),
        ("after bt+200", (1, 0, 0, 0)),
        ("bt-100", (1, 1, 0, 0)),
        ("after bt-100", (1, 0, 0, 0)),
        ("bts+400", (1, 1, 0, 0)),
        ("after bts+400", (1, 0, 0, 0)),
        ("lock btc+800", (2, 1, 0, 0)),
        ("bt imm", (1, 1, 0, 0)),
        ("gather 8", (8, 8, 0, 0)),
        ("gather 4 of 8", (8, 4, 0, 0)),
        ("gather 2", (2, 2, 0, 0)),
        ("maskmov load 4 of 8", (4, 1, 0, 0)),
        ("maskmov store 4 of 8", (0, 0, 4, 1)),
        ("maskmov load 2 of 4", (2, 1, 0, 0)),
        ("fma 8", (8, 1, 0, 0)),
        ("roundps 4", (4, 1, 0, 0)),
        ("cvtps2pd 2", (2, 1, 0, 0)),
        ("vmovddup 2", (2, 1, 0, 0)),
        ("maskmovdqu", (1, 1, 0, 0)),
        // XSTATE_BV's update (a read-modify-write) and the components eax asks for; XRSTOR
        // reads the header's three words first.
        ("xsave 0xee", (1, 1, 33, 10)),
        ("xrstor 0xee", (36, 0, 0, 0)),
        ("xsave 7", (1, 0, 34, 0)),
        ("xrstor 7", (37, 0, 0, 0)),
        // Spill (a miss: the slot's line is new), bit byte, and for the others reload.
        ("bt reg", (1, 0, 1, 1)),
        ("bts reg", (2, 0, 1, 0)),
        ("btr reg32", (2, 0, 1, 0)),
        ("btc reg16", (2, 0, 1, 0)),
    ] {
        assert_eq!(data(name), want, "{name} (Dr D1mr Dw D1mw)\n{text}");
    }

    // xlat, which Valgrind cannot decode: the byte al selects.
    let (o, xtext) = profile_cmd(
        &Cmd::guest("memops").args(["xlat"]),
        "memops-xlat.cg",
        &opts,
    );
    assert_eq!(o.end(), End::Exit(7), "{}", o.describe());
    let xl = lines(&xtext);
    let dr_d1mr = |name: &str| {
        let c = &xl[&memops_line(name)];
        (c[3], c[4])
    };
    assert_eq!(dr_d1mr("xlat+200"), (1, 1), "{xtext}");
    assert_eq!(dr_d1mr("after xlat+200"), (1, 0), "{xtext}");

    let mut vg_opts = vec!["--vex-guest-chase=no"];
    vg_opts.extend_from_slice(&opts);
    let Some((r, vtext)) = valgrind_cachegrind(&Cmd::guest("memops"), "memops.vg.cg", &vg_opts)
    else {
        return;
    };
    assert!(r.status.success(), "{}", r.describe());
    let theirs = lines(&vtext);
    assert_eq!(l, theirs, "per-line costs equal to Valgrind's");
}

/// AVX-512's gathers and scatters (`evexops.S`, which Valgrind cannot run): one access per
/// element the opmask enables, counted as it runs (also with an index in ymm20).
#[test]
fn avx512_gathers_and_scatters_access_the_enabled_elements() {
    if !std::arch::is_x86_feature_detected!("avx512f") {
        println!("the CPU lacks AVX-512F: evexops not run");
        return;
    }
    let opts = SIMULATED_GEOMETRY;
    let (o, text) = profile_cmd(&Cmd::guest("evexops"), "evexops.cg", &opts);
    assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
    let l = lines(&text);
    let src = include_str!("../../guests/evexops.S");
    for (name, want) in [
        ("gather 16", (16, 16, 0, 0)),
        ("gather 8 of 16", (8, 8, 0, 0)),
        ("scatter 8 of 16", (0, 0, 8, 8)),
        ("gather 2 of 4", (2, 2, 0, 0)),
    ] {
        let c = &l[&named_line(src, name)];
        assert_eq!(
            (c[3], c[4], c[6], c[7]),
            want,
            "{name} (Dr D1mr Dw D1mw)\n{text}"
        );
    }
}

/// Runs `cmd` natively, then under both simulating tools with `--cache-sim=yes` and `extra`;
/// each run must end as the native one did (exit 0) with the same output. Returns the native
/// run.
fn same_as_native_under_simulation(cmd: &Cmd, extra: &[&[&str]]) -> rgrind_tests::Outcome {
    let native = rgrind_tests::run(cmd);
    assert_eq!(native.end(), End::Exit(0), "{}", native.describe());
    for more in extra {
        for tool in [
            ["--tool=cachegrind", "--cachegrind-out-file=/dev/null"],
            ["--tool=callgrind", "--callgrind-out-file=/dev/null"],
        ] {
            let mut opts = vec!["-q", "--cache-sim=yes"];
            opts.extend_from_slice(&tool);
            opts.extend_from_slice(more);
            let out = run_rgrind(&opts, cmd);
            assert_eq!(
                (out.end(), out.stdout_str()),
                (End::Exit(0), native.stdout_str()),
                "{opts:?}: {}",
                out.describe()
            );
        }
    }
    native
}

/// Blocks made of data checks (translations of ~23 KB for 60 instructions), each with its
/// out-of-line lookup, fit the space reserved for them under both simulating tools and
/// several geometries (a reservation too small stops rgrind with "block of N bytes exceeds
/// its bound"), and the guest computes what it does natively.
#[test]
fn dense_data_checks_fit_their_translation() {
    same_as_native_under_simulation(
        &Cmd::guest("denseloads"),
        &[
            &[],
            &["--D1=65536,16,128", "--LL=8388608,16,128"],
            &["--D1=1024,1,64", "--LL=16384,2,64"],
        ],
    );
}

/// All events per line of one source file of a profile.
fn events_of_file(text: &str, file: &str) -> BTreeMap<u32, Vec<u64>> {
    file_line_events(text)
        .into_iter()
        .filter(|((f, _), _)| f == file)
        .map(|((_, line), events)| (line, events))
        .collect()
}

/// The miss path's stream prefetch (`emit::prefetch_stream`) aims eight distances past a
/// repeating miss distance: here 8 TiB steps over user space, whose prefetches land on
/// non-canonical addresses and in the kernel's half (and, with a 128-set LL, lines whose
/// narrow tags do not fit). The guest still computes what it does natively
/// under both simulating tools, and every line's events are Valgrind's.
#[test]
fn stream_prefetches_past_user_space_change_nothing() {
    let cmd = Cmd::guest("farstreams");
    let native =
        same_as_native_under_simulation(&cmd, &[&[], &["--D1=1024,1,64", "--LL=16384,2,64"]]);
    if native.stdout_str().starts_with("skipped") {
        println!("the kernel refused mappings at 1 TiB and above: not compared");
        return;
    }
    let (o, text) = profile_cmd(&cmd, "farstreams.cg", &SIMULATED_GEOMETRY);
    assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
    let mut vg_opts = SIMULATED_GEOMETRY.to_vec();
    vg_opts.push("--vex-guest-chase=no");
    let Some((vo, vtext)) = valgrind_cachegrind(&cmd, "farstreams.vg", &vg_opts) else {
        return;
    };
    assert_eq!(vo.stdout_str(), native.stdout_str(), "{}", vo.describe());
    let (ours, theirs) = (
        events_of_file(&text, "farstreams.c"),
        events_of_file(&vtext, "farstreams.c"),
    );
    let d1_read_misses: u64 = ours.values().map(|c| c[4]).sum();
    assert!(d1_read_misses > 5_000, "the walks miss D1: {ours:?}");
    assert_eq!(ours, theirs);
}

/// A data check that borrows rax or rcx skips saving it again while its scratch slot still
/// holds the guest's value (`Plan::fresh`); an instruction writing the register in between
/// (fully, partly, implicitly, conditionally, by exchange) must make the next check save it,
/// or the guest gets the old value back. With every register live the checks have no other
/// register to borrow; the guest prints a sum of all of them.
#[test]
fn checks_save_borrowed_registers_the_instruction_before_wrote() {
    same_as_native_under_simulation(
        &Cmd::guest("scratchregs"),
        &[&[], &["--D1=1024,1,64", "--LL=16384,2,64"]],
    );
}

/// Between two data checks the guest's live flags are held aside (`Plan::stashed`); a load
/// that faults there must still show the guest's flags to its SIGSEGV handler, and the code
/// after it must branch on them, under both simulating tools.
#[test]
fn flags_held_between_data_checks_reach_a_fault_handler() {
    let native = same_as_native_under_simulation(&Cmd::guest("flagfault"), &[&[]]);
    assert!(
        native.stdout_str().contains("handler saw 0x91"),
        "{}",
        native.describe()
    );
}

/// Copies an ELF64 file with its program header table moved to the end (as BOLT leaves
/// them), where a reader of only the first page does not find them.
fn with_program_headers_at_end(from: &std::path::Path, to: &std::path::Path) {
    let mut b = std::fs::read(from).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes(b[at..at + 2].try_into().unwrap());
    let phoff = u64_at(&b, 0x20) as usize;
    let len = u16_at(&b, 0x36) as usize * u16_at(&b, 0x38) as usize;
    let table = b[phoff..phoff + len].to_vec();
    b.resize(b.len().next_multiple_of(8), 0);
    let moved = b.len() as u64;
    assert!(moved > 4096, "the library is too small to test with");
    b.extend_from_slice(&table);
    b[0x20..0x28].copy_from_slice(&moved.to_le_bytes());
    std::fs::write(to, b).unwrap_or_else(|e| panic!("{}: {e}", to.display()));
}

/// Functions of a library whose program headers lie at the end of the file (rustc's BOLT-ed
/// `libLLVM.so`) are named, with Valgrind's cost, under both tools. Before, the library was
/// never recorded as a module: its code went to `???`, and every block translated there
/// re-read the process's maps (rustc ran for over ten minutes).
#[test]
fn library_with_program_headers_at_its_end_is_symbolised() {
    let lib = scratch_dir().join("libfarwork-moved.so");
    with_program_headers_at_end(&rgrind_tests::guest("libfarwork.so"), &lib);
    let cmd = Cmd::guest("farphdr").args([&lib]);
    let far_work_ir = |text: &str| -> u64 {
        let mut in_fn = false;
        let mut ir = 0;
        for l in text.lines() {
            if let Some(f) = l.strip_prefix("fn=") {
                in_fn = f == "far_work";
            } else if in_fn && l.starts_with(|c: char| c.is_ascii_digit()) {
                ir += l
                    .split(' ')
                    .nth(1)
                    .and_then(|x| x.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
        ir
    };
    let (o, text) = profile_cmd(&cmd, "farphdr.cg", &[]);
    assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
    let mine = far_work_ir(&text);
    assert!(mine > 300_000, "far_work: {mine} Ir\n{text}");
    if let Some((v, vtext)) = valgrind_cachegrind(&cmd, "farphdr.vg", &["--cache-sim=no"]) {
        assert_eq!(v.stdout_str(), o.stdout_str());
        let theirs = far_work_ir(&vtext);
        assert_eq!(mine, theirs, "far_work's Ir against Valgrind's");
    }
    let clg = scratch_dir().join("farphdr.clg");
    let file = format!("--callgrind-out-file={}", clg.display());
    let o = run_rgrind(&["--tool=callgrind", "--compress-strings=no", &file], &cmd);
    assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
    let text = std::fs::read_to_string(&clg).unwrap();
    let ob = format!("ob={}", lib.display());
    assert!(
        text.contains("fn=far_work") && text.contains(&ob),
        "far_work or its object missing:\n{text}"
    );
}

/// Under cache simulation a branch whose block's last fetch left its target's first line
/// most recently used is chained past the target's first fetch check (`Block::line_entry`):
/// a loop within one line runs from its own line entry and never passes its block start. A
/// signal (a timer) and a time slice (another thread) must still reach such a loop: a thread
/// stepping towards a block start has to accept the line entry as one (before that, both
/// guests hung under cachegrind).
#[test]
fn loops_chained_past_their_fetch_check_take_signals_and_time_slices() {
    for guest in ["alarmspin", "spin"] {
        same_as_native_under_simulation(&Cmd::guest(guest), &[&[]]);
    }
}

/// Translations whose out-of-line code is placed apart from their body (`translate::split`)
/// run and count as those kept in one piece. Each placement is decoded and every branch and
/// `rip`-relative target checked against the one-piece code (`RGRIND_CHECK_SPLIT`: a wrong
/// one is an internal error), and the profiles and output with and without the split
/// (`RGRIND_NO_COLD_PARTS`, against a variable with the same letters) are the same, under both
/// simulating tools (callgrind's return and call cases are out of line) and `none`.
#[test]
fn translations_in_two_parts_run_and_count_as_in_one() {
    let guests = ["insns", "cxx", "sigs-segv", "gotswap", "jit", "stack"];
    let tools: [&[&str]; 3] = [
        &["--tool=cachegrind", "--cache-sim=yes", "--branch-sim=yes"],
        &["--tool=callgrind", "--cache-sim=yes", "--dump-instr=yes"],
        &["--tool=none"],
    ];
    for guest in guests {
        let cmd = guest_case(guest).cmd();
        for (k, tool) in tools.iter().enumerate() {
            let runs: Vec<(String, String)> = ["RGRIND_NO_COLD_PARTS", "RGRIND_NO_COLD_PARST"]
                .iter()
                .map(|var| {
                    let out = scratch_dir().join(format!("split.{guest}.{k}"));
                    let file_opt = format!("--cachegrind-out-file={}", out.display());
                    let clg_opt = format!("--callgrind-out-file={}", out.display());
                    let mut opts = tool.to_vec();
                    match k {
                        0 => opts.push(&file_opt),
                        1 => opts.push(&clg_opt),
                        _ => {}
                    }
                    opts.push("--trace-blocks=yes");
                    let env = [(*var, "1"), ("RGRIND_CHECK_SPLIT", "1")];
                    let o = run_rgrind(&opts, &cmd.clone().env_exact(&env));
                    assert!(
                        !o.stderr_str().contains("internal error"),
                        "{guest} {tool:?} {var}: {}",
                        o.describe()
                    );
                    let placed_apart = o.stderr_str().matches(", out of line at ").count();
                    if *var != "RGRIND_NO_COLD_PARTS" {
                        assert!(placed_apart > 0, "{guest} {tool:?}: nothing placed apart");
                    } else {
                        assert_eq!(placed_apart, 0, "{guest} {tool:?} {var}");
                    }
                    let profile = std::fs::read_to_string(&out).unwrap_or_default();
                    let profile = profile
                        .lines()
                        .filter(|l| !l.starts_with("pid:") && !l.starts_with("cmd:"))
                        .collect::<Vec<_>>()
                        .join("\n");
                    (format!("{:?} {}", o.end(), o.stdout_str()), profile)
                })
                .collect();
            assert_eq!(runs[0].0, runs[1].0, "{guest} {tool:?}: output");
            assert!(
                runs[0].1 == runs[1].1,
                "{guest} {tool:?}: {}",
                rgrind_tests::first_difference(runs[0].1.as_bytes(), runs[1].1.as_bytes())
            );
        }
    }
}

/// Two ways of skipping work change no count: line entries (`RGRIND_NO_LINE_ENTRIES`) and
/// cache checks sharing their scans past way 1 (`RGRIND_NO_SHARED_SCANS`, under both
/// simulating tools: Callgrind's LL hits go to the running cost centre). Profiles with and
/// without each (against a variable with the same letters, so that the guest's stack lies
/// where it did and its environment is in the same order, see `guest_env.rs`) are the same,
/// line by line, under several geometries (a direct-mapped I1 of 16
/// lines misses often, so a skipped check that was not a hit would show; a 32-way D1 scans in
/// a loop, a 12-way one in straight-line code; the `straddle` guest's accesses across two
/// lines take a shared routine of their own).
#[test]
fn line_entries_and_shared_scans_change_no_count() {
    let geometries: [&[&str]; 4] = [
        &[],
        &["--I1=8192,4,64", "--D1=12288,12,64", "--LL=262144,16,64"],
        &["--I1=1024,1,64", "--D1=2048,2,64", "--LL=65536,4,64"],
        &["--I1=4096,2,32", "--D1=16384,32,128", "--LL=262144,16,128"],
    ];
    let line_entries = ["RGRIND_NO_LINE_ENTRIES", "RGRIND_NO_LINE_ENTRISE"];
    let shared_scans = ["RGRIND_NO_SHARED_SCANS", "RGRIND_NO_SHARED_SCASN"];
    let runs = [
        ("cachegrind", line_entries),
        ("cachegrind", shared_scans),
        ("callgrind", shared_scans),
    ];
    let guests = [
        ("insns", guest_case("insns").cmd()),
        ("stack", guest_case("stack").cmd()),
        ("cxxnames", Cmd::guest("cxxnames")),
        // Accesses across two lines: a shared routine, or `data_slow`, for each.
        ("straddle", Cmd::guest("straddle")),
    ];
    for (guest, cmd) in &guests {
        for (k, geometry) in geometries.iter().enumerate() {
            for (tool, pair) in &runs {
                let profiles: Vec<String> = pair
                    .iter()
                    .map(|var| {
                        let out = scratch_dir().join(format!("skip.{tool}.{guest}.{k}"));
                        let tool_opt = format!("--tool={tool}");
                        let file_opt = format!("--{tool}-out-file={}", out.display());
                        let mut opts = vec![
                            tool_opt.as_str(),
                            file_opt.as_str(),
                            "--cache-sim=yes",
                            "--branch-sim=yes",
                        ];
                        opts.extend_from_slice(geometry);
                        let o = run_rgrind(&opts, &cmd.clone().env_exact(&[(var, "1")]));
                        assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
                        let text = std::fs::read_to_string(&out).unwrap_or_default();
                        assert!(text.contains("summary:"), "{}", o.describe());
                        text.lines()
                            .filter(|l| !l.starts_with("pid:") && !l.starts_with("cmd:"))
                            .collect::<Vec<_>>()
                            .join("\n")
                    })
                    .collect();
                assert!(
                    profiles[0] == profiles[1],
                    "{tool} {guest} {geometry:?} {}: {}",
                    pair[0],
                    rgrind_tests::first_difference(profiles[0].as_bytes(), profiles[1].as_bytes())
                );
            }
        }
    }
}

/// With `--cache-sim=yes` the LL parts of L1 misses run on a thread of their own, in order
/// (`launcher/src/tools/cachegrind/ll_queue.rs`); `RGRIND_SYNC_LL` runs them in the guest's
/// thread instead (against a variable with the same letters). Both give the same profiles, line by line, for a program whose LL accesses
/// go round the queue's ring many times and that forks (the child, which has no consumer
/// thread, works through the queue itself), and the guest's output is the native one.
#[test]
fn lls_on_their_own_thread_count_as_in_the_guests_thread() {
    let cmd = Cmd::guest("llwalk").args(["8"]);
    let native = rgrind_tests::run(&cmd);
    let profiles: Vec<Vec<String>> = ["RGRIND_SYNC_LL", "RGRIND_SYCN_LL"]
        .iter()
        .map(|var| {
            let dir = scratch_dir().join(format!("llqueue.{var}"));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("scratch folder");
            let file_opt = format!("--cachegrind-out-file={}/cg.%p", dir.display());
            let opts = [
                "--tool=cachegrind",
                file_opt.as_str(),
                "--cache-sim=yes",
                "--LL=1048576,16,64",
            ];
            let o = run_rgrind(&opts, &cmd.clone().env_exact(&[(var, "1")]));
            assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
            assert_eq!(o.stdout_str(), native.stdout_str(), "{}", o.describe());
            let mut texts: Vec<String> = std::fs::read_dir(&dir)
                .expect("profiles")
                .map(|e| {
                    let text = std::fs::read_to_string(e.expect("entry").path()).unwrap();
                    text.lines()
                        .filter(|l| !l.starts_with("pid:") && !l.starts_with("cmd:"))
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .collect();
            texts.sort();
            assert_eq!(texts.len(), 2, "parent and child: {}", o.describe());
            for t in &texts {
                let summary = t.lines().find_map(|l| l.strip_prefix("summary: "));
                let dlmr = summary.and_then(|s| s.split(' ').nth(5)?.parse::<u64>().ok());
                // Three passes over 8 MiB with a 1 MiB LL: every line an LL miss each time.
                assert!(dlmr.is_some_and(|n| n >= 3 * 131_072), "{var}: {summary:?}");
            }
            texts
        })
        .collect();
    for (sync, queued) in profiles[0].iter().zip(&profiles[1]) {
        assert!(
            sync == queued,
            "{}",
            rgrind_tests::first_difference(sync.as_bytes(), queued.as_bytes())
        );
    }
}
