//! `--guest-env`: under the profiling tools the program is shown what Valgrind shows it (its
//! canned CPUID and XCR0, an auxv without vDSO, its core preload object), so ld.so and glibc do
//! the same start-up work and whole-program totals agree with Valgrind's; `--tool=none` shows
//! the host as it is.

use rgrind_tests::{guest_case, run, run_rgrind, run_valgrind, valgrind, Cmd};

const VALGRIND_VIEW: &[&str] = &[
    "cpuid 0.0: 0000000d 756e6547 6c65746e 49656e69",
    "cpuid d.0: 00000007 00000340 00000340 00000000",
    "cpuid d.1: 00000000 00000000 00000000 00000000",
    "brand: Intel(R) Core(TM) i7-4910MQ CPU @ 2.90GHz",
    "xcr0: 7",
    "xsave stays in its 832 bytes: 1",
    "vdso offered: 0",
    "preload: vgpreload_core-amd64-linux.so",
];

fn cpuview(opts: &[&str]) -> String {
    let out = run_rgrind(opts, &guest_case("cpuview").cmd());
    assert!(out.status.success(), "{}", out.describe());
    out.stdout_str()
}

#[test]
fn profiling_tools_show_valgrinds_machine() {
    for tool in [
        &["-q", "--tool=cachegrind", "--cachegrind-out-file=/dev/null"][..],
        &["-q", "--tool=callgrind", "--callgrind-out-file=/dev/null"][..],
        &["-q", "--guest-env=valgrind"][..],
    ] {
        let seen = cpuview(tool);
        for want in VALGRIND_VIEW {
            assert!(
                seen.lines().any(|l| l == *want),
                "{tool:?}: no `{want}` in\n{seen}"
            );
        }
        assert!(seen.contains("cpuid 1.0: 000306c3 00100800 "), "{seen}");
    }
    if let Some(vg) = valgrind() {
        let cmd = guest_case("cpuview").cmd();
        let reference = run_valgrind(&vg, &["-q", "--tool=none"], &cmd);
        assert_eq!(
            cpuview(&["-q", "--tool=cachegrind", "--cachegrind-out-file=/dev/null"]),
            reference.stdout_str(),
            "the same view as under Valgrind"
        );
    } else {
        println!("valgrind is not installed: compared with the known view only");
    }
}

#[test]
fn native_guest_env_shows_the_host() {
    let native = run(&guest_case("cpuview").cmd());
    assert!(native.stdout_str().contains("preload: none"));
    for opts in [
        &["-q"][..],
        &[
            "-q",
            "--tool=cachegrind",
            "--guest-env=native",
            "--cachegrind-out-file=/dev/null",
        ][..],
    ] {
        assert_eq!(cpuview(opts), native.stdout_str(), "{opts:?}");
    }
}

/// The total of a whole small program (mostly ld.so and libc start-up) agrees with
/// Valgrind's within 0.5% (measured: 0.1%; what is left is the preload object's longer path,
/// ~10 Ir a byte, and a shorter auxv). Without dash's `PWD` and order `hello-static` was 2.6%
/// below (`the_environment_is_the_one_valgrinds_wrapper_passes_on`).
#[test]
fn startup_totals_agree_with_valgrind() {
    let Some(vg) = valgrind() else {
        println!("valgrind is not installed: skipped");
        return;
    };
    let dir = rgrind_tests::scratch_dir();
    for (label, tool, vg_extra) in [
        (
            "hello",
            "cachegrind",
            &["--cache-sim=no", "--vex-guest-chase=no"][..],
        ),
        (
            "hello-static",
            "cachegrind",
            &["--cache-sim=no", "--vex-guest-chase=no"][..],
        ),
        ("hello", "callgrind", &[][..]),
    ] {
        let cmd = guest_case(label).cmd();
        let rg_file = dir.join(format!("envtotal.{label}.{tool}.rg"));
        let vg_file = dir.join(format!("envtotal.{label}.{tool}.vg"));
        let out_opt = |f: &std::path::Path| format!("--{tool}-out-file={}", f.display());
        let tool_opt = format!("--tool={tool}");
        let rg = run_rgrind(&["-q", &tool_opt, &out_opt(&rg_file)], &cmd);
        let mut vg_opts = vec!["-q", tool_opt.as_str()];
        vg_opts.extend_from_slice(vg_extra);
        let vg_out = out_opt(&vg_file);
        vg_opts.push(&vg_out);
        let reference = run_valgrind(&vg, &vg_opts, &cmd);
        assert!(rg.status.success() && reference.status.success());
        let (r, v) = (total_ir(&rg_file), total_ir(&vg_file));
        let diff = (r as f64 - v as f64).abs() / v as f64;
        assert!(
            diff < 0.005,
            "{label} under {tool}: rgrind {r} Ir, Valgrind {v} Ir ({:.2}%)",
            diff * 100.0
        );
    }
}

