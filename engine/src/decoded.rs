//! Chunks read and decoded by h5gds on the host's cores, written once for both faces: whether
//! h5gds decodes a read's chunks or leaves them to HDF5, and why ([`declined`], [`plan`],
//! [`Plan::spread_over`]); the read of one hyperslab ([`read_hyperslab`]) and of runs placed one
//! after another in one output ([`read_runs`]), decoded on the driver's I/O threads
//! (`h5gds_chunk_codec::read`, `read_placed`) from the face's [`StoredChunks`]; and the parts of
//! chunks never written, read through HDF5 ([`crate::transfer`]), which fills them with the fill
//! value. Each face words the errors (its [`Face`]) and logs what [`Decoded`] says.

use crate::chunks::{Face, StoredChunks};
use crate::facts::StoredLayout;
use crate::policy::settings::filters_left_to_hdf5;
use crate::transfer::{prepare, Transfer};
use h5gds_chunk_codec::place::{chunks_selected, ChunkPart};
use h5gds_chunk_codec::{place_missing, read_placed, Decoding, HostRead, Hyperslab, Pipeline};
use h5gds_chunk_codec::{Outcome, Placed};
use h5gds_runtime::hdf5::hid_t;
use h5gds_runtime::settings::InvalidSetting;
use std::collections::BTreeSet;
use std::fmt;

/// How h5gds decodes a dataset's chunks: their shape and pipeline, the memory type's element
/// size, and on how many of the driver's I/O threads.
#[derive(Debug)]
pub struct Plan {
    chunk: Vec<u64>,
    pipeline: Pipeline,
    element_size: usize,
    threads: usize,
}

/// Why h5gds leaves a read's filtered chunks to HDF5: `H5GDS_HOST_CODEC=0`
/// ([`filters_left_to_hdf5`]), or the `conversion` HDF5 makes (why it converts the elements, if
/// it does).
pub fn declined(conversion: Option<&str>) -> Result<Option<String>, InvalidSetting> {
    Ok(filters_left_to_hdf5(true)?.or_else(|| conversion.map(str::to_string)))
}

/// How h5gds decodes the chunks of a dataset of `rank` axes stored as `layout`, read in elements
/// of `element_size` bytes on `threads` threads; or why HDF5 does (the `conversion` it makes, not
/// chunked, a chunk shape of another rank, filtered chunks with `H5GDS_HOST_CODEC=0`, a pipeline
/// h5gds does not decode). Unfiltered chunks too: read straight from the file by the driver's
/// threads, where HDF5 would read them one after another.
pub fn plan(
    layout: &StoredLayout,
    conversion: Option<&str>,
    rank: usize,
    element_size: usize,
    threads: usize,
) -> Result<Result<Plan, String>, InvalidSetting> {
    if let Some(why) = conversion {
        return Ok(Err(why.to_string()));
    }
    let StoredLayout::Chunked { chunk, filters, .. } = layout else {
        return Ok(Err("it is not chunked".into()));
    };
    if chunk.len() != rank {
        return Ok(Err("its chunk shape does not match its rank".into()));
    }
    if let Some(why) = filters_left_to_hdf5(!filters.is_empty())? {
        return Ok(Err(why));
    }
    let pipeline = match filters.is_empty() {
        true => Pipeline::unfiltered(),
        false => match Pipeline::for_filters(filters, element_size) {
            Ok(pipeline) => pipeline,
            Err(why) => return Ok(Err(why)),
        },
    };
    Ok(Ok(Plan {
        chunk: chunk.clone(),
        pipeline,
        element_size,
        threads,
    }))
}

impl Plan {
    /// The chunk shape, in elements.
    pub fn chunk(&self) -> &[u64] {
        &self.chunk
    }

    /// The plan as the reads take it.
    pub fn decoding(&self) -> Decoding<'_> {
        Decoding {
            pipeline: &self.pipeline,
            chunk: &self.chunk,
            element_size: self.element_size,
            threads: self.threads,
        }
    }

    /// The plan for a read touching `touched` chunks, or why HDF5 reads it (`where_it_lies`: the
    /// read as the face names it, "the rows lie"): inside one chunk, which HDF5 decodes and keeps
    /// in its chunk cache.
    pub fn spread_over(self, touched: usize, where_it_lies: &str) -> Result<Plan, String> {
        let one = || {
            format!("{where_it_lies} in one chunk, which HDF5 decodes and keeps in its chunk cache")
        };
        (touched >= 2).then_some(self).ok_or_else(one)
    }
}

