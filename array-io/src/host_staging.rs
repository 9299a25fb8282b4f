//! Host staging, array-io's face of the staged path (`h5gds_engine::staged`): data moves between
//! the file and device memory through two bounded host buffers taking turns (at most
//! `H5GDS_STAGING_BUFFER_SIZE` each, from the process's pool of pinned buffers; not the driver's
//! bounce buffers) on the caller's cudarc stream and its fork, HDF5 reached through the engine's
//! checked transfer over the linked HDF5 (`hdf5_raw::linked_hdf5`, under hdf5-metno's lock).

use crate::error::{Error, Result};
use crate::file::OpenDataset;
use crate::hdf5_raw::{self, linked_hdf5};
use crate::host_codec::Planned;
use crate::select::{flat_range_blocks, staged_piece_bytes, staging_pieces, Block, Runs};
use cudarc::driver::{sys, CudaStream};
use h5gds_engine::staged::{self, hyperslab_piece, NotBool};
use h5gds_engine::transfer::{prepare, IoError, Prepared, Transfer};
use h5gds_runtime::cuda::call;
use h5gds_runtime::pinned;
use h5gds_runtime::staging_ring::StagingRing;
use h5gds_runtime::stream::synchronize;
use hdf5::{Dataset, Datatype};
use std::path::Path;
use std::sync::Arc;

/// Two staging buffers of a fixed size from the process's pool of pinned buffers
/// (`h5gds_runtime::pinned`, pageable where CUDA cannot pin), taking turns in the staging ring
/// (`h5gds_runtime::staging_ring`): piece `k` uses buffer `k % 2` and stream `k % 2` (the
/// caller's, and one forked from it when the first copy is queued), so that one piece's copy
/// runs while HDF5 (or the host decoding) moves the next.
pub(crate) struct HostStaging {
    pub ring: StagingRing<Arc<CudaStream>>,
    len: usize,
}

impl HostStaging {
    /// Buffers of `min(size, needed)` bytes (at least one byte), for copies after the work
    /// queued on `stream`.
    pub fn new(size: usize, needed: usize, stream: &Arc<CudaStream>) -> HostStaging {
        let len = size.min(needed).max(1);
        let caller = stream.clone();
        let streams = move || {
            let fork = call("creating a stream", || caller.fork())?;
            Ok(vec![caller, fork])
        };
        let buffers = vec![pinned::Taken::new(len), pinned::Taken::new(len)];
        HostStaging {
            ring: StagingRing::streams_made_later(buffers, streams),
            len,
        }
    }

    /// Buffers sized for a transfer of `needed` bytes through HDF5 to overlap its copies
    /// (`route::select::staged_piece_bytes`): an eighth of it, at least a task for each of the
    /// driver's I/O threads (`driver`: the settings the caller read once), at most `size`.
    pub fn pipelined(
        size: usize,
        needed: usize,
        driver: &h5gds::VfdSettings,
        stream: &Arc<CudaStream>,
    ) -> HostStaging {
        let floor = driver.task_round_bytes() as u64;
        HostStaging::new(
            staged_piece_bytes(needed as u64, size as u64, floor) as usize,
            needed,
            stream,
        )
    }

    pub fn len(&self) -> usize {
        self.len
    }
}

/// What a staged transfer needs to know about the elements.
pub(crate) struct Elements<'a> {
    /// HDF5 memory type.
    pub mem_type: &'a Datatype,
    pub size: usize,
    /// Whether each byte must be 0 or 1 (`bool`).
    pub check_bool: bool,
}

/// The engine's checked transfer of `block` (file coordinates, steps of 1) of `dset` in the
/// memory type, for the staged pieces; `None`: an empty block. Made, run and dropped under
/// hdf5-metno's lock, held through the staged transfer as h5py's is for the extension.
fn prepared(
    dset: &Dataset,
    elements: &Elements,
    write: bool,
    (block, ones): (&Block, &[u64]),
    op: &str,
    (path, name): (&Path, &str),
) -> Result<Option<Prepared>> {
    let transfer = Transfer {
        write,
        dataset: dset.id(),
        mem_type: elements.mem_type.id(),
        start: &block.start,
        step: ones,
        count: &block.count,
        mem_shape: &block.count,
        buffer: 0,
        nbytes: block.len() as usize * elements.size,
    };
    prepare(linked_hdf5(), &transfer)
        .map_err(|(IoError::Argument(m) | IoError::Hdf5(m))| Error::hdf5(op, path, Some(name), m))
}

