//! Stream-ordered CUDA work for code that holds cudarc's safe types (`CudaStream`, `CudaSlice`):
//! the GPU codec and array-io. Every call goes through [`cuda::call`], so a missing library or
//! symbol is an error like any failed call, and a failure names the CUDA result.

use crate::cuda::{call, CudaError};
use cudarc::driver::{sys, CudaSlice, DevicePtr};
use std::sync::Arc;

/// cudarc's stream, named here for crates that reach CUDA only through the runtime (the engine
/// hands a face's stream to the GPU codec).
pub use cudarc::driver::CudaStream;

/// Device `device`'s default stream (of its primary context), for GPU work on a face's memory
/// that came with no stream of its own.
pub fn default_stream(device: i32) -> Result<Arc<CudaStream>, CudaError> {
    let context = call("making the device's context", || {
        cudarc::driver::CudaContext::new(device as usize)
    })?;
    Ok(context.default_stream())
}

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

/// A device buffer of `len` bytes (at least 1) set to zero in `stream`'s order, and its address.
pub fn zeroed(
    stream: &Arc<CudaStream>,
    len: usize,
) -> Result<(CudaSlice<u8>, sys::CUdeviceptr), CudaError> {
    let slice = call("allocating device memory", || {
        stream.alloc_zeros::<u8>(len.max(1))
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

/// A copy of up to three dimensions between two row-major layouts, in bytes: `depth` slices of
/// `height` rows of `width` bytes. Row `y` of slice `z` starts `(z * src_rows + y) * src_pitch`
/// bytes after `src` at the source, and likewise at the destination: slices are whole arrays of
/// `src_rows` (`dst_rows`) rows, as CUDA's 3-D copies describe them. A plain copy is one row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Strided {
    pub src: u64,
    pub dst: u64,
    pub width: usize,
    pub height: usize,
    pub depth: usize,
    pub src_pitch: usize,
    pub dst_pitch: usize,
    pub src_rows: usize,
    pub dst_rows: usize,
}

impl Strided {
    /// `len` contiguous bytes from `src` to `dst`.
    pub fn run(src: u64, dst: u64, len: usize) -> Strided {
        Strided {
            src,
            dst,
            width: len,
            height: 1,
            depth: 1,
            src_pitch: len,
            dst_pitch: len,
            src_rows: 1,
            dst_rows: 1,
        }
    }

    /// The same copy the other way round.
    pub fn reversed(&self) -> Strided {
        Strided {
            src: self.dst,
            dst: self.src,
            src_pitch: self.dst_pitch,
            dst_pitch: self.src_pitch,
            src_rows: self.dst_rows,
            dst_rows: self.src_rows,
            ..*self
        }
    }

    /// Each row's (source offset, destination offset, bytes), slice by slice.
    pub fn rows(&self) -> impl Iterator<Item = (u64, u64, usize)> + '_ {
        (0..self.depth).flat_map(move |z| {
            (0..self.height).map(move |y| {
                let (s, d) = (
                    (z * self.src_rows + y) * self.src_pitch,
                    (z * self.dst_rows + y) * self.dst_pitch,
                );
                (self.src + s as u64, self.dst + d as u64, self.width)
            })
        })
    }
}

/// Copies `s` from device memory at `src` to device memory at `dst` (both bases of `s`'s
/// offsets), in `stream`'s order, in one call: `cuMemcpy2DAsync` or `cuMemcpy3DAsync` for rows
/// and slices. CUDA documents that copies within device memory "may fail for pitches not
/// computed by cuMemAllocPitch" (CUDA Driver API, cuMemcpy2D), and refuses pitches above
/// `CU_DEVICE_ATTRIBUTE_MAX_PITCH`; where it refuses the arguments, the rows are copied one call
/// each instead.
pub fn copy_strided_on_device(
    stream: &Arc<CudaStream>,
    dst: sys::CUdeviceptr,
    src: sys::CUdeviceptr,
    s: &Strided,
) -> Result<(), CudaError> {
    if s.width == 0 || s.height == 0 || s.depth == 0 {
        return Ok(());
    }
    if s.height == 1 && s.depth == 1 {
        return copy_on_device(stream, dst + s.dst, src + s.src, s.width);
    }
    let device = sys::CUmemorytype::CU_MEMORYTYPE_DEVICE;
    let status = call("copying on the device", || {
        stream.context().bind_to_thread()?;
        let (from, to) = (src + s.src, dst + s.dst);
        let null = std::ptr::null_mut();
        if s.depth == 1 {
            let p = sys::CUDA_MEMCPY2D {
                srcXInBytes: 0,
                srcY: 0,
                srcMemoryType: device,
                srcHost: null,
                srcDevice: from,
                srcArray: null.cast(),
                srcPitch: s.src_pitch,
                dstXInBytes: 0,
                dstY: 0,
                dstMemoryType: device,
                dstHost: null,
                dstDevice: to,
                dstArray: null.cast(),
                dstPitch: s.dst_pitch,
                WidthInBytes: s.width,
                Height: s.height,
            };
            // SAFETY: both layouts lie inside live device allocations of this context (the
            // caller's contract for the offsets); the stream is one of its streams.
            Ok(unsafe { sys::cuMemcpy2DAsync_v2(&p, stream.cu_stream()) })
        } else {
            let p = sys::CUDA_MEMCPY3D {
                srcXInBytes: 0,
                srcY: 0,
                srcZ: 0,
                srcLOD: 0,
                srcMemoryType: device,
                srcHost: null,
                srcDevice: from,
                srcArray: null.cast(),
                reserved0: null,
                srcPitch: s.src_pitch,
                srcHeight: s.src_rows,
                dstXInBytes: 0,
                dstY: 0,
                dstZ: 0,
                dstLOD: 0,
                dstMemoryType: device,
                dstHost: null,
                dstDevice: to,
                dstArray: null.cast(),
                reserved1: null,
                dstPitch: s.dst_pitch,
                dstHeight: s.dst_rows,
                WidthInBytes: s.width,
                Height: s.height,
                Depth: s.depth,
            };
            // SAFETY: as above.
            Ok(unsafe { sys::cuMemcpy3DAsync_v2(&p, stream.cu_stream()) })
        }
    })?;
    match status {
        sys::CUresult::CUDA_SUCCESS => Ok(()),
        sys::CUresult::CUDA_ERROR_INVALID_VALUE => s
            .rows()
            .try_for_each(|(from, to, len)| copy_on_device(stream, dst + to, src + from, len)),
        failed => call("copying on the device", || failed.result()),
    }
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

#[cfg(test)]
mod tests {
    use super::Strided;

    #[test]
    fn a_strided_copy_lists_its_rows_slice_by_slice_and_reverses() {
        // Two slices of two rows of 3 bytes: rows 8 bytes apart, slices 3 rows apart at the
        // source; rows 4 apart, slices 2 rows apart at the destination.
        let s = Strided {
            src: 100,
            dst: 7,
            width: 3,
            height: 2,
            depth: 2,
            src_pitch: 8,
            dst_pitch: 4,
            src_rows: 3,
            dst_rows: 2,
        };
        let rows: Vec<_> = s.rows().collect();
        assert_eq!(
            rows,
            [(100, 7, 3), (108, 11, 3), (124, 15, 3), (132, 19, 3)]
        );
        let back: Vec<_> = s.reversed().rows().collect();
        let swapped: Vec<_> = rows.iter().map(|&(a, b, n)| (b, a, n)).collect();
        assert_eq!(back, swapped);
        assert_eq!(
            Strided::run(5, 9, 16).rows().collect::<Vec<_>>(),
            [(5, 9, 16)]
        );
    }
}
