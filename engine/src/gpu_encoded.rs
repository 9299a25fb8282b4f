//! Compressed chunks encoded on the GPU with nvCOMP, for both faces (the policy's GPU side,
//! `crate::policy::write`): a device array cut into chunks on the device, nvCOMP encoding them in
//! batches, each encoded chunk framed as its HDF5 filter frames it (zlib's header and Adler-32 for
//! deflate, hdf5plugin's LZ4 header, a plain Zstandard frame) and written raw (`H5Dwrite_chunk`)
//! from device memory, which the `gds` driver moves to the file. h5py (with hdf5plugin for
//! Zstandard and LZ4) and any HDF5 program with the filter read the file.
//!
//! Deflate's Adler-32 covers the decoded bytes and nvCOMP does not compute it: each chunk is
//! copied to the host for it (the only host copy on this path, and only for deflate).

use crate::chunks::Face;
use crate::encoded::{on_the_gpu, Target};
use crate::{Error, ErrorKind};
use h5gds_chunk_codec::format;
use h5gds_gpu_codec::decode::placement;
use h5gds_gpu_codec::device::align_up;
use h5gds_gpu_codec::nvcomp::{self, Job};
use h5gds_gpu_codec::DeviceFailure;
use h5gds_route::route::GpuCodec;
use h5gds_route::select::{chunks_touching, Block};
use h5gds_runtime::cuda::{call, CUdeviceptr, CudaError};
use h5gds_runtime::stream::{copy_from_device, copy_on_device, copy_strided_on_device};
use h5gds_runtime::stream::{copy_to_device, scratch, synchronize, zeroed, CudaStream};
use nvcomp_sys::{nvcompStatus_t, NvcompLib};
use std::sync::Arc;

/// Encoded bytes plus input a batch may hold in device scratch memory.
const BATCH_BYTES: usize = 256 << 20;

/// zlib's header for Deflate with a 32 KiB window, no dictionary, "fastest" level (nvCOMP's
/// default algorithm); 0x7801 is a multiple of 31, as RFC 1950 requires.
const ZLIB_HEADER: [u8; 2] = [0x78, 0x01];

/// A device array to encode: the address of its elements (row-major, the dataset's shape) and a
/// stream of its context, on which the producer's work has finished.
pub struct DeviceArray<'a> {
    pub address: CUdeviceptr,
    pub stream: &'a Arc<CudaStream>,
}

/// Encodes every chunk (of `chunk` elements of `element_size` bytes) of `array` (the dataset's
/// `shape`) with `codec` and writes it into `target`; returns the number of chunks written. Edge
/// chunks are stored whole, the part outside the array zero. On an error nothing more is written.
pub fn write<F: Face>(
    target: &Target<'_, F>,
    lib: &NvcompLib,
    codec: GpuCodec,
    array: &DeviceArray<'_>,
    (shape, chunk): (&[u64], &[u64]),
    element_size: usize,
) -> Result<usize, F::Error> {
    let device = |e: Failure| target.refuse(ErrorKind::Device, on_the_gpu(e.0));
    let chunk_bytes = chunk.iter().product::<u64>() as usize * element_size;
    let encoder =
        Encoder::new(lib, codec, array.stream, chunk_bytes, element_size).map_err(device)?;
    let chunks = chunks_touching(&Block::whole(shape), chunk);
    let per_batch = (BATCH_BYTES / (encoder.in_stride + encoder.out_stride)).max(1);
    for batch in chunks.chunks(per_batch) {
        encoder.batch(target, batch, (shape, chunk), array.address)?;
    }
    Ok(chunks.len())
}

/// A failure of CUDA or nvCOMP, in words.
struct Failure(String);

impl From<CudaError> for Failure {
    fn from(e: CudaError) -> Failure {
        Failure(e.to_string())
    }
}

impl From<DeviceFailure> for Failure {
    fn from(e: DeviceFailure) -> Failure {
        Failure(e.to_string())
    }
}

/// The sizes of one encoding run.
struct Encoder<'a> {
    lib: &'a NvcompLib,
    codec: GpuCodec,
    stream: &'a Arc<CudaStream>,
    chunk_bytes: usize,
    element_size: usize,
    align: usize,
    /// Bytes per chunk of the input (gathered chunks) and output (framed encodings) buffers.
    in_stride: usize,
    out_stride: usize,
}

