//! Compressed datasets written straight from GPU memory: the array is cut into chunks on the
//! device, nvCOMP encodes them in batches, each encoded chunk is framed as its HDF5 filter
//! frames it (`codec`: zlib header and Adler-32 for deflate, hdf5plugin's LZ4 header, a plain
//! Zstandard frame) and written raw (`H5Dwrite_chunk`) from device memory through the `gds`
//! driver. The dataset's pipeline names the filter (optional, as h5py sets it), so h5py (with
//! hdf5plugin for Zstandard and LZ4) and any HDF5 program with the filter read the file.
//!
//! Deflate's Adler-32 covers the decoded bytes and nvCOMP does not compute it: each chunk is
//! copied to the host for it (the only host copy on this path, and only for deflate).
//! `route::gpu_encode` decides when this path is taken; without it, the array is copied to the
//! host and h5gds encodes its chunks on all host cores while this thread writes them raw in
//! chunk order (`h5gds_engine::encoded`, as the Python package's compressed `to_file`).

use crate::chunks::DatasetFace;
use crate::device::DeviceArray;
use crate::driver::Driver;
use crate::element::{descriptor_of, Element};
use crate::error::no_panic;
use crate::error::{Error, Result};
use crate::file::{check_dataset_name, create_dataset, OpenDataset};
use crate::hdf5_raw::{linked_hdf5, NewLayout};
use crate::options::Settings;
use crate::route::{driver_blocker, gpu_encode, GpuCodec, FILTER_DEFLATE, FILTER_LZ4, FILTER_ZSTD};
use crate::select::{chunks_touching, Block};
use cudarc::driver::{sys, CudaStream, DevicePtr};
use h5gds_chunk_codec::{format, Filter};
use h5gds_engine::chunks::{write_stored, Face};
use h5gds_engine::encoded::{HostEncoder, Target};
use h5gds_gpu_codec::decode::placement;
use h5gds_gpu_codec::device::align_up;
use h5gds_gpu_codec::nvcomp::{self, Job};
use h5gds_runtime::cuda::call;
use h5gds_runtime::stream::{copy_from_device, copy_to_device, synchronize};
use h5gds_runtime::stream::{copy_on_device, copy_strided_on_device, scratch};
use hdf5::types::TypeDescriptor;
use std::path::Path;
use std::sync::Arc;

/// The codec [`to_file_compressed`] encodes chunks with, and the HDF5 filter that names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// HDF5's deflate filter (1), h5py's `compression="gzip"`.
    Deflate,
    /// The Zstandard filter (32015), hdf5plugin's `Zstd`.
    Zstd,
    /// The LZ4 filter (32004), hdf5plugin's `LZ4`; chunks of at most 16 MiB on the GPU.
    Lz4,
}

impl Compression {
    /// The GPU codec, and the filter id and its client data as HDF5 and hdf5plugin write them:
    /// deflate level 1 (nvCOMP's default is its fast algorithm), Zstandard level 3 (hdf5plugin's
    /// default; the value only informs), LZ4 block size 0 (the filter's default; the header has
    /// the real one).
    fn codec(self) -> (GpuCodec, i32, &'static [u32]) {
        match self {
            Compression::Deflate => (GpuCodec::Deflate, FILTER_DEFLATE, &[1]),
            Compression::Zstd => (GpuCodec::Zstd, FILTER_ZSTD, &[3]),
            Compression::Lz4 => (GpuCodec::Lz4, FILTER_LZ4, &[0]),
        }
    }

    /// The storage of a dataset in chunks of `chunk` encoded with this codec.
    fn stored(self, chunk: &[u64]) -> NewLayout<'_> {
        let (_, filter, cd_values) = self.codec();
        NewLayout::Filtered {
            chunk,
            filter,
            cd_values,
        }
    }
}

/// Encoded bytes plus input a batch may hold in device scratch memory.
const BATCH_BYTES: usize = 256 << 20;

/// Writes a device array as chunked dataset `dataset` of a new file at `path` (replacing it),
/// in chunks of `chunk` elements (one positive entry per dimension, each at most the array's
/// length there), compressed with `compression`. With the `gds` driver and nvCOMP, chunks are
/// encoded on the GPU and written from device memory; else see the module documentation.
pub fn to_file_compressed<T: Element>(
    array: &DeviceArray<T>,
    path: impl AsRef<Path>,
    dataset: &str,
    chunk: &[usize],
    compression: Compression,
) -> Result<()> {
    let path = path.as_ref();
    no_panic("writing compressed from device memory", || {
        write(array, path, dataset, chunk, compression)
    })
}

