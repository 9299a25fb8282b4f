//! One batch of the decoding pipeline, on a slot: its stored chunks read into device memory
//! (through the caller's `ChunkSource`, or by the host's threads into the slot's lane of the
//! staging ring and copied up), decoded with nvCOMP and placed into the output, then checked:
//! every job's outcome, then the checksums the chunks carry (`super::verify`).

use super::fault::{judge, Failed};
use super::host_reads::read_stored;
use super::placement::placement;
use super::verify::{self, Sum};
use super::{ChunkSource, Lanes, Shape, Stored, HEAD};
use crate::device::{align_up, DeviceFailure};
use crate::nvcomp::{CallSpace, Job, Launched};
use cudarc::driver::sys;
use h5gds_chunk_codec::format::{self, Piece};
use h5gds_route::route::GpuCodec;
use h5gds_runtime::pinned::Taken;
use h5gds_runtime::stream::{
    copy_from_device, copy_on_device, copy_strided_on_device, peek, synchronize, Scratch,
};
use std::sync::Arc;

/// One slot of the pipeline: its stream, the device memory its batches reuse, and its batch
/// launched and not yet checked.
#[derive(Default)]
pub(super) struct Slot {
    /// The stored chunks.
    compressed: Scratch,
    /// Chunks not decoded in place.
    decoded: Scratch,
    /// Each chunk's framing bytes.
    heads: Scratch,
    /// Jobs realigned for nvCOMP.
    realigned: Scratch,
    space: CallSpace,
    /// Pinned host memory the decoded chunks to check are copied into, [`SUMS_BYTES`] of them
    /// at once (at least one chunk).
    sums_host: Option<Taken>,
    pending: Option<Pending>,
}

/// A batch launched on a slot: what checking it needs.
struct Pending {
    /// The batch's index in the read: its piece of the ring.
    batch: usize,
    offsets: Vec<Vec<u64>>,
    jobs: Vec<Job>,
    owners: Vec<usize>,
    launched: Result<Launched, DeviceFailure>,
    /// Chunks to check against the checksum they carry: (chunk, decoded bytes, stored sum).
    sums: Vec<(usize, sys::CUdeviceptr, Sum)>,
    /// How many of them (the first) were queued for the host at launch.
    queued: usize,
}

impl Slot {
    /// Waits for the slot's batch, if one is launched, and checks it: every job decoded to its
    /// size (else the chunk at fault is named, `judge`), then the checksums its chunks carry,
    /// where asked (`Decoding::verify`).
    pub(super) fn finish<S: ChunkSource>(
        &mut self,
        source: &S,
        shape: &Shape,
        ring: &mut Lanes,
    ) -> Result<(), S::Error> {
        let Some(p) = self.pending.take() else {
            return Ok(());
        };
        let stream = &ring.stream(p.batch)?;
        let first = p
            .launched
            .and_then(|call| self.space.outcomes(stream, &call));
        let offsets: Vec<&[u64]> = p.offsets.iter().map(Vec::as_slice).collect();
        let how = shape.how;
        match judge(
            how.lib, how.codec, stream, first, &p.jobs, &p.owners, &offsets,
        ) {
            Ok(()) => {}
            Err(Failed::Chunk(i, reason)) => return Err(source.corrupt(offsets[i], reason)),
            Err(Failed::Device(failure)) => return Err(failure.into()),
        }
        self.check_sums(source, shape, stream, (&p.sums, p.queued), &offsets)?;
        ring.wait(p.batch)?;
        Ok(())
    }

    /// Queues the copies of the decoded chunks `sums` into the slot's pinned buffer (the k-th at
    /// `k * chunk_bytes`), on `stream` after the work queued there.
    fn queue_sums(
        &mut self,
        stream: &Arc<cudarc::driver::CudaStream>,
        sums: &[(usize, sys::CUdeviceptr, Sum)],
        chunk_bytes: usize,
    ) -> Result<(), h5gds_runtime::cuda::CudaError> {
        if sums.is_empty() {
            return Ok(());
        }
        let need = sums.len() * chunk_bytes;
        if self.sums_host.as_ref().is_none_or(|b| b.len() < need) {
            // The slot's earlier batch is finished: nothing copies into the old buffer.
            self.sums_host = Some(Taken::new(need));
        }
        let host = self.sums_host.as_mut().expect("taken above").as_mut_ptr();
        for (k, &(_, at, _)) in sums.iter().enumerate() {
            // SAFETY: the buffer holds `need` bytes and stays the slot's, unread, until the
            // stream is waited for (`check_sums`, or the ring's settling before the slots go);
            // `at` is a decoded chunk of `chunk_bytes` in device memory the read keeps.
            unsafe { copy_from_device(stream, host.add(k * chunk_bytes), at, chunk_bytes)? };
        }
        Ok(())
    }

