//! Command-line options: unknown options and tools are errors naming them, `--help` and
//! `--version` exit 0, `-q` silences rgrind's own lines, `--log-file=F` moves them to F, and
//! options after the program name belong to the program.

use rgrind_tests::{guest_case, rgrind, run, run_rgrind, scratch_dir, Cmd, End};

fn rgrind_with(args: &[&str]) -> rgrind_tests::Outcome {
    run(&Cmd::new(rgrind()).args(args))
}

#[test]
fn unknown_option_is_named_and_exits_1() {
    let o = run_rgrind(
        &["--tool=none", "--bogus-option=1"],
        &guest_case("hello").cmd(),
    );
    assert_eq!(o.end(), End::Exit(1), "{}", o.describe());
    assert!(
        o.stderr_str().contains("--bogus-option"),
        "{}",
        o.describe()
    );
    assert!(
        !o.stderr_str().contains("panicked") && o.stdout.is_empty(),
        "{}",
        o.describe()
    );
}

/// `--num-callers` takes 1 to 500, as Valgrind's; other values are bad options.
#[test]
fn num_callers_out_of_range_is_a_bad_option() {
    for (value, why) in [
        ("0", "'--num-callers' argument must be between 1 and 500"),
        ("501", "'--num-callers' argument must be between 1 and 500"),
        ("many", "Invalid integer value 'many'"),
    ] {
        let arg = format!("--num-callers={value}");
        let o = run_rgrind(&["--tool=none", &arg], &guest_case("hello").cmd());
        assert_eq!(o.end(), End::Exit(1), "{}", o.describe());
        let err = o.stderr_str();
        assert!(
            err.contains(&format!("Bad option: {arg}\n")) && err.contains(why),
            "{}",
            o.describe()
        );
        assert!(o.stdout.is_empty(), "{}", o.describe());
    }
    let o = run_rgrind(
        &["--tool=none", "--num-callers=500", "--show-below-main=yes"],
        &guest_case("hello").cmd(),
    );
    assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
}

#[test]
fn unknown_tool_is_named_and_exits_1() {
    let o = run_rgrind(&["--tool=nosuchtool"], &guest_case("hello").cmd());
    assert_eq!(o.end(), End::Exit(1), "{}", o.describe());
    assert!(
        o.stderr_str().contains("nosuchtool") && !o.stderr_str().contains("panicked"),
        "{}",
        o.describe()
    );
    assert!(o.stdout.is_empty(), "{}", o.describe());
}

#[test]
fn help_and_version() {
    let o = rgrind_with(&["--help"]);
    assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
    assert!(o.stdout_str().contains("--tool"), "{}", o.describe());
    assert!(
        !o.stdout_str().contains("user options for"),
        "{}",
        o.describe()
    );
    // With a tool, its own options follow the core's, as Valgrind lists them.
    for (tool, section, option) in [
        (
            "cachegrind",
            "user options for Cachegrind:",
            "--cache-sim=yes|no",
        ),
        (
            "callgrind",
            "user options for Callgrind:",
            "--dump-instr=no|yes",
        ),
    ] {
        let o = rgrind_with(&[&format!("--tool={tool}"), "--help"]);
        assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
        let out = o.stdout_str();
        assert!(
            out.contains(section) && out.contains(option) && out.contains("--tool"),
            "{}",
            o.describe()
        );
    }
    let o = rgrind_with(&["--version"]);
    assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
    assert!(!o.stdout_str().trim().is_empty(), "{}", o.describe());
}

#[test]
fn preamble_on_stderr_unless_quiet() {
    let cmd = guest_case("stderr").cmd();
    let o = run_rgrind(&["--tool=none"], &cmd);
    let lines = o.tool_lines();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("Command:")
                && l.contains(&cmd.program.to_string_lossy().into_owned())),
        "want a ==PID== Command: line naming the program\n{}",
        o.describe()
    );
    assert_eq!(
        o.guest_stderr(),
        b"err 0\nerr 1\nerr 2\n",
        "{}",
        o.describe()
    );
    assert_eq!(
        (o.stdout_str().as_str(), o.end()),
        ("out 0\nout 1\nout 2\n", End::Exit(0))
    );

    let o = run_rgrind(&["--tool=none", "-q"], &cmd);
    assert!(
        o.tool_lines().is_empty(),
        "-q must print no ==PID== lines\n{}",
        o.describe()
    );
}

