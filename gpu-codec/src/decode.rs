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
//! the batch's chunks, not one of them.

use crate::device::{align_up, DeviceFailure};
use crate::nvcomp::{self, CallSpace, Job, Launched, Outcome};
use cudarc::driver::{sys, CudaStream};
use h5gds_chunk_codec::format::{self, Piece};
use h5gds_chunk_codec::ChunkIndex;
use h5gds_route::route::GpuCodec;
use h5gds_route::select::{chunks_touching, Block};
use h5gds_runtime::cuda::call;
use h5gds_runtime::pinned;
use h5gds_runtime::stream::{
    context_usable, copy_on_device, copy_strided_on_device, copy_to_device, peek, synchronize,
    Scratch, Strided,
};
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
    /// Whether decoded deflate chunks are checked against their Adler-32 on the host.
    pub verify: bool,
    /// Where the stored chunks are read by the host's threads rather than through the caller's
    /// [`ChunkSource::read_chunk`] (the `gds` driver, one chunk per call).
    pub host_reads: Option<HostReads>,
}

/// Stored chunks read from the file by the host's threads, at their addresses, into pinned
/// memory, and copied up a batch at a time. For files the driver would stage anyway (no
/// GPUDirect path): the bytes take the same way, without one HDF5 call and one driver transfer
/// per chunk.
pub struct HostReads {
    /// The file, open read-only by HDF5 (so it holds no newer bytes of the chunks), whose
    /// offsets are HDF5's addresses.
    pub file: std::fs::File,
    /// Reading threads.
    pub threads: usize,
    /// Why the driver would stage the chunks, for the log.
    pub why: String,
}

impl HostReads {
    /// How the stored chunks travel, in words for a log line ("chunks move compressed ...").
    pub fn route(reads: &Option<HostReads>) -> String {
        match reads {
            Some(r) => format!(
                "from the file into pinned host memory on {} threads and up to device memory a \
                 batch at a time ({})",
                r.threads, r.why
            ),
            None => "from the file straight into device memory through the gds driver".into(),
        }
    }
}

/// Decodes the allocated chunks `present` (from [`split`]) on the GPU into `dest`, device
/// memory holding `region` (file coordinates) in row-major order, after the work queued on
/// `stream` (the caller's; everything is done when this returns).
///
/// A pipeline of two slots (one for a read of one batch), each with a stream of its own and device
/// memory reused from batch to batch: while the GPU decodes one slot's batch, this thread reads
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
    // A read of one batch (most small reads) makes one stream, not two.
    let mut slots = (0..batches.len().min(2))
        .map(|_| Ok(Slot::new(new_stream()?)))
        .collect::<Result<Vec<Slot>, S::Error>>()?;
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
            slot.finish(source, &shape)?;
            let launched = slot.launch(
                source,
                &shape,
                &mut present[range.clone()],
                &direct[range.clone()],
            );
            if let Err(e) = launched {
                // The batch before holds earlier chunks: its error comes first.
                slots[(b + 1) % n].finish(source, &shape)?;
                return Err(e);
            }
        }
        for b in batches.len().saturating_sub(2)..batches.len() {
            slots[b % n].finish(source, &shape)?;
        }
        Ok(())
    };
    let outcome = run();
    if outcome.is_err() {
        // Nothing may still be running on the slots' buffers when they are freed.
        for slot in &slots {
            let _ = synchronize(&slot.stream);
        }
    }
    outcome
}

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

/// One slot of the pipeline: its stream, the device memory its batches reuse, and its batch
/// launched and not yet checked.
struct Slot {
    stream: Arc<CudaStream>,
    /// The stored chunks.
    compressed: Scratch,
    /// Chunks not decoded in place.
    decoded: Scratch,
    /// Each chunk's framing bytes.
    heads: Scratch,
    /// Jobs realigned for nvCOMP.
    realigned: Scratch,
    /// The stored chunks in host memory, where the host's threads read them.
    host: Option<pinned::Taken>,
    space: CallSpace,
    pending: Option<Pending>,
}

/// A batch launched on a slot: what checking it needs.
struct Pending {
    offsets: Vec<Vec<u64>>,
    jobs: Vec<Job>,
    owners: Vec<usize>,
    launched: Result<Launched, DeviceFailure>,
    /// Deflate chunks to check against their Adler-32: (chunk, decoded bytes, stored sum).
    sums: Vec<(usize, sys::CUdeviceptr, u32)>,
}

