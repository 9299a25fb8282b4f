//! The batched calls' work: argument arrays read from device memory, each chunk coded with the
//! reference codec, sizes and statuses written back to device memory; the fault switches.

use crate::codecs::Codec;
use crate::device;
use nvcomp_sys::nvcompAlignmentRequirements_t;
use nvcomp_sys::nvcompStatus_t as Status;
use std::ffi::CStr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Temp space the emulator asks for, per chunk.
const TEMP_PER_CHUNK: usize = 64;
/// What a failed chunk's output holds (a failed kernel leaves garbage).
const POISON: u8 = 0xA5;

/// The device addresses of a batched call's arrays.
#[derive(Clone, Copy)]
pub struct Arrays {
    pub inputs: u64,
    pub input_bytes: u64,
    /// Output buffer sizes (decompression only; 0 for compression).
    pub output_capacity: u64,
    pub output_bytes: u64,
    pub outputs: u64,
    pub statuses: u64,
}

struct Switches {
    fail_call: Option<u64>,
    fail_chunk: Option<u64>,
    zstd_corrupt: ZstdCorrupt,
}

/// What a batched Zstandard decode reports when the reference decoder refuses one of its chunks
/// (`H5GDS_EMU_NVCOMP_ZSTD_CORRUPT`). nvCOMP 6.0's `zstd.h` promises, for
/// `device_statuses`, only that "if the decompression is successful, the status will be set
/// to `nvcompSuccess`. Passing corrupt, invalid, or insufficient data leads to undefined
/// behavior or out-of-bound errors. Error reporting cannot be guaranteed in this scenario as
/// only a limited validation is performed to maintain performance", and says nothing of
/// `device_uncompressed_chunk_bytes` for a failed chunk; its release notes (Known Issues) say
/// the Zstandard and Deflate decompressors "can only operate on valid input data". nvCOMP's
/// Zstandard decoder works on the batch as one shared pool of blocks, and only its frame-header
/// pass writes statuses, so one bad chunk can leave the whole batch's sizes unwritten. On an
/// NVIDIA H200 with nvCOMP 6.0 (issue 20), a truncated frame at job 1 of a batch of 4 made
/// h5gds, reading job by job, blame job 0: job 0's status and size read back as the caller's
/// zero fill (`nvcompSuccess`, 0 bytes). Each mode is one behaviour consistent with that.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZstdCorrupt {
    /// The default: the bad chunk's status is `nvcompErrorCannotDecompress`, the other
    /// statuses and every chunk's actual size are left as the caller filled them.
    Sizes,
    /// Every chunk of the batch gets `nvcompErrorCannotDecompress`; sizes as decoded.
    Statuses,
    /// The call returns `nvcompErrorCudaError`; no status or size is written.
    Call,
    /// Per chunk, as Deflate and LZ4 report (the bad chunk alone fails, with size 0).
    Chunk,
}

fn switches() -> &'static Switches {
    static SWITCHES: OnceLock<Switches> = OnceLock::new();
    SWITCHES.get_or_init(|| {
        let number = |name: &str| {
            let value = std::env::var(name).ok()?;
            match value.trim().parse::<u64>() {
                Ok(n) if n > 0 => Some(n),
                _ => {
                    eprintln!("h5gds-emu-nvcomp: ignoring {name}={value:?} (want a number >= 1)");
                    None
                }
            }
        };
        const ZSTD: &str = "H5GDS_EMU_NVCOMP_ZSTD_CORRUPT";
        let zstd_corrupt = match std::env::var(ZSTD).as_deref() {
            Err(_) | Ok("") | Ok("sizes") => ZstdCorrupt::Sizes,
            Ok("statuses") => ZstdCorrupt::Statuses,
            Ok("call") => ZstdCorrupt::Call,
            Ok("chunk") => ZstdCorrupt::Chunk,
            Ok(other) => {
                eprintln!(
                    "h5gds-emu-nvcomp: ignoring {ZSTD}={other:?} (want sizes, statuses, call or \
                     chunk)"
                );
                ZstdCorrupt::Sizes
            }
        };
        Switches {
            fail_call: number("H5GDS_EMU_NVCOMP_FAIL_CALL"),
            fail_chunk: number("H5GDS_EMU_NVCOMP_FAIL_CHUNK"),
            zstd_corrupt,
        }
    })
}