#[test]
fn log_file_takes_the_tool_lines() {
    let log = scratch_dir().join("rgrind-log-file.txt");
    let _ = std::fs::remove_file(&log);
    let opt = format!("--log-file={}", log.display());
    let o = run_rgrind(&["--tool=none", &opt], &guest_case("stderr").cmd());
    assert!(
        o.tool_lines().is_empty(),
        "no ==PID== lines on stderr with --log-file\n{}",
        o.describe()
    );
    assert_eq!(o.stderr_str(), "err 0\nerr 1\nerr 2\n", "{}", o.describe());
    assert_eq!(
        (o.stdout_str().as_str(), o.end()),
        ("out 0\nout 1\nout 2\n", End::Exit(0))
    );
    let text = std::fs::read(&log)
        .unwrap_or_else(|e| panic!("--log-file did not create {}: {e}", log.display()));
    let lines = rgrind_tests::tool_lines(&text);
    assert!(
        lines.iter().any(|l| l.contains("Command:")),
        "log file:\n{}",
        String::from_utf8_lossy(&text)
    );
}

/// A file name naming an unset variable is a bad option, as in Valgrind: for `--log-file`
/// and `--callgrind-out-file` before the program runs (exit 1, no file, no guest output);
/// Cachegrind expands its name at the end, so the program runs and then rgrind exits 1.
#[test]
fn unset_variables_in_file_names_are_bad_options() {
    let dir = scratch_dir().join("unset-var");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let name = format!("{}/x.%q{{RGRIND_TEST_UNSET_VAR}}", dir.display());
    for (opt, runs) in [
        ("--tool=none --log-file", false),
        ("--tool=callgrind --callgrind-out-file", false),
        ("--tool=cachegrind --cachegrind-out-file", true),
    ] {
        let (tool, file_opt) = opt.split_once(' ').unwrap_or((opt, ""));
        let arg = format!("{file_opt}={name}");
        let o = run(&guest_case("hello").cmd().under(rgrind(), &[tool, &arg]));
        assert_eq!(o.end(), End::Exit(1), "{opt}\n{}", o.describe());
        let err = o.stderr_str();
        assert!(
            err.contains(&format!("Bad option: {arg}"))
                && err.contains("Environment variable 'RGRIND_TEST_UNSET_VAR' is not set"),
            "{opt}\n{}",
            o.describe()
        );
        assert_eq!(!o.stdout.is_empty(), runs, "{opt}\n{}", o.describe());
        let left: Vec<_> = std::fs::read_dir(&dir).map_or(vec![], |d| d.flatten().collect());
        assert!(left.is_empty(), "{opt}: {left:?}");
    }
}

/// Valgrind refuses a cache line shorter than the widest register (32 bytes) when it
/// simulates caches, in both tools, before the program runs.
#[test]
fn lines_shorter_than_a_register_are_refused_with_simulation() {
    for tool in ["--tool=cachegrind", "--tool=callgrind"] {
        let o = run_rgrind(
            &[tool, "--cache-sim=yes", "--D1=32768,8,16"],
            &guest_case("hello").cmd(),
        );
        assert_eq!(o.end(), End::Exit(1), "{}", o.describe());
        assert!(
            o.stderr_str()
                .contains("cannot continue: the minimum line size (16)")
                && o.stdout.is_empty(),
            "{}",
            o.describe()
        );
    }
    // Without simulation the geometry is not used, and Valgrind runs the program.
    let o = run_rgrind(
        &[
            "--tool=cachegrind",
            "--D1=32768,8,16",
            "--cachegrind-out-file=/dev/null",
        ],
        &guest_case("hello").cmd(),
    );
    let native = run(&guest_case("hello").cmd());
    assert_eq!(o.end(), native.end(), "{}", o.describe());
}

#[test]
fn options_after_the_program_belong_to_it() {
    let o = run_rgrind(
        &["--tool=none", "-q"],
        &Cmd::guest("hello").args(["--bogus-option", "-q", "--help"]),
    );
    assert_eq!(
        (o.stdout_str().as_str(), o.end()),
        ("hello, world (argc=4)\n", End::Exit(0)),
        "{}",
        o.describe()
    );
}

#[test]
fn preamble_pid_is_the_guest_pid() {
    // The shell prints its own pid; rgrind's ==PID== lines must carry the same one (no extra
    // process between the user's command and the guest).
    let o = run_rgrind(
        &["--tool=none"],
        &Cmd::new("/bin/sh").args(["-c", "echo $$"]),
    );
    let pid: u32 = o
        .stdout_str()
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("pid: {e}\n{}", o.describe()));
    let lines = o.tool_lines();
    assert!(!lines.is_empty(), "{}", o.describe());
    assert!(
        lines
            .iter()
            .all(|l| rgrind_tests::tool_line_pid(l.as_bytes()) == Some(pid)),
        "every ==PID== line should name pid {pid}\n{}",
        o.describe()
    );
}

