//! `h5gds.read(dset, sel=rows)` in one native call (`gather_dataset`): rows along the first axis
//! named by a 1-D integer array (Python checked and converted it), in any order, repeats
//! included. The indices are sorted, repeats dropped and neighbours coalesced into runs
//! (`h5gds_engine::rows::RowPlan`, without the GIL); a read-only file's dataset with a layout reads the
//! runs on the pool's threads with no HDF5 call (whole rows of a contiguous dataset straight into
//! the caller's order); otherwise the distinct rows are read under h5py's lock, compressed chunks
//! h5gds decodes read raw and decoded once each (`RowsRead::decoded`), else with H5Dread of the
//! union of the runs (`RowsRead::through_hdf5`), straight into the output when the indices are
//! strictly increasing, and otherwise into a buffer of distinct rows copied into the caller's
//! order (`gather::scatter`). A device output gets the rows gathered in pinned host
//! memory, checked (bools) and copied up in one piece. The call holds the dataset, the index
//! array and the output's owner for all of its native part.

use crate::device;
use crate::device_error;
use crate::gather::{self, HostBuffer, RowsRead};
use crate::hdf5::{self, StoredLayout};
use crate::io_call::{ArrayArg, Phil, Selection, Target};
use h5gds_chunk_codec::Hyperslab;
use h5gds_engine::policy::settings::CallSettings;
use h5gds_engine::rows::RowPlan;
use h5gds_engine::staged::check_bools;
use h5gds_runtime::pinned;
use numpy::PyReadonlyArray1;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use std::cell::RefCell;

/// Runs of rows per H5Dread of a chunked dataset: HDF5's mapping of one selection onto the chunks
/// it touches grows faster than their number (4096 random rows of a chunked dataset: 0.33 s in one
/// read, 0.17 s in reads of 64 to 256 runs).
const CHUNKED_RUNS_PER_READ: usize = 128;

/// The largest gather into a device array staged through pinned memory (256 MiB); larger ones go
/// through an ordinary host buffer, so as not to pin (and keep pinned in the pool) more than that.
const PINNED_GATHER_MAX: usize = 256 << 20;

/// The largest buffer of distinct rows a thread keeps between gathers (64 MiB).
const SCRATCH_KEPT: usize = 64 << 20;

thread_local! {
    /// The calling thread's buffer of distinct rows, kept for its next unordered gather (a fresh
    /// one is page-faulted in on every gather, which cost as much as the scatter itself).
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

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
    let gather = Gather {
        target: &target,
        dtype: &out.dtype,
        plan: &plan,
        rest,
        settings: &settings,
    };
    let Some((_, claimed_ordinal)) = &out.device else {
        let host = HostBuffer {
            address: out.address as usize,
            nbytes: out.nbytes,
        };
        return gather.read_into(py, host);
    };
    // Into host memory first (the rows come from all over the file), then one copy up: through
    // pinned memory from the pool (kept for the next batch) up to PINNED_GATHER_MAX.
    let nbytes = out.nbytes;
    let mut pinned_host = (nbytes <= PINNED_GATHER_MAX).then(|| pinned::Taken::new(nbytes));
    let mut pageable = match pinned_host {
        Some(_) => Vec::new(),
        None => vec![0u8; nbytes],
    };
    let staging = match &mut pinned_host {
        Some(taken) => taken.as_mut_ptr(),
        None => pageable.as_mut_ptr(),
    };
    let host = HostBuffer {
        address: staging as usize,
        nbytes,
    };
    gather.read_into(py, host)?;
    let name = out
        .bools()?
        .then(|| {
            let _phil = Phil::acquire(py)?;
            Ok::<_, PyErr>(hdf5::object_name(target.dataset))
        })
        .transpose()?;
    let (address, stream, claimed) = (out.address, out.stream, *claimed_ordinal);
    let staging = staging as usize;
    py.detach(|| {
        if let Some(name) = &name {
            // SAFETY: the staging buffer holds `nbytes` bytes, filled by the gather above.
            let bytes = unsafe { std::slice::from_raw_parts(staging as *const u8, nbytes) };
            check_bools(bytes, 0).map_err(|n| device::not_a_bool(name, n))?;
        }
        device::copy_with_host(address, nbytes, claimed, stream, staging, true)
    })
    .map_err(device_error)
}

