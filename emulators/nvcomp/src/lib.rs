//! A CPU emulator of nvCOMP 6's batched C API for Deflate, Zstandard and LZ4, for tests only
//! (never shipped). Built as `target/<profile>/libh5gds_emu_nvcomp.so`; tests link it as
//! `libnvcomp.so.6` next to the CUDA emulator's links (`tests/support/emulator.rs`), so code
//! that loads nvCOMP at run time (nvcomp-sys) gets it.
//!
//! It plays the GPU side: every array argument (chunk pointers, sizes, statuses) and every
//! buffer must be device memory of the CUDA emulator, reached through its shadow mapping
//! (`h5gds_emu_device_shadow`), so no host copy is made or counted; a host pointer where device
//! memory is expected is an error, not a silent success. The codecs are the reference
//! implementations (flate2, zstd, lz4_flex; see `codecs`), so what it accepts and produces is
//! what the real library accepts and produces (NVIDIA, "nvCOMP C API",
//! <https://docs.nvidia.com/cuda/nvcomp/c_api.html>, and "Low-level C Quick Start Guide",
//! <https://docs.nvidia.com/cuda/nvcomp/samples/lowlevel_c_quickstart.html>; the headers of
//! PyPI's nvidia-libnvcomp-cu12 6.0).
//!
//! # What it exports
//!
//! `nvcompGetProperties`, `nvcompGetStatusString`, and for `<C>` in `Deflate`, `Zstd`, `LZ4`:
//! `nvcompBatched<C>DecompressGetRequiredAlignments`, `nvcompBatched<C>DecompressGetTempSize`,
//! `nvcompBatched<C>DecompressAsync`, `nvcompBatched<C>CompressGetRequiredAlignments`,
//! `nvcompBatched<C>CompressGetTempSize`, `nvcompBatched<C>CompressGetMaxOutputChunkSize`,
//! `nvcompBatched<C>CompressAsync`. Nothing else, so an unexpected call fails loudly.
//!
//! # How it behaves
//!
//! * A call's arguments are checked when it is made (the fault switches, the temp space, the
//!   argument arrays in device memory); a bad one fails the call. Its work (each chunk decoded
//!   or encoded, statuses and sizes written) is launched on its stream through the CUDA
//!   emulator (`h5gds_emu_enqueue`): it runs after the stream's earlier work, at once, or with
//!   `H5GDS_EMU_DEFER_ASYNC=1` only when the stream is synchronized, as a kernel's results are
//!   seen on a GPU ("Async" calls, nvCOMP C API). A caller that reads the results, or reuses
//!   the input buffers, before synchronizing the stream then gets what it would on a GPU.
//! * Alignments are nvCOMP 6's constants (`nvcomp<C>RequiredDecompressionAlignment`: Deflate
//!   4, Zstandard 8, LZ4 4; compression 8, 4, 4), and are enforced: a misaligned chunk gets
//!   `nvcompErrorAlignment` in its status, a misaligned temp buffer fails the call.
//! * Temp space: 64 bytes per chunk, which the call checks was passed (device memory, large
//!   enough): a caller that skips the temp-size query fails here as it would on a GPU.
//! * Deflate and LZ4, per chunk: a stream that does not decode, or does not fit its output
//!   buffer, gets `nvcompErrorCannotDecompress` and an actual size of 0; a good one
//!   `nvcompSuccess` and its size. (Real nvCOMP promises only limited validation of corrupt
//!   input; the emulator's reference decoders catch more, so tests must not rely on its
//!   leniency.)
//! * Zstandard: a batch whose chunks all decode is reported per chunk, as above. A batch with a
//!   chunk the reference decoder refuses is reported as real nvCOMP 6.0 may: by default the bad
//!   chunk's status is `nvcompErrorCannotDecompress` while every other status and every actual
//!   size is left as the caller filled it (`H5GDS_EMU_NVCOMP_ZSTD_CORRUPT` picks another
//!   plausible behaviour). nvCOMP's `zstd.h` (6.0) promises only that "if the decompression is
//!   successful, the status will be set to `nvcompSuccess`. Passing corrupt, invalid, or
//!   insufficient data leads to undefined behavior or out-of-bound errors. Error reporting
//!   cannot be guaranteed in this scenario as only a limited validation is performed to
//!   maintain performance", and nothing of the sizes of a failed batch; on an NVIDIA H200 with
//!   nvCOMP 6.0 (issue 20) a truncated frame at job 1 of a batch of 4 left job 0 reading as the
//!   zero fill (`nvcompSuccess`, 0 bytes), so that a caller checking job by job blamed job 0.
//!   A caller must look at every job before naming one (`h5gds_gpu_codec::decode`).
//! * Argument arrays outside device memory: `nvcompErrorInvalidValue` for the call.
//!
//! # Switches (environment variables, read once)
//!
//! | variable | effect |
//! |---|---|
//! | `H5GDS_EMU_NVCOMP_FAIL_CALL=N` | the Nth batched decompress or compress call (counted together, from 1) returns `nvcompErrorCudaError` and does nothing |
//! | `H5GDS_EMU_NVCOMP_FAIL_CHUNK=N` | the Nth chunk decoded (counted over all calls, from 1) reports `nvcompErrorCannotDecompress` and leaves poison (0xA5) in its output, as a failed kernel leaves garbage; reported per chunk whatever the codec |
//! | `H5GDS_EMU_NVCOMP_ZSTD_CORRUPT=MODE` | what a Zstandard batch holding a chunk that does not decode reports: `sizes` (the default) the bad chunk's status `nvcompErrorCannotDecompress`, no other status and no size written; `statuses` every chunk's status `nvcompErrorCannotDecompress`, sizes as decoded; `call` the call returns `nvcompErrorCudaError`, no status or size written; `chunk` per chunk, as Deflate and LZ4 |

