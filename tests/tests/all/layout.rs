//! Under the profiling tools the guest runs in a fixed address-space layout, as under
//! Valgrind, so costs that depend on addresses repeat from run to run; the guest sees
//! nothing of the persona rgrind sets for it (`dbt_core::layout`).

use rgrind_tests::{run, run_rgrind, scratch_dir, which, Cmd, End};

/// Whether address-space randomisation is on for programs this test starts and may be
/// turned off (`setarch -R`, as rgrind does it, is allowed here).
fn randomisation_can_be_turned_off() -> bool {
    let on = std::fs::read_to_string("/proc/sys/kernel/randomize_va_space")
        .is_ok_and(|v| v.trim() != "0");
    let ours = std::fs::read_to_string("/proc/self/personality").unwrap_or_default();
    let off_already = u32::from_str_radix(ours.trim(), 16).is_ok_and(|p| p & 0x0040000 != 0);
    let settable = which("setarch")
        .is_some_and(|s| run(&Cmd::new(s).args(["-R", "true"])).end() == End::Exit(0));
    on && !off_already && settable
}

#[test]
fn address_dependent_costs_repeat_from_run_to_run() {
    if !randomisation_can_be_turned_off() {
        println!("address-space randomisation is off or cannot be turned off: skipped");
        return;
    }
    let cmd = Cmd::guest("addrloop");
    for (tool, opt) in [
        ("cachegrind", "--cachegrind-out-file"),
        ("callgrind", "--callgrind-out-file"),
    ] {
        let totals: Vec<String> = (0..3)
            .map(|i| {
                let out = scratch_dir().join(format!("addrloop.{tool}.{i}"));
                let file = format!("{opt}={}", out.display());
                let o = run_rgrind(&[&format!("--tool={tool}"), &file], &cmd);
                assert_eq!(o.end(), End::Exit(0), "{}", o.describe());
                let text = std::fs::read_to_string(&out).unwrap();
                text.lines()
                    .find(|l| l.starts_with("summary:"))
                    .unwrap_or_else(|| panic!("no summary in {}", out.display()))
                    .to_string()
            })
            .collect();
        assert!(
            totals.iter().all(|t| *t == totals[0]),
            "{tool}: totals differ between runs: {totals:?}"
        );
    }
}

#[test]
fn the_guest_sees_no_persona_of_rgrinds() {
    let cmd = Cmd::guest("persona");
    let native = run(&cmd);
    assert_eq!(native.end(), End::Exit(0), "{}", native.describe());
    let cg = format!(
        "--cachegrind-out-file={}",
        scratch_dir().join("persona.cg").display()
    );
    let clg = format!(
        "--callgrind-out-file={}",
        scratch_dir().join("persona.clg").display()
    );
    for opts in [
        vec!["--tool=cachegrind", cg.as_str()],
        vec!["--tool=callgrind", clg.as_str()],
        vec!["--tool=cachegrind", "--trace-children=yes", cg.as_str()],
    ] {
        let o = run_rgrind(&opts, &cmd);
        assert_eq!(o.end(), End::Exit(0), "{opts:?}: {}", o.describe());
        assert_eq!(o.stdout_str(), native.stdout_str(), "{opts:?}");
    }
}

/// The guest's program, heap, mappings, libraries and stack lie in the order they lie
/// natively (`tests/guests/addrorder.c` compares their addresses). Until the twenty-fourth
/// session a position-independent program and its heap were mapped from the top down like
/// a library, above the stack.
#[test]
fn program_heap_libraries_and_stack_lie_in_native_order() {
    let cmd = Cmd::guest("addrorder");
    let native = run(&cmd);
    assert_eq!(native.end(), End::Exit(0), "{}", native.describe());
    assert_eq!(
        native.stdout_str(),
        "stack>big=1 big>heap=1 heap>constant=1 stack>printf=1 printf>heap=1\n"
    );
    let clg = format!(
        "--callgrind-out-file={}",
        scratch_dir().join("addrorder.clg").display()
    );
    for opts in [vec!["--tool=none"], vec!["--tool=callgrind", clg.as_str()]] {
        let o = run_rgrind(&opts, &cmd);
        assert_eq!(o.end(), End::Exit(0), "{opts:?}: {}", o.describe());
        assert_eq!(o.stdout_str(), native.stdout_str(), "{opts:?}");
    }
}
