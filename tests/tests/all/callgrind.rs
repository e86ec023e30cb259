//! `--tool=callgrind`: call counts and inclusive costs on a small guest, checked against
//! hand-computed values and (when installed) Valgrind's own file; the client-request toggle;
//! call stacks kept across time-sliced thread switches.
//!
//! Inclusive costs are compared within 5%: they include the lazy-binding resolver, whose
//! variant depends on the CPU features reported (Valgrind hides XSAVEC).
//! The guest `tests/guests/clg_graph.c` is compiled here with `gcc -O0` (skipped with a
//! message when gcc is missing), so its shape does not depend on the optimiser.

use rgrind_tests::{
    check_loops_run, run, run_rgrind, run_valgrind, scratch_dir, valgrind, which, Cmd, End,
};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Compiles the guest `clg_graph.c` with `defines` (flags after `-O0 -g`); None (with a
/// message) without gcc.
fn build(name: &str, defines: &[&str]) -> Option<PathBuf> {
    build_guest("clg_graph.c", name, &[&["-O0"], defines].concat())
}

/// Compiles `tests/guests/<source>` into `name` with `flags` and `-g`.
fn build_guest(source: &str, name: &str, flags: &[&str]) -> Option<PathBuf> {
    let gcc = which("gcc").or_else(|| {
        println!("gcc not installed: callgrind guest tests skipped");
        None
    })?;
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("guests")
        .join(source);
    let out = scratch_dir().join(name);
    let o = run(&Cmd::new(gcc)
        .args(flags)
        .args(["-g", "-o"])
        .args([out.as_os_str(), src.as_os_str()]));
    assert_eq!(o.end(), End::Exit(0), "gcc failed: {}", o.describe());
    Some(out)
}

/// The guest's functions (and their second recursion levels) the comparisons look at.
const GRAPH_FNS: &[&str] = &[
    "fib",
    "fib'2",
    "dive",
    "dive'2",
    "setup",
    "measured",
    "alternate",
    "chain1",
    "chain2",
    "chain3",
    "sq",
    "inc",
    "tail_inc",
    "tail_len",
    "tail2",
    "popjmp",
    "dispatch",
    "dispatch'2",
    "op_nest",
    "op_add",
    "op_mul",
    "op_xor",
    "op_shr",
    "op_chain",
    "op_neg",
];

/// Profile summary: self Ir per function and (caller, callee) -> (calls, inclusive Ir), and
/// each function's object.
#[derive(Default, Debug)]
struct Profile {
    self_ir: BTreeMap<String, u64>,
    arcs: BTreeMap<(String, String), (u64, u64)>,
    totals: u64,
    summary: u64,
    fn_obj: BTreeMap<String, String>,
}

/// A reader for what Callgrind writes with the default options (line positions, name
/// compression, one event).
fn parse(text: &str) -> Profile {
    let mut p = Profile::default();
    // One space: these readers only resolve function names.
    let mut names = rgrind_tests::CallgrindNames::default();
    let (mut cur, mut callee, mut pending) = (String::new(), String::new(), None);
    let mut obj = String::new();
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("ob=") {
            obj = names.resolve('o', v);
        } else if let Some(v) = line.strip_prefix("cob=") {
            names.resolve('o', v);
        } else if let Some(v) = line.strip_prefix("fn=") {
            cur = names.resolve('f', v);
            p.fn_obj.insert(cur.clone(), obj.clone());
        } else if let Some(v) = line.strip_prefix("cfn=") {
            callee = names.resolve('f', v);
        } else if let Some(v) = line.strip_prefix("calls=") {
            pending = v
                .split_whitespace()
                .next()
                .and_then(|c| c.parse::<u64>().ok());
        } else if let Some(v) = line.strip_prefix("totals: ") {
            p.totals = v.trim().parse().unwrap_or(0);
        } else if let Some(v) = line.strip_prefix("summary: ") {
            p.summary = v.trim().parse().unwrap_or(0);
        } else if line.starts_with(|c: char| c.is_ascii_digit() || "+-*".contains(c)) {
            let ir: u64 = line
                .split_whitespace()
                .nth(1)
                .and_then(|x| x.parse().ok())
                .unwrap_or(0);
            match pending.take() {
                Some(calls) => {
                    let e = p.arcs.entry((cur.clone(), callee.clone())).or_default();
                    e.0 += calls;
                    e.1 += ir;
                }
                None => *p.self_ir.entry(cur.clone()).or_default() += ir,
            }
        }
    }
    p
}