#![deny(unsafe_op_in_unsafe_fn)]
#![allow(non_snake_case)]

mod batch;
mod codecs;
mod device;

use codecs::Codec;
use nvcomp_sys::*;
use std::ffi::{c_char, c_void};

/// `nvcompGetProperties`: version 6.0.0, built for CUDA 12.8.
///
/// # Safety
/// `properties` is null or points to writable memory for one `nvcompProperties_t`.
#[no_mangle]
pub unsafe extern "C" fn nvcompGetProperties(
    properties: *mut nvcompProperties_t,
) -> nvcompStatus_t {
    if properties.is_null() {
        return nvcompStatus_t::nvcompErrorInvalidValue;
    }
    // SAFETY: non-null, and the caller provides the struct.
    unsafe {
        properties.write(nvcompProperties_t {
            version: 6000,
            cudart_version: 12080,
        })
    };
    nvcompStatus_t::nvcompSuccess
}

/// `nvcompGetStatusString`: the status's name, a static string.
#[no_mangle]
pub extern "C" fn nvcompGetStatusString(status: nvcompStatus_t) -> *const c_char {
    batch::status_cstr(status).as_ptr()
}

/// Exports the seven batched functions of one codec with nvCOMP 6's signatures.
macro_rules! codec_exports {
    ($codec:expr, $dopts:ty, $copts:ty,
     $dalign:ident, $dtemp:ident, $dasync:ident,
     $calign:ident, $ctemp:ident, $cmax:ident, $casync:ident) => {
        /// # Safety
        /// `alignment_requirements` is null or writable.
        #[no_mangle]
        pub unsafe extern "C" fn $dalign(
            _opts: $dopts,
            alignment_requirements: *mut nvcompAlignmentRequirements_t,
        ) -> nvcompStatus_t {
            // SAFETY: the caller's contract.
            unsafe { batch::alignments(alignment_requirements, $codec.decompress_alignment()) }
        }

        /// # Safety
        /// `temp_bytes` is null or writable.
        #[no_mangle]
        pub unsafe extern "C" fn $dtemp(
            num_chunks: usize,
            _max_uncompressed_chunk_bytes: usize,
            _opts: $dopts,
            temp_bytes: *mut usize,
            _max_total_uncompressed_bytes: usize,
            _stream: cudaStream_t,
        ) -> nvcompStatus_t {
            // SAFETY: the caller's contract.
            unsafe { batch::temp_size(num_chunks, temp_bytes) }
        }

        /// # Safety
        /// Device addresses are checked against the CUDA emulator's allocations.
        #[no_mangle]
        pub unsafe extern "C" fn $dasync(
            device_compressed_chunk_ptrs: *const *const c_void,
            device_compressed_chunk_bytes: *const usize,
            device_uncompressed_buffer_bytes: *const usize,
            device_uncompressed_chunk_bytes: *mut usize,
            num_chunks: usize,
            device_temp_ptr: *const c_void,
            temp_bytes: usize,
            device_uncompressed_chunk_ptrs: *const *mut c_void,
            _opts: $dopts,
            device_statuses: *mut nvcompStatus_t,
            stream: cudaStream_t,
        ) -> nvcompStatus_t {
            batch::guard(|| {
                batch::decompress(
                    stream,
                    $codec,
                    batch::Arrays {
                        inputs: device_compressed_chunk_ptrs as u64,
                        input_bytes: device_compressed_chunk_bytes as u64,
                        output_capacity: device_uncompressed_buffer_bytes as u64,
                        output_bytes: device_uncompressed_chunk_bytes as u64,
                        outputs: device_uncompressed_chunk_ptrs as u64,
                        statuses: device_statuses as u64,
                    },
                    num_chunks,
                    device_temp_ptr as u64,
                    temp_bytes,
                )
            })
        }

        /// # Safety
        /// `alignment_requirements` is null or writable.
        #[no_mangle]
        pub unsafe extern "C" fn $calign(
            _opts: $copts,
            alignment_requirements: *mut nvcompAlignmentRequirements_t,
        ) -> nvcompStatus_t {
            // SAFETY: the caller's contract.
            unsafe { batch::alignments(alignment_requirements, $codec.compress_alignment()) }
        }

        /// # Safety
        /// `temp_bytes` is null or writable.
        #[no_mangle]
        pub unsafe extern "C" fn $ctemp(
            num_chunks: usize,
            _max_uncompressed_chunk_bytes: usize,
            _opts: $copts,
            temp_bytes: *mut usize,
            _max_total_uncompressed_bytes: usize,
            _stream: cudaStream_t,
        ) -> nvcompStatus_t {
            // SAFETY: the caller's contract.
            unsafe { batch::temp_size(num_chunks, temp_bytes) }
        }

        /// # Safety
        /// `max_compressed_chunk_bytes` is null or writable.
        #[no_mangle]
        pub unsafe extern "C" fn $cmax(
            max_uncompressed_chunk_bytes: usize,
            _opts: $copts,
            max_compressed_chunk_bytes: *mut usize,
        ) -> nvcompStatus_t {
            if max_compressed_chunk_bytes.is_null() {
                return nvcompStatus_t::nvcompErrorInvalidValue;
            }
            let max = $codec.max_encoded(max_uncompressed_chunk_bytes);
            // SAFETY: non-null, and the caller provides the value.
            unsafe { max_compressed_chunk_bytes.write(max) };
            nvcompStatus_t::nvcompSuccess
        }

        /// # Safety
        /// Device addresses are checked against the CUDA emulator's allocations.
        #[no_mangle]
        pub unsafe extern "C" fn $casync(
            device_uncompressed_chunk_ptrs: *const *const c_void,
            device_uncompressed_chunk_bytes: *const usize,
            _max_uncompressed_chunk_bytes: usize,
            num_chunks: usize,
            device_temp_ptr: *const c_void,
            temp_bytes: usize,
            device_compressed_chunk_ptrs: *const *mut c_void,
            device_compressed_chunk_bytes: *mut usize,
            _opts: $copts,
            device_statuses: *mut nvcompStatus_t,
            stream: cudaStream_t,
        ) -> nvcompStatus_t {
            batch::guard(|| {
                batch::compress(
                    stream,
                    $codec,
                    batch::Arrays {
                        inputs: device_uncompressed_chunk_ptrs as u64,
                        input_bytes: device_uncompressed_chunk_bytes as u64,
                        output_capacity: 0,
                        output_bytes: device_compressed_chunk_bytes as u64,
                        outputs: device_compressed_chunk_ptrs as u64,
                        statuses: device_statuses as u64,
                    },
                    num_chunks,
                    device_temp_ptr as u64,
                    temp_bytes,
                )
            })
        }
    };
}

