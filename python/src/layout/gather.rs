//! A gather's runs of rows read through a layout: compressed chunks decoded once for all the runs
//! they hold, or one large chunk decoded once and kept.

use super::chunk_cache::{last_byte, KEPT_CHUNK_MAX};
use super::{row_bytes, threads, Indexed, Layout, Storage, PARALLEL_BYTES};
use crate::call_settings::CallSettings;
use crate::gather::{GatherPlan, HostBuffer, Rest};
use h5gds_chunk_codec::place::{copy_box, ChunkPart, SharedOut, Source};
use h5gds_chunk_codec::{read_placed, Decoding, Hyperslab, Pipeline, Placed};
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

/// A gather's runs of rows as selections: start, step, count, and the byte and length of the
/// output they fill.
pub(super) type Runs = [(Vec<u64>, Vec<u64>, Vec<u64>, u64, u64)];

impl Layout {
    /// [`Layout::gather_in_place`] of `plan`'s rows (each: `rest` of the other axes) into `out`.
    pub(crate) fn gather_rows_in_place(
        &self,
        py: Python<'_>,
        plan: &GatherPlan,
        rest: &Rest,
        out: HostBuffer,
        settings: &CallSettings,
    ) -> PyResult<bool> {
        let (buffer, nbytes) = (out.address, out.nbytes);
        let len = plan.len() as u64;
        if len == 0 {
            return Ok(true);
        }
        let row_bytes = row_bytes(nbytes, len, "indices")?;
        let Some(pieces) = self.whole_row_pieces(
            plan.caller_runs(),
            rest.start,
            rest.step,
            rest.count,
            row_bytes,
        ) else {
            return Ok(false);
        };
        self.read_pieces_into(py, &pieces, buffer, nbytes, settings)?;
        Ok(true)
    }

    /// [`Layout::gather`] of `plan`'s distinct rows (each: `rest` of the other axes) into `out`.
    pub(crate) fn gather_rows(
        &self,
        py: Python<'_>,
        plan: &GatherPlan,
        rest: &Rest,
        out: HostBuffer,
        settings: &CallSettings,
    ) -> PyResult<bool> {
        let (buffer, nbytes) = (out.address, out.nbytes);
        let distinct = plan.distinct_rows() as u64;
        if distinct == 0 {
            return Ok(true);
        }
        let row_bytes = row_bytes(nbytes, distinct, "rows")?;
        if let Some(pieces) = self.whole_row_pieces(
            plan.row_runs().iter().copied(),
            rest.start,
            rest.step,
            rest.count,
            row_bytes,
        ) {
            self.read_pieces_into(py, &pieces, buffer, nbytes, settings)?;
            return Ok(true);
        }
        // One selection per run of rows, each checked, and where its bytes go.
        let mut reads = Vec::with_capacity(plan.row_runs().len());
        let mut at = 0u64;
        for &(first, rows) in plan.row_runs() {
            let start: Vec<u64> = std::iter::once(first)
                .chain(rest.start.iter().copied())
                .collect();
            let step: Vec<u64> = std::iter::once(1)
                .chain(rest.step.iter().copied())
                .collect();
            let count: Vec<u64> = std::iter::once(rows)
                .chain(rest.count.iter().copied())
                .collect();
            reads.push((start, step, count, at, rows * row_bytes));
            at += rows * row_bytes;
        }
        let mut served = Vec::with_capacity(reads.len());
        for (start, step, count, _, len) in &reads {
            let sel = Hyperslab { start, step, count };
            self.check(&sel, *len as usize)
                .map_err(PyValueError::new_err)?;
            let Some(parts) = self.serves(&sel)? else {
                return Ok(false);
            };
            served.push(parts);
        }
        if self.gather_in_one_large_chunk(py, &reads, &served, buffer, nbytes)? {
            return Ok(true);
        }
        let threads = threads(settings)?;
        if let Some(decoded) = self.gather_decoding(&served) {
            return self.gather_decoded(py, decoded, &reads, buffer, nbytes, threads);
        }
        let pool = (reads.len() > 1 && nbytes >= PARALLEL_BYTES && threads > 1)
            .then(|| h5gds_runtime::pool::get(threads))
            .flatten();
        // Runs read at once on the pool read their own chunks on one thread each.
        let inner = if pool.is_some() { 1 } else { threads };
        py.detach(|| {
            // SAFETY: the runs' bytes are disjoint parts of the caller's buffer, which it keeps
            // alive for the call (the pool is done with them when this returns).
            let out = unsafe { SharedOut::new(buffer as *mut u8) };
            let one = |k: usize| -> Result<(), String> {
                let (start, step, count, at, len) = &reads[k];
                let sel = Hyperslab { start, step, count };
                // SAFETY: the runs' bytes are disjoint parts of the caller's buffer (its size
                // checked above), which it keeps alive for the call.
                let dest = unsafe { std::slice::from_raw_parts_mut(out.at(*at), *len as usize) };
                self.read_served(&sel, &served[k], dest, inner)
            };
            match pool {
                Some(pool) => {
                    use rayon::prelude::*;
                    pool.install(|| (0..reads.len()).into_par_iter().try_for_each(one))
                }
                None => (0..reads.len()).try_for_each(one),
            }
        })
        .map_err(PyOSError::new_err)?;
        Ok(true)
    }

