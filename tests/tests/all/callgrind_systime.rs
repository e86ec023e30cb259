//! `--tool=callgrind --collect-systime=...`: system calls counted (`sysCount`), timed
//! (`sysTime`, and with `nsec` the thread's CPU time `sysCpuTime`) and charged as Callgrind
//! does: to the cost centre of the block ending in the call (a cost line of its own at that
//! instruction) and to every call arc active at the time. Checked by hand on a guest with a
//! known number of system calls and a sleep of known length, and against Valgrind's file for
//! the same guest.

use crate::callgrind_opts::{build, fresh_dir, profile};
use rgrind_tests::{valgrind, CallgrindNames};
use std::collections::BTreeMap;
use std::path::Path;

/// 140 `getppid` calls through libc's `syscall` (100 from `main`, 40 from `outer`), and one
/// sleep of 30 ms in `nap`.
const SYSCALLS_C: &str = r#"
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
__attribute__((noinline)) long ask(int n) { long s = 0; for (int i = 0; i < n; i++) s += syscall(SYS_getppid) > 0; return s; }
__attribute__((noinline)) long nap(void) { struct timespec t = {0, 30000000}; return nanosleep(&t, 0); }
__attribute__((noinline)) long outer(void) { return ask(40) + nap(); }
int main(void) { long a = ask(100); long b = outer(); printf("%ld %ld\n", a, b); return 0; }
"#;

const NAP_NS: u64 = 30_000_000;

/// What these tests read from a Callgrind file: header lines, self costs per function and
/// inclusive costs per call arc (caller, callee), in the `events:` order.
#[derive(Default, Debug)]
struct Costs {
    events: Vec<String>,
    event_lines: Vec<String>,
    totals: Vec<u64>,
    summary: Vec<u64>,
    self_cost: BTreeMap<String, Vec<u64>>,
    calls: BTreeMap<(String, String), Vec<u64>>,
}

impl Costs {
    fn event(&self, name: &str) -> usize {
        self.events
            .iter()
            .position(|e| e == name)
            .unwrap_or_else(|| panic!("no event {name} in {:?}", self.events))
    }

    fn self_of(&self, func: &str, event: &str) -> u64 {
        let k = self.event(event);
        self.self_cost
            .get(func)
            .map_or(0, |v| v.get(k).copied().unwrap_or(0))
    }

    fn arc(&self, from: &str, to: &str, event: &str) -> u64 {
        let k = self.event(event);
        let v = self
            .calls
            .get(&(from.to_string(), to.to_string()))
            .unwrap_or_else(|| panic!("no call arc {from} -> {to}"));
        v.get(k).copied().unwrap_or(0)
    }
}

fn read(path: &Path) -> Costs {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut c = Costs::default();
    let mut names = CallgrindNames::default();
    let mut npos = 1;
    let (mut cur, mut callee) = (String::new(), None::<String>);
    let mut after_calls = false;
    for line in text.lines() {
        let numeric = line.starts_with(|ch: char| ch.is_ascii_digit() || "+-*".contains(ch));
        if !numeric {
            if let Some(v) = line.strip_prefix("positions: ") {
                npos = v.split_whitespace().count();
            } else if let Some(v) = line.strip_prefix("events: ") {
                c.events = v.split_whitespace().map(String::from).collect();
            } else if line.starts_with("event: ") {
                c.event_lines.push(line.to_string());
            } else if let Some(v) = line.strip_prefix("totals: ") {
                c.totals = v
                    .split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect();
            } else if let Some(v) = line.strip_prefix("summary: ") {
                c.summary = v
                    .split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect();
            } else if let Some(v) = line.strip_prefix("fn=") {
                cur = names.resolve('f', v);
            } else if let Some(v) = line.strip_prefix("cfn=") {
                callee = Some(names.resolve('f', v));
            } else if line.starts_with("calls=") {
                after_calls = true;
            }
            continue;
        }
        let costs: Vec<u64> = line
            .split_whitespace()
            .skip(npos)
            .map(|x| x.parse().unwrap_or(0))
            .collect();
        let sum = |acc: &mut Vec<u64>| {
            acc.resize(acc.len().max(costs.len()), 0);
            for (a, x) in acc.iter_mut().zip(&costs) {
                *a += x;
            }
        };
        if after_calls {
            after_calls = false;
            let to = callee.clone().unwrap_or_default();
            sum(c.calls.entry((cur.clone(), to)).or_default());
        } else {
            sum(c.self_cost.entry(cur.clone()).or_default());
        }
    }
    c
}

/// The guest's call arcs and the system calls each must carry.
const ARCS: &[(&str, &str, u64)] = &[
    ("main", "ask", 100),
    ("main", "outer", 41),
    ("outer", "ask", 40),
    ("outer", "nap", 1),
];

/// Runs the guest under rgrind (and Valgrind when `vg`) with `opts`; the file read back.
fn profile_of(vg: Option<&Path>, exe: &Path, name: &str, opts: &[&str]) -> Costs {
    let dir = fresh_dir(name);
    profile(vg, exe, &dir, opts);
    read(&dir.join("cg.out"))
}