fn profile_of(out: &std::path::Path) -> Profile {
    let text = std::fs::read_to_string(out).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
    parse(&text)
}

/// Valgrind's profile of `exe` (default options), written to the scratch file `name`.
fn valgrind_profile(vg: &std::path::Path, exe: &std::path::Path, name: &str) -> Profile {
    let out = scratch_dir().join(name);
    let file = format!("--callgrind-out-file={}", out.display());
    let o = run_valgrind(vg, &["--tool=callgrind", &file], &Cmd::new(exe));
    assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
    profile_of(&out)
}

fn rgrind_profile(exe: &std::path::Path, name: &str, opts: &[&str]) -> Profile {
    let out = scratch_dir().join(name);
    let file = format!("--callgrind-out-file={}", out.display());
    let mut all = vec!["--tool=callgrind", file.as_str()];
    all.extend_from_slice(opts);
    let o = run_rgrind(&all, &Cmd::new(exe));
    assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
    assert!(
        o.stderr_str().contains("Events    : Ir"),
        "{}",
        o.describe()
    );
    profile_of(&out)
}

#[test]
fn call_counts_match_hand_computed_values() {
    let Some(exe) = build("clg_graph", &[]) else {
        return;
    };
    let p = rgrind_profile(&exe, "clg_graph.out", &[]);
    let arc = |a: &str, b: &str| p.arcs.get(&(a.to_string(), b.to_string())).copied();
    // fib(10) makes 177 calls: one from main, two from the first activation, the rest from
    // deeper ones (recursion level 2 and more are all `fib'2`).
    assert_eq!(arc("main", "fib").map(|a| a.0), Some(1), "{p:?}");
    assert_eq!(arc("fib", "fib'2").map(|a| a.0), Some(2), "{p:?}");
    assert_eq!(arc("fib'2", "fib'2").map(|a| a.0), Some(174), "{p:?}");
    // Three dives of 9 activations each, left by longjmp: the shadow stack unwinds by SP.
    assert_eq!(arc("main", "dive").map(|a| a.0), Some(3), "{p:?}");
    assert_eq!(arc("dive", "dive'2").map(|a| a.0), Some(3), "{p:?}");
    assert_eq!(arc("dive'2", "dive'2").map(|a| a.0), Some(21), "{p:?}");
    // main -> fib includes everything fib does; self costs of fib and fib'2 add up to it.
    let fib_all = p.self_ir["fib"] + p.self_ir["fib'2"];
    assert_eq!(arc("main", "fib").map(|a| a.1), Some(fib_all), "{p:?}");
    // Totals equal the sum of self costs.
    assert_eq!(p.totals, p.self_ir.values().sum::<u64>());
}

/// Valgrind and the guest `clg_graph` built as `name`; None (with a message) without either.
fn valgrind_and_graph(name: &str) -> Option<(PathBuf, PathBuf)> {
    let Some(vg) = valgrind() else {
        println!("valgrind not installed: comparison skipped");
        return None;
    };
    Some((vg, build(name, &[])?))
}

