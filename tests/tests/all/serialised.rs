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

/// Four threads each make 20000 `getpid` calls. A call that cannot block keeps the run lock
/// (as Valgrind keeps its lock for such calls): the lock passes between threads at time
/// slices and thread starts and ends, not at every call (`--stats=yes` counts the passes).
#[test]
fn system_calls_that_cannot_block_keep_the_run_lock() {
    const GETPID_THREADS_C: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
#include <sys/syscall.h>
static void *w(void *x) { long s = 0; for (int i = 0; i < 20000; i++) { s += syscall(SYS_getpid) > 0; for (int j = 0; j < 100; j++) s += j; } return (void *)s; }
int main(void) {
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], 0, w, 0);
    long s = 0;
    for (int i = 0; i < 4; i++) { void *r; pthread_join(t[i], &r); s += (long)r; }
    printf("%ld\n", s);
    return 0;
}
"#;
    let Some(exe) =
        crate::callgrind_opts::build("getpid_threads", GETPID_THREADS_C, &["-O1", "-pthread"])
    else {
        return;
    };
    let o = run_rgrind(
        &[
            "--tool=callgrind",
            "--stats=yes",
            "--callgrind-out-file=/dev/null",
        ],
        &rgrind_tests::Cmd::new(&exe),
    );
    assert_eq!(o.end(), rgrind_tests::End::Exit(0), "{}", o.describe());
    assert_eq!(o.stdout_str(), format!("{}\n", 4 * 20000 * (1 + 4950)));
    let stat = |name: &str| -> u64 {
        o.stderr_str()
            .lines()
            .find_map(|l| l.strip_prefix(&format!("--rgrind-- {name}: ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in\n{}", o.describe()))
    };
    assert!(stat("syscalls") >= 80000, "{}", o.describe());
    assert!(stat("thread switches") < 2000, "{}", o.describe());
}
