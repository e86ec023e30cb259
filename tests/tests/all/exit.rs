//! Exit statuses: exit(), return from main, _exit() (unflushed stdio lost), abort() (killed by
//! SIGABRT, not an exit code), in dynamic and static programs, and stderr passing through.

use rgrind_tests::{check_all, check_expected, guest_case, run_rgrind, End};

#[test]
fn exit_statuses_match() {
    let cases: &[(&str, &str, End)] = &[
        ("exit42", "before exit(42)\n", End::Exit(42)),
        ("return7", "returning 7\n", End::Exit(7)),
        ("_exit3", "", End::Exit(3)),
        ("abort", "about to abort\n", End::Signal(libc::SIGABRT)),
        ("exit42-static", "before exit(42)\n", End::Exit(42)),
        (
            "abort-static",
            "about to abort\n",
            End::Signal(libc::SIGABRT),
        ),
    ];
    check_all(
        cases,
        |c| c.0.to_owned(),
        |&(label, out, end)| check_expected(&guest_case(label).cmd(), out, end),
    );
}

#[test]
fn guest_stderr_passes_through() {
    let cmd = guest_case("stderr").cmd();
    check_expected(&cmd, "out 0\nout 1\nout 2\n", End::Exit(0)).unwrap_or_else(|e| panic!("{e}"));
    // With -q rgrind writes nothing of its own, so stderr is exactly the guest's.
    let o = run_rgrind(&["--tool=none", "-q"], &cmd);
    assert_eq!(o.stderr_str(), "err 0\nerr 1\nerr 2\n", "{}", o.describe());
}
