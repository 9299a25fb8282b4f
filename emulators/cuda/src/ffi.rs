//! The C boundary: every exported function runs its body through [`call`], which catches panics
//! (a panic never crosses into C; the caller gets an error code instead) and writes the trace
//! line of `H5GDS_EMU_TRACE=1`. Also errno and stderr helpers usable from any thread, at any
//! time (they write with one `write(2)` call and never panic).

use crate::consts::CUresult;
use cufile_sys::{CUfileError_t, CUfileOpError};
use std::ffi::c_int;
use std::fmt::{self, Write as _};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// A value an exported function returns, as the trace shows it.
pub trait Outcome {
    fn describe(&self, out: &mut String);
    /// What the function returns when the CUDA driver fails it with `code` before it runs
    /// (see `lifecycle::refuse`).
    fn refused(code: CUresult) -> Self;
}

impl Outcome for c_int {
    fn describe(&self, out: &mut String) {
        let _ = write!(out, "{self}");
        if let Some(name) = crate::errors::name(*self) {
            let _ = write!(out, " ({})", name.to_string_lossy());
        }
    }
    fn refused(code: CUresult) -> Self {
        code
    }
}

impl Outcome for isize {
    fn describe(&self, out: &mut String) {
        let _ = write!(out, "{self}");
        if *self == -1 {
            let _ = write!(out, " (errno {})", errno());
        }
    }
    /// cuFile reports a failed CUDA driver call as CU_FILE_CUDA_DRIVER_ERROR.
    fn refused(_code: CUresult) -> Self {
        -(CUfileOpError::CU_FILE_CUDA_DRIVER_ERROR.0 as isize)
    }
}

impl Outcome for CUfileError_t {
    fn describe(&self, out: &mut String) {
        let _ = write!(out, "{{err: {}, cu_err: {}}}", self.err.0, self.cu_err);
    }
    fn refused(code: CUresult) -> Self {
        cufile_status(CUfileOpError::CU_FILE_CUDA_DRIVER_ERROR, code)
    }
}

impl Outcome for () {
    fn describe(&self, out: &mut String) {
        out.push_str("void");
    }
    fn refused(_code: CUresult) -> Self {}
}

/// Runs `body`, the work of exported function `name` called with `args`. A panic in `body`
/// becomes `on_panic()` plus a line on stderr. A call the process may no longer make (from a
/// forked child, after a sticky error: see `lifecycle`) fails without running `body`. With tracing on, writes one line per call
/// (errno is preserved across the tracing).
pub fn call<R: Outcome>(
    name: &str,
    args: fmt::Arguments<'_>,
    on_panic: impl FnOnce() -> R,
    body: impl FnOnce() -> R,
) -> R {
    let refusal = catch_unwind(AssertUnwindSafe(|| crate::lifecycle::refuse(name)));
    let result = match refusal {
        Ok(Some(code)) => Ok(R::refused(code)),
        _ => catch_unwind(AssertUnwindSafe(body)),
    };
    let result = match result {
        Ok(result) => result,
        Err(_) => {
            crate::stderr::stderr_line(&format!(
                "h5gds-emu: internal error (panic) in {name}; returning an error"
            ));
            on_panic()
        }
    };
    let traced = catch_unwind(AssertUnwindSafe(|| {
        if crate::switches::get().trace {
            let saved = errno();
            let mut line = String::with_capacity(128);
            let _ = write!(
                line,
                "h5gds-emu[{}:{}] {name}({args}) = ",
                std::process::id(),
                thread_id()
            );
            result.describe(&mut line);
            crate::stderr::stderr_line(&line);
            set_errno(saved);
        }
    }));
    drop(traced);
    result
}

/// The `CUresult` an exported CUDA function returns when its body panicked.
pub fn cuda_panic() -> CUresult {
    crate::consts::CUDA_ERROR_UNKNOWN
}

/// The status an exported cuFile function returns when its body panicked.
pub fn cufile_panic() -> CUfileError_t {
    cufile_status(CUfileOpError::CU_FILE_INTERNAL_ERROR, 0)
}

/// A `CUfileError_t`.
pub fn cufile_status(err: CUfileOpError, cu_err: CUresult) -> CUfileError_t {
    CUfileError_t { err, cu_err }
}

/// Collapses a `Result` of a CUDA call into its `CUresult`.
pub fn code(result: Result<(), CUresult>) -> CUresult {
    match result {
        Ok(()) => crate::consts::CUDA_SUCCESS,
        Err(code) => code,
    }
}

pub use crate::stderr::errno;

/// Sets the calling thread's errno.
pub fn set_errno(value: c_int) {
    // SAFETY: __errno_location returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = value };
}

/// The kernel's id of the calling thread.
fn thread_id() -> i64 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) }
}

/// Stores `value` through the caller's output pointer `out`; a null pointer is
/// CUDA_ERROR_INVALID_VALUE.
///
/// # Safety
/// `out` must be null or valid for a write of `T` (alignment not required).
pub unsafe fn put<T>(out: *mut T, value: T) -> Result<(), CUresult> {
    if out.is_null() {
        return Err(crate::consts::CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null, and the caller guarantees it points to writable memory for a T.
    unsafe { out.write_unaligned(value) };
    Ok(())
}
