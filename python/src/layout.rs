//! Reads that need no HDF5 call (issue 26): the pyo3 face of `h5gds_engine::stored`. A dataset's
//! storage, resolved once under h5py's lock while it cannot change (the file open read-only and
//! not for SWMR reading, through sec2 or `gds` with no user block), serves `h5gds.read` into host
//! memory from any number of threads at once, with neither h5py's lock nor the GIL held while
//! bytes move; reads into device memory that would be staged anyway go through pinned memory.

use crate::device;
use crate::device_error;
use crate::gather::HostBuffer;
use crate::hdf5::{self, Hid};
use h5gds_chunk_codec::Hyperslab;
use h5gds_engine::gpu_decoded;
use h5gds_engine::policy::host_read;
use h5gds_engine::policy::settings::CallSettings;
use h5gds_engine::rows::RowPlan;
use h5gds_engine::stored::{self, Stored, StoredError};
use h5gds_route::route::Decoder;
use h5gds_runtime::pinned;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

/// A dataset's storage, resolved once; `read` serves selections of it with no HDF5 call.
#[pyclass(frozen, module = "h5gds._native")]
pub struct Layout {
    stored: Stored,
    /// The file is open with sec2 (else `gds`): the driver would stage device reads.
    sec2: bool,
}

/// Whether the file holding `dataset` is open with sec2 (`hdf5::direct_file` serves sec2 and
/// `gds` only). The caller holds h5py's lock.
fn sec2(dataset: Hid) -> bool {
    matches!(hdf5::other_driver(dataset), Ok(Some(_)))
}

/// The engine's errors as Python's: the caller's selection, buffer or settings a ValueError,
/// the file's bytes an OSError.
pub(crate) fn py_error(e: StoredError) -> PyErr {
    match e {
        StoredError::Invalid(e) => PyValueError::new_err(e),
        failed => PyOSError::new_err(failed.to_string()),
    }
}

/// The engine's debug lines, through the driver's logger, as `h5gds.read`'s.
fn log(message: std::fmt::Arguments<'_>) {
    h5gds::with_logging(|| tracing::debug!("h5gds.read of {message}"));
}

/// A device array a read fills: `nbytes` at `address`, on device `claimed_ordinal` if the array
/// says, its producer's `stream` (0: none) waited for first.
pub(crate) struct DeviceOut {
    pub address: u64,
    pub nbytes: usize,
    pub claimed_ordinal: Option<i32>,
    pub stream: u64,
}

#[pymethods]
impl Layout {
    /// The layout of `dataset` for reads into elements of `element` bytes of the memory type
    /// `mem_type` (an object dtype's never), or None where HDF5 is to read it: its file is
    /// writable or read for SWMR, it is a scalar, HDF5 would convert its elements, or its storage
    /// is neither the file's own bytes (contiguous, allocated, not external; or chunked through a
    /// pipeline h5gds decodes) nor read through sec2 or `gds` with no user block. The caller
    /// holds h5py's lock.
    #[staticmethod]
    pub(crate) fn resolve(dataset: Hid, mem_type: Hid, element: usize) -> PyResult<Option<Layout>> {
        if !hdf5::read_only_file(dataset).map_err(PyOSError::new_err)? {
            return Ok(None);
        }
        let shape = hdf5::dataset_dims(dataset).map_err(PyOSError::new_err)?;
        if shape.is_empty() {
            return Ok(None);
        }
        let facts = hdf5::dataset_facts(dataset, mem_type).map_err(PyOSError::new_err)?;
        if !facts.same_type {
            return Ok(None);
        }
        // The file's own bytes, at addresses that cannot change: then the file is opened anew.
        let own = stored::own_bytes(&facts.layout);
        let Some(file) = own.then(|| hdf5::direct_file(dataset)).flatten() else {
            return Ok(None);
        };
        let name = hdf5::object_name(dataset);
        let index = |chunk: &[u64]| hdf5::chunk_index(dataset, chunk).map_err(PyOSError::new_err);
        let resolved = Stored::resolve(name, file, shape, element, facts.layout, index, log)?;
        Ok(resolved.map(|stored| Layout {
            stored,
            sec2: sec2(dataset),
        }))
    }

