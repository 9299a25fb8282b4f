//! Native work with the GIL released, safe for the daemon threads an exiting interpreter ends.
//!
//! CPython before 3.14 ends a thread that takes the GIL back after finalization began with
//! `pthread_exit`. Its forced unwind would run the destructors of the native call's frames, which
//! release Python references (the `PyRef` of `self`, owned `Bound`s) without the GIL while the
//! main thread tears the interpreter down, and would then reach pyo3's `extern "C"` trampoline. A
//! thread ended that way stays parked here instead, until the process exits (as CPython 3.14
//! leaves such threads), holding every reference its call took: nothing it used is freed under it.

use pyo3::marker::Ungil;
use pyo3::Python;
use std::time::Duration;

/// `py.detach(f)`: `f` run with the GIL released, the GIL taken back after; a thread the
/// interpreter ends on taking it back stays parked here (see the module's comment).
pub(crate) fn detach<T: Ungil, F: Ungil + FnOnce() -> T>(py: Python<'_>, f: F) -> T {
    let ended = ParkIfEnded;
    let result = py.detach(f);
    std::mem::forget(ended);
    result
}

/// Dropped only by an unwind out of `py.detach`: a Rust panic, passed on, or the forced unwind of
/// `pthread_exit`, which never goes further.
struct ParkIfEnded;

impl Drop for ParkIfEnded {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
}
