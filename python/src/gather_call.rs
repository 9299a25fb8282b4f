//! `h5gds.read(dset, sel=rows)` in one native call (`gather_dataset`): rows along the first axis
//! named by a 1-D integer array (Python checked and converted it), in any order, repeats
//! included, read through the engine's dataset handle (`h5gds_engine::Dataset`) the way
//! `h5gds_engine::policy::gather` decides: a read-only file's dataset with a layout with no HDF5
//! call and neither h5py's lock nor the GIL held, else through h5py's HDF5 under its lock. A
//! device output gets the rows gathered in host memory (`policy::gather::Staging`), checked
//! (bools) and copied up in one piece. The call holds the dataset, the index array and the
//! output's owner for all of its native part.

use crate::device;
use crate::device_error;
use crate::error::engine_error;
use crate::hdf5;
use crate::io_call::{ArrayArg, Phil, Selection, Target};
use h5gds_chunk_codec::Hyperslab;
use h5gds_engine::policy::gather::Staging;
use h5gds_engine::policy::settings::CallSettings;
use h5gds_engine::Selection as Sel;
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
        let rest = Hyperslab {
            start: &sel.rest.start,
            step: &sel.rest.step,
            count: &sel.rest.count,
        };
        let settings = CallSettings::default();
        let rows = Sel::Rows {
            rows: sel.rows.as_slice()?,
            rest,
        };
        let layout = target.layout(py)?;
        let make = || target.engine_mem_type();
        // h5py's lock, where the handle takes it, is released when the read returns.
        let read_into = |out: &mut [u8]| {
            let handle = target.handle(py, layout.as_ref(), &make)?;
            handle.read(rows, out, &settings).map_err(engine_error)
        };
        let Some((_, claimed_ordinal)) = &out.device else {
            // SAFETY: the Python caller passes the address and size of a live, writable host array
            // it keeps referenced for the call.
            let host =
                unsafe { std::slice::from_raw_parts_mut(out.address as *mut u8, out.nbytes) };
            return read_into(host);
        };
        // Into host memory first (the rows come from all over the file), then one copy up.
        let nbytes = out.nbytes;
        let mut staging = Staging::new(nbytes);
        let staged = staging.as_mut_ptr() as usize;
        // SAFETY: the staging buffer holds `nbytes` bytes and lives through the call.
        let host = unsafe { std::slice::from_raw_parts_mut(staged as *mut u8, nbytes) };
        read_into(host)?;
        let name = out
            .bools()?
            .then(|| {
                let _phil = Phil::acquire(py)?;
                Ok::<_, PyErr>(hdf5::object_name(target.dataset))
            })
            .transpose()?;
        let (address, stream, claimed) = (out.address, out.stream, *claimed_ordinal);
        crate::thread_end::detached(py, || {
            if let Some(name) = &name {
                // SAFETY: the staging buffer holds `nbytes` bytes, filled by the gather above.
                let bytes = unsafe { std::slice::from_raw_parts(staged as *const u8, nbytes) };
                h5gds_engine::Error::check_bools(bytes, name)?;
            }
            device::copy_with_host(address, nbytes, claimed, stream, staged, true)
        })
        .map_err(device_error)
    })
}
