//! Gathers: `h5gds.read(dset, sel=rows)` with a 1-D integer array of rows along the first axis.
//!
//! A [`GatherPlan`] is made from the caller's indices without HDF5 (sorted, repeats dropped,
//! neighbouring rows coalesced into runs, and each caller position's rank among the distinct
//! rows); [`dataset_gather`] reads the distinct rows with one H5Dread of the union of the runs
//! (h5py's lock held, the GIL released), straight into the output when the indices are strictly
//! increasing, else into a buffer of distinct rows that [`GatherPlan::scatter`] copies into the
//! caller's order (repeats included) without HDF5's lock or the GIL.

use crate::call_settings::CallSettings;
use crate::hdf5;
use crate::host_codec;
use h5gds_engine::decoded;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

/// The caller's rows, sorted and coalesced (see the module's documentation).
#[pyclass(frozen, module = "h5gds._native")]
pub struct GatherPlan {
    /// The distinct rows as runs in increasing order: first row, number of rows.
    runs: Vec<(u64, u64)>,
    /// For each of the caller's indices, the position of its row among the distinct rows
    /// (empty when the indices are strictly increasing: then they are the distinct rows).
    ranks: Vec<usize>,
    /// How many distinct rows.
    distinct: usize,
    /// How many indices the caller gave.
    len: usize,
}

impl GatherPlan {
    /// The distinct rows as runs in increasing order: first row, number of rows.
    pub(crate) fn row_runs(&self) -> &[(u64, u64)] {
        &self.runs
    }

    /// How many distinct rows.
    pub(crate) fn distinct_rows(&self) -> usize {
        self.distinct
    }

    /// How many indices the caller gave.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The caller's rows in the caller's order (repeats included), as runs (first row, rows) of
    /// rows that are neighbours both in the file and in that order.
    pub(crate) fn caller_runs(&self) -> Vec<(u64, u64)> {
        if self.ranks.is_empty() {
            return self.runs.clone();
        }
        let distinct: Vec<u64> = self
            .runs
            .iter()
            .flat_map(|&(first, rows)| first..first + rows)
            .collect();
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for row in self.ranks.iter().map(|&rank| distinct[rank]) {
            match runs.last_mut() {
                Some((first, rows)) if *first + *rows == row => *rows += 1,
                _ => runs.push((row, 1)),
            }
        }
        runs
    }

    /// The plan for `indices`, each checked to lie below `rows`.
    pub(crate) fn of(indices: &[u64], rows: u64) -> Result<GatherPlan, String> {
        if let Some((at, bad)) = indices.iter().enumerate().find(|(_, &i)| i >= rows) {
            return Err(format!(
                "index {bad} (position {at}) is out of range for axis 0 with size {rows}"
            ));
        }
        let mut runs: Vec<(u64, u64)> = Vec::new();
        let mut add = |row: u64| match runs.last_mut() {
            Some((first, length)) if *first + *length == row => *length += 1,
            Some((first, length)) if *first + *length > row => {} // a repeat
            _ => runs.push((row, 1)),
        };
        if indices.windows(2).all(|w| w[0] < w[1]) {
            indices.iter().for_each(|&row| add(row));
            return Ok(GatherPlan {
                runs,
                ranks: Vec::new(),
                distinct: indices.len(),
                len: indices.len(),
            });
        }
        let mut order: Vec<(u64, usize)> = indices.iter().copied().zip(0..).collect();
        order.sort_unstable();
        let mut ranks = vec![0; indices.len()];
        let mut distinct = 0;
        for (k, &(row, position)) in order.iter().enumerate() {
            if k > 0 && order[k - 1].0 != row {
                distinct += 1;
            }
            ranks[position] = distinct;
            add(row);
        }
        Ok(GatherPlan {
            runs,
            ranks,
            distinct: distinct + usize::from(!indices.is_empty()),
            len: indices.len(),
        })
    }
}

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
            GatherPlan::of(indices, rows)
        })
        .map_err(PyValueError::new_err)
    }

    /// How many distinct rows the indices name (the rows read).
    #[getter]
    fn distinct(&self) -> usize {
        self.distinct
    }

    /// How many runs of neighbouring rows the distinct rows form (the hyperslabs of the read).
    #[getter]
    fn runs(&self) -> usize {
        self.runs.len()
    }

    /// Whether the indices are strictly increasing: then the rows are read straight into the
    /// output, and there is nothing to scatter.
    #[getter]
    pub(crate) fn in_order(&self) -> bool {
        self.ranks.is_empty()
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
    /// [`GatherPlan::scatter`] between two host buffers the caller keeps alive.
    pub(crate) fn scatter_into(
        &self,
        py: Python<'_>,
        source: HostBuffer,
        target: HostBuffer,
        row_bytes: usize,
    ) -> PyResult<()> {
        let (source_nbytes, target_nbytes) = (source.nbytes, target.nbytes);
        let (source, target) = (source.address, target.address);
        let source_needed = self.distinct.checked_mul(row_bytes);
        let target_needed = self.len.checked_mul(row_bytes);
        if source_needed != Some(source_nbytes) || target_needed != Some(target_nbytes) {
            return Err(PyValueError::new_err(format!(
                "scatter of {} rows ({} distinct) of {row_bytes} bytes from {source_nbytes} \
                 bytes into {target_nbytes} bytes: the sizes do not match",
                self.len, self.distinct
            )));
        }
        if self.ranks.is_empty() {
            if source != target && row_bytes > 0 && self.len > 0 {
                // SAFETY: both buffers hold `len` rows of `row_bytes` (checked above; the caller
                // keeps them alive and passes distinct buffers).
                py.detach(|| unsafe {
                    std::ptr::copy_nonoverlapping(
                        source as *const u8,
                        target as *mut u8,
                        target_nbytes,
                    )
                });
            }
            return Ok(());
        }
        if row_bytes == 0 {
            return Ok(());
        }
        // SAFETY: every rank is below `distinct` and every position below `len` (the plan's
        // invariants), so all rows lie inside the buffers checked above, which the caller keeps
        // alive; the source (the rows read) and the target (the output) are distinct buffers.
        py.detach(|| unsafe {
            scatter_rows(
                &self.ranks,
                source as *const u8,
                target as *mut u8,
                row_bytes,
            )
        });
        Ok(())
    }
}

