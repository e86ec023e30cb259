//! The command lines benchmark harnesses run Valgrind with (`../shared/reference`'s B5, read
//! from gungraun 0.20 and CodSpeed's runner), run under rgrind and under Valgrind on the same
//! guest: the same exit status, the same output file names (pid aside), headers and events,
//! and the same Ir for what the harness measures.

use crate::callgrind_opts::{build, fresh_dir};
use rgrind_tests::{run, run_rgrind, run_valgrind, valgrind, Cmd, End};
use std::collections::BTreeMap;
use std::path::Path;

/// A benchmark binary as the harnesses see one: `bench` is the measured function (gungraun
/// toggles collection on it); with `CODSPEED` the client requests CodSpeed's library sends.
const BENCH_C: &str = r#"
#include <stdio.h>
#ifdef CODSPEED
#include <valgrind/callgrind.h>
#endif
__attribute__((noinline)) long bench(long n) { long s = 0; for (long i = 0; i < n; i++) s += (i * i) % 11; return s; }
int main(void) {
    long s = 0;
#ifdef CODSPEED
    if (!RUNNING_ON_VALGRIND) return 2;
    CALLGRIND_DUMP_STATS_AT("Metadata: rgrind-test 1");
    for (int b = 0; b < 2; b++) {
        CALLGRIND_ZERO_STATS;
        CALLGRIND_START_INSTRUMENTATION;
        s += bench(1000 * (b + 1));
        CALLGRIND_STOP_INSTRUMENTATION;
        CALLGRIND_DUMP_STATS_AT(b ? "bench_b" : "bench_a");
    }
#else
    s = bench(5000);
#endif
    printf("%ld\n", s);
    return 7;
}
"#;

const GEOMETRY: [&str; 3] = ["--I1=32768,8,64", "--D1=32768,8,64", "--LL=8388608,16,64"];

/// One run's files: name (the pid replaced by `PID`) → text. The run must end as `end`
/// (None: as the native run, with its output).
fn run_files(
    vg: Option<&Path>,
    exe: &Path,
    name: &str,
    opts: &[String],
    end: Option<End>,
) -> BTreeMap<String, String> {
    let dir = fresh_dir(name);
    let opts: Vec<String> = opts
        .iter()
        .map(|o| o.replace("<dir>", &dir.display().to_string()))
        .collect();
    let opts: Vec<&str> = opts.iter().map(String::as_str).collect();
    let cmd = Cmd::new(exe);
    let o = match vg {
        Some(v) => run_valgrind(v, &opts, &cmd),
        None => run_rgrind(&opts, &cmd),
    };
    match end {
        Some(e) => assert_eq!(o.end(), e, "{name}: {}", o.describe()),
        None => {
            let native = run(&cmd);
            assert_eq!(o.end(), native.end(), "{name}: {}", o.describe());
            assert_eq!(o.stdout, native.stdout, "{name}");
        }
    }
    let mut files = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.expect("dir entry").path();
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let file = p
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        files.push((file, text));
    }
    // Valgrind leaves an empty base file next to the per-thread ones: the pid comes from
    // the others.
    let pid = files
        .iter()
        .find_map(|(_, t)| {
            t.lines()
                .find_map(|l| l.strip_prefix("pid: "))
                .map(str::to_string)
                .or_else(|| rgrind_tests::tool_line_pid(t.as_bytes()).map(|p| p.to_string()))
        })
        .unwrap_or_else(|| panic!("{name}: no pid in any file"));
    files
        .into_iter()
        .map(|(f, t)| (f.replace(&pid, "PID"), t))
        .collect()
}

/// The header lines the harnesses read, the `desc: Trigger:` and `summary:` lines, and per
/// part the Ir of `totals:` (the first number; parts in file order).
fn shape(text: &str) -> (Vec<String>, Vec<u64>) {
    let mut lines = Vec::new();
    let mut ir = Vec::new();
    for l in text.lines() {
        if [
            "version:",
            "events:",
            "positions:",
            "desc: Trigger:",
            "part:",
            "summary:",
        ]
        .iter()
        .any(|p| l.starts_with(p))
        {
            lines.push(l.to_string());
        }
        if let Some(v) = l.strip_prefix("totals: ") {
            ir.push(
                v.split_whitespace()
                    .next()
                    .and_then(|x| x.parse().ok())
                    .unwrap_or(0),
            );
        }
    }
    (lines, ir)
}