/// The distinct chunks (of `chunk` elements) that `selections` touch.
pub fn chunks_touched<'s>(
    chunk: &[u64],
    selections: impl IntoIterator<Item = Hyperslab<'s>>,
) -> usize {
    let offsets: BTreeSet<Vec<u64>> = selections
        .into_iter()
        .flat_map(|selection| chunks_selected(&selection, chunk))
        .map(|part| part.offset)
        .collect();
    offsets.len()
}

/// What a read did, in the words of the faces' log lines (after their naming of the dataset).
#[derive(Debug)]
pub struct Decoded {
    decoded: usize,
    missing: usize,
    threads: usize,
    /// The runs of a [`read_runs`]; `None`: a [`read_hyperslab`], with whether the decoding
    /// threads read the stored bytes from the file themselves.
    runs: Option<usize>,
    direct: bool,
}

impl Decoded {
    fn of(outcome: &Outcome, threads: usize, runs: Option<usize>) -> Decoded {
        Decoded {
            decoded: outcome.decoded,
            missing: outcome.missing.len(),
            threads,
            runs,
            direct: outcome.direct,
        }
    }
}

impl fmt::Display for Decoded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (decoded, threads) = (self.decoded, self.threads);
        match self.runs {
            Some(runs) => write!(
                f,
                "{runs} runs of rows, {decoded} chunks each decoded once on {threads} threads"
            )?,
            None => write!(
                f,
                "{decoded} chunks decoded on {threads} threads (read {})",
                match self.direct {
                    true => "from the file by those threads",
                    false => "through HDF5 on the calling thread",
                }
            )?,
        }
        let missing = self.missing;
        write!(
            f,
            ", {missing} parts of chunks never written read through HDF5"
        )
    }
}

/// Reads `selection` of the dataset into `out` (its elements, row-major) as `how`: every chunk it
/// touches read from the face's stored chunks (`open`, handed how many chunks the read touches)
/// and decoded on `how.threads` threads; the parts of chunks never written read through HDF5 in
/// the memory type `mem_type`.
pub fn read_hyperslab<F: Face>(
    how: &Decoding,
    mem_type: hid_t,
    selection: Hyperslab,
    open: impl FnOnce(usize) -> Result<StoredChunks<'static, F>, F::Error>,
    out: &mut [u8],
) -> Result<Decoded, F::Error> {
    let r = HostRead {
        pipeline: how.pipeline,
        chunk: how.chunk,
        element_size: how.element_size,
        selection,
        threads: how.threads,
    };
    let mut source = open(chunks_touched(how.chunk, [selection]))?;
    let outcome = h5gds_chunk_codec::read(&mut source, &r, out)?;
    for part in &outcome.missing {
        fill(&source, how, mem_type, part, selection, out)?;
    }
    Ok(Decoded::of(&outcome, how.threads, None))
}

/// Reads `runs` (hyperslabs, each at its byte of `out`) as `how`: every chunk they touch read
/// and decoded once however many runs it holds; the parts of chunks never written read through
/// HDF5 in the memory type `mem_type`.
pub fn read_runs<F: Face>(
    how: &Decoding,
    mem_type: hid_t,
    runs: &[Placed],
    open: impl FnOnce(usize) -> Result<StoredChunks<'static, F>, F::Error>,
    out: &mut [u8],
) -> Result<Decoded, F::Error> {
    let mut source = open(chunks_touched(how.chunk, runs.iter().map(|r| r.selection)))?;
    let (outcome, missing_of) = read_placed(&mut source, how, runs, out)?;
    for (part, &k) in outcome.missing.iter().zip(&missing_of) {
        let run = &runs[k];
        let first = run.at as usize;
        let len = run.selection.count.iter().product::<u64>() as usize * how.element_size;
        let run_out = &mut out[first..first + len];
        fill(&source, how, mem_type, part, run.selection, run_out)?;
    }
    Ok(Decoded::of(&outcome, how.threads, Some(runs.len())))
}

