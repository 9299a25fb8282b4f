//! `h5gds.read` of chunks h5gds decodes into host memory on all cores: the h5py face of the
//! engine's decoded reads (`h5gds_engine::decoded`, which array-io uses too). The stored chunks
//! come from `hdf5::stored_chunks` (h5py's HDF5, under h5py's lock); the driver's I/O threads read
//! their bytes from the file directly where that is sound (`hdf5::direct_file`), decode them and
//! copy their elements into the output; chunks never written are read through HDF5. Pipelines
//! h5gds does not decode, and selections inside one chunk (which HDF5 serves from its chunk
//! cache), stay with HDF5.

use crate::hdf5::{self, Hid, StoredLayout};
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

/// One host read of a hyperslab of a chunked dataset whose stored type is the memory type.
pub struct DecodedHostRead<'a> {
    pub dataset: Hid,
    pub mem_type: Hid,
    pub name: &'a str,
    pub layout: &'a StoredLayout,
    pub selection: Hyperslab<'a>,
    pub element_size: usize,
    pub threads: usize,
}

/// Reads `read` (its chunks decoded by h5gds on `read.threads` of the driver's I/O threads) into
/// the host buffer at `buffer` (`nbytes`, checked with the caller's prepared transfer), the GIL
/// released. Returns None when the read is done, or why h5gds leaves it to HDF5 (nothing was
/// read). The caller holds h5py's lock and keeps the buffer alive.
pub fn read_into_host(
    py: Python<'_>,
    read: &DecodedHostRead,
    buffer: usize,
    nbytes: usize,
) -> PyResult<Option<String>> {
    let (name, selection) = (read.name, read.selection);
    let rank = selection.count.len();
    let planned = plan(read.layout, rank, read.element_size, read.threads)?.and_then(|plan| {
        let touched = decoded::chunks_touched(plan.chunk(), [selection]);
        plan.spread_over(touched, "the selection lies")
    });
    let plan = match planned {
        Ok(plan) => plan,
        Err(reason) => {
            h5gds::with_logging(|| {
                tracing::debug!("h5gds.read of {name}: HDF5 decodes its chunks: {reason}")
            });
            return Ok(Some(reason));
        }
    };
    let done = py.detach(|| {
        // SAFETY: the caller passes the address and size of a live, writable host buffer it
        // keeps referenced for the call (checked against the selection in `prepare`).
        let out = unsafe { std::slice::from_raw_parts_mut(buffer as *mut u8, nbytes) };
        let open = |touched| {
            let chunk = plan.chunk();
            hdf5::stored_chunks(read.dataset, name, chunk, touched, PyOSError::new_err)
        };
        decoded::read_hyperslab(&plan.decoding(), read.mem_type, selection, open, out)
    })?;
    h5gds::with_logging(|| tracing::debug!("h5gds.read of {name}: {done}"));
    Ok(None)
}
