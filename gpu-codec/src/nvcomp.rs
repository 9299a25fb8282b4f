//! nvCOMP's batched decoders through nvcomp-sys: the library loaded once per process (never
//! required: a missing library is a reason to take HDF5's CPU filters), and one batched
//! decompression call over chunks already in device memory, with the argument arrays nvCOMP
//! reads from device memory and the per-chunk statuses it writes there (NVIDIA, "Low-level C
//! Quick Start Guide", <https://docs.nvidia.com/cuda/nvcomp/samples/lowlevel_c_quickstart.html>).

use crate::device::DeviceFailure;
use cudarc::driver::{sys, CudaStream};
use h5gds_route::route::GpuCodec;
use h5gds_runtime::cuda::call;
use h5gds_runtime::stream::{copy_to_device, peek, Scratch};
use nvcomp_sys::{deflate_decompress_opts, lz4_decompress_opts, zstd_decompress_opts};
use nvcomp_sys::{nvcompAlignmentRequirements_t, nvcompStatus_t, NvcompLib};
use std::ffi::c_void;
use std::sync::Arc;

type Result<T> = std::result::Result<T, DeviceFailure>;

/// libnvcomp (loaded once per process by the runtime crate, at the first compressed device
/// read); or why it cannot be used.
pub fn library() -> std::result::Result<&'static NvcompLib, String> {
    h5gds_runtime::libraries::nvcomp()
}

/// One chunk (or block) to decode: device addresses and sizes.
#[derive(Clone, Copy, Debug)]
pub struct Job {
    pub input: sys::CUdeviceptr,
    pub input_len: usize,
    pub output: sys::CUdeviceptr,
    pub output_len: usize,
}

/// What nvCOMP reported for one job: its status and the bytes it wrote (decoded or encoded).
#[derive(Clone, Copy, Debug)]
pub struct Outcome {
    pub status: nvcompStatus_t,
    pub written: usize,
}

/// The header's name of a status, for messages.
pub fn status_text(status: nvcompStatus_t) -> String {
    match nvcomp_sys::status_name(status) {
        Some(name) => name.to_string(),
        None => format!("nvCOMP status {}", status.0),
    }
}

fn missing(name: &str, e: &libloading::Error) -> DeviceFailure {
    DeviceFailure::new(
        format!("nvCOMP: {name}"),
        format!("missing from libnvcomp ({e})"),
    )
}

fn checked(op: &str, status: nvcompStatus_t) -> Result<()> {
    if status == nvcompStatus_t::nvcompSuccess {
        Ok(())
    } else {
        Err(DeviceFailure::new(
            format!("nvCOMP: {op}"),
            status_text(status),
        ))
    }
}

/// Expands to the codec's function of the given kind, or an error naming the missing symbol.
macro_rules! function {
    ($lib:expr, $field:ident) => {
        $lib.$field
            .as_ref()
            .map_err(|e| missing(stringify!($field), e))?
    };
}

/// Calls `codec`'s function among three of one shape (Deflate, Zstandard, LZ4: they differ only in
/// the type of their options), with `$opts` bound to that codec's decoder or encoder options; the
/// arguments use it.
macro_rules! per_codec {
    ($lib:expr, $codec:expr, [$d:ident, $z:ident, $l:ident], decoder $opts:ident, $args:tt) => {
        per_codec!(@call $lib, $codec, [$d, $z, $l], $opts,
            [deflate_decompress_opts(), zstd_decompress_opts(), lz4_decompress_opts()], $args)
    };
    ($lib:expr, $codec:expr, [$d:ident, $z:ident, $l:ident], encoder $opts:ident, $args:tt) => {
        per_codec!(@call $lib, $codec, [$d, $z, $l], $opts,
            [deflate_compress_opts(), zstd_compress_opts(), lz4_compress_opts()], $args)
    };
    (@call $lib:expr, $codec:expr, [$d:ident, $z:ident, $l:ident], $opts:ident,
     [$do:expr, $zo:expr, $lo:expr], ($($arg:expr),+ $(,)?)) => {
        match $codec {
            GpuCodec::Deflate => {
                let $opts = $do;
                function!($lib, $d)($($arg),+)
            }
            GpuCodec::Zstd => {
                let $opts = $zo;
                function!($lib, $z)($($arg),+)
            }
            GpuCodec::Lz4 => {
                let $opts = $lo;
                function!($lib, $l)($($arg),+)
            }
        }
    };
}

