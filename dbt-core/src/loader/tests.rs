//! Tests for the loader: resolution cases (with Valgrind's messages) and real loads read back
//! from memory.

use super::*;
use std::ffi::{OsStr, OsString};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh empty directory under the system temp dir.
fn temp_dir(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let d = std::env::temp_dir().join(format!(
        "rgrind-loader-{}-{}-{}",
        std::process::id(),
        tag,
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write_file(path: &Path, data: &[u8], mode: u32) {
    std::fs::write(path, data).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn os(s: &str) -> OsString {
    OsString::from(s)
}

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

fn resolve(program: &Path, args: &[&str]) -> Result<GuestProgram, LoadError> {
    let args: Vec<OsString> = args.iter().map(|a| os(a)).collect();
    resolve_program(program.as_os_str(), &args)
}

fn argv_strs(p: &GuestProgram) -> Vec<String> {
    p.argv
        .iter()
        .map(|a| a.to_str().unwrap().to_string())
        .collect()
}

/// Checks that resolving `program` fails with exactly `message` and `exit_code`.
fn check_err(program: &Path, message: &str, exit_code: i32) {
    match resolve(program, &["x"]) {
        Ok(p) => panic!("{program:?} resolved to {p:?}, expected error {message:?}"),
        Err(e) => {
            assert_eq!(e.to_string(), message, "{e:?}");
            assert_eq!(e.exit_code(), exit_code, "{e:?}");
        }
    }
}

// ---- ELF files crafted by hand -------------------------------------------------------------

/// A minimal ELF header + one PT_LOAD program header, for the given identification.
fn fake_elf(class: u8, machine: u16, e_type: u16) -> Vec<u8> {
    let mut b = vec![0u8; 4096];
    b[..4].copy_from_slice(b"\x7fELF");
    b[4] = class;
    b[5] = 1;
    b[6] = 1;
    b[16..18].copy_from_slice(&e_type.to_le_bytes());
    b[18..20].copy_from_slice(&machine.to_le_bytes());
    b[20..24].copy_from_slice(&1u32.to_le_bytes());
    if class == 2 {
        b[24..32].copy_from_slice(&0x401000u64.to_le_bytes()); // e_entry
        b[32..40].copy_from_slice(&64u64.to_le_bytes()); // e_phoff
        b[52..54].copy_from_slice(&64u16.to_le_bytes()); // e_ehsize
        b[54..56].copy_from_slice(&56u16.to_le_bytes()); // e_phentsize
        b[56..58].copy_from_slice(&1u16.to_le_bytes()); // e_phnum
        let ph = &mut b[64..120];
        ph[0..4].copy_from_slice(&1u32.to_le_bytes()); // PT_LOAD
        ph[4..8].copy_from_slice(&5u32.to_le_bytes()); // R+X
        ph[16..24].copy_from_slice(&0x400000u64.to_le_bytes());
        ph[32..40].copy_from_slice(&4096u64.to_le_bytes());
        ph[40..48].copy_from_slice(&4096u64.to_le_bytes());
        ph[48..56].copy_from_slice(&4096u64.to_le_bytes());
    }
    b
}

// ---- resolve_program -------------------------------------------------------------------------

#[test]
fn path_lookup_finds_sh() {
    let p = resolve_program(OsStr::new("sh"), &[os("-c"), os("true")]).unwrap();
    let execfn = p.execfn.to_str().unwrap();
    assert!(execfn == "/usr/bin/sh" || execfn == "/bin/sh", "{execfn}");
    assert_eq!(p.exe_path, PathBuf::from(execfn));
    assert_eq!(argv_strs(&p), ["sh", "-c", "true"]);
}

#[test]
fn path_lookup_uses_given_path_and_skips_non_executables() {
    let d = temp_dir("pathlookup");
    let sub1 = d.join("a");
    let sub2 = d.join("b");
    std::fs::create_dir_all(&sub1).unwrap();
    std::fs::create_dir_all(&sub2).unwrap();
    // In the first directory the name exists but is not executable; the second has the real one.
    write_file(&sub1.join("prog"), b"#!/bin/sh\n", 0o644);
    std::fs::copy("/bin/true", sub2.join("prog")).unwrap();
    let path_var = format!("{}:{}", sub1.display(), sub2.display());
    let p = resolve_with_path(OsStr::new("prog"), &[], Some(OsStr::new(&path_var))).unwrap();
    assert_eq!(p.exe_path, sub2.join("prog"));
    assert_eq!(argv_strs(&p), ["prog"]);
    let e =
        resolve_with_path(OsStr::new("prog"), &[], Some(OsStr::new(sub1.as_os_str()))).unwrap_err();
    assert_eq!(e.to_string(), "rgrind: prog: command not found");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn command_not_found() {
    let e = resolve_program(OsStr::new("rgrind-no-such-command-xyz"), &[]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "rgrind: rgrind-no-such-command-xyz: command not found"
    );
    assert_eq!(e.exit_code(), 127);
}

#[test]
fn plain_elf_keeps_argv() {
    let p = resolve(Path::new("/bin/true"), &["a", "b c"]).unwrap();
    assert_eq!(p.exe_path, PathBuf::from("/bin/true"));
    assert_eq!(p.execfn.to_str().unwrap(), "/bin/true");
    assert_eq!(argv_strs(&p), ["/bin/true", "a", "b c"]);
}

#[test]
fn hashbang_script_with_argument() {
    let d = temp_dir("script");
    let s = d.join("s.sh");
    write_file(&s, b"#!  /bin/sh   -e -x  \t\necho hi\n", 0o755);
    let p = resolve(&s, &["one", "two"]).unwrap();
    assert_eq!(p.exe_path, PathBuf::from("/bin/sh"));
    let sp = s.to_str().unwrap();
    assert_eq!(argv_strs(&p), ["/bin/sh", "-e -x", sp, "one", "two"]);
    assert_eq!(p.execfn.to_str().unwrap(), sp);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn nested_scripts_and_loop() {
    let d = temp_dir("nested");
    let inner = d.join("inner");
    let outer = d.join("outer");
    write_file(&inner, b"#!/bin/sh\n", 0o755);
    write_file(
        &outer,
        format!("#!{} opt\n", inner.display()).as_bytes(),
        0o755,
    );
    let p = resolve(&outer, &["x"]).unwrap();
    let (i, o) = (inner.to_str().unwrap(), outer.to_str().unwrap());
    assert_eq!(p.exe_path, PathBuf::from("/bin/sh"));
    assert_eq!(argv_strs(&p), ["/bin/sh", i, "opt", o, "x"]);
    assert_eq!(p.execfn.to_str().unwrap(), o);

    let looping = d.join("loop");
    write_file(
        &looping,
        format!("#!{}\n", looping.display()).as_bytes(),
        0o755,
    );
    check_err(
        &looping,
        &format!(
            "rgrind: {}: bad interpreter: Too many levels of symbolic links",
            looping.display()
        ),
        126,
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn text_without_hashbang_runs_with_sh() {
    let d = temp_dir("text");
    let t = d.join("t");
    write_file(&t, b"echo hello\n", 0o755);
    let p = resolve(&t, &["a"]).unwrap();
    assert_eq!(p.exe_path, PathBuf::from("/bin/sh"));
    assert_eq!(argv_strs(&p), ["/bin/sh", t.to_str().unwrap(), "a"]);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn bad_inputs_match_valgrind_messages() {
    let d = temp_dir("bad");
    let ds = d.display();

    check_err(
        &d.join("missing"),
        &format!("rgrind: {ds}/missing: No such file or directory"),
        127,
    );
    check_err(&d, &format!("rgrind: {ds}: is a directory"), 126);

    let bin = d.join("bin");
    write_file(&bin, b"\xff\xfe\x00binary", 0o755);
    check_err(
        &bin,
        &format!("rgrind: {ds}/bin: cannot execute binary file"),
        126,
    );

    let noexec = d.join("noexec");
    std::fs::copy("/bin/true", &noexec).unwrap();
    std::fs::set_permissions(&noexec, std::fs::Permissions::from_mode(0o644)).unwrap();
    check_err(
        &noexec,
        &format!("rgrind: {ds}/noexec: Permission denied"),
        126,
    );

    let badinterp = d.join("badinterp");
    write_file(&badinterp, b"#!/nonexistent/interp\n", 0o755);
    check_err(
        &badinterp,
        &format!("rgrind: {ds}/badinterp: bad interpreter: No such file or directory"),
        126,
    );
    let noexinterp = d.join("noexinterp");
    write_file(
        &noexinterp,
        format!("#!{}\n", noexec.display()).as_bytes(),
        0o755,
    );
    check_err(
        &noexinterp,
        &format!("rgrind: {ds}/noexinterp: bad interpreter: Permission denied"),
        126,
    );
    let dirinterp = d.join("dirinterp");
    write_file(&dirinterp, format!("#!{ds}\n").as_bytes(), 0o755);
    check_err(
        &dirinterp,
        &format!("rgrind: {ds}/dirinterp: bad interpreter: Permission denied"),
        126,
    );

    let elf32 = d.join("elf32");
    write_file(&elf32, &fake_elf(1, 3, 2), 0o755);
    check_err(
        &elf32,
        &format!(
            "rgrind: {ds}/elf32: cannot execute binary file: platform 'x86-linux' is not supported \
             (rgrind runs amd64-linux programs only)"
        ),
        126,
    );
    let arm = d.join("arm64");
    write_file(&arm, &fake_elf(2, 183, 2), 0o755);
    check_err(
        &arm,
        &format!(
            "rgrind: {ds}/arm64: cannot execute binary file: platform 'arm64-linux' is not supported \
             (rgrind runs amd64-linux programs only)"
        ),
        126,
    );
    let rel = d.join("rel.o");
    write_file(&rel, &fake_elf(2, 62, 1), 0o755);
    check_err(
        &rel,
        &format!("rgrind: {ds}/rel.o: this is not an executable"),
        126,
    );

    // The hand-made x86-64 ET_EXEC is accepted by resolution.
    let ok = d.join("ok");
    write_file(&ok, &fake_elf(2, 62, 2), 0o755);
    assert_eq!(resolve(&ok, &[]).unwrap().exe_path, ok);
    std::fs::remove_dir_all(&d).unwrap();
}

// ---- load ------------------------------------------------------------------------------------

/// Reads a u64 of guest memory.
fn peek(addr: u64) -> u64 {
    // SAFETY: tests only read addresses inside mappings `load` made and still keeps.
    unsafe { std::ptr::read_unaligned(addr as *const u64) }
}

/// Reads guest memory bytes.
fn peek_bytes(addr: u64, len: usize) -> Vec<u8> {
    // SAFETY: as in `peek`.
    unsafe { std::slice::from_raw_parts(addr as *const u8, len).to_vec() }
}

/// Reads a NUL-terminated string of guest memory.
fn peek_cstr(addr: u64) -> String {
    // SAFETY: as in `peek`; the loader wrote a NUL after every string.
    unsafe { std::ffi::CStr::from_ptr(addr as *const libc::c_char) }
        .to_str()
        .unwrap()
        .to_string()
}

/// argc/argv/envp/auxv as read back from the guest stack.
struct ParsedStack {
    argv: Vec<String>,
    envp: Vec<String>,
    auxv: Vec<(u64, u64)>,
}

fn parse_stack(rsp: u64) -> ParsedStack {
    let argc = peek(rsp);
    let mut p = rsp + 8;
    let argv = (0..argc).map(|i| peek_cstr(peek(p + 8 * i))).collect();
    p += 8 * argc;
    assert_eq!(peek(p), 0, "argv not NULL-terminated");
    p += 8;
    let mut envp = Vec::new();
    while peek(p) != 0 {
        envp.push(peek_cstr(peek(p)));
        p += 8;
    }
    p += 8;
    let mut auxv = Vec::new();
    loop {
        let (k, v) = (peek(p), peek(p + 8));
        auxv.push((k, v));
        p += 16;
        if k == AT_NULL {
            break;
        }
    }
    ParsedStack { argv, envp, auxv }
}

fn aux(auxv: &[(u64, u64)], key: u64) -> Option<u64> {
    auxv.iter().find(|(k, _)| *k == key).map(|&(_, v)| v)
}

/// The permission string ("r-xp") of the /proc/self/maps line containing `addr`.
fn perms_at(addr: u64) -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        let (s, e) = it.next()?.split_once('-')?;
        let (s, e) = (
            u64::from_str_radix(s, 16).ok()?,
            u64::from_str_radix(e, 16).ok()?,
        );
        (s <= addr && addr < e).then(|| it.next().unwrap().to_string())
    })
}

fn in_ranges(addr: u64, ranges: &[(u64, u64)]) -> bool {
    ranges.iter().any(|&(s, e)| s <= addr && addr < e)
}

fn opts() -> LoadOptions {
    LoadOptions {
        envp: vec![c("A=1"), c("RGRIND_TEST=two words")],
        brk_reserve: 64 << 20,
        stack_size: 8 << 20,
        valgrind_auxv: false,
    }
}

/// The checks every successful load must pass; `prog` is what was loaded.
fn check_loaded(prog: &GuestProgram, o: &LoadOptions, g: &LoadedGuest) {
    let page = page_size();
    // ELF magic at the start of the exe image, and the same for the interpreter.
    assert_eq!(peek_bytes(g.exe.start, 4), b"\x7fELF");
    if let Some(i) = &g.interp {
        assert_eq!(peek_bytes(i.start, 4), b"\x7fELF");
        assert_eq!(g.entry, i.entry);
        assert!(
            in_ranges(i.entry, &i.exec_ranges),
            "interp entry {:#x} not executable",
            i.entry
        );
    } else {
        assert_eq!(g.entry, g.exe.entry);
    }
    assert!(
        in_ranges(g.exe.entry, &g.exe.exec_ranges),
        "entry {:#x} not in {:x?}",
        g.exe.entry,
        g.exe.exec_ranges
    );
    for &(s, _) in &g.exe.exec_ranges {
        assert!(perms_at(s).unwrap().contains('x'));
    }

    // The stack parses back to what was passed.
    assert_eq!(g.initial_rsp % 16, 0);
    assert!(g.stack_start + page <= g.initial_rsp && g.initial_rsp < g.stack_end);
    assert_eq!(g.stack_end - g.stack_start, o.stack_size + page);
    assert_eq!(
        perms_at(g.stack_start).as_deref(),
        Some("---p"),
        "guard page"
    );
    assert_eq!(perms_at(g.stack_end - 1).as_deref(), Some("rw-p"));
    let st = parse_stack(g.initial_rsp);
    let want_argv: Vec<String> = prog
        .argv
        .iter()
        .map(|a| a.to_str().unwrap().to_string())
        .collect();
    let want_envp: Vec<String> = o
        .envp
        .iter()
        .map(|a| a.to_str().unwrap().to_string())
        .collect();
    assert_eq!(st.argv, want_argv);
    assert_eq!(st.envp, want_envp);
    assert_eq!(st.auxv, g.auxv);
    assert_eq!(g.auxv.last(), Some(&(AT_NULL, 0)));

    // auxv contents.
    let a = &g.auxv;
    assert_eq!(aux(a, AT_PHDR), Some(g.exe.phdr));
    assert_eq!(aux(a, AT_PHNUM), Some(g.exe.phnum));
    assert_eq!(aux(a, AT_PHENT), Some(56));
    assert_eq!(aux(a, AT_ENTRY), Some(g.exe.entry));
    assert_eq!(
        aux(a, AT_BASE),
        Some(g.interp.as_ref().map_or(0, |i| i.load_bias))
    );
    assert_eq!(aux(a, AT_PAGESZ), Some(page));
    assert_eq!(aux(a, AT_SECURE), Some(0));
    assert_eq!(aux(a, AT_FLAGS), Some(0));
    assert_eq!(
        peek_cstr(aux(a, AT_EXECFN).unwrap()),
        prog.execfn.to_str().unwrap()
    );
    assert_eq!(peek_cstr(aux(a, AT_PLATFORM).unwrap()), "x86_64");
    // SAFETY: getauxval has no preconditions.
    let host = |t: u64| unsafe { libc::getauxval(t) };
    let kernel_hwcap = std::fs::read("/proc/self/auxv")
        .unwrap()
        .chunks_exact(16)
        .map(|c| {
            (
                u64::from_ne_bytes(c[..8].try_into().unwrap()),
                u64::from_ne_bytes(c[8..].try_into().unwrap()),
            )
        })
        .find(|&(k, _)| k == AT_HWCAP)
        .map(|(_, v)| v);
    assert_eq!(aux(a, AT_HWCAP), kernel_hwcap);
    if o.valgrind_auxv {
        for k in [AT_HWCAP2, AT_SYSINFO_EHDR, AT_MINSIGSTKSZ] {
            assert_eq!(aux(a, k), None, "Valgrind leaves out auxv entry {k}");
        }
        // As copies of the kernel's entries, the ones left out made AT_IGNORE in place.
        let kernel: Vec<u64> = std::fs::read("/proc/self/auxv")
            .unwrap()
            .chunks_exact(16)
            .map(|c| u64::from_ne_bytes(c[..8].try_into().unwrap()))
            .collect();
        let ours: Vec<u64> = a.iter().map(|e| e.0).collect();
        assert_eq!(
            ours.len(),
            kernel.len(),
            "{ours:?} vs the kernel's {kernel:?}"
        );
        for (o, k) in ours.iter().zip(&kernel) {
            assert!(
                o == k || *o == AT_IGNORE,
                "{ours:?} vs the kernel's {kernel:?}"
            );
        }
    } else {
        assert_eq!(aux(a, AT_HWCAP2), Some(host(AT_HWCAP2) & !HWCAP2_FSGSBASE));
        assert_eq!(aux(a, AT_SYSINFO_EHDR), Some(host(AT_SYSINFO_EHDR)));
        assert_eq!(
            aux(a, AT_MINSIGSTKSZ),
            Some(host(AT_MINSIGSTKSZ)).filter(|&v| v != 0)
        );
    }
    assert_eq!(aux(a, AT_CLKTCK), Some(host(AT_CLKTCK)));
    assert_eq!(aux(a, AT_UID), Some(host(AT_UID)));
    let vdso = g.vdso.expect("vdso");
    assert_eq!(vdso.0, host(AT_SYSINFO_EHDR));
    assert_eq!(peek_bytes(vdso.0, 4), b"\x7fELF");
    assert!(
        a.iter().all(|&(k, _)| k != 27 && k != 28),
        "rseq entries must be dropped"
    );
    let random = aux(a, AT_RANDOM).unwrap();
    assert!(random > g.initial_rsp && random + 16 <= g.stack_end);
    assert_eq!(peek_bytes(random, 16).len(), 16);

    // AT_PHDR points at the file's program headers.
    let file = std::fs::read(&g.exe.path).unwrap();
    let phoff = u64::from_le_bytes(file[32..40].try_into().unwrap()) as usize;
    let table = &file[phoff..phoff + 56 * g.exe.phnum as usize];
    assert_eq!(peek_bytes(g.exe.phdr, table.len()), table);

    // Every PT_LOAD's .bss part reads as zero, and the file part as the file.
    for ph in table.chunks_exact(56) {
        let f = |o: usize| u64::from_le_bytes(ph[o..o + 8].try_into().unwrap());
        if u32::from_le_bytes(ph[0..4].try_into().unwrap()) != 1 {
            continue;
        }
        let (off, vaddr, filesz, memsz) = (f(8), f(16), f(32), f(40));
        let flags = u32::from_le_bytes(ph[4..8].try_into().unwrap());
        if flags & 4 == 0 {
            continue;
        }
        let at = vaddr + g.exe.load_bias;
        assert_eq!(
            peek_bytes(at, filesz as usize),
            &file[off as usize..(off + filesz) as usize]
        );
        let bss = peek_bytes(at + filesz, (memsz - filesz) as usize);
        assert!(bss.iter().all(|&b| b == 0), "bss not zero");
    }

    // brk reservation: right after the image, PROT_NONE.
    assert_eq!(g.brk_start, g.exe.end);
    assert_eq!(g.brk_start % page, 0);
    assert_eq!(g.brk_limit, g.brk_start + o.brk_reserve);
    assert_eq!(perms_at(g.brk_start).as_deref(), Some("---p"));
    assert_eq!(perms_at(g.brk_limit - 1).as_deref(), Some("---p"));
}

#[test]
fn load_dynamic_pie_true() {
    let prog = resolve(Path::new("/usr/bin/true"), &["--version", "x"]).unwrap();
    let o = opts();
    let g = load(&prog, &o).unwrap();
    assert!(
        g.interp.is_some(),
        "/usr/bin/true should be dynamically linked"
    );
    assert_ne!(g.exe.load_bias, 0, "/usr/bin/true should be a PIE");
    check_loaded(&prog, &o, &g);
    // SAFETY: no guest code ran; nothing points into the guest mappings.
    // (Whether the ranges are free afterwards is not checked: tests running in parallel may
    // map new things there at once.)
    unsafe { g.unmap() };
}

#[test]
fn valgrind_auxv_leaves_out_vdso_minsigstksz_and_hwcap2() {
    let prog = resolve(Path::new("/usr/bin/true"), &[]).unwrap();
    let o = LoadOptions {
        valgrind_auxv: true,
        ..opts()
    };
    let g = load(&prog, &o).unwrap();
    check_loaded(&prog, &o, &g);
    // SAFETY: no guest code ran; nothing points into the guest mappings.
    unsafe { g.unmap() };
}

/// Serialises the tests that map ET_EXEC programs at their fixed link addresses.
static FIXED_ADDRESS_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs the loaded guest natively in a forked child (jumping to `entry` with `rsp` at argc,
/// `rdx = 0`), with stdout captured: the end-to-end check that the image and stack are what a
/// real process expects. Returns the exit status and the output.
fn run_natively(g: &LoadedGuest) -> (i32, String) {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is a valid two-int array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let (rsp, entry) = (g.initial_rsp, g.entry);
    // SAFETY: the child only calls async-signal-safe functions (dup2, close) before jumping
    // into the guest, which never returns (it ends with exit_group).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: plain fd calls; then leave Rust for good: the guest owns the process now, and
        // its stack and entry were built by `load`, which is what this test checks.
        unsafe {
            libc::dup2(fds[1], 1);
            libc::close(fds[0]);
            libc::close(fds[1]);
            std::arch::asm!(
                "mov rsp, rdi",
                "xor edx, edx",
                "jmp rsi",
                in("rdi") rsp,
                in("rsi") entry,
                options(noreturn)
            );
        }
    }
    // SAFETY: closes our copy of the write end.
    unsafe { libc::close(fds[1]) };
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: reads into `buf`, which we own.
        let n = unsafe { libc::read(fds[0], buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        out.extend_from_slice(&buf[..n as usize]);
    }
    // SAFETY: closes the read end we own.
    unsafe { libc::close(fds[0]) };
    let mut status = 0;
    // SAFETY: waits for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status),
        "guest died: wait status {status:#x}"
    );
    (libc::WEXITSTATUS(status), String::from_utf8(out).unwrap())
}

#[test]
fn dynamic_pie_runs_natively() {
    let prog = resolve_program(OsStr::new("echo"), &[os("hello"), os("loader world")]).unwrap();
    let g = load(&prog, &opts()).unwrap();
    assert_eq!(run_natively(&g), (0, "hello loader world\n".to_string()));
    // SAFETY: the guest ran only in the child; nothing here points into its mappings.
    unsafe { g.unmap() };
}

const TEST_C: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
static char big[1 << 20];
int initialized = 42;
int main(int argc, char **argv, char **envp) {
    for (int i = 0; i < argc; i++) printf("argv[%d]=%s\n", i, argv[i]);
    for (char **e = envp; *e; e++) printf("env=%s\n", *e);
    for (size_t i = 0; i < sizeof big; i++) if (big[i]) return 3;
    char *p = malloc(1 << 16);
    if (!p) return 4;
    memset(p, 1, 1 << 16);
    printf("init=%d execfn=%s\n", initialized, (char *)getauxval(AT_EXECFN));
    return 7;
}
"#;

/// Builds TEST_C with gcc and `flags` into `dir`; None (with a message) when gcc is missing or
/// cannot link that kind of program here.
fn build_guest(dir: &Path, name: &str, flags: &[&str]) -> Option<PathBuf> {
    let src = dir.join("guest.c");
    std::fs::write(&src, TEST_C).unwrap();
    let out = dir.join(name);
    let status = std::process::Command::new("gcc")
        .args(["-O1", "-o"])
        .arg(&out)
        .arg(&src)
        .args(flags)
        .status();
    match status {
        Ok(s) if s.success() => Some(out),
        Ok(s) => {
            eprintln!("SKIP: gcc {flags:?} failed ({s}); not testing that kind of guest");
            None
        }
        Err(e) => {
            eprintln!("SKIP: gcc not available ({e}); not testing compiled guests");
            None
        }
    }
}

/// Loads a compiled guest, checks it, runs it natively and compares its output.
fn load_and_run(exe: &Path, want_interp: bool, want_pie: bool) -> LoadedGuest {
    let prog = resolve(exe, &["first arg", "2"]).unwrap();
    let o = opts();
    let g = load(&prog, &o).unwrap();
    assert_eq!(g.interp.is_some(), want_interp);
    assert_eq!(g.exe.load_bias != 0, want_pie);
    check_loaded(&prog, &o, &g);
    let e = exe.display();
    let want = format!(
        "argv[0]={e}\nargv[1]=first arg\nargv[2]=2\nenv=A=1\nenv=RGRIND_TEST=two words\n\
         init=42 execfn={e}\n"
    );
    assert_eq!(run_natively(&g), (7, want));
    g
}

#[test]
fn static_exec_and_fixed_address_conflict() {
    let d = temp_dir("static");
    let Some(exe) = build_guest(&d, "static", &["-static"]) else {
        return;
    };
    let _lock = FIXED_ADDRESS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let g = load_and_run(&exe, false, false);
    assert_eq!(aux(&g.auxv, AT_BASE), Some(0));
    // Loading it again must fail cleanly: its fixed range is now taken.
    let prog = resolve(&exe, &[]).unwrap();
    let err = load(&prog, &opts()).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "rgrind: {}: cannot map the program at its fixed address range {:#x}-{:#x}: \
             the range is already in use",
            exe.display(),
            g.exe.start,
            g.exe.end
        )
    );
    // SAFETY: the guest ran only in the child.
    unsafe { g.unmap() };
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn static_pie_loads_and_runs() {
    let d = temp_dir("staticpie");
    let Some(exe) = build_guest(&d, "static-pie", &["-static-pie"]) else {
        return;
    };
    let g = load_and_run(&exe, false, true);
    // SAFETY: the guest ran only in the child.
    unsafe { g.unmap() };
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn dynamic_non_pie_loads_and_runs() {
    let d = temp_dir("nopie");
    let Some(exe) = build_guest(&d, "nopie", &["-no-pie"]) else {
        return;
    };
    let _lock = FIXED_ADDRESS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let g = load_and_run(&exe, true, false);
    // SAFETY: the guest ran only in the child.
    unsafe { g.unmap() };
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn brk_reservation_blocked_for_fixed_exe() {
    let d = temp_dir("brkblock");
    let Some(exe) = build_guest(&d, "static", &["-static"]) else {
        return;
    };
    let _lock = FIXED_ADDRESS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let prog = resolve(&exe, &[]).unwrap();
    let g = load(&prog, &opts()).unwrap();
    // SAFETY: nothing ran.
    unsafe { g.unmap() };
    // Occupy one page in the middle of where the brk reservation would go.
    let blocker = elf::Reservation::fixed(g.brk_start + (1 << 20), 4096).unwrap();
    let err = load(&prog, &opts()).unwrap_err();
    assert!(
        matches!(
            err,
            LoadError::AddressInUse {
                what: "the brk reservation",
                ..
            }
        ),
        "{err}"
    );
    // The failed load left nothing behind: the program's range is free again.
    assert_eq!(perms_at(g.exe.start), None);
    drop(blocker);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn stack_too_small_is_an_error() {
    let prog = resolve(Path::new("/usr/bin/true"), &[]).unwrap();
    let mut o = opts();
    o.stack_size = 4096;
    o.envp = vec![CString::new(vec![b'x'; 8000]).unwrap()];
    let err = load(&prog, &o).unwrap_err();
    assert!(
        matches!(err, LoadError::StackTooSmall { size: 4096, .. }),
        "{err}"
    );
    assert!(err
        .to_string()
        .starts_with("rgrind: /usr/bin/true: Argument list too long"));
}

/// /usr/bin/true with its PT_INTERP string replaced by `new_interp` (same length or shorter).
fn true_with_interp(dir: &Path, new_interp: &str) -> PathBuf {
    let mut bytes = std::fs::read("/usr/bin/true").unwrap();
    let old = b"/lib64/ld-linux-x86-64.so.2\0";
    let at = bytes
        .windows(old.len())
        .position(|w| w == old)
        .expect("PT_INTERP string");
    assert!(new_interp.len() < old.len());
    let mut repl = new_interp.as_bytes().to_vec();
    repl.resize(old.len(), 0);
    bytes[at..at + old.len()].copy_from_slice(&repl);
    let p = dir.join("true-patched");
    write_file(&p, &bytes, 0o755);
    p
}

#[test]
fn interpreter_errors() {
    let d = temp_dir("interp");
    let missing = true_with_interp(&d, "/lib64/ld-missing.so");
    let prog = resolve(&missing, &[]).unwrap();
    let err = load(&prog, &opts()).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "rgrind: {}: can't open interpreter /lib64/ld-missing.so: No such file or directory",
            missing.display()
        )
    );
    // An interpreter without execute permission, and a directory.
    for (interp, msg) in [
        ("/etc/passwd", "Permission denied"),
        ("/etc", "Is a directory"),
    ] {
        let bad = true_with_interp(&d, interp);
        let err = load(&resolve(&bad, &[]).unwrap(), &opts()).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "rgrind: {}: can't open interpreter {interp}: {msg}",
                bad.display()
            )
        );
        assert_eq!(err.exit_code(), 1);
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn malformed_elf_files() {
    let d = temp_dir("malformed");
    let ds = d.display();
    // Header fine, program headers cut off.
    let trunc = d.join("trunc");
    write_file(
        &trunc,
        &std::fs::read("/usr/bin/true").unwrap()[..100],
        0o755,
    );
    let prog = resolve(&trunc, &[]).unwrap();
    let err = load(&prog, &opts()).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("rgrind: {ds}/trunc: malformed ELF file: program headers extend past the end of the file")
    );
    // A segment claiming more file bytes than the file has.
    let mut b = fake_elf(2, 62, 2);
    b[64 + 32..64 + 40].copy_from_slice(&8192u64.to_le_bytes());
    b[64 + 40..64 + 48].copy_from_slice(&8192u64.to_le_bytes());
    let short = d.join("short");
    write_file(&short, &b, 0o755);
    let err = load(&resolve(&short, &[]).unwrap(), &opts()).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("rgrind: {ds}/short: malformed ELF file: segment extends past the end of the file")
    );
    // p_filesz > p_memsz.
    let mut b = fake_elf(2, 62, 2);
    b[64 + 40..64 + 48].copy_from_slice(&16u64.to_le_bytes());
    let fm = d.join("filesz");
    write_file(&fm, &b, 0o755);
    let err = load(&resolve(&fm, &[]).unwrap(), &opts()).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("rgrind: {ds}/filesz: malformed ELF file: segment has p_filesz > p_memsz")
    );
    // No PT_LOAD at all.
    let mut b = fake_elf(2, 62, 3);
    b[64..68].copy_from_slice(&4u32.to_le_bytes()); // PT_NOTE
    let nl = d.join("noload");
    write_file(&nl, &b, 0o755);
    let err = load(&resolve(&nl, &[]).unwrap(), &opts()).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("rgrind: {ds}/noload: malformed ELF file: no PT_LOAD segment")
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn hand_made_et_dyn_honours_p_align_and_zeroes_bss() {
    // One R+W segment, 2 MiB aligned, 100 file bytes followed by a page and a half of .bss.
    let mut b = fake_elf(2, 62, 3);
    b[24..32].copy_from_slice(&0x10u64.to_le_bytes()); // e_entry
    let ph = &mut b[64..120];
    ph[4..8].copy_from_slice(&6u32.to_le_bytes()); // R+W
    ph[16..24].copy_from_slice(&0u64.to_le_bytes());
    ph[32..40].copy_from_slice(&300u64.to_le_bytes());
    ph[40..48].copy_from_slice(&(300u64 + 6144).to_le_bytes());
    ph[48..56].copy_from_slice(&(2u64 << 20).to_le_bytes());
    for (i, x) in b[200..4096].iter_mut().enumerate() {
        *x = (i % 251) as u8 + 1; // non-zero bytes past p_filesz in the file's page
    }
    let d = temp_dir("etdyn");
    let f = d.join("dyn");
    write_file(&f, &b, 0o755);
    let g = load(&resolve(&f, &[]).unwrap(), &opts()).unwrap();
    assert_eq!(g.exe.load_bias % (2 << 20), 0);
    assert_eq!(g.exe.start, g.exe.load_bias);
    assert_eq!(g.exe.end, g.exe.start + 8192);
    assert_eq!(g.entry, g.exe.load_bias + 0x10);
    assert!(g.exe.exec_ranges.is_empty());
    assert_eq!(peek_bytes(g.exe.start, 300), &b[..300]);
    assert!(peek_bytes(g.exe.start + 300, 6144).iter().all(|&x| x == 0));
    assert_eq!(perms_at(g.exe.start).as_deref(), Some("rw-p"));
    assert_eq!(perms_at(g.exe.start + 4096).as_deref(), Some("rw-p"));
    assert_eq!(perms_at(g.brk_start).as_deref(), Some("---p"));
    // SAFETY: nothing ran.
    unsafe { g.unmap() };
    std::fs::remove_dir_all(&d).unwrap();
}

/// With randomisation on, rgrind's own binary can lie where a position-independent program
/// goes first; the program then goes to the next free base, still below the libraries, not
/// where the kernel would put it (above them).
#[test]
fn pie_goes_to_the_next_base_when_the_first_is_taken() {
    let _lock = FIXED_ADDRESS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    // Tests that load a PIE without the lock may hold the first base for a moment.
    let blocker = (0..500)
        .find_map(|_| {
            let r = elf::Reservation::fixed(PIE_BASES[0] + (64 << 20), 4096).ok();
            if r.is_none() {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            r
        })
        .expect("the first base stays taken");
    let prog = resolve(Path::new("/usr/bin/true"), &[]).unwrap();
    let g = load(&prog, &opts()).unwrap();
    assert!(
        PIE_BASES[1..].contains(&g.exe.start),
        "program at {:#x}, not at one of {PIE_BASES:x?}",
        g.exe.start
    );
    // SAFETY: nothing ran.
    unsafe { g.unmap() };
    drop(blocker);
}
