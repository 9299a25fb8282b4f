//! cuFile's results, decoded in one place beside CUDA's (`cuda`): the `CUfileError_t` a call
//! returns, the byte counts or negative codes of `cuFileRead`/`cuFileWrite`, and a missing
//! function of the loaded library, each turned into a [`CuFileError`] that names the call and the
//! code. The bindings themselves (`cufile-sys`) are reached through [`sys`], so that no crate
//! above the runtime decodes cuFile's codes on its own.
//!
//! Return conventions, from `cufile.h` 1.20 and NVIDIA's cuFile API reference: every call but
//! the two transfers returns a `CUfileError_t` (`err` a `CUfileOpError`, `cu_err` the CUDA result
//! when `err` is `CU_FILE_CUDA_DRIVER_ERROR`); `cuFileRead`/`cuFileWrite` return the bytes moved
//! (possibly fewer than asked), `-1` with `errno` set, or minus a `CUfileOpError` (5000 and up).

pub use cufile_sys as sys;
use cufile_sys::{CUfileError_t, CUfileOpError};
use std::io;

/// A failed cuFile call: the call, what went wrong (the code's name, or why the call could not be
/// made), and the `CUfileOpError` where cuFile returned one.
#[derive(Clone, Debug)]
pub struct CuFileError {
    call: &'static str,
    detail: String,
    code: Option<CUfileOpError>,
}

impl std::fmt::Display for CuFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.call, self.detail)
    }
}

impl std::error::Error for CuFileError {}

impl CuFileError {
    /// A failure of `call` that returned no cuFile code (a function the library lacks).
    pub fn new(call: &'static str, detail: impl Into<String>) -> Self {
        CuFileError {
            call,
            detail: detail.into(),
            code: None,
        }
    }

    /// The failed call.
    pub fn call(&self) -> &'static str {
        self.call
    }

    /// What went wrong: the name of the code returned, or why the call could not be made.
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// `call`, a function the loaded libcufile lacks (an older libcufile), as `libloading` said.
    pub fn missing_function(call: &'static str, err: &libloading::Error) -> Self {
        Self::new(call, format!("not in this libcufile ({err})"))
    }

    /// The `CUfileOpError` of the failed call (none for `-1` with errno, nor a missing function).
    pub fn code(&self) -> Option<CUfileOpError> {
        self.code
    }

    /// A failed status: the cuFile code's name and, for a CUDA driver error, the CUDA result's.
    pub fn from_status(call: &'static str, status: &CUfileError_t) -> Self {
        let mut detail = code_name(status.err);
        if status.err == CUfileOpError::CU_FILE_CUDA_DRIVER_ERROR {
            detail = format!("{detail} ({})", crate::cuda::result_name(status.cu_err));
        }
        CuFileError {
            code: Some(status.err),
            ..Self::new(call, detail)
        }
    }

    /// The cuFile error a `std::io::Error` carries, if it carries one (see [`transferred`]).
    pub fn in_io(err: &io::Error) -> Option<&CuFileError> {
        err.get_ref()?.downcast_ref::<CuFileError>()
    }
}

/// Ok where `status`, returned by `call`, reports success; else the error naming its code.
pub fn check(call: &'static str, status: &CUfileError_t) -> Result<(), CuFileError> {
    if cufile_sys::succeeded(status) {
        return Ok(());
    }
    Err(CuFileError::from_status(call, status))
}

/// The bytes a `cuFileRead`/`cuFileWrite` (`call`) moved, from its return value `ret`: a count
/// (0 is end of file for a read), or for a negative value the error. `-1` is an OS error of the
/// kind `errno` says (read here, so call this right after the transfer); minus a cuFile code is
/// an `io::Error` carrying the [`CuFileError`].
pub fn transferred(call: &'static str, ret: isize) -> io::Result<usize> {
    if ret >= 0 {
        return Ok(ret as usize);
    }
    if ret == -1 {
        let err = io::Error::last_os_error();
        return Err(io::Error::new(err.kind(), format!("{call}: {err}")));
    }
    let code = CUfileOpError(ret.unsigned_abs() as _);
    Err(io::Error::other(CuFileError {
        code: Some(code),
        ..CuFileError::new(call, code_name(code))
    }))
}

/// A function of the loaded libcufile (`name`, a field of `CuFileLib`), or the error saying the
/// library lacks it (an older libcufile).
pub fn function<'a, T>(
    field: &'a Result<T, libloading::Error>,
    name: &'static str,
) -> Result<&'a T, CuFileError> {
    field
        .as_ref()
        .map_err(|e| CuFileError::missing_function(name, e))
}

/// `cuFile error 5001 (CU_FILE_DRIVER_NOT_INITIALIZED)`; the name is left out for a code the
/// header does not list.
fn code_name(code: CUfileOpError) -> String {
    match cufile_sys::op_error_name(code) {
        Some(name) => format!("cuFile error {} ({name})", code.0),
        None => format!("cuFile error {}", code.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_call_and_the_code() {
        let status = CUfileError_t {
            err: CUfileOpError::CU_FILE_DRIVER_NOT_INITIALIZED,
            cu_err: 0,
        };
        let err = check("cuFileHandleRegister", &status).unwrap_err();
        assert!(
            err.to_string()
                .contains("cuFile error 5001 (CU_FILE_DRIVER_NOT_INITIALIZED)"),
            "{err}"
        );
        assert!(
            err.to_string().starts_with("cuFileHandleRegister: "),
            "{err}"
        );
        assert_eq!(
            err.code(),
            Some(CUfileOpError::CU_FILE_DRIVER_NOT_INITIALIZED)
        );
        let ok = CUfileError_t {
            err: CUfileOpError::CU_FILE_SUCCESS,
            cu_err: 0,
        };
        assert!(check("cuFileDriverOpen", &ok).is_ok());
        let io = transferred("cuFileRead", -5008).unwrap_err();
        assert!(io.to_string().contains("CU_FILE_IO_NOT_SUPPORTED"), "{io}");
        let carried = CuFileError::in_io(&io).and_then(CuFileError::code);
        assert_eq!(carried, Some(CUfileOpError::CU_FILE_IO_NOT_SUPPORTED));
        let unknown = transferred("cuFileWrite", -4999).unwrap_err();
        assert!(
            unknown.to_string().contains("cuFile error 4999"),
            "{unknown}"
        );
        assert_eq!(transferred("cuFileRead", 4096).unwrap(), 4096);
        assert_eq!(transferred("cuFileRead", 0).unwrap(), 0);
    }

    #[test]
    fn minus_one_is_the_os_error_errno_names() {
        // SAFETY: sets this thread's errno, as a failed cuFileRead would.
        unsafe { *libc::__errno_location() = libc::EIO };
        let err = transferred("cuFileRead", -1).unwrap_err();
        assert!(CuFileError::in_io(&err).is_none());
        assert!(err.to_string().starts_with("cuFileRead: "), "{err}");
        assert_eq!(err.raw_os_error(), None);
        assert!(err.to_string().contains("Input/output error"), "{err}");
    }

    #[test]
    fn a_missing_function_is_named() {
        let missing: Result<fn(), libloading::Error> = Err(libloading::Error::DlSymUnknown);
        let err = function(&missing, "cuFileGetVersion").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("cuFileGetVersion: not in this libcufile"),
            "{err}"
        );
        assert_eq!(err.code(), None);
    }
}
