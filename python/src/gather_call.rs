//! `h5gds.read(dset, sel=rows)` in one native call (`gather_dataset`): rows along the first axis
//! named by a 1-D integer array (Python checked and converted it), in any order, repeats
//! included, read through the engine's dataset handle (`h5gds_engine::Dataset`) the way
//! `h5gds_engine::policy::gather` decides: a read-only file's dataset with a layout with no HDF5
//! call and neither h5py's lock nor the GIL held, else through h5py's HDF5 under its lock. A
//! device output, checked first, gets the rows gathered in host memory by the handle, checked
//! (bools) and copied up in one piece. The call holds the dataset, the index array and the
//! output's owner for all of its native part.

use crate::device;
use crate::device_error;
use crate::error::engine_error;
use crate::io_call::{ArrayArg, Selection, Target};
use h5gds_engine::{DeviceMemory, Selection as Sel};
use numpy::PyReadonlyArray1;
use pyo3::prelude::*;

/// A gather Python parsed (`_selection.Gather`): the rows, non-negative and below the first
/// axis's length, as a C-contiguous uint64 array; the selection of the other axes.
#[derive(FromPyObject)]
pub struct GatherArg<'py> {
    #[pyo3(attribute)]
    rows: PyReadonlyArray1<'py, u64>,
    #[pyo3(attribute)]
    rest: Selection,
}

/// Reads the rows `sel` of the h5py dataset `dset` into the array `out`; complete when this
/// returns.
#[pyfunction]
pub fn gather_dataset<'py>(
    py: Python<'py>,
    dset: &Bound<'py, PyAny>,
    out: ArrayArg<'py>,
    sel: GatherArg<'py>,
) -> PyResult<()> {
    crate::thread_end::guarded(|| {
        let target = Target::new(dset, &out.dtype)?;
        let rest = sel.rest.slab();
        let rows = Sel::Rows {
            rows: sel.rows.as_slice()?,
            rest,
        };
        let layout = target.layout(py)?;
        let make = || target.engine_mem_type();
        // h5py's lock, where the handle takes it, is released when the read returns.
        let handle = target.handle(py, layout.as_ref(), &make)?;
        let (address, nbytes) = (out.address, out.nbytes);
        let Some((_, claimed)) = out.device.as_ref().filter(|_| nbytes > 0) else {
            // SAFETY: the Python caller passes the address and size of a live, writable host array
            // it keeps referenced for the call (none read for an empty device array).
            let host = unsafe { std::slice::from_raw_parts_mut(address as *mut u8, nbytes) };
            return handle.read(rows, host).map_err(engine_error);
        };
        // The device memory checked, its producer's stream finished, before the rows are read.
        let at = (address, nbytes);
        let context = crate::thread_end::detached(py, || {
            device::with_device_array(at, *claimed, out.stream, Ok)
        })
        .map_err(device_error)?;
        let memory = DeviceMemory::in_context(address, nbytes, context, out.bools()?);
        handle.read(rows, memory).map_err(engine_error)
    })
}