/// The first number of the `summary:` (Cachegrind) or `totals:` (Callgrind) line.
fn total_ir(file: &std::path::Path) -> u64 {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    text.lines()
        .find_map(|l| {
            l.strip_prefix("summary:")
                .or_else(|| l.strip_prefix("totals:"))
        })
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no total in {}", file.display()))
}

/// A program exec'd without `--trace-children` runs natively: it does not get rgrind's preload
/// object (Valgrind takes its own out too); one that is followed gets it once.
#[test]
fn exec_takes_the_preload_out_unless_followed() {
    let script = "exec /usr/bin/env";
    let sh = Cmd::new("/bin/sh").args(["-c", script]);
    let out = run_rgrind(
        &["-q", "--tool=cachegrind", "--cachegrind-out-file=/dev/null"],
        &sh,
    );
    assert!(out.status.success(), "{}", out.describe());
    let preload_line = |o: &rgrind_tests::Outcome| {
        o.stdout_str()
            .lines()
            .find(|l| l.starts_with("LD_PRELOAD="))
            .map(str::to_owned)
    };
    assert_eq!(preload_line(&out), None, "native child sees no preload");
    let dir = rgrind_tests::scratch_dir();
    let pattern = format!("--cachegrind-out-file={}/envexec.%p", dir.display());
    let out = run_rgrind(
        &["-q", "--tool=cachegrind", "--trace-children=yes", &pattern],
        &sh,
    );
    assert!(out.status.success(), "{}", out.describe());
    let line = preload_line(&out).expect("followed child sees the preload");
    assert_eq!(
        line.matches("vgpreload_core-amd64-linux.so").count(),
        1,
        "{line}"
    );
}

/// On Debian `valgrind` is a script run by dash, which passes on only variables with shell
/// names, sets `PWD` and lists them in its own table's order; the script adds its
/// variables, Valgrind its preload object. The program gets the same environment under
/// rgrind, variable for variable and in order (the preload object's path aside): the order
/// and the size of the environment are start-up work (glibc's tunables parse every
/// variable, `getenv` scans them in order).
#[test]
fn the_environment_is_the_one_valgrinds_wrapper_passes_on() {
    if !std::path::Path::new("/etc/debian_version").exists() {
        println!("not a Debian-family system: no valgrind wrapper script to compare with");
        return;
    }
    let Some(vg) = valgrind() else {
        println!("valgrind is not installed: comparison skipped");
        return;
    };
    let env = [
        ("A", "1"),
        ("PS1", "x"),
        ("x-y", "2"),
        ("TERM", "xterm"),
        ("LD_PRELOAD", ""),
        ("PWD", "/nonexistent"),
        ("OPTIND", "1"),
        ("B", "3"),
        ("A", "4"),
        ("LANG", "C"),
    ];
    let cmd = Cmd::new("/usr/bin/env")
        .args(["-0"])
        .env_exact(&env)
        .cwd("/");
    // The variables, with the preload object's path cut to its file name.
    let vars = |out: &str| -> Vec<String> {
        out.split('\0')
            .filter(|v| !v.is_empty())
            .map(|v| match v.strip_prefix("LD_PRELOAD=") {
                Some(list) => {
                    let (first, rest) = list.split_once(':').unwrap_or((list, ""));
                    let name = first.rsplit('/').next().unwrap_or(first);
                    format!("LD_PRELOAD={name}:{rest}")
                }
                None => v.to_string(),
            })
            .collect()
    };
    let theirs = run_valgrind(&vg, &["-q", "--tool=none"], &cmd);
    let mine = run_rgrind(&["-q", "--tool=none", "--guest-env=valgrind"], &cmd);
    assert!(mine.status.success(), "{}", mine.describe());
    let want = vars(&theirs.stdout_str());
    assert!(want.iter().any(|v| v == "PWD=/"), "{want:?}");
    assert_eq!(vars(&mine.stdout_str()), want);
}
