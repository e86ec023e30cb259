//! Shared helpers for the dumper's integration tests: locating tools, compiling the C guest
//! and running Valgrind on it once per test binary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// True if `tool` is an executable file on `PATH`.
pub fn have(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(tool).is_file()))
}

/// Where the Valgrind-produced files live, or `None` (with a message) when valgrind or gcc
/// is missing on this machine.
pub struct VgFiles {
    pub dir: PathBuf,
    pub exe: PathBuf,
}

impl VgFiles {
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
    pub fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).expect("valgrind output file")
    }
}

fn run_vg(dir: &Path, exe: &Path, out: &str, args: &[&str]) {
    let st = Command::new("valgrind")
        .current_dir(dir)
        .args(args)
        .arg(format!(
            "--{}-out-file={out}",
            if args.iter().any(|a| a.contains("callgrind")) {
                "callgrind"
            } else {
                "cachegrind"
            }
        ))
        .arg(exe)
        .arg("6")
        .output()
        .expect("run valgrind");
    assert!(
        st.status.success(),
        "valgrind failed: {}",
        String::from_utf8_lossy(&st.stderr)
    );
}

/// Compiles `tests/c/prog.c` and runs cachegrind and callgrind on it (once per process).
pub fn valgrind_files() -> Option<&'static VgFiles> {
    static FILES: OnceLock<Option<VgFiles>> = OnceLock::new();
    FILES
        .get_or_init(|| {
            if !have("valgrind") || !have("gcc") {
                eprintln!("valgrind or gcc not installed: skipping the Valgrind comparison");
                return None;
            }
            let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
                .join(format!("vgfiles-{}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("tmp dir");
            let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/prog.c");
            let exe = dir.join("prog");
            let st = Command::new("gcc")
                .args(["-g", "-O1", "-o"])
                .arg(&exe)
                .arg(&src)
                .status()
                .expect("gcc");
            assert!(st.success(), "gcc failed");
            run_vg(&dir, &exe, "cg.out", &["--tool=cachegrind"]);
            run_vg(&dir, &exe, "cl.out", &["--tool=callgrind"]);
            run_vg(
                &dir,
                &exe,
                "cl-instr.out",
                &[
                    "--tool=callgrind",
                    "--dump-instr=yes",
                    "--collect-jumps=yes",
                ],
            );
            run_vg(
                &dir,
                &exe,
                "cl-instr-nojmp.out",
                &["--tool=callgrind", "--dump-instr=yes"],
            );
            run_vg(
                &dir,
                &exe,
                "cl-plain.out",
                &[
                    "--tool=callgrind",
                    "--compress-strings=no",
                    "--compress-pos=no",
                    "--cache-sim=yes",
                ],
            );
            Some(VgFiles { dir, exe })
        })
        .as_ref()
}