    /// Reads the hyperslab (`start`, `step`, `count`) into the host buffer at `buffer`
    /// (`nbytes`: the selection's elements, row-major), with no HDF5 call and neither h5py's lock
    /// nor the GIL held. False when HDF5 is to read it (it touches chunks never written, or
    /// `H5GDS_HOST_CODEC=0` and the chunks are filtered); nothing was read then. The caller keeps
    /// the buffer alive.
    fn read(
        &self,
        py: Python<'_>,
        start: Vec<u64>,
        step: Vec<u64>,
        count: Vec<u64>,
        buffer: usize,
        nbytes: usize,
    ) -> PyResult<bool> {
        let sel = Hyperslab {
            start: &start,
            step: &step,
            count: &count,
        };
        // SAFETY: the Python caller passes the address and size of a live, writable host buffer
        // it keeps referenced for the call.
        unsafe { self.read_host(py, &sel, buffer, nbytes, &CallSettings::default()) }
    }

    /// Reads the hyperslab (`start`, `step`, `count`) into the device array at `address`
    /// (`nbytes`; on device `claimed_ordinal` if it says; its producer's `stream`, 0 for none,
    /// waited for first) where the layout serves it ([`Layout::read_into_device`]); False when
    /// the driver or HDF5 is to read it, nothing read then. The caller keeps the array alive.
    #[allow(clippy::too_many_arguments)]
    fn read_to_device(
        &self,
        py: Python<'_>,
        start: Vec<u64>,
        step: Vec<u64>,
        count: Vec<u64>,
        address: u64,
        nbytes: usize,
        claimed_ordinal: Option<i32>,
        stream: u64,
    ) -> PyResult<bool> {
        let sel = Hyperslab {
            start: &start,
            step: &step,
            count: &count,
        };
        let out = DeviceOut {
            address,
            nbytes,
            claimed_ordinal,
            stream,
        };
        self.read_into_device(py, &sel, &out, &CallSettings::default())
    }
}

impl Layout {
    /// Reads the hyperslab `sel` into the device array `out` where the read would be staged
    /// through pinned memory anyway (`device::staged_anyway`), and compressed chunks are decoded
    /// faster on the host than on the GPU (`route::choose_decoder`): read with no HDF5 call into
    /// pinned host memory, then copied up, with neither h5py's lock nor the GIL held. False when
    /// the driver or HDF5 is to read it; nothing was read then. The caller keeps the array alive.
    pub(crate) fn read_into_device(
        &self,
        py: Python<'_>,
        sel: &Hyperslab,
        out: &DeviceOut,
        settings: &CallSettings,
    ) -> PyResult<bool> {
        let nbytes = out.nbytes;
        self.stored
            .check(sel, nbytes)
            .map_err(PyValueError::new_err)?;
        if nbytes == 0 {
            return Ok(false);
        }
        let staged = device::staged_anyway(nbytes, self.sec2, settings).map_err(device_error)?;
        let Some(staged) = staged else {
            return Ok(false);
        };
        let why = &staged.why;
        if let Some(storage) = self.stored.filtered_chunks() {
            // A layout's file is open read-only, so with sec2 the stored chunks can still
            // reach the GPU, read by the host's threads (`gpu_decoded::host_reads`).
            let blocker = (staged.past_the_driver && !self.sec2).then(|| why.clone());
            let (filters, chunk) = storage;
            let read = gpu_decoded::CompressedRead {
                filters,
                chunk,
                selection: sel,
                item: self.stored.element(),
                blocker,
                // The layout resolved only with a pipeline h5gds decodes (`Stored::resolve`).
                host: Ok(()),
                host_threads: settings.nthreads().map_err(crate::error::setting_error)?,
            };
            let (choice, _) =
                gpu_decoded::decoder(read).map_err(|e| PyValueError::new_err(e.to_string()))?;
            if choice != Some(Decoder::Host) {
                return Ok(false);
            }
        }
        let Some(parts) = self.stored.serves(sel).map_err(PyValueError::new_err)? else {
            return Ok(false);
        };
        let threads = || settings.nthreads().map_err(|e| e.to_string());
        let threads = self
            .stored
            .threads_for(nbytes, &parts, &threads)
            .map_err(py_error)?;
        h5gds::with_logging(|| {
            tracing::info!(
                "h5gds.read {:?}: {nbytes} bytes into device memory through pinned host memory, \
                 read with no HDF5 call: {why}",
                self.stored.name()
            )
        });
        let (address, claimed_ordinal, stream) = (out.address, out.claimed_ordinal, out.stream);
        py.detach(|| {
            let mut host = pinned::Taken::new(nbytes);
            // SAFETY: the buffer holds at least `nbytes` bytes and is this call's alone.
            let out = unsafe { std::slice::from_raw_parts_mut(host.as_mut_ptr(), nbytes) };
            self.stored
                .read_served(sel, &parts, out, threads)
                .map_err(|e| device::DeviceError::Failed(e.to_string()))?;
            device::copy_with_host(
                address,
                nbytes,
                claimed_ordinal,
                stream,
                host.as_mut_ptr() as usize,
                true,
            )
        })
        .map_err(device_error)?;
        Ok(true)
    }