impl Slot {
    fn new(stream: Arc<CudaStream>) -> Self {
        Self {
            stream,
            compressed: Scratch::default(),
            decoded: Scratch::default(),
            heads: Scratch::default(),
            realigned: Scratch::default(),
            host: None,
            space: CallSpace::default(),
            pending: None,
        }
    }

    /// Waits for the slot's batch, if one is launched, and checks it: every job decoded to its
    /// size (else the chunk at fault is named, `judge`), and deflate chunks' sums if asked.
    fn finish<S: ChunkSource>(&mut self, source: &S, shape: &Shape) -> Result<(), S::Error> {
        let Some(p) = self.pending.take() else {
            return Ok(());
        };
        let stream = &self.stream;
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
        for &(i, at, expected) in &p.sums {
            let bytes = peek(stream, at, shape.chunk_bytes)?;
            let actual = adler2::adler32_slice(&bytes);
            if actual != expected {
                return Err(source.corrupt(offsets[i], format!("its decoded bytes have Adler-32 {actual:#010x}, but the stream stores {expected:#010x}; the file is corrupt")));
            }
        }
        synchronize(stream)?;
        Ok(())
    }

    /// Reads the stored bytes of `batch` (whose chunks decode in place where `direct` says)
    /// into the slot's memory and launches their decoding and placement on the slot's stream,
    /// without waiting for it. The slot must be finished.
    fn launch<S: ChunkSource>(
        &mut self,
        source: &S,
        shape: &Shape,
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
        let verify = how.verify && codec == GpuCodec::Deflate;
        let stream = &self.stream;
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
                if self.host.as_ref().is_none_or(|h| h.len() < cursor) {
                    self.host = Some(pinned::Taken::new(cursor));
                }
                let host = self.host.as_mut().expect("taken above");
                // SAFETY: the buffer holds at least `cursor` bytes, and nothing reads or
                // writes it now (the slot is finished: its copy up has completed).
                let bytes = unsafe { std::slice::from_raw_parts_mut(host.as_mut_ptr(), cursor) };
                read_stored(reads, batch, bytes).map_err(|(i, why)| bad(&batch[i].offset, why))?;
                // SAFETY: pinned memory (or pageable, which CUDA copies before returning) that
                // stays untouched until the slot is finished, after the copy.
                unsafe { copy_to_device(stream, comp, bytes.as_ptr(), cursor) }?;
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
            let pieces: Vec<Piece> = match codec {
                GpuCodec::Deflate => {
                    let head = &framing[i * HEAD..i * HEAD + c.size.min(2)];
                    let pieces = format::zlib_pieces(head, c.size, chunk_bytes)
                        .map_err(|r| bad(&c.offset, r))?;
                    if verify {
                        let tail = &framing[i * HEAD + HEAD / 2..i * HEAD + HEAD / 2 + 4];
                        let sum = format::adler_trailer(&tail.try_into().expect("4 bytes"));
                        sums.push((i, out, sum));
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
        self.pending = Some(Pending {
            offsets: batch.iter().map(|c| c.offset.clone()).collect(),
            jobs: list,
            owners,
            launched,
            sums,
        });
        Ok(())
    }
}

/// The copies that place `part` (file coordinates) out of a decoded chunk at `origin` of shape
/// `chunk` into an array holding `region`, elements of `item` bytes, offsets in bytes from the
/// chunk's and the array's first byte. Trailing dimensions the part spans whole in both merge
/// into one row; the next two dimensions out are one copy's rows and slices, so a chunk of rank
/// 3 or less is one copy (one CUDA call), not one per row; dimensions further out repeat it.
pub fn placement(
    part: &Block,
    origin: &[u64],
    chunk: &[u64],
    region: &Block,
    item: usize,
) -> Vec<Strided> {
    let rank = part.count.len();
    if rank == 0 {
        return vec![Strided::run(0, 0, item)];
    }
    let strides = |shape: &[u64]| {
        let mut s = vec![1u64; shape.len()];
        for d in (0..shape.len().saturating_sub(1)).rev() {
            s[d] = s[d + 1] * shape[d + 1];
        }
        s
    };
    let (cs, rs) = (strides(chunk), strides(&region.count));
    // `k` is the first dimension of a row.
    let mut k = rank - 1;
    while k > 0 && part.count[k] == chunk[k] && part.count[k] == region.count[k] {
        k -= 1;
    }
    let es = item as u64;
    let width = (part.count[k..].iter().product::<u64>() * es) as usize;
    let mut copy = Strided::run(0, 0, width);
    if k >= 1 {
        copy.height = part.count[k - 1] as usize;
        copy.src_pitch = (cs[k - 1] * es) as usize;
        copy.dst_pitch = (rs[k - 1] * es) as usize;
        (copy.src_rows, copy.dst_rows) = (copy.height, copy.height);
    }
    if k >= 2 {
        copy.depth = part.count[k - 2] as usize;
        copy.src_rows = chunk[k - 1] as usize;
        copy.dst_rows = region.count[k - 1] as usize;
    }
    // Dimensions outside the copy's own, each combination one copy.
    let outer = k.saturating_sub(2);
    let repeats: u64 = part.count[..outer].iter().product();
    let mut copies = Vec::with_capacity(repeats as usize);
    let mut index = vec![0u64; outer];
    for _ in 0..repeats {
        let (mut src, mut dst) = (0u64, 0u64);
        for d in 0..rank {
            let at = part.start[d] + if d < outer { index[d] } else { 0 };
            src += (at - origin[d]) * cs[d];
            dst += (at - region.start[d]) * rs[d];
        }
        copies.push(Strided {
            src: src * es,
            dst: dst * es,
            ..copy
        });
        for d in (0..outer).rev() {
            index[d] += 1;
            if index[d] < part.count[d] {
                break;
            }
            index[d] = 0;
        }
    }
    copies
}

/// Reads the stored bytes of every chunk of `batch` from the file into `bytes` at the chunk's
/// slot, on the host's threads. On failure, the first chunk (in batch order) that could not be
/// read, and why.
fn read_stored(
    reads: &HostReads,
    batch: &[Stored],
    bytes: &mut [u8],
) -> Result<(), (usize, String)> {
    // Each chunk's bytes, apart: the slots do not overlap.
    let mut parts: Vec<(usize, &Stored, &mut [u8])> = Vec::with_capacity(batch.len());
    let mut rest = bytes;
    let mut at = 0usize;
    for (i, c) in batch.iter().enumerate() {
        let (_, tail) = std::mem::take(&mut rest).split_at_mut(c.slot - at);
        let (mine, tail) = tail.split_at_mut(c.size);
        parts.push((i, c, mine));
        rest = tail;
        at = c.slot + c.size;
    }
    let read = |(i, c, buf): &mut (usize, &Stored, &mut [u8])| {
        h5gds_chunk_codec::read_stored_at(&reads.file, c.address, buf).map_err(|why| (*i, why))
    };
    let pool = (reads.threads > 1 && parts.len() > 1)
        .then(|| h5gds_runtime::pool::for_waiting_caller(reads.threads))
        .flatten();
    let Some(pool) = pool else {
        return parts.iter_mut().try_for_each(read);
    };
    // A few chunks per task, so that small chunks do not cost a task each.
    let per_task = parts.len().div_ceil(4 * reads.threads).max(1);
    let failures: std::sync::Mutex<Vec<(usize, String)>> = std::sync::Mutex::new(Vec::new());
    pool.in_place_scope(|scope| {
        for group in parts.chunks_mut(per_task) {
            let failures = &failures;
            scope.spawn(move |_| {
                if let Err(failure) = group.iter_mut().try_for_each(read) {
                    failures
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(failure);
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap_or_else(|e| e.into_inner());
    match failures.into_iter().min_by_key(|f| f.0) {
        Some(first) => Err(first),
        None => Ok(()),
    }
}

/// Why a batch's jobs did not all decode: the chunk to name (its index in the batch) and why,
/// or a device failure no one chunk can be blamed for.
#[derive(Debug, PartialEq, Eq)]
pub enum Failed {
    Chunk(usize, String),
    Device(DeviceFailure),
}

/// The jobs a batched call's `outcomes` point at: those nvCOMP marked failed; if none is, those
/// whose decoded size is not the `jobs`' output size (nvCOMP may leave a failed batch's sizes
/// unwritten, and their statuses then read as the zero fill, `nvcompSuccess`).
pub fn suspect_jobs(outcomes: &[Outcome], jobs: &[Job]) -> Vec<usize> {
    let failed: Vec<usize> = (0..outcomes.len())
        .filter(|&k| outcomes[k].status != nvcomp_sys::nvcompStatus_t::nvcompSuccess)
        .collect();
    if !failed.is_empty() {
        return failed;
    }
    (0..outcomes.len())
        .filter(|&k| outcomes[k].written != jobs[k].output_len)
        .collect()
}

/// What nvCOMP said about one suspect job.
fn job_failure(outcome: &Outcome, job: &Job) -> String {
    if outcome.status != nvcomp_sys::nvcompStatus_t::nvcompSuccess {
        format!(
            "nvCOMP could not decode it ({})",
            nvcomp::status_text(outcome.status)
        )
    } else {
        format!(
            "it decoded to {} bytes, not the {} expected",
            outcome.written, job.output_len
        )
    }
}

/// The chunks at `offsets` as a list for messages ("[0], [25], [50]"), at most 8 of them.
fn chunk_list(offsets: &[&[u64]]) -> String {
    const SHOWN: usize = 8;
    let mut text: Vec<String> = offsets
        .iter()
        .take(SHOWN)
        .map(|o| format!("{o:?}"))
        .collect();
    if offsets.len() > SHOWN {
        text.push(format!("and {} more", offsets.len() - SHOWN));
    }
    text.join(", ")
}

/// The failure of a call after which the CUDA context is unusable, naming the chunks it held.
fn sticky(e: &DeviceFailure, offsets: &[&[u64]]) -> Failed {
    let what = if offsets.len() == 1 {
        format!("the chunk at {}", chunk_list(offsets))
    } else {
        format!("one of the chunks at {}", chunk_list(offsets))
    };
    Failed::Device(DeviceFailure::new(
        format!("nvCOMP: decoding {what}"),
        format!(
            "{e}; the CUDA context can no longer be used (a sticky error), so the chunk at \
             fault cannot be found by decoding each alone: {what} may be corrupt"
        ),
    ))
}

/// Judges a batched call over `jobs` (`first`: its outcomes, or its failure); job k belongs to
/// the batch's chunk `owners[k]`, whose first element is `offsets[owners[k]]`. When the batch
/// did not decode whole, names the chunk at fault (see the module's documentation): a single
/// suspect at once; several suspects, or a failed call, after decoding each suspect chunk again
/// in a call of its own on `stream` (only after a failure, so the good path pays nothing; the
/// jobs' buffers must still hold their input). The chunks that still fail are named, the first
/// in chunk order; if none does, the batch's failure is reported on its first suspect, saying
/// that each chunk decodes alone.
pub fn judge(
    lib: &NvcompLib,
    codec: GpuCodec,
    stream: &Arc<CudaStream>,
    first: Result<Vec<Outcome>, DeviceFailure>,
    jobs: &[Job],
    owners: &[usize],
    offsets: &[&[u64]],
) -> Result<(), Failed> {
    let chunks_of = |ks: &mut dyn Iterator<Item = usize>| {
        let mut chunks: Vec<usize> = ks.map(|k| owners[k]).collect();
        chunks.sort_unstable();
        chunks.dedup();
        chunks
    };
    let in_batch = chunks_of(&mut (0..jobs.len()));
    // The batch's own word on its first suspect: the failure of the call, or of a job.
    let said: String;
    let suspects = match &first {
        Ok(outcomes) => {
            let ks = suspect_jobs(outcomes, jobs);
            let Some(&k) = ks.first() else {
                return Ok(());
            };
            let why = job_failure(&outcomes[k], &jobs[k]);
            let chunks = chunks_of(&mut ks.iter().copied());
            if chunks.len() == 1 {
                return Err(Failed::Chunk(
                    owners[k],
                    format!("{why}; the file may be corrupt"),
                ));
            }
            said = format!("in the batch holding it, {why}");
            chunks
        }
        Err(e) => {
            let held: Vec<&[u64]> = in_batch.iter().map(|&c| offsets[c]).collect();
            if !context_usable(stream) {
                return Err(sticky(e, &held));
            }
            said = format!("the batch holding it failed to decode on the GPU: {e}");
            if in_batch.len() == 1 {
                return Err(Failed::Chunk(in_batch[0], said));
            }
            in_batch.clone()
        }
    };
    // Each suspect chunk in a call of its own: whatever that call reports is about that chunk.
    let mut failing: Vec<(usize, String)> = Vec::new();
    for &c in &suspects {
        let alone: Vec<Job> = (0..jobs.len())
            .filter(|&k| owners[k] == c)
            .map(|k| jobs[k])
            .collect();
        match nvcomp::decompress(lib, codec, stream, &alone) {
            Ok(outcomes) => {
                if let Some(&k) = suspect_jobs(&outcomes, &alone).first() {
                    let why = job_failure(&outcomes[k], &alone[k]);
                    failing.push((c, format!("{why}; the file may be corrupt")));
                }
            }
            Err(e) => {
                if !context_usable(stream) {
                    return Err(sticky(&e, &[offsets[c]]));
                }
                failing.push((
                    c,
                    format!(
                        "it failed to decode on the GPU in a call of its own: {e}; the file may \
                         be corrupt"
                    ),
                ));
            }
        }
    }
    if let Some(((c, why), others)) = failing.split_first() {
        let mut why = why.clone();
        if !others.is_empty() {
            let rest: Vec<&[u64]> = others.iter().map(|&(o, _)| offsets[o]).collect();
            why.push_str(&format!(
                " (nor do the chunks at {} of its batch)",
                chunk_list(&rest)
            ));
        }
        return Err(Failed::Chunk(*c, why));
    }
    // Every suspect decodes alone: the batch's failure is no one chunk's.
    let all: Vec<&[u64]> = suspects.iter().map(|&c| offsets[c]).collect();
    Err(Failed::Chunk(
        suspects[0],
        format!(
            "{said}; yet each of the chunks at {} decodes in a call of its own, so the device \
             rather than the file may be at fault",
            chunk_list(&all)
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(output_len: usize) -> Job {
        Job {
            input: 0,
            input_len: 1,
            output: 0,
            output_len,
        }
    }

    fn outcome(status: nvcomp_sys::nvcompStatus_t, written: usize) -> Outcome {
        Outcome { status, written }
    }

    #[test]
    fn failed_statuses_are_suspected_before_wrong_sizes() {
        use nvcomp_sys::nvcompStatus_t as S;
        let jobs = [job(100); 4];
        // Issue 20: job 1's status failed, no size written, the other statuses the zero fill.
        let zero = outcome(S::nvcompSuccess, 0);
        let outcomes = [zero, outcome(S::nvcompErrorCannotDecompress, 0), zero, zero];
        assert_eq!(suspect_jobs(&outcomes, &jobs), [1]);
        // Every status failed: every job.
        let failed = [outcome(S::nvcompErrorCannotDecompress, 0); 4];
        assert_eq!(suspect_jobs(&failed, &jobs), [0, 1, 2, 3]);
        // No status failed: the wrong sizes.
        let sizes = [
            outcome(S::nvcompSuccess, 100),
            outcome(S::nvcompSuccess, 40),
            outcome(S::nvcompSuccess, 100),
            zero,
        ];
        assert_eq!(suspect_jobs(&sizes, &jobs), [1, 3]);
        let good = [outcome(S::nvcompSuccess, 100); 4];
        assert!(suspect_jobs(&good, &jobs).is_empty());
    }

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

    #[test]
    fn chunk_lists_are_bounded() {
        let offsets: Vec<Vec<u64>> = (0..10).map(|k| vec![k * 25]).collect();
        let refs: Vec<&[u64]> = offsets.iter().map(|o| o.as_slice()).collect();
        assert_eq!(chunk_list(&refs[..3]), "[0], [25], [50]");
        assert_eq!(
            chunk_list(&refs),
            "[0], [25], [50], [75], [100], [125], [150], [175], and 2 more"
        );
    }

    fn block(start: &[u64], count: &[u64]) -> Block {
        Block {
            start: start.to_vec(),
            count: count.to_vec(),
        }
    }

    /// Every row `placement` copies, in elements (items of one byte): (source, destination,
    /// length).
    fn rows(part: &Block, origin: &[u64], chunk: &[u64], region: &Block) -> Vec<(u64, u64, u64)> {
        placement(part, origin, chunk, region, 1)
            .iter()
            .flat_map(|c| {
                c.rows()
                    .map(|(s, d, n)| (s, d, n as u64))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    #[test]
    fn whole_rows_merge_into_one_run_and_edges_are_clipped() {
        // A 2x4 chunk at (2, 0) of a 5x4 region: rows span the region, one run of 8.
        let region = block(&[0, 0], &[5, 4]);
        let copies = placement(&block(&[2, 0], &[2, 4]), &[2, 0], &[2, 4], &region, 4);
        assert_eq!(copies, [Strided::run(0, 32, 32)]);
        // The edge chunk at (4, 0) holds one row of the region (the chunk has two).
        let copies = placement(&block(&[4, 0], &[1, 4]), &[4, 0], &[2, 4], &region, 1);
        assert_eq!(copies, [Strided::run(0, 16, 4)]);
        // A 2x2 chunk at (2, 2) of a 5x5 region starting at (1, 1): clipped rows of 2, in one
        // copy of two rows (pitch 2 in the chunk, 5 in the region).
        let region = block(&[1, 1], &[5, 5]);
        let part = block(&[2, 2], &[2, 2]);
        assert_eq!(
            rows(&part, &[2, 2], &[2, 2], &region),
            [(0, 6, 2), (2, 11, 2)]
        );
        let copies = placement(&part, &[2, 2], &[2, 2], &region, 8);
        assert_eq!(copies.len(), 1);
        let c = copies[0];
        assert_eq!(
            (
                c.src,
                c.dst,
                c.width,
                c.height,
                c.depth,
                c.src_pitch,
                c.dst_pitch
            ),
            (0, 48, 16, 2, 1, 16, 40)
        );
        // Part of a chunk: elements (3, 3..5) of chunk (2, 2)-(4, 4) in a region from (0, 0).
        let region = block(&[0, 0], &[4, 5]);
        assert_eq!(
            rows(&block(&[3, 3], &[1, 1]), &[2, 2], &[2, 2], &region),
            [(3, 18, 1)]
        );
    }

    #[test]
    fn three_dimensional_chunks_place_in_one_copy_and_higher_ranks_repeat_it() {
        let region = block(&[0, 0, 0], &[3, 2, 4]);
        // Chunk 2x2x4 at (2, 0, 0), edge: one plane of 2x4 is inside.
        let copies = placement(
            &block(&[2, 0, 0], &[1, 2, 4]),
            &[2, 0, 0],
            &[2, 2, 4],
            &region,
            1,
        );
        assert_eq!(copies, [Strided::run(0, 16, 8)]);
        // Chunk 2x2x2 at (0, 0, 2): runs of 2 per row, rows of 4 in the region: one copy of two
        // slices of two rows.
        let part = block(&[0, 0, 2], &[2, 2, 2]);
        assert_eq!(
            rows(&part, &[0, 0, 2], &[2, 2, 2], &region),
            [(0, 2, 2), (2, 6, 2), (4, 10, 2), (6, 14, 2)]
        );
        assert_eq!(
            placement(&part, &[0, 0, 2], &[2, 2, 2], &region, 1).len(),
            1
        );
        // Rank 4, a 2x2x2x2 chunk at (0, 0, 0, 1) of a 2x2x2x3 region: one 3-D copy per index of
        // the first dimension, the same rows as element by element.
        let region = block(&[0, 0, 0, 0], &[2, 2, 2, 3]);
        let part = block(&[0, 0, 0, 1], &[2, 2, 2, 2]);
        let copies = placement(&part, &[0, 0, 0, 1], &[2, 2, 2, 2], &region, 1);
        assert_eq!(copies.len(), 2);
        let mut expected = Vec::new();
        for a in 0..2u64 {
            for b in 0..2u64 {
                for c in 0..2u64 {
                    expected.push((a * 8 + b * 4 + c * 2, a * 12 + b * 6 + c * 3 + 1, 2));
                }
            }
        }
        assert_eq!(rows(&part, &[0, 0, 0, 1], &[2, 2, 2, 2], &region), expected);
        // Scalars: one element.
        assert_eq!(
            placement(&block(&[], &[]), &[], &[], &block(&[], &[]), 4),
            [Strided::run(0, 0, 4)]
        );
    }
}
