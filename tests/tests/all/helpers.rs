//! Out-of-line routines that translated code calls through the lean trampoline
//! (`Helper::integer_only`) must not touch vector or x87 registers and must not use string
//! instructions: that trampoline saves neither vector registers nor the direction flag. This
//! test disassembles them, and every function they call, in the rgrind binary itself.

use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction, Register};
use object::{Object, ObjectSection, ObjectSymbol, ObjectSymbolTable};
use std::collections::{BTreeMap, HashSet};

/// Functions marked integer-only in the tools (demangled path suffixes).
const INTEGER_ONLY: &[&str] = &[
    // The I1 fetch checks' slow path and the lookup it calls through `SlotI1::touch`.
    "fetch_slots::fetch_slots_slow",
    "raw::slots_touch",
    "cachegrind::cg_data",
    "cachegrind::cg_ll",
    "cachegrind::cg_cond",
    "cachegrind::cg_ind",
    "cachegrind::ll_queue::segment_end",
    "callgrind::clg_setup_fast",
    // callgrind's simulator helpers (clgsim).
    "callgrind::clg_data",
    "callgrind::clg_ll",
    "callgrind::clg_cond",
    "callgrind::clg_ind",
];

/// Roots whose indirect calls go to functions through a pointer the tool gave, each of
/// which is a root itself (the fetch checks' slow path calls `SlotI1::touch`, which
/// cachegrind and callgrind set to `raw::slots_touch`).
const CALLS_THROUGH_POINTER: &[&str] = &["fetch_slots::fetch_slots_slow"];

fn bad_register(r: Register) -> bool {
    r.is_xmm() || r.is_ymm() || r.is_zmm() || r.is_k() || r.is_st() || r.is_mm()
}

fn offending(insn: &Instruction) -> Option<String> {
    if insn.is_string_instruction() {
        return Some("string instruction".into());
    }
    for i in 0..insn.op_count() {
        if insn.op_kind(i) == iced_x86::OpKind::Register && bad_register(insn.op_register(i)) {
            return Some(format!("uses {:?}", insn.op_register(i)));
        }
    }
    None
}

#[test]
fn integer_only_helpers_use_no_vector_registers_or_string_instructions() {
    let exe = rgrind_tests::rgrind();
    let data = std::fs::read(exe).unwrap_or_else(|e| panic!("read {}: {e}", exe.display()));
    let file = object::File::parse(&*data).unwrap_or_else(|e| panic!("parse rgrind: {e}"));
    let text = file.section_by_name(".text").expect("rgrind has .text");
    let (text_addr, text_bytes) = (text.address(), text.data().expect(".text data"));
    // Calls to exported functions go through the GOT: slot address -> function address.
    let mut got: BTreeMap<u64, u64> = BTreeMap::new();
    for (slot, rel) in file.dynamic_relocations().into_iter().flatten() {
        let target = match rel.target() {
            object::RelocationTarget::Symbol(i) => file
                .dynamic_symbol_table()
                .and_then(|t| t.symbol_by_index(i).ok())
                .map(|s| s.address()),
            object::RelocationTarget::Absolute => Some(rel.addend() as u64),
            _ => None,
        };
        if let Some(t) = target
            .filter(|&t| t != 0)
            .or(Some(rel.addend() as u64).filter(|&a| a != 0))
        {
            got.insert(slot, t);
        }
    }
    let mut by_addr: BTreeMap<u64, (String, u64)> = BTreeMap::new();
    for s in file.symbols() {
        if s.kind() == object::SymbolKind::Text && s.size() > 0 {
            let name = format!("{:#}", rustc_demangle::demangle(s.name().unwrap_or("")));
            by_addr.insert(s.address(), (name, s.size()));
        }
    }
    for root in INTEGER_ONLY {
        let start = by_addr
            .iter()
            .find(|(_, (n, _))| n.ends_with(root))
            .map(|(&a, _)| a)
            .unwrap_or_else(|| panic!("{root} not found in {}", exe.display()));
        let mut todo = vec![start];
        let mut seen = HashSet::new();
        while let Some(addr) = todo.pop() {
            if !seen.insert(addr) {
                continue;
            }
            let (name, size) = by_addr
                .get(&addr)
                .cloned()
                .unwrap_or_else(|| panic!("{root}: call to {addr:#x}, not a known function"));
            let off = (addr - text_addr) as usize;
            let bytes = &text_bytes[off..off + size as usize];
            let mut dec = Decoder::with_ip(64, bytes, addr, DecoderOptions::NONE);
            for insn in &mut dec {
                if let Some(why) = offending(&insn) {
                    panic!("{root}: {name} at {:#x}: {why}", insn.ip());
                }
                // A system call is no call into code (the kernel keeps the vector state).
                if insn.mnemonic() == iced_x86::Mnemonic::Syscall {
                    continue;
                }
                match insn.flow_control() {
                    FlowControl::Call | FlowControl::UnconditionalBranch
                        if !by_addr.get(&addr).is_some_and(|_| {
                            (addr..addr + size).contains(&insn.near_branch_target())
                        }) =>
                    {
                        todo.push(insn.near_branch_target());
                    }
                    FlowControl::IndirectCall | FlowControl::IndirectBranch
                        if insn.is_ip_rel_memory_operand()
                            && got.contains_key(&insn.ip_rel_memory_address()) =>
                    {
                        todo.push(got[&insn.ip_rel_memory_address()]);
                    }
                    FlowControl::IndirectCall if !CALLS_THROUGH_POINTER.contains(root) => {
                        panic!("{root}: {name} makes an indirect call at {:#x}", insn.ip())
                    }
                    _ => {}
                }
            }
        }
    }
}

