//! Threads that CPython ends inside a call into the extension. Before 3.14, a (daemon) thread
//! that takes the GIL back after the interpreter's finalization began (at the end of a call with
//! the GIL released, or when Python code it runs switches threads) is ended with `pthread_exit`,
//! whose forced unwind reaches pyo3's `catch_unwind` around every call: the process aborted
//! ("FATAL: exception not rethrown", 1 exit in ~50 of `test_exit_while_daemon_threads_gather`).
//! Such a thread hangs here instead, without the GIL, as CPython 3.14 hangs it itself (CPython
//! issue 87135); the process exits around it.

use pyo3::prelude::*;
use std::ffi::c_int;
use std::sync::OnceLock;

/// `work()` such that a forced unwind out of it (the thread ended by CPython) hangs the thread
/// instead of reaching pyo3's `catch_unwind`. A Rust panic passes on as before.
pub fn guarded<T>(work: impl FnOnce() -> T) -> T {
    struct Ending;
    impl Drop for Ending {
        fn drop(&mut self) {
            // Dropped only by an unwind (forgotten below otherwise); not Rust's own: the thread
            // is being ended, and holds no GIL.
            if !std::thread::panicking() {
                hang();
            }
        }
    }
    let ending = Ending;
    let out = work();
    std::mem::forget(ending);
    out
}

/// `py.detach(work)`, the thread hanging before it would take the GIL back in an exiting
/// interpreter (so that no unwind starts at all where finalization began during `work`).
pub fn detached<T: Send, F: Send + FnOnce() -> T>(py: Python<'_>, work: F) -> T {
    py.detach(|| {
        let out = work();
        if interpreter_exiting() {
            hang();
        }
        out
    })
}

fn hang() -> ! {
    loop {
        // SAFETY: pause() only waits for a signal.
        unsafe { libc::pause() };
    }
}

/// Whether the interpreter's finalization has begun (`Py_IsFinalizing`, 3.13+; `_Py_IsFinalizing`
/// before). Neither is in the limited API, so they are looked up in the process; where neither is
/// found, false.
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
    // SAFETY: the function reads the runtime's finalizing flag (an atomic load): no GIL needed.
    found.is_some_and(|is_finalizing| unsafe { is_finalizing() } != 0)
}
