//! Why a device transfer was refused or failed: the one error of the extension's device code,
//! raised in Python as ValueError (the caller's array or setting) or OSError (CUDA, nvCOMP or
//! HDF5 failed).

use h5gds_gpu_codec::DeviceFailure;
use h5gds_runtime::cuda::CudaError;

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

impl From<DeviceFailure> for DeviceError {
    fn from(failure: DeviceFailure) -> DeviceError {
        DeviceError::Failed(failure.to_string())
    }
}