    /// Reads the hyperslab `sel` into the host buffer at `buffer` (`nbytes`), the engine's first
    /// way of a host read (`host_read::read_stored`), with the GIL released while bytes move;
    /// false where the layout does not serve it (nothing was read).
    ///
    /// # Safety
    /// `buffer` must be writable for `nbytes` bytes, and stay so until this returns.
    pub(crate) unsafe fn read_host(
        &self,
        py: Python<'_>,
        sel: &Hyperslab,
        buffer: usize,
        nbytes: usize,
        settings: &CallSettings,
    ) -> PyResult<bool> {
        // Everything runs without the GIL: threads reading small rows hold it for as little as
        // they can.
        py.detach(|| {
            // SAFETY: the caller's contract; the engine checks the size against the selection
            // before a byte is written.
            let out = unsafe { std::slice::from_raw_parts_mut(buffer as *mut u8, nbytes) };
            host_read::read_stored(&self.stored, sel, out, settings)
        })
        .map_err(py_error)
    }

    /// The engine's storage of the dataset.
    pub(crate) fn stored(&self) -> &Stored {
        &self.stored
    }

    /// The dataset's shape.
    pub(crate) fn shape(&self) -> &[u64] {
        self.stored.shape()
    }

    /// Reads a gather's rows (`plan`; each: `rest` of the other axes) straight into the caller's
    /// order (`out`: one row per index, repeats included), each run of rows that are neighbours
    /// both in the file and in the caller's order read as one piece, on the pool's threads, with
    /// no HDF5 call, no buffer of distinct rows to copy from, and neither h5py's lock nor the GIL
    /// held. For contiguous datasets and whole rows only (`rest` selects all of the other axes);
    /// false otherwise, with nothing read. The caller keeps the buffer alive.
    pub(crate) fn gather_rows_in_place(
        &self,
        py: Python<'_>,
        plan: &RowPlan,
        rest: &Hyperslab,
        out: HostBuffer,
        settings: &CallSettings,
    ) -> PyResult<bool> {
        let (runs, rows) = (plan.caller_runs(), plan.len() as u64);
        self.gather_into(py, rest, out, settings, |stored, rest, bytes, threads| {
            stored.gather_in_place(runs, rows, rest, bytes, threads)
        })
    }

    /// Reads the distinct rows of a gather's `plan` (each: `rest` of the other axes) into `out`
    /// (the rows in increasing order), its runs of rows on the pool's threads at once (compressed
    /// chunks: each chunk the runs touch decoded once on the pool, the runs' rows copied from
    /// it), with no HDF5 call and neither h5py's lock nor the GIL held. False when HDF5 is to read
    /// them; nothing was read then. The caller keeps the buffer alive.
    pub(crate) fn gather_rows(
        &self,
        py: Python<'_>,
        plan: &RowPlan,
        rest: &Hyperslab,
        out: HostBuffer,
        settings: &CallSettings,
    ) -> PyResult<bool> {
        let (runs, distinct) = (plan.runs(), plan.distinct() as u64);
        self.gather_into(py, rest, out, settings, |stored, rest, bytes, threads| {
            stored.gather(runs, distinct, rest, bytes, threads)
        })
    }

    /// Runs one of the engine's gathers (`gather`: given the storage, `rest` as a slab, the
    /// caller's buffer and its thread count) into `out`, with the GIL released.
    fn gather_into(
        &self,
        py: Python<'_>,
        rest: &Hyperslab,
        out: HostBuffer,
        settings: &CallSettings,
        gather: impl FnOnce(&Stored, &Hyperslab, &mut [u8], stored::Threads) -> Result<bool, StoredError>
            + Send,
    ) -> PyResult<bool> {
        py.detach(|| {
            // SAFETY: the Python caller passes the address and size of a live, writable host
            // buffer it keeps referenced for the call.
            let bytes =
                unsafe { std::slice::from_raw_parts_mut(out.address as *mut u8, out.nbytes) };
            let threads = || settings.nthreads().map_err(|e| e.to_string());
            gather(&self.stored, rest, bytes, &threads)
        })
        .map_err(py_error)
    }
}
