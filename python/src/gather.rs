//! Gathers: `h5gds.read(dset, sel=rows)` with a 1-D integer array of rows along the first axis.
//!
//! A [`GatherPlan`] (the engine's `h5gds_engine::rows::RowPlan`) is made from the caller's
//! indices without HDF5; [`dataset_gather`] reads the distinct rows with one H5Dread of the union
//! of the runs (h5py's lock held, the GIL released), straight into the output when the indices
//! are strictly increasing, else into a buffer of distinct rows that [`GatherPlan::scatter`]
//! copies into the caller's order (repeats included) without HDF5's lock or the GIL.

use crate::call_settings::CallSettings;
use crate::hdf5;
use crate::host_codec;
use h5gds_engine::rows::RowPlan;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

/// The caller's rows, sorted and coalesced: the engine's plan, for Python.
#[pyclass(frozen, module = "h5gds._native")]
pub struct GatherPlan(pub(crate) RowPlan);

#[pymethods]
impl GatherPlan {
    /// The plan for the `count` indices (uint64, each below `rows`) at `address`: a C-contiguous
    /// NumPy array the caller keeps alive for the call. ValueError for an index out of range or a
    /// misaligned address.
    #[new]
    fn new(py: Python<'_>, address: usize, count: usize, rows: u64) -> PyResult<GatherPlan> {
        if count > 0 && (address == 0 || address % std::mem::align_of::<u64>() != 0) {
            return Err(PyValueError::new_err(format!(
                "the indices' address {address:#x} is not that of aligned uint64 elements"
            )));
        }
        py.detach(|| {
            let indices: &[u64] = if count == 0 {
                &[]
            } else {
                // SAFETY: the Python caller passes the address and length of a live, aligned
                // uint64 array it keeps referenced for the call (checked non-null and aligned
                // above); nothing writes to it meanwhile (the caller made it for this call).
                unsafe { std::slice::from_raw_parts(address as *const u64, count) }
            };
            RowPlan::of(indices, rows).map(GatherPlan)
        })
        .map_err(PyValueError::new_err)
    }

    /// How many distinct rows the indices name (the rows read).
    #[getter]
    fn distinct(&self) -> usize {
        self.0.distinct()
    }

    /// How many runs of neighbouring rows the distinct rows form (the hyperslabs of the read).
    #[getter]
    fn runs(&self) -> usize {
        self.0.runs().len()
    }

    /// Whether the indices are strictly increasing: then the rows are read straight into the
    /// output, and there is nothing to scatter.
    #[getter]
    fn in_order(&self) -> bool {
        self.0.in_order()
    }

    /// Copies the distinct rows (`source`, `source_nbytes`: `distinct` rows of `row_bytes`, in
    /// increasing row order) into the caller's order (`target`, `target_nbytes`: one row per
    /// index, repeats included), with the GIL released. The caller keeps both buffers alive;
    /// ValueError when a size does not match the plan, before anything is copied.
    fn scatter(
        &self,
        py: Python<'_>,
        source: usize,
        source_nbytes: usize,
        target: usize,
        target_nbytes: usize,
        row_bytes: usize,
    ) -> PyResult<()> {
        let source = HostBuffer {
            address: source,
            nbytes: source_nbytes,
        };
        let target = HostBuffer {
            address: target,
            nbytes: target_nbytes,
        };
        self.scatter_into(py, source, target, row_bytes)
    }
}

impl GatherPlan {
    /// [`GatherPlan::scatter`] between two host buffers the caller keeps alive, distinct and
    /// holding `nbytes` each (checked against the plan before anything is copied).
    pub(crate) fn scatter_into(
        &self,
        py: Python<'_>,
        source: HostBuffer,
        target: HostBuffer,
        row_bytes: usize,
    ) -> PyResult<()> {
        let plan = &self.0;
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
}

/// Reads the distinct rows of `plan` (each row: the hyperslab `rest_start`, `rest_step`,
/// `rest_count` of the other axes) of dataset `dataset` with memory type `mem_type` into
/// `nbytes` at `buffer`, in increasing row order: one H5Dread of the union of the plan's runs,
/// or, with `runs_per_read` above 0, one per that many runs (HDF5 maps a selection onto a
/// chunked dataset's chunks in time that grows faster than the number of chunks touched, so
/// chunked gathers read in groups). The GIL is released while bytes move. Every id and size is
/// checked against HDF5 for every group before any is read (ValueError on a mismatch, OSError
/// when HDF5 fails). The caller holds h5py's lock and keeps the buffer alive.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn dataset_gather(
    py: Python<'_>,
    dataset: i64,
    mem_type: i64,
    plan: &Bound<'_, GatherPlan>,
    rest_start: Vec<u64>,
    rest_step: Vec<u64>,
    rest_count: Vec<u64>,
    buffer: usize,
    nbytes: usize,
    runs_per_read: usize,
) -> PyResult<()> {
    RowsRead {
        dataset,
        mem_type,
        plan: plan.get(),
        rest: Rest {
            start: &rest_start,
            step: &rest_step,
            count: &rest_count,
        },
        out: HostBuffer {
            address: buffer,
            nbytes,
        },
    }
    .through_hdf5(py, runs_per_read)
}

/// The selection of the axes after the first: the same hyperslab in every row of a gather.
#[derive(Clone, Copy)]
pub struct Rest<'a> {
    pub start: &'a [u64],
    pub step: &'a [u64],
    pub count: &'a [u64],
}

/// `nbytes` of host memory at `address`, which the caller keeps alive and writable.
#[derive(Clone, Copy)]
pub struct HostBuffer {
    pub address: usize,
    pub nbytes: usize,
}

