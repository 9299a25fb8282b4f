//! Gathers (`h5gds.read(d, sel=rows)`, array-io's `from_file_rows`): rows along a dataset's first
//! axis, in any order, repeats included, planned by [`RowPlan`]. Both faces take the same ways, in
//! this order, each logged as a verdict line:
//!
//! 1. `way=gather-stored` ([`Gather::stored`]): a dataset whose storage cannot change
//!    ([`crate::stored`]), with no HDF5 call: whole rows of a contiguous dataset straight into the
//!    caller's order, one piece per run; else the distinct rows, the runs on the pool's threads,
//!    each compressed chunk decoded once.
//! 2. `way=host-decoded` ([`Gather::through_hdf5`]): filtered chunks h5gds decodes (no conversion,
//!    `H5GDS_HOST_CODEC` not 0), where the rows touch two chunks or more: each chunk read and
//!    decoded once, however many runs it holds. Rows inside one chunk are left to HDF5, which keeps
//!    that chunk decoded in its cache for the next gather.
//! 3. `way=gather-hdf5`: `H5Dread` of the union of the runs, a chunked dataset's in groups of
//!    [`RUNS_PER_READ`] runs.
//!
//! The distinct rows are read straight into the output when the indices increase; otherwise into
//! the calling thread's kept buffer, then copied into the caller's order ([`RowPlan::scatter`]).
//! A gather into device memory is read into [`Staging`] first, then copied up in one piece.

use crate::chunks::{Face, StoredChunks};
use crate::decoded::{self, chunks_touched};
use crate::facts::StoredLayout;
use crate::rows::{RowPlan, RowRuns};
use crate::stored::{Stored, Threads};
use crate::transfer::{prepare, prepare_gather_in_groups, GatherRead, Transfer};
use crate::Error;
use h5gds_chunk_codec::Hyperslab;
use h5gds_runtime::hdf5::{hid_t, Hdf5Api};
use h5gds_runtime::pinned;
use std::cell::RefCell;

/// Runs of rows per `H5Dread` of a chunked dataset: HDF5 maps one selection onto the chunks it
/// touches in time that grows faster than their number (4096 random rows of a chunked dataset:
/// 0.33 s in one read, 0.17 s in reads of 64 to 256 runs). A contiguous dataset's runs are read
/// in one call.
pub const RUNS_PER_READ: usize = 128;

/// The largest gather into device memory staged through pinned memory (256 MiB); larger ones go
/// through pageable memory, so as not to pin (and keep pinned in the pool) more than that.
pub const PINNED_GATHER_MAX: usize = 256 << 20;

/// The largest buffer of distinct rows a thread keeps between gathers (64 MiB).
pub const SCRATCH_KEPT: usize = 64 << 20;

thread_local! {
    /// The calling thread's buffer of distinct rows, kept for its next unordered gather (a fresh
    /// one is page-faulted in on every gather, which cost as much as the scatter itself).
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// One gather: its plan, the selection of the other axes (the same in every row), each row's
/// bytes in the memory type, and the driver's thread count (asked only where it is used).
pub struct Gather<'a> {
    pub plan: &'a RowPlan,
    pub rest: Hyperslab<'a>,
    pub row_bytes: usize,
    pub threads: Threads<'a>,
}

/// What a gather through HDF5 needs of the face, which holds the HDF5 copy's lock around the call
/// or takes it in `face.locked`: the table, the dataset (`name`, as HDF5 names it) and the memory
/// type, how the dataset is stored, why h5gds decodes none of its chunks where it does not
/// ([`decoded::declined`]), its chunk face, and its error for an `H5Dread` refused or failed.
pub struct Hdf5Side<'a, F: Face> {
    pub api: &'static Hdf5Api,
    pub dataset: hid_t,
    pub mem_type: hid_t,
    pub name: &'a str,
    pub layout: &'a StoredLayout,
    pub declined: Option<String>,
    pub face: F,
    pub failed: &'a dyn Fn(Error) -> F::Error,
}