    /// Checks a batch's decoded chunks `sums` against the checksums they carry, on the host's
    /// threads, a buffer's worth at a time (the first `queued` at launch, behind the decoding);
    /// the first chunk in batch order that fails is named.
    fn check_sums<S: ChunkSource>(
        &mut self,
        source: &S,
        shape: &Shape,
        stream: &Arc<cudarc::driver::CudaStream>,
        (all, queued): (&[(usize, sys::CUdeviceptr, Sum)], usize),
        offsets: &[&[u64]],
    ) -> Result<(), S::Error> {
        let chunk_bytes = shape.chunk_bytes;
        let window = sums_per_buffer(chunk_bytes);
        let mut start = 0;
        while start < all.len() {
            let end = (start + window).min(all.len());
            if start >= queued {
                self.queue_sums(stream, &all[start..end], chunk_bytes)?;
            }
            synchronize(stream)?;
            let buffer = self.sums_host.as_mut().expect("queued above");
            // SAFETY: the buffer holds the window's chunks, copied there by the stream's finished
            // work; nothing else writes it while this slice lives.
            let host = unsafe {
                std::slice::from_raw_parts(buffer.as_mut_ptr(), (end - start) * chunk_bytes)
            };
            let sums: Vec<(usize, Sum)> = all[start..end].iter().map(|&(i, _, s)| (i, s)).collect();
            verify::check_all(&sums, host, chunk_bytes, shape.how.threads)
                .map_err(|(i, why)| source.corrupt(offsets[i], why))?;
            start = end;
        }
        Ok(())
    }

