//! CUDA through cudarc's dynamically loaded driver API: whether CUDA works in this process, the
//! primary context made current on the threads that move device data, and the few calls the
//! driver makes (pointer queries, copies, pinned memory).
//!
//! cudarc panics when libcuda or one of its symbols is missing, so every call goes through
//! `call`, which checks `is_culib_present()` first and turns a panic into an error.

use cudarc::driver::sys;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

pub use sys::CUdeviceptr;

/// What this process's CUDA looks like, once it is known to work.
#[derive(Debug)]
pub struct Cuda {
    pub driver_version: i32,
    pub device_count: i32,
    /// Names of all devices, by ordinal; the driver works with device 0.
    pub device_names: Vec<String>,
    context: usize,
}

/// A failed CUDA call: its name and result code.
#[derive(Clone, Debug)]
pub struct CudaError {
    pub call: &'static str,
    pub detail: String,
}

impl std::fmt::Display for CudaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed: {}", self.call, self.detail)
    }
}

/// Runs a cudarc call, turning a panic (missing library or symbol) into an error.
fn call<T>(name: &'static str, f: impl FnOnce() -> T) -> Result<T, CudaError> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload| CudaError {
        call: name,
        detail: payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panicked".into()),
    })
}

/// Runs a cudarc call returning `CUresult`; anything but success is an error.
fn check(name: &'static str, f: impl FnOnce() -> sys::CUresult) -> Result<(), CudaError> {
    match call(name, f)? {
        sys::CUresult::CUDA_SUCCESS => Ok(()),
        code => Err(CudaError {
            call: name,
            detail: format!("{code:?}"),
        }),
    }
}

fn init() -> Result<Cuda, CudaError> {
    // SAFETY: only tries to dlopen libcuda under its usual names.
    if !call("is_culib_present", || unsafe { sys::is_culib_present() })? {
        return Err(CudaError {
            call: "loading libcuda",
            detail: "no CUDA driver library (libcuda.so.1) found".into(),
        });
    }
    // SAFETY: plain driver API calls with valid out-pointers.
    unsafe {
        check("cuInit", || sys::cuInit(0))?;
        let mut driver_version = 0;
        check("cuDriverGetVersion", || {
            sys::cuDriverGetVersion(&mut driver_version)
        })?;
        let mut device_count = 0;
        check("cuDeviceGetCount", || {
            sys::cuDeviceGetCount(&mut device_count)
        })?;
        if device_count < 1 {
            return Err(CudaError {
                call: "cuDeviceGetCount",
                detail: "no CUDA device".into(),
            });
        }
        let mut device_names = Vec::new();
        for ordinal in 0..device_count {
            let mut device = 0;
            check("cuDeviceGet", || sys::cuDeviceGet(&mut device, ordinal))?;
            let mut name = [0 as std::ffi::c_char; 256];
            check("cuDeviceGetName", || {
                sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as i32, device)
            })?;
            device_names.push(
                std::ffi::CStr::from_ptr(name.as_ptr())
                    .to_string_lossy()
                    .into_owned(),
            );
        }
        let mut device = 0;
        check("cuDeviceGet", || sys::cuDeviceGet(&mut device, 0))?;
        let mut context: sys::CUcontext = std::ptr::null_mut();
        check("cuDevicePrimaryCtxRetain", || {
            sys::cuDevicePrimaryCtxRetain(&mut context, device)
        })?;
        Ok(Cuda {
            driver_version,
            device_count,
            device_names,
            context: context as usize,
        })
    }
}

/// CUDA for this process: libcuda loads, `cuInit` succeeds and a device exists. Decided once.
pub fn cuda() -> Result<&'static Cuda, CudaError> {
    static CUDA: OnceLock<Result<Cuda, CudaError>> = OnceLock::new();
    CUDA.get_or_init(init).as_ref().map_err(Clone::clone)
}

/// Makes device 0's primary context current on this thread (copies need one).
pub fn make_current() -> Result<&'static Cuda, CudaError> {
    let cuda = cuda()?;
    thread_local! {
        static CURRENT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if !CURRENT.with(|c| c.get()) {
        // SAFETY: the context was retained in `init` and is never released.
        check("cuCtxSetCurrent", || unsafe {
            sys::cuCtxSetCurrent(cuda.context as sys::CUcontext)
        })?;
        CURRENT.with(|c| c.set(true));
    }
    Ok(cuda)
}

/// Where a buffer lives, as the CUDA driver reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PointerKind {
    /// Ordinary or pinned host memory, or memory CUDA does not know.
    Host,
    /// Device (or managed) memory: `base` and `size` of the allocation containing the pointer.
    Device { base: CUdeviceptr, size: usize },
}

/// Asks the driver what `ptr` is. Unknown pointers are host memory.
pub fn query_pointer(ptr: usize) -> Result<PointerKind, CudaError> {
    use sys::CUpointer_attribute as A;
    let mut attrs = [
        A::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        A::CU_POINTER_ATTRIBUTE_IS_MANAGED,
        A::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        A::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
    ];
    let mut memory_type: u32 = 0;
    let mut managed: u32 = 0;
    let mut start: CUdeviceptr = 0;
    let mut size: usize = 0;
    let mut data: [*mut c_void; 4] = [
        (&mut memory_type as *mut u32).cast(),
        (&mut managed as *mut u32).cast(),
        (&mut start as *mut CUdeviceptr).cast(),
        (&mut size as *mut usize).cast(),
    ];
    // SAFETY: each data slot points at storage of the attribute's documented type.
    check("cuPointerGetAttributes", || unsafe {
        sys::cuPointerGetAttributes(
            attrs.len() as u32,
            attrs.as_mut_ptr(),
            data.as_mut_ptr(),
            ptr as CUdeviceptr,
        )
    })?;
    let device = memory_type == sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32 || managed != 0;
    Ok(if device && size > 0 {
        PointerKind::Device { base: start, size }
    } else {
        PointerKind::Host
    })
}