impl Gather<'_> {
    /// Refuses an output of `nbytes` that does not hold one row per index.
    fn check(&self, nbytes: usize) -> Result<(), String> {
        let (rows, row_bytes) = (self.plan.len(), self.row_bytes);
        if rows.checked_mul(row_bytes) != Some(nbytes) {
            return Err(format!(
                "the output has {nbytes} bytes, not the {rows} rows of {row_bytes} bytes of the \
                 gather"
            ));
        }
        Ok(())
    }

    /// Way 1: reads the rows into `out` (one row per index, in the caller's order) from `stored`
    /// with no HDF5 call; false, with nothing read, where the storage does not serve them (chunks
    /// never written): then [`Gather::through_hdf5`].
    pub fn stored(&self, stored: &Stored, out: &mut [u8]) -> Result<bool, Error> {
        self.check(out.len()).map_err(Error::invalid)?;
        let (plan, rest, threads) = (self.plan, &self.rest, self.threads);
        let rows = plan.len() as u64;
        if !plan.in_order()
            && stored.gather_in_place(plan.caller_runs(), rows, rest, out, threads)?
        {
            super::say(format_args!(
                "gather of {:?}: way=gather-stored: {rows} rows read straight into the caller's \
                 order, with no HDF5 call",
                stored.name()
            ));
            return Ok(true);
        }
        let (runs, distinct) = (plan.runs(), plan.distinct() as u64);
        let read = |rows: &mut [u8]| Ok(stored.gather(runs, distinct, rest, rows, threads)?);
        let done = self.distinct_rows(out, read, Error::invalid)?;
        if done {
            super::say(format_args!(
                "gather of {:?}: way=gather-stored: {distinct} distinct rows in {} runs, with no \
                 HDF5 call",
                stored.name(),
                runs.len()
            ));
        }
        Ok(done)
    }

    /// Ways 2 and 3: reads the rows into `out` (one row per index, in the caller's order) through
    /// HDF5's copy `h`: chunks h5gds decodes, else `H5Dread` of the runs.
    pub fn through_hdf5<F: Face>(
        &self,
        h: Hdf5Side<'_, F>,
        out: &mut [u8],
    ) -> Result<(), F::Error> {
        let failed = h.failed;
        let argument = |message| failed(Error::invalid(message));
        self.check(out.len()).map_err(argument)?;
        let read = |rows: &mut [u8]| self.distinct_through_hdf5(h, rows).map(|()| true);
        self.distinct_rows(out, read, argument).map(drop)
    }

    /// Reads the distinct rows into `out` (increasing row order) through HDF5's copy `h`.
    fn distinct_through_hdf5<F: Face>(
        &self,
        h: Hdf5Side<'_, F>,
        out: &mut [u8],
    ) -> Result<(), F::Error> {
        let failed = h.failed;
        let why = match self.decoding(&h).map_err(|e| failed(Error::invalid(e)))? {
            Ok((plan, runs)) => return self.decoded(h, plan, &runs, out),
            Err(why) => why,
        };
        let chunked = matches!(h.layout, StoredLayout::Chunked { .. });
        let read = GatherRead {
            dataset: h.dataset,
            mem_type: h.mem_type,
            runs: self.plan.runs(),
            rest_start: self.rest.start,
            rest_step: self.rest.step,
            rest_count: self.rest.count,
            buffer: out.as_mut_ptr() as usize,
            nbytes: out.len(),
        };
        let per_read = if chunked { RUNS_PER_READ } else { 0 };
        let reads = h.face.locked(|| {
            let reads = prepare_gather_in_groups(h.api, &read, per_read)?;
            for prepared in &reads {
                // SAFETY: each group's part of `out` checked against its selection in
                // `prepare_gather_in_groups`, the parts one after another inside `out`, which is
                // borrowed mutably through the reads.
                unsafe { prepared.run() }
                    .map_err(|m| Error::hdf5(format!("H5Dread of the rows failed: {m}")))?;
            }
            Ok(reads.len())
        });
        let reads = reads.map_err(failed)?;
        super::say(format_args!(
            "gather of {:?}: way=gather-hdf5: {} runs of rows in {reads} H5Dread calls ({why})",
            h.name,
            self.plan.runs().len()
        ));
        Ok(())
    }

    /// How h5gds decodes the chunks the rows touch (and the runs as selections), or why HDF5
    /// reads them; Err: the driver's thread count could not be read.
    #[allow(clippy::type_complexity)]
    fn decoding<F: Face>(
        &self,
        h: &Hdf5Side<'_, F>,
    ) -> Result<Result<(decoded::Plan, RowRuns), String>, String> {
        let StoredLayout::Chunked { filters, .. } = h.layout else {
            return Ok(Err("it is not chunked".into()));
        };
        if filters.is_empty() {
            return Ok(Err("its chunks are not filtered".into()));
        }
        if let Some(why) = &h.declined {
            return Ok(Err(format!("HDF5 decodes its chunks: {why}")));
        }
        let rest_elements: u64 = self.rest.count.iter().product();
        if rest_elements == 0 || self.plan.is_empty() {
            return Ok(Err("the gather selects no element".into()));
        }
        let element_size = self.row_bytes / rest_elements as usize;
        let rank = self.rest.count.len() + 1;
        let threads = (self.threads)()?;
        let planned = decoded::plan(h.layout, None, rank, element_size, threads);
        let plan = match planned.map_err(|e| e.to_string())? {
            Ok(plan) => plan,
            Err(why) => return Ok(Err(format!("HDF5 decodes its chunks: {why}"))),
        };
        let runs = RowRuns::new(self.plan.runs(), &self.rest, self.row_bytes as u64);
        let touched = chunks_touched(plan.chunk(), runs.iter().map(|(selection, ..)| selection));
        Ok(plan
            .spread_over(touched, "the rows lie")
            .map(|plan| (plan, runs))
            .map_err(|why| format!("HDF5 decodes its chunks: {why}")))
    }

    /// Way 2: the runs `runs` read into `out` with every chunk they touch decoded once as `plan`
    /// says, after checking their span as a transfer (inside the dataset, the memory type's
    /// element size) before the decoding threads place elements.
    fn decoded<F: Face>(
        &self,
        h: Hdf5Side<'_, F>,
        plan: decoded::Plan,
        runs: &RowRuns,
        out: &mut [u8],
    ) -> Result<(), F::Error> {
        let failed = h.failed;
        let Some([start, step, count]) = runs.span() else {
            return Ok(()); // no run
        };
        let span_elements: u64 = count.iter().product();
        let element_size = self.row_bytes / self.rest.count.iter().product::<u64>() as usize;
        let span = Transfer {
            write: false,
            dataset: h.dataset,
            mem_type: h.mem_type,
            start: &start,
            step: &step,
            count: &count,
            mem_shape: &count,
            buffer: out.as_mut_ptr() as usize,
            nbytes: span_elements as usize * element_size,
        };
        // Checked only, nothing run; its dataspaces closed under the lock too.
        (h.face.locked(|| prepare(h.api, &span).map(drop))).map_err(failed)?;
        let (api, dataset, chunk) = (h.api, h.dataset, plan.chunk());
        let open = |touched| StoredChunks::new(api, dataset, chunk, touched, h.face);
        let placed = runs.placed();
        let done = decoded::read_runs(&plan.decoding(), h.mem_type, &placed, open, out)?;
        super::say(format_args!(
            "gather of {:?}: way=host-decoded: {done}",
            h.name
        ));
        Ok(())
    }

    /// Reads the distinct rows with `read` straight into `out` when the indices increase, else
    /// into the thread's kept buffer, then copies them into the caller's order (`scatter_error`:
    /// a size the plan refuses). What `read` says: whether it read them.
    fn distinct_rows<E>(
        &self,
        out: &mut [u8],
        read: impl FnOnce(&mut [u8]) -> Result<bool, E>,
        scatter_error: impl FnOnce(String) -> E,
    ) -> Result<bool, E> {
        let plan = self.plan;
        if plan.in_order() {
            return read(out);
        }
        let nbytes = plan.distinct() * self.row_bytes;
        let mut scratch = take_scratch(nbytes);
        let rows = &mut scratch[..nbytes];
        let done = read(rows).and_then(|done| match done {
            true => (plan.scatter(rows, out, self.row_bytes).map(|()| true)).map_err(scatter_error),
            false => Ok(false),
        });
        keep_scratch(scratch);
        done
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

/// The host memory a gather into device memory is read into before one copy up: pinned, from the
/// pool (kept for the next gather), up to [`PINNED_GATHER_MAX`]; pageable above.
pub enum Staging {
    Pinned(pinned::Taken),
    Pageable(Vec<u8>),
}

impl Staging {
    /// A staging buffer of `nbytes`.
    pub fn new(nbytes: usize) -> Staging {
        match nbytes <= PINNED_GATHER_MAX {
            true => Staging::Pinned(pinned::Taken::new(nbytes)),
            false => Staging::Pageable(vec![0u8; nbytes]),
        }
    }

    /// Its first byte.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        match self {
            Staging::Pinned(taken) => taken.as_mut_ptr(),
            Staging::Pageable(bytes) => bytes.as_mut_ptr(),
        }
    }
}
