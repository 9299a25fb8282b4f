//! Host reads with no HDF5 call, through the engine (`h5gds_engine::stored`, as the Python
//! extension's `Layout` reads): a dataset's storage resolved once per open dataset over the linked
//! HDF5, then whole datasets, regions and row gathers read by the driver's I/O threads straight
//! from the file. What the engine leaves (chunks never written, compact, external or virtual
//! storage, conversions, chunks at all with `H5GDS_HOST_CODEC=0`) stays with `host_codec` and
//! HDF5.

use crate::error::{Error, Result};
use crate::file::OpenDataset;
use crate::layout::Types;
use h5gds_chunk_codec::Hyperslab;
use h5gds_engine::facts::StoredLayout;
use h5gds_engine::stored::{self, Stored, StoredError};

/// The engine's storage of `ds` for reads of `types`, resolved at the first read of the open
/// dataset and kept; None where the engine does not serve it.
pub(crate) fn of<'a>(ds: &'a OpenDataset, types: &Types) -> Result<Option<&'a Stored>> {
    if types.conversion.is_some() {
        return Ok(None);
    }
    if let Some(resolved) = ds.stored.get() {
        return Ok(resolved.as_ref());
    }
    let resolved = resolve(ds, types)?;
    Ok(ds.stored.get_or_init(|| resolved).as_ref())
}

fn resolve(ds: &OpenDataset, types: &Types) -> Result<Option<Stored>> {
    let layout = crate::layout::stored_layout(ds)?;
    // `H5GDS_HOST_CODEC=0` leaves every chunked dataset to HDF5, as it did before the engine.
    let chunked = matches!(layout, StoredLayout::Chunked { .. });
    if chunked && h5gds_runtime::settings::host_codec_turned_off()?.is_some() {
        return Ok(None);
    }
    let file = stored::own_bytes(&layout)
        .then(|| ds.direct_file())
        .flatten();
    let Some(file) = file else {
        return Ok(None);
    };
    let (name, shape) = (ds.name.clone(), ds.shape.clone());
    let index = |chunk: &[u64]| ds.index_of(chunk);
    Stored::resolve(name, file, shape, types.mem.size(), layout, index, |_| {})
}

/// The engine's error as array-io's, naming the file and the dataset.
fn error(ds: &OpenDataset, e: StoredError) -> Error {
    match e {
        StoredError::Corrupt { chunk, reason, .. } => Error::ChunkDecode {
            path: ds.path.clone(),
            dataset: ds.name.clone(),
            chunk,
            reason,
        },
        other => Error::Io {
            op: "reading",
            path: ds.path.clone(),
            source: std::io::Error::other(other.to_string()),
        },
    }
}

/// Reads `sel` of `ds` into `out` (its elements' bytes, row-major) on `threads` threads;
/// false (nothing read) where the engine leaves it to HDF5.
pub(crate) fn read_region(
    ds: &OpenDataset,
    stored: &Stored,
    sel: &Hyperslab,
    threads: usize,
    out: &mut [u8],
) -> Result<bool> {
    stored
        .check(sel, out.len())
        .map_err(|e| error(ds, StoredError::Invalid(e)))?;
    let served = stored.serves(sel);
    let Some(parts) = served.map_err(|e| error(ds, StoredError::Invalid(e)))? else {
        return Ok(false);
    };
    stored
        .read_served(sel, &parts, out, threads)
        .map_err(|e| error(ds, e))?;
    if !parts.is_empty() {
        crate::log::debug(format_args!(
            "{}: {:?}: {} chunks decoded on {threads} threads (read from the file by those \
             threads), with no HDF5 call",
            ds.path.display(),
            ds.name,
            parts.len()
        ));
    }
    Ok(true)
}

/// Reads the `distinct` rows of `ds` in `runs` (first row, rows; increasing; each row `rest` of
/// the other axes) into `out` on `threads` threads; false (nothing read) where the engine leaves
/// them to HDF5.
pub(crate) fn read_rows(
    ds: &OpenDataset,
    stored: &Stored,
    (runs, rest): (&[(u64, u64)], &Hyperslab),
    distinct: u64,
    threads: usize,
    out: &mut [u8],
) -> Result<bool> {
    let read = stored.gather(runs, distinct, rest, out, &|| Ok(threads));
    let read = read.map_err(|e| error(ds, e))?;
    if read {
        crate::log::debug(format_args!(
            "{}: {:?}: {} runs of rows read on {threads} threads with no HDF5 call",
            ds.path.display(),
            ds.name,
            runs.len()
        ));
    }
    Ok(read)
}
