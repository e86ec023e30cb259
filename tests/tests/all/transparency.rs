//! Transparency: every guest behaves the same natively and under `rgrind --tool=none -q`
//! (stdout, stderr and how it ends), plus programs found through `$PATH` and `#!` scripts.
//!
//! This module checks equality only; the other modules check that the shared behaviour is also
//! the right one.

use rgrind_tests::{check_all, check_transparent, guest, run, scratch_dir, Cmd, End, GUEST_CASES};
use std::os::unix::fs::PermissionsExt;

#[test]
fn every_guest_runs_the_same_under_rgrind() {
    check_all(
        GUEST_CASES,
        |c| c.label.to_owned(),
        |c| check_transparent(&c.cmd()).map(drop),
    );
}

#[test]
fn program_is_found_through_path() {
    let path = format!("{}:/usr/bin:/bin", rgrind_tests::GUESTS_DIR);
    let cmd = Cmd::new("auxv")
        .args(["via-path"])
        .env_exact(&[("PATH", &path)]);
    let native = check_transparent(&cmd).unwrap_or_else(|e| panic!("{e}"));
    let out = native.stdout_str();
    assert!(out.starts_with("argv[0]=auxv\nargv[1]=via-path\n"), "{out}");
    let exe = guest("auxv")
        .canonicalize()
        .unwrap_or_else(|e| panic!("canonicalize: {e}"));
    assert!(out.contains(&format!("\nexe={}\n", exe.display())), "{out}");
}

fn write_script(name: &str, text: &str) -> std::path::PathBuf {
    let p = scratch_dir().join(name);
    std::fs::write(&p, text).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("chmod: {e}"));
    p
}

#[test]
fn shebang_script_runs_its_interpreter() {
    let sh = write_script(
        "script.sh",
        "#!/bin/sh\necho \"script: $# args: $*\"\necho to-stderr >&2\nexit 4\n",
    );
    let native =
        check_transparent(&Cmd::new(&sh).args(["a b", "c"])).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (native.stdout_str().as_str(), native.end()),
        ("script: 2 args: a b c\n", End::Exit(4))
    );

    // An interpreter argument on the #! line, and a guest binary as the interpreter's target.
    let hello = guest("hello");
    let env_script = write_script(
        "env-script",
        &format!("#!/usr/bin/env {}\n", hello.display()),
    );
    let native =
        check_transparent(&Cmd::new(&env_script).args(["x"])).unwrap_or_else(|e| panic!("{e}"));
    // env runs hello with the script path and x: argc = 3.
    assert_eq!(native.stdout_str(), "hello, world (argc=3)\n");
}

#[test]
fn stdin_is_passed_through() {
    // The harness gives every process /dev/null as stdin; a program reading it must see EOF.
    let cmd = Cmd::new("/bin/sh").args(["-c", "wc -c; echo done"]);
    let native = check_transparent(&cmd).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(native.stdout_str(), "0\ndone\n");
    assert_eq!(run(&cmd).end(), End::Exit(0));
}

#[test]
fn exec_child_inherits_the_native_signal_state() {
    // Ignored signals and the blocked mask survive execve, so a program that rgrind's shell guest
    // execs natively must see the same ones as it would without rgrind. (Rust's runtime ignores
    // SIGPIPE; a launcher that does not undo that makes `seq | sort | head` print "Broken pipe".)
    let cmd = Cmd::new("/bin/sh").args(["-c", "grep -E '^Sig(Ign|Blk)' /proc/self/status"]);
    let native = check_transparent(&cmd).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        native.stdout_str().contains("SigIgn:"),
        "{}",
        native.describe()
    );
}
