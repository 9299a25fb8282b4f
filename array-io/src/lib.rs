//! array-io: whole arrays to and from HDF5 files in one call, on the host (`ndarray`) or on a GPU
//! ([`DeviceArray`], a cudarc allocation plus its shape), with the fastest correct path chosen.
//!
//! ```no_run
//! use ndarray::array;
//! # fn main() -> array_io::Result<()> {
//! let a = array![[1.0f32, 2.0], [3.0, 4.0]];
//! array_io::to_file(&a, "out/data.h5", "/group/x")?; // replaces out/data.h5
//! let b = array_io::from_file::<f32>("out/data.h5", "/group/x")?;
//! assert_eq!(b, a.into_dyn());
//! for chunk in array_io::from_file_batched::<f32>("out/data.h5", "/group/x", &[1, 2])? {
//!     let (chunk, offsets) = chunk?;
//!     println!("{offsets:?}: {chunk}");
//! }
//! # Ok(()) }
//! ```
//!
//! GPU memory goes straight between the file and the device through h5gds's `gds` HDF5 driver
//! (registered in this process; no plugin path needed) wherever HDF5 would not touch the buffer
//! itself — contiguous datasets, and unfiltered chunked datasets chunk by chunk — and through
//! pinned host memory otherwise: filtered (compressed) chunks, chunks or storage never written
//! (HDF5 writes fill values itself), compact, external and virtual storage, type conversion,
//! and `bool` (whose bytes are checked to be 0 or 1). Two environment variables choose the
//! path:
//!
//! * `H5GDS_USE_VFD_GDS`: `1` = through the `gds` driver; `0` = the staged path (sec2 into a
//!   host staging buffer, then copied); unset = the driver when CUDA works in this process.
//! * `H5GDS_STAGING_BUFFER_SIZE`: the staging buffer (default `128M`; `K`/`M`/`G` suffixes).
//!   Data of any size moves through it in pieces, two buffers taking turns. The buffers are
//!   pinned once and kept for later transfers in a process-wide pool (never freed at exit, where
//!   freeing pinned memory can race CUDA's teardown); [`release_pinned_buffers`] frees the idle
//!   ones.
//!
//! `H5GDS_LOG=debug` logs, per read, which path each part took and why.

#![deny(unsafe_op_in_unsafe_fn)]

mod api;
mod batched;
#[cfg(feature = "mpi")]
pub mod collective;
mod device;
mod driver;
mod element;
mod error;
mod file;
pub mod hdf5_raw;
mod host;
mod layout;
mod log;
mod options;
pub mod transfer;
pub use h5gds_route::route;
use h5gds_route::select;
#[cfg(feature = "mpi")]
mod host_staging;

pub use api::{
    from_file, from_file_batched, from_file_batched_to_device, from_file_batched_to_device_with,
    from_file_batched_with, from_file_rows, from_file_to_device, from_file_to_device_with,
    from_file_with, gpu_codec_status, release_pinned_buffers, to_file, to_file_compressed,
    to_file_with, Compression, ToFile,
};
pub use batched::{Batches, DeviceBatches};
pub use device::{DeviceArray, IntoStream};
pub use driver::{gds_driver, Registration};
pub use element::Element;
pub use error::{Error, Result};
pub use h5gds_runtime::settings::{GPU_CODEC_ENV, VERIFY_CHECKSUMS_ENV};
pub use options::{
    DevicePath, ReadOptions, Settings, DEFAULT_STAGING_BUFFER_SIZE, MIN_STAGING_BUFFER_SIZE,
    STAGING_BUFFER_SIZE_ENV, USE_VFD_GDS_ENV,
};
