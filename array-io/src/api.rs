//! The crate's functions: a whole array to or from a file in one call ([`to_file`],
//! [`from_file`], [`from_file_batched`] and their device and `_with` forms, and
//! [`to_file_compressed`]), each handing its arguments to the host or device path; and the two
//! process-wide helpers ([`release_pinned_buffers`], [`gpu_codec_status`]).

use crate::batched::{self, Batches, DeviceBatches};
use crate::device::{self, DeviceArray, IntoStream};
use crate::element::Element;
use crate::error::Result;
use crate::host;
use crate::options::{ReadOptions, Settings};
use crate::route::{FILTER_DEFLATE, FILTER_LZ4, FILTER_ZSTD};
use crate::select::Block;
use h5gds_chunk_codec::Filter;
use ndarray::{ArrayBase, ArrayD, Data, Dimension};
use std::path::Path;

/// Frees the pinned host buffers that staged transfers keep for reuse and that no transfer is
/// using now (as CuPy's pinned memory pool's `free_all_blocks` does); returns how many. A later
/// staged transfer pins what it needs again.
pub fn release_pinned_buffers() -> usize {
    h5gds_runtime::pinned::release_idle()
}

/// Whether compressed chunks can be decoded and encoded on the GPU in this process: `Ok` when
/// nvCOMP (`libnvcomp.so.6`) loads, else why not. Reads and writes work either way (HDF5's CPU
/// filters then do the work); `H5GDS_LOG=debug` says per dataset which path was taken.
pub fn gpu_codec_status() -> std::result::Result<(), String> {
    h5gds_gpu_codec::nvcomp::library().map(drop)
}

/// Something [`to_file`] can write: a host array (`ndarray`, any dimension, any memory order)
/// or a [`DeviceArray`].
pub trait ToFile {
    #[doc(hidden)]
    fn write_to(&self, path: &Path, dataset: &str, settings: &Settings) -> Result<()>;
}

impl<T, S, D> ToFile for ArrayBase<S, D>
where
    T: Element,
    S: Data<Elem = T>,
    D: Dimension,
{
    fn write_to(&self, path: &Path, dataset: &str, settings: &Settings) -> Result<()> {
        host::write(self, path, dataset, settings)
    }
}

impl<T: Element> ToFile for DeviceArray<T> {
    fn write_to(&self, path: &Path, dataset: &str, settings: &Settings) -> Result<()> {
        device::write(self, path, dataset, settings)
    }
}

/// The codec [`to_file_compressed`] encodes chunks with, and the HDF5 filter that names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// HDF5's deflate filter (1), h5py's `compression="gzip"`.
    Deflate,
    /// The Zstandard filter (32015), hdf5plugin's `Zstd`.
    Zstd,
    /// The LZ4 filter (32004), hdf5plugin's `LZ4`; chunks of at most 16 MiB on the GPU.
    Lz4,
}

impl Compression {
    /// The filter and its client data as HDF5 and hdf5plugin write them: deflate level 1
    /// (nvCOMP's default is its fast algorithm), Zstandard level 3 (hdf5plugin's default; the
    /// value only informs), LZ4 block size 0 (the filter's default; the header has the real one).
    fn filter(self) -> Filter {
        let (id, level) = match self {
            Compression::Deflate => (FILTER_DEFLATE, 1),
            Compression::Zstd => (FILTER_ZSTD, 3),
            Compression::Lz4 => (FILTER_LZ4, 0),
        };
        Filter {
            id,
            values: vec![level],
        }
    }
}

/// Writes a device array as chunked dataset `dataset` of a new file at `path` (replacing it, as
/// [`to_file`]), in chunks of `chunk` elements (one positive entry per dimension, each at most
/// the array's length there), compressed with `compression`; edge chunks are stored whole, the
/// part outside the array zero. With the `gds` driver and nvCOMP, the chunks are encoded on the
/// GPU and written from device memory; else the array is copied to the host and h5gds encodes
/// its chunks on the host's cores (`h5gds_engine::policy::write` decides, for the Python package
/// too; `H5GDS_LOG=debug` says which). h5py reads the file (with hdf5plugin for Zstandard and
/// LZ4).
pub fn to_file_compressed<T: Element>(
    array: &DeviceArray<T>,
    path: impl AsRef<Path>,
    dataset: &str,
    chunk: &[usize],
    compression: Compression,
) -> Result<()> {
    device::write_compressed(array, path.as_ref(), dataset, chunk, compression.filter())
}

/// Writes `array` as dataset `dataset` (an absolute path such as `/x` or `/group/x`; missing
/// groups are created) of a new HDF5 file at `path`.
///
/// **Destructive**: an existing file at `path` is replaced, with everything in it: the new file is
/// written beside it under a hidden name and renamed over it once complete, so a failed write (or
/// a killed process) leaves the old file. Missing parent directories are created. A device
/// array is written once the streams that produced it are done, straight from GPU memory
/// through the `gds` driver (or through the staged path, see the crate documentation).
///
/// Errors name the culprit: `path` is a directory; `dataset` is empty or not an absolute path;
/// the element type has no HDF5 type (`i128`, `u128`).
pub fn to_file<A: ToFile + ?Sized>(array: &A, path: impl AsRef<Path>, dataset: &str) -> Result<()> {
    array.write_to(path.as_ref(), dataset, &Settings::default())
}