#[test]
fn arcs_match_valgrind() {
    let Some((vg, exe)) = valgrind_and_graph("clg_graph_vg") else {
        return;
    };
    let mine = rgrind_profile(&exe, "clg_graph_vg.rg", &[]);
    let theirs = valgrind_profile(&vg, &exe, "clg_graph_vg.vg");
    let ours = GRAPH_FNS;
    for &f in ours {
        assert_eq!(mine.self_ir.get(f), theirs.self_ir.get(f), "self Ir of {f}");
    }
    // `alternate` calls strlen through the PLT (a skipped stub, then libc's variant).
    assert!(
        theirs
            .arcs
            .keys()
            .any(|(a, b)| a == "alternate" && b.contains("strlen")),
        "{theirs:?}"
    );
    for ((a, b), (calls, incl)) in &theirs.arcs {
        // The lazy-binding resolver differs with the CPU features each reports (xsave/xsavec).
        if !(a == "main" || ours.contains(&a.as_str())) || b.starts_with("_dl_runtime_resolve") {
            continue;
        }
        let m = mine.arcs.get(&(a.clone(), b.clone()));
        let Some(&(mc, mi)) = m else {
            panic!("arc {a} -> {b} missing")
        };
        assert_eq!(mc, *calls, "calls {a} -> {b}");
        let diff = mi.abs_diff(*incl);
        assert!(
            diff * 20 <= *incl || diff <= 8,
            "inclusive {a} -> {b}: {mi} vs {incl}"
        );
    }
}

/// `--fn-skip`: the skipped functions' costs go to their callers and their calls from
/// there on are the caller's. Inside them the inline paths run blocks with the frame cases
/// disarmed (the disarmed frame's top sp stands in for the stack's), `popjmp`'s unwind
/// check too, after it pops its own return address. Self Ir of every function that is
/// left, and the calls on every arc from them, equal Valgrind's.
#[test]
fn fn_skip_charges_skipped_functions_to_their_callers_like_valgrind() {
    let Some((vg, exe)) = valgrind_and_graph("clg_graph_skip") else {
        return;
    };
    let skip = [
        "--fn-skip=chain*",
        "--fn-skip=op_*",
        "--fn-skip=setup",
        "--fn-skip=popjmp",
    ];
    let mine = rgrind_profile(&exe, "clg_graph_skip.rg", &skip);
    let out = scratch_dir().join("clg_graph_skip.vg");
    let file = format!("--callgrind-out-file={}", out.display());
    let mut args = vec!["--tool=callgrind", file.as_str()];
    args.extend_from_slice(&skip);
    let o = run_valgrind(&vg, &args, &Cmd::new(&exe));
    assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
    let theirs = profile_of(&out);
    let skipped =
        |f: &str| f.starts_with("chain") || f.starts_with("op_") || f == "setup" || f == "popjmp";
    assert!(
        !theirs.self_ir.keys().any(|f| skipped(f)),
        "skipped functions listed: {theirs:?}"
    );
    let kept: Vec<&str> = GRAPH_FNS.iter().copied().filter(|f| !skipped(f)).collect();
    for f in kept.iter().copied().chain(["main"]) {
        assert_eq!(mine.self_ir.get(f), theirs.self_ir.get(f), "self Ir of {f}");
    }
    let mut arcs = 0;
    for ((a, b), (calls, _)) in &theirs.arcs {
        if !(a == "main" || kept.contains(&a.as_str())) || b.starts_with("_dl_runtime_resolve") {
            continue;
        }
        let mc = mine.arcs.get(&(a.clone(), b.clone())).map(|m| m.0);
        assert_eq!(mc, Some(*calls), "calls {a} -> {b}");
        arcs += 1;
    }
    assert!(arcs >= 8, "only {arcs} arcs compared: {theirs:?}");
    // The whole run within 0.5%: the lazy-binding resolver's variant follows the CPU
    // features each reports.
    let diff = mine.totals.abs_diff(theirs.totals);
    assert!(
        diff * 200 <= theirs.totals,
        "totals {} vs {}",
        mine.totals,
        theirs.totals
    );
}

