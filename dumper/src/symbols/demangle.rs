//! Function-name presentation the way Valgrind shows it.
//!
//! Demangles Rust (legacy and v0, printed like rustc-demangle's `{:#}`: no hash, no crate
//! disambiguator) and C++ (Itanium ABI) names, keeps a symbol-version suffix (`@@GLIBC_2.34`)
//! as Valgrind does, and renames the functions below `main` to `(below main)`.
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
    if name.starts_with("_R") || name.starts_with("_ZN") {
        if let Ok(d) = rustc_demangle::try_demangle(name) {
            // Legacy Rust names end with a 17h<hash>E component; rustc-demangle only
            // claims a `_ZN` name as Rust when it is a plain path, which C++ names with
            // parameters are not.
            let s = format!("{d:#}");
            if name.starts_with("_R") || looks_rust_legacy(name) {
                return s;
            }
        }
    }
    if name.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(name.as_bytes()) {
            if let Ok(s) = sym.demangle() {
                return s;
            }
        }
    }
    name.to_string()
}

/// A legacy Rust symbol is `_ZN` ... `17h` + 16 hex digits + `E` (optionally followed by a
/// `.llvm.` suffix).
fn looks_rust_legacy(name: &str) -> bool {
    let core = name.split('.').next().unwrap_or(name);
    let Some(body) = core.strip_suffix('E') else {
        return false;
    };
    body.len() > 20 && {
        let tail = &body[body.len() - 19..];
        tail.starts_with("17h") && tail[3..].bytes().all(|b| b.is_ascii_hexdigit())
    }
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