codec_exports!(
    Codec::Deflate,
    nvcompBatchedDeflateDecompressOpts_t,
    nvcompBatchedDeflateCompressOpts_t,
    nvcompBatchedDeflateDecompressGetRequiredAlignments,
    nvcompBatchedDeflateDecompressGetTempSize,
    nvcompBatchedDeflateDecompressAsync,
    nvcompBatchedDeflateCompressGetRequiredAlignments,
    nvcompBatchedDeflateCompressGetTempSize,
    nvcompBatchedDeflateCompressGetMaxOutputChunkSize,
    nvcompBatchedDeflateCompressAsync
);
codec_exports!(
    Codec::Zstd,
    nvcompBatchedZstdDecompressOpts_t,
    nvcompBatchedZstdCompressOpts_t,
    nvcompBatchedZstdDecompressGetRequiredAlignments,
    nvcompBatchedZstdDecompressGetTempSize,
    nvcompBatchedZstdDecompressAsync,
    nvcompBatchedZstdCompressGetRequiredAlignments,
    nvcompBatchedZstdCompressGetTempSize,
    nvcompBatchedZstdCompressGetMaxOutputChunkSize,
    nvcompBatchedZstdCompressAsync
);
codec_exports!(
    Codec::Lz4,
    nvcompBatchedLZ4DecompressOpts_t,
    nvcompBatchedLZ4CompressOpts_t,
    nvcompBatchedLZ4DecompressGetRequiredAlignments,
    nvcompBatchedLZ4DecompressGetTempSize,
    nvcompBatchedLZ4DecompressAsync,
    nvcompBatchedLZ4CompressGetRequiredAlignments,
    nvcompBatchedLZ4CompressGetTempSize,
    nvcompBatchedLZ4CompressGetMaxOutputChunkSize,
    nvcompBatchedLZ4CompressAsync
);
