//! Reads that need no HDF5 call (issue 26): the pyo3 face of what the engine keeps of a dataset
//! (`h5gds_engine::Kept`). A dataset's storage, resolved once under h5py's lock while it cannot
//! change (the file open read-only and not for SWMR reading, through sec2 or `gds` with no user
//! block), serves `h5gds.read` into host memory from any number of threads at once, with neither
//! h5py's lock nor the GIL held while bytes move, and into device memory where the engine's stored
//! way takes it.

use crate::device::with_device_memory;
use crate::device_error;
use crate::error::engine_error;
use crate::hdf5::{self, Hid};
use h5gds_chunk_codec::Hyperslab;
use h5gds_engine::{Dataset, DeviceMemory, Hdf5Lock, Kept};
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;

/// What the engine keeps of a dataset whose storage it reads with no HDF5 call.
#[pyclass(frozen, module = "h5gds._native")]
pub struct Layout {
    kept: Kept,
}

/// h5py's lock, already held by the caller around the whole request.
pub(crate) struct Held;

impl Hdf5Lock for Held {}

/// A device array a read fills: `nbytes` at `address`, on device `claimed_ordinal` if the array
/// says, its producer's `stream` (0: none) waited for first; `bools`: of bools, whose bytes are
/// checked on their way.
pub(crate) struct DeviceOut {
    pub address: u64,
    pub nbytes: usize,
    pub claimed_ordinal: Option<i32>,
    pub stream: u64,
    pub bools: bool,
}

#[pymethods]
impl Layout {
    /// The layout of `dataset` for reads into elements of `element` bytes of the memory type
    /// `mem_type` (an object dtype's never), or None where HDF5 is to read it
    /// (`h5gds_engine::Dataset::reads_stored` says when). The caller holds h5py's lock.
    #[staticmethod]
    pub(crate) fn resolve(dataset: Hid, mem_type: Hid, element: usize) -> PyResult<Option<Layout>> {
        let api = hdf5::api().map_err(PyOSError::new_err)?;
        let kept = Kept::across_calls();
        let handle = Dataset::new(api, dataset, mem_type, element, Held).keeping(&kept);
        let serves = handle.reads_stored().map_err(engine_error)?;
        drop(handle);
        Ok(serves.then_some(Layout { kept }))
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
        unsafe { self.read_host(py, &sel, buffer, nbytes) }
    }

    /// Reads the hyperslab (`start`, `step`, `count`) into the device array at `address`
    /// (`nbytes`; on device `claimed_ordinal` if it says; its producer's `stream`, 0 for none,
    /// waited for first) where the stored way takes it ([`Layout::read_into_device`]); False when
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
            bools: false,
        };
        self.read_into_device(py, &sel, &out, &Kept::default())
    }
}

impl Layout {
    /// Reads the hyperslab `sel` into the device array `out` where the engine's stored way takes
    /// it (read with no HDF5 call into pinned host memory, then copied up), with neither h5py's
    /// lock nor the GIL held. False when the driver or HDF5 is to read it; nothing was read then.
    /// The caller keeps the array alive; the settings are those of the face call `call`.
    pub(crate) fn read_into_device(
        &self,
        py: Python<'_>,
        sel: &Hyperslab,
        out: &DeviceOut,
        call: &Kept,
    ) -> PyResult<bool> {
        let (address, nbytes, bools) = (out.address, out.nbytes, out.bools);
        if nbytes == 0 {
            return Ok(false);
        }
        crate::thread_end::detached(py, || {
            let at = (address, nbytes);
            with_device_memory("out", at, out.claimed_ordinal, out.stream, |context| {
                let memory = DeviceMemory::in_context(address, nbytes, context, bools);
                Ok(self.kept.read_in(call, *sel, memory)?)
            })
        })
        .map_err(device_error)
    }

    /// Reads the hyperslab `sel` into the host buffer at `buffer` (`nbytes`) with no HDF5 call,
    /// with the GIL released while bytes move; false where the layout does not serve it (nothing
    /// was read).
    ///
    /// # Safety
    /// `buffer` must be writable for `nbytes` bytes, and stay so until this returns.
    pub(crate) unsafe fn read_host(
        &self,
        py: Python<'_>,
        sel: &Hyperslab,
        buffer: usize,
        nbytes: usize,
    ) -> PyResult<bool> {
        // Everything runs without the GIL: threads reading small rows hold it for as little as
        // they can.
        crate::thread_end::detached(py, || {
            // SAFETY: the caller's contract; the engine checks the size against the selection
            // before a byte is written.
            let out = unsafe { std::slice::from_raw_parts_mut(buffer as *mut u8, nbytes) };
            self.kept.read(*sel, out)
        })
        .map_err(engine_error)
    }

    /// The dataset's shape.
    pub(crate) fn shape(&self) -> &[u64] {
        self.kept.shape().unwrap_or_default()
    }

    /// What the engine keeps of the dataset, for its handles (reads through HDF5, gathers).
    pub(crate) fn kept(&self) -> &Kept {
        &self.kept
    }
}
