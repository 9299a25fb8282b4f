//! Chunks (compressed or not) into host arrays on all cores: the hdf5-metno face of the engine's
//! decoded reads (`h5gds_engine::decoded`, which the Python extension uses too), the stored chunks
//! from `crate::chunks`, the errors and log lines naming the file and the dataset. Pipelines h5gds
//! does not decode, conversions, and regions inside one chunk stay with HDF5 (`H5Dread`), as does
//! everything with `H5GDS_HOST_CODEC=0`.

use crate::error::Result;
use crate::file::OpenDataset;
use crate::layout::Types;
use h5gds_chunk_codec::Hyperslab;
use h5gds_engine::decoded::{self, Decoded};
use h5gds_engine::rows::RowRuns;
use hdf5::Datatype;

/// How h5gds decodes a dataset's chunks (the driver's thread count read once, when the plan is
/// made).
pub(crate) use decoded::Plan as Planned;

/// The plan for reading `region` of `ds` into host memory with h5gds decoding its chunks on
/// `threads` threads, or `None` (with the reason in the debug log) when HDF5 is to read it.
pub(crate) fn plan(
    ds: &OpenDataset,
    types: &Types,
    region: Hyperslab,
    threads: usize,
) -> Result<Option<Planned>> {
    let decision = for_dataset(ds, types, threads)?.and_then(|planned| {
        let touched = decoded::chunks_touched(planned.chunk(), [region]);
        planned.spread_over(touched, "the region lies")
    });
    Ok(decision
        .map_err(|reason| {
            let (path, name) = (ds.path.display(), &ds.name);
            crate::log::debug(format_args!(
                "{path}: {name:?}: HDF5 decodes its chunks: {reason}"
            ))
        })
        .ok())
}

/// Whether h5gds reads the chunks of `ds` itself (chunked, unfiltered or filtered with a pipeline
/// it decodes, read with no conversion, `H5GDS_HOST_CODEC` not 0), or why not; on `threads`
/// threads.
pub(crate) fn for_dataset(
    ds: &OpenDataset,
    types: &Types,
    threads: usize,
) -> Result<std::result::Result<Planned, String>> {
    if let Some(reason) = decoded::declined(types.conversion.as_deref())? {
        return Ok(Err(reason));
    }
    let layout = crate::layout::stored_layout(ds)?;
    Ok(decoded::plan(
        &layout,
        ds.shape.len(),
        types.mem.size(),
        threads,
    ))
}

/// Reads a gather's runs of rows of `ds` (`runs`, placed one after another) into `out` as
/// `planned`, every chunk they touch decoded once (`h5gds_engine::decoded::read_runs`).
pub(crate) fn read_runs(
    ds: &OpenDataset,
    mem_type: &Datatype,
    runs: &RowRuns,
    planned: &Planned,
    out: &mut [u8],
) -> Result<()> {
    let open = |touched| ds.stored_chunks(planned.chunk(), touched);
    let placed = runs.placed();
    let done = decoded::read_runs(&planned.decoding(), mem_type.id(), &placed, open, out)?;
    logged(ds, done)
}

/// Reads `region` of `ds` into `out` (its elements' bytes, row-major) as `planned`.
pub(crate) fn read_region(
    ds: &OpenDataset,
    mem_type: &Datatype,
    region: Hyperslab,
    planned: &Planned,
    out: &mut [u8],
) -> Result<()> {
    let open = |touched| ds.stored_chunks(planned.chunk(), touched);
    let done = decoded::read_hyperslab(&planned.decoding(), mem_type.id(), region, open, out)?;
    logged(ds, done)
}

/// What a read did, in the debug log.
fn logged(ds: &OpenDataset, done: Decoded) -> Result<()> {
    let (path, name) = (ds.path.display(), &ds.name);
    crate::log::debug(format_args!("{path}: {name:?}: {done}"));
    Ok(())
}
