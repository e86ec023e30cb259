//! Function-name presentation the way Valgrind shows it.
//!
//! Demangles Rust (legacy and v0, printed like rustc-demangle's `{:#}`: no hash, no crate
//! disambiguator) and C++ (Itanium ABI) names, keeps a symbol-version suffix (`@@GLIBC_2.34`)
//! as Valgrind does, and renames the functions below `main` to `(below main)`.
//!
//! C++ names go first through the demangler set with [`set_cxx_demangler`]: rgrind sets GNU's,
//! the one Valgrind embeds (libiberty's), as the system's libstdc++ exports it
//! (`__cxa_demangle`): its text differs from the `cpp_demangle` crate's in one name in ten of
//! a large C++ program (`8u` against `(unsigned int)8`, `R (A)` against `R(A)` for function
//! types, empty template packs, `[clone .llvm.N]`). Without it the crate's text is used.
//!
//! # Invariants
//! * Demangling never fails: a name that cannot be demangled is returned unchanged.
//!
//! This module deliberately does not choose between aliases; see `symbols::elf`.

/// Demangles `raw` (which may carry an `@VER`/`@@VER` suffix) like Valgrind's `--demangle=yes`.
pub fn demangle(raw: &str) -> String {
    let (base, ver) = match raw.find('@') {
        Some(i) if i > 0 => raw.split_at(i),
        _ => (raw, ""),
    };
    let mut out = demangle_base(base);
    out.push_str(ver);
    out
}

fn demangle_base(name: &str) -> String {
    if let Some(core) = rust_core(name) {
        if let Ok(d) = rustc_demangle::try_demangle(core) {
            return format!("{d:#}");
        }
    }
    if name.starts_with("_Z") {
        if let Some(s) = gnu_demangle(name) {
            return s;
        }
        if let Ok(sym) = cpp_demangle::Symbol::new(name.as_bytes()) {
            if let Ok(s) = sym.demangle() {
                return s;
            }
        }
    }
    name.to_string()
}

/// A C++ demangler to try before the `cpp_demangle` crate (see the module comment).
static CXX_DEMANGLER: std::sync::OnceLock<fn(&str) -> Option<String>> = std::sync::OnceLock::new();

/// Sets the C++ demangler tried first (once per process; later calls are ignored). The
/// launcher sets GNU's, which needs unsafe code this crate does not have.
pub fn set_cxx_demangler(f: fn(&str) -> Option<String>) {
    let _ = CXX_DEMANGLER.set(f);
}

fn gnu_demangle(name: &str) -> Option<String> {
    CXX_DEMANGLER.get().and_then(|f| f(name))
}

/// The Rust symbol in `name` without the `.suffix` a compiler may add (`.llvm.N`, `.cold`,
/// `.warm`), which Valgrind's demangler drops as well (libiberty's `rust-demangle.c`); None
/// when `name` is not Rust's. rustc-demangle alone claims a `_ZN` name as Rust whenever it
/// is a plain path, which C++ names with parameters are not, so a legacy name must also end
/// in the `17h` + 16 hex digits + `E` hash component.
fn rust_core(name: &str) -> Option<&str> {
    if name.starts_with("_R") {
        return name.split('.').next();
    }
    if !name.starts_with("_ZN") {
        return None;
    }
    // Legacy paths contain `..` (for `::` inside `<...>`), so the suffix starts after the
    // last `E` that a `.` follows.
    let end = if name.ends_with('E') {
        name.len()
    } else {
        name.rfind("E.")? + 1
    };
    let core = &name[..end];
    let body = core.strip_suffix('E')?;
    let tail = body.get(body.len().checked_sub(19)?..)?;
    (tail.starts_with("17h") && tail[3..].bytes().all(|b| b.is_ascii_hexdigit())).then_some(core)
}

/// True for the names Valgrind renames to `(below main)` (`VG_(get_fnname_kind)`):
/// `__libc_start_main`, `__libc_start_call_main`, `__libc_start_main.*`,
/// `generic_start_main[.*]` and `_start`. A versioned name is not renamed.
pub fn is_below_main(name: &str) -> bool {
    name == "__libc_start_main"
        || name == "__libc_start_call_main"
        || name.starts_with("__libc_start_main.")
        || name == "generic_start_main"
        || name.starts_with("generic_start_main.")
        || name == "_start"
}

/// Applies the below-main renaming to an already demangled name.
pub fn present(demangled: String) -> String {
    if is_below_main(&demangled) {
        "(below main)".to_string()
    } else {
        demangled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_like_valgrind() {
        let cases = [
            ("main", "main"),
            (
                "_ZN2ns4workERKSt6vectorIiSaIiEE",
                "ns::work(std::vector<int, std::allocator<int> > const&)",
            ),
            (
                "_ZN1m5inner7compute17h0123456789abcdefE",
                "m::inner::compute",
            ),
            ("_RNvNtCs1234_1m5inner7compute", "m::inner::compute"),
            (
                "__libc_start_main@@GLIBC_2.34",
                "__libc_start_main@@GLIBC_2.34",
            ),
            (
                "_ZNSt8ios_base4InitC1Ev@@GLIBCXX_3.4",
                "std::ios_base::Init::Init()@@GLIBCXX_3.4",
            ),
            ("_Z", "_Z"),
            // Trait impls: legacy paths with `..`, and the suffixes Valgrind drops.
            (
                "_ZN100_$LT$$RF$object..read..read_cache..ReadCache$LT$R$GT$$u20$as$u20$object..read..read_ref..ReadRef$GT$13read_bytes_at17hd22c1503da2bbd28E",
                "<&object::read::read_cache::ReadCache<R> as object::read::read_ref::ReadRef>::read_bytes_at",
            ),
            (
                "_ZN4core3ptr13drop_in_place17h0123456789abcdefE.llvm.4444.warm",
                "core::ptr::drop_in_place",
            ),
            ("_ZN1m7compute17h0123456789abcdefE.cold", "m::compute"),
            ("_RNvNtCs1234_1m5inner7compute.llvm.123.cold", "m::inner::compute"),
            // C names keep theirs.
            ("base_alloc_impl.llvm.17794163376973226188", "base_alloc_impl.llvm.17794163376973226188"),
        ];
        for (raw, want) in cases {
            assert_eq!(demangle(raw), want, "{raw}");
        }
    }

    #[test]
    fn below_main() {
        assert_eq!(present("__libc_start_call_main".into()), "(below main)");
        assert_eq!(present("_start".into()), "(below main)");
        assert_eq!(
            present("__libc_start_main@@GLIBC_2.34".into()),
            "__libc_start_main@@GLIBC_2.34"
        );
        assert_eq!(present("main".into()), "main");
    }
}
