//! Process creation: fork (the child keeps running under rgrind), vfork (run as fork) + execve,
//! execve, posix_spawn, a pipeline through `sh -c`, and `--trace-children`: with `yes` the
//! exec'd program gets its own `==PID== Command:` preamble, with `no` it runs natively.

use rgrind_tests::{
    check_all, check_expected, guest_case, run_rgrind, tool_line_pid, End, Outcome,
};
use std::collections::BTreeSet;

#[test]
fn fork_exec_spawn_and_pipelines() {
    let cases: &[(&str, &str)] = &[
        ("fork", "proc fork: start\nchild: running, parent is alive: 1\nfork: child exited 3\nproc fork: done\n"),
        ("forkexec", "proc forkexec: start\nfrom forkexec\nforkexec: child exited 0\nproc forkexec: done\n"),
        ("vfork", "proc vfork: start\nfrom vfork\nvfork: child exited 0\nproc vfork: done\n"),
        ("execve", "proc execve: start\nfrom execve\n"),
        ("spawn", "proc spawn: start\nfrom spawn\nspawn: child exited 0\nproc spawn: done\n"),
        ("pipeline", "proc pipeline: start\nabc\npipeline: status 0\nproc pipeline: done\n"),
        ("fork-static", "proc fork: start\nchild: running, parent is alive: 1\nfork: child exited 3\nproc fork: done\n"),
        ("vfork-static", "proc vfork: start\nfrom vfork\nvfork: child exited 0\nproc vfork: done\n"),
    ];
    check_all(
        cases,
        |c| c.0.to_owned(),
        |&(label, out)| check_expected(&guest_case(label).cmd(), out, End::Exit(0)),
    );
}

/// The pids of the `==PID== Command:` lines, in order of appearance.
fn command_pids(o: &Outcome) -> Vec<u32> {
    o.tool_lines()
        .iter()
        .filter(|l| l.contains("Command:"))
        .filter_map(|l| tool_line_pid(l.as_bytes()))
        .collect()
}

#[test]
fn trace_children_yes_gives_the_exec_child_its_own_preamble() {
    let cmd = guest_case("forkexec").cmd();
    let o = run_rgrind(&["--tool=none", "--trace-children=yes"], &cmd);
    let pids = command_pids(&o);
    let distinct: BTreeSet<_> = pids.iter().collect();
    assert_eq!(
        (pids.len(), distinct.len()),
        (2, 2),
        "want two preambles with different pids\n{}",
        o.describe()
    );
    assert!(
        o.tool_lines()
            .iter()
            .any(|l| l.contains("Command:") && l.contains("echo from forkexec")),
        "{}",
        o.describe()
    );
    assert_eq!(
        o.stdout_str(),
        "proc forkexec: start\nfrom forkexec\nforkexec: child exited 0\nproc forkexec: done\n"
    );
    assert_eq!(o.end(), End::Exit(0));

    // execve in place: a second preamble, same pid.
    let o = run_rgrind(
        &["--tool=none", "--trace-children=yes"],
        &guest_case("execve").cmd(),
    );
    let pids = command_pids(&o);
    assert!(
        pids.len() == 2 && pids[0] == pids[1],
        "want two preambles with one pid\n{}",
        o.describe()
    );
    assert_eq!(
        (o.stdout_str().as_str(), o.end()),
        ("proc execve: start\nfrom execve\n", End::Exit(0))
    );
}

#[test]
fn trace_children_no_runs_the_exec_child_natively() {
    for opts in [
        &["--tool=none", "--trace-children=no"][..],
        &["--tool=none"][..],
    ] {
        let o = run_rgrind(opts, &guest_case("forkexec").cmd());
        assert_eq!(
            command_pids(&o).len(),
            1,
            "want one preamble with {opts:?}\n{}",
            o.describe()
        );
        assert_eq!(
            o.stdout_str(),
            "proc forkexec: start\nfrom forkexec\nforkexec: child exited 0\nproc forkexec: done\n"
        );
        assert_eq!(o.end(), End::Exit(0));
    }
}

#[test]
fn quiet_trace_children_prints_nothing_of_its_own() {
    let o = run_rgrind(
        &["--tool=none", "-q", "--trace-children=yes"],
        &guest_case("forkexec").cmd(),
    );
    assert!(o.stderr.is_empty(), "{}", o.describe());
    assert_eq!(o.end(), End::Exit(0));
}

/// `--trace-children-skip` matches the exec'd path (`/bin/echo`; `*` and `?`, no escapes) and
/// `--trace-children-skip-by-arg` each argument, `argv[0]` included: a skipped program runs
/// natively (one preamble), others under rgrind (two). Valgrind makes the same choices.
#[test]
fn trace_children_skip_patterns_choose_the_native_children() {
    let cmd = guest_case("forkexec").cmd();
    let cases: &[(&[&str], usize)] = &[
        (&["--trace-children-skip=*/ech?"], 1),
        (&["--trace-children-skip=/usr/*,,*cat"], 2),
        (&["--trace-children-skip=echo"], 2),
        (&["--trace-children-skip=\\/bin/e*"], 2),
        (&["--trace-children-skip-by-arg=forkexe*"], 1),
        (&["--trace-children-skip-by-arg=echo"], 1),
        (&["--trace-children-skip-by-arg=from?"], 2),
    ];
    let vg = rgrind_tests::valgrind();
    for &(skip, want) in cases {
        let mut opts = vec!["--tool=none", "--trace-children=yes"];
        opts.extend_from_slice(skip);
        let o = run_rgrind(&opts, &cmd);
        assert_eq!(
            (command_pids(&o).len(), o.stdout_str().as_str(), o.end()),
            (
                want,
                "proc forkexec: start\nfrom forkexec\nforkexec: child exited 0\nproc forkexec: done\n",
                End::Exit(0)
            ),
            "{skip:?}\n{}",
            o.describe()
        );
        if let Some(vg) = &vg {
            let v = rgrind_tests::run_valgrind(vg, &opts, &cmd);
            assert_eq!(
                command_pids(&v).len(),
                want,
                "valgrind {skip:?}\n{}",
                v.describe()
            );
        }
    }
    // Without --trace-children=yes the patterns change nothing.
    let o = run_rgrind(&["--tool=none", "--trace-children-skip=nothing"], &cmd);
    assert_eq!(command_pids(&o).len(), 1, "{}", o.describe());
}