/// A log's lines with the `--PID--`/`==PID==` prefix's number removed.
fn without_pid(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| {
            for mark in ["==", "--"] {
                if let Some((pid, rest)) = l.strip_prefix(mark).and_then(|r| r.split_once(mark)) {
                    if !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()) {
                        return format!("{mark}PID{mark}{rest}");
                    }
                }
            }
            l.to_string()
        })
        .collect()
}

/// The log as gungraun's parser needs it: `==PID==` first, a `Command:` line.
fn check_log(text: &str, what: &str) {
    let first = text.lines().next().unwrap_or("");
    assert!(
        rgrind_tests::tool_line_pid(first.as_bytes()).is_some(),
        "{what}: first log line {first:?}"
    );
    assert!(
        text.lines().any(|l| l.contains("Command: ")),
        "{what}:\n{text}"
    );
}

fn compare(mine: &BTreeMap<String, String>, theirs: &BTreeMap<String, String>, what: &str) {
    assert_eq!(
        mine.keys().collect::<Vec<_>>(),
        theirs.keys().collect::<Vec<_>>(),
        "{what}: file names"
    );
    for (name, text) in mine {
        if text.is_empty() {
            assert!(theirs[name].is_empty(), "{what}: {name}");
            continue;
        }
        if name.contains(".log") {
            if theirs[name].contains("Command: ") {
                check_log(text, what);
                check_log(&theirs[name], what);
            } else {
                // Quiet (`-q`): only Valgrind's warnings and notices.
                assert_eq!(
                    without_pid(text),
                    without_pid(&theirs[name]),
                    "{what}: {name}"
                );
            }
            continue;
        }
        assert_eq!(shape(text), shape(&theirs[name]), "{what}: {name}");
        assert!(
            text.lines().any(|l| l.starts_with("cmd: ")),
            "{what}: {name}"
        );
    }
}

/// What gungraun passes before its tool's own options: the core options, then the cache
/// geometry and `--cache-sim=yes`.
fn gungraun_prefix(tool: &str) -> Vec<String> {
    let mut opts = vec![format!("--tool={tool}")];
    opts.extend(
        [
            "--error-exitcode=0",
            "--trace-children=yes",
            "--fair-sched=try",
            "--vgdb=no",
        ]
        .map(String::from),
    );
    opts.extend(GEOMETRY.map(String::from));
    opts.push("--cache-sim=yes".into());
    opts
}

#[test]
fn gungraun_command_line() {
    let Some(exe) = build("harness-gungraun", BENCH_C, &["-O1"]) else {
        return;
    };
    let mut opts = gungraun_prefix("callgrind");
    opts.extend(
        [
            "--compress-strings=no",
            "--compress-pos=no",
            "--dump-line=yes",
            "--dump-instr=no",
            "--combine-dumps=no",
            "--separate-threads=yes",
            "--toggle-collect=bench",
            "--callgrind-out-file=<dir>/callgrind.bench.out.#%p",
            "--log-file=<dir>/callgrind.bench.log.#%p",
        ]
        .map(String::from),
    );
    let mine = run_files(None, &exe, "harness-gungraun.rg", &opts, None);
    assert_eq!(
        mine.keys().collect::<Vec<_>>(),
        [
            "callgrind.bench.log.#PID",
            "callgrind.bench.out.#PID",
            "callgrind.bench.out.#PID-01"
        ]
    );
    let (_, ir) = shape(&mine["callgrind.bench.out.#PID-01"]);
    assert!(ir.len() == 1 && ir[0] > 5000 * 5, "{ir:?}");
    // Uncompressed, absolute positions only: what gungraun's parser reads.
    for l in mine["callgrind.bench.out.#PID-01"].lines() {
        assert!(!l.starts_with(['+', '-', '*', '(']), "{l}");
        let compressed = l.split_once("=(").is_some_and(|(_, id)| {
            id.split_once(')')
                .is_some_and(|(n, _)| n.bytes().all(|b| b.is_ascii_digit()))
        });
        assert!(!compressed, "{l}");
    }
    let Some(vg) = valgrind() else {
        println!("valgrind not installed: comparison skipped");
        return;
    };
    let theirs = run_files(Some(&vg), &exe, "harness-gungraun.vg", &opts, None);
    compare(&mine, &theirs, "gungraun");
}

