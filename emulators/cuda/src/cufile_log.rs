//! cuFile's log file, and the string parameters that place it.
//!
//! Real cuFile writes `cufile.log` "in the current working directory of the application" unless
//! told otherwise (NVIDIA GPUDirect Storage troubleshooting guide, "Enabling a Different
//! cufile.log File for Each Application": the `CUFILE_LOGFILE_PATH` environment variable names
//! the file; cufile.json's `"logging": {"dir": ...}` names a directory). cuFile 1.20's `cufile.h`
//! adds `cuFileSetParameterString` with CUFILE_PARAM_ENV_LOGFILE_PATH and CUFILE_PARAM_LOG_DIR:
//! "Setting values is only permitted when the driver is not open" (else
//! CU_FILE_DRIVER_ALREADY_OPEN), and "Parameter precedence (highest to lowest) is:
//! cuFileSetParameter*() (if set), then environment variable (if exists and set), then
//! cufile.json"; `cuFileGetParameterString` returns the staged value before the driver opens.
//!
//! The emulator writes one line when the driver opens: to the ENV_LOGFILE_PATH parameter's file,
//! else `CUFILE_LOGFILE_PATH`'s, else `cufile.log` in the LOG_DIR parameter's directory, else
//! `cufile.log` in the working directory. It reads no cufile.json.

use std::ffi::CString;
use std::io::Write as _;
use std::sync::Mutex;

/// Staged string parameters: (ENV_LOGFILE_PATH, LOG_DIR).
static STAGED: Mutex<(Option<CString>, Option<CString>)> = Mutex::new((None, None));

fn staged() -> std::sync::MutexGuard<'static, (Option<CString>, Option<CString>)> {
    STAGED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The parameter slot of `param` (0 LOGGING_LEVEL, 1 ENV_LOGFILE_PATH, 2 LOG_DIR, 3
/// RDMA_TRANSPORT); only the two log places are kept, the others are accepted and ignored.
pub fn set(param: u32, value: CString) -> bool {
    let mut s = staged();
    match param {
        1 => s.0 = Some(value),
        2 => s.1 = Some(value),
        0 | 3 => {}
        _ => return false,
    }
    true
}

/// The staged value of `param` ("" when unset); None for an unknown parameter.
pub fn get(param: u32) -> Option<CString> {
    let s = staged();
    match param {
        1 => Some(s.0.clone().unwrap_or_default()),
        2 => Some(s.1.clone().unwrap_or_default()),
        0 | 3 => Some(CString::default()),
        _ => None,
    }
}

/// Where the log goes, by cuFile's precedence.
pub fn log_path() -> std::path::PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let s = staged();
    let as_path = |c: &CString| std::path::PathBuf::from(std::ffi::OsStr::from_bytes(c.as_bytes()));
    if let Some(file) = s.0.as_ref().filter(|c| !c.is_empty()) {
        return as_path(file);
    }
    if let Some(file) = std::env::var_os("CUFILE_LOGFILE_PATH").filter(|f| !f.is_empty()) {
        return file.into();
    }
    match s.1.as_ref().filter(|c| !c.is_empty()) {
        Some(dir) => as_path(dir).join("cufile.log"),
        None => "cufile.log".into(),
    }
}

/// The driver opened: one line in the log (a failure to write it is ignored, as cuFile's is).
pub fn driver_opened() {
    let path = log_path();
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    {
        let _ = writeln!(
            f,
            "h5gds CUDA emulator: cuFile driver opened (pid {})",
            std::process::id()
        );
    }
}

/// A handle registration refused (`H5GDS_EMU_CUFILE_REGISTER_ERROR`): the lines the first
/// real-GPU machine's cufile.log held for it (an H200 VM whose virtio disk udev describes
/// without a file-system usage, so cuFile cannot read the volume's attributes).
pub fn handle_not_registered(code: u32) {
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path())
    {
        let _ = writeln!(
            f,
            "h5gds CUDA emulator: udev property not found: ID_FS_USAGE vda\n\
             h5gds CUDA emulator: error getting volume attributes error for device: dev_no: 254:0\n\
             h5gds CUDA emulator: cuFileHandleRegister error, failed to allocate file object \
             (cuFile error {code})"
        );
    }
}