/// Reads `block` (file coordinates) of `ds` into device memory `dest`, which holds the array
/// `region` (file coordinates) in row-major order, through `staging`: HDF5 fills the buffer,
/// or, with `decoded` (the plan, and `route::select::decoded_pieces`' cuts of `block`), h5gds
/// decodes the chunks into it on the driver's I/O threads, in pieces that end where the block
/// enters a new layer of chunks (so no chunk is decoded twice) where a buffer holds whole layers.
#[allow(clippy::too_many_arguments)]
pub(crate) fn read_block(
    ds: &OpenDataset,
    elements: &Elements,
    block: &Block,
    region: &Block,
    dest: sys::CUdeviceptr,
    stream: &Arc<CudaStream>,
    staging: &mut HostStaging,
    decoded: Option<(&Planned, &[u64])>,
) -> Result<()> {
    let es = elements.size;
    let cuts = decoded.map_or(&[][..], |(_, cuts)| cuts);
    let spans = staging_pieces(block.len(), (staging.len() / es).max(1) as u64, cuts);
    let refuse = Error::not_bool(&ds.path, &ds.name);
    let bools = elements
        .check_bool
        .then_some(&refuse as &dyn Fn(NotBool) -> Error);
    let runs = Runs::new(&block.relative_to(&region.start), &region.count);
    let to = (dest, es, &runs);
    let (op, named) = ("reading into the staging buffer", (&*ds.path, &*ds.name));
    let ones = vec![1; block.count.len()];
    let Some((planned, _)) = decoded else {
        // Piece `k` into its buffer: HDF5 reads it.
        hdf5_raw::locked(|| {
            let Some(prepared) = prepared(&ds.dset, elements, false, (block, &ones), op, named)?
            else {
                return Ok(()); // an empty block has no pieces
            };
            let selection = (&block.start[..], &ones[..], &block.count[..]);
            staged::read(&mut staging.ring, &spans, to, bools, |a, b, buf| {
                // SAFETY: the buffer holds the piece's b - a elements of the memory type.
                unsafe { hyperslab_piece(&prepared, selection, (a, b), es, buf.as_mut_ptr()) }
                    .map_err(|m| Error::hdf5(op, named.0, Some(named.1), m))
            })
        })?;
        return synchronize(stream).map_err(Error::from);
    };
    // Piece `k` into its buffer: h5gds decodes its chunks.
    staged::read(&mut staging.ring, &spans, to, bools, |a, b, buf| {
        let mut at = 0usize;
        for piece in flat_range_blocks(&block.count, a, b) {
            let piece = piece.offset_by(&block.start);
            let len = piece.len() as usize * es;
            let out = &mut buf[at..at + len];
            crate::host_codec::read_region(ds, elements.mem_type, &piece, planned, out)?;
            at += len;
        }
        Ok(())
    })?;
    synchronize(stream)?;
    Ok(())
}

/// Writes the whole dataset `dset` (of `shape`) from device memory `src` through `staging`,
/// after the work queued on the stream `staging` was made for.
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_all(
    dset: &Dataset,
    path: &Path,
    name: &str,
    shape: &[u64],
    elements: &Elements,
    src: sys::CUdeviceptr,
    staging: &mut HostStaging,
) -> Result<()> {
    let es = elements.size;
    let whole = Block::whole(shape);
    let spans = staging_pieces(whole.len(), (staging.len() / es).max(1) as u64, &[]);
    let (op, ones) = ("writing from the staging buffer", vec![1; shape.len()]);
    hdf5_raw::locked(|| {
        let Some(prepared) = prepared(dset, elements, true, (&whole, &ones), op, (path, name))?
        else {
            return Ok(()); // an empty dataset has no pieces
        };
        let selection = (&whole.start[..], &ones[..], shape);
        // The next piece comes from the device while this one is written.
        staged::write(&mut staging.ring, &spans, es, src, |a, b, buf| {
            // SAFETY: the buffer holds the piece's b - a elements just copied; a write only
            // reads it.
            unsafe { hyperslab_piece(&prepared, selection, (a, b), es, buf.as_ptr().cast_mut()) }
                .map_err(|m| Error::hdf5(op, path, Some(name), m))
        })
    })
}
