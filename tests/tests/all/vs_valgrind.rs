//! Comparison with Valgrind itself (the reference): for a few guests, `valgrind --tool=none -q`
//! and `rgrind --tool=none -q --guest-env=valgrind` print the same and end the same. Skipped, with a message, when
//! Valgrind is not installed.

use rgrind_tests::{check_all, compare, guest_case, run_rgrind, run_valgrind, valgrind};

/// Not `brk`: Valgrind caps the brk segment at a few MiB, so its sbrk(64 MiB) fails by design;
/// rgrind is meant to behave like the kernel there (see `memory.rs`).
const LABELS: &[&str] = &[
    "hello",
    "hello-static",
    "tiny",
    "exit42",
    "return7",
    "stderr",
    "stack",
    "fork",
    "forkexec",
    "insns",
    "cxx",
];

#[test]
fn same_as_valgrind() {
    let Some(vg) = valgrind() else {
        println!("skipping the Valgrind comparison: valgrind is not installed");
        return;
    };
    check_all(
        LABELS,
        |l| (*l).to_owned(),
        |label| {
            let cmd = guest_case(label).cmd();
            let reference = run_valgrind(&vg, &["--tool=none", "-q"], &cmd);
            // Valgrind shows its canned Intel CPU, `--tool=none` the host's by default: the
            // `insns` guest prints the vendor (an AMD host would differ).
            let opts = ["--tool=none", "-q", "--guest-env=valgrind"];
            compare(&reference, &run_rgrind(&opts, &cmd))
        },
    );
}
