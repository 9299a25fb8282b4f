//! Chunks (compressed or not) into host arrays on all cores, the hdf5-metno side of
//! `h5gds_chunk_codec` (the decoding the Python extension uses too): each needed chunk's stored
//! size and stored bytes come from the engine's source (`crate::chunks`), read on the calling
//! thread under HDF5's lock (or from the file by the decoding threads), and the driver's I/O
//! threads decode them and copy their elements into place meanwhile. Chunks never written are read through HDF5, which fills them with the
//! fill value. Pipelines h5gds does not decode, conversions, and regions inside one chunk stay
//! with HDF5 (`H5Dread`), as does everything with `H5GDS_HOST_CODEC=0`.

use crate::error::{Error, Result};
use crate::file::OpenDataset;
use crate::hdf5_raw::{self, select_blocks, Spaces};
use crate::layout::Types;
use crate::select::Block;
use h5gds_chunk_codec::place::chunks_selected;
use h5gds_chunk_codec::{place_missing, HostRead, Hyperslab, Pipeline};
use h5gds_engine::facts::StoredLayout;
use hdf5::Datatype;

/// How h5gds decodes a dataset's chunks: their shape and pipeline, and on how many of the
/// driver's I/O threads (its settings, read once when the plan is made).
pub(crate) struct Planned {
    chunk: Vec<u64>,
    pipeline: Pipeline,
    threads: usize,
}

impl Planned {
    /// The chunk shape, in elements.
    pub fn chunk(&self) -> &[u64] {
        &self.chunk
    }
}

/// The plan for reading `region` of `ds` into host memory with h5gds decoding its chunks on
/// `threads` threads, or `None` (with the reason in the debug log) when HDF5 is to read it.
pub(crate) fn plan(
    ds: &OpenDataset,
    types: &Types,
    region: &Block,
    threads: usize,
) -> Result<Option<Planned>> {
    let decision = match for_dataset(ds, types, threads)? {
        Ok(planned) if chunks_in(&planned, region) < 2 => Err(
            "the region lies in one chunk, which HDF5 decodes and keeps in its chunk cache".into(),
        ),
        other => other,
    };
    Ok(match decision {
        Ok(planned) => Some(planned),
        Err(reason) => {
            crate::log::debug(format_args!(
                "{}: {:?}: HDF5 decodes its chunks: {reason}",
                ds.path.display(),
                ds.name
            ));
            None
        }
    })
}

/// The chunks of `planned` that `region` touches.
pub(crate) fn chunks_in(planned: &Planned, region: &Block) -> usize {
    let ones = vec![1u64; region.count.len()];
    let selection = Hyperslab {
        start: &region.start,
        step: &ones,
        count: &region.count,
    };
    chunks_selected(&selection, &planned.chunk).len()
}

/// Whether h5gds reads the chunks of `ds` itself (chunked, unfiltered or filtered with a pipeline
/// it decodes, read with no conversion, `H5GDS_HOST_CODEC` not 0), or why not; on `threads`
/// threads.
pub(crate) fn for_dataset(
    ds: &OpenDataset,
    types: &Types,
    threads: usize,
) -> Result<std::result::Result<Planned, String>> {
    if let Some(off) = h5gds_runtime::settings::host_codec_turned_off()? {
        return Ok(Err(off));
    }
    if let Some(conversion) = &types.conversion {
        return Ok(Err(conversion.clone()));
    }
    // The engine's query of the storage (`layout::stored_layout`).
    let StoredLayout::Chunked { chunk, filters, .. } = crate::layout::stored_layout(ds)? else {
        return Ok(Err("it is not chunked".into()));
    };
    if chunk.len() != ds.shape.len() {
        return Ok(Err("its chunk shape does not match its rank".into()));
    }
    // Unfiltered chunks too: read straight from the file by the driver's threads, as the
    // Python package's reads of them are, where HDF5 would read them one after another.
    let pipeline = match filters.is_empty() {
        true => Ok(Pipeline::unfiltered()),
        false => Pipeline::for_filters(&filters, types.mem.size()),
    };
    Ok(pipeline.map(|pipeline| Planned {
        chunk,
        pipeline,
        threads,
    }))
}

