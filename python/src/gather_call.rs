//! `h5gds.read(dset, sel=rows)` in one native call (`gather_dataset`): rows along the first axis
//! named by a 1-D integer array (Python checked and converted it), in any order, repeats
//! included, planned without the GIL (`h5gds_engine::rows::RowPlan`) and read the way
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
use h5gds_engine::decoded;
use h5gds_engine::policy::gather::{Gather, Hdf5Side, Staging};
use h5gds_engine::policy::settings::CallSettings;
use h5gds_engine::rows::RowPlan;
use h5gds_engine::staged::check_bools;
use numpy::PyReadonlyArray1;
use pyo3::exceptions::{PyOSError, PyValueError};
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

/// Reads the rows `sel` of the h5py dataset `dset` (whose first axis has `axis_rows` rows) into
/// the array `out`; complete when this returns.
#[pyfunction]
pub fn gather_dataset<'py>(
    py: Python<'py>,
    dset: &Bound<'py, PyAny>,
    out: ArrayArg<'py>,
    sel: GatherArg<'py>,
    axis_rows: u64,
) -> PyResult<()> {
    let target = Target::new(dset, &out.dtype)?;
    let indices = sel.rows.as_slice()?;
    let plan = py
        .detach(|| RowPlan::of(indices, axis_rows))
        .map_err(PyValueError::new_err)?;
    let rest = Hyperslab {
        start: &sel.rest.start,
        step: &sel.rest.step,
        count: &sel.rest.count,
    };
    let settings = CallSettings::default();
    let itemsize: usize = out.dtype.getattr("itemsize")?.extract()?;
    let gather = Rows {
        plan: &plan,
        rest,
        row_bytes: rest.count.iter().product::<u64>() as usize * itemsize,
        settings: &settings,
    };
    let Some((_, claimed_ordinal)) = &out.device else {
        // SAFETY: the Python caller passes the address and size of a live, writable host array
        // it keeps referenced for the call.
        let host = unsafe { std::slice::from_raw_parts_mut(out.address as *mut u8, out.nbytes) };
        return read_into(py, &target, &gather, host);
    };
    // Into host memory first (the rows come from all over the file), then one copy up.
    let nbytes = out.nbytes;
    let mut staging = Staging::new(nbytes);
    let staged = staging.as_mut_ptr() as usize;
    // SAFETY: the staging buffer holds `nbytes` bytes and lives through the call.
    let host = unsafe { std::slice::from_raw_parts_mut(staged as *mut u8, nbytes) };
    read_into(py, &target, &gather, host)?;
    let name = out
        .bools()?
        .then(|| {
            let _phil = Phil::acquire(py)?;
            Ok::<_, PyErr>(hdf5::object_name(target.dataset))
        })
        .transpose()?;
    let (address, stream, claimed) = (out.address, out.stream, *claimed_ordinal);
    py.detach(|| {
        if let Some(name) = &name {
            // SAFETY: the staging buffer holds `nbytes` bytes, filled by the gather above.
            let bytes = unsafe { std::slice::from_raw_parts(staged as *const u8, nbytes) };
            check_bools(bytes, 0).map_err(|n| device::not_a_bool(name, n))?;
        }
        device::copy_with_host(address, nbytes, claimed, stream, staged, true)
    })
    .map_err(device_error)
}

/// A gather's rows ([`Gather`]'s parts, which cross into the threads that run without the GIL).
struct Rows<'a> {
    plan: &'a RowPlan,
    rest: Hyperslab<'a>,
    row_bytes: usize,
    settings: &'a CallSettings,
}

impl Rows<'_> {
    /// Runs `read` with the engine's gather of these rows.
    fn with<R>(&self, read: impl FnOnce(&Gather) -> R) -> R {
        let threads = || self.settings.nthreads().map_err(|e| e.to_string());
        read(&Gather {
            plan: self.plan,
            rest: self.rest,
            row_bytes: self.row_bytes,
            threads: &threads,
        })
    }
}

/// Reads the rows of `gather` into `out` (one row per index, in the caller's order): through the
/// dataset's layout where it has one and it serves them, else through h5py's HDF5.
fn read_into<'py>(
    py: Python<'py>,
    target: &Target<'py>,
    gather: &Rows,
    out: &mut [u8],
) -> PyResult<()> {
    if let Some(layout) = target.layout(py)? {
        let stored = layout.get().stored();
        let read = py.detach(|| gather.with(|g| g.stored(stored, &mut *out)));
        if read.map_err(engine_error)? {
            return Ok(());
        }
    }
    let _phil = Phil::acquire(py)?;
    let (dataset, mem_type) = (target.dataset, target.mem_type()?);
    let facts = hdf5::dataset_facts(dataset, mem_type).map_err(PyOSError::new_err)?;
    let conversion = (!facts.same_type).then_some("HDF5 converts its elements");
    let declined = decoded::declined(conversion).map_err(|e| PyValueError::new_err(e.to_string()));
    let declined = declined?;
    let name = hdf5::object_name(dataset);
    let face = hdf5::h5py_face(dataset, &name, PyOSError::new_err)?;
    py.detach(|| {
        let side = Hdf5Side {
            api: face.api,
            dataset,
            mem_type,
            name: &name,
            layout: &facts.layout,
            declined,
            face,
            failed: &|e| engine_error(e),
        };
        gather.with(|g| g.through_hdf5(side, out))
    })
}
