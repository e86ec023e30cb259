//! Valgrind's own readers on rgrind's files: `cg_annotate` and `callgrind_annotate
//! --inclusive=yes` list the same top functions (file, function and object) for rgrind's file
//! as for Valgrind's file of the same run, and gprof2dot turns rgrind's Callgrind file into a
//! graph. Skipped, with a message, where Valgrind (or gprof2dot) is not installed.

use rgrind_tests::{guest_case, run_rgrind, run_valgrind, scratch_dir, valgrind, which};
use std::path::Path;
use std::process::Command;

/// The labels (everything after the counts) of the first `n` function lines of an annotate
/// report, in order.
fn top_functions(report: &str, n: usize) -> Vec<String> {
    let is_count = |t: &str| {
        t == "("
            || t.chars().all(|c| c.is_ascii_digit() || c == ',')
            || (t.ends_with("%)")
                && t.trim_start_matches('(')
                    .trim_end_matches("%)")
                    .parse::<f64>()
                    .is_ok())
    };
    report
        .lines()
        .skip_while(|l| !l.contains("file:function"))
        .skip(2)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| {
            l.split_whitespace()
                .skip_while(|t| is_count(t))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .take(n)
        .collect()
}

fn annotate(tool: &str, args: &[&str], file: &Path) -> String {
    let out = Command::new(tool)
        .args(args)
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("{tool}: {e}"));
    assert!(out.status.success(), "{tool} rejected {}", file.display());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn annotate_tools_list_the_same_top_functions_as_for_valgrinds_files() {
    let Some(vg) = valgrind() else {
        println!("valgrind is not installed: skipped");
        return;
    };
    let cmd = guest_case("cxx").cmd();
    let dir = scratch_dir();
    let cases: [(&str, &[&str], &str, &[&str]); 2] = [
        (
            "cachegrind",
            &[
                "--cache-sim=yes",
                "--I1=32768,8,64",
                "--D1=32768,8,64",
                "--LL=8388608,16,64",
            ],
            "cg_annotate",
            &["--auto=no"],
        ),
        ("callgrind", &[], "callgrind_annotate", &["--inclusive=yes"]),
    ];
    for (tool, opts, reader, reader_args) in cases {
        if which(reader).is_none() {
            println!("{reader} is not installed: skipped");
            continue;
        }
        let files = [
            dir.join(format!("top.{tool}.rg")),
            dir.join(format!("top.{tool}.vg")),
        ];
        let mut args = vec![format!("--tool={tool}"), "-q".to_string()];
        args.extend(opts.iter().map(|o| o.to_string()));
        let run_with = |file: &Path, extra: &[&str]| {
            let mut a: Vec<&str> = args.iter().map(String::as_str).collect();
            a.extend_from_slice(extra);
            let out_opt = format!("--{tool}-out-file={}", file.display());
            a.push(&out_opt);
            a.iter().map(|s| s.to_string()).collect::<Vec<_>>()
        };
        let rg_args = run_with(&files[0], &[]);
        let rg = run_rgrind(
            &rg_args.iter().map(String::as_str).collect::<Vec<_>>(),
            &cmd,
        );
        assert!(rg.status.success(), "{}", rg.describe());
        let vg_args = run_with(
            &files[1],
            if tool == "cachegrind" {
                &["--vex-guest-chase=no"]
            } else {
                &[]
            },
        );
        let reference = run_valgrind(
            &vg,
            &vg_args.iter().map(String::as_str).collect::<Vec<_>>(),
            &cmd,
        );
        assert!(reference.status.success(), "{}", reference.describe());
        let ours = top_functions(&annotate(reader, reader_args, &files[0]), 8);
        let theirs = top_functions(&annotate(reader, reader_args, &files[1]), 8);
        assert_eq!(ours.len(), 8, "{reader} listed too few functions: {ours:?}");
        assert_eq!(ours, theirs, "{reader}: top functions differ");
        if tool == "callgrind" {
            match which("gprof2dot") {
                Some(g) => {
                    let dot = Command::new(g)
                        .args(["-f", "callgrind"])
                        .arg(&files[0])
                        .output()
                        .expect("gprof2dot runs");
                    assert!(dot.status.success(), "gprof2dot rejected rgrind's file");
                    assert!(String::from_utf8_lossy(&dot.stdout).starts_with("digraph"));
                }
                None => println!("gprof2dot is not installed: graph check skipped"),
            }
        }
    }
}