fn check_counts(c: &Costs, what: &str) {
    assert_eq!(c.self_of("syscall", "sysCount"), 140, "{what}: {c:?}");
    for &(from, to, n) in ARCS {
        assert_eq!(c.arc(from, to, "sysCount"), n, "{what}: {from} -> {to}");
    }
    // Totals are the sums of the self-cost lines, the call counts among them.
    let k = c.event("sysCount");
    let sum: u64 = c
        .self_cost
        .values()
        .map(|v| v.get(k).copied().unwrap_or(0))
        .sum();
    assert_eq!(c.totals.get(k).copied(), Some(sum), "{what}: totals");
    assert!(sum > 140, "{what}: start-up system calls missing: {sum}");
}

#[test]
fn system_calls_are_counted_timed_and_carried_by_the_call_arcs() {
    let Some(exe) = build("systime", SYSCALLS_C, &["-O1"]) else {
        return;
    };
    let ns = profile_of(None, &exe, "systime-nsec", &["--collect-systime=nsec"]);
    assert_eq!(ns.events, ["Ir", "sysCount", "sysTime", "sysCpuTime"]);
    assert_eq!(
        ns.event_lines,
        [
            "event: sysTime : sysTime (elapsed ns)",
            "event: sysCpuTime : sysCpuTime (system cpu ns)"
        ]
    );
    check_counts(&ns, "nsec");
    // The sleep is elapsed time, not CPU time.
    let slept = ns.arc("outer", "nap", "sysTime");
    assert!(slept >= NAP_NS, "nap's sysTime {slept} ns");
    assert!(ns.arc("main", "outer", "sysTime") >= slept);
    assert!(ns.arc("outer", "nap", "sysCpuTime") < NAP_NS / 2);
    assert!(ns.self_of("nap", "sysTime") == 0 && ns.self_of("nap", "Ir") > 0);

    for (unit, at_least) in [("msec", NAP_NS / 1_000_000), ("usec", NAP_NS / 1_000)] {
        let c = profile_of(
            None,
            &exe,
            &format!("systime-{unit}"),
            &[&format!("--collect-systime={unit}")],
        );
        assert_eq!(c.events, ["Ir", "sysCount", "sysTime"], "{unit}");
        let short = &unit[..2];
        assert_eq!(
            c.event_lines,
            [format!("event: sysTime : sysTime (elapsed {short})")]
        );
        check_counts(&c, unit);
        let slept = c.arc("outer", "nap", "sysTime");
        assert!(
            (at_least..at_least * 20).contains(&slept),
            "{unit}: nap's sysTime {slept}"
        );
    }

    // Every system call is counted in the running cost (`summary:`), but only those of
    // blocks that ran with collection on are written (`totals:`).
    let toggled = profile_of(
        None,
        &exe,
        "systime-toggle",
        &["--collect-systime=nsec", "--toggle-collect=ask"],
    );
    let k = toggled.event("sysCount");
    assert_eq!(toggled.totals.get(k), Some(&140), "{toggled:?}");
    assert_eq!(toggled.summary.get(k), ns.summary.get(k));
    assert!(toggled.arc("main", "ask", "sysCount") == 100);

    // `yes` is milliseconds; the events follow the simulator's.
    let sim = profile_of(
        None,
        &exe,
        "systime-sim",
        &[
            "--collect-systime=yes",
            "--cache-sim=yes",
            "--branch-sim=yes",
        ],
    );
    assert_eq!(
        sim.events.join(" "),
        "Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw Bc Bcm Bi Bim sysCount sysTime"
    );
    check_counts(&sim, "with simulation");
    for func in ["main", "ask", "outer", "nap"] {
        assert_eq!(sim.self_of(func, "Ir"), ns.self_of(func, "Ir"), "{func}");
    }
}

#[test]
fn system_call_counts_match_valgrind() {
    let Some(vg) = valgrind() else {
        println!("valgrind not installed: comparison skipped");
        return;
    };
    let Some(exe) = build("systime-vg", SYSCALLS_C, &["-O1"]) else {
        return;
    };
    for opts in [
        &["--collect-systime=nsec"][..],
        &["--collect-systime=usec", "--cache-sim=yes"][..],
        &["--collect-systime=msec", "--toggle-collect=ask"][..],
    ] {
        let ours = profile_of(None, &exe, "systime-vg-rg", opts);
        let theirs = profile_of(Some(&vg), &exe, "systime-vg-vg", opts);
        assert_eq!(ours.events, theirs.events, "{opts:?}");
        assert_eq!(ours.event_lines, theirs.event_lines, "{opts:?}");
        let k = ours.event("sysCount");
        if opts.contains(&"--toggle-collect=ask") {
            assert_eq!(ours.totals.get(k), theirs.totals.get(k), "{opts:?}: totals");
        } else {
            check_counts(&theirs, "valgrind");
        }
        for &(from, to, _) in ARCS {
            for e in ["Ir", "sysCount"] {
                assert_eq!(
                    ours.arc(from, to, e),
                    theirs.arc(from, to, e),
                    "{opts:?}: {from} -> {to} {e}"
                );
            }
        }
        for func in ["main", "ask", "outer", "nap", "syscall", "clock_nanosleep"] {
            assert_eq!(
                ours.self_of(func, "sysCount"),
                theirs.self_of(func, "sysCount"),
                "{opts:?}: {func}"
            );
        }
    }
}
