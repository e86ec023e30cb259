//! Valgrind's core client requests that answer the program (`tests/guests/core_requests.c`,
//! compiled here; skipped with a message without gcc or `valgrind/valgrind.h`): the program
//! sees what it sees under Valgrind, and `VALGRIND_PRINTF`'s text reaches the log with
//! Valgrind's `**PID**` prefix, `-q` or not, `VALGRIND_PRINTF_BACKTRACE`'s with the call stack;
//! `VALGRIND_MAP_IP_TO_SRCLOC` writes `file:line`.

use rgrind_tests::{run, run_rgrind, run_valgrind, scratch_dir, valgrind, which, Cmd, End};
use std::path::PathBuf;

fn build() -> Option<PathBuf> {
    if !std::path::Path::new("/usr/include/valgrind/valgrind.h").exists() {
        println!("valgrind/valgrind.h not installed: client-request test skipped");
        return None;
    }
    let gcc = which("gcc").or_else(|| {
        println!("gcc not installed: client-request test skipped");
        None
    })?;
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("guests/core_requests.c");
    let out = scratch_dir().join("core_requests");
    let o = run(&Cmd::new(gcc)
        .args(["-O1", "-g", "-o"])
        .args([out.as_os_str(), src.as_os_str()]));
    assert_eq!(o.end(), End::Exit(0), "gcc failed: {}", o.describe());
    Some(out)
}

/// The stack trace lines of a run's stderr (`==PID==    at 0x...: fn (file:line)`), without
/// the pid and the address (the program lies elsewhere under Valgrind).
fn trace_lines(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter_map(|l| l.split_once("==    "))
        .filter_map(|(_, l)| {
            let (word, rest) = l.split_once(" 0x")?;
            let (_, place) = rest.split_once(": ")?;
            Some(format!("{word} {place}"))
        })
        .collect()
}

/// The `**PID** ` lines of a run's stderr, without the pid.
fn client_lines(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("**"))
        .filter_map(|l| l.split_once("** "))
        .map(|(_, text)| text.to_string())
        .collect()
}

#[test]
fn core_requests_answer_as_under_valgrind() {
    let Some(exe) = build() else {
        return;
    };
    let o = run_rgrind(&["--tool=none", "-q"], &Cmd::new(&exe));
    assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
    assert_eq!(
        o.stdout_str(),
        "call0=42 call3=123 stacks=1,2 printf=20,18,8 running=1\nsrcloc=core_requests.c:10 none=0\n",
        "{}",
        o.describe()
    );
    let mine = client_lines(&o.stderr_str());
    assert_eq!(
        mine,
        ["printf from 42 2.50|  end", "second line", "trace 7"],
        "{}",
        o.describe()
    );
    // VALGRIND_PRINTF_BACKTRACE's call stack: the request's function, then its caller main.
    let trace = trace_lines(&o.stderr_str());
    assert_eq!(trace.len(), 2, "{}", o.describe());
    assert!(
        trace[0].starts_with("at VALGRIND_PRINTF_BACKTRACE (valgrind.h:"),
        "{}",
        o.describe()
    );
    assert!(
        trace[1].starts_with("by main (core_requests.c:"),
        "{}",
        o.describe()
    );
    let Some(vg) = valgrind() else {
        println!("valgrind not installed: comparison skipped");
        return;
    };
    let v = run_valgrind(&vg, &["--tool=none", "-q"], &Cmd::new(&exe));
    assert_eq!(v.stdout_str(), o.stdout_str(), "{}", v.describe());
    assert_eq!(client_lines(&v.stderr_str()), mine, "{}", v.describe());
    assert_eq!(trace_lines(&v.stderr_str()), trace, "{}", v.describe());

    // `--num-callers` bounds the trace; `--show-below-main=yes` goes on into the C library's
    // start-up, under its functions' own names.
    let one = run_rgrind(&["--tool=none", "-q", "--num-callers=1"], &Cmd::new(&exe));
    assert_eq!(
        trace_lines(&one.stderr_str()),
        trace[..1],
        "{}",
        one.describe()
    );
    let below = run_rgrind(
        &["--tool=none", "-q", "--show-below-main=yes"],
        &Cmd::new(&exe),
    );
    let below_trace = trace_lines(&below.stderr_str());
    assert_eq!(below_trace[..2], trace[..], "{}", below.describe());
    assert!(
        below_trace[2..]
            .iter()
            .any(|l| l.starts_with("by __libc_start"))
            && !below_trace.iter().any(|l| l.contains("(below main)")),
        "{}",
        below.describe()
    );
}
