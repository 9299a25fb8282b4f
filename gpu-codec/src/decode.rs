//! Compressed chunks decoded on the GPU and placed into a device array: each allocated chunk's
//! stored (compressed) bytes are read raw into device memory by the caller's
//! [`ChunkSource`] (through the `gds` driver), decoded there in batches with nvCOMP, and the
//! decoded chunks copied (device to device) into place in the output array, edge chunks
//! clipped. Chunks HDF5 stored unfiltered (filter mask bit 0: the filter did not help) are
//! copied as they are; chunks never written are returned to the caller, which reads them
//! through its staged path, where HDF5 fills them with the fill value.
//!
//! Integrity: a chunk that does not decode, decodes to the wrong size, or whose framing is not
//! what the filter writes fails the read with the caller's error naming the chunk
//! ([`ChunkSource::corrupt`]). So does a chunk whose decoded bytes fail the checksum it carries
//! (deflate's Adler-32, a Zstandard frame's content checksum), which nvCOMP does not check:
//! with `verify` (the default) each such decoded chunk is copied to pinned host memory and
//! checked on the host's threads while the other slot's batch decodes (`verify`).
//!
//! Naming the chunk at fault after a batched call ([`decode_jobs`]): nvCOMP 6.0 does not report
//! a batch per chunk for Zstandard and Deflate ("Passing corrupt, invalid, or insufficient data
//! leads to undefined behavior or out-of-bound errors. Error reporting cannot be guaranteed in
//! this scenario", `zstd.h`, `deflate.h`): one bad frame can leave other jobs' sizes unwritten
//! (the zero fill, read as 0 bytes) with their statuses the zero fill too (`nvcompSuccess`),
//! or mark several jobs failed, or fail the call (issue 20: on an H200 a truncated frame at
//! [25] was blamed on [0]). So every job is looked at before one is named: the jobs with a
//! failed status, or if none, those with a wrong size; one such chunk is named; several, or a
//! failed call, are decoded again one chunk per call and those that still fail are named (the
//! first in chunk order). A call that leaves the CUDA context unusable (a sticky error) names

mod batch;
mod fault;
mod host_reads;
mod placement;
mod verify;

pub use fault::{judge, suspect_jobs, Failed};
pub use host_reads::HostReads;
pub use placement::placement;

use crate::device::{align_up, DeviceFailure};
use crate::nvcomp;
use batch::Slot;
use cudarc::driver::{sys, CudaStream};
use h5gds_chunk_codec::format;
use h5gds_chunk_codec::ChunkIndex;
use h5gds_route::route::GpuCodec;
use h5gds_route::select::{chunks_touching, Block};
use h5gds_runtime::cuda::call;
use h5gds_runtime::staging_ring::StagingRing;
use h5gds_runtime::stream::synchronize;
use nvcomp_sys::NvcompLib;
use std::sync::Arc;

/// Bytes of framing gathered per chunk: its first 16 bytes, then its last 4 (at 16).
const HEAD: usize = 32;

/// Device scratch bytes one batch may take (the chunks' stored bytes, and the decoded chunks
/// that cannot be decoded straight into the output), at least one chunk. Two batches are in
/// flight, one per slot of the pipeline.
const SLOT_BYTES: usize = 256 << 20;

/// Chunks after which a batch is closed even with scratch left, so that the next batch's reads
/// overlap its decoding. nvCOMP decodes each chunk of a batch with a few threads (on the H200,
/// Zstandard batches of 16 chunks of 16 MiB decoded at 2.5 GB/s, 256 of 1 MiB at 13.2), so a
/// batch needs many chunks to fill the GPU: 512 is about 4 per multiprocessor of an H200 (an
/// estimate; `scripts/gpu-measure.sh codec` measures it).
const BATCH_CHUNKS: usize = 512;

/// Where a dataset's stored chunks come from: the caller's HDF5 binding.
pub trait ChunkSource {
    /// The caller's error, which device failures convert into.
    type Error: From<DeviceFailure> + From<h5gds_runtime::cuda::CudaError>;

    /// Reads the stored bytes of the chunk whose first element is `offset` into device memory
    /// at `dest` (through the `gds` driver) and returns its filter mask.
    ///
    /// # Safety
    /// `dest` must be device memory valid for writes of `size` bytes, the chunk's stored size.
    unsafe fn read_chunk(
        &self,
        offset: &[u64],
        dest: sys::CUdeviceptr,
        size: usize,
    ) -> Result<u32, Self::Error>;

    /// The error for the chunk at `offset`, which cannot be decoded for `reason`.
    fn corrupt(&self, offset: &[u64], reason: String) -> Self::Error;
}

/// One allocated chunk to decode.
pub struct Stored {
    /// Its first element.
    pub offset: Vec<u64>,
    /// The part of it the region needs (file coordinates).
    pub part: Block,
    /// Its stored size.
    pub size: usize,
    /// Filter mask HDF5 recorded: bit 0 set = stored unfiltered.
    pub mask: u32,
    /// Where its stored bytes start in the file.
    pub address: u64,
    /// Where its stored bytes start in the compressed buffer.
    slot: usize,
}