static CALLS: AtomicU64 = AtomicU64::new(0);
static CHUNKS: AtomicU64 = AtomicU64::new(0);

fn is_nth(counter: &AtomicU64, nth: Option<u64>) -> bool {
    let this = counter.fetch_add(1, Ordering::Relaxed) + 1;
    nth == Some(this)
}

/// Runs a call's body; a panic becomes `nvcompErrorInternal` (none crosses into C).
pub fn guard(body: impl FnOnce() -> Status) -> Status {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|_| {
        eprintln!("h5gds-emu-nvcomp: internal error (panic); returning nvcompErrorInternal");
        Status::nvcompErrorInternal
    })
}

/// The header's name of a status (nvcomp-sys's table), as a C string kept for the process.
pub fn status_cstr(status: Status) -> &'static CStr {
    static NAMES: std::sync::Mutex<Vec<(Status, &'static CStr)>> =
        std::sync::Mutex::new(Vec::new());
    let Some(name) = nvcomp_sys::status_name(status) else {
        return c"unknown nvcompStatus_t";
    };
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&(_, known)) = names.iter().find(|(s, _)| *s == status) {
        return known;
    }
    let owned = std::ffi::CString::new(name).unwrap_or_else(|_| c"nvcompErrorInternal".into());
    // At most one per status value nvcomp-sys names: a bounded, process-long table.
    let leaked: &'static CStr = Box::leak(owned.into_boxed_c_str());
    names.push((status, leaked));
    leaked
}

/// Fills `out` with one alignment for input, output and temp.
///
/// # Safety
/// `out` is null or writable.
pub unsafe fn alignments(out: *mut nvcompAlignmentRequirements_t, align: usize) -> Status {
    if out.is_null() {
        return Status::nvcompErrorInvalidValue;
    }
    // SAFETY: non-null, provided by the caller.
    unsafe {
        out.write(nvcompAlignmentRequirements_t {
            input: align,
            output: align,
            temp: align,
        })
    };
    Status::nvcompSuccess
}

/// The temp size for `num_chunks`.
///
/// # Safety
/// `out` is null or writable.
pub unsafe fn temp_size(num_chunks: usize, out: *mut usize) -> Status {
    if out.is_null() {
        return Status::nvcompErrorInvalidValue;
    }
    // SAFETY: non-null, provided by the caller.
    unsafe { out.write(num_chunks.saturating_mul(TEMP_PER_CHUNK)) };
    Status::nvcompSuccess
}

/// The argument arrays, in device memory, and the temp space checked.
struct Views<'a> {
    inputs: &'a mut [u64],
    input_bytes: &'a mut [usize],
    output_capacity: Option<&'a mut [usize]>,
    output_bytes: &'a mut [usize],
    outputs: &'a mut [u64],
    statuses: &'a mut [Status],
}

fn views<'a>(
    arrays: &Arrays,
    n: usize,
    temp: u64,
    temp_bytes: usize,
    align: usize,
) -> Result<Views<'a>, Status> {
    let invalid = Status::nvcompErrorInvalidValue;
    if temp_bytes < n * TEMP_PER_CHUNK || temp as usize % align != 0 {
        return Err(invalid);
    }
    // SAFETY: every range below is checked against the device allocations by `device`; the
    // caller's arrays do not overlap (nvCOMP's contract).
    unsafe {
        device::bytes(temp, n * TEMP_PER_CHUNK).ok_or(invalid)?;
        Ok(Views {
            inputs: device::array::<u64>(arrays.inputs, n).ok_or(invalid)?,
            input_bytes: device::array::<usize>(arrays.input_bytes, n).ok_or(invalid)?,
            output_capacity: if arrays.output_capacity == 0 {
                None
            } else {
                Some(device::array::<usize>(arrays.output_capacity, n).ok_or(invalid)?)
            },
            output_bytes: device::array::<usize>(arrays.output_bytes, n).ok_or(invalid)?,
            outputs: device::array::<u64>(arrays.outputs, n).ok_or(invalid)?,
            statuses: device::array::<Status>(arrays.statuses, n).ok_or(invalid)?,
        })
    }
}

