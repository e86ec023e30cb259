//! Process start-up state: argv, the environment (exactly, in order), the auxiliary vector,
//! /proc/self/exe and /proc/self/cmdline, for each link variant. The guest prints 0/1 checks so
//! the expected text is the same on every machine; the page size is asked of the OS.

use rgrind_tests::{check_all, check_expected, guest, Cmd, End};

/// Sorted by name: `std::process::Command` passes the environment in that order.
const ENV: &[(&str, &str)] = &[
    ("PATH", "/usr/bin:/bin"),
    ("RGT_EMPTY", ""),
    ("RGT_FIRST", "1"),
    ("RGT_SPACES", "two words"),
];
const ARGS: &[&str] = &["one", "two words", "", "-q", "--tool=none"];

fn expected(guest_name: &str, dynamic: bool) -> String {
    let path = guest(guest_name);
    let real = path
        .canonicalize()
        .unwrap_or_else(|e| panic!("canonicalize {}: {e}", path.display()));
    // SAFETY: sysconf only reads a system constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let mut s = format!("argv[0]={}\n", path.display());
    for (i, a) in ARGS.iter().enumerate() {
        s += &format!("argv[{}]={a}\n", i + 1);
    }
    for (k, v) in ENV {
        s += &format!("env: {k}={v}\n");
    }
    let d = u8::from(dynamic);
    s += &format!(
        "n_env={}\nAT_PAGESZ={page}\nAT_ENTRY is _start: 1\nAT_PHDR matches dl_iterate_phdr: 1\n\
         AT_PHNUM matches dl_iterate_phdr: 1\nAT_PHENT is sizeof(Phdr): 1\ndynamic={d} AT_BASE nonzero={d}\n\
         AT_EXECFN={}\nAT_RANDOM readable: 1\nAT_HWCAP has fpu,sse,sse2: 1\n\
         AT_UID/AT_EUID/AT_GID/AT_EGID match: 1\nAT_SECURE=0\nexe={}\ncmdline={}|{}|\n",
        ENV.len(),
        path.display(),
        real.display(),
        path.display(),
        ARGS.join("|")
    );
    s
}

#[test]
fn argv_env_auxv_and_proc_self() {
    let cases: &[(&str, bool)] = &[
        ("auxv", true),
        ("auxv-nopie", true),
        ("auxv-static", false),
        ("auxv-static-pie", false),
    ];
    check_all(
        cases,
        |c| c.0.to_owned(),
        |&(name, dynamic)| {
            let cmd = Cmd::guest(name).args(ARGS).env_exact(ENV);
            check_expected(&cmd, &expected(name, dynamic), End::Exit(0))
        },
    );
}

#[test]
fn empty_environment_and_long_arguments() {
    let long = "x".repeat(100_000);
    let many: Vec<String> = (0..2000).map(|i| format!("arg{i}")).collect();
    let cmd = Cmd::guest("auxv")
        .args([long.as_str()])
        .args(&many)
        .env_exact(&[]);
    let native = rgrind_tests::check_transparent(&cmd).unwrap_or_else(|e| panic!("{e}"));
    let out = native.stdout_str();
    assert!(
        out.contains(&format!("argv[1]={long}\n")) && out.contains("argv[2001]=arg1999\nn_env=0\n"),
        "{}",
        native.describe()
    );
}
