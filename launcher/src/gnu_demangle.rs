//! GNU's C++ demangler (libiberty's, the one Valgrind embeds) from the system's libstdc++,
//! handed to the dumper (`dumper::symbols::demangle::set_cxx_demangler`), so C++ function
//! names read as in Valgrind's files.
//!
//! The library is loaded when the first C++ name is demangled (at the end of a cachegrind
//! run; at the first C++ function translated under callgrind), not at start-up: its
//! mappings share the address space with the guest's, so a C program's layout stays as it
//! was, and where randomisation stays on (`dbt_core::layout`) they would land in holes among
//! the guest's libraries sized differently in every run, changing the order of the guest's
//! modules and with it the cost of ld.so's `_dl_find_object`. `tools::cachegrind::modules`
//! leaves out rgrind's own link map.

/// `__cxa_demangle(mangled, buffer, length, status)` (Itanium C++ ABI).
type CxaDemangle = unsafe extern "C" fn(
    *const libc::c_char,
    *mut libc::c_char,
    *mut libc::size_t,
    *mut libc::c_int,
) -> *mut libc::c_char;

/// libstdc++'s `__cxa_demangle`, loaded on first use; None without libstdc++.
fn cxa() -> Option<CxaDemangle> {
    static CXA: std::sync::OnceLock<Option<CxaDemangle>> = std::sync::OnceLock::new();
    *CXA.get_or_init(|| {
        // SAFETY: dlopen and dlsym with NUL-terminated names; the handle is never closed.
        let f = unsafe {
            let lib = libc::dlopen(
                c"libstdc++.so.6".as_ptr(),
                libc::RTLD_NOW | libc::RTLD_LOCAL,
            );
            if lib.is_null() {
                return None;
            }
            libc::dlsym(lib, c"__cxa_demangle".as_ptr())
        };
        // SAFETY: libstdc++'s `__cxa_demangle` has the ABI's signature, `CxaDemangle`.
        (!f.is_null()).then(|| unsafe { core::mem::transmute::<*mut libc::c_void, CxaDemangle>(f) })
    })
}

/// Gives GNU's demangler to the dumper (loaded on first use; without libstdc++ the dumper
/// falls back to the `cpp_demangle` crate's text).
pub fn install() {
    dumper::symbols::demangle::set_cxx_demangler(demangle);
}

/// `name` demangled by GNU's demangler; None when it refuses the name.
fn demangle(name: &str) -> Option<String> {
    let f = cxa()?;
    let c = std::ffi::CString::new(name).ok()?;
    let mut status: libc::c_int = 0;
    // SAFETY: a NUL-terminated name, no buffer (the demangler mallocs its result), a valid
    // status pointer.
    let out = unsafe {
        f(
            c.as_ptr(),
            core::ptr::null_mut(),
            core::ptr::null_mut(),
            &mut status,
        )
    };
    if out.is_null() {
        return None;
    }
    // SAFETY: a non-null result is a NUL-terminated string from malloc, ours to free.
    let s = unsafe {
        let s = std::ffi::CStr::from_ptr(out).to_string_lossy().into_owned();
        libc::free(out.cast());
        s
    };
    (status == 0).then_some(s)
}
