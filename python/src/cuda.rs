//! The CUDA calls `h5gds.read`/`h5gds.write` make for device arrays, through cudarc's result
//! layer: what an address is (device memory, which device, which allocation), the array's
//! device's primary context pushed and popped again (the caller's context is left as found),
//! stream and context synchronisation, pinned staging memory and synchronous copies.
//!
//! cudarc panics when libcuda or a symbol is missing; every call goes through `call`, which
//! turns a panic into an error, and nothing runs before `h5gds::cuda()` says CUDA works.

use cudarc::driver::{result, sys, DriverError};
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs a cudarc call, naming it in the error of a failure or a panic.
fn call<T>(name: &str, f: impl FnOnce() -> Result<T, DriverError>) -> Result<T, String> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(err)) => Err(format!("{name} failed: {err:?}")),
        Err(_) => Err(format!("{name}: the CUDA driver library lacks this call")),
    }
}

/// What CUDA knows about an address.
#[derive(Clone, Copy, Debug)]
pub struct Pointer {
    /// Device (or managed) memory, as opposed to host memory or an unknown address.
    pub device: bool,
    /// The device the memory belongs to (-2 when CUDA does not know the address).
    pub ordinal: i32,
    /// The allocation holding the address.
    pub base: u64,
    pub size: usize,
}

/// Asks CUDA what `address` is. Unknown addresses come back as host memory of ordinal -2.
pub fn pointer(address: u64) -> Result<Pointer, String> {
    use sys::CUpointer_attribute as A;
    let mut attrs = [
        A::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        A::CU_POINTER_ATTRIBUTE_IS_MANAGED,
        A::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        A::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        A::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
    ];
    // Booleans are written as one byte (C bool): zero-initialised wider storage holds them.
    let mut memory_type: u32 = 0;
    let mut managed: u32 = 0;
    let mut ordinal: i32 = -2;
    let mut base: u64 = 0;
    let mut size: usize = 0;
    let mut data: [*mut c_void; 5] = [
        (&mut memory_type as *mut u32).cast(),
        (&mut managed as *mut u32).cast(),
        (&mut ordinal as *mut i32).cast(),
        (&mut base as *mut u64).cast(),
        (&mut size as *mut usize).cast(),
    ];
    call("cuPointerGetAttributes", || {
        // SAFETY: five attributes, each with storage of its C type; the plural query writes
        // defaults for memory CUDA does not know instead of failing.
        unsafe {
            sys::cuPointerGetAttributes(
                attrs.len() as u32,
                attrs.as_mut_ptr(),
                data.as_mut_ptr(),
                address,
            )
        }
        .result()
    })?;
    let device = memory_type == sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32 || managed != 0;
    Ok(Pointer {
        device,
        ordinal,
        base,
        size,
    })
}

/// A device's primary context, current on this thread while the value lives (pushed, and popped
/// on drop, so the thread's context stack is left as found).
#[must_use = "the context is current only while the value lives"]
pub struct Context {
    device: sys::CUdevice,
    // Popping must happen on the thread that pushed.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Context {
    pub fn enter(ordinal: i32) -> Result<Context, String> {
        let device = call("cuDeviceGet", || result::device::get(ordinal))?;
        // SAFETY: a device handle from cuDeviceGet; released in drop.
        let context = call("cuDevicePrimaryCtxRetain", || unsafe {
            result::primary_ctx::retain(device)
        })?;
        if let Err(err) = call("cuCtxPushCurrent", || {
            // SAFETY: a context retained above.
            unsafe { sys::cuCtxPushCurrent_v2(context) }.result()
        }) {
            // SAFETY: balances the retain above.
            let _ = call("cuDevicePrimaryCtxRelease", || unsafe {
                result::primary_ctx::release(device)
            });
            return Err(err);
        }
        Ok(Context {
            device,
            _not_send: std::marker::PhantomData,
        })
    }

    /// Waits for `stream` (a CUstream handle; the legacy and per-thread default streams, 1 and
    /// 2, and the null stream mean everything queued in the context).
    pub fn synchronize(&self, stream: u64) -> Result<(), String> {
        if stream <= 2 {
            return call("cuCtxSynchronize", result::ctx::synchronize);
        }
        call("cuStreamSynchronize", || {
            // SAFETY: the array's producer names a live stream of this context (CUDA Array
            // Interface v3); a stale handle is an error from the driver.
            unsafe { sys::cuStreamSynchronize(stream as sys::CUstream) }.result()
        })
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        let mut popped: sys::CUcontext = std::ptr::null_mut();
        let _ = call("cuCtxPopCurrent", || {
            // SAFETY: a valid out-pointer; this thread pushed in `enter`.
            unsafe { sys::cuCtxPopCurrent_v2(&mut popped) }.result()
        });
        let device = self.device;
        // SAFETY: balances the retain in `enter`.
        let _ = call("cuDevicePrimaryCtxRelease", || unsafe {
            result::primary_ctx::release(device)
        });
    }
}

/// Pinned host memory of the current context, freed on drop.
pub struct Pinned {
    ptr: *mut u8,
    len: usize,
}

impl Pinned {
    /// `len` (> 0) bytes of pinned host memory; needs a current context.
    pub fn new(len: usize) -> Result<Pinned, String> {
        // SAFETY: plain pinned memory (flags 0); freed in drop.
        let ptr = call("cuMemHostAlloc", || unsafe { result::malloc_host(len, 0) })?;
        Ok(Pinned {
            ptr: ptr.cast(),
            len,
        })
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        let ptr = self.ptr;
        // SAFETY: memory from cuMemHostAlloc, no copy pending (all copies here are
        // synchronous).
        let _ = call("cuMemFreeHost", || unsafe { result::free_host(ptr.cast()) });
    }
}

/// Copies `len` bytes from host `src` to device `dst`, finished when this returns.
///
/// # Safety
/// `src` must be valid for `len` bytes; `dst` is checked by CUDA.
pub unsafe fn copy_to_device(dst: u64, src: *const u8, len: usize) -> Result<(), String> {
    call("cuMemcpyHtoD", || {
        // SAFETY: as the caller guarantees.
        unsafe { sys::cuMemcpyHtoD_v2(dst, src.cast(), len) }.result()
    })
}

/// Copies `len` bytes from device `src` to host `dst`, finished when this returns.
///
/// # Safety
/// `dst` must be valid for writing `len` bytes; `src` is checked by CUDA.
pub unsafe fn copy_from_device(dst: *mut u8, src: u64, len: usize) -> Result<(), String> {
    call("cuMemcpyDtoH", || {
        // SAFETY: as the caller guarantees.
        unsafe { sys::cuMemcpyDtoH_v2(dst.cast(), src, len) }.result()
    })
}
