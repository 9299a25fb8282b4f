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
use h5gds_runtime::stream::{copy_from_device, copy_to_device, synchronize};
use hdf5::{Dataset, Dataspace, Datatype};
use std::sync::Arc;

/// Two staging buffers of a fixed size from the process's pool of pinned buffers
/// (`h5gds_runtime::pinned`, pageable where CUDA cannot pin), taking turns: piece `k` uses buffer
/// `k % 2` and stream `k % 2` (the caller's, and one forked from it), so that one piece's copy
/// runs while HDF5 (or the host decoding) moves the next. A buffer is handed out only once the
/// copies last queued with it have finished.
pub(crate) struct HostStaging {
    buffers: [pinned::Taken; 2],
    len: usize,
    /// The caller's stream and its fork, once a copy has been queued.
    streams: Option<[Arc<CudaStream>; 2]>,
    /// Whether copies with each buffer may still be running.
    pending: [bool; 2],
}

impl HostStaging {
    /// Buffers of `min(size, needed)` bytes (at least one byte).
    pub fn new(size: usize, needed: usize) -> HostStaging {
        let len = size.min(needed).max(1);
        HostStaging {
            buffers: [pinned::Taken::new(len), pinned::Taken::new(len)],
            len,
            streams: None,
            pending: [false, false],
        }
    }