/// A checked call's `work` launched on `stream` (`device::launch`), as the call's status: a
/// launch the CUDA emulator refuses is the CUDA error nvCOMP reports.
fn launched(stream: nvcomp_sys::cudaStream_t, work: impl FnOnce() + Send + 'static) -> Status {
    if device::launch(stream, work) {
        Status::nvcompSuccess
    } else {
        Status::nvcompErrorCudaError
    }
}

/// `nvcompBatched<C>DecompressAsync`: the arguments checked now, the chunks decoded as work on
/// `stream` (`device::launch`).
pub fn decompress(
    stream: nvcomp_sys::cudaStream_t,
    codec: Codec,
    arrays: Arrays,
    n: usize,
    temp: u64,
    temp_bytes: usize,
) -> Status {
    if n == 0 {
        return Status::nvcompSuccess;
    }
    if is_nth(&CALLS, switches().fail_call) {
        return Status::nvcompErrorCudaError;
    }
    let align = codec.decompress_alignment();
    match views(&arrays, n, temp, temp_bytes, align) {
        Err(status) => return status,
        Ok(v) if v.output_capacity.is_none() => return Status::nvcompErrorInvalidValue,
        Ok(_) => {}
    }
    // The one mode in which the call itself reports a bad chunk: the chunks are looked at now.
    if codec == Codec::Zstd
        && switches().zstd_corrupt == ZstdCorrupt::Call
        && decode_each(codec, &arrays, n, temp, temp_bytes, true)
            .iter()
            .any(|r| r.2)
    {
        return Status::nvcompErrorCudaError;
    }
    let work = move || {
        let results = decode_each(codec, &arrays, n, temp, temp_bytes, false);
        if let Ok(v) = views(&arrays, n, temp, temp_bytes, align) {
            let refused = results.iter().any(|r| r.2);
            let mode = if codec == Codec::Zstd && refused {
                switches().zstd_corrupt
            } else {
                ZstdCorrupt::Chunk
            };
            report(mode, &results, v.statuses, v.output_bytes);
        }
    };
    launched(stream, work)
}

/// Decodes each chunk of a checked call into its output (or, `dry`, into host memory, leaving
/// the outputs and the fault switches alone): per chunk (status, size, whether the reference
/// decoder refused its stream).
fn decode_each(
    codec: Codec,
    arrays: &Arrays,
    n: usize,
    temp: u64,
    temp_bytes: usize,
    dry: bool,
) -> Vec<(Status, usize, bool)> {
    let align = codec.decompress_alignment();
    let Ok(v) = views(arrays, n, temp, temp_bytes, align) else {
        return Vec::new();
    };
    let Some(capacity) = v.output_capacity else {
        return Vec::new();
    };
    let mut results = Vec::with_capacity(n);
    for (k, &room) in capacity.iter().enumerate() {
        let (input, output) = (v.inputs[k], v.outputs[k]);
        let result = if input as usize % align != 0 || output as usize % align != 0 {
            (Status::nvcompErrorAlignment, 0, false)
        } else {
            // SAFETY: `device::bytes` checks the range against one device allocation.
            let src = unsafe { device::bytes(input, v.input_bytes[k]) };
            // SAFETY: as above.
            let dst = unsafe { device::bytes(output, room) };
            match (src, dst) {
                (Some(src), Some(_)) if dry => match codec.decode(src, &mut vec![0u8; room]) {
                    Some(len) => (Status::nvcompSuccess, len, false),
                    None => (Status::nvcompErrorCannotDecompress, 0, true),
                },
                (Some(src), Some(dst)) => {
                    if is_nth(&CHUNKS, switches().fail_chunk) {
                        dst.fill(POISON);
                        (Status::nvcompErrorCannotDecompress, 0, false)
                    } else {
                        match codec.decode(src, dst) {
                            Some(len) => (Status::nvcompSuccess, len, false),
                            None => (Status::nvcompErrorCannotDecompress, 0, true),
                        }
                    }
                }
                _ => (Status::nvcompErrorInvalidValue, 0, false),
            }
        };
        results.push(result);
    }
    results
}

