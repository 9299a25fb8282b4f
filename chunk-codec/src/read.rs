//! A hyperslab of a compressed chunked dataset read into a host array: the calling thread (which
//! holds HDF5's lock) reads the needed chunks' stored bytes one after another through the
//! caller's [`RawChunks`], and the process's thread pool (`h5gds_runtime::pool`, the driver's
//! I/O threads) decodes them and copies their selected elements into place meanwhile. At most a
//! bounded number of stored chunks wait for decoding, so memory stays a few chunks per thread.
//! Chunks never written are returned to the caller, which reads them through HDF5 (it fills
//! them with the fill value) and places them with [`place_missing`]. Several selections at once
//! ([`read_placed`], a gather's runs of rows) share the chunks they touch: each is read and
//! decoded once, and every selection's part of it copied into place.

mod job;
mod raw_chunks;
mod slot;

pub use raw_chunks::{read_stored_at, reopen, RawChunks, StoredChunk, LIST_INDEX_FROM};

use crate::in_flight::pool_and_slots;
use crate::pipeline::Pipeline;
use crate::place::{chunks_selected, copy_box_into, ChunkPart, Hyperslab, SharedOut, Source};
use job::Job;
use raw_chunks::read_at;
use slot::Slot;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex};

/// One read: how the chunks are stored and what is selected.
pub struct HostRead<'a> {
    pub pipeline: &'a Pipeline,
    /// The chunk shape, in elements.
    pub chunk: &'a [u64],
    /// Bytes per element.
    pub element_size: usize,
    pub selection: Hyperslab<'a>,
    /// Decoding threads (the driver's I/O thread count); 1 decodes on the calling thread.
    pub threads: usize,
}

/// What a read did: the chunks decoded, and the parts in chunks never written.
#[derive(Debug, Default)]
pub struct Outcome {
    pub decoded: usize,
    pub missing: Vec<ChunkPart>,
    /// Whether the stored bytes were read from the file directly (else through the source).
    pub direct: bool,
}

/// One selection of a read of several ([`read_placed`]): its hyperslab, and the byte of the output
/// where its elements begin (row-major). The selections' elements lie in disjoint bytes.
#[derive(Clone, Copy, Debug)]
pub struct Placed<'a> {
    pub selection: Hyperslab<'a>,
    pub at: u64,
}

/// How a read of several selections decodes: the pipeline, chunk shape, element size and
/// threads of a [`HostRead`], with no selection of its own.
#[derive(Clone, Copy)]
pub struct Decoding<'a> {
    pub pipeline: &'a Pipeline,
    pub chunk: &'a [u64],
    pub element_size: usize,
    pub threads: usize,
}

/// Reads the selection of `r` into `out` (the selection's elements, row-major). Chunks never
/// written are left for the caller ([`Outcome::missing`]). On an error nothing more is read;
/// `out` may hold some chunks' elements.
pub fn read<R: RawChunks>(
    source: &mut R,
    r: &HostRead,
    out: &mut [u8],
) -> Result<Outcome, R::Error> {
    let elements: u64 = r.selection.count.iter().product();
    assert_eq!(
        out.len() as u64,
        elements * r.element_size as u64,
        "the output holds the selection"
    );
    let how = Decoding {
        pipeline: r.pipeline,
        chunk: r.chunk,
        element_size: r.element_size,
        threads: r.threads,
    };
    let placed = [Placed {
        selection: r.selection,
        at: 0,
    }];
    let (outcome, _) = read_placed(source, &how, &placed, out)?;
    Ok(outcome)
}

