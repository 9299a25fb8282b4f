//! Host staging, the staged path: data moves between the file and device memory through two
//! bounded host buffers taking turns (at most `H5GDS_STAGING_BUFFER_SIZE` each, from the process's pool
//! of pinned buffers; not the driver's bounce buffers), piece by piece, so any size works with
//! any buffer size, and one piece's copy overlaps the next piece's file I/O. HDF5 only
//! ever sees host memory here, so it may convert types, fill unwritten storage and decode
//! filtered chunks as it likes.

use crate::element::first_invalid_bool;
use crate::error::{Error, Result};
use crate::file::OpenDataset;
use crate::hdf5_raw::{self, select_blocks, Spaces};
use crate::host_codec::Planned;
use crate::select::{flat_range_blocks, staged_piece_bytes, staging_pieces, Block, Runs};
use cudarc::driver::{sys, CudaStream};
use h5gds_runtime::cuda::call;
use h5gds_runtime::pinned;
use h5gds_runtime::staging_ring::{LaneCopies, StagingRing, Stop};
use h5gds_runtime::stream::synchronize;
use hdf5::{Dataset, Dataspace, Datatype};
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
    let es = elements.size as u64;
    let per = (staging.len() as u64 / es).max(1);
    let runs = Runs::new(&block.relative_to(&region.start), &region.count);
    let total = block.len();
    let cuts = decoded.map_or(&[][..], |(_, cuts)| cuts);
    let spans = staging_pieces(total, per, cuts);
    // Piece `k` into its buffer: HDF5 reads it, or h5gds decodes its chunks.
    let fill = |k: usize, buf: &mut [u8]| -> Result<()> {
        let (a, b) = spans[k];
        let blocks: Vec<Block> = flat_range_blocks(&block.count, a, b)
            .iter()
            .map(|piece| piece.offset_by(&block.start))
            .collect();
        let fail = |op: &str, e: hdf5::Error| Error::hdf5(op, &ds.path, Some(&ds.name), e);
        let pieces: Vec<hdf5_raw::Block> = blocks
            .iter()
            .map(|b| (b.start.as_slice(), b.count.as_slice()))
            .collect();
        if let Some((planned, _)) = decoded {
            let mut at = 0usize;
            for piece in &blocks {
                let len = piece.len() as usize * elements.size;
                // The staging buffer holds `per` >= b - a elements, the pieces' in order.
                let out = &mut buf[at..at + len];
                crate::host_codec::read_region(ds, elements.mem_type, piece, planned, out)?;
                at += len;
            }
        } else {
            let file_space =
                select_blocks(&ds.shape, &pieces).map_err(|e| fail("selecting a hyperslab", e))?;
            let mem_space = Dataspace::try_new((b - a) as usize)
                .map_err(|e| fail("creating a dataspace", e))?;
            let spaces = Spaces {
                memory: Some(&mem_space),
                file: Some(&file_space),
            };
            // SAFETY: the staging buffer holds `per` >= b - a elements of the memory type.
            unsafe { hdf5_raw::read(&ds.dset, elements.mem_type, spaces, buf.as_mut_ptr().cast()) }
                .map_err(|e| fail("reading into the staging buffer", e))?;
        }
        if elements.check_bool {
            if let Some((index, value)) = first_invalid_bool(&buf[..(b - a) as usize]) {
                return Err(Error::InvalidBool {
                    path: ds.path.clone(),
                    dataset: ds.name.clone(),
                    index: (a as usize) + index,
                    value,
                });
            }
        }
        Ok(())
    };
    // Piece `k`'s runs from its buffer to their places in `dest`.
    let send = |k: usize, copies: &LaneCopies<Arc<CudaStream>>| -> Result<()> {
        let (a, b) = spans[k];
        for (at, to, len) in runs.pieces(a, b) {
            // SAFETY: the destination lies inside `dest`, which holds the whole region and
            // outlives the ring's wait at the end of this transfer.
            unsafe { copies.upload((at * es) as usize, dest + to * es, (len * es) as usize)? };
        }
        Ok(())
    };
    // The next piece is read while this one's copies run; all have finished when this returns.
    staging
        .ring
        .to_device(spans.len(), fill, send)
        .map_err(Stop::into_error)?;
    synchronize(stream)?;
    Ok(())
}

/// Writes the whole dataset `dset` (of `shape`) from device memory `src` through `staging`,
/// after the work queued on the stream `staging` was made for.
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_all(
    dset: &Dataset,
    path: &std::path::Path,
    name: &str,
    shape: &[u64],
    elements: &Elements,
    src: sys::CUdeviceptr,
    staging: &mut HostStaging,
) -> Result<()> {
    let es = elements.size as u64;
    let per = (staging.len() as u64 / es).max(1);
    let total: u64 = shape.iter().product();
    let spans = staging_pieces(total, per, &[]);
    // Queues piece `k`'s copy from the device into its buffer.
    let fetch = |k: usize, copies: &LaneCopies<Arc<CudaStream>>| -> Result<()> {
        let (a, b) = spans[k];
        // SAFETY: the source range lies inside the device array, which outlives the ring's wait
        // at the end of this transfer.
        unsafe { copies.download(0, src + a * es, ((b - a) * es) as usize)? };
        Ok(())
    };
    // Writes piece `k` from its buffer, once its copy has landed.
    let write = |k: usize, buf: &[u8]| -> Result<()> {
        let (a, b) = spans[k];
        let fail = |op: &str, e: hdf5::Error| Error::hdf5(op, path, Some(name), e);
        let blocks = flat_range_blocks(shape, a, b);
        let pieces: Vec<hdf5_raw::Block> = blocks
            .iter()
            .map(|b| (b.start.as_slice(), b.count.as_slice()))
            .collect();
        let file_space =
            select_blocks(shape, &pieces).map_err(|e| fail("selecting a hyperslab", e))?;
        let mem_space =
            Dataspace::try_new((b - a) as usize).map_err(|e| fail("creating a dataspace", e))?;
        let spaces = Spaces {
            memory: Some(&mem_space),
            file: Some(&file_space),
        };
        // SAFETY: the staging buffer holds the b - a elements just copied.
        unsafe { hdf5_raw::write(dset, elements.mem_type, spaces, buf.as_ptr().cast()) }
            .map_err(|e| fail("writing from the staging buffer", e))
    };
    // The next piece comes from the device while this one is written.
    staging
        .ring
        .from_device(spans.len(), fetch, write)
        .map_err(Stop::into_error)
}
