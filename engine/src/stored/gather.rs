//! A gather's runs of rows (`h5gds.read(d, sel=rows)`, array-io's `from_file_rows`) read from a
//! stored dataset: whole rows of a contiguous one one `pread` per run; compressed chunks decoded
//! once for all the runs they hold, or one large chunk decoded once and kept.

use super::chunk_cache::{last_byte, KEPT_CHUNK_MAX};
use super::{each_on, pool_for, Indexed, Storage, Stored, StoredError, Threads, PARALLEL_BYTES};
use crate::rows::RowRuns;
use h5gds_chunk_codec::place::{chunks_selected, copy_box, ChunkPart, SharedOut, Source};
use h5gds_chunk_codec::{read_placed, Decoding, Hyperslab};

/// A run of a gather's rows as a selection, and the byte and length of the output it fills
/// ([`RowRuns::iter`]).
type Run<'a> = (Hyperslab<'a>, u64, u64);

/// The bytes of one row of a gather's buffer of `nbytes` holding `rows` rows (`what`: the rows
/// counted, for the message); Invalid where they do not divide it.
fn row_bytes(nbytes: usize, rows: u64, what: &str) -> Result<u64, StoredError> {
    let row_bytes = nbytes as u64 / rows;
    if row_bytes * rows != nbytes as u64 {
        return Err(StoredError::Invalid(format!(
            "the buffer has {nbytes} bytes, not a whole number of rows for the {rows} {what} of \
             the gather"
        )));
    }
    Ok(row_bytes)
}

impl Stored {
    /// Reads a gather's rows straight into the caller's order (`runs`: runs of rows that are
    /// neighbours both in the file and in that order, `rows` in all, repeats included), each run
    /// one piece, for contiguous datasets and whole rows only (`rest` selects all of the other
    /// axes); false otherwise, with nothing read.
    pub fn gather_in_place(
        &self,
        runs: impl IntoIterator<Item = (u64, u64)>,
        rows: u64,
        rest: &Hyperslab,
        out: &mut [u8],
        threads: Threads,
    ) -> Result<bool, StoredError> {
        if rows == 0 {
            return Ok(true);
        }
        let row_bytes = row_bytes(out.len(), rows, "indices")?;
        self.read_whole_rows(runs, (rest, row_bytes), out, threads)
    }

    /// Reads a gather's `distinct` rows (`runs`: first row, rows; in increasing order; each row
    /// `rest` of the other axes) into `out` in increasing order, the runs on the pool's threads
    /// at once (compressed chunks: each chunk the runs touch decoded once); false (nothing read)
    /// where HDF5 is to read them.
    pub fn gather(
        &self,
        runs: &[(u64, u64)],
        distinct: u64,
        rest: &Hyperslab,
        out: &mut [u8],
        threads: Threads,
    ) -> Result<bool, StoredError> {
        if distinct == 0 {
            return Ok(true);
        }
        let row_bytes = row_bytes(out.len(), distinct, "rows")?;
        if self.read_whole_rows(runs.iter().copied(), (rest, row_bytes), out, threads)? {
            return Ok(true);
        }
        // One selection per run of rows, each checked, and where its bytes go.
        let runs = RowRuns::new(runs, rest, row_bytes);
        let reads: Vec<Run> = runs.iter().collect();
        let mut served = Vec::with_capacity(reads.len());
        for (sel, _, len) in &reads {
            self.check(sel, *len as usize)
                .map_err(StoredError::Invalid)?;
            let Some(parts) = self.serves(sel).map_err(StoredError::Invalid)? else {
                return Ok(false);
            };
            served.push(parts);
        }
        // The one chunk every run lies in, if they all lie in one.
        let mut parts = served.iter().flatten();
        let first = parts.next();
        let one_chunk = first.filter(|first| parts.all(|part| part.offset == first.offset));
        if self.gather_in_one_large_chunk(&reads, one_chunk, out)? {
            return Ok(true);
        }
        let threads = threads().map_err(StoredError::Invalid)?;
        if self.gather_decoding(first.is_some(), one_chunk.is_some()) {
            return self.gather_decoded(&runs, out, threads).map(|()| true);
        }
        let pool = pool_for(reads.len() > 1 && out.len() >= PARALLEL_BYTES, threads);
        // Runs read at once on the pool read their own chunks on one thread each.
        let inner = if pool.is_some() { 1 } else { threads };
        // SAFETY: the runs' bytes are disjoint parts of `out` (sizes checked above), which
        // outlives the reads below.
        let out = unsafe { SharedOut::new(out.as_mut_ptr()) };
        let one = |k: usize| -> Result<(), StoredError> {
            let (sel, at, len) = &reads[k];
            // SAFETY: each run's bytes are written by one thread alone, inside `out`.
            let dest = unsafe { std::slice::from_raw_parts_mut(out.at(*at), *len as usize) };
            self.read_served(sel, &served[k], dest, inner)
        };
        each_on(pool.as_deref(), reads.len(), 1, one)?;
        Ok(true)
    }

