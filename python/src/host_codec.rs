//! `h5gds.read` of chunks h5gds decodes into host memory on all cores: the h5py face of the
//! engine's decoded reads (`h5gds_engine::decoded`, which array-io uses too). The stored chunks
//! come from `hdf5::stored_chunks` (h5py's HDF5, under h5py's lock); the driver's I/O threads read
//! their bytes from the file directly where that is sound (`hdf5::direct_file`), decode them and
//! copy their elements into the output; chunks never written are read through HDF5. Pipelines
//! h5gds does not decode, and selections inside one chunk (which HDF5 serves from its chunk
//! cache), stay with HDF5.

use crate::hdf5::{self, StoredLayout};
use h5gds_chunk_codec::Hyperslab;
use h5gds_engine::decoded::{self, Plan};
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::{PyResult, Python};

/// How h5gds decodes the chunks of a dataset of `rank` axes stored as `layout`, read in its
/// stored type (`element_size` bytes) on `threads` threads; or why HDF5 does.
pub fn plan(
    layout: &StoredLayout,
    rank: usize,
    element_size: usize,
    threads: usize,
) -> PyResult<Result<Plan, String>> {
    let declined = decoded::declined(None).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(declined.map_or_else(|| decoded::plan(layout, rank, element_size, threads), Err))
}

/// Reads `t` (a read of a chunked dataset stored as `layout` in its stored type, its host buffer
/// checked by `hdf5::prepare`), its chunks decoded by h5gds on `threads` of the driver's I/O
/// threads, the GIL released. False, having read nothing, where h5gds leaves the read to HDF5.
/// The caller holds h5py's lock and keeps the buffer alive.
pub fn read(
    py: Python<'_>,
    t: &hdf5::Transfer,
    layout: &StoredLayout,
    threads: usize,
) -> PyResult<bool> {
    let name = hdf5::object_name(t.dataset);
    let selection = Hyperslab {
        start: t.start,
        step: t.step,
        count: t.count,
    };
    let elements: u64 = t.count.iter().product();
    let element_size = t.nbytes / elements as usize;
    let planned = plan(layout, t.count.len(), element_size, threads)?.and_then(|plan| {
        let touched = decoded::chunks_touched(plan.chunk(), [selection]);
        plan.spread_over(touched, "the selection lies")
    });
    let plan = match planned {
        Ok(plan) => plan,
        Err(reason) => {
            h5gds::with_logging(|| {
                tracing::debug!("h5gds.read of {name}: HDF5 decodes its chunks: {reason}")
            });
            return Ok(false);
        }
    };
    let done = py.detach(|| {
        // SAFETY: the caller passes the address and size of a live, writable host buffer it
        // keeps referenced for the call (checked against the selection in `prepare`).
        let out = unsafe { std::slice::from_raw_parts_mut(t.buffer as *mut u8, t.nbytes) };
        let open = |touched| {
            let chunk = plan.chunk();
            hdf5::stored_chunks(t.dataset, &name, chunk, touched, PyOSError::new_err)
        };
        decoded::read_hyperslab(&plan.decoding(), t.mem_type, selection, open, out)
    })?;
    h5gds::with_logging(|| tracing::debug!("h5gds.read of {name}: {done}"));
    Ok(true)
}
