//! Bad input to the launcher: a missing program, one not on `$PATH`, a directory, a file that is
//! not ELF, a truncated ELF, a 32-bit ELF, a file without execute permission, no program at all.
//! Each must give exactly one stderr line starting `rgrind:` that names the program, and exit
//! status 1, never a panic.

use rgrind_tests::{check_all, guest, run_rgrind, scratch_dir, Cmd, End};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

fn file(name: &str, bytes: &[u8], mode: u32) -> PathBuf {
    let p = scratch_dir().join(name);
    std::fs::write(&p, bytes).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod: {e}"));
    p
}

/// A minimal, valid i386 ELF executable (exit(0) via int 0x80).
fn elf32() -> Vec<u8> {
    let code: &[u8] = &[0xb8, 1, 0, 0, 0, 0xbb, 0, 0, 0, 0, 0xcd, 0x80];
    let size = u32::try_from(52 + 32 + code.len()).unwrap_or(0);
    let mut v = vec![0x7f, b'E', b'L', b'F', 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    let u16s = |v: &mut Vec<u8>, xs: &[u16]| xs.iter().for_each(|x| v.extend(x.to_le_bytes()));
    let u32s = |v: &mut Vec<u8>, xs: &[u32]| xs.iter().for_each(|x| v.extend(x.to_le_bytes()));
    u16s(&mut v, &[2, 3]); // ET_EXEC, EM_386
    u32s(&mut v, &[1, 0x0804_8054, 52, 0, 0]); // version, entry, phoff, shoff, flags
    u16s(&mut v, &[52, 32, 1, 40, 0, 0]); // ehsize, phentsize, phnum, shentsize, shnum, shstrndx
    u32s(
        &mut v,
        &[1, 0, 0x0804_8000, 0x0804_8000, size, size, 5, 0x1000],
    ); // PT_LOAD r-x
    v.extend_from_slice(code);
    v
}

#[test]
fn bad_programs_give_one_error_line_and_exit_1() {
    let hello = std::fs::read(guest("hello")).unwrap_or_else(|e| panic!("read hello: {e}"));
    let cases: Vec<(&str, Vec<String>)> = vec![
        ("missing", vec!["/nonexistent/rgrind-test-program".into()]),
        ("not on PATH", vec!["rgrind-test-no-such-program".into()]),
        ("directory", vec![scratch_dir().display().to_string()]),
        (
            "not ELF",
            vec![file(
                "garbage",
                b"\x01\x02\x03 this is not a program\n\0\0\0",
                0o755,
            )
            .display()
            .to_string()],
        ),
        (
            "truncated ELF",
            vec![file("truncated", &hello[..100], 0o755)
                .display()
                .to_string()],
        ),
        (
            "32-bit ELF",
            vec![file("elf32", &elf32(), 0o755).display().to_string()],
        ),
        (
            "not executable",
            vec![file("no-exec-bit", &hello, 0o644).display().to_string()],
        ),
        ("no program", vec![]),
    ];
    check_all(
        &cases,
        |c| c.0.to_owned(),
        |(_, args)| {
            let mut opts = vec!["--tool=none"];
            opts.extend(args.iter().map(String::as_str));
            let o = rgrind_tests::run(&Cmd::new(rgrind_tests::rgrind()).args(&opts));
            let err = o.stderr_str();
            let lines: Vec<&str> = err.lines().collect();
            // "No program" is a usage error, which may add a hint line (Valgrind adds "Use --help").
            // The line names the program as given, so the user knows which input was wrong.
            let named = args
                .first()
                .is_none_or(|p| lines.first().is_some_and(|l| l.contains(p.as_str())));
            let one_line = lines.len() == 1
                || (args.is_empty() && lines.iter().all(|l| l.starts_with("rgrind:")));
            if o.end() == End::Exit(1)
                && one_line
                && lines.first().is_some_and(|l| l.starts_with("rgrind:"))
                && named
                && !err.contains("panicked")
            {
                Ok(())
            } else {
                Err(format!(
                    "want exit 1 and exactly one stderr line starting `rgrind:` and naming \
                     the program\n{}",
                    o.describe()
                ))
            }
        },
    );
}

#[test]
fn error_lines_name_the_program() {
    let o = run_rgrind(
        &["--tool=none"],
        &Cmd::new("/nonexistent/rgrind-test-program"),
    );
    assert!(
        o.stderr_str().contains("/nonexistent/rgrind-test-program"),
        "{}",
        o.describe()
    );
}