/// Writes a decode's per-chunk `results` (status, size, refused by the decoder) into the
/// call's status and size arrays as `mode` says; the call's return value.
fn report(
    mode: ZstdCorrupt,
    results: &[(Status, usize, bool)],
    statuses: &mut [Status],
    sizes: &mut [usize],
) -> Status {
    for (k, &(status, written, _)) in results.iter().enumerate() {
        match mode {
            ZstdCorrupt::Chunk => {
                statuses[k] = status;
                sizes[k] = written;
            }
            ZstdCorrupt::Sizes => {
                if status != Status::nvcompSuccess {
                    statuses[k] = status;
                }
            }
            ZstdCorrupt::Statuses => {
                statuses[k] = Status::nvcompErrorCannotDecompress;
                sizes[k] = written;
            }
            ZstdCorrupt::Call => return Status::nvcompErrorCudaError,
        }
    }
    Status::nvcompSuccess
}

/// `nvcompBatched<C>CompressAsync`: each output buffer holds `max_encoded` of its input; the
/// arguments checked now, the chunks encoded as work on `stream` (`device::launch`).
pub fn compress(
    stream: nvcomp_sys::cudaStream_t,
    codec: Codec,
    arrays: Arrays,
    n: usize,
    temp: u64,
    temp_bytes: usize,
) -> Status {
    if n == 0 {
        return Status::nvcompSuccess;
    }
    if is_nth(&CALLS, switches().fail_call) {
        return Status::nvcompErrorCudaError;
    }
    let align = codec.compress_alignment();
    if let Err(status) = views(&arrays, n, temp, temp_bytes, align) {
        return status;
    }
    let work = move || {
        let Ok(v) = views(&arrays, n, temp, temp_bytes, align) else {
            return;
        };
        for k in 0..n {
            let (input, output) = (v.inputs[k], v.outputs[k]);
            let (status, written) = if input as usize % align != 0 || output as usize % align != 0 {
                (Status::nvcompErrorAlignment, 0)
            } else {
                let len = v.input_bytes[k];
                // SAFETY: `device::bytes` checks the range against one device allocation.
                let src = unsafe { device::bytes(input, len) };
                // SAFETY: as above.
                let dst = unsafe { device::bytes(output, codec.max_encoded(len)) };
                match (src, dst) {
                    (Some(src), Some(dst)) => match codec.encode(src, dst) {
                        Some(n) => (Status::nvcompSuccess, n),
                        None => (Status::nvcompErrorCannotCompress, 0),
                    },
                    _ => (Status::nvcompErrorInvalidValue, 0),
                }
            };
            v.statuses[k] = status;
            v.output_bytes[k] = written;
        }
    };
    launched(stream, work)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_of_nvcomp_6_has_its_header_name() {
        for value in (0..=30).chain([1000, 10000]) {
            let status = Status(value);
            let name = status_cstr(status).to_str().unwrap();
            match nvcomp_sys::status_name(status) {
                Some(expected) => assert_eq!(name, expected),
                None => assert_eq!(name, "unknown nvcompStatus_t"),
            }
        }
    }

    #[test]
    fn a_refused_zstd_chunk_is_reported_as_each_mode_says() {
        use Status as S;
        let bad = S::nvcompErrorCannotDecompress;
        let results = [
            (S::nvcompSuccess, 100, false),
            (bad, 0, true),
            (S::nvcompSuccess, 100, false),
        ];
        // The caller's zero fill, and a marker to see what is left untouched.
        let untouched = S(777);
        let run = |mode| {
            let mut statuses = [untouched; 3];
            let mut sizes = [7usize; 3];
            let call = report(mode, &results, &mut statuses, &mut sizes);
            (call, statuses, sizes)
        };
        let ok = S::nvcompSuccess;
        assert_eq!(
            run(ZstdCorrupt::Sizes),
            (ok, [untouched, bad, untouched], [7, 7, 7])
        );
        assert_eq!(
            run(ZstdCorrupt::Statuses),
            (ok, [bad, bad, bad], [100, 0, 100])
        );
        assert_eq!(
            run(ZstdCorrupt::Call),
            (S::nvcompErrorCudaError, [untouched; 3], [7; 3])
        );
        assert_eq!(run(ZstdCorrupt::Chunk), (ok, [ok, bad, ok], [100, 0, 100]));
    }
}
