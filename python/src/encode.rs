//! `h5gds.to_file(..., compression=...)`: the h5py face of the engine's compressed writes
//! (`h5gds_engine::policy::write`, which array-io's `to_file_compressed` runs too). The dataset is
//! created by h5py with its filter pipeline; the engine encodes its chunks (a device array's on
//! the GPU with nvCOMP where it can, else on the driver's I/O threads, a device array copied to
//! the host first) and writes them raw (`H5Dwrite_chunk`, filter mask 0) in chunk order on the
//! calling thread, under h5py's lock, with the GIL released.

use crate::device::with_device_array;
use crate::device_error;
use crate::error::engine_error;
use crate::hdf5;
use crate::io_call::ArrayArg;
use crate::layout::Held;
use cudarc::driver::CudaContext;
use h5gds_chunk_codec::Filter;
use h5gds_engine::{CompressedWrite, Dataset, DeviceArray, Memory};
use h5gds_route::route::{driver_blocker, Transfer as RouteFacts};
use h5gds_runtime::{cuda, settings};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// Writes `array` (an `_arrays.ArrayView` of host or device memory: the dataset's elements
/// row-major in its stored type `file_type`; `shape` the dataset's) into every chunk (shape
/// `chunk`) of the chunked dataset `dataset`, whose pipeline is `filters` (`(id, client
/// values)` in order). Returns the number of chunks written. Every id and size is checked against
/// HDF5 first (ValueError); the engine's refusals raise ValueError, HDF5's, CUDA's and the
/// encoders' failures OSError, naming the dataset (and the chunk). The caller holds h5py's lock
/// and the array.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn encode_write_chunks(
    py: Python<'_>,
    dataset: i64,
    file_type: i64,
    array: ArrayArg<'_>,
    shape: Vec<u64>,
    chunk: Vec<u64>,
    filters: Vec<(i32, Vec<u32>)>,
    dataset_name: String,
) -> PyResult<usize> {
    crate::thread_end::guarded(|| {
        let (address, nbytes) = (array.address, array.nbytes);
        let filters: Vec<Filter> = (filters.into_iter())
            .map(|(id, values)| Filter { id, values })
            .collect();
        let path = settings::environment_device_path()
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let staged = !settings::goes_through_gds(path);
        let facts = RouteFacts {
            staged_by_settings: staged,
            other_driver: hdf5::other_driver(dataset).map_err(engine_error)?,
            ..RouteFacts::default()
        };
        let w = CompressedWrite {
            shape: &shape,
            chunk: &chunk,
            // An empty array's elements have no size to learn (the handle writes no chunk).
            element_size: nbytes
                .checked_div(shape.iter().product::<u64>() as usize)
                .unwrap_or(0),
            filters: &filters,
            driver_blocker: driver_blocker(&facts),
        };
        let device = array.device.as_ref().map(|(_, ordinal)| *ordinal);
        let stream = array.stream;
        let name = &dataset_name;
        let api = hdf5::api().map_err(PyValueError::new_err)?;
        crate::thread_end::detached(py, || {
            // h5py's lock is the caller's; the GIL is released here.
            let handle = Dataset::new(api, dataset, file_type, w.element_size, Held).named(name);
            // An empty array, host or device, holds no byte to reach: the handle checks that the
            // dataset is empty too, and writes no chunk.
            let Some(claimed_ordinal) = device.filter(|_| nbytes > 0) else {
                let host: &[u8] = match nbytes {
                    0 => &[],
                    // SAFETY: the Python caller passes the address and size of a live host
                    // buffer it keeps referenced for the call (its size checked against the
                    // dataset by the handle's write_chunks).
                    _ => unsafe { std::slice::from_raw_parts(address as *const u8, nbytes) },
                };
                return Ok(handle.write_chunks(&w, Memory::Host(host))?);
            };
            with_device_array((address, nbytes), claimed_ordinal, stream, |context| {
                let device = context.device as usize;
                let made = cuda::call("making the array's device's context", || {
                    CudaContext::new(device)
                })?;
                let stream = made.default_stream();
                let array = DeviceArray {
                    address,
                    stream: &stream,
                };
                Ok(handle.write_chunks(&w, Memory::Device(array, nbytes))?)
            })
        })
        .map_err(device_error)
    })
}