    /// For a contiguous dataset whose gather takes whole rows (`rest` selects every element of
    /// the other axes, each row `row_bytes`), reads the runs of rows `runs` (first row, rows; in
    /// output order) as pieces of the file, with no per-run selection to map: a gather of
    /// thousands of small rows is then one `pread` per run. False (nothing read) otherwise, or
    /// where `row_bytes` is not the dataset's row or a run lies outside it.
    fn read_whole_rows(
        &self,
        runs: impl IntoIterator<Item = (u64, u64)>,
        (rest, row_bytes): (&Hyperslab, u64),
        out: &mut [u8],
        threads: Threads,
    ) -> Result<bool, StoredError> {
        let (Storage::Contiguous { address }, Some(others)) = (&self.storage, self.shape.get(1..))
        else {
            return Ok(false);
        };
        let whole = rest.count == others
            && rest.start.iter().all(|&s| s == 0)
            && rest.step.len() == others.len()
            && rest
                .step
                .iter()
                .zip(others)
                .all(|(&t, &n)| t == 1 || n <= 1);
        if !whole || others.iter().product::<u64>() * self.element as u64 != row_bytes {
            return Ok(false);
        }
        let mut at = 0u64;
        let mut pieces = Vec::new();
        for (first, rows) in runs {
            if first
                .checked_add(rows)
                .is_none_or(|end| end > self.shape[0])
            {
                return Ok(false);
            }
            pieces.push((address + first * row_bytes, at, rows * row_bytes));
            at += rows * row_bytes;
        }
        let threads = threads().map_err(StoredError::Invalid)?;
        let read = self.read_pieces(&pieces, out, threads, None);
        read.map(|()| true).map_err(StoredError::Failed)
    }

    /// Whether a gather of compressed chunks (touching any, all in one chunk or not) decodes
    /// them once for all the runs; not where each run is read on its own: unfiltered chunks
    /// (runs read straight from the file), or runs inside one small chunk (decoded once and
    /// kept, `read_in_one_chunk`).
    fn gather_decoding(&self, any: bool, one_chunk: bool) -> bool {
        let Storage::Chunked {
            chunk, pipeline, ..
        } = &self.storage
        else {
            return false;
        };
        let small = chunk.iter().product::<u64>() as usize * self.element <= KEPT_CHUNK_MAX;
        any && !(pipeline.stages().is_empty() || one_chunk && small)
    }

    /// Reads a gather's runs of rows (`reads`, into `out`) that all lie in one compressed chunk
    /// larger than [`KEPT_CHUNK_MAX`] from that chunk decoded once, as far as the last run
    /// needs, and kept for the next read ([`Stored::large_chunk`]: batches of neighbouring
    /// rows); false (nothing read) for any other gather.
    fn gather_in_one_large_chunk(
        &self,
        reads: &[Run],
        one_chunk: Option<&ChunkPart>,
        out: &mut [u8],
    ) -> Result<bool, StoredError> {
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
        let Some(first) = one_chunk else {
            return Ok(false);
        };
        if pipeline.stages().is_empty() || chunk_bytes <= KEPT_CHUNK_MAX {
            return Ok(false);
        }
        let Some(stored) = index.get(&first.offset) else {
            return Ok(false);
        };
        // Each run's start inside the chunk.
        let starts: Vec<Vec<u64>> = reads
            .iter()
            .map(|(sel, ..)| {
                sel.start
                    .iter()
                    .zip(&first.offset)
                    .map(|(s, o)| s - o)
                    .collect()
            })
            .collect();
        let needed = reads
            .iter()
            .zip(&starts)
            .map(|((sel, ..), start)| last_byte(start, sel.step, sel.count, chunk, self.element))
            .max()
            .unwrap_or(0);
        let nbytes = out.len();
        if reads.iter().any(|(.., at, len)| at + len > nbytes as u64) {
            return Err(StoredError::Invalid(format!(
                "dataset {}: a run of the gather lies outside its buffer of {nbytes} bytes",
                self.name
            )));
        }
        let decoded =
            self.large_chunk(&first.offset, &stored, pipeline, chunk_bytes, needed, large)?;
        let zeros = vec![0u64; chunk.len()];
        for ((sel, at, _), start) in reads.iter().zip(&starts) {
            let src = Source {
                bytes: &decoded,
                shape: chunk,
                start,
                step: sel.step,
            };
            // SAFETY: the run's place lies inside `out` (checked above), borrowed exclusively.
            unsafe {
                copy_box(
                    &src,
                    out.as_mut_ptr().add(*at as usize),
                    sel.count,
                    &zeros,
                    sel.count,
                    self.element,
                )
            };
        }
        Ok(true)
    }

    /// Reads a gather's runs of rows (`runs`, into `out`) with every compressed chunk they
    /// touch read and decoded once, on `threads` of the pool, each run's rows copied from it
    /// (`h5gds_chunk_codec::read_placed`). Every chunk is in the index (`serves` said so).
    fn gather_decoded(
        &self,
        runs: &RowRuns,
        out: &mut [u8],
        threads: usize,
    ) -> Result<(), StoredError> {
        let Storage::Chunked {
            chunk,
            pipeline,
            index,
            ..
        } = &self.storage
        else {
            return Ok(());
        };
        let placed = runs.placed();
        let how = Decoding {
            pipeline,
            chunk,
            element_size: self.element,
            threads,
        };
        let parts: Vec<_> = placed
            .iter()
            .flat_map(|p| chunks_selected(&p.selection, chunk))
            .collect();
        let mut source = Indexed::new(self, index, &parts);
        let (outcome, _) = read_placed(&mut source, &how, &placed, out)?;
        if let Some(missing) = outcome.missing.first() {
            return Err(StoredError::Failed(format!(
                "dataset {}: the chunk at {:?} is not in its chunk index",
                self.name, missing.offset
            )));
        }
        (self.log)(format_args!(
            "{}: a gather of {} runs of rows, {} chunks each decoded once on \
             {threads} threads, with no HDF5 call",
            self.name,
            placed.len(),
            outcome.decoded
        ));
        Ok(())
    }
}