/// Reads several selections (a gather's runs of rows) into `out`, each at its place: every
/// chunk they touch read and decoded once, on the pool's threads, and each selection's part of
/// it copied into place, so a chunk that serves many runs is not decoded for each. Memory: the
/// output, and a stored and a decoded chunk per chunk in flight. Parts in chunks never written
/// are left for the caller, with the position of their selection in `selections` (the second
/// value). On an error nothing more is read; `out` may hold some chunks' elements.
pub fn read_placed<R: RawChunks>(
    source: &mut R,
    how: &Decoding,
    selections: &[Placed],
    out: &mut [u8],
) -> Result<(Outcome, Vec<usize>), R::Error> {
    for placed in selections {
        let elements: u64 = placed.selection.count.iter().product();
        assert!(
            placed.at + elements * how.element_size as u64 <= out.len() as u64,
            "the output holds every selection at its place"
        );
    }
    // The chunks in chunk order, each with its parts (a BTreeMap: offsets compare row-major).
    let mut by_chunk: std::collections::BTreeMap<Vec<u64>, Vec<(usize, ChunkPart)>> =
        std::collections::BTreeMap::new();
    for (k, placed) in selections.iter().enumerate() {
        for part in chunks_selected(&placed.selection, how.chunk) {
            by_chunk
                .entry(part.offset.clone())
                .or_default()
                .push((k, part));
        }
    }
    let mut outcome = Outcome::default();
    let mut missing_of = Vec::new();
    let mut jobs = Vec::with_capacity(by_chunk.len());
    for (offset, parts) in by_chunk {
        match source.stored(&offset)? {
            Some(stored) => jobs.push(Job {
                offset,
                stored,
                parts,
            }),
            None => {
                for (k, part) in parts {
                    missing_of.push(k);
                    outcome.missing.push(part);
                }
            }
        }
    }
    outcome.decoded = jobs.len();
    if jobs.is_empty() {
        return Ok((outcome, missing_of));
    }
    let direct = source.direct_file();
    outcome.direct = direct.is_some();
    // SAFETY: each task writes only its chunk's elements of the selections (every element of a
    // selection lies in one chunk, and the selections' places are disjoint), and the read waits
    // for every task before it returns the caller's buffer.
    let out = unsafe { SharedOut::new(out.as_mut_ptr()) };
    // At least two chunks in flight, one read while the other decodes (a stored chunk and two
    // decoded ones each).
    let Some((pool, slots)) = pool_and_slots(how.threads, jobs.len(), how.chunk_bytes(), 2) else {
        let mut slot = Slot::take();
        for job in &jobs {
            if let (Some(file), Some(at)) = (&direct, how.plain_run(job, selections)) {
                // SAFETY: one chunk at a time on this thread, into its run of the output.
                unsafe { how.read_plain(file, job, at, out) }
                    .map_err(|reason| source.corrupt(&job.offset, reason))?;
                continue;
            }
            let mask = match &direct {
                Some(file) => {
                    read_at(file, &job.stored, &mut slot.stored)
                        .map_err(|reason| source.corrupt(&job.offset, reason))?;
                    job.stored.mask
                }
                None => source.read(&job.offset, job.stored.size, &mut slot.stored)?,
            };
            // SAFETY: one chunk at a time on this thread, into the caller's output.
            unsafe { how.decode_job(job, selections, mask, &mut slot, out) }
                .map_err(|reason| source.corrupt(&job.offset, reason))?;
        }
        slot.give_back();
        return Ok((outcome, missing_of));
    };
    let (free, freed) = mpsc::channel::<Slot>();
    for _ in 0..slots {
        free.send(Slot::take()).expect("the receiver is alive");
    }
    // The first chunk (in chunk order) that failed to decode, and why.
    let failure: Mutex<Option<(usize, String)>> = Mutex::new(None);
    let stop = AtomicBool::new(false);
    let mut read_error = None;
    pool.in_place_scope(|scope| {
        for (i, job) in jobs.iter().enumerate() {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            // A slot comes back from every task, so this returns; `free` lives here too.
            let Ok(mut slot) = freed.recv() else { break };
            // Read here (through HDF5), or by the task itself (from the file).
            let mask = match direct {
                Some(_) => job.stored.mask,
                None => match source.read(&job.offset, job.stored.size, &mut slot.stored) {
                    Ok(mask) => mask,
                    Err(e) => {
                        read_error = Some(e);
                        break;
                    }
                },
            };
            let (free, failure, stop, direct) = (free.clone(), &failure, &stop, &direct);
            scope.spawn(move |_| {
                let result = catch_unwind(AssertUnwindSafe(|| {
                    if let Some(file) = direct {
                        if let Some(at) = how.plain_run(job, selections) {
                            // SAFETY: this task alone writes this chunk's run of the output,
                            // which the caller keeps until every task has finished.
                            return unsafe { how.read_plain(file, job, at, out) };
                        }
                        read_at(file, &job.stored, &mut slot.stored)?;
                    }
                    // SAFETY: this task alone writes this chunk's elements of the output, which
                    // the caller keeps until every task has finished.
                    unsafe { how.decode_job(job, selections, mask, &mut slot, out) }
                }))
                .unwrap_or_else(|_| Err("decoding it panicked".into()));
                if let Err(reason) = result {
                    stop.store(true, Ordering::Relaxed);
                    let mut first = failure.lock().unwrap_or_else(|p| p.into_inner());
                    if first.as_ref().is_none_or(|(j, _)| i < *j) {
                        *first = Some((i, reason));
                    }
                }
                let _ = free.send(slot);
            });
        }
    });
    // Every task has ended: the slots are back.
    drop(free);
    freed.into_iter().for_each(Slot::give_back);
    if let Some(e) = read_error {
        return Err(e);
    }
    if let Some((i, reason)) = failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(source.corrupt(&jobs[i].offset, reason));
    }
    tracing::debug!(
        "decoded {} chunks for {} selections on {} threads ({} in flight)",
        jobs.len(),
        selections.len(),
        how.threads,
        slots
    );
    Ok((outcome, missing_of))
}

