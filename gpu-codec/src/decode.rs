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
//! ([`ChunkSource::corrupt`]). The Adler-32 that ends every deflate chunk is not computed on the
//! GPU (nvCOMP has no Adler-32); `verify` copies each decoded deflate chunk to the host to
//! check it.

use crate::codec::{self, Piece};
use crate::device::{align_up, copy_on_device, cuda, peek, scratch, DeviceFailure};
use crate::nvcomp::{self, Job};
use cudarc::driver::{sys, CudaStream};
use h5gds_route::route::GpuCodec;
use h5gds_route::select::{chunks_touching, Block};
use nvcomp_sys::NvcompLib;
use std::collections::HashMap;
use std::sync::Arc;

/// Bytes of framing gathered per chunk: its first 16 bytes, then its last 4 (at 16).
const HEAD: usize = 32;

/// Decoded bytes a batch may hold in device scratch memory (at least one chunk per batch).
const BATCH_BYTES: usize = 256 << 20;

/// Where a dataset's stored chunks come from: the caller's HDF5 binding.
pub trait ChunkSource {
    /// The caller's error, which device failures convert into.
    type Error: From<DeviceFailure>;

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

/// Stored size and filter mask of every allocated chunk, by first element.
pub type ChunkIndex = HashMap<Vec<u64>, (usize, u32)>;

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
            Some(&(size, mask)) => present.push(Stored {
                offset,
                part,
                size,
                mask,
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
    /// Whether decoded deflate chunks are checked against their Adler-32 on the host.
    pub verify: bool,
}

/// Decodes the allocated chunks `present` (from [`split`]) on the GPU into `dest`, device
/// memory holding `region` (file coordinates) in row-major order, in batches of bounded
/// scratch memory.
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
    let per_batch = (BATCH_BYTES / stride).max(1);
    for batch in present.chunks_mut(per_batch) {
        decode_batch(
            source,
            how.lib,
            how.codec,
            batch,
            how.chunk,
            chunk_bytes,
            stride,
            align,
            how.verify && how.codec == GpuCodec::Deflate,
            region,
            dest,
            stream,
        )?;
    }
    Ok(())
}

/// Contiguous runs copying `part` (file coordinates) out of a decoded chunk at `origin` of
/// shape `chunk` into an array holding `region`: (source element, destination element,
/// elements) per run, row-major.
pub fn placement_runs(
    part: &Block,
    origin: &[u64],
    chunk: &[u64],
    region: &Block,
) -> Vec<(u64, u64, u64)> {
    let rank = part.count.len();
    if rank == 0 {
        return vec![(0, 0, 1)];
    }
    let strides = |shape: &[u64]| {
        let mut s = vec![1u64; shape.len()];
        for d in (0..shape.len().saturating_sub(1)).rev() {
            s[d] = s[d + 1] * shape[d + 1];
        }
        s
    };
    let (cs, rs) = (strides(chunk), strides(&region.count));
    // Trailing dimensions the part spans whole in both the chunk and the region merge into
    // one run; `k` is the first dimension of the run.
    let mut k = rank - 1;
    while k > 0 && part.count[k] == chunk[k] && part.count[k] == region.count[k] {
        k -= 1;
    }
    let run: u64 = part.count[k..].iter().product();
    let outer: Vec<u64> = part.count[..k].to_vec();
    let n_outer: u64 = outer.iter().product();
    let mut runs = Vec::with_capacity(n_outer as usize);
    let mut index = vec![0u64; k];
    for _ in 0..n_outer {
        let (mut src, mut dst) = (0u64, 0u64);
        for d in 0..rank {
            let at = part.start[d] + if d < k { index[d] } else { 0 };
            src += (at - origin[d]) * cs[d];
            dst += (at - region.start[d]) * rs[d];
        }
        runs.push((src, dst, run));
        for d in (0..k).rev() {
            index[d] += 1;
            if index[d] < outer[d] {
                break;
            }
            index[d] = 0;
        }
    }
    runs
}

#[allow(clippy::too_many_arguments)]
fn decode_batch<S: ChunkSource>(
    source: &S,
    lib: &NvcompLib,
    codec: GpuCodec,
    batch: &mut [Stored],
    chunk: &[u64],
    chunk_bytes: usize,
    stride: usize,
    align: usize,
    verify: bool,
    region: &Block,
    dest: sys::CUdeviceptr,
    stream: &Arc<CudaStream>,
) -> Result<(), S::Error> {
    let bad = |offset: &[u64], reason: String| source.corrupt(offset, reason);
    // Place each stored chunk so that its first coded byte is aligned for nvCOMP.
    let mut cursor = 0usize;
    for c in batch.iter_mut() {
        let skip = if c.mask & 1 != 0 {
            0
        } else {
            codec::payload_offset(codec)
        };
        c.slot = align_up(cursor + skip, align) - skip;
        cursor = c.slot + c.size;
    }
    let (_compressed, comp) = scratch(stream, cursor)?;
    // A chunk that lands whole and contiguous in the output (1-D chunks, chunks spanning whole
    // rows) is decoded straight into place; the others into scratch, then copied into place.
    let es = (chunk_bytes / chunk.iter().product::<u64>().max(1) as usize) as u64;
    let direct: Vec<Option<sys::CUdeviceptr>> = batch
        .iter()
        .map(
            |c| match placement_runs(&c.part, &c.offset, chunk, region)[..] {
                [(0, dst, len)] if (len * es) as usize == chunk_bytes => {
                    let at = dest + dst * es;
                    (at as usize % align == 0).then_some(at)
                }
                _ => None,
            },
        )
        .collect();
    let in_scratch = direct.iter().filter(|d| d.is_none()).count();
    let (_decoded, dec) = scratch(stream, stride * in_scratch)?;
    let mut next = 0u64;
    let bases: Vec<sys::CUdeviceptr> = direct
        .iter()
        .map(|d| {
            d.unwrap_or_else(|| {
                next += 1;
                dec + (next - 1) * stride as u64
            })
        })
        .collect();
    for c in batch.iter_mut() {
        // SAFETY: the slot holds the chunk's stored size inside the compressed buffer.
        let mask = unsafe { source.read_chunk(&c.offset, comp + c.slot as u64, c.size)? };
        c.mask = mask;
    }
    // The framing bytes of every chunk (deflate: header and trailer; LZ4: header and first
    // block size), gathered on the device and brought to the host in one copy, not one
    // round trip per chunk.
    let (_heads, heads) = scratch(stream, HEAD * batch.len())?;
    for (i, c) in batch.iter().enumerate() {
        let base = comp + c.slot as u64;
        let at = heads + (i * HEAD) as u64;
        let (front, back) = (c.size.min(HEAD / 2), c.size.min(4));
        copy_on_device(stream, at, base, front)?;
        copy_on_device(
            stream,
            at + (HEAD / 2) as u64,
            base + (c.size - back) as u64,
            back,
        )?;
    }
    let framing = peek(stream, heads, HEAD * batch.len())?;
    // What to decode (or copy) where.
    let mut jobs: Vec<(usize, Job)> = Vec::new();
    // Jobs whose buffers miss nvCOMP's alignment go through aligned scratch: (job, final output).
    let mut moved: Vec<(usize, sys::CUdeviceptr)> = Vec::new();
    let mut trailers: Vec<Option<u32>> = vec![None; batch.len()];
    for (i, c) in batch.iter().enumerate() {
        let base = comp + c.slot as u64;
        let out = bases[i];
        if c.mask & 1 != 0 {
            // Stored unfiltered: the stored bytes are the chunk.
            if c.size != chunk_bytes {
                return Err(bad(
                    &c.offset,
                    format!(
                        "it is stored unfiltered with {} bytes, but a chunk holds {chunk_bytes}",
                        c.size
                    ),
                ));
            }
            copy_on_device(stream, out, base, chunk_bytes)?;
            continue;
        }
        if c.mask != 0 {
            return Err(bad(
                &c.offset,
                format!(
                    "its filter mask {:#x} names filters the dataset does not have",
                    c.mask
                ),
            ));
        }
        let pieces: Vec<Piece> = match codec {
            GpuCodec::Deflate => {
                let head = &framing[i * HEAD..i * HEAD + c.size.min(2)];
                let pieces =
                    codec::zlib_pieces(head, c.size, chunk_bytes).map_err(|r| bad(&c.offset, r))?;
                if verify {
                    let tail = &framing[i * HEAD + HEAD / 2..i * HEAD + HEAD / 2 + 4];
                    trailers[i] = Some(codec::adler_trailer(&tail.try_into().expect("4 bytes")));
                }
                pieces
            }
            GpuCodec::Zstd => vec![Piece {
                at: 0,
                len: c.size,
                out_at: 0,
                out_len: chunk_bytes,
                coded: true,
            }],
            GpuCodec::Lz4 => {
                let mut failure = None;
                let front = &framing[i * HEAD..i * HEAD + c.size.min(HEAD / 2)];
                let pieces = codec::lz4_pieces(c.size, chunk_bytes, |at, len| {
                    if at + len <= front.len() {
                        return Ok(front[at..at + len].to_vec());
                    }
                    peek(stream, base + at as u64, len).map_err(|e| {
                        let text = e.to_string();
                        failure = Some(e);
                        text
                    })
                });
                if let Some(e) = failure {
                    return Err(e.into());
                }
                pieces.map_err(|r| bad(&c.offset, r))?
            }
        };
        for p in pieces {
            let (input, output) = (base + p.at as u64, out + p.out_at as u64);
            if !p.coded {
                copy_on_device(stream, output, input, p.out_len)?;
                continue;
            }
            let job = Job {
                input,
                input_len: p.len,
                output,
                output_len: p.out_len,
            };
            if input as usize % align != 0 || output as usize % align != 0 {
                moved.push((jobs.len(), output));
            }
            jobs.push((i, job));
        }
    }
    // Realign the few jobs that need it (LZ4 blocks after the first of a chunk).
    let moved_bytes: usize = moved
        .iter()
        .map(|&(j, _)| align_up(jobs[j].1.input_len, align) + align_up(jobs[j].1.output_len, align))
        .sum();
    let (_realigned, spare) = scratch(stream, moved_bytes)?;
    let mut at = spare;
    for &(j, _) in &moved {
        let job = &mut jobs[j].1;
        copy_on_device(stream, at, job.input, job.input_len)?;
        job.input = at;
        at += align_up(job.input_len, align) as u64;
        job.output = at;
        at += align_up(job.output_len, align) as u64;
    }
    let list: Vec<Job> = jobs.iter().map(|&(_, j)| j).collect();
    let outcomes = nvcomp::decompress(lib, codec, stream, &list).map_err(|e| {
        bad(
            &batch[jobs.first().map_or(0, |j| j.0)].offset,
            format!("the batch holding it failed to decode on the GPU: {e}"),
        )
    })?;
    for ((i, job), outcome) in jobs.iter().zip(&outcomes) {
        let offset = &batch[*i].offset;
        if outcome.status != nvcomp_sys::nvcompStatus_t::nvcompSuccess {
            return Err(bad(
                offset,
                format!(
                    "nvCOMP could not decode it ({}); the file may be corrupt",
                    nvcomp::status_text(outcome.status)
                ),
            ));
        }
        if outcome.written != job.output_len {
            return Err(bad(
                offset,
                format!(
                    "it decoded to {} bytes, not the {} expected; the file may be corrupt",
                    outcome.written, job.output_len
                ),
            ));
        }
    }
    for &(j, output) in &moved {
        copy_on_device(stream, output, jobs[j].1.output, jobs[j].1.output_len)?;
    }
    for (i, trailer) in trailers.iter().enumerate() {
        if let Some(expected) = trailer {
            let bytes = peek(stream, bases[i], chunk_bytes)?;
            let actual = adler2::adler32_slice(&bytes);
            if actual != *expected {
                return Err(bad(&batch[i].offset, format!("its decoded bytes have Adler-32 {actual:#010x}, but the stream stores {expected:#010x}; the file is corrupt")));
            }
        }
    }
    for (i, c) in batch.iter().enumerate() {
        if direct[i].is_some() {
            continue;
        }
        for (src, dst, len) in placement_runs(&c.part, &c.offset, chunk, region) {
            copy_on_device(
                stream,
                dest + dst * es,
                bases[i] + src * es,
                (len * es) as usize,
            )?;
        }
    }
    cuda("waiting for the device copies", || {
        stream.context().synchronize()
    })?;
    // The scratch buffers are freed on return: the driver must not keep their ranges.
    h5gds::forget_device_range(comp);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(start: &[u64], count: &[u64]) -> Block {
        Block {
            start: start.to_vec(),
            count: count.to_vec(),
        }
    }

    #[test]
    fn whole_rows_merge_into_one_run_and_edges_are_clipped() {
        // A 2x4 chunk at (2, 0) of a 5x4 region: rows span the region, one run of 8.
        let region = block(&[0, 0], &[5, 4]);
        let runs = placement_runs(&block(&[2, 0], &[2, 4]), &[2, 0], &[2, 4], &region);
        assert_eq!(runs, [(0, 8, 8)]);
        // The edge chunk at (4, 0) holds one row of the region (the chunk has two).
        let runs = placement_runs(&block(&[4, 0], &[1, 4]), &[4, 0], &[2, 4], &region);
        assert_eq!(runs, [(0, 16, 4)]);
        // A 2x2 chunk at (2, 2) of a 5x5 region starting at (1, 1): clipped rows of 2.
        let region = block(&[1, 1], &[5, 5]);
        let runs = placement_runs(&block(&[2, 2], &[2, 2]), &[2, 2], &[2, 2], &region);
        assert_eq!(runs, [(0, 6, 2), (2, 11, 2)]);
        // Part of a chunk: elements (3, 3..5) of chunk (2, 2)-(4, 4) in a region from (0, 0).
        let region = block(&[0, 0], &[4, 5]);
        let runs = placement_runs(&block(&[3, 3], &[1, 1]), &[2, 2], &[2, 2], &region);
        assert_eq!(runs, [(3, 18, 1)]);
    }

    #[test]
    fn three_dimensional_chunks_place_plane_by_plane() {
        let region = block(&[0, 0, 0], &[3, 2, 4]);
        // Chunk 2x2x4 at (2, 0, 0), edge: one plane of 2x4 is inside.
        let runs = placement_runs(
            &block(&[2, 0, 0], &[1, 2, 4]),
            &[2, 0, 0],
            &[2, 2, 4],
            &region,
        );
        assert_eq!(runs, [(0, 16, 8)]);
        // Chunk 2x2x2 at (0, 0, 2): runs of 2 per row, rows of 4 in the region.
        let runs = placement_runs(
            &block(&[0, 0, 2], &[2, 2, 2]),
            &[0, 0, 2],
            &[2, 2, 2],
            &region,
        );
        assert_eq!(runs, [(0, 2, 2), (2, 6, 2), (4, 10, 2), (6, 14, 2)]);
        // Scalars: one element.
        assert_eq!(
            placement_runs(&block(&[], &[]), &[], &[], &block(&[], &[])),
            [(0, 0, 1)]
        );
    }
}
