//! Gathers: `h5gds.read(dset, sel=rows)` with a 1-D integer array of rows along the first axis.
//!
//! The engine's plan (`h5gds_engine::rows::RowPlan`) is made from the caller's indices without
//! HDF5; [`RowsRead::through_hdf5`] reads the distinct rows with one H5Dread of the union of the
//! runs (h5py's lock held, the GIL released), straight into the output when the indices are
//! strictly increasing, else into a buffer of distinct rows that [`scatter`] copies into the
//! caller's order (repeats included) without HDF5's lock or the GIL.

use crate::hdf5;
use h5gds_chunk_codec::Hyperslab;
use h5gds_engine::decoded;
use h5gds_engine::policy::settings::CallSettings;
use h5gds_engine::rows::{RowPlan, RowRuns};
use h5gds_engine::transfer::prepare_gather_in_groups;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

/// Copies a gather's distinct rows (`source`: `plan`'s distinct rows of `row_bytes`, in
/// increasing row order) into the caller's order (`target`: one row per index, repeats included)
/// between two host buffers the caller keeps alive, distinct and holding `nbytes` each (checked
/// against the plan before anything is copied), with the GIL released.
pub(crate) fn scatter(
    py: Python<'_>,
    plan: &RowPlan,
    source: HostBuffer,
    target: HostBuffer,
    row_bytes: usize,
) -> PyResult<()> {
    plan.check_scatter(source.nbytes, target.nbytes, row_bytes)
        .map_err(PyValueError::new_err)?;
    if source.address == target.address || target.nbytes == 0 {
        // Rows in order read in place, or nothing to copy.
        return Ok(());
    }
    py.detach(|| {
        // SAFETY: the caller passes two live, distinct buffers of these sizes (non-null:
        // neither is empty, checked above against the plan).
        let (source, target) = unsafe {
            (
                std::slice::from_raw_parts(source.address as *const u8, source.nbytes),
                std::slice::from_raw_parts_mut(target.address as *mut u8, target.nbytes),
            )
        };
        plan.scatter(source, target, row_bytes)
    })
    .map_err(PyValueError::new_err)
}

/// `nbytes` of host memory at `address`, which the caller keeps alive and writable.
#[derive(Clone, Copy)]
pub struct HostBuffer {
    pub address: usize,
    pub nbytes: usize,
}

/// A read of a gather's distinct rows (each: `rest`, the selection of the other axes, the same
/// in every row) of `dataset` with memory type `mem_type` into `out`, in increasing row order.
/// The caller holds h5py's lock.
pub struct RowsRead<'a> {
    pub dataset: i64,
    pub mem_type: i64,
    pub plan: &'a RowPlan,
    pub rest: Hyperslab<'a>,
    pub out: HostBuffer,
}

impl RowsRead<'_> {
    /// Through HDF5: one H5Dread of the union of the plan's runs, or, with `runs_per_read` above
    /// 0, one per that many runs (HDF5 maps a selection onto a chunked dataset's chunks in time
    /// that grows faster than the number of chunks touched, so chunked gathers read in groups),
    /// with the GIL released while bytes move. Every id and size is checked against HDF5 for
    /// every group before any is read (ValueError on a mismatch, OSError when HDF5 fails).
    pub fn through_hdf5(&self, py: Python<'_>, runs_per_read: usize) -> PyResult<()> {
        let read = hdf5::GatherRead {
            dataset: self.dataset,
            mem_type: self.mem_type,
            runs: self.plan.runs(),
            rest_start: self.rest.start,
            rest_step: self.rest.step,
            rest_count: self.rest.count,
            buffer: self.out.address,
            nbytes: self.out.nbytes,
        };
        let api = hdf5::api().map_err(PyOSError::new_err)?;
        let reads =
            prepare_gather_in_groups(api, &read, runs_per_read).map_err(crate::error::io_error)?;
        py.detach(|| {
            reads.iter().try_for_each(|prepared| {
                // SAFETY: the Python caller passes the address and size of a live buffer it keeps
                // referenced for the call; each group's part of it checked against its selection in
                // `prepare_gather_in_groups`, the parts one after another inside the buffer.
                unsafe { prepared.run() }
            })
        })
        .map_err(|message| PyOSError::new_err(format!("H5Dread failed: {message}")))
    }

    /// With h5gds decoding (`h5gds_engine::decoded::read_runs`), for a chunked dataset stored as
    /// `layout` whose stored type is the memory type (`dataset_name`: for messages): every chunk
    /// the runs touch read raw once and decoded once on the driver's I/O threads. Returns None
    /// when the rows were read, or why h5gds leaves them to HDF5 (nothing was read).
    pub fn decoded(
        &self,
        py: Python<'_>,
        layout: &hdf5::StoredLayout,
        dataset_name: &str,
        settings: &CallSettings,
    ) -> PyResult<Option<String>> {
        let (dataset, mem_type, plan) = (self.dataset, self.mem_type, self.plan);
        let (buffer, nbytes) = (self.out.address, self.out.nbytes);
        let distinct = plan.distinct();
        let Some(row_bytes) = nbytes.checked_div(distinct) else {
            return Ok(None); // no row
        };
        if row_bytes * distinct != nbytes {
            return Err(PyValueError::new_err(format!(
                "the buffer has {nbytes} bytes, not a whole number of rows for the {distinct} rows \
                 of the gather"
            )));
        }
        let runs = RowRuns::new(plan.runs(), &self.rest, row_bytes as u64);
        // The span of the runs, checked as a transfer (its selection inside the dataset, the
        // element size) before the decoding threads place elements.
        let Some([span_start, span_step, span_count]) = runs.span() else {
            return Ok(None);
        };
        let span_elements: u64 = span_count.iter().product();
        let rest_elements: u64 = self.rest.count.iter().product();
        if rest_elements == 0 {
            return Ok(None);
        }
        // (The transfer checked below says whether this is the memory type's size.)
        let element_size = row_bytes / rest_elements as usize;
        let transfer = hdf5::Transfer {
            write: false,
            dataset,
            mem_type,
            start: &span_start,
            step: &span_step,
            count: &span_count,
            mem_shape: &span_count,
            buffer,
            nbytes: span_elements as usize * element_size,
        };
        if hdf5::prepare(&transfer)
            .map_err(crate::error::io_error)?
            .is_none()
        {
            return Ok(None);
        }
        let threads = settings.nthreads().map_err(crate::error::setting_error)?;
        let planned = decoded::plan(layout, None, span_start.len(), element_size, threads);
        let host = match planned.map_err(crate::error::setting_error)? {
            Ok(host) => host,
            Err(reason) => return Ok(Some(reason)),
        };
        let placed = runs.placed();
        let touched = decoded::chunks_touched(host.chunk(), placed.iter().map(|p| p.selection));
        let host = match host.spread_over(touched, "the rows lie") {
            Ok(host) => host,
            Err(reason) => return Ok(Some(reason)),
        };
        let done = py.detach(|| {
            // SAFETY: the Python caller passes the address and size of a live, writable host
            // buffer it keeps referenced for the call, which holds the distinct rows (checked
            // above), one run after another.
            let out = unsafe { std::slice::from_raw_parts_mut(buffer as *mut u8, nbytes) };
            let open = |touched| {
                let chunk = host.chunk();
                hdf5::stored_chunks(dataset, dataset_name, chunk, touched, PyOSError::new_err)
            };
            decoded::read_runs(&host.decoding(), mem_type, &placed, open, out)
        })?;
        h5gds::with_logging(|| tracing::debug!("h5gds.read of {dataset_name}: a gather of {done}"));
        Ok(None)
    }
}
