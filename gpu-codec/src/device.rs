//! The GPU codec's error, [`DeviceFailure`]: a CUDA call (made through `h5gds_runtime`, which
//! turns cudarc's panics into errors) or an nvCOMP call that failed, with what was being done.

use h5gds_runtime::cuda::CudaError;

/// A CUDA or nvCOMP call that failed: what was being done, and what went wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceFailure {
    pub op: String,
    pub message: String,
}

impl DeviceFailure {
    pub fn new(op: impl Into<String>, message: impl std::fmt::Display) -> DeviceFailure {
        DeviceFailure {
            op: op.into(),
            message: message.to_string(),
        }
    }
}

impl std::fmt::Display for DeviceFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed: {}", self.op, self.message)
    }
}

impl From<CudaError> for DeviceFailure {
    fn from(err: CudaError) -> DeviceFailure {
        DeviceFailure::new(err.call(), err.detail())
    }
}

pub fn align_up(n: usize, align: usize) -> usize {
    n.div_ceil(align) * align
}
