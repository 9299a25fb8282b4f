//! Why a device transfer was refused or failed: the one error of the extension's device code,
//! raised in Python as ValueError (the caller's array or setting) or OSError (CUDA, nvCOMP or
//! HDF5 failed).

use crate::hdf5::IoError;
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

impl From<CudaError> for DeviceError {
    fn from(err: CudaError) -> DeviceError {
        DeviceError::Failed(err.to_string())
    }
}

impl From<InvalidSetting> for DeviceError {
    fn from(invalid: InvalidSetting) -> DeviceError {
        DeviceError::Argument(invalid.to_string())
    }
}

impl From<DeviceFailure> for DeviceError {
    fn from(failure: DeviceFailure) -> DeviceError {
        DeviceError::Failed(failure.to_string())
    }
}

/// An invalid setting as Python raises it: a ValueError naming the setting and what it accepts.
pub fn setting_error(invalid: InvalidSetting) -> PyErr {
    PyValueError::new_err(invalid.to_string())
}

/// HDF5's refusals as Python raises them: ValueError for the caller's arguments, OSError for
/// HDF5's failures.
pub fn io_error(e: IoError) -> PyErr {
    match e {
        IoError::Argument(message) => PyValueError::new_err(message),
        IoError::Hdf5(message) => PyOSError::new_err(message),
    }
}