/// The chunks of `chunk` elements touching `region`: the allocated ones (with their stored
/// size and mask from `index`), and the parts of the region in chunks never written.
pub fn split(index: &ChunkIndex, region: &Block, chunk: &[u64]) -> (Vec<Stored>, Vec<Block>) {
    let mut missing = Vec::new();
    let mut present = Vec::new();
    for (offset, part) in chunks_touching(region, chunk) {
        match index.get(&offset) {
            Some(stored) => present.push(Stored {
                offset,
                part,
                size: stored.size,
                mask: stored.mask,
                address: stored.address,
                slot: 0,
            }),
            None => missing.push(part),
        }
    }
    (present, missing)
}

/// How a dataset's chunks are decoded: what `read` needs besides the chunks.
pub struct Decoding<'a> {
    pub lib: &'a NvcompLib,
    pub codec: GpuCodec,
    /// The chunk shape, in elements.
    pub chunk: &'a [u64],
    /// Bytes per element.
    pub element_size: usize,
    /// Whether decoded chunks are checked on the host against the checksums they carry
    /// (deflate's Adler-32, a Zstandard frame's content checksum): `H5GDS_VERIFY_CHECKSUMS`.
    pub verify: bool,
    /// The host threads that check them (the driver's I/O threads).
    pub threads: usize,
    /// Where the stored chunks are read by the host's threads rather than through the caller's
    /// [`ChunkSource::read_chunk`] (the `gds` driver, one chunk per call).
    pub host_reads: Option<HostReads>,
}

/// Decodes the allocated chunks `present` (from [`split`]) on the GPU into `dest`, device
/// memory holding `region` (file coordinates) in row-major order, after the work queued on
/// `stream` (the caller's; everything is done when this returns).
///
/// A pipeline of two slots (one for a read of one batch), each with a stream of its own (a lane
/// of a staging ring) and device memory reused from batch to batch: while the GPU decodes one slot's batch, this thread reads
/// the next batch's stored chunks into the other slot (through the `gds` driver, or the host's
/// threads, [`HostReads`]). A slot's batch is waited for, and its
/// outcomes checked, only before the slot is used again, and at the end, oldest first, so the
/// chunk named in an error is the first bad one in chunk order.
pub fn read<S: ChunkSource>(
    source: &S,
    how: &Decoding,
    present: &mut [Stored],
    region: &Block,
    dest: sys::CUdeviceptr,
    stream: &Arc<CudaStream>,
) -> Result<(), S::Error> {
    let chunk_bytes = how.chunk.iter().product::<u64>() as usize * how.element_size;
    let align = nvcomp::alignment(how.lib, how.codec)?;
    let stride = align_up(chunk_bytes, align);
    let direct: Vec<Option<sys::CUdeviceptr>> = present
        .iter()
        .map(|c| decoded_in_place(c, how, chunk_bytes, align, region, dest))
        .collect();
    let batches = batches(present, &direct, how.codec, align, stride);
    synchronize(stream)?;
    let context = stream.context();
    let new_stream = || call("creating a stream for decoding", || context.new_stream());
    // A read of one batch (most small reads) makes one stream, not two. The slots' streams are
    // the lanes of a staging ring, whose pinned buffers take the stored chunks the host's
    // threads read.
    let streams = (0..batches.len().min(2))
        .map(|_| new_stream())
        .collect::<Result<Vec<_>, _>>()?;
    let mut ring = StagingRing::unbuffered(streams);
    let mut slots: Vec<Slot> = (0..ring.lanes()).map(|_| Slot::default()).collect();
    let n = slots.len();
    let shape = Shape {
        how,
        chunk_bytes,
        stride,
        align,
        region,
        dest,
    };
    let mut run = || -> Result<(), S::Error> {
        for (b, range) in batches.iter().enumerate() {
            let slot = &mut slots[b % n];
            slot.finish(source, &shape, &mut ring)?;
            let launched = slot.launch(
                source,
                &shape,
                (&mut ring, b),
                &mut present[range.clone()],
                &direct[range.clone()],
            );
            if let Err(e) = launched {
                // The batch before holds earlier chunks: its error comes first.
                slots[(b + 1) % n].finish(source, &shape, &mut ring)?;
                return Err(e);
            }
        }
        for b in batches.len().saturating_sub(2)..batches.len() {
            slots[b % n].finish(source, &shape, &mut ring)?;
        }
        Ok(())
    };
    let outcome = run();
    if outcome.is_err() {
        // Nothing may still be running on the slots' buffers when they are freed.
        let _ = ring.settle();
    }
    outcome
}

/// The slots' streams and pinned buffers.
type Lanes = StagingRing<Arc<CudaStream>>;