/// Reads runs of rows of `ds` (`runs`: blocks of whole rows, in increasing order) into `out`
/// (their elements' bytes, one run after another) as `planned`: every chunk they touch read and
/// decoded once however many runs it holds (`h5gds_chunk_codec::read_placed`), on the driver's
/// I/O threads; parts of chunks never written read through HDF5.
pub(crate) fn read_runs(
    ds: &OpenDataset,
    mem_type: &Datatype,
    runs: &[Block],
    planned: &Planned,
    out: &mut [u8],
) -> Result<()> {
    let Planned {
        chunk,
        pipeline,
        threads,
    } = planned;
    let element_size = mem_type.size();
    let ones = vec![1u64; ds.shape.len()];
    let mut placed = Vec::with_capacity(runs.len());
    let mut at = 0u64;
    for run in runs {
        placed.push(h5gds_chunk_codec::Placed {
            selection: Hyperslab {
                start: &run.start,
                step: &ones,
                count: &run.count,
            },
            at,
        });
        at += run.count.iter().product::<u64>() * element_size as u64;
    }
    let how = h5gds_chunk_codec::Decoding {
        pipeline,
        chunk,
        element_size,
        threads: *threads,
    };
    let touched: std::collections::BTreeSet<Vec<u64>> = placed
        .iter()
        .flat_map(|p| chunks_selected(&p.selection, chunk))
        .map(|part| part.offset)
        .collect();
    let mut source = ds.stored_chunks(chunk, touched.len())?;
    let (outcome, missing_of) = h5gds_chunk_codec::read_placed(&mut source, &how, &placed, out)?;
    for (part, &k) in outcome.missing.iter().zip(&missing_of) {
        let run = &placed[k];
        let first = run.at as usize;
        let len = run.selection.count.iter().product::<u64>() as usize * element_size;
        let r = HostRead {
            pipeline,
            chunk,
            element_size,
            selection: run.selection,
            threads: 1,
        };
        read_missing(ds, mem_type, part, &r, &mut out[first..first + len])?;
    }
    crate::log::debug(format_args!(
        "{}: {:?}: {} runs of rows, {} chunks each decoded once on {threads} threads, {} parts \
         of chunks never written read through HDF5",
        ds.path.display(),
        ds.name,
        runs.len(),
        outcome.decoded,
        outcome.missing.len()
    ));
    Ok(())
}

/// Reads a part of a chunk never written through HDF5 (which fills it with the fill value) and
/// places it into `out`, the selection of `r`.
fn read_missing(
    ds: &OpenDataset,
    mem_type: &Datatype,
    part: &h5gds_chunk_codec::place::ChunkPart,
    r: &HostRead,
    out: &mut [u8],
) -> Result<()> {
    let start = part.file_start(&r.selection);
    let mut values = vec![0u8; part.len() as usize * r.element_size];
    let fail = |e: hdf5::Error| {
        Error::hdf5(
            format!("reading the chunk never written at {:?}", part.offset),
            &ds.path,
            Some(&ds.name),
            e,
        )
    };
    let file = select_blocks(&ds.shape, &[(&start, &part.count)]).map_err(fail)?;
    let zeros = vec![0u64; part.count.len()];
    let memory = select_blocks(&part.count, &[(&zeros, &part.count)]).map_err(fail)?;
    let spaces = Spaces {
        memory: Some(&memory),
        file: Some(&file),
    };
    // SAFETY: `values` holds the part's elements in the memory type.
    unsafe { hdf5_raw::read(&ds.dset, mem_type, spaces, values.as_mut_ptr().cast()) }
        .map_err(fail)?;
    place_missing(part, &values, r, out);
    Ok(())
}

/// Reads `region` of `ds` into `out` (its elements' bytes, row-major) as `planned`.
pub(crate) fn read_region(
    ds: &OpenDataset,
    mem_type: &Datatype,
    region: &Block,
    planned: &Planned,
    out: &mut [u8],
) -> Result<()> {
    let Planned {
        chunk,
        pipeline,
        threads,
    } = planned;
    let threads = *threads;
    let ones = vec![1u64; region.count.len()];
    let r = HostRead {
        pipeline,
        chunk,
        element_size: mem_type.size(),
        selection: Hyperslab {
            start: &region.start,
            step: &ones,
            count: &region.count,
        },
        threads,
    };
    let mut source = ds.stored_chunks(chunk, chunks_in(planned, region))?;
    let outcome = h5gds_chunk_codec::read(&mut source, &r, out)?;
    for part in &outcome.missing {
        read_missing(ds, mem_type, part, &r, out)?;
    }
    crate::log::debug(format_args!(
        "{}: {:?}: {} chunks decoded on {threads} threads (read {}), {} parts of chunks never \
         written read through HDF5",
        ds.path.display(),
        ds.name,
        outcome.decoded,
        if outcome.direct {
            "from the file by those threads"
        } else {
            "through HDF5 on the calling thread"
        },
        outcome.missing.len()
    ));
    Ok(())
}
