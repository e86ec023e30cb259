//! Builds the preload object rgrind gives its guests with `--guest-env=valgrind`
//! (`preload/vgpreload_core.c`), with the C compiler Rust links with, as Valgrind builds its
//! own: position-independent, no default libraries, `-z interpose -z initfirst`.
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let src = "preload/vgpreload_core.c";
    println!("cargo:rerun-if-changed={src}");
    println!("cargo:rerun-if-env-changed=CC");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"))
        .join("vgpreload_core-amd64-linux.so");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args([
            "-O2",
            "-fPIC",
            "-shared",
            "-nodefaultlibs",
            "-fno-stack-protector",
            "-Wl,-z,interpose,-z,initfirst",
            "-Wl,--build-id",
            "-o",
        ])
        .arg(&out)
        .arg(src)
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("building {src} with `{cc}` failed ({s})"),
        Err(e) => panic!("cannot run the C compiler `{cc}` to build {src}: {e}"),
    }
}
