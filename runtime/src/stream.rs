//! Stream-ordered CUDA work for code that holds cudarc's safe types (`CudaStream`, `CudaSlice`):
//! the GPU codec and array-io. Every call goes through [`cuda::call`], so a missing library or
//! symbol is an error like any failed call, and a failure names the CUDA result.

use crate::cuda::{call, CudaError};
use cudarc::driver::{sys, CudaSlice, CudaStream, DevicePtr};
use std::sync::Arc;

/// Waits for everything queued on `stream`.
pub fn synchronize(stream: &Arc<CudaStream>) -> Result<(), CudaError> {
    call("synchronizing the stream", || stream.synchronize())
}

/// Whether `stream`'s context still works after a failure. A sticky error (an illegal address
/// in a kernel, for one) "leaves the process in an inconsistent state and any further CUDA work
/// will return the same error" (CUDA Driver API, CUDA_ERROR_ILLEGAL_ADDRESS): then nothing more
/// can be run on the device to find out which part was at fault.
pub fn context_usable(stream: &Arc<CudaStream>) -> bool {
    call("checking the CUDA context", || {
        stream.context().synchronize()
    })
    .is_ok()
}

/// An uninitialised device buffer of `len` bytes (at least 1) and its address.
pub fn scratch(
    stream: &Arc<CudaStream>,
    len: usize,
) -> Result<(CudaSlice<u8>, sys::CUdeviceptr), CudaError> {
    // SAFETY: the callers write the buffer (raw chunk reads, copies, decoding) before reading it.
    let slice = call("allocating device memory", || unsafe {
        stream.alloc::<u8>(len.max(1))
    })?;
    let (ptr, record) = slice.device_ptr(stream);
    drop(record);
    Ok((slice, ptr))
}

/// A device buffer kept across the batches of one piece of work and grown when a batch needs
/// more: reused, not allocated per batch. Its range is forgotten by the driver's pointer cache
/// when it is freed (`forget_device_range`), since the driver may have been handed it.
#[derive(Default)]
pub struct Scratch {
    held: Option<(CudaSlice<u8>, sys::CUdeviceptr)>,
}

impl Scratch {
    /// The buffer's address, holding at least `len` bytes (at least 1), allocated on `stream`;
    /// a smaller one is freed in `stream`'s order first. Its bytes are uninitialised.
    pub fn at_least(
        &mut self,
        stream: &Arc<CudaStream>,
        len: usize,
    ) -> Result<sys::CUdeviceptr, CudaError> {
        if let Some((slice, ptr)) = &self.held {
            if slice.len() >= len {
                return Ok(*ptr);
            }
        }
        self.release();
        let (slice, ptr) = scratch(stream, len)?;
        self.held = Some((slice, ptr));
        // An allocation from a memory pool (cuMemAllocAsync) may be usable only in `stream`'s
        // order, and the buffer is written by work outside it (the driver's reads): wait until
        // it is. Buffers grow rarely, so this costs little.
        synchronize(stream)?;
        Ok(ptr)
    }

    fn release(&mut self) {
        if let Some((slice, ptr)) = self.held.take() {
            drop(slice);
            crate::device_ranges::forget_device_range(ptr);
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        self.release();
    }
}

/// Copies `len` device bytes from `src` to `dst`, in `stream`'s order.
pub fn copy_on_device(
    stream: &Arc<CudaStream>,
    dst: sys::CUdeviceptr,
    src: sys::CUdeviceptr,
    len: usize,
) -> Result<(), CudaError> {
    if len == 0 {
        return Ok(());
    }
    call("copying on the device", || {
        stream.context().bind_to_thread()?;
        // SAFETY: both ranges lie inside live device allocations of this context; the stream
        // is one of its streams.
        unsafe { sys::cuMemcpyDtoDAsync_v2(dst, src, len, stream.cu_stream()) }.result()
    })
}

/// Copies `len` host bytes to device address `dst`, in `stream`'s order.
///
/// # Safety
/// `src` must be valid for `len` bytes until the stream has finished the copy; `dst` must be
/// device memory of at least `len` bytes.
pub unsafe fn copy_to_device(
    stream: &Arc<CudaStream>,
    dst: sys::CUdeviceptr,
    src: *const u8,
    len: usize,
) -> Result<(), CudaError> {
    if len == 0 {
        return Ok(());
    }
    call("copying to the device", || {
        stream.context().bind_to_thread()?;
        // SAFETY: as the caller guarantees.
        unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src.cast(), len, stream.cu_stream()) }.result()
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
) -> Result<(), CudaError> {
    if len == 0 {
        return Ok(());
    }
    call("copying from the device", || {
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
) -> Result<Vec<u8>, CudaError> {
    let mut out = vec![0u8; len];
    // SAFETY: `out` holds len bytes and outlives the synchronisation; `src` is device memory.
    unsafe { copy_from_device(stream, out.as_mut_ptr(), src, len)? };
    synchronize(stream)?;
    Ok(out)
}