/// Code outside `.text` (the `.plt.sec` stubs of a CET build, `.plt.got`, `.init`) is
/// outside what Valgrind's debug info knows: Callgrind neither skips such a stub nor gives
/// it an object, a file or a symbol, but makes it a function of its own named by its
/// address, which then calls the library function. Only `.plt` is skipped; with
/// `--skip-plt=no` its stubs are functions named `0x... [PLT]`. The guest's functions keep
/// Valgrind's self Ir (a skipped stub's instruction went to its caller), and their calls
/// into such stubs match Valgrind's in number and, within 5%, inclusive cost (the names hold
/// load addresses, which differ). The `-O2` build tail-calls into a stub (`tail_len`).
#[test]
fn code_outside_text_is_named_by_its_address_like_valgrind() {
    let Some(vg) = valgrind() else {
        println!("valgrind not installed: comparison skipped");
        return;
    };
    let cet = ["-fcf-protection=full", "-Wl,-z,ibtplt"];
    // Calls from the guest's own functions into code named by its address, by caller and
    // name suffix: (calls, inclusive Ir).
    let stub_calls = |p: &Profile| -> BTreeMap<(String, String), (u64, u64)> {
        let mut by = BTreeMap::new();
        for ((a, b), (calls, incl)) in &p.arcs {
            if (a == "main" || GRAPH_FNS.contains(&a.as_str())) && b.starts_with("0x") {
                let suffix = b.split_once(' ').map_or("", |s| s.1).to_string();
                let e = by.entry((a.clone(), suffix)).or_insert((0, 0));
                e.0 += calls;
                e.1 += incl;
            }
        }
        by
    };
    for (build_name, flags, stub_caller) in [
        ("cet", &["-O0"][..], "alternate"),
        (
            "cet_o2",
            &["-O2", "-fno-ipa-cp", "-fno-ipa-sra"][..],
            "tail_len",
        ),
    ] {
        let Some(exe) = build_guest("clg_graph.c", build_name, &[flags, &cet].concat()) else {
            return;
        };
        let sections = run(&Cmd::new("readelf").args(["-SW".as_ref(), exe.as_os_str()]));
        if !sections.stdout_str().contains(".plt.sec") {
            println!("the linker made no .plt.sec: comparison skipped");
            return;
        }
        for opts in [&[][..], &["--skip-plt=no"][..]] {
            let tag = format!(
                "{build_name}{}",
                if opts.is_empty() { "" } else { "_noskip" }
            );
            let mine = rgrind_profile(&exe, &format!("clg_graph_{tag}.rg"), opts);
            let out = scratch_dir().join(format!("clg_graph_{tag}.vg"));
            let file = format!("--callgrind-out-file={}", out.display());
            let mut args = vec!["--tool=callgrind", file.as_str()];
            args.extend_from_slice(opts);
            let o = run_valgrind(&vg, &args, &Cmd::new(&exe));
            assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
            let theirs = profile_of(&out);
            for f in GRAPH_FNS.iter().copied().chain(["main"]) {
                assert_eq!(
                    mine.self_ir.get(f),
                    theirs.self_ir.get(f),
                    "{tag}: self Ir of {f}"
                );
            }
            let expected = stub_calls(&theirs);
            assert!(
                expected.keys().any(|(a, _)| a == stub_caller),
                "{tag}: {stub_caller} calls no stub: {theirs:?}"
            );
            let got = stub_calls(&mine);
            assert_eq!(
                got.keys().collect::<Vec<_>>(),
                expected.keys().collect::<Vec<_>>(),
                "{tag}"
            );
            for (k, &(calls, incl)) in &expected {
                let (mc, mi) = got[k];
                assert_eq!(mc, calls, "{tag}: calls {k:?}");
                assert!(
                    mi.abs_diff(incl) * 20 <= incl,
                    "{tag}: inclusive {k:?}: {mi} vs {incl}"
                );
            }
            for (a, b) in mine.arcs.keys() {
                if a == stub_caller && b.starts_with("0x") {
                    assert_eq!(mine.fn_obj[b], "???", "{tag}: object of {b}");
                }
            }
        }
    }
}