impl<'a> Encoder<'a> {
    fn new(
        lib: &'a NvcompLib,
        codec: GpuCodec,
        stream: &'a Arc<CudaStream>,
        chunk_bytes: usize,
        element_size: usize,
    ) -> Result<Encoder<'a>, Failure> {
        let align = nvcomp::compress_alignment(lib, codec)?;
        let max = nvcomp::max_encoded(lib, codec, chunk_bytes)?.max(chunk_bytes);
        let framing = format::payload_offset(codec) + 4;
        Ok(Encoder {
            lib,
            codec,
            stream,
            chunk_bytes,
            element_size,
            align,
            in_stride: align_up(chunk_bytes, align),
            out_stride: align_up(framing + max + align, align),
        })
    }

    /// Gathers the chunks of `batch` ((first element, part inside the array)) from the array at
    /// `src` (of `shape`, in chunks of `chunk`), encodes them in one nvCOMP call, frames each and
    /// writes it into `target`.
    fn batch<F: Face>(
        &self,
        target: &Target<'_, F>,
        batch: &[(Vec<u64>, Block)],
        (shape, chunk): (&[u64], &[u64]),
        src: CUdeviceptr,
    ) -> Result<(), F::Error> {
        let failed = |e: Failure| target.refuse(ErrorKind::Device, on_the_gpu(e.0));
        let stream = self.stream;
        let n = batch.len();
        // Edge chunks are stored whole; the part outside the array is zeros.
        let (_input, inp) = zeroed(stream, self.in_stride * n).map_err(|e| failed(e.into()))?;
        let (_output, out) = scratch(stream, self.out_stride * n).map_err(|e| failed(e.into()))?;
        let region = Block::whole(shape);
        let prefix = format::payload_offset(self.codec);
        let mut jobs = Vec::with_capacity(n);
        for (i, (offset, part)) in batch.iter().enumerate() {
            let chunk_at = inp + (i * self.in_stride) as u64;
            // The placement of a decoded chunk into the array, the other way round.
            for copy in placement(part, offset, chunk, &region, self.element_size) {
                copy_strided_on_device(stream, chunk_at, src, &copy.reversed())
                    .map_err(|e| failed(e.into()))?;
            }
            let slot = out + (i * self.out_stride) as u64;
            let payload = align_up(slot as usize + prefix, self.align) as u64;
            jobs.push(Job {
                input: chunk_at,
                input_len: self.chunk_bytes,
                output: payload,
                output_len: 0,
            });
        }
        synchronize(stream).map_err(|e| failed(e.into()))?;
        let outcomes =
            nvcomp::compress(self.lib, self.codec, stream, &jobs).map_err(|e| failed(e.into()))?;
        for (((offset, _), job), outcome) in batch.iter().zip(&jobs).zip(&outcomes) {
            let at = |e: Failure| {
                let detail = format!("could not be encoded on the GPU: {}", e.0);
                let failed = Error::new(ErrorKind::Device, detail);
                (target.refused)(failed.in_dataset(target.name).at_chunk(offset))
            };
            if outcome.status != nvcompStatus_t::nvcompSuccess {
                let status = nvcomp::status_text(outcome.status);
                return Err(at(Failure(format!("nvCOMP reported {status}"))));
            }
            let (start, len) = self.frame(job, outcome.written).map_err(at)?;
            // SAFETY: the framed chunk lies inside the output buffer, alive here; the gds driver
            // moves the bytes from device memory to the file.
            unsafe { target.write_chunk(offset, start as *const _, len)? };
        }
        call("waiting for the device", || stream.context().synchronize())
            .map_err(|e| failed(e.into()))
    }

    /// Frames one encoded chunk as its filter stores it, in place around the payload; returns
    /// the stored chunk's device address and length.
    fn frame(&self, job: &Job, encoded: usize) -> Result<(CUdeviceptr, usize), Failure> {
        let stream = self.stream;
        let put = |at: CUdeviceptr, bytes: &[u8]| -> Result<(), Failure> {
            // SAFETY: `bytes` outlives the synchronisation; `at` lies inside the output slot.
            unsafe { copy_to_device(stream, at, bytes.as_ptr(), bytes.len())? };
            Ok(synchronize(stream)?)
        };
        let payload = job.output;
        match self.codec {
            GpuCodec::Zstd => Ok((payload, encoded)),
            GpuCodec::Deflate => {
                let mut chunk = vec![0u8; self.chunk_bytes];
                // SAFETY: `chunk` holds chunk_bytes and outlives the synchronisation.
                unsafe { copy_from_device(stream, chunk.as_mut_ptr(), job.input, chunk.len())? };
                synchronize(stream)?;
                let adler = adler2::adler32_slice(&chunk).to_be_bytes();
                put(payload - 2, &ZLIB_HEADER)?;
                put(payload + encoded as u64, &adler)?;
                Ok((payload - 2, 2 + encoded + 4))
            }
            GpuCodec::Lz4 => {
                // Stored as is where LZ4 did not help, as the filter does (a block whose stored
                // size equals its decoded size is read as raw bytes).
                let stored = if encoded >= self.chunk_bytes {
                    copy_on_device(stream, payload, job.input, self.chunk_bytes)?;
                    self.chunk_bytes
                } else {
                    encoded
                };
                let mut header = (self.chunk_bytes as u64).to_be_bytes().to_vec();
                header.extend((self.chunk_bytes as u32).to_be_bytes());
                header.extend((stored as u32).to_be_bytes());
                put(payload - 16, &header)?;
                Ok((payload - 16, 16 + stored))
            }
        }
    }
}