    /// For a gather of compressed chunks (`served`: the chunks each run touches), the pipeline
    /// and chunk shape to decode them with once for all the runs; None where each run is read on
    /// its own: unfiltered chunks (runs read straight from the file), or runs inside one small
    /// chunk (decoded once and kept, `read_in_one_chunk`).
    pub(super) fn gather_decoding(&self, served: &[Vec<ChunkPart>]) -> Option<(&Pipeline, &[u64])> {
        let Storage::Chunked {
            chunk, pipeline, ..
        } = &self.storage
        else {
            return None;
        };
        if pipeline.stages().is_empty() {
            return None;
        }
        let first = served.iter().flatten().next()?;
        let one_chunk = served
            .iter()
            .flatten()
            .all(|part| part.offset == first.offset);
        let small = chunk.iter().product::<u64>() as usize * self.element <= KEPT_CHUNK_MAX;
        (!(one_chunk && small)).then_some((pipeline, chunk.as_slice()))
    }

    /// Reads a gather's runs of rows (`reads`, into the host buffer at `buffer`, `nbytes`) that
    /// all lie in one compressed chunk larger than [`KEPT_CHUNK_MAX`] from that chunk decoded
    /// once, as far as the last run needs, and kept for the next read ([`Layout::large_chunk`]:
    /// batches of neighbouring rows); false (nothing read) for any other gather.
    pub(super) fn gather_in_one_large_chunk(
        &self,
        py: Python<'_>,
        reads: &Runs,
        served: &[Vec<ChunkPart>],
        buffer: usize,
        nbytes: usize,
    ) -> PyResult<bool> {
        let Storage::Chunked {
            chunk,
            pipeline,
            index,
            large,
            ..
        } = &self.storage
        else {
            return Ok(false);
        };
        let chunk_bytes = chunk.iter().product::<u64>() as usize * self.element;
        let Some(first) = served.iter().flatten().next() else {
            return Ok(false);
        };
        if pipeline.stages().is_empty()
            || chunk_bytes <= KEPT_CHUNK_MAX
            || !served
                .iter()
                .flatten()
                .all(|part| part.offset == first.offset)
        {
            return Ok(false);
        }
        let Some(stored) = index.get(&first.offset) else {
            return Ok(false);
        };
        // Each run's start inside the chunk.
        let starts: Vec<Vec<u64>> = reads
            .iter()
            .map(|(start, ..)| {
                start
                    .iter()
                    .zip(&first.offset)
                    .map(|(s, o)| s - o)
                    .collect()
            })
            .collect();
        let needed = reads
            .iter()
            .zip(&starts)
            .map(|((_, step, count, ..), start)| last_byte(start, step, count, chunk, self.element))
            .max()
            .unwrap_or(0);
        if reads.iter().any(|(.., at, len)| at + len > nbytes as u64) {
            return Err(PyValueError::new_err(format!(
                "dataset {}: a run of the gather lies outside its buffer of {nbytes} bytes",
                self.name
            )));
        }
        py.detach(|| {
            let decoded =
                self.large_chunk(&first.offset, &stored, pipeline, chunk_bytes, needed, large)?;
            for ((_, step, count, at, _), start) in reads.iter().zip(&starts) {
                let src = Source {
                    bytes: &decoded,
                    shape: chunk,
                    start,
                    step,
                };
                let zeros = vec![0u64; count.len()];
                // SAFETY: the Python caller passes the address and size of a live, writable host
                // buffer it keeps referenced for the call; the run's place lies inside it
                // (checked above) and is written by this thread alone.
                unsafe {
                    copy_box(
                        &src,
                        (buffer as *mut u8).add(*at as usize),
                        count,
                        &zeros,
                        count,
                        self.element,
                    )
                };
            }
            Ok::<(), String>(())
        })
        .map_err(PyOSError::new_err)?;
        Ok(true)
    }

    /// Reads a gather's runs of rows (`reads`, into the host buffer at `buffer`, `nbytes`) with
    /// every compressed chunk they touch read and decoded once, on `threads` of the pool, each
    /// run's rows copied from it (`h5gds_chunk_codec::read_placed`); the GIL released. Every
    /// chunk is in the index (`serves` said so).
    pub(super) fn gather_decoded(
        &self,
        py: Python<'_>,
        (pipeline, chunk): (&Pipeline, &[u64]),
        reads: &Runs,
        buffer: usize,
        nbytes: usize,
        threads: usize,
    ) -> PyResult<bool> {
        let Storage::Chunked { index, .. } = &self.storage else {
            return Ok(false);
        };
        let placed: Vec<Placed> = reads
            .iter()
            .map(|(start, step, count, at, _)| Placed {
                selection: Hyperslab { start, step, count },
                at: *at,
            })
            .collect();
        let how = Decoding {
            pipeline,
            chunk,
            element_size: self.element,
            threads,
        };
        py.detach(|| {
            // SAFETY: the Python caller passes the address and size of a live, writable host
            // buffer it keeps referenced for the call; the runs' places lie inside it (checked).
            let out = unsafe { std::slice::from_raw_parts_mut(buffer as *mut u8, nbytes) };
            let mut source = Indexed {
                layout: self,
                index,
            };
            let (outcome, _) = read_placed(&mut source, &how, &placed, out)?;
            if !outcome.missing.is_empty() {
                return Err(format!(
                    "dataset {}: the chunk at {:?} is not in its chunk index",
                    self.name, outcome.missing[0].offset
                ));
            }
            h5gds::with_logging(|| {
                tracing::debug!(
                    "h5gds.read of {}: a gather of {} runs of rows, {} chunks each decoded once \
                     on {threads} threads, with no HDF5 call",
                    self.name,
                    placed.len(),
                    outcome.decoded
                )
            });
            Ok(())
        })
        .map_err(PyOSError::new_err)?;
        Ok(true)
    }
}
