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
        Switches {
            fail_call: number("H5GDS_EMU_NVCOMP_FAIL_CALL"),
            fail_chunk: number("H5GDS_EMU_NVCOMP_FAIL_CHUNK"),
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

/// The header's name of a status, as a C string.
pub fn status_cstr(status: Status) -> &'static CStr {
    macro_rules! names {
        ($($name:ident),*) => {
            $(if status == Status::$name {
                return CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes())
                    .unwrap_or(c"nvcompErrorInternal");
            })*
        };
    }
    names!(
        nvcompSuccess,
        nvcompErrorInvalidValue,
        nvcompErrorNotSupported,
        nvcompErrorCannotDecompress,
        nvcompErrorBadChecksum,
        nvcompErrorAlignment,
        nvcompErrorCudaError,
        nvcompErrorInternal
    );
    c"unknown nvcompStatus_t"
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
    // SAFETY (all below): ranges checked against the device allocations by `device`; the
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

/// `nvcompBatched<C>DecompressAsync`.
pub fn decompress(codec: Codec, arrays: Arrays, n: usize, temp: u64, temp_bytes: usize) -> Status {
    if n == 0 {
        return Status::nvcompSuccess;
    }
    if is_nth(&CALLS, switches().fail_call) {
        return Status::nvcompErrorCudaError;
    }
    let align = codec.decompress_alignment();
    let v = match views(&arrays, n, temp, temp_bytes, align) {
        Ok(v) => v,
        Err(status) => return status,
    };
    let Some(capacity) = v.output_capacity else {
        return Status::nvcompErrorInvalidValue;
    };
    for (k, &room) in capacity.iter().enumerate() {
        let (input, output) = (v.inputs[k], v.outputs[k]);
        let (status, written) = if input as usize % align != 0 || output as usize % align != 0 {
            (Status::nvcompErrorAlignment, 0)
        } else {
            // SAFETY: each range is checked against one device allocation.
            let src = unsafe { device::bytes(input, v.input_bytes[k]) };
            let dst = unsafe { device::bytes(output, room) };
            match (src, dst) {
                (Some(src), Some(dst)) => {
                    if is_nth(&CHUNKS, switches().fail_chunk) {
                        dst.fill(POISON);
                        (Status::nvcompErrorCannotDecompress, 0)
                    } else {
                        match codec.decode(src, dst) {
                            Some(len) => (Status::nvcompSuccess, len),
                            None => (Status::nvcompErrorCannotDecompress, 0),
                        }
                    }
                }
                _ => (Status::nvcompErrorInvalidValue, 0),
            }
        };
        v.statuses[k] = status;
        v.output_bytes[k] = written;
    }
    Status::nvcompSuccess
}

/// `nvcompBatched<C>CompressAsync`: each output buffer holds `max_encoded` of its input.
pub fn compress(codec: Codec, arrays: Arrays, n: usize, temp: u64, temp_bytes: usize) -> Status {
    if n == 0 {
        return Status::nvcompSuccess;
    }
    if is_nth(&CALLS, switches().fail_call) {
        return Status::nvcompErrorCudaError;
    }
    let align = codec.compress_alignment();
    let v = match views(&arrays, n, temp, temp_bytes, align) {
        Ok(v) => v,
        Err(status) => return status,
    };
    for k in 0..n {
        let (input, output) = (v.inputs[k], v.outputs[k]);
        let (status, written) = if input as usize % align != 0 || output as usize % align != 0 {
            (Status::nvcompErrorAlignment, 0)
        } else {
            let len = v.input_bytes[k];
            // SAFETY: each range is checked against one device allocation.
            let src = unsafe { device::bytes(input, len) };
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
    Status::nvcompSuccess
}
