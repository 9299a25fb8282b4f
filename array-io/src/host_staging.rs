//! Host staging, the staged path: data moves between the file and device memory through a
//! bounded host buffer (`H5GDS_STAGING_BUFFER_SIZE`, pinned when CUDA can pin it; not the
//! driver's bounce buffers), piece by piece, so any size works with any buffer size. HDF5 only
//! ever sees host memory here, so it may convert types, fill unwritten storage and decode
//! filtered chunks as it likes.

use crate::element::first_invalid_bool;
use crate::error::{Error, Result};
use crate::file::OpenDataset;
use crate::hdf5_raw::{self, select_blocks, Spaces};
use crate::host_codec::Planned;
use crate::select::{flat_range_blocks, Block, Runs};
use cudarc::driver::{sys, CudaStream, PinnedHostSlice};
use h5gds_runtime::cuda::call;
use h5gds_runtime::stream::{copy_from_device, copy_to_device, synchronize};
use hdf5::{Dataset, Dataspace, Datatype};
use std::sync::Arc;

/// Host memory the staged path moves data through.
enum Memory {
    Pinned(PinnedHostSlice<u8>),
    /// `u64`s, for 8-byte alignment of every element type.
    Pageable(Vec<u64>),
}

/// A staging buffer of a fixed size.
pub(crate) struct HostStaging {
    memory: Memory,
    len: usize,
}

impl HostStaging {
    /// A buffer of `min(size, needed)` bytes (at least one byte), pinned in `stream`'s context
    /// if CUDA can pin it, else pageable (with a debug log line).
    pub fn new(stream: &Arc<CudaStream>, size: usize, needed: usize) -> Result<HostStaging> {
        let len = size.min(needed).max(1);
        let pinned = call("allocating pinned host memory", || {
            // SAFETY: the memory is unset; every use writes before it reads. Flags 0: plain
            // pinned memory (write-combined memory would be slow to read back on the host).
            unsafe { stream.context().alloc_pinned_with_flags::<u8>(len, 0) }
        });
        let memory = match pinned {
            Ok(slice) => Memory::Pinned(slice),
            Err(err) => {
                crate::log::debug(format_args!(
                    "staging through pageable memory of {len} bytes ({})",
                    Error::from(err)
                ));
                Memory::Pageable(vec![0u64; len.div_ceil(8)])
            }
        };
        Ok(HostStaging { memory, len })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The buffer, once no queued copy uses it any more.
    pub fn as_mut_ptr(&mut self) -> Result<*mut u8> {
        match &mut self.memory {
            Memory::Pinned(slice) => {
                let bytes = call("waiting for the staging buffer", || slice.as_mut_slice())?;
                Ok(bytes.as_mut_ptr())
            }
            Memory::Pageable(words) => Ok(words.as_mut_ptr().cast()),
        }
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
/// or, with `decoded`, h5gds decodes the chunks into it on the driver's I/O threads.
#[allow(clippy::too_many_arguments)]
pub(crate) fn read_block(
    ds: &OpenDataset,
    elements: &Elements,
    block: &Block,
    region: &Block,
    dest: sys::CUdeviceptr,
    stream: &Arc<CudaStream>,
    staging: &mut HostStaging,
    decoded: Option<&Planned>,
) -> Result<()> {
    let es = elements.size as u64;
    let per = (staging.len() as u64 / es).max(1);
    let runs = Runs::new(&block.relative_to(&region.start), &region.count);
    let total = block.len();
    let mut a = 0;
    while a < total {
        let b = total.min(a + per);
        let blocks: Vec<Block> = flat_range_blocks(&block.count, a, b)
            .iter()
            .map(|piece| piece.offset_by(&block.start))
            .collect();
        let fail = |op: &str, e: hdf5::Error| Error::hdf5(op, &ds.path, Some(&ds.name), e);
        let pieces: Vec<hdf5_raw::Block> = blocks
            .iter()
            .map(|b| (b.start.as_slice(), b.count.as_slice()))
            .collect();
        let buf = staging.as_mut_ptr()?;
        if let Some(planned) = decoded {
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
        for (at, to, len) in runs.pieces(a, b) {
            // SAFETY: the source lies inside the staging buffer, which is not touched again
            // before the stream is synchronized below; the destination lies inside `dest`,
            // which holds the whole region.
            unsafe {
                copy_to_device(
                    stream,
                    dest + to * es,
                    buf.add((at * es) as usize),
                    (len * es) as usize,
                )?
            };
        }
        synchronize(stream)?;
        a = b;
    }
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
    let mut a = 0;
    while a < total {
        let b = total.min(a + per);
        let buf = staging.as_mut_ptr()?;
        // SAFETY: the source range lies inside the device array; the staging buffer holds
        // (b - a) elements.
        unsafe { copy_from_device(stream, buf, src + a * es, ((b - a) * es) as usize)? };
        synchronize(stream)?;
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
        unsafe { hdf5_raw::write(dset, elements.mem_type, spaces, buf.cast_const().cast()) }
            .map_err(|e| fail("writing from the staging buffer", e))?;
        a = b;
    }
    Ok(())
}
