//! The CUDA calls the GPU codec path makes through cudarc, with cudarc's panics (a missing
//! library or symbol) turned into errors: device scratch memory, device-to-device copies, a
//! few bytes brought to the host, stream synchronisation.

use cudarc::driver::{sys, CudaSlice, CudaStream, DevicePtr, DriverError};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// A CUDA or nvCOMP call that failed: what was being done, and what went wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceFailure {
    pub op: String,
    pub message: String,
}

impl DeviceFailure {
    pub fn new(op: impl Into<String>, message: impl std::fmt::Display) -> DeviceFailure {
        DeviceFailure {
            op: op.into(),
            message: message.to_string(),
        }
    }
}

impl std::fmt::Display for DeviceFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed: {}", self.op, self.message)
    }
}

/// The text of a caught panic's payload.
pub fn panic_text(payload: &(dyn std::any::Any + Send)) -> Option<String> {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
}

/// Runs a cudarc call; a panic (cudarc's reaction to a missing library or symbol) becomes an
/// error, as does a failed call.
pub fn cuda<T>(op: &str, f: impl FnOnce() -> Result<T, DriverError>) -> Result<T, DeviceFailure> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(err)) => Err(DeviceFailure::new(op, err)),
        Err(payload) => Err(DeviceFailure::new(
            op,
            panic_text(payload.as_ref()).unwrap_or_else(|| "cudarc panicked".into()),
        )),
    }
}

/// Waits for everything queued on `stream`.
pub fn synchronize(stream: &Arc<CudaStream>) -> Result<(), DeviceFailure> {
    cuda("synchronizing the stream", || stream.synchronize())
}

/// Whether `stream`'s context still works after a failure. A sticky error (an illegal address
/// in a kernel, for one) "leaves the process in an inconsistent state and any further CUDA work
/// will return the same error" (CUDA Driver API, CUDA_ERROR_ILLEGAL_ADDRESS): then nothing more
/// can be run on the device to find out which chunk was at fault.
pub fn context_usable(stream: &Arc<CudaStream>) -> bool {
    cuda("checking the CUDA context", || {
        stream.context().synchronize()
    })
    .is_ok()
}

pub fn align_up(n: usize, align: usize) -> usize {
    n.div_ceil(align) * align
}

/// An uninitialised device buffer of `len` bytes (at least 1) and its address.
pub fn scratch(
    stream: &Arc<CudaStream>,
    len: usize,
) -> Result<(CudaSlice<u8>, sys::CUdeviceptr), DeviceFailure> {
    // SAFETY: the buffer is written (raw chunk reads, copies, decoding) before it is read.
    let slice = cuda(
        "allocating device memory for compressed chunks",
        || unsafe { stream.alloc::<u8>(len.max(1)) },
    )?;
    let (ptr, record) = slice.device_ptr(stream);
    drop(record);
    Ok((slice, ptr))
}

/// Copies `len` device bytes from `src` to `dst`.
pub fn copy_on_device(
    stream: &Arc<CudaStream>,
    dst: sys::CUdeviceptr,
    src: sys::CUdeviceptr,
    len: usize,
) -> Result<(), DeviceFailure> {
    if len == 0 {
        return Ok(());
    }
    cuda("copying on the device", || {
        stream.context().bind_to_thread()?;
        // SAFETY: both ranges lie inside live device allocations of this context.
        unsafe { sys::cuMemcpyDtoD_v2(dst, src, len) }.result()
    })
}

/// Copies `len` bytes from device address `src` to host memory, in `stream`'s order.
///
/// # Safety
/// `dst` must be valid for `len` bytes until the stream has finished the copy; `src` must be
/// device memory of at least `len` bytes.
pub unsafe fn copy_from_device(
    stream: &Arc<CudaStream>,
    dst: *mut u8,
    src: sys::CUdeviceptr,
    len: usize,
) -> Result<(), DeviceFailure> {
    if len == 0 {
        return Ok(());
    }
    cuda("copying from the device", || {
        stream.context().bind_to_thread()?;
        // SAFETY: as the caller guarantees.
        unsafe { sys::cuMemcpyDtoHAsync_v2(dst.cast(), src, len, stream.cu_stream()) }.result()
    })
}

/// `len` bytes of device memory at `src`, on the host (a few framing bytes).
pub fn peek(
    stream: &Arc<CudaStream>,
    src: sys::CUdeviceptr,
    len: usize,
) -> Result<Vec<u8>, DeviceFailure> {
    let mut out = vec![0u8; len];
    // SAFETY: `out` holds len bytes and outlives the synchronisation; `src` is device memory.
    unsafe { copy_from_device(stream, out.as_mut_ptr(), src, len)? };
    synchronize(stream)?;
    Ok(out)
}