/// `rgrind annotate FILE` reads a profile rgrind wrote and prints its totals; a missing file is
/// one error line and a non-zero exit.
#[test]
fn annotate_subcommand_reads_a_cachegrind_file() {
    let dir = rgrind_tests::scratch_dir();
    let out = dir.join("annotate-me.out");
    let file_opt = format!("--cachegrind-out-file={}", out.display());
    let run = rgrind_tests::run_rgrind(
        &["--tool=cachegrind", "-q", &file_opt],
        &rgrind_tests::guest_case("hello").cmd(),
    );
    assert!(run.stdout_str().contains("hello"), "{}", run.stderr_str());
    let text =
        std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("read {}: {e}", out.display()));
    let summary: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("summary: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no summary in {text}"));
    let ann = rgrind_tests::run(
        &rgrind_tests::Cmd::new(rgrind_tests::rgrind())
            .args(["annotate", &out.display().to_string()]),
    );
    let totals = ann
        .stdout_str()
        .lines()
        .find(|l| l.contains("PROGRAM TOTALS"))
        .map(|l| l.split_whitespace().next().unwrap_or("").replace(',', ""))
        .unwrap_or_default();
    assert_eq!(totals, summary.to_string(), "{}", ann.stdout_str());
    let missing = rgrind_tests::run(
        &rgrind_tests::Cmd::new(rgrind_tests::rgrind()).args(["annotate", "/nonexistent/file"]),
    );
    assert!(
        missing.stderr_str().starts_with("rgrind: "),
        "{}",
        missing.stderr_str()
    );
    assert_eq!(missing.status.code(), Some(1), "{}", missing.stderr_str());
}

/// Options Valgrind reads before the command line: `$HOME/.valgrindrc`, `$VALGRIND_OPTS`,
/// `./.valgrindrc`, in that order (a later one wins, the command line last); `--<tool>:opt`
/// applies to that tool only; an rc file anyone may write is not read.
#[test]
fn valgrindrc_files_and_valgrind_opts_come_before_the_command_line() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch_dir().join("valgrindrc");
    let (home, work) = (dir.join("home"), dir.join("work"));
    let _ = std::fs::remove_dir_all(&dir);
    for d in [&home, &work] {
        std::fs::create_dir_all(d).expect("scratch folder");
    }
    let out = |n: &str| dir.join(n).display().to_string();
    std::fs::write(
        home.join(".valgrindrc"),
        format!(
            "--callgrind:callgrind-out-file={}\n--callgrind:dump-instr=no\n",
            out("home.out")
        ),
    )
    .expect("rc");
    let local = work.join(".valgrindrc");
    std::fs::write(
        &local,
        "--callgrind:dump-instr=yes --cachegrind:cache-sim=yes\n",
    )
    .expect("rc");
    let exe = guest_case("hello").cmd().program;
    let path = std::env::var("PATH").unwrap_or_default();
    let home_s = home.display().to_string();
    let run_with = |env_opts: &str, opts: &[&str]| {
        let cmd = Cmd::new(&exe).cwd(&work).env_exact(&[
            ("HOME", home_s.as_str()),
            ("PATH", path.as_str()),
            ("VALGRIND_OPTS", env_opts),
        ]);
        run_rgrind(opts, &cmd)
    };
    let positions = |n: &str| {
        std::fs::read_to_string(dir.join(n))
            .unwrap_or_default()
            .lines()
            .find(|l| l.starts_with("positions:"))
            .map(str::to_string)
    };

    // $HOME's file names the output, ./.valgrindrc's dump-instr wins over $HOME's.
    let o = run_with("", &["--tool=callgrind"]);
    assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
    assert_eq!(
        positions("home.out").as_deref(),
        Some("positions: instr line")
    );
    // $VALGRIND_OPTS comes after $HOME's file, quotes keep blanks.
    let env_opts = format!("'--callgrind:callgrind-out-file={}'", out("env 1.out"));
    let o = run_with(&env_opts, &["--tool=callgrind"]);
    assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
    assert!(positions("env 1.out").is_some(), "{}", o.describe());
    // The command line comes last.
    let cmd_out = format!("--callgrind-out-file={}", out("cmd.out"));
    let o = run_with(
        &env_opts,
        &["--tool=callgrind", &cmd_out, "--dump-instr=no"],
    );
    assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
    assert_eq!(positions("cmd.out").as_deref(), Some("positions: line"));
    // An option for no tool prefix is an error wherever it comes from.
    let o = run_with("--bogus=1", &["--tool=none"]);
    assert_eq!(o.end(), End::Exit(1), "{}", o.describe());
    assert!(
        o.stderr_str().contains("Unknown option: --bogus=1"),
        "{}",
        o.describe()
    );
    // A world-writable ./.valgrindrc is left out, with a warning.
    std::fs::set_permissions(&local, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let _ = std::fs::remove_file(dir.join("home.out"));
    let o = run_with("", &["--tool=callgrind"]);
    assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
    assert!(o.stderr_str().contains("was not read"), "{}", o.describe());
    assert_eq!(positions("home.out").as_deref(), Some("positions: line"));
}