/// What every batch of one read shares.
struct Shape<'a> {
    how: &'a Decoding<'a>,
    chunk_bytes: usize,
    /// Bytes between decoded chunks in scratch (the chunk size aligned for nvCOMP).
    stride: usize,
    align: usize,
    region: &'a Block,
    dest: sys::CUdeviceptr,
}

/// Where chunk `c` is decoded straight into the output: a chunk that lands whole and
/// contiguous there (1-D chunks, chunks spanning whole rows) at an address aligned for nvCOMP;
/// `None` for the others, decoded into scratch and then copied into place.
fn decoded_in_place(
    c: &Stored,
    how: &Decoding,
    chunk_bytes: usize,
    align: usize,
    region: &Block,
    dest: sys::CUdeviceptr,
) -> Option<sys::CUdeviceptr> {
    match placement(&c.part, &c.offset, how.chunk, region, how.element_size)[..] {
        [copy] if copy.src == 0 && copy.width == chunk_bytes => {
            let at = dest + copy.dst;
            (at as usize % align == 0).then_some(at)
        }
        _ => None,
    }
}

/// The chunks of each batch, in chunk order: closed at [`BATCH_CHUNKS`] chunks, or before the
/// scratch it needs (stored bytes, aligned, plus a decoded chunk for each not decoded in place)
/// would pass [`SLOT_BYTES`].
fn batches(
    present: &[Stored],
    direct: &[Option<sys::CUdeviceptr>],
    codec: GpuCodec,
    align: usize,
    stride: usize,
) -> Vec<std::ops::Range<usize>> {
    let mut batches = Vec::new();
    let (mut start, mut bytes) = (0usize, 0usize);
    for (i, c) in present.iter().enumerate() {
        let need = align_up(c.size + format::payload_offset(codec), align)
            + if direct[i].is_some() { 0 } else { stride };
        if i > start && (i - start == BATCH_CHUNKS || bytes + need > SLOT_BYTES) {
            batches.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += need;
    }
    if start < present.len() {
        batches.push(start..present.len());
    }
    batches
}

/// Runs `one` on every item, on up to `threads` of the host's threads (a few items per task, so
/// that small chunks do not cost a task each); the failure of the first failing item in order
/// (its chunk index in the batch, and why).
fn first_failure<T: Send>(
    items: &mut [T],
    threads: usize,
    one: impl Fn(&mut T) -> Result<(), (usize, String)> + Sync,
) -> Result<(), (usize, String)> {
    let pool = (threads > 1 && items.len() > 1)
        .then(|| h5gds_runtime::pool::for_waiting_caller(threads))
        .flatten();
    let Some(pool) = pool else {
        return items.iter_mut().try_for_each(one);
    };
    let per_task = items.len().div_ceil(4 * threads).max(1);
    let failures = std::sync::Mutex::new(Vec::new());
    pool.in_place_scope(|scope| {
        for group in items.chunks_mut(per_task) {
            let (failures, one) = (&failures, &one);
            scope.spawn(move |_| {
                if let Err(failure) = group.iter_mut().try_for_each(one) {
                    failures
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(failure);
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap_or_else(|e| e.into_inner());
    match failures.into_iter().min_by_key(|f: &(usize, String)| f.0) {
        Some(first) => Err(first),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(size: usize) -> Stored {
        Stored {
            offset: vec![0],
            part: block(&[0], &[1]),
            size,
            mask: 0,
            address: 0,
            slot: 0,
        }
    }

    #[test]
    fn batches_close_at_their_chunk_count_or_their_scratch() {
        let n = BATCH_CHUNKS * 2 + 3;
        let present: Vec<Stored> = (0..n).map(|_| stored(1000)).collect();
        // Decoded in place: only the stored bytes take scratch, so the count closes batches.
        let direct = vec![Some(4096); n];
        let got = batches(&present, &direct, GpuCodec::Zstd, 8, 1 << 20);
        assert_eq!(
            got,
            vec![
                0..BATCH_CHUNKS,
                BATCH_CHUNKS..2 * BATCH_CHUNKS,
                2 * BATCH_CHUNKS..n
            ]
        );
        // Decoded through scratch: 64 MiB chunks close a batch at 3 (4 would pass 256 MiB).
        let scratch = vec![None; 10];
        let got = batches(&present[..10], &scratch, GpuCodec::Zstd, 8, 64 << 20);
        assert_eq!(got, vec![0..3, 3..6, 6..9, 9..10]);
        // A chunk larger than a slot still gets a batch of its own.
        let huge = [stored(SLOT_BYTES + 1), stored(10)];
        let got = batches(&huge, &[None, None], GpuCodec::Lz4, 4, 16);
        assert_eq!(got, vec![0..1, 1..2]);
        assert!(batches(&[], &[], GpuCodec::Deflate, 4, 16).is_empty());
    }

    fn block(start: &[u64], count: &[u64]) -> Block {
        Block {
            start: start.to_vec(),
            count: count.to_vec(),
        }
    }
}