/// A read of a gather's distinct rows (each: `rest` of the other axes) of `dataset` with memory
/// type `mem_type` into `out`, in increasing row order. The caller holds h5py's lock.
pub struct RowsRead<'a> {
    pub dataset: i64,
    pub mem_type: i64,
    pub plan: &'a GatherPlan,
    pub rest: Rest<'a>,
    pub out: HostBuffer,
}

impl RowsRead<'_> {
    /// Through HDF5 (see [`dataset_gather`]).
    pub fn through_hdf5(&self, py: Python<'_>, runs_per_read: usize) -> PyResult<()> {
        let read = hdf5::GatherRead {
            dataset: self.dataset,
            mem_type: self.mem_type,
            runs: self.plan.0.runs(),
            rest_start: self.rest.start,
            rest_step: self.rest.step,
            rest_count: self.rest.count,
            buffer: self.out.address,
            nbytes: self.out.nbytes,
        };
        let reads =
            hdf5::prepare_gather_in_groups(&read, runs_per_read).map_err(crate::error::io_error)?;
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

    /// With h5gds decoding, for a chunked dataset (chunks of `chunk`, the pipeline `filters`)
    /// whose stored type is the memory type (`dataset_name`: for messages): every chunk the runs
    /// touch read raw once and decoded once on the driver's I/O threads. Returns None when the
    /// rows were read, or why h5gds leaves them to HDF5 (nothing was read).
    pub fn decoded(
        &self,
        py: Python<'_>,
        chunk: &[u64],
        filters: &[h5gds_chunk_codec::Filter],
        dataset_name: &str,
        settings: &CallSettings,
    ) -> PyResult<Option<String>> {
        let (dataset, mem_type, plan) = (self.dataset, self.mem_type, self.plan);
        let (rest_start, rest_step, rest_count) =
            (self.rest.start, self.rest.step, self.rest.count);
        let (buffer, nbytes) = (self.out.address, self.out.nbytes);
        let runs = plan.0.runs();
        let (Some(&(first, _)), Some(&(last, last_rows))) = (runs.first(), runs.last()) else {
            return Ok(None);
        };
        let distinct = plan.0.distinct();
        if nbytes % distinct != 0 {
            return Err(PyValueError::new_err(format!(
                "the buffer has {nbytes} bytes, not a whole number of rows for the {distinct} rows \
                 of the gather"
            )));
        }
        let row_bytes = (nbytes / distinct) as u64;
        // The span of the runs, checked as a transfer (its selection, the buffer's size), for the
        // reads of chunks never written.
        let span = |first_axis: u64, rest: &[u64]| -> Vec<u64> {
            std::iter::once(first_axis)
                .chain(rest.iter().copied())
                .collect()
        };
        let (span_start, span_step) = (span(first, rest_start), span(1, rest_step));
        let span_count = span(last + last_rows - first, rest_count);
        let span_elements: u64 = span_count.iter().product();
        let rest_elements: u64 = rest_count.iter().product();
        if rest_elements == 0 {
            return Ok(None);
        }
        // (The transfer checked below says whether this is the memory type's size.)
        let element_size = (row_bytes / rest_elements) as usize;
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
        let Some(prepared) = hdf5::prepare(&transfer).map_err(crate::error::io_error)? else {
            return Ok(None);
        };
        let turned_off = h5gds_runtime::settings::host_codec_turned_off()
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let pipeline = match turned_off.map_or_else(
            || h5gds_chunk_codec::Pipeline::for_filters(filters, element_size),
            Err,
        ) {
            Ok(pipeline) if chunk.len() == span_start.len() => pipeline,
            Ok(_) => return Ok(Some("its chunk shape does not match its rank".into())),
            Err(reason) => return Ok(Some(reason)),
        };
        let threads = settings.nthreads().map_err(PyValueError::new_err)?;
        let starts: Vec<Vec<u64>> = runs.iter().map(|&(row, _)| span(row, rest_start)).collect();
        let counts: Vec<Vec<u64>> = runs
            .iter()
            .map(|&(_, rows)| span(rows, rest_count))
            .collect();
        let mut at = 0u64;
        let mut placed = Vec::with_capacity(runs.len());
        for (k, &(_, rows)) in runs.iter().enumerate() {
            placed.push(h5gds_chunk_codec::Placed {
                selection: h5gds_chunk_codec::Hyperslab {
                    start: &starts[k],
                    step: &span_step,
                    count: &counts[k],
                },
                at,
            });
            at += rows * row_bytes;
        }
        let touched: std::collections::BTreeSet<Vec<u64>> = placed
            .iter()
            .flat_map(|run| h5gds_chunk_codec::place::chunks_selected(&run.selection, chunk))
            .map(|part| part.offset)
            .collect();
        if touched.len() < 2 {
            return Ok(Some(
                "the rows lie in one chunk, which HDF5 decodes and keeps in its chunk cache".into(),
            ));
        }
        let (decoded, missing) = py
            .detach(|| {
                // SAFETY: the Python caller passes the address and size of a live, writable host
                // buffer it keeps referenced for the call, which holds the distinct rows (checked
                // above), one run after another.
                let out = unsafe { std::slice::from_raw_parts_mut(buffer as *mut u8, nbytes) };
                let how = h5gds_chunk_codec::Decoding {
                    pipeline: &pipeline,
                    chunk,
                    element_size,
                    threads,
                };
                host_codec::gather_runs(dataset, dataset_name, &how, &placed, &prepared, out)
            })
            .map_err(|host_codec::Failed(message)| PyOSError::new_err(message))?;
        h5gds::with_logging(|| {
            tracing::debug!(
                "h5gds.read of {dataset_name}: a gather of {} runs of rows, {decoded} chunks each \
                 decoded once on {threads} threads, {missing} parts of chunks never written read \
                 through HDF5",
                placed.len()
            )
        });
        Ok(None)
    }
}