/// The alignment (bytes) every input, output and temp buffer of `codec`'s decoder must have.
pub fn alignment(lib: &NvcompLib, codec: GpuCodec) -> Result<usize> {
    let mut req = nvcompAlignmentRequirements_t {
        input: 1,
        output: 1,
        temp: 1,
    };
    // SAFETY: the options are the header's defaults and `req` is writable.
    let status = unsafe {
        match codec {
            GpuCodec::Deflate => function!(
                lib,
                nvcompBatchedDeflateDecompressGetRequiredAlignments
            )(nvcomp_sys::deflate_decompress_opts(), &mut req),
            GpuCodec::Zstd => function!(lib, nvcompBatchedZstdDecompressGetRequiredAlignments)(
                nvcomp_sys::zstd_decompress_opts(),
                &mut req,
            ),
            GpuCodec::Lz4 => function!(lib, nvcompBatchedLZ4DecompressGetRequiredAlignments)(
                nvcomp_sys::lz4_decompress_opts(),
                &mut req,
            ),
        }
    };
    checked("querying the decoder's alignment", status)?;
    Ok(req.input.max(req.output).max(req.temp).max(1))
}

/// Device memory for batched calls, kept across calls (by a pipeline's slot, or for one call)
/// and grown when a call needs more: one buffer of argument and result arrays, one of nvCOMP's
/// temp space.
#[derive(Default)]
pub struct CallSpace {
    arrays: Scratch,
    temp: Scratch,
}

/// A batched call launched on a stream and not yet waited for: where its per-job sizes and
/// statuses will be.
pub struct Launched {
    n: usize,
    /// The sizes nvCOMP writes, followed by its statuses (`Arrays`).
    results: sys::CUdeviceptr,
}

/// The device addresses of one call's argument and result arrays, laid out one after another in
/// the arrays buffer: inputs, input sizes, outputs, output sizes (8 bytes an entry), then the
/// sizes (8) and statuses (4) nvCOMP writes.
struct Arrays {
    inputs: sys::CUdeviceptr,
    input_lens: sys::CUdeviceptr,
    outputs: sys::CUdeviceptr,
    output_lens: sys::CUdeviceptr,
    written: sys::CUdeviceptr,
    statuses: sys::CUdeviceptr,
}

impl Arrays {
    /// Bytes of the arrays for `n` jobs.
    fn bytes(n: usize) -> usize {
        n * (5 * 8 + 4)
    }

    /// The arrays for `n` jobs in the buffer at `base`.
    fn at(base: sys::CUdeviceptr, n: usize) -> Self {
        let array = |k: u64| base + k * 8 * n as u64;
        Arrays {
            inputs: array(0),
            input_lens: array(1),
            outputs: array(2),
            output_lens: array(3),
            written: array(4),
            statuses: array(5),
        }
    }
}

impl CallSpace {
    /// Copies the jobs' arguments into the arrays buffer, with the result arrays zeroed (a
    /// failed batch may leave them unwritten: they then read as the zero fill), in one copy in
    /// `stream`'s order. Returns where the arrays are.
    fn arguments(&mut self, stream: &Arc<CudaStream>, jobs: &[Job]) -> Result<Arrays> {
        let n = jobs.len();
        let mut host = vec![0u64; Arrays::bytes(n).div_ceil(8)];
        for (k, j) in jobs.iter().enumerate() {
            host[k] = j.input;
            host[n + k] = j.input_len as u64;
            host[2 * n + k] = j.output;
            host[3 * n + k] = j.output_len as u64;
        }
        let at = self.arrays.at_least(stream, host.len() * 8)?;
        // SAFETY: `host` holds the bytes copied and is pageable memory, which CUDA copies out
        // of before the call returns; the buffer holds them.
        unsafe { copy_to_device(stream, at, host.as_ptr().cast(), host.len() * 8) }?;
        Ok(Arrays::at(at, n))
    }

    /// nvCOMP's temp space of `bytes` (at least one), with the stream's context made current
    /// for the batched call that follows.
    fn temp(&mut self, stream: &Arc<CudaStream>, bytes: usize) -> Result<sys::CUdeviceptr> {
        let at = self.temp.at_least(stream, bytes)?;
        call("making the stream's context current", || {
            stream.context().bind_to_thread()
        })?;
        Ok(at)
    }

