//! Memory growth: the brk heap grown by 64 MiB and shrunk back, a 200 MiB malloc, and ~6 MiB of
//! main-thread stack reached by deep recursion (the stack must grow on demand).

use rgrind_tests::{check_all, check_expected, End};

/// The guest's checksums assume 4 KiB pages, which is what x86-64 Linux uses.
const BRK_OUT: &str = "sbrk: same_start=1 grew=1 shrank=1 sum=2088960\nmalloc(200 MiB): sum=6528000\nsmall mallocs: sum=2546416\n";

#[test]
fn brk_and_big_malloc() {
    check_all(
        &["brk", "brk-static"],
        |c| (*c).to_owned(),
        |name| check_expected(&rgrind_tests::Cmd::guest(name), BRK_OUT, End::Exit(0)),
    );
}

#[test]
fn deep_stack() {
    check_all(
        &["stack", "stack-O0"],
        |c| (*c).to_owned(),
        |name| {
            check_expected(
                &rgrind_tests::Cmd::guest(name),
                "deep(1500)=375020\n",
                End::Exit(0),
            )
        },
    );
}