fn check_chunk(shape: &[usize], chunk: &[usize], dataset: &str) -> Result<()> {
    let bad = |reason: String| Error::InvalidChunkShape {
        dataset: dataset.to_string(),
        chunk_shape: chunk.to_vec(),
        shape: shape.to_vec(),
        reason,
    };
    if shape.is_empty() {
        return Err(bad("a scalar cannot be stored in chunks".into()));
    }
    if chunk.len() != shape.len() {
        return Err(bad(format!(
            "it needs {} entries, one per dimension",
            shape.len()
        )));
    }
    for (d, (&c, &n)) in chunk.iter().zip(shape).enumerate() {
        if c == 0 || c > n.max(1) {
            return Err(bad(format!(
                "entry {d} must be between 1 and the array's length there ({n})"
            )));
        }
    }
    Ok(())
}

fn write<T: Element>(
    array: &DeviceArray<T>,
    path: &Path,
    dataset: &str,
    chunk: &[usize],
    compression: Compression,
) -> Result<()> {
    let desc = descriptor_of::<T>()?;
    check_dataset_name(dataset)?;
    check_chunk(array.shape(), chunk, dataset)?;
    let (codec, _, _) = compression.codec();
    let stream = array.stream().clone();
    let es = std::mem::size_of::<T>();
    let chunk64: Vec<u64> = chunk.iter().map(|&c| c as u64).collect();
    let chunk_bytes = chunk.iter().product::<usize>() * es;
    let blocked = driver_blocker(&crate::route::Transfer {
        staged_by_settings: !Settings::default().use_gds()?,
        ..Default::default()
    });
    let decision = gpu_encode(codec, chunk_bytes, None, blocked.as_deref()).and_then(|()| {
        let missing = nvcomp::library().err();
        gpu_encode(codec, chunk_bytes, missing.as_deref(), blocked.as_deref())
    });
    let shape: Vec<u64> = array.shape().iter().map(|&d| d as u64).collect();
    let lib = match (decision, nvcomp::library()) {
        (Ok(()), Ok(lib)) => lib,
        (Err(reason), _) | (Ok(()), Err(reason)) => {
            let target = (path, dataset, &desc);
            return write_on_host(array, target, (&shape, &chunk64), compression, &reason);
        }
    };
    let stored = (&shape[..], compression.stored(&chunk64));
    let (ds, _) = create_dataset(path, dataset, Driver::Gds, &desc, stored)?;
    if let Some(data) = array.as_slice() {
        let (src, record) = data.device_ptr(&stream);
        synchronize(&stream)?;
        let chunks = chunks_touching(&Block::whole(&shape), &chunk64);
        crate::log::debug(format_args!(
            "{}: writing {dataset:?}: {} chunks encoded ({codec:?}) on the GPU with nvCOMP and \
             written straight from device memory through the gds driver",
            path.display(),
            chunks.len()
        ));
        let encoder = Encoder::new(lib, codec, &stream, chunk_bytes, es)?;
        let per_batch = (BATCH_BYTES / (encoder.in_stride + encoder.out_stride)).max(1);
        for batch in chunks.chunks(per_batch) {
            encoder.batch(&ds, batch, &chunk64, src)?;
        }
        drop(record);
    }
    ds.close()
}

/// Without the GPU path (for `why`): a host copy of the array, its chunks encoded by h5gds on
/// the driver's I/O threads and written raw in chunk order by this thread
/// (`h5gds_engine::encoded`).
fn write_on_host<T: Element>(
    array: &DeviceArray<T>,
    (path, dataset, desc): (&Path, &str, &TypeDescriptor),
    (shape, chunk): (&[u64], &[u64]),
    compression: Compression,
    why: &str,
) -> Result<()> {
    let (_, id, cd) = compression.codec();
    let es = std::mem::size_of::<T>();
    let filters = [Filter {
        id,
        values: cd.to_vec(),
    }];
    let encoder =
        HostEncoder::for_filters(&filters, es).map_err(|reason| Error::UnsupportedDataset {
            path: path.to_path_buf(),
            dataset: dataset.to_string(),
            reason: format!("cannot be written with {compression:?}: {reason}"),
        })?;
    let host = array.to_host()?;
    let stored = (shape, compression.stored(chunk));
    let (ds, _) = create_dataset(path, dataset, Driver::Sec2, desc, stored)?;
    if let Some(elements) = host.as_slice().filter(|e| !e.is_empty()) {
        // SAFETY: the elements are plain values (Element types), read as their bytes only.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                elements.as_ptr().cast::<u8>(),
                std::mem::size_of_val(elements),
            )
        };
        let threads = crate::options::driver_settings()?.nthreads()?;
        let unencodable = |offset: &[u64], reason| Error::UnsupportedDataset {
            path: path.to_path_buf(),
            dataset: dataset.to_string(),
            reason: format!("the chunk at {offset:?} could not be encoded: {reason}"),
        };
        let target = Target {
            api: linked_hdf5(),
            dataset: ds.dset.id(),
            face: &DatasetFace { ds: &ds },
            unencodable: &unencodable,
        };
        let written = encoder.write(target, bytes, shape, chunk, threads)?;
        crate::log::debug(format_args!(
            "{}: writing {dataset:?}: {written} chunks encoded ({compression:?}) by h5gds on \
             {threads} host threads and written raw, not on the GPU with nvCOMP: {why}",
            path.display()
        ));
    }
    ds.close()
}