    /// Launches one batched decompression of every job on `stream`, without waiting for it. A
    /// failed launch is an error; per-job failures are in the [`outcomes`](Self::outcomes),
    /// which wait. The jobs' buffers, and this space, must not be reused before then.
    pub fn launch_decompress(
        &mut self,
        lib: &NvcompLib,
        codec: GpuCodec,
        stream: &Arc<CudaStream>,
        jobs: &[Job],
    ) -> Result<Launched> {
        let n = jobs.len();
        let max_out = jobs.iter().map(|j| j.output_len).max().unwrap_or(0);
        let total_out: usize = jobs.iter().map(|j| j.output_len).sum();
        if n == 0 {
            return Ok(Launched { n, results: 0 });
        }
        let arrays = self.arguments(stream, jobs)?;
        let cu_stream = stream.cu_stream() as *mut c_void;
        let mut temp_bytes = 0usize;
        // SAFETY: plain values in, one writable size out.
        let status = unsafe {
            per_codec!(
                lib,
                codec,
                [
                    nvcompBatchedDeflateDecompressGetTempSize,
                    nvcompBatchedZstdDecompressGetTempSize,
                    nvcompBatchedLZ4DecompressGetTempSize
                ],
                decoder opts,
                (n, max_out, opts, &mut temp_bytes, total_out, cu_stream)
            )
        };
        checked("querying the decoder's temp size", status)?;
        let temp = self.temp(stream, temp_bytes)?;
        // SAFETY: every array lies in device memory for n entries (`arguments`) and stays
        // allocated until the caller has waited (`outcomes`); each job's buffers lie inside
        // device allocations the caller keeps alive, aligned as `alignment` says.
        let status = unsafe {
            per_codec!(
                lib,
                codec,
                [
                    nvcompBatchedDeflateDecompressAsync,
                    nvcompBatchedZstdDecompressAsync,
                    nvcompBatchedLZ4DecompressAsync
                ],
                decoder opts,
                (
                    arrays.inputs as *const *const c_void,
                    arrays.input_lens as *const usize,
                    arrays.output_lens as *const usize,
                    arrays.written as *mut usize,
                    n,
                    temp as *mut c_void,
                    temp_bytes,
                    arrays.outputs as *const *mut c_void,
                    opts,
                    arrays.statuses as *mut nvcompStatus_t,
                    cu_stream,
                )
            )
        };
        checked("launching the batched decoder", status)?;
        Ok(Launched {
            n,
            results: arrays.written,
        })
    }

    /// Waits for `stream`, then reads back each job's status and byte count of a call launched
    /// in this space.
    pub fn outcomes(&self, stream: &Arc<CudaStream>, call: &Launched) -> Result<Vec<Outcome>> {
        let n = call.n;
        if n == 0 {
            return Ok(Vec::new());
        }
        let bytes = peek(stream, call.results, n * 12)?;
        let (sizes, statuses) = bytes.split_at(n * 8);
        Ok(statuses
            .chunks_exact(4)
            .zip(sizes.chunks_exact(8))
            .map(|(status, written)| Outcome {
                status: nvcompStatus_t(u32::from_ne_bytes(status.try_into().expect("4 bytes"))),
                written: u64::from_ne_bytes(written.try_into().expect("8 bytes")) as usize,
            })
            .collect())
    }
}

/// Decodes every job in one batched nvCOMP call on `stream` and waits for it. A failed call is
/// an error; per-job failures are in the outcomes (the caller names the chunk).
pub fn decompress(
    lib: &NvcompLib,
    codec: GpuCodec,
    stream: &Arc<CudaStream>,
    jobs: &[Job],
) -> Result<Vec<Outcome>> {
    let mut space = CallSpace::default();
    let call = space.launch_decompress(lib, codec, stream, jobs)?;
    space.outcomes(stream, &call)
}

/// Zeroed compression options: nvCOMP 6's defaults for Zstandard and LZ4 (plain bytes), and
/// Deflate's `algorithm` 1 (high throughput), the header's default too.
fn deflate_compress_opts() -> nvcomp_sys::nvcompBatchedDeflateCompressOpts_t {
    nvcomp_sys::nvcompBatchedDeflateCompressOpts_t {
        algorithm: 1,
        reserved: [0; 60],
    }
}

fn zstd_compress_opts() -> nvcomp_sys::nvcompBatchedZstdCompressOpts_t {
    nvcomp_sys::nvcompBatchedZstdCompressOpts_t { reserved: [0; 64] }
}

