//! `h5gds.read`/`h5gds.write` for device arrays, the pyo3 face of the engine's dataset handle
//! with device memory (`h5gds_engine::DeviceMemory`, which array-io hands it too): the address
//! checked with CUDA (`pointer`: device memory of a device this process sees, the whole array
//! inside one allocation), the producer's stream synchronised, then the engine moves the bytes
//! the way its policy decides (`h5gds_engine::policy::device_read`), writing the verdict lines.

mod pointer;
mod tile;

pub use pointer::{copy_with_host, device_count, with_device_array, with_device_memory};
pub use tile::write_tile;

pub use crate::error::DeviceError;

fn argument(message: String) -> DeviceError {
    DeviceError::Argument(message)
}
