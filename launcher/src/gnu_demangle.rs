//! GNU's C++ demangler (libiberty's, the one Valgrind embeds) from the system's libstdc++,
//! handed to the dumper (`dumper::symbols::demangle::set_cxx_demangler`), so C++ function
//! names read as in Valgrind's files.
//!
//! The library is loaded before the guest is: its mapping then does not lie among the
//! guest's, and `tools::cachegrind::modules` leaves out every object of rgrind's own link
//! map anyway.

/// `__cxa_demangle(mangled, buffer, length, status)` (Itanium C++ ABI).
type CxaDemangle = unsafe extern "C" fn(
    *const libc::c_char,
    *mut libc::c_char,
    *mut libc::size_t,
    *mut libc::c_int,
) -> *mut libc::c_char;

static CXA: std::sync::OnceLock<CxaDemangle> = std::sync::OnceLock::new();

/// Loads libstdc++'s demangler and gives it to the dumper; without libstdc++ the dumper
/// keeps the `cpp_demangle` crate's text.
pub fn install() {
    // SAFETY: dlopen and dlsym with NUL-terminated names; the handle is never closed.
    let f = unsafe {
        let lib = libc::dlopen(
            c"libstdc++.so.6".as_ptr(),
            libc::RTLD_NOW | libc::RTLD_LOCAL,
        );
        if lib.is_null() {
            return;
        }
        libc::dlsym(lib, c"__cxa_demangle".as_ptr())
    };
    if f.is_null() {
        return;
    }
    // SAFETY: libstdc++'s `__cxa_demangle` has the ABI's signature, `CxaDemangle`.
    let f = unsafe { core::mem::transmute::<*mut libc::c_void, CxaDemangle>(f) };
    if CXA.set(f).is_ok() {
        dumper::symbols::demangle::set_cxx_demangler(demangle);
    }
}

/// `name` demangled by GNU's demangler; None when it refuses the name.
fn demangle(name: &str) -> Option<String> {
    let f = *CXA.get()?;
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
