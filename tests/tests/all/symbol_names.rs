//! Function names in the profiles are Valgrind's: Rust names (legacy symbols, whose paths hold
//! `..` and `$LT$` escapes, and v0 ones) without hash or compiler suffix, and C++ names as
//! GNU's demangler prints them. Each expected name is also checked against Valgrind's own
//! file when Valgrind is installed.

use rgrind_tests::{run_rgrind, run_valgrind, scratch_dir, valgrind, Cmd, End};
use std::collections::BTreeSet;

/// The function names (`fn=` and `cfn=`) of a callgrind file written with
/// `--compress-strings=no`.
fn names(path: &std::path::Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter_map(|l| l.strip_prefix("fn=").or_else(|| l.strip_prefix("cfn=")))
        .map(str::to_string)
        .collect()
}

fn check(guest: &str, expected: &[&str]) {
    let cmd = Cmd::guest(guest);
    let out = scratch_dir().join(format!("{guest}.names.rg"));
    let file = format!("--callgrind-out-file={}", out.display());
    let o = run_rgrind(&["--tool=callgrind", "--compress-strings=no", &file], &cmd);
    assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
    let mine = names(&out);
    for n in expected {
        assert!(mine.contains(*n), "{guest}: no function {n:?} in {mine:#?}");
    }
    let hashed = |n: &str| {
        n.match_indices("::h")
            .any(|(i, _)| n[i + 3..].bytes().take_while(u8::is_ascii_hexdigit).count() == 16)
    };
    for n in &mine {
        assert!(
            !n.contains("$LT$") && !n.contains("$u20$") && !hashed(n),
            "{guest}: a Rust name left mangled: {n}"
        );
    }
    if let Some(vg) = valgrind() {
        let out = scratch_dir().join(format!("{guest}.names.vg"));
        let file = format!("--callgrind-out-file={}", out.display());
        let v = run_valgrind(
            &vg,
            &["--tool=callgrind", "--compress-strings=no", &file],
            &cmd,
        );
        assert_eq!(v.end(), End::Exit(0), "{}", v.describe());
        let theirs = names(&out);
        for n in expected {
            assert!(theirs.contains(*n), "{guest}: Valgrind has no {n:?}");
        }
    }
}

#[test]
fn rust_names_are_valgrinds() {
    let common = [
        "<names::Thing as core::fmt::Display>::fmt",
        "<names::Thing as core::ops::drop::Drop>::drop",
    ];
    let mut legacy = common.to_vec();
    legacy.push("<T as names::Work>::work");
    check("names-legacy", &legacy);
    let mut v0 = common.to_vec();
    v0.push("<alloc::vec::Vec<u64> as names::Work>::work");
    check("names-v0", &v0);
}

#[test]
fn cxx_names_are_gnus() {
    check(
        "cxxnames",
        &[
            "int scale<3u>(int)",
            "int count<>()",
            "call(std::function<int (int)> const&, int)",
        ],
    );
}