/// Places a part of chunks never written, read by the caller (its elements, row-major, in
/// `values`), into `out` as [`read`] would have.
pub fn place_missing(part: &ChunkPart, values: &[u8], r: &HostRead, out: &mut [u8]) {
    let zeros = vec![0u64; part.count.len()];
    let ones = vec![1u64; part.count.len()];
    let src = Source {
        bytes: values,
        shape: &part.count,
        start: &zeros,
        step: &ones,
    };
    let elements: u64 = r.selection.count.iter().product();
    assert_eq!(out.len() as u64, elements * r.element_size as u64);
    copy_box_into(
        &src,
        out,
        r.selection.count,
        &part.first,
        &part.count,
        r.element_size,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::{chunks_decoded, Filter};
    use std::collections::HashMap;

    /// A 2-D dataset of u32 (value = flat index) in chunks, Zstandard-compressed in memory;
    /// `holes` are chunks never written, `bad` one stored corrupt.
    struct Memory {
        chunks: HashMap<Vec<u64>, Vec<u8>>,
        /// Where each chunk lies in `file`, when the chunks are read from one.
        addresses: HashMap<Vec<u64>, u64>,
        file: Option<tempfile::NamedTempFile>,
        reads: usize,
        fail_read: Option<Vec<u64>>,
        /// Every chunk's filter mask (1: stored as its decoded bytes, Zstandard skipped).
        mask: u32,
    }

    impl Memory {
        /// The same chunks, also stored one after another in a file read directly.
        fn on_file(mut self) -> Memory {
            use std::io::Write;
            let mut file = tempfile::NamedTempFile::new().unwrap();
            let mut at = 0u64;
            let mut offsets: Vec<_> = self.chunks.keys().cloned().collect();
            offsets.sort();
            for offset in offsets {
                let bytes = &self.chunks[&offset];
                file.write_all(bytes).unwrap();
                self.addresses.insert(offset, at);
                at += bytes.len() as u64;
            }
            self.file = Some(file);
            self
        }
    }

    const SHAPE: [u64; 2] = [50, 37];
    const CHUNK: [u64; 2] = [8, 5];

    fn memory(holes: &[[u64; 2]], bad: Option<[u64; 2]>) -> Memory {
        memory_masked(holes, bad, 0)
    }

    /// As [`memory`], every chunk stored with filter mask `mask` (1: not compressed).
    fn memory_masked(holes: &[[u64; 2]], bad: Option<[u64; 2]>, mask: u32) -> Memory {
        let mut chunks = HashMap::new();
        for r in (0..SHAPE[0]).step_by(CHUNK[0] as usize) {
            for c in (0..SHAPE[1]).step_by(CHUNK[1] as usize) {
                if holes.contains(&[r, c]) {
                    continue;
                }
                let mut bytes = Vec::new();
                for i in 0..CHUNK[0] {
                    for j in 0..CHUNK[1] {
                        let v = ((r + i) * SHAPE[1] + c + j) as u32;
                        bytes.extend(v.to_le_bytes());
                    }
                }
                let mut stored = match mask {
                    0 => zstd::bulk::compress(&bytes, 1).unwrap(),
                    _ => bytes,
                };
                if bad == Some([r, c]) {
                    stored.truncate(stored.len() / 2);
                }
                chunks.insert(vec![r, c], stored);
            }
        }
        Memory {
            addresses: chunks.keys().map(|k| (k.clone(), 0)).collect(),
            chunks,
            file: None,
            reads: 0,
            fail_read: None,
            mask,
        }
    }

    impl RawChunks for Memory {
        type Error = String;
        fn stored(&mut self, offset: &[u64]) -> Result<Option<StoredChunk>, String> {
            Ok(self.chunks.get(offset).map(|c| StoredChunk {
                size: c.len(),
                mask: self.mask,
                address: self.addresses[offset],
            }))
        }
        fn direct_file(&mut self) -> Option<std::fs::File> {
            self.file.as_ref().map(|f| f.reopen().unwrap())
        }
        fn read(&mut self, offset: &[u64], size: usize, buf: &mut Vec<u8>) -> Result<u32, String> {
            if self.fail_read.as_deref() == Some(offset) {
                return Err(format!("read of {offset:?} failed"));
            }
            self.reads += 1;
            buf.clear();
            buf.extend_from_slice(&self.chunks[offset][..size]);
            Ok(self.mask)
        }
        fn corrupt(&self, offset: &[u64], reason: String) -> String {
            format!("chunk {offset:?}: {reason}")
        }
    }

    fn expected(start: &[u64], step: &[u64], count: &[u64]) -> Vec<u32> {
        let mut v = Vec::new();
        for i in 0..count[0] {
            for j in 0..count[1] {
                let (r, c) = (start[0] + i * step[0], start[1] + j * step[1]);
                v.push((r * SHAPE[1] + c) as u32);
            }
        }
        v
    }

    fn run(
        m: &mut Memory,
        start: &[u64],
        step: &[u64],
        count: &[u64],
        threads: usize,
    ) -> Result<(Vec<u32>, Outcome), String> {
        let pipeline = Pipeline::for_filters(
            &[Filter {
                id: 32015,
                values: vec![],
            }],
            4,
        )
        .unwrap();
        let r = HostRead {
            pipeline: &pipeline,
            chunk: &CHUNK,
            element_size: 4,
            selection: Hyperslab { start, step, count },
            threads,
        };
        let n = count.iter().product::<u64>() as usize;
        let mut out = vec![0u8; n * 4];
        let outcome = read(m, &r, &mut out)?;
        Ok((
            out.chunks(4)
                .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
                .collect(),
            outcome,
        ))
    }

    #[test]
    fn selections_read_the_same_elements_on_one_and_many_threads() {
        for (threads, direct) in [(1, false), (3, false), (1, true), (3, true)] {
            for (start, step, count) in [
                ([0, 0], [1, 1], [50, 37]),
                ([3, 4], [1, 1], [40, 30]),
                ([1, 2], [3, 7], [16, 5]),
                ([49, 36], [1, 1], [1, 1]),
                // Whole chunks that fill runs of the output (decoded in place).
                ([0, 5], [1, 1], [48, 5]),
                ([8, 30], [1, 1], [17, 5]),
            ] {
                let mut m = memory(&[], None);
                if direct {
                    m = m.on_file();
                }
                let (got, outcome) = run(&mut m, &start, &step, &count, threads).unwrap();
                assert_eq!(got, expected(&start, &step, &count), "{start:?} {step:?}");
                // Read from the file directly, or each through the source.
                assert_eq!(m.reads, if direct { 0 } else { outcome.decoded });
                assert!(outcome.missing.is_empty());
            }
        }
    }

    #[test]
    fn chunks_stored_as_their_bytes_read_the_same_elements_straight_into_place() {
        // Whole chunks filling runs of the output are read from the file into place; the
        // others, and every chunk read through the source, are copied out of a buffer.
        for (threads, direct) in [(1, false), (3, false), (1, true), (3, true)] {
            for (start, step, count) in [
                ([0, 0], [1, 1], [50, 37]),
                ([0, 5], [1, 1], [48, 5]),
                ([8, 30], [1, 1], [17, 5]),
                ([1, 2], [3, 7], [16, 5]),
            ] {
                let mut m = memory_masked(&[], None, 1);
                if direct {
                    m = m.on_file();
                }
                let (got, outcome) = run(&mut m, &start, &step, &count, threads).unwrap();
                assert_eq!(got, expected(&start, &step, &count), "{start:?} {step:?}");
                assert_eq!(m.reads, if direct { 0 } else { outcome.decoded });
            }
        }
    }

    #[test]
    fn reads_from_the_pools_own_threads_finish_on_those_threads() {
        // Two pool threads each reading with three threads: waiting on the pool from its own
        // threads would leave no thread for the decoding tasks.
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use rayon::prelude::*;
            let pool = h5gds_runtime::pool::get(2).expect("a pool");
            let got: Vec<Vec<u32>> = pool.install(|| {
                (0..4)
                    .into_par_iter()
                    .map(|_| {
                        let mut m = memory(&[], None);
                        run(&mut m, &[0, 0], &[1, 1], &[50, 37], 3).unwrap().0
                    })
                    .collect()
            });
            let _ = done.send(got);
        });
        let got = finished
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("reads on the pool's threads finished");
        for one in got {
            assert_eq!(one, expected(&[0, 0], &[1, 1], &[50, 37]));
        }
    }

    #[test]
    fn chunks_never_written_are_left_to_the_caller() {
        let mut m = memory(&[[8, 5], [48, 35]], None);
        let (got, outcome) = run(&mut m, &[0, 0], &[1, 1], &[50, 37], 2).unwrap();
        let offsets: Vec<_> = outcome.missing.iter().map(|p| p.offset.clone()).collect();
        assert_eq!(offsets, [vec![8, 5], vec![48, 35]]);
        // Their elements are untouched (zero) until placed.
        assert_eq!(got[8 * 37 + 5], 0);
        assert_eq!(got[8 * 37 + 4], (8 * 37 + 4) as u32);
    }

    #[test]
    fn chunks_read_from_the_file_name_a_short_file_and_a_corrupt_chunk() {
        for threads in [1, 4] {
            let mut m = memory(&[], Some([16, 10])).on_file();
            let e = run(&mut m, &[0, 0], &[1, 1], &[50, 37], threads).unwrap_err();
            assert!(e.starts_with("chunk [16, 10]: its Zstandard frame"), "{e}");
            let mut m = memory(&[], None).on_file();
            let last = m.addresses.values().max().copied().unwrap();
            m.file.as_ref().unwrap().as_file().set_len(last).unwrap();
            let e = run(&mut m, &[0, 0], &[1, 1], &[50, 37], threads).unwrap_err();
            assert!(
                e.contains(&format!(
                    "stored bytes at byte {last} of the file could not be read"
                )),
                "{e}"
            );
        }
    }

    #[test]
    fn a_corrupt_chunk_is_named_and_a_failed_read_stops_the_read() {
        for threads in [1, 4] {
            let mut m = memory(&[], Some([16, 10]));
            let e = run(&mut m, &[0, 0], &[1, 1], &[50, 37], threads).unwrap_err();
            assert!(e.starts_with("chunk [16, 10]: its Zstandard frame"), "{e}");
            let mut m = memory(&[], None);
            m.fail_read = Some(vec![24, 0]);
            let e = run(&mut m, &[0, 0], &[1, 1], &[50, 37], threads).unwrap_err();
            assert_eq!(e, "read of [24, 0] failed");
        }
    }

    #[test]
    fn runs_of_rows_decode_each_chunk_they_touch_once() {
        let pipeline = Pipeline::for_filters(
            &[Filter {
                id: 32015,
                values: vec![],
            }],
            4,
        )
        .unwrap();
        // Rows 1, 3-4, 9 and 14 of columns 2..32 step 3: runs sharing the chunk rows 0-7 and 8-15.
        let runs = [(1u64, 1u64), (3, 2), (9, 1), (14, 1)];
        let (cstart, cstep, ccount) = (2u64, 3u64, 10u64);
        let starts: Vec<[u64; 2]> = runs.iter().map(|&(r, _)| [r, cstart]).collect();
        let counts: Vec<[u64; 2]> = runs.iter().map(|&(_, n)| [n, ccount]).collect();
        let step = [1, cstep];
        let mut at = 0;
        let mut placed = Vec::new();
        for k in 0..runs.len() {
            placed.push(Placed {
                selection: Hyperslab {
                    start: &starts[k],
                    step: &step,
                    count: &counts[k],
                },
                at,
            });
            at += runs[k].1 * ccount * 4;
        }
        for (threads, direct) in [(1, false), (3, false), (3, true)] {
            let mut m = memory(&[], None);
            if direct {
                m = m.on_file();
            }
            let how = Decoding {
                pipeline: &pipeline,
                chunk: &CHUNK,
                element_size: 4,
                threads,
            };
            let mut out = vec![0u8; at as usize];
            let before = chunks_decoded();
            let (outcome, missing_of) = read_placed(&mut m, &how, &placed, &mut out).unwrap();
            // Columns 2..29 lie in chunks 0, 5, ..., 25: 6 column chunks by 2 row chunks.
            assert_eq!(outcome.decoded, 12);
            assert!(outcome.missing.is_empty() && missing_of.is_empty());
            assert_eq!(m.reads, if direct { 0 } else { 12 });
            // (Other tests decode at the same time: at least these 12.)
            assert!(chunks_decoded() - before >= 12);
            let mut want = Vec::new();
            for &(first, rows) in &runs {
                want.extend(expected(&[first, cstart], &step, &[rows, ccount]));
            }
            let got: Vec<u32> = out
                .chunks(4)
                .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
                .collect();
            assert_eq!(got, want, "{threads} threads, direct {direct}");
        }
        // A chunk never written: its parts are left to the caller, with their selections.
        let mut m = memory(&[[8, 0]], None);
        let how = Decoding {
            pipeline: &pipeline,
            chunk: &CHUNK,
            element_size: 4,
            threads: 2,
        };
        let mut out = vec![0u8; at as usize];
        let (outcome, missing_of) = read_placed(&mut m, &how, &placed, &mut out).unwrap();
        assert_eq!(missing_of, [2, 3]);
        assert!(outcome.missing.iter().all(|p| p.offset == [8, 0]));
    }
}
