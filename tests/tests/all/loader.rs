//! Loader variants: the same program as dynamic PIE, -no-pie, -static, -static-pie and -O0, and a
//! libc-free static executable, each printing exactly what it should under rgrind.

use rgrind_tests::{check_all, check_expected, guest_case, End};

#[test]
fn every_link_variant_loads_and_runs() {
    let cases: &[(&str, &str, End)] = &[
        ("hello", "hello, world (argc=3)\n", End::Exit(0)),
        ("hello-nopie", "hello, world (argc=2)\n", End::Exit(0)),
        ("hello-static", "hello, world (argc=1)\n", End::Exit(0)),
        ("hello-static-pie", "hello, world (argc=4)\n", End::Exit(0)),
        ("hello-O0", "hello, world (argc=1)\n", End::Exit(0)),
        ("tiny", "tiny argc=3\n", End::Exit(5)),
    ];
    check_all(
        cases,
        |c| c.0.to_owned(),
        |&(label, out, end)| check_expected(&guest_case(label).cmd(), out, end),
    );
}