    /// Reads the stored bytes of `batch` (whose chunks decode in place where `direct` says)
    /// into the slot's memory and launches their decoding and placement on the slot's stream,
    /// without waiting for it, on the lane of the `ring` for batch `b`. The slot must be
    /// finished.
    pub(super) fn launch<S: ChunkSource>(
        &mut self,
        source: &S,
        shape: &Shape,
        (ring, b): (&mut Lanes, usize),
        batch: &mut [Stored],
        direct: &[Option<sys::CUdeviceptr>],
    ) -> Result<(), S::Error> {
        let Shape {
            how,
            chunk_bytes,
            stride,
            align,
            region,
            dest,
        } = *shape;
        let (codec, chunk) = (how.codec, how.chunk);
        let stream = &ring.stream(b)?;
        let bad = |offset: &[u64], reason: String| source.corrupt(offset, reason);
        // Place each stored chunk so that its first coded byte is aligned for nvCOMP.
        let mut cursor = 0usize;
        for c in batch.iter_mut() {
            let skip = if c.mask & 1 != 0 {
                0
            } else {
                format::payload_offset(codec)
            };
            c.slot = align_up(cursor + skip, align) - skip;
            cursor = c.slot + c.size;
        }
        let comp = self.compressed.at_least(stream, cursor)?;
        let in_scratch = direct.iter().filter(|d| d.is_none()).count();
        let dec = self.decoded.at_least(stream, stride * in_scratch)?;
        let es = (chunk_bytes / chunk.iter().product::<u64>().max(1) as usize) as u64;
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
        // The framing bytes of every chunk (deflate: header and trailer; LZ4: header and first
        // block size): HEAD bytes per chunk, its first 16, then its last 4.
        let mut framing = vec![0u8; HEAD * batch.len()];
        let host_stored: Option<&[u8]> = match &how.host_reads {
            Some(reads) => {
                // The lane's buffer is free: the slot is finished, its copy up has completed.
                let bytes = &mut ring.buffer_at_least(b, cursor)?[..cursor];
                read_stored(reads, batch, bytes).map_err(|(i, why)| bad(&batch[i].offset, why))?;
                // SAFETY: the compressed scratch holds `cursor` bytes and stays the slot's until
                // the slot is finished, which waits for the lane.
                unsafe { ring.copies(b)?.upload(0, comp, cursor) }?;
                let bytes = &ring.buffer(b)?[..cursor];
                for (i, c) in batch.iter().enumerate() {
                    let stored = &bytes[c.slot..c.slot + c.size];
                    let (front, back) = (c.size.min(HEAD / 2), c.size.min(4));
                    let at = i * HEAD;
                    framing[at..at + front].copy_from_slice(&stored[..front]);
                    framing[at + HEAD / 2..at + HEAD / 2 + back]
                        .copy_from_slice(&stored[c.size - back..]);
                }
                Some(bytes)
            }
            None => {
                for c in batch.iter_mut() {
                    // SAFETY: the slot holds the chunk's stored size inside the compressed
                    // buffer, which nothing on the GPU uses any more (the slot is finished).
                    let mask =
                        unsafe { source.read_chunk(&c.offset, comp + c.slot as u64, c.size)? };
                    c.mask = mask;
                }
                // Gathered on the device and brought to the host in one copy, not one round
                // trip per chunk.
                let heads = self.heads.at_least(stream, HEAD * batch.len())?;
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
                framing = peek(stream, heads, HEAD * batch.len())?;
                None
            }
        };
        // What to decode (or copy) where.
        let mut jobs: Vec<(usize, Job)> = Vec::new();
        // Jobs whose buffers miss nvCOMP's alignment go through aligned scratch: (job, final
        // output).
        let mut moved: Vec<(usize, sys::CUdeviceptr)> = Vec::new();
        let mut sums = Vec::new();
        for (i, c) in batch.iter().enumerate() {
            let base = comp + c.slot as u64;
            let out = bases[i];
            if c.mask & 1 != 0 {
                // Stored unfiltered: the stored bytes are the chunk.
                if c.size != chunk_bytes {
                    return Err(bad(
                        &c.offset,
                        format!(
                            "it is stored unfiltered with {} bytes, but a chunk holds \
                             {chunk_bytes}",
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
            if how.verify {
                let head = &framing[i * HEAD..i * HEAD + c.size.min(HEAD / 2)];
                let tail = &framing[i * HEAD + HEAD / 2..i * HEAD + HEAD / 2 + 4];
                if let Some(sum) = verify::stored_sum(codec, head, tail.try_into().expect("4")) {
                    sums.push((i, out, sum));
                }
            }
            let pieces: Vec<Piece> = match codec {
                GpuCodec::Deflate => {
                    let head = &framing[i * HEAD..i * HEAD + c.size.min(2)];
                    format::zlib_pieces(head, c.size, chunk_bytes).map_err(|r| bad(&c.offset, r))?
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
                    let pieces = format::lz4_pieces(c.size, chunk_bytes, |at, len| {
                        if at + len <= front.len() {
                            return Ok(front[at..at + len].to_vec());
                        }
                        if let Some(stored) = host_stored {
                            let at = c.slot + at;
                            return Ok(stored[at..at + len].to_vec());
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
            .map(|&(j, _)| {
                align_up(jobs[j].1.input_len, align) + align_up(jobs[j].1.output_len, align)
            })
            .sum();
        let mut at = self.realigned.at_least(stream, moved_bytes)?;
        for &(j, _) in &moved {
            let job = &mut jobs[j].1;
            copy_on_device(stream, at, job.input, job.input_len)?;
            job.input = at;
            at += align_up(job.input_len, align) as u64;
            job.output = at;
            at += align_up(job.output_len, align) as u64;
        }
        let list: Vec<Job> = jobs.iter().map(|&(_, j)| j).collect();
        let owners: Vec<usize> = jobs.iter().map(|&(i, _)| i).collect();
        let launched = self.space.launch_decompress(how.lib, codec, stream, &list);
        if launched.is_ok() {
            for &(j, output) in &moved {
                copy_on_device(stream, output, jobs[j].1.output, jobs[j].1.output_len)?;
            }
            for (i, c) in batch.iter().enumerate() {
                if direct[i].is_some() {
                    continue;
                }
                for copy in placement(&c.part, &c.offset, chunk, region, es as usize) {
                    copy_strided_on_device(stream, dest, bases[i], &copy)?;
                }
            }
        }
        // The decoded chunks to check go to the host behind their decoding, a buffer's worth now
        // (the rest when the slot is finished).
        let queued = if launched.is_ok() {
            sums.len().min(sums_per_buffer(chunk_bytes))
        } else {
            0
        };
        self.queue_sums(stream, &sums[..queued], chunk_bytes)?;
        self.pending = Some(Pending {
            batch: b,
            offsets: batch.iter().map(|c| c.offset.clone()).collect(),
            jobs: list,
            owners,
            launched,
            sums,
            queued,
        });
        Ok(())
    }
}

/// Pinned bytes a slot takes for the decoded chunks it checks (at least one chunk): a batch's
/// chunks past them are copied and checked a buffer's worth at a time when it is finished.
const SUMS_BYTES: usize = 64 << 20;

/// Decoded chunks of `chunk_bytes` a slot's pinned buffer holds for checking.
fn sums_per_buffer(chunk_bytes: usize) -> usize {
    (SUMS_BYTES / chunk_bytes.max(1)).max(1)
}