/// [`to_file`] with explicit settings (unset fields come from the environment).
pub fn to_file_with<A: ToFile + ?Sized>(
    array: &A,
    path: impl AsRef<Path>,
    dataset: &str,
    settings: &Settings,
) -> Result<()> {
    array.write_to(path.as_ref(), dataset, settings)
}

/// Reads dataset `dataset` of the file at `path` into a host array.
///
/// Errors: the file does not exist; there is no such dataset (the message lists those that
/// exist); the name is a group; the stored element type is not `T` (the message names both;
/// see [`from_file_with`] to allow conversion).
pub fn from_file<T: Element>(path: impl AsRef<Path>, dataset: &str) -> Result<ArrayD<T>> {
    from_file_with(path, dataset, &ReadOptions::default())
}

/// [`from_file`] with options (type conversion, settings).
pub fn from_file_with<T: Element>(
    path: impl AsRef<Path>,
    dataset: &str,
    options: &ReadOptions,
) -> Result<ArrayD<T>> {
    host::read(path.as_ref(), dataset, options, whole)
}

/// Reads rows of dataset `dataset` of the file at `path` into a host array with one row per
/// index of `rows` (indices along the first axis, in any order, repeats allowed, negative ones
/// counting from the end as in NumPy): a gather. The distinct rows are read with one `H5Dread`
/// of the union of their runs, then copied into the caller's order.
///
/// Errors: those of [`from_file`]; an index out of range
/// ([`Error::RowOutOfRange`](crate::Error::RowOutOfRange), naming it and the axis size, before
/// anything is read); a scalar dataset.
pub fn from_file_rows<T: Element>(
    path: impl AsRef<Path>,
    dataset: &str,
    rows: &[i64],
) -> Result<ArrayD<T>> {
    host::read_rows(path.as_ref(), dataset, rows, &ReadOptions::default())
}

/// Reads dataset `dataset` of the file at `path` into device memory, on `stream` (a cudarc
/// `Arc<CudaStream>`, or an `Arc<CudaContext>` for its default stream). Errors as
/// [`from_file`].
pub fn from_file_to_device<T: Element>(
    path: impl AsRef<Path>,
    dataset: &str,
    stream: impl IntoStream,
) -> Result<DeviceArray<T>> {
    from_file_to_device_with(path, dataset, stream, &ReadOptions::default())
}

/// [`from_file_to_device`] with options (type conversion, settings).
pub fn from_file_to_device_with<T: Element>(
    path: impl AsRef<Path>,
    dataset: &str,
    stream: impl IntoStream,
    options: &ReadOptions,
) -> Result<DeviceArray<T>> {
    device::read(path.as_ref(), dataset, stream.into_stream(), options, whole)
}

/// Reads dataset `dataset` in chunks of `chunk_shape` into host arrays: an iterator of
/// `(chunk, offsets)` in row-major order of the chunks, boundary chunks clipped (a length of 5
/// in chunks of 2 gives 2, 2, 1), each read touching only its own elements.
///
/// `chunk_shape` needs one positive entry per dimension of the dataset, or this fails saying so.
pub fn from_file_batched<T: Element>(
    path: impl AsRef<Path>,
    dataset: &str,
    chunk_shape: &[usize],
) -> Result<Batches<T>> {
    from_file_batched_with(path, dataset, chunk_shape, &ReadOptions::default())
}

/// [`from_file_batched`] with options.
pub fn from_file_batched_with<T: Element>(
    path: impl AsRef<Path>,
    dataset: &str,
    chunk_shape: &[usize],
    options: &ReadOptions,
) -> Result<Batches<T>> {
    batched::host(path.as_ref(), dataset, options, chunk_shape)
}

/// [`from_file_batched`] into device memory: each chunk a [`DeviceArray`] on `stream`.
pub fn from_file_batched_to_device<T: Element>(
    path: impl AsRef<Path>,
    dataset: &str,
    chunk_shape: &[usize],
    stream: impl IntoStream,
) -> Result<DeviceBatches<T>> {
    let options = ReadOptions::default();
    from_file_batched_to_device_with(path, dataset, chunk_shape, stream, &options)
}

/// [`from_file_batched_to_device`] with options.
pub fn from_file_batched_to_device_with<T: Element>(
    path: impl AsRef<Path>,
    dataset: &str,
    chunk_shape: &[usize],
    stream: impl IntoStream,
    options: &ReadOptions,
) -> Result<DeviceBatches<T>> {
    batched::device(
        path.as_ref(),
        dataset,
        options,
        stream.into_stream(),
        chunk_shape,
    )
}

/// The whole of a dataset of `shape` (what the reads of a whole dataset read).
fn whole(shape: &[u64]) -> Result<Block> {
    Ok(Block::whole(shape))
}