/// Reads `part` of a chunk never written through HDF5 (which fills it with the fill value), a
/// checked transfer under the face's lock, and places it into `out`, the elements of `selection`.
fn fill<F: Face>(
    source: &StoredChunks<'static, F>,
    how: &Decoding,
    mem_type: hid_t,
    part: &ChunkPart,
    selection: Hyperslab,
    out: &mut [u8],
) -> Result<(), F::Error> {
    let (api, dataset, face) = source.parts();
    let start = part.file_start(&selection);
    let mut values = vec![0u8; part.len() as usize * how.element_size];
    let transfer = Transfer {
        write: false,
        dataset,
        mem_type,
        start: &start,
        step: selection.step,
        count: &part.count,
        mem_shape: &part.count,
        buffer: values.as_mut_ptr() as usize,
        nbytes: values.len(),
    };
    face.locked(|| {
        let read = match prepare(api, &transfer) {
            // SAFETY: `values` holds the part's elements in the memory type (its size checked by
            // `prepare`) and lives past the call.
            Ok(Some(prepared)) => unsafe { prepared.run() },
            Ok(None) => Ok(()),
            Err(e) => Err(e.to_string()),
        };
        read.map_err(|message| face.never_written(&part.offset, message))
    })?;
    let r = HostRead {
        pipeline: how.pipeline,
        chunk: how.chunk,
        element_size: how.element_size,
        selection,
        threads: 1,
    };
    place_missing(part, &values, &r, out);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use h5gds_chunk_codec::Filter;

    fn chunked(chunk: &[u64], filters: Vec<Filter>) -> StoredLayout {
        StoredLayout::Chunked {
            chunk: chunk.to_vec(),
            filters,
            cache_bytes: 0,
        }
    }

    #[test]
    fn the_plan_says_why_hdf5_decodes() {
        let contiguous = StoredLayout::Contiguous {
            address: Some(0),
            external: false,
        };
        assert_eq!(
            plan(&contiguous, None, 1, 4, 2).unwrap().unwrap_err(),
            "it is not chunked"
        );
        assert_eq!(
            plan(&chunked(&[4, 4], vec![]), None, 1, 4, 2)
                .unwrap()
                .unwrap_err(),
            "its chunk shape does not match its rank"
        );
        let unknown = Filter {
            id: 32_000,
            values: vec![],
        };
        assert!(plan(&chunked(&[4], vec![unknown]), None, 1, 4, 2)
            .unwrap()
            .is_err());
        assert_eq!(
            plan(&chunked(&[4], vec![]), Some("it converts"), 1, 4, 2)
                .unwrap()
                .unwrap_err(),
            "it converts"
        );
        let planned = plan(&chunked(&[4], vec![]), None, 1, 4, 2)
            .unwrap()
            .unwrap();
        assert_eq!(planned.chunk(), &[4]);
        let how = planned.decoding();
        assert_eq!(
            (how.chunk, how.element_size, how.threads),
            (&[4u64][..], 4, 2)
        );
        assert_eq!(
            planned.spread_over(1, "the rows lie").unwrap_err(),
            "the rows lie in one chunk, which HDF5 decodes and keeps in its chunk cache"
        );
        let planned = plan(&chunked(&[4], vec![]), None, 1, 4, 2)
            .unwrap()
            .unwrap();
        assert_eq!(
            planned.spread_over(1, "the region lies").unwrap_err(),
            "the region lies in one chunk, which HDF5 decodes and keeps in its chunk cache"
        );
        let planned = plan(&chunked(&[4], vec![]), None, 1, 4, 2)
            .unwrap()
            .unwrap();
        assert!(planned.spread_over(2, "the region lies").is_ok());
    }

    #[test]
    fn a_conversion_declines() {
        // H5GDS_HOST_CODEC is left unset by the engine's tests.
        assert_eq!(
            declined(Some("it converts")).unwrap().as_deref(),
            Some("it converts")
        );
        assert_eq!(declined(None).unwrap(), None);
    }

    #[test]
    fn the_chunks_touched_are_counted_once() {
        let (ones, count) = ([1u64, 1], [2u64, 8]);
        let run = |first: &'static [u64]| Hyperslab {
            start: first,
            step: &ones,
            count: &count,
        };
        // Rows 0-1 and 2-3 lie in the same two chunks of 4 x 4.
        assert_eq!(chunks_touched(&[4, 4], [run(&[0, 0])]), 2);
        assert_eq!(chunks_touched(&[4, 4], [run(&[0, 0]), run(&[2, 0])]), 2);
        assert_eq!(chunks_touched(&[4, 4], [run(&[0, 0]), run(&[4, 0])]), 4);
    }

    #[test]
    fn the_log_words_each_read() {
        let outcome = Outcome {
            decoded: 3,
            missing: vec![],
            direct: true,
        };
        assert_eq!(
            Decoded::of(&outcome, 8, None).to_string(),
            "3 chunks decoded on 8 threads (read from the file by those threads), 0 parts of \
             chunks never written read through HDF5"
        );
        let through = Outcome {
            direct: false,
            ..outcome
        };
        assert_eq!(
            Decoded::of(&through, 1, None).to_string(),
            "3 chunks decoded on 1 threads (read through HDF5 on the calling thread), 0 parts \
             of chunks never written read through HDF5"
        );
        assert_eq!(
            Decoded::of(&through, 4, Some(5)).to_string(),
            "5 runs of rows, 3 chunks each decoded once on 4 threads, 0 parts of chunks never \
             written read through HDF5"
        );
    }
}