fn lz4_compress_opts() -> nvcomp_sys::nvcompBatchedLZ4CompressOpts_t {
    nvcomp_sys::nvcompBatchedLZ4CompressOpts_t {
        data_type: nvcomp_sys::nvcompType_t::NVCOMP_TYPE_CHAR,
        bitshuffle_mode: nvcomp_sys::nvcompBitshuffleMode_t::NVCOMP_BITSHUFFLE_NONE,
        reserved: [0; 56],
    }
}

/// The alignment (bytes) every buffer of `codec`'s encoder must have.
pub fn compress_alignment(lib: &NvcompLib, codec: GpuCodec) -> Result<usize> {
    let mut req = nvcompAlignmentRequirements_t {
        input: 1,
        output: 1,
        temp: 1,
    };
    // SAFETY: default options; `req` is writable.
    let status = unsafe {
        per_codec!(
            lib,
            codec,
            [
                nvcompBatchedDeflateCompressGetRequiredAlignments,
                nvcompBatchedZstdCompressGetRequiredAlignments,
                nvcompBatchedLZ4CompressGetRequiredAlignments
            ],
            encoder opts,
            (opts, &mut req)
        )
    };
    checked("querying the encoder's alignment", status)?;
    Ok(req.input.max(req.output).max(req.temp).max(1))
}

/// The most bytes `codec` may encode `len` bytes into.
pub fn max_encoded(lib: &NvcompLib, codec: GpuCodec, len: usize) -> Result<usize> {
    let mut max = 0usize;
    // SAFETY: plain values in, one writable size out.
    let status = unsafe {
        per_codec!(
            lib,
            codec,
            [
                nvcompBatchedDeflateCompressGetMaxOutputChunkSize,
                nvcompBatchedZstdCompressGetMaxOutputChunkSize,
                nvcompBatchedLZ4CompressGetMaxOutputChunkSize
            ],
            encoder opts,
            (len, opts, &mut max)
        )
    };
    checked("querying the encoder's largest output", status)?;
    Ok(max)
}

/// Encodes every job (input: the bytes; output: room for `max_encoded` of them) in one batched
/// nvCOMP call on `stream` and waits for it; the outcomes' `written` is the encoded size.
pub fn compress(
    lib: &NvcompLib,
    codec: GpuCodec,
    stream: &Arc<CudaStream>,
    jobs: &[Job],
) -> Result<Vec<Outcome>> {
    let n = jobs.len();
    if n == 0 {
        return Ok(Vec::new());
    }
    let max_in = jobs.iter().map(|j| j.input_len).max().unwrap_or(0);
    let total_in: usize = jobs.iter().map(|j| j.input_len).sum();
    let mut space = CallSpace::default();
    let arrays = space.arguments(stream, jobs)?;
    let cu_stream = stream.cu_stream() as *mut c_void;
    let mut temp_bytes = 0usize;
    // SAFETY: plain values in, one writable size out.
    let status = unsafe {
        per_codec!(
            lib,
            codec,
            [
                nvcompBatchedDeflateCompressGetTempSize,
                nvcompBatchedZstdCompressGetTempSize,
                nvcompBatchedLZ4CompressGetTempSize
            ],
            encoder opts,
            (n, max_in, opts, &mut temp_bytes, total_in, cu_stream)
        )
    };
    checked("querying the encoder's temp size", status)?;
    let temp = space.temp(stream, temp_bytes)?;
    // SAFETY: as in `launch_decompress`: device arrays of n entries, alive until the
    // synchronisation in `outcomes`; each output has room for `max_encoded` of its input.
    let status = unsafe {
        per_codec!(
            lib,
            codec,
            [
                nvcompBatchedDeflateCompressAsync,
                nvcompBatchedZstdCompressAsync,
                nvcompBatchedLZ4CompressAsync
            ],
            encoder opts,
            (
                arrays.inputs as *const *const c_void,
                arrays.input_lens as *const usize,
                max_in,
                n,
                temp as *mut c_void,
                temp_bytes,
                arrays.outputs as *const *mut c_void,
                arrays.written as *mut usize,
                opts,
                arrays.statuses as *mut nvcompStatus_t,
                cu_stream,
            )
        )
    };
    checked("launching the batched encoder", status)?;
    space.outcomes(
        stream,
        &Launched {
            n,
            results: arrays.written,
        },
    )
}
