//! nvCOMP's batched decoders through nvcomp-sys: the library loaded once per process (never
//! required: a missing library is a reason to take HDF5's CPU filters), and one batched
//! decompression call over chunks already in device memory, with the argument arrays nvCOMP
//! reads from device memory and the per-chunk statuses it writes there (NVIDIA, "Low-level C
//! Quick Start Guide", <https://docs.nvidia.com/cuda/nvcomp/samples/lowlevel_c_quickstart.html>).

use crate::device::DeviceFailure;
use cudarc::driver::{sys, CudaSlice, CudaStream, DevicePtr, DeviceRepr};
use h5gds_route::route::GpuCodec;
use h5gds_runtime::cuda::call;
use h5gds_runtime::stream::synchronize;
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

/// A device copy of `values` and its address (valid while the slice lives).
fn on_device<T: DeviceRepr>(
    stream: &Arc<CudaStream>,
    values: &[T],
) -> Result<(CudaSlice<T>, sys::CUdeviceptr)> {
    let slice = call("copying nvCOMP's arguments to the device", || {
        stream.clone_htod(values)
    })?;
    let (ptr, record) = slice.device_ptr(stream);
    drop(record);
    Ok((slice, ptr))
}

/// The device-side arrays of one batched call: the jobs' input pointers and sizes, their output
/// pointers (and, for decoding, output sizes), and the per-job byte counts and statuses nvCOMP
/// writes. Each allocation stays alive while the value lives, so past the synchronisation.
struct BatchArrays {
    n: usize,
    inputs: sys::CUdeviceptr,
    input_lens: sys::CUdeviceptr,
    outputs: sys::CUdeviceptr,
    output_lens: sys::CUdeviceptr,
    written: (CudaSlice<usize>, sys::CUdeviceptr),
    statuses: (CudaSlice<u32>, sys::CUdeviceptr),
    _held: (
        CudaSlice<u64>,
        CudaSlice<usize>,
        CudaSlice<u64>,
        Option<CudaSlice<usize>>,
    ),
}

impl BatchArrays {
    /// Copies the jobs' arguments to the device (the output sizes only `with_output_lens`: the
    /// encoder takes one bound for all) and allocates the zeroed result arrays.
    fn new(stream: &Arc<CudaStream>, jobs: &[Job], with_output_lens: bool) -> Result<Self> {
        let n = jobs.len();
        let inputs: Vec<u64> = jobs.iter().map(|j| j.input).collect();
        let input_lens: Vec<usize> = jobs.iter().map(|j| j.input_len).collect();
        let outputs: Vec<u64> = jobs.iter().map(|j| j.output).collect();
        let (inputs, d_inputs) = on_device(stream, &inputs)?;
        let (input_lens, d_input_lens) = on_device(stream, &input_lens)?;
        let (outputs, d_outputs) = on_device(stream, &outputs)?;
        let (output_lens, d_output_lens) = if with_output_lens {
            let lens: Vec<usize> = jobs.iter().map(|j| j.output_len).collect();
            let (slice, ptr) = on_device(stream, &lens)?;
            (Some(slice), ptr)
        } else {
            (None, 0)
        };
        let written = call("allocating nvCOMP's size array", || {
            stream.alloc_zeros::<usize>(n)
        })?;
        let statuses = call("allocating nvCOMP's status array", || {
            stream.alloc_zeros::<u32>(n)
        })?;
        let (d_written, r1) = written.device_ptr(stream);
        drop(r1);
        let (d_statuses, r2) = statuses.device_ptr(stream);
        drop(r2);
        Ok(Self {
            n,
            inputs: d_inputs,
            input_lens: d_input_lens,
            outputs: d_outputs,
            output_lens: d_output_lens,
            written: (written, d_written),
            statuses: (statuses, d_statuses),
            _held: (inputs, input_lens, outputs, output_lens),
        })
    }

    /// Waits for the call on `stream`, then reads back each job's status and byte count.
    fn outcomes(self, stream: &Arc<CudaStream>) -> Result<Vec<Outcome>> {
        synchronize(stream)?;
        let written = call("copying nvCOMP's sizes back", || {
            stream.clone_dtoh(&self.written.0)
        })?;
        let statuses = call("copying nvCOMP's statuses back", || {
            stream.clone_dtoh(&self.statuses.0)
        })?;
        synchronize(stream)?;
        Ok(statuses
            .into_iter()
            .zip(written)
            .map(|(status, written)| Outcome {
                status: nvcompStatus_t(status),
                written,
            })
            .collect())
    }
}

/// nvCOMP's temp space of `bytes` (at least one) on `stream`, with the stream's context made
/// current for the batched call that follows.
fn temp_space(stream: &Arc<CudaStream>, bytes: usize) -> Result<(CudaSlice<u8>, sys::CUdeviceptr)> {
    // SAFETY: nvCOMP only writes the temp space; nothing reads it before.
    let temp = call("allocating nvCOMP's temp space", || unsafe {
        stream.alloc::<u8>(bytes.max(1))
    })?;
    let (d_temp, record) = temp.device_ptr(stream);
    drop(record);
    call("making the stream's context current", || {
        stream.context().bind_to_thread()
    })?;
    Ok((temp, d_temp))
}

/// Decodes every job in one batched nvCOMP call on `stream` and waits for it. A failed call is
/// an error; per-job failures are in the outcomes (the caller names the chunk).
pub fn decompress(
    lib: &NvcompLib,
    codec: GpuCodec,
    stream: &Arc<CudaStream>,
    jobs: &[Job],
) -> Result<Vec<Outcome>> {
    let n = jobs.len();
    if n == 0 {
        return Ok(Vec::new());
    }
    let max_out = jobs.iter().map(|j| j.output_len).max().unwrap_or(0);
    let total_out: usize = jobs.iter().map(|j| j.output_len).sum();
    let batch = BatchArrays::new(stream, jobs, true)?;
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
    let (temp, d_temp) = temp_space(stream, temp_bytes)?;
    // SAFETY: every array lives in device memory for n entries and stays allocated until
    // `outcomes` has synchronised the stream; each job's buffers lie inside device allocations the
    // caller keeps alive, aligned as `alignment` says.
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
                batch.inputs as *const *const c_void,
                batch.input_lens as *const usize,
                batch.output_lens as *const usize,
                batch.written.1 as *mut usize,
                batch.n,
                d_temp as *mut c_void,
                temp_bytes,
                batch.outputs as *const *mut c_void,
                opts,
                batch.statuses.1 as *mut nvcompStatus_t,
                cu_stream,
            )
        )
    };
    checked("launching the batched decoder", status)?;
    let outcomes = batch.outcomes(stream);
    drop(temp);
    outcomes
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
    let batch = BatchArrays::new(stream, jobs, false)?;
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
    let (temp, d_temp) = temp_space(stream, temp_bytes)?;
    // SAFETY: as in `decompress`: device arrays of n entries, alive until the synchronisation;
    // each output has room for `max_encoded` of its input.
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
                batch.inputs as *const *const c_void,
                batch.input_lens as *const usize,
                max_in,
                batch.n,
                d_temp as *mut c_void,
                temp_bytes,
                batch.outputs as *const *mut c_void,
                batch.written.1 as *mut usize,
                opts,
                batch.statuses.1 as *mut nvcompStatus_t,
                cu_stream,
            )
        )
    };
    checked("launching the batched encoder", status)?;
    let outcomes = batch.outcomes(stream);
    drop(temp);
    outcomes
}