/// A fork child goes on profiling and writes its own file, named with its pid (`%p`), as
/// Valgrind's tools do; the parent's file keeps the parent's pid.
#[test]
fn a_fork_child_writes_its_own_profile() {
    let dir = std::env::temp_dir().join(format!("rgrind-fork-out.{}", std::process::id()));
    for (tool, opt, pid_of) in [
        ("callgrind", "--callgrind-out-file", "pid: "),
        ("cachegrind", "--cachegrind-out-file", ""),
    ] {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch folder");
        let out = format!("{opt}={}/out.%p", dir.display());
        let o = run_rgrind(
            &[&format!("--tool={tool}"), &out],
            &guest_case("fork").cmd(),
        );
        assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .expect("scratch folder")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names.len(),
            2,
            "{tool}: want the parent's and the child's file: {names:?}"
        );
        let parent = tool_line_pid(o.stderr.split(|&b| b == b'\n').next().unwrap_or(&[]));
        assert!(
            names.contains(&format!("out.{}", parent.expect("a ==PID== line"))),
            "{tool}: {names:?}"
        );
        for n in &names {
            let text = std::fs::read_to_string(dir.join(n)).expect("profile");
            assert!(
                text.contains("summary:"),
                "{tool}: {n} is not a whole profile"
            );
            if !pid_of.is_empty() {
                let pid = n.trim_start_matches("out.");
                assert!(text.contains(&format!("{pid_of}{pid}\n")), "{tool}: {n}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The files of one run in `dir` (every `%p` a pid): name with the pids replaced by `PID`,
/// and size.
fn files_of(dir: &std::path::Path) -> BTreeSet<(String, u64)> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let e = e.expect("dir entry");
            let name = e.file_name().to_string_lossy().into_owned();
            let base = name.split('.').next().unwrap_or("").to_string();
            let len = e.metadata().expect("metadata").len();
            (format!("{base}.PID"), len.min(1))
        })
        .collect()
}

/// An `execve` without `--trace-children` loses the counts of the image it replaces, as
/// under Valgrind: Callgrind's file, created at start, stays empty, and Cachegrind writes
/// none (until the forty-fifth session rgrind wrote both, and a fork child that execs left
/// a file Valgrind does not). With `--trace-children=yes` the new image's profile is the
/// pid's file. Valgrind, when installed, leaves the same files.
#[test]
fn an_exec_writes_no_profile_of_the_image_it_replaces() {
    let vg = rgrind_tests::valgrind();
    for (tool, trace, want) in [
        ("callgrind", "no", &[("cg.PID", 0)][..]),
        ("cachegrind", "no", &[][..]),
        ("callgrind", "yes", &[("cg.PID", 1)][..]),
        ("cachegrind", "yes", &[("cg.PID", 1)][..]),
    ] {
        let want: BTreeSet<(String, u64)> = want.iter().map(|&(n, l)| (n.to_string(), l)).collect();
        let scratch = rgrind_tests::scratch_dir();
        let mine = exec_files(
            None,
            &scratch.join(format!("exec.{tool}.{trace}.rg")),
            tool,
            trace,
        );
        assert_eq!(mine, want, "rgrind, {tool}, --trace-children={trace}");
        if let Some(vg) = vg.as_deref() {
            let dir = scratch.join(format!("exec.{tool}.{trace}.vg"));
            let theirs = exec_files(Some(vg), &dir, tool, trace);
            assert_eq!(theirs, want, "Valgrind, {tool}, --trace-children={trace}");
        }
    }
}

/// Runs the `execve` guest under `tool` (rgrind, or Valgrind at `vg`) with its profiles in a
/// fresh `dir`; the files left there (`files_of`).
fn exec_files(
    vg: Option<&std::path::Path>,
    dir: &std::path::Path,
    tool: &str,
    trace: &str,
) -> BTreeSet<(String, u64)> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let opts = [
        format!("--tool={tool}"),
        format!("--trace-children={trace}"),
        format!("--{tool}-out-file={}/cg.%p", dir.display()),
    ];
    let opts: Vec<&str> = opts.iter().map(String::as_str).collect();
    let cmd = guest_case("execve").cmd();
    let o = match vg {
        Some(v) => rgrind_tests::run_valgrind(v, &opts, &cmd),
        None => run_rgrind(&opts, &cmd),
    };
    assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
    assert_eq!(o.stdout_str(), "proc execve: start\nfrom execve\n");
    files_of(dir)
}
