//! Builds the guest programs in `guests/` with gcc/g++ (and rustc, for Rust's symbol names) into `$OUT_DIR/guests` and tells the
//! crate where they are through `RGRIND_GUESTS`.
//!
//! Invariants: every entry of `GUESTS` yields one executable named `name`; a missing compiler or a
//! failed compile stops the build with a message naming the guest and the command.
//! It deliberately does not use the `cc` crate or any cache: the guests are a dozen small files
//! and gcc is the reference compiler the project documents.

use std::path::{Path, PathBuf};
use std::process::Command;

/// One guest executable: output name, source file, extra compiler flags.
struct Guest {
    name: &'static str,
    source: &'static str,
    flags: &'static [&'static str],
}

const fn g(name: &'static str, source: &'static str, flags: &'static [&'static str]) -> Guest {
    Guest {
        name,
        source,
        flags,
    }
}

/// Flags of the assembly guests that run without libc: a static, fixed-address program.
const NO_LIBC: &[&str] = &["-nostdlib", "-static", "-no-pie"];

/// Default build: dynamically linked PIE at -O2 (Debian's gcc default is PIE).
const GUESTS: &[Guest] = &[
    g("hello", "hello.c", &[]),
    g("hello-nopie", "hello.c", &["-no-pie"]),
    g("hello-static", "hello.c", &["-static"]),
    g("hello-static-pie", "hello.c", &["-static-pie"]),
    g("hello-O0", "hello.c", &["-O0"]),
    g("exit", "exit.c", &[]),
    g("exit-static", "exit.c", &["-static"]),
    g("tiny", "tiny.S", NO_LIBC),
    g("branchy", "branchy.S", NO_LIBC),
    g("dflag", "dflag.S", NO_LIBC),
    g("loops", "loops.S", NO_LIBC),
    g("succlive", "succlive.S", NO_LIBC),
    g("fetchloop", "fetchloop.S", NO_LIBC),
    g("memops", "memops.S", NO_LIBC),
    g("evexops", "evexops.S", NO_LIBC),
    g("samelines", "samelines.S", NO_LIBC),
    g("cutshort", "cutshort.S", NO_LIBC),
    g("gotswap", "gotswap.S", NO_LIBC),
    g("scratchregs", "scratchregs.S", NO_LIBC),
    g("auxv", "auxv.c", &[]),
    g("auxv-nopie", "auxv.c", &["-no-pie"]),
    g("auxv-static", "auxv.c", &["-static"]),
    g("auxv-static-pie", "auxv.c", &["-static-pie"]),
    g("brk", "brk.c", &[]),
    g("brk-static", "brk.c", &["-static"]),
    g("stack", "stack.c", &[]),
    g("stack-O0", "stack.c", &["-O0"]),
    g("proc", "proc.c", &[]),
    g("proc-static", "proc.c", &["-static"]),
    g("insns", "insns.c", &[]),
    g("insns-O0", "insns.c", &["-O0"]),
    g("insns-static", "insns.c", &["-static"]),
    g("cxx", "cxx.cpp", &[]),
    g("cxx-static", "cxx.cpp", &["-static"]),
    g("sigs", "sigs.c", &[]),
    g("sigs-static", "sigs.c", &["-static"]),
    g("threads", "threads.c", &[]),
    g("threads-static", "threads.c", &["-static"]),
    g("jit", "jit.c", &[]),
    g("jitthreads", "jitthreads.c", &["-pthread"]),
    g("denseloads", "denseloads.c", &[]),
    g("farstreams", "farstreams.c", &[]),
    g("flagfault", "flagfault.c", &[]),
    g("jitdiscard", "jitdiscard.c", &["-pthread"]),
    g("forkthreads", "forkthreads.c", &["-pthread"]),
    g("spin", "spin.c", &[]),
    g("alarmspin", "alarmspin.c", &[]),
    g("vecstate", "vecstate.c", &[]),
    g("cpuview", "cpuview.c", &[]),
    g("execmask", "execmask.c", &[]),
    g("shm", "shm.c", &[]),
    g("vforkorder", "vforkorder.c", &[]),
    g("truncexec", "truncexec.c", &[]),
    g("pthexit", "pthexit.c", &[]),
    g("acflag", "acflag.c", &[]),
    g("deepthreads", "deepthreads.c", &["-pthread"]),
    g("farphdr", "farphdr.c", &[]),
    g("libfarwork.so", "farwork.c", &["-shared", "-fPIC"]),
    g("cxxnames", "cxxnames.cpp", &[]),
    g("persona", "persona.c", &[]),
    g("addrloop", "addrloop.c", &[]),
    g("addrorder", "addrorder.c", &[]),
    g("llwalk", "llwalk.c", &[]),
    g("straddle", "straddle.c", &[]),
    g("names-legacy", "names.rs", &[]),
    g(
        "names-v0",
        "names.rs",
        &["-C", "symbol-mangling-version=v0"],
    ),
];

fn compiler_for(source: &str) -> &'static str {
    if source.ends_with(".rs") {
        "rustc"
    } else if source.ends_with(".cpp") {
        "g++"
    } else {
        "gcc"
    }
}

fn check_compiler(cc: &str) {
    match Command::new(cc).arg("--version").output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "rgrind-tests needs {cc} to build its guest programs, but `{cc} --version` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => panic!(
            "rgrind-tests needs {cc} to build its guest programs (tests/guests), but it could not \
             be run: {e}. Install gcc and g++ (Debian/Ubuntu: apt-get install gcc g++)."
        ),
    }
}

fn build(guest: &Guest, src_dir: &Path, out_dir: &Path) -> Result<(), String> {
    let cc = compiler_for(guest.source);
    let mut cmd;
    if cc == "rustc" {
        // The toolchain building this crate (cargo tells build scripts which).
        cmd = Command::new(std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into()));
        cmd.args(["-O", "-g", "--edition", "2021"]);
    } else {
        cmd = Command::new(cc);
        cmd.args(["-O2", "-g", "-Wall", "-Wextra"]);
    }
    cmd.args(guest.flags)
        .arg("-o")
        .arg(out_dir.join(guest.name))
        .arg(src_dir.join(guest.source));
    if cc != "rustc" && !guest.flags.contains(&"-nostdlib") {
        cmd.arg("-lm");
    }
    let out = cmd
        .output()
        .map_err(|e| format!("could not run {cc} for guest {}: {e}", guest.name))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "building guest {} failed ({}): {:?}\n{}",
            guest.name,
            out.status,
            cmd,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn main() {
    let manifest = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    );
    let src_dir = manifest.join("guests");
    let out_dir =
        PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("guests");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=guests");
    for guest in GUESTS {
        println!("cargo:rerun-if-changed=guests/{}", guest.source);
    }
    check_compiler("gcc");
    check_compiler("g++");
    std::fs::create_dir_all(&out_dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", out_dir.display()));

    // Four workers: the compiles are small and mostly wait on the linker.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let errors = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(guest) = GUESTS.get(i) else { break };
                if let Err(e) = build(guest, &src_dir, &out_dir) {
                    errors.lock().unwrap_or_else(|p| p.into_inner()).push(e);
                }
            });
        }
    });
    let errors = errors.into_inner().unwrap_or_else(|p| p.into_inner());
    if !errors.is_empty() {
        panic!(
            "rgrind-tests: {} guest(s) failed to build:\n{}",
            errors.len(),
            errors.join("\n")
        );
    }
    println!("cargo:rustc-env=RGRIND_GUESTS={}", out_dir.display());
}