/// Instrumentation calls out-of-line routines in the middle of guest code: the guest's vector
/// registers (ymm upper halves, zmm16, mask registers) must survive them under every tool.
/// Shown the host CPU (`--guest-env=native`, the XSAVE trampolines) the guest uses AVX-512
/// where the host has it, compared with a native run; shown Valgrind's AVX2 CPU (the ymm
/// trampoline) it uses AVX2 only, compared with an uninstrumented run shown the same CPU.
#[test]
fn guest_vector_state_survives_instrumentation() {
    let cases: &[&[&str]] = &[
        &["--tool=cachegrind", "--cachegrind-out-file=/dev/null"],
        &[
            "--tool=cachegrind",
            "--cache-sim=yes",
            "--branch-sim=yes",
            "--cachegrind-out-file=/dev/null",
        ],
        &["--tool=callgrind", "--callgrind-out-file=/dev/null"],
    ];
    let cmd = rgrind_tests::guest_case("vecstate").cmd();
    let native = rgrind_tests::run(&cmd);
    assert!(
        native.stdout_str().contains("done"),
        "native vecstate: {}",
        native.stdout_str()
    );
    let valgrind_cpu = rgrind_tests::run_rgrind(&["-q", "--guest-env=valgrind"], &cmd);
    assert!(valgrind_cpu.stdout_str().contains("done"));
    for (env, reference) in [
        ("--guest-env=native", &native),
        ("--guest-env=valgrind", &valgrind_cpu),
    ] {
        for opts in cases {
            let mut all = vec!["-q", env];
            all.extend_from_slice(opts);
            let out = rgrind_tests::run_rgrind(&all, &cmd);
            assert_eq!(
                out.stdout_str(),
                reference.stdout_str(),
                "vecstate under {env} {opts:?}"
            );
        }
    }
}

/// The direction flag set by the guest survives the helpers' trampolines (the full one clears
/// DF for the routine and restores it without popfq).
#[test]
fn direction_flag_survives_helper_calls() {
    let cmd = rgrind_tests::guest_case("dflag").cmd();
    let native = rgrind_tests::run(&cmd);
    assert_eq!(native.stdout_str(), "abcd1");
    for opts in [
        &["--tool=callgrind", "--callgrind-out-file=/dev/null"][..],
        &[
            "--tool=callgrind",
            "--cache-sim=yes",
            "--callgrind-out-file=/dev/null",
        ][..],
        &[
            "--tool=cachegrind",
            "--cache-sim=yes",
            "--cachegrind-out-file=/dev/null",
        ][..],
    ] {
        let mut all = vec!["-q"];
        all.extend_from_slice(opts);
        let out = rgrind_tests::run_rgrind(&all, &cmd);
        assert_eq!(
            out.stdout_str(),
            "abcd1",
            "under {opts:?}: {}",
            out.describe()
        );
    }
}

/// Real programs under the instrumenting tools behave as natively (sqlite once computed a wrong
/// result under callgrind when a helper clobbered AVX state).
#[test]
fn real_programs_run_the_same_under_the_tools() {
    let programs: &[(&str, &[&str])] = &[
        ("sqlite3", &[":memory:", "create table t(a,b); with recursive c(x) as (select 1 union all select x+1 from c where x<3000) insert into t select x, x*x from c; select count(*), sum(b) from t where a % 7 = 3;"]),
        ("python3", &["-c", "import json; print(json.dumps({str(i): i*i for i in range(300)})[-40:])"]),
    ];
    for (prog, args) in programs {
        let Some(path) = rgrind_tests::which(prog) else {
            println!("skipping {prog}: not installed");
            continue;
        };
        let cmd = rgrind_tests::Cmd::new(&path).args(args.iter().copied());
        let native = rgrind_tests::run(&cmd);
        for tool in [
            ["--tool=cachegrind", "--cachegrind-out-file=/dev/null"],
            ["--tool=callgrind", "--callgrind-out-file=/dev/null"],
        ] {
            let mut opts = vec!["-q"];
            opts.extend_from_slice(&tool);
            let out = rgrind_tests::run_rgrind(&opts, &cmd);
            assert_eq!(
                out.stdout_str(),
                native.stdout_str(),
                "{prog} under {tool:?}: stderr {}",
                out.stderr_str()
            );
        }
    }
}