/// The sizes of one encoding run.
struct Encoder<'a> {
    lib: &'a nvcomp_sys::NvcompLib,
    codec: GpuCodec,
    stream: &'a Arc<CudaStream>,
    chunk_bytes: usize,
    es: usize,
    align: usize,
    /// Bytes per chunk of the input (gathered chunks) and output (framed encodings) buffers.
    in_stride: usize,
    out_stride: usize,
}

/// zlib's header for Deflate with a 32 KiB window, no dictionary, "fastest" level (nvCOMP's
/// default algorithm); 0x7801 is a multiple of 31, as RFC 1950 requires.
const ZLIB_HEADER: [u8; 2] = [0x78, 0x01];

impl<'a> Encoder<'a> {
    fn new(
        lib: &'a nvcomp_sys::NvcompLib,
        codec: GpuCodec,
        stream: &'a Arc<CudaStream>,
        chunk_bytes: usize,
        es: usize,
    ) -> Result<Encoder<'a>> {
        let align = nvcomp::compress_alignment(lib, codec)?;
        let max = nvcomp::max_encoded(lib, codec, chunk_bytes)?.max(chunk_bytes);
        let framing = format::payload_offset(codec) + 4;
        Ok(Encoder {
            lib,
            codec,
            stream,
            chunk_bytes,
            es,
            align,
            in_stride: align_up(chunk_bytes, align),
            out_stride: align_up(framing + max + align, align),
        })
    }

    /// Encodes and writes the chunks of `batch` ((first element, part inside the array)) into
    /// `ds`, in chunks of `chunk`, from the array at `src`.
    fn batch(
        &self,
        ds: &OpenDataset,
        batch: &[(Vec<u64>, Block)],
        chunk: &[u64],
        src: sys::CUdeviceptr,
    ) -> Result<()> {
        let stream = self.stream;
        let n = batch.len();
        // Edge chunks are stored whole; the part outside the array is zeros.
        let input = call("allocating device memory for chunks", || {
            stream.alloc_zeros::<u8>(self.in_stride * n)
        })?;
        let (inp, record) = input.device_ptr(stream);
        drop(record);
        let (_output, out) = scratch(stream, self.out_stride * n)?;
        let whole = Block::whole(&ds.shape);
        let prefix = format::payload_offset(self.codec);
        let mut jobs = Vec::with_capacity(n);
        for (i, (offset, part)) in batch.iter().enumerate() {
            let chunk_at = inp + (i * self.in_stride) as u64;
            // The placement of a decoded chunk into the array, the other way round.
            for copy in placement(part, offset, chunk, &whole, self.es) {
                copy_strided_on_device(stream, chunk_at, src, &copy.reversed())?;
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
        synchronize(stream)?;
        let outcomes = nvcomp::compress(self.lib, self.codec, stream, &jobs)?;
        for (((offset, _), job), outcome) in batch.iter().zip(&jobs).zip(&outcomes) {
            if outcome.status != nvcomp_sys::nvcompStatus_t::nvcompSuccess {
                return Err(Error::cuda(
                    format!("nvCOMP: encoding the chunk at {offset:?} of {:?}", ds.name),
                    nvcomp::status_text(outcome.status),
                ));
            }
            let (start, len) = self.frame(job, outcome.written)?;
            let (face, id) = (DatasetFace { ds }, ds.dset.id());
            face.locked(|| {
                // SAFETY: the framed chunk lies inside the output buffer; the gds driver moves
                // the bytes from device memory to the file.
                unsafe { write_stored(linked_hdf5(), id, offset, 0, start as *const _, len) }
                    .map_err(|f| face.failed(f))
            })?;
        }
        call("waiting for the device", || stream.context().synchronize())?;
        Ok(())
    }

    /// Frames one encoded chunk as its filter stores it, in place around the payload; returns
    /// the stored chunk's device address and length.
    fn frame(&self, job: &Job, encoded: usize) -> Result<(sys::CUdeviceptr, usize)> {
        let stream = self.stream;
        let put = |at: sys::CUdeviceptr, bytes: &[u8]| -> Result<()> {
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