/// One gather into host memory.
struct Gather<'a, 'py> {
    target: &'a Target<'py>,
    dtype: &'a Bound<'py, PyAny>,
    plan: &'a RowPlan,
    rest: Hyperslab<'a>,
    /// The driver's settings, read at most once for the call.
    settings: &'a CallSettings,
}

impl<'py> Gather<'_, 'py> {
    /// Reads the rows into `out` (one row per index, in the caller's order).
    fn read_into(&self, py: Python<'py>, out: HostBuffer) -> PyResult<()> {
        let plan = self.plan;
        let layout = self.target.layout(py)?;
        // Whole rows of a read-only file's contiguous dataset: read straight into the caller's
        // order.
        if let Some(layout) = &layout {
            if !plan.in_order()
                && layout
                    .get()
                    .gather_rows_in_place(py, plan, &self.rest, out, self.settings)?
            {
                return Ok(());
            }
        }
        if plan.in_order() {
            return self.distinct_rows(py, layout.as_ref(), out);
        }
        let rest_elements: u64 = self.rest.count.iter().product();
        let itemsize: usize = self.dtype.getattr("itemsize")?.extract()?;
        let row_bytes = rest_elements as usize * itemsize;
        let mut scratch = take_scratch(plan.distinct() * row_bytes);
        let rows = HostBuffer {
            address: scratch.as_mut_ptr() as usize,
            nbytes: plan.distinct() * row_bytes,
        };
        let read = self.distinct_rows(py, layout.as_ref(), rows);
        let scattered = read.and_then(|()| gather::scatter(py, plan, rows, out, row_bytes));
        keep_scratch(scratch);
        scattered
    }

    /// Reads the distinct rows into `out` in increasing row order: through the layout where it
    /// serves them (a read-only file's dataset: its runs read with no HDF5 call, on the pool's
    /// threads), else under h5py's lock through HDF5, compressed chunks decoded by h5gds where it
    /// decodes them and HDF5 would convert nothing.
    fn distinct_rows(
        &self,
        py: Python<'py>,
        layout: Option<&Bound<'py, crate::layout::Layout>>,
        out: HostBuffer,
    ) -> PyResult<()> {
        if let Some(layout) = layout {
            if layout
                .get()
                .gather_rows(py, self.plan, &self.rest, out, self.settings)?
            {
                return Ok(());
            }
        }
        let target = self.target;
        let _phil = Phil::acquire(py)?;
        let facts =
            hdf5::dataset_facts(target.dataset, target.mem_type()?).map_err(PyOSError::new_err)?;
        let read = RowsRead {
            dataset: target.dataset,
            mem_type: target.mem_type()?,
            plan: self.plan,
            rest: self.rest,
            out,
        };
        let StoredLayout::Chunked { filters, .. } = &facts.layout else {
            return read.through_hdf5(py, 0);
        };
        if facts.same_type && !filters.is_empty() {
            let name = hdf5::object_name(target.dataset);
            if read
                .decoded(py, &facts.layout, &name, self.settings)?
                .is_none()
            {
                return Ok(());
            }
        }
        read.through_hdf5(py, CHUNKED_RUNS_PER_READ)
    }
}

/// A buffer of at least `nbytes` for the distinct rows of an unordered gather: the calling
/// thread's kept buffer when it is large enough, else a new one.
fn take_scratch(nbytes: usize) -> Vec<u8> {
    let kept = SCRATCH.with_borrow_mut(std::mem::take);
    if kept.len() >= nbytes {
        return kept;
    }
    // The kept buffer stays kept where the new one will not be.
    if nbytes > SCRATCH_KEPT {
        SCRATCH.set(kept);
    }
    vec![0u8; nbytes]
}

/// Keeps `buffer` for the thread's next gather where it is at most [`SCRATCH_KEPT`] bytes.
fn keep_scratch(buffer: Vec<u8>) {
    if buffer.len() <= SCRATCH_KEPT {
        SCRATCH.set(buffer);
    }
}