/// Copies `len` bytes from host memory to device memory.
///
/// # Safety
/// `src` must be valid for reads of `len` bytes; `dst` must be device memory of that size.
pub unsafe fn copy_to_device(
    dst: CUdeviceptr,
    src: *const u8,
    len: usize,
) -> Result<(), CudaError> {
    make_current()?;
    check("cuMemcpyHtoD", || {
        sys::cuMemcpyHtoD_v2(dst, src.cast(), len)
    })
}

/// Copies `len` bytes from device memory to host memory.
///
/// # Safety
/// `dst` must be valid for writes of `len` bytes; `src` must be device memory of that size.
pub unsafe fn copy_from_device(
    dst: *mut u8,
    src: CUdeviceptr,
    len: usize,
) -> Result<(), CudaError> {
    make_current()?;
    check("cuMemcpyDtoH", || {
        sys::cuMemcpyDtoH_v2(dst.cast(), src, len)
    })
}

/// Copies between any two buffers CUDA can address (unified addressing).
///
/// # Safety
/// Both ranges must be valid for `len` bytes.
pub unsafe fn copy_any(dst: usize, src: usize, len: usize) -> Result<(), CudaError> {
    make_current()?;
    check("cuMemcpy", || {
        sys::cuMemcpy(dst as CUdeviceptr, src as CUdeviceptr, len)
    })
}

/// Sets `len` bytes of device memory to zero.
///
/// # Safety
/// `dst` must be device memory of at least `len` bytes.
pub unsafe fn zero_device(dst: CUdeviceptr, len: usize) -> Result<(), CudaError> {
    make_current()?;
    check("cuMemsetD8", || sys::cuMemsetD8_v2(dst, 0, len))
}

/// Pinned (page-locked) host memory from the CUDA driver.
pub struct PinnedBuffer {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer is plain memory owned by this value; it moves between pool threads whole.
unsafe impl Send for PinnedBuffer {}

impl PinnedBuffer {
    pub fn new(len: usize) -> Result<PinnedBuffer, CudaError> {
        make_current()?;
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; flags 0 = portable-less default pinned memory.
        check("cuMemHostAlloc", || unsafe {
            sys::cuMemHostAlloc(&mut ptr, len, 0)
        })?;
        Ok(PinnedBuffer {
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
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemHostAlloc in `new`; a failure here is only logged.
        if let Err(err) = check("cuMemFreeHost", || unsafe {
            sys::cuMemFreeHost(self.ptr.cast())
        }) {
            tracing::debug!("{err}");
        }
    }
}

/// A CUDA stream made by `thread_streams`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stream(usize);

impl Stream {
    fn raw(self) -> sys::CUstream {
        self.0 as sys::CUstream
    }
}

/// Two non-blocking streams for this thread's pipelined staged copies, made on first use. They
/// are never destroyed: a pool thread may still hold them while the process exits.
pub fn thread_streams() -> Result<[Stream; 2], CudaError> {
    thread_local! {
        static STREAMS: std::cell::Cell<Option<[usize; 2]>> = const { std::cell::Cell::new(None) };
    }
    if let Some(streams) = STREAMS.with(|s| s.get()) {
        return Ok(streams.map(Stream));
    }
    make_current()?;
    let mut made = [0usize; 2];
    for slot in &mut made {
        let mut stream: sys::CUstream = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; flag 1 = CU_STREAM_NON_BLOCKING.
        check("cuStreamCreate", || unsafe {
            sys::cuStreamCreate(&mut stream, 1)
        })?;
        *slot = stream as usize;
    }
    STREAMS.with(|s| s.set(Some(made)));
    Ok(made.map(Stream))
}

/// Starts a host-to-device copy on `stream` (asynchronous from pinned memory).
///
/// # Safety
/// As for `copy_to_device`; `src` must stay valid until `stream` is synchronized.
pub unsafe fn copy_to_device_async(
    dst: CUdeviceptr,
    src: *const u8,
    len: usize,
    stream: Stream,
) -> Result<(), CudaError> {
    make_current()?;
    check("cuMemcpyHtoDAsync", || {
        sys::cuMemcpyHtoDAsync_v2(dst, src.cast(), len, stream.raw())
    })
}

/// Starts a device-to-host copy on `stream` (asynchronous into pinned memory).
///
/// # Safety
/// As for `copy_from_device`; `dst` must not be read until `stream` is synchronized.
pub unsafe fn copy_from_device_async(
    dst: *mut u8,
    src: CUdeviceptr,
    len: usize,
    stream: Stream,
) -> Result<(), CudaError> {
    make_current()?;
    check("cuMemcpyDtoHAsync", || {
        sys::cuMemcpyDtoHAsync_v2(dst.cast(), src, len, stream.raw())
    })
}

/// Waits for everything queued on `stream`.
pub fn synchronize(stream: Stream) -> Result<(), CudaError> {
    // SAFETY: the stream was created by `thread_streams` and is never destroyed.
    check("cuStreamSynchronize", || unsafe {
        sys::cuStreamSynchronize(stream.raw())
    })
}
