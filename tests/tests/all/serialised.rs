//! `--fair-sched=yes`: guest threads run one at a time under the run lock (as they always do
//! with cachegrind and callgrind), with time slicing. Thread, signal, busy-wait and JIT guests
//! must behave as natively.

use rgrind_tests::{check_all, compare, guest_case, run, run_rgrind};

#[test]
fn thread_and_signal_guests_run_the_same_one_thread_at_a_time() {
    let labels = [
        "threads",
        "threads-static",
        "spin",
        "sigs",
        "sigs-abort",
        "sigs-kill",
        "jit",
        "fork",
        "forkthreads",
    ];
    check_all(
        &labels,
        |l| (*l).to_owned(),
        |l| {
            let cmd = guest_case(l).cmd();
            let native = run(&cmd);
            let serial = run_rgrind(&["--tool=none", "-q", "--fair-sched=yes"], &cmd);
            compare(&native, &serial)
        },
    );
}
