//! Why a device transfer was refused or failed: the one error of the extension's device code,
//! raised in Python as ValueError (the caller's array or setting) or OSError (CUDA, nvCOMP or
//! HDF5 failed); and the engine's one error as Python raises it, by its kind alone.

use h5gds_engine::{Error as EngineError, ErrorKind};
use h5gds_gpu_codec::DeviceFailure;
use h5gds_runtime::cuda::CudaError;
use h5gds_runtime::settings::InvalidSetting;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::PyErr;

#[derive(Debug)]
pub enum DeviceError {
    /// The array or a setting is wrong (ValueError).
    Argument(String),
    /// CUDA or HDF5 failed (OSError).
    Failed(String),
}

/// Whether the engine's error is the caller's (a ValueError) rather than a failure (OSError).
fn callers(e: &EngineError) -> bool {
    use ErrorKind::{InvalidArgument, InvalidSetting, Unsupported};
    matches!(e.kind(), InvalidSetting | InvalidArgument | Unsupported)
}

impl From<EngineError> for DeviceError {
    fn from(e: EngineError) -> DeviceError {
        match callers(&e) {
            true => DeviceError::Argument(e.to_string()),
            false => DeviceError::Failed(e.to_string()),
        }
    }
}

impl From<CudaError> for DeviceError {
    fn from(err: CudaError) -> DeviceError {
        EngineError::from(err).into()
    }
}

impl From<InvalidSetting> for DeviceError {
    fn from(invalid: InvalidSetting) -> DeviceError {
        EngineError::from(invalid).into()
    }
}

impl From<DeviceFailure> for DeviceError {
    fn from(failure: DeviceFailure) -> DeviceError {
        EngineError::from(failure).into()
    }
}

/// The engine's error (or one that folds into it) as Python raises it: ValueError for the
/// caller's arguments and settings (naming the setting and what it accepts), OSError for what
/// failed (HDF5, the file's bytes, CUDA).
pub fn engine_error(e: impl Into<EngineError>) -> PyErr {
    let e = e.into();
    match callers(&e) {
        true => PyValueError::new_err(e.to_string()),
        false => PyOSError::new_err(e.to_string()),
    }
}