#[test]
fn codspeed_command_line() {
    if !Path::new("/usr/include/valgrind/callgrind.h").exists() {
        println!("valgrind/callgrind.h not installed: CodSpeed test skipped");
        return;
    }
    let Some(exe) = build("harness-codspeed", BENCH_C, &["-O1", "-DCODSPEED"]) else {
        return;
    };
    // CodSpeed's runner, less its fork's `--obj-skip` (Valgrind 3.19 refuses it).
    let mut opts: Vec<String> = [
        "-q",
        "--tool=callgrind",
        "--trace-children=yes",
        "--cache-sim=yes",
    ]
    .map(String::from)
    .to_vec();
    opts.extend(GEOMETRY.map(String::from));
    opts.extend(
        [
            "--instr-atstart=no",
            "--collect-systime=nsec",
            "--compress-strings=no",
            "--combine-dumps=yes",
            "--dump-line=no",
            "--read-inline-info=yes",
            "--trace-children-skip=*esbuild",
            "--callgrind-out-file=<dir>/%p.out",
            "--log-file=<dir>/valgrind.log",
        ]
        .map(String::from),
    );
    let mine = run_files(None, &exe, "harness-codspeed.rg", &opts, Some(End::Exit(7)));
    assert_eq!(mine.keys().collect::<Vec<_>>(), ["PID.out", "valgrind.log"]);
    let (lines, ir) = shape(&mine["PID.out"]);
    let triggers: Vec<&String> = lines.iter().filter(|l| l.contains("Trigger")).collect();
    assert_eq!(
        triggers,
        [
            "desc: Trigger: Client Request: Metadata: rgrind-test 1",
            "desc: Trigger: Client Request: bench_a",
            "desc: Trigger: Client Request: bench_b",
            "desc: Trigger: Program termination",
        ]
    );
    assert!(lines.iter().all(|l| !l.starts_with("events:")
        || l == "events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw sysCount sysTime sysCpuTime"));
    // bench_b runs twice the loop of bench_a.
    assert!(ir[2] > ir[1] * 3 / 2, "{ir:?}");
    let Some(vg) = valgrind() else {
        println!("valgrind not installed: comparison skipped");
        return;
    };
    let theirs = run_files(
        Some(&vg),
        &exe,
        "harness-codspeed.vg",
        &opts,
        Some(End::Exit(7)),
    );
    compare(&mine, &theirs, "CodSpeed");
}

#[test]
fn gungraun_cachegrind_command_line() {
    let Some(exe) = build("harness-gungraun-cg", BENCH_C, &["-O1"]) else {
        return;
    };
    let mut opts = gungraun_prefix("cachegrind");
    opts.extend(
        [
            "--cachegrind-out-file=<dir>/cachegrind.bench.out.#%p",
            "--log-file=<dir>/cachegrind.bench.log.#%p",
        ]
        .map(String::from),
    );
    let header = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| l.starts_with("events:") || l.starts_with("desc: I1"))
            .map(String::from)
            .collect()
    };
    let mine = run_files(None, &exe, "harness-gungraun-cg.rg", &opts, None);
    assert_eq!(
        mine.keys().collect::<Vec<_>>(),
        ["cachegrind.bench.log.#PID", "cachegrind.bench.out.#PID"]
    );
    let out = &mine["cachegrind.bench.out.#PID"];
    assert!(out.lines().any(|l| l.starts_with("cmd: ")), "{out}");
    check_log(&mine["cachegrind.bench.log.#PID"], "cachegrind");
    let Some(vg) = valgrind() else {
        println!("valgrind not installed: comparison skipped");
        return;
    };
    let theirs = run_files(Some(&vg), &exe, "harness-gungraun-cg.vg", &opts, None);
    assert_eq!(
        mine.keys().collect::<Vec<_>>(),
        theirs.keys().collect::<Vec<_>>()
    );
    assert_eq!(header(out), header(&theirs["cachegrind.bench.out.#PID"]));
}