/// Scatters of at least this many bytes are split over threads: the output's pages are often
/// fresh (`out=None`), and faulting them in is most of a scatter's time.
const SCATTER_SPLIT: usize = 8 << 20;

/// At most this many threads scatter one gather.
const SCATTER_THREADS: usize = 8;

/// Copies row `ranks[i]` of `source` to row `i` of `target`, rows of `row_bytes`; large scatters
/// in parts on scoped threads (a part whose thread cannot start is copied on this one).
///
/// # Safety
/// `source` must hold more rows than the largest rank, `target` `ranks.len()` rows, both valid
/// for the call and not overlapping.
unsafe fn scatter_rows(ranks: &[usize], source: *const u8, target: *mut u8, row_bytes: usize) {
    // Addresses as integers, so the parts can go to other threads.
    let (source, target) = (source as usize, target as usize);
    let copy = |first: usize, part: &[usize]| {
        for (i, &rank) in part.iter().enumerate() {
            // SAFETY: as the caller guarantees, for row `first + i` of the target.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (source as *const u8).add(rank * row_bytes),
                    (target as *mut u8).add((first + i) * row_bytes),
                    row_bytes,
                )
            }
        }
    };
    let threads = if ranks.len().saturating_mul(row_bytes) < SCATTER_SPLIT {
        1
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get().min(SCATTER_THREADS))
    };
    if threads <= 1 {
        copy(0, ranks);
        return;
    }
    let per = ranks.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let mut parts = ranks.chunks(per).enumerate();
        let (_, own) = parts.next().unwrap_or((0, &[]));
        for (k, part) in parts {
            let spawned = std::thread::Builder::new()
                .name("h5gds-scatter".into())
                .spawn_scoped(scope, move || copy(k * per, part));
            if spawned.is_err() {
                copy(k * per, part);
            }
        }
        copy(0, own);
    });
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
        let RowsRead {
            dataset,
            mem_type,
            plan,
            rest,
            out,
        } = self;
        let (dataset, mem_type) = (*dataset, *mem_type);
        let (rest_start, rest_step, rest_count) = (rest.start, rest.step, rest.count);
        let (buffer, nbytes) = (out.address, out.nbytes);
        if plan.distinct == 0 || plan.runs.is_empty() {
            return Ok(());
        }
        if nbytes % plan.distinct != 0 {
            return Err(PyValueError::new_err(format!(
                "the buffer has {nbytes} bytes, not a whole number of rows for the {} rows of the \
                 gather",
                plan.distinct
            )));
        }
        let row_bytes = nbytes / plan.distinct;
        let per_read = if runs_per_read == 0 {
            plan.runs.len()
        } else {
            runs_per_read
        };
        let mut reads = Vec::new();
        let mut offset = 0;
        for group in plan.runs.chunks(per_read) {
            let rows: u64 = group.iter().map(|&(_, length)| length).sum();
            let group_bytes = rows as usize * row_bytes;
            let read = hdf5::GatherRead {
                dataset,
                mem_type,
                runs: group,
                rest_start,
                rest_step,
                rest_count,
                buffer: buffer + offset,
                nbytes: group_bytes,
            };
            offset += group_bytes;
            match hdf5::prepare_gather(&read) {
                Ok(Some(prepared)) => reads.push(prepared),
                Ok(None) => {}
                Err(hdf5::IoError::Argument(message)) => {
                    return Err(PyValueError::new_err(message))
                }
                Err(hdf5::IoError::Hdf5(message)) => return Err(PyOSError::new_err(message)),
            }
        }
        py.detach(|| {
            reads.iter().try_for_each(|prepared| {
                // SAFETY: the Python caller passes the address and size of a live buffer it keeps
                // referenced for the call; each group's part of it checked against its selection in
                // `prepare_gather`, the parts one after another inside the buffer.
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
        let (rest_start, rest_step, rest_count) =
            (self.rest.start, self.rest.step, self.rest.count);
        let (buffer, nbytes) = (self.out.address, self.out.nbytes);
        let runs = plan.row_runs();
        let (Some(&(first, _)), Some(&(last, last_rows))) = (runs.first(), runs.last()) else {
            return Ok(None);
        };
        let distinct = plan.distinct_rows();
        if nbytes % distinct != 0 {
            return Err(PyValueError::new_err(format!(
                "the buffer has {nbytes} bytes, not a whole number of rows for the {distinct} rows \
                 of the gather"
            )));
        }
        let row_bytes = (nbytes / distinct) as u64;
        // The span of the runs, checked as a transfer (its selection inside the dataset, the
        // element size) before the decoding threads place elements.
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
        if hdf5::prepare(&transfer)
            .map_err(crate::error::io_error)?
            .is_none()
        {
            return Ok(None);
        }
        let threads = settings.nthreads().map_err(PyValueError::new_err)?;
        let host = match host_codec::plan(layout, span_start.len(), element_size, threads)? {
            Ok(host) => host,
            Err(reason) => return Ok(Some(reason)),
        };
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