    /// Buffers sized for a transfer of `needed` bytes through HDF5 to overlap its copies
    /// (`route::select::staged_piece_bytes`): an eighth of it, at least a task for each of the
    /// driver's I/O threads, at most `size`.
    pub fn pipelined(size: usize, needed: usize) -> HostStaging {
        let floor = h5gds::VfdSettings::load(None)
            .unwrap_or_default()
            .task_round_bytes() as u64;
        HostStaging::new(
            staged_piece_bytes(needed as u64, size as u64, floor) as usize,
            needed,
        )
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Piece `k`'s buffer, once no queued copy uses it any more.
    pub fn buffer(&mut self, k: usize) -> Result<*mut u8> {
        if std::mem::take(&mut self.pending[k % 2]) {
            if let Some(streams) = &self.streams {
                synchronize(&streams[k % 2])?;
            }
        }
        Ok(self.buffers[k % 2].as_mut_ptr())
    }

    /// The stream for piece `k`'s copies (`caller`, or its fork), noting that copies with its
    /// buffer will be queued.
    pub fn stream(&mut self, k: usize, caller: &Arc<CudaStream>) -> Result<Arc<CudaStream>> {
        if self.streams.is_none() {
            let fork = call("creating a stream", || caller.fork())?;
            self.streams = Some([caller.clone(), fork]);
        }
        self.pending[k % 2] = true;
        Ok(self.streams.as_ref().expect("made above")[k % 2].clone())
    }

    /// Waits for every queued copy (after an error too, before the buffers go back to the pool).
    fn settle(&mut self) -> Result<()> {
        let mut first = Ok(());
        for k in 0..2 {
            if let Err(e) = self.buffer(k) {
                first = first.and(Err(e));
            }
        }
        first
    }
}

impl Drop for HostStaging {
    fn drop(&mut self) {
        // A copy still queued must not meet a buffer another transfer has taken from the pool.
        let _ = self.settle();
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
    let moved = spans.iter().enumerate().try_for_each(|(k, &(a, b))| {
        let blocks: Vec<Block> = flat_range_blocks(&block.count, a, b)
            .iter()
            .map(|piece| piece.offset_by(&block.start))
            .collect();
        let fail = |op: &str, e: hdf5::Error| Error::hdf5(op, &ds.path, Some(&ds.name), e);
        let pieces: Vec<hdf5_raw::Block> = blocks
            .iter()
            .map(|b| (b.start.as_slice(), b.count.as_slice()))
            .collect();
        let buf = staging.buffer(k)?;
        if let Some((planned, _)) = decoded {
            let mut at = 0usize;
            for piece in &blocks {
                let len = piece.len() as usize * elements.size;
                // SAFETY: the staging buffer holds `per` >= b - a elements, the pieces' in order.
                let out = unsafe { std::slice::from_raw_parts_mut(buf.add(at), len) };
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
            unsafe { hdf5_raw::read(&ds.dset, elements.mem_type, spaces, buf.cast()) }
                .map_err(|e| fail("reading into the staging buffer", e))?;
        }
        if elements.check_bool {
            // SAFETY: HDF5 has just written these b - a bytes.
            let bytes = unsafe { std::slice::from_raw_parts(buf, (b - a) as usize) };
            if let Some((index, value)) = first_invalid_bool(bytes) {
                return Err(Error::InvalidBool {
                    path: ds.path.clone(),
                    dataset: ds.name.clone(),
                    index: (a as usize) + index,
                    value,
                });
            }
        }
        let on = staging.stream(k, stream)?;
        for (at, to, len) in runs.pieces(a, b) {
            // SAFETY: the source lies inside the staging buffer, which is not handed out again
            // before `on` is synchronized; the destination lies inside `dest`, which holds the
            // whole region.
            unsafe {
                copy_to_device(
                    &on,
                    dest + to * es,
                    buf.add((at * es) as usize),
                    (len * es) as usize,
                )?
            };
        }
        Ok(())
    });
    // The next piece is read while this one's copies run; all have finished when this returns.
    let settled = staging.settle();
    moved?;
    settled?;
    synchronize(stream)?;
    Ok(())
}

/// Writes the whole dataset `dset` (of `shape`) from device memory `src` through `staging`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_all(
    dset: &Dataset,
    path: &std::path::Path,
    name: &str,
    shape: &[u64],
    elements: &Elements,
    src: sys::CUdeviceptr,
    stream: &Arc<CudaStream>,
    staging: &mut HostStaging,
) -> Result<()> {
    let es = elements.size as u64;
    let per = (staging.len() as u64 / es).max(1);
    let total: u64 = shape.iter().product();
    let spans = staging_pieces(total, per, &[]);
    // Queues piece `k`'s copy from the device into its buffer.
    let fetch = |staging: &mut HostStaging, k: usize| -> Result<()> {
        let (a, b): (u64, u64) = spans[k];
        let buf = staging.buffer(k)?;
        let on = staging.stream(k, stream)?;
        // SAFETY: the source range lies inside the device array; the staging buffer holds
        // (b - a) elements and is not read before `on` is synchronized.
        unsafe { copy_from_device(&on, buf, src + a * es, ((b - a) * es) as usize)? };
        Ok(())
    };
    let moved = (|| -> Result<()> {
        if !spans.is_empty() {
            fetch(staging, 0)?;
        }
        for (k, &(a, b)) in spans.iter().enumerate() {
            let buf = staging.buffer(k)?;
            // The next piece comes from the device while this one is written.
            if k + 1 < spans.len() {
                fetch(staging, k + 1)?;
            }
            let fail = |op: &str, e: hdf5::Error| Error::hdf5(op, path, Some(name), e);
            let blocks = flat_range_blocks(shape, a, b);
            let pieces: Vec<hdf5_raw::Block> = blocks
                .iter()
                .map(|b| (b.start.as_slice(), b.count.as_slice()))
                .collect();
            let file_space =
                select_blocks(shape, &pieces).map_err(|e| fail("selecting a hyperslab", e))?;
            let mem_space = Dataspace::try_new((b - a) as usize)
                .map_err(|e| fail("creating a dataspace", e))?;
            let spaces = Spaces {
                memory: Some(&mem_space),
                file: Some(&file_space),
            };
            // SAFETY: the staging buffer holds the b - a elements just copied.
            unsafe { hdf5_raw::write(dset, elements.mem_type, spaces, buf.cast_const().cast()) }
                .map_err(|e| fail("writing from the staging buffer", e))?;
        }
        Ok(())
    })();
    let settled = staging.settle();
    moved?;
    settled
}