#[test]
fn toggle_collect_request_limits_cost_to_measured() {
    if !std::path::Path::new("/usr/include/valgrind/callgrind.h").exists() {
        println!("valgrind/callgrind.h not installed: client-request test skipped");
        return;
    }
    let Some(exe) = build("clg_toggle", &["-DCLG_TOGGLE"]) else {
        return;
    };
    let p = rgrind_profile(&exe, "clg_toggle.out", &["--collect-atstart=no"]);
    // measured's loop: exactly what ran between the toggles, nothing before.
    assert!(
        p.self_ir.get("measured").copied().unwrap_or(0) > 1000,
        "{p:?}"
    );
    for f in ["fib", "dive", "setup", "printf"] {
        assert_eq!(
            p.self_ir.get(f).copied().unwrap_or(0),
            0,
            "{f} has cost: {p:?}"
        );
    }
    // The same region through --toggle-collect, on the guest without requests.
    let Some(plain) = build("clg_plain", &[]) else {
        return;
    };
    let q = rgrind_profile(&plain, "clg_toggle2.out", &["--toggle-collect=measured"]);
    assert_eq!(q.self_ir.get("measured"), p.self_ir.get("measured"));
    assert_eq!(q.totals, q.self_ir["measured"], "{q:?}");
}

/// The `-O2` build (tail calls, also into a PLT stub) and its stripped copy (calls into
/// functions without symbols, named by address): the same call counts as Valgrind on every
/// arc from the guest's own functions, and the same self Ir.
#[test]
fn optimised_and_stripped_arcs_match_valgrind() {
    let Some(vg) = valgrind() else {
        println!("valgrind not installed: comparison skipped");
        return;
    };
    let o2 = ["-O2", "-fno-ipa-cp", "-fno-ipa-sra"];
    let Some(exe) = build("clg_graph_o2", &o2) else {
        return;
    };
    let stripped = scratch_dir().join("clg_graph_o2_stripped");
    let o = run(&Cmd::new("strip")
        .args(["-o"])
        .args([stripped.as_os_str(), exe.as_os_str()]));
    assert_eq!(o.end(), End::Exit(0), "strip failed: {}", o.describe());

    for (bin, name) in [(&exe, "o2"), (&stripped, "o2s")] {
        let mine = rgrind_profile(bin, &format!("clg_{name}.rg"), &[]);
        let out = scratch_dir().join(format!("clg_{name}.vg"));
        let file = format!("--callgrind-out-file={}", out.display());
        let o = run_valgrind(&vg, &["--tool=callgrind", &file], &Cmd::new(bin));
        assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
        let theirs = profile_of(&out);
        // The guest's own functions (by name; stripped: named by address, in its object).
        let ours = |f: &str| {
            let in_guest = theirs.fn_obj.get(f).is_some_and(|o| {
                o.ends_with(&format!("/{}", bin.file_name().unwrap().to_string_lossy()))
            });
            f == "main" || GRAPH_FNS.contains(&f) || (name == "o2s" && in_guest)
        };
        let mut arcs = 0;
        // Left out: the lazy-binding resolver (its variant follows the CPU features), and
        // code outside `.text` (`__cxa_finalize`'s `.plt.got` stub at exit), named by its
        // load address, which differs (`code_outside_text_is_named_by_its_address_like_valgrind`).
        let plt_got = |f: &str| f.starts_with("0x") && !ours(f);
        for ((a, b), (calls, _)) in &theirs.arcs {
            if !ours(a) || b.starts_with("_dl_runtime_resolve") || plt_got(b) {
                continue;
            }
            let mc = mine.arcs.get(&(a.clone(), b.clone())).map(|m| m.0);
            assert_eq!(mc, Some(*calls), "{name}: calls {a} -> {b}");
            arcs += 1;
        }
        assert!(arcs >= 8, "{name}: only {arcs} arcs compared: {theirs:?}");
        if name == "o2" {
            for f in ["tail_inc", "tail_len", "tail2"] {
                assert!(
                    theirs.arcs.keys().any(|(a, _)| a == f),
                    "{f} calls nothing: {theirs:?}"
                );
            }
            // Tail calls (frames pushed and popped by the inline paths after the first
            // few): inclusive costs within 1%.
            for ((a, b), (_, incl)) in &theirs.arcs {
                if a.starts_with("tail") || b.starts_with("tail") {
                    let mi = mine.arcs.get(&(a.clone(), b.clone())).map_or(0, |m| m.1);
                    assert!(
                        mi.abs_diff(*incl) * 100 <= *incl,
                        "inclusive {a} -> {b}: {mi} vs {incl}"
                    );
                }
            }
        }
        for (f, &ir) in &theirs.self_ir {
            if ours(f) {
                assert_eq!(mine.self_ir.get(f), Some(&ir), "{name}: self Ir of {f}");
            }
        }
    }
}

