//! `h5gds.to_file(..., compression=...)` on all cores: the h5py face of
//! `h5gds_engine::encoded`. The dataset is created by h5py with its filter pipeline; here its
//! chunks are gathered from the host array and encoded on the driver's I/O threads, and written
//! raw (`H5Dwrite_chunk`, filter mask 0) in chunk order on the calling thread, under h5py's lock,
//! with the GIL released. Device arrays are copied into host memory first
//! (`device::copy_with_host`, through `_native.device_copy`).

use crate::error::io_error;
use crate::hdf5;
use h5gds_chunk_codec::Filter;
use h5gds_engine::encoded::{HostEncoder, Target};
use h5gds_engine::policy::settings::CallSettings;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

/// Writes the host array at `buffer` (`nbytes`, the dataset's elements row-major in its stored
/// type `file_type`; `shape` the dataset's) into every chunk (shape `chunk`) of the chunked dataset `dataset`, each
/// encoded by h5gds through `filters` (the dataset's pipeline: `(id, client values)` in order) on
/// the driver's I/O threads and written raw. Returns the number of chunks written. Every id and
/// size is checked against HDF5 first (ValueError); HDF5's failures and encoding failures raise
/// OSError naming the chunk. The caller holds h5py's lock and keeps the buffer alive.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn encode_write_chunks(
    py: Python<'_>,
    dataset: i64,
    file_type: i64,
    buffer: usize,
    nbytes: usize,
    shape: Vec<u64>,
    chunk: Vec<u64>,
    filters: Vec<(i32, Vec<u32>)>,
    dataset_name: String,
) -> PyResult<usize> {
    // The whole dataset as one write of the stored type: checks the ids, the extent and the
    // buffer's size (nothing is written through it).
    let elements: u64 = shape.iter().product();
    let ones = vec![1u64; shape.len()];
    let zeros = vec![0u64; shape.len()];
    let transfer = hdf5::Transfer {
        write: true,
        dataset,
        mem_type: file_type,
        start: &zeros,
        step: &ones,
        count: &shape,
        mem_shape: &shape,
        buffer,
        nbytes,
    };
    if hdf5::prepare(&transfer).map_err(io_error)?.is_none() {
        return Ok(0);
    }
    if chunk.len() != shape.len() || chunk.iter().zip(&shape).any(|(&c, &n)| c == 0 || c > n) {
        return Err(PyValueError::new_err(format!(
            "chunk shape {chunk:?} does not fit dataset {dataset_name} of shape {shape:?}"
        )));
    }
    let element_size = nbytes / elements as usize;
    let filters: Vec<Filter> = filters
        .into_iter()
        .map(|(id, values)| Filter { id, values })
        .collect();
    let encoder = HostEncoder::for_filters(&filters, element_size).map_err(|reason| {
        PyValueError::new_err(format!(
            "h5gds cannot encode the chunks of dataset {dataset_name}: {reason}"
        ))
    })?;
    let threads = CallSettings::default()
        .nthreads()
        .map_err(crate::error::setting_error)?;
    let written = py
        .detach(|| {
            // SAFETY: the Python caller passes the address and size of a live host buffer it
            // keeps referenced for the call (its size checked against the dataset above).
            let array = unsafe { std::slice::from_raw_parts(buffer as *const u8, nbytes) };
            let face = hdf5::h5py_face(dataset, &dataset_name, |message| message)?;
            let unencodable = |offset: &[u64], reason| {
                format!("dataset {dataset_name}: the chunk at {offset:?} could not be encoded: {reason}")
            };
            let target = Target {
                api: face.api,
                dataset,
                face: &face,
                unencodable: &unencodable,
            };
            encoder.write(target, array, &shape, &chunk, threads)
        })
        .map_err(PyOSError::new_err)?;
    h5gds::with_logging(|| {
        tracing::debug!(
            "h5gds.to_file of {dataset_name}: {written} chunks encoded on {threads} threads \
             and written raw"
        )
    });
    Ok(written)
}
