//! Work with the GIL released, safe when the interpreter exits meanwhile. Before 3.14, CPython
//! ends a (daemon) thread that asks for the GIL back after finalization began with
//! `pthread_exit`, whose forced unwind reaches pyo3's `catch_unwind` around every call into the
//! extension: the process aborts ("FATAL: exception not rethrown"). Such a thread hangs here
//! instead, as CPython 3.14 hangs it itself (CPython issue 87135).

use pyo3::prelude::*;
use std::ffi::c_int;
use std::sync::OnceLock;

/// `crate::detached::detached(py, work)`, hanging the thread before it would take the GIL back in an exiting
/// interpreter.
pub fn detached<T: Send, F: Send + FnOnce() -> T>(py: Python<'_>, work: F) -> T {
    py.detach(|| {
        let out = work();
        if interpreter_exiting() {
            loop {
                // SAFETY: pause() only waits for a signal.
                unsafe { libc::pause() };
            }
        }
        out
    })
}

/// Whether the interpreter's finalization has begun (`Py_IsFinalizing`, 3.13+; `_Py_IsFinalizing`
/// before). Neither is in the limited API, so they are looked up in the process; where neither is
/// found, false (the thread then returns as it always did).
fn interpreter_exiting() -> bool {
    type IsFinalizing = unsafe extern "C" fn() -> c_int;
    static FOUND: OnceLock<Option<IsFinalizing>> = OnceLock::new();
    let found = FOUND.get_or_init(|| {
        [c"Py_IsFinalizing", c"_Py_IsFinalizing"]
            .into_iter()
            .find_map(|name| {
                // SAFETY: dlsym with a NUL-terminated name; RTLD_DEFAULT searches the process's
                // global scope, where the interpreter that loaded this extension is.
                let symbol = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
                // SAFETY: both functions take nothing and return an int (CPython's C API).
                (!symbol.is_null()).then(|| unsafe {
                    std::mem::transmute::<*mut libc::c_void, IsFinalizing>(symbol)
                })
            })
    });
    // SAFETY: the function only reads the runtime's finalizing flag (an atomic load), which needs
    // no GIL.
    found.is_some_and(|is_finalizing| unsafe { is_finalizing() } != 0)
}