/// Self cost per source line of a callgrind file written with `--compress-pos=no` (cost
/// lines after `calls=` are inclusive costs of the call, not the line's own).
fn line_costs(text: &str) -> BTreeMap<u32, u64> {
    let mut costs = BTreeMap::new();
    let mut after_calls = false;
    for l in text.lines() {
        let mut it = l.split(' ');
        let (Some(line), Some(ir)) = (it.next(), it.next()) else {
            after_calls = false;
            continue;
        };
        if let (Ok(line), Ok(ir), false) = (line.parse::<u32>(), ir.parse::<u64>(), after_calls) {
            *costs.entry(line).or_insert(0) += ir;
        }
        after_calls = l.starts_with("calls=");
    }
    costs
}

/// `loops.S` under callgrind: a self-loop is unrolled into 8 copies whose later ones defer
/// their charges to the way out (`Plan::loop_lite`); every iteration is counted, whatever
/// the iteration count modulo the copies (1 to 9), when SIGALRM arrives in the unrolled
/// code, and (lazily, as Callgrind) up to the faulting iteration of a loop that dies of
/// SIGSEGV in its 6th copy (the signal handler charges what the copies before it deferred:
/// checked to fail without).
#[test]
fn self_loops_count_every_iteration_under_callgrind() {
    let run_loops = |name: &str, args: &[&str]| {
        let out = scratch_dir().join(name);
        let _ = std::fs::remove_file(&out);
        let file = format!("--callgrind-out-file={}", out.display());
        let opts = ["--tool=callgrind", "--compress-pos=no", file.as_str()];
        let o = run_rgrind(&opts, &Cmd::guest("loops").args(args));
        let text = std::fs::read_to_string(&out)
            .unwrap_or_else(|e| panic!("no profile at {}: {e}\n{}", out.display(), o.describe()));
        (o, line_costs(&text), text)
    };
    let (o, l, text) = run_loops("loops.clg", &[]);
    let ir = |line: u32| l.get(&line).copied().unwrap_or(0);
    check_loops_run(&o, &ir, &text);

    // Callgrind charges a block when the next one starts: the faulting 6th iteration is not
    // counted.
    let (o, l, text) = run_loops("loops-fault.clg", &["fault"]);
    assert_eq!(o.end(), End::Signal(libc::SIGSEGV), "{}", o.describe());
    let ir = |line: u32| l.get(&line).copied().unwrap_or(0);
    assert_eq!((47..=52).map(ir).collect::<Vec<_>>(), [5; 6], "{text}");

    if let Some(vg) = valgrind() {
        let out = scratch_dir().join("loops-vg.clg");
        let file = format!("--callgrind-out-file={}", out.display());
        let opts = [
            "--tool=callgrind",
            "--compress-pos=no",
            "--vex-guest-chase=no",
            file.as_str(),
        ];
        let v = run_valgrind(&vg, &opts, &Cmd::guest("loops").args(["fault"]));
        let vtext =
            std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("{e}\n{}", v.describe()));
        let vl = line_costs(&vtext);
        for line in (13..=19).chain(47..=52) {
            assert_eq!(
                vl.get(&line).copied(),
                Some(ir(line)),
                "line {line}:\n{vtext}"
            );
        }
    }
}

/// Two threads deep in recursion (`tests/guests/deepthreads.c`) while the run lock passes
/// between them by time slice, with no system call to fold the inline paths' state first:
/// each thread keeps its whole call stack, so `work`'s arc into `deep` carries every cost
/// below it, `leaf` is never taken for a recursion, and (when installed) Valgrind agrees.
#[test]
fn time_sliced_threads_keep_their_call_stacks() {
    let exe = rgrind_tests::guest("deepthreads");
    let theirs = valgrind().map(|vg| {
        let out = scratch_dir().join("deepthreads.vg");
        let file = format!("--callgrind-out-file={}", out.display());
        let o = run_valgrind(&vg, &["--tool=callgrind", &file], &Cmd::new(&exe));
        assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
        profile_of(&out)
    });
    for opts in [&[][..], &["--cache-sim=yes"][..]] {
        let out = scratch_dir().join("deepthreads.rg");
        let file = format!("--callgrind-out-file={}", out.display());
        let mut all = vec!["--tool=callgrind", "--stats=yes", file.as_str()];
        all.extend_from_slice(opts);
        let o = run_rgrind(&all, &Cmd::new(&exe));
        assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
        let switches: u64 = o
            .stderr_str()
            .lines()
            .find_map(|l| l.strip_prefix("--rgrind-- thread switches: "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no switch count: {}", o.describe()));
        assert!(
            switches >= 2,
            "the threads never switched: {}",
            o.describe()
        );
        let mine = profile_of(&out);
        assert!(!mine.self_ir.contains_key("leaf'2"), "{opts:?}: {mine:?}");
        let below: u64 = mine
            .self_ir
            .iter()
            .filter(|(f, _)| *f == "leaf" || f.split('\'').next() == Some("deep"))
            .map(|(_, ir)| ir)
            .sum();
        let arc = mine.arcs.get(&("work".into(), "deep".into()));
        assert_eq!(arc, Some(&(40, below)), "{opts:?}: work -> deep");
        if let Some(theirs) = &theirs {
            for (a, b) in [("work", "deep"), ("deep", "deep'2"), ("deep'2", "leaf")] {
                let key = (a.to_string(), b.to_string());
                assert_eq!(
                    mine.arcs.get(&key),
                    theirs.arcs.get(&key),
                    "{opts:?}: {a} -> {b}"
                );
            }
        }
    }
}

/// `CALLGRIND_STOP/START_INSTRUMENTATION` with instrumentation on from the start
/// (`tests/guests/clg_switch.c`): Callgrind unwinds the call stack and starts afresh in the
/// running function, with collection back to `--collect-atstart`. Until the twenty-fourth
/// session rgrind kept the outermost function's context (the rest of `main` went to the
/// dynamic loader's entry) and a toggled-off collection (`other` got nothing).
#[test]
fn instrumentation_switches_start_a_new_context_like_valgrind() {
    if !std::path::Path::new("/usr/include/valgrind/callgrind.h").exists() {
        println!("valgrind/callgrind.h not installed: client-request test skipped");
        return;
    }
    let Some(vg) = valgrind() else {
        println!("valgrind not installed: comparison skipped");
        return;
    };
    let Some(exe) = build_guest("clg_switch.c", "clg_switch", &["-O2"]) else {
        return;
    };
    let mine = rgrind_profile(&exe, "clg_switch.rg", &[]);
    let theirs = valgrind_profile(&vg, &exe, "clg_switch.vg");
    for f in ["leaf", "other", "toggled"] {
        assert_eq!(mine.self_ir.get(f), theirs.self_ir.get(f), "self Ir of {f}");
    }
    assert!(
        mine.self_ir.get("other").copied().unwrap_or(0) > 4000,
        "{mine:?}"
    );
    // After a switch Callgrind counts the running function one recursion level deeper for
    // every earlier switch in it (`main'2`); rgrind keeps it at its first level.
    let main = |p: &Profile| {
        p.self_ir.get("main").copied().unwrap_or(0) + p.self_ir.get("main'2").copied().unwrap_or(0)
    };
    assert_eq!(main(&mine), main(&theirs), "self Ir of main, all levels");
}

/// Signal handlers (`tests/guests/clg_signals.c`: handlers that return, one raising a
/// second signal from inside, one left by `siglongjmp`): as Callgrind, each handler runs on
/// a logical stack of its own, so it is a root of the graph rather than a callee of the
/// interrupted function, the interrupted function's remaining code stays its own, and the
/// handlers' cost is kept out of `summary:` (but not out of `totals:`). Until the
/// twenty-fourth session the handler was a callee of the interrupted function and the rest
/// of that function went to the signal frame's restorer.
#[test]
fn signal_handlers_run_on_their_own_logical_stack_like_valgrind() {
    let Some(vg) = valgrind() else {
        println!("valgrind not installed: comparison skipped");
        return;
    };
    let Some(exe) = build_guest("clg_signals.c", "clg_signals", &["-O1"]) else {
        return;
    };
    let mine = rgrind_profile(&exe, "clg_signals.rg", &[]);
    let theirs = valgrind_profile(&vg, &exe, "clg_signals.vg");
    let fns = ["work", "inner", "outer", "leave", "after", "escape", "main"];
    for f in fns {
        assert_eq!(mine.self_ir.get(f), theirs.self_ir.get(f), "self Ir of {f}");
    }
    for ((a, b), (calls, incl)) in &theirs.arcs {
        if !fns.contains(&a.as_str()) || b.starts_with("_dl_runtime_resolve") {
            continue;
        }
        let Some(&(mc, mi)) = mine.arcs.get(&(a.clone(), b.clone())) else {
            panic!("arc {a} -> {b} missing: {mine:?}")
        };
        assert_eq!((mc, mi), (*calls, *incl), "arc {a} -> {b}");
    }
    for (a, b) in mine.arcs.keys() {
        let handler = ["inner", "outer", "leave"].contains(&b.as_str());
        assert!(!handler, "handler {b} called from {a}: {mine:?}");
    }
    assert_eq!(
        mine.totals - mine.summary,
        theirs.totals - theirs.summary,
        "the handlers' cost, left out of the summary"
    );
}

/// A handler left by `siglongjmp` into the very function that faulted
/// (`tests/guests/clg_sigjmp.c`): no frame of the interrupted code is unwound, so Callgrind
/// never ends the handler and charges the rest of `main` to it (`segv -> later`, and none of
/// it in `summary:`). rgrind ends it when the stack pointer leaves the handler's stack: the
/// rest is `main`'s again, and the fast paths come back (they stand aside in handlers).
#[test]
fn a_handler_left_by_siglongjmp_ends_at_its_stack() {
    let Some(exe) = build_guest("clg_sigjmp.c", "clg_sigjmp", &["-O1"]) else {
        return;
    };
    let p = rgrind_profile(&exe, "clg_sigjmp.rg", &[]);
    let arc = |a: &str, b: &str| p.arcs.get(&(a.to_string(), b.to_string())).copied();
    assert_eq!(arc("main", "later").map(|a| a.0), Some(3), "{p:?}");
    assert_eq!(arc("segv", "later"), None, "{p:?}");
    assert_eq!(arc("segv", "work").map(|a| a.0), Some(3), "{p:?}");
    // Only the handlers' own cost (segv and what it called) is left out of the summary.
    let handlers: u64 = p.self_ir.get("segv").copied().unwrap_or(0)
        + p.arcs
            .iter()
            .filter(|((a, _), _)| a == "segv")
            .map(|(_, &(_, incl))| incl)
            .sum::<u64>();
    assert_eq!(p.totals - p.summary, handlers, "{p:?}");
}
