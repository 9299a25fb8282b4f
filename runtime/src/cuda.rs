//! CUDA through cudarc's result layer (the dynamically loaded driver API): whether CUDA works in
//! this process, the context of each device buffer (its own, or its device's primary context)
//! pushed on the threads that move its data (and popped again, so the caller's context is left as
//! it was), and the few calls the driver makes (pointer queries, copies, pinned memory, streams
//! per context). Also the one place where CUDA return codes become errors, which name the code
//! (cuFile's have theirs beside it, in `cufile`).
//!
//! cudarc panics when libcuda or one of its symbols is missing, so `init` asks
//! `is_culib_present()` before anything else and every call goes through `call`, which turns a
//! panic into an error.

use cudarc::driver::{result, sys, DriverError};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

pub use sys::CUdeviceptr;

/// Which way bytes move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// File to memory (host to device for a copy).
    Read,
    /// Memory to file (device to host for a copy).
    Write,
}

impl Direction {
    /// "read" or "write", for error messages.
    pub fn name(self) -> &'static str {
        match self {
            Direction::Read => "read",
            Direction::Write => "write",
        }
    }
}

/// What this process's CUDA looks like, once it is known to work.
#[derive(Debug)]
pub struct CudaDriver {
    pub driver_version: i32,
    pub device_count: i32,
    /// Names of all devices, by ordinal.
    pub device_names: Vec<String>,
    context: usize,
    /// The process that initialised CUDA: in a fork of it, CUDA's state is undefined.
    pid: u32,
}

/// A failed CUDA call: the call, and the name of the code it returned.
#[derive(Clone, Debug)]
pub struct CudaError {
    call: &'static str,
    detail: String,
}

impl std::fmt::Display for CudaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.call, self.detail)
    }
}

impl std::error::Error for CudaError {}

impl CudaError {
    /// A failure of `call` (a CUDA function, or what was being done) for `detail`.
    pub fn new(call: &'static str, detail: impl Into<String>) -> Self {
        CudaError {
            call,
            detail: detail.into(),
        }
    }

    /// The failed call, or what was being done.
    pub fn call(&self) -> &'static str {
        self.call
    }

    /// What went wrong: the name of the code returned, or why the call could not be made.
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// A CUDA driver result. cudarc's `CUresult` is a Rust enum whose `Debug` form is the code's
    /// name, so naming it needs no call into libcuda.
    fn driver(call: &'static str, err: DriverError) -> Self {
        Self::new(call, format!("{:?}", err.0))
    }
}

/// The name libcuda gives a `CUresult` number. cudarc's enum cannot hold a number the CUDA
/// version it was built for does not list, so the number goes to `cuGetErrorName` as a plain
/// int (which fails on unknown values rather than misbehaving).
pub(crate) fn result_name(code: c_int) -> String {
    type GetErrorName = unsafe extern "C" fn(c_int, *mut *const c_char) -> c_int;
    let mut name: *const c_char = std::ptr::null();
    // SAFETY: CUDA works, so cudarc's libcuda is loaded and has this symbol with this signature;
    // on success `name` points at a NUL-terminated static string.
    let named = cuda().is_ok().then(|| unsafe {
        let get = sys::culib().get::<GetErrorName>(b"cuGetErrorName\0").ok()?;
        (get(code, &mut name) == 0 && !name.is_null()).then(|| CStr::from_ptr(name))
    });
    match named.flatten() {
        Some(name) => name.to_string_lossy().into_owned(),
        None => format!("CUDA result {code}"),
    }
}

/// Runs a cudarc call, naming the code of a failure and turning a panic (cudarc's reaction to a
/// missing library or symbol) into an error. Every CUDA call of the workspace goes through here.
pub fn call<T>(
    name: &'static str,
    f: impl FnOnce() -> Result<T, DriverError>,
) -> Result<T, CudaError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result.map_err(|e| CudaError::driver(name, e)),
        Err(payload) => Err(CudaError::new(
            name,
            panic_text(payload.as_ref()).unwrap_or_else(|| "panicked".into()),
        )),
    }
}

/// The text of a caught panic's payload.
pub fn panic_text(payload: &(dyn std::any::Any + Send)) -> Option<String> {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
}

fn init() -> Result<CudaDriver, CudaError> {
    if !call("is_culib_present", || {
        // SAFETY: only tries to dlopen libcuda under its usual names.
        Ok(unsafe { sys::is_culib_present() })
    })? {
        return Err(CudaError::new(
            "loading libcuda",
            "no CUDA driver library (libcuda.so.1) found",
        ));
    }
    call("cuInit", result::init)?;
    let driver_version = call("cuDriverGetVersion", || {
        let mut version = 0;
        // SAFETY: a valid out-pointer (cudarc's result layer has no wrapper for this call).
        unsafe { sys::cuDriverGetVersion(&mut version) }
            .result()
            .map(|()| version)
    })?;
    let device_count = call("cuDeviceGetCount", result::device::get_count)?;
    if device_count < 1 {
        return Err(CudaError::new("cuDeviceGetCount", "no CUDA device"));
    }
    let device_names = (0..device_count)
        .map(|ordinal| {
            call("cuDeviceGetName", || {
                result::device::get_name(result::device::get(ordinal)?)
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let device = call("cuDeviceGet", || result::device::get(0))?;
    // SAFETY: a device handle from cuDeviceGet; the context is retained for the process.
    let context = call("cuDevicePrimaryCtxRetain", || unsafe {
        result::primary_ctx::retain(device)
    })?;
    Ok(CudaDriver {
        driver_version,
        device_count,
        device_names,
        context: context as usize,
        pid: crate::process::id(),
    })
}

static CUDA: OnceLock<Result<CudaDriver, CudaError>> = OnceLock::new();

/// CUDA for this process: libcuda loads, `cuInit` succeeds and a device exists. Decided once;
/// in a process forked after that, an error (`forked_from`).
pub fn cuda() -> Result<&'static CudaDriver, CudaError> {
    let driver = CUDA.get_or_init(init).as_ref().map_err(Clone::clone)?;
    match forked_from() {
        Some(parent) => Err(forked_error(parent)),
        None => Ok(driver),
    }
}

/// The process that initialised CUDA, when this process is a fork of it. CUDA and cuFile keep
/// no state valid across `fork`: "CUDA does not duplicate any of its internal data structures
/// or threads to other processes upon a call to fork. Any use of CUDA after a call to fork and
/// before a subsequent call to exec has undefined behavior" (CUDA C++ guidelines, rule on
/// fork; the CUDA C++ Programming Guide likewise). So in such a child nothing calls into CUDA
/// or cuFile again, not even to clean up: contexts, streams, pinned buffers and cuFile handles
/// inherited from the parent are left alone.
pub fn forked_from() -> Option<u32> {
    match CUDA.get() {
        Some(Ok(driver)) if driver.pid != crate::process::id() => Some(driver.pid),
        _ => None,
    }
}

fn forked_error(parent: u32) -> CudaError {
    CudaError::new(
        "CUDA after fork",
        format!(
            "this process ({}) is a fork of process {parent}, which initialised CUDA; CUDA and \
             cuFile state is undefined in a forked child, so device memory cannot be used here \
             (host buffers still work); start workers that need the GPU with the spawn or \
             forkserver method",
            crate::process::id()
        ),
    )
}

/// A context (a buffer's, or device 0's primary context), current on this thread while the value
/// lives. The driver runs on
/// its caller's threads, whose current context belongs to the caller (a PyTorch or CuPy user on
/// another device, a context of their own, or none): so the context is pushed onto the thread's
/// context stack, unless it is already current, and popped again on drop, leaving the stack as
/// it was found (CUDA Driver API, Context Management: `cuCtxPushCurrent` "pushes the given
/// context ctx onto the CPU thread's stack of current contexts", `cuCtxPopCurrent` "pops the
/// current CUDA context from the CPU thread ... the previous current context is made current";
/// KvikIO pushes and pops around its calls the same way).
#[must_use = "the context is current only while the value lives"]
pub struct CurrentContext {
    pushed: bool,
    // Popping must happen on the thread that pushed.
    _not_send: std::marker::PhantomData<*const ()>,
}

/// Makes device 0's primary context current on this thread until the returned value is dropped
/// (for calls tied to no buffer: opening cuFile, registering files, pinned host memory).
pub fn enter_context() -> Result<CurrentContext, CudaError> {
    enter(primary_context(0)?)
}

/// Makes `context` current on this thread until the returned value is dropped: pushed unless it
/// is current already, popped on drop.
pub fn enter(context: DeviceContext) -> Result<CurrentContext, CudaError> {
    let ours = context.handle as sys::CUcontext;
    let current = call("cuCtxGetCurrent", result::ctx::get_current)?;
    let pushed = current != Some(ours);
    if pushed {
        call("cuCtxPushCurrent", || {
            // SAFETY: a context retained by this process or named by the driver for a live
            // allocation (cudarc's result layer has no wrapper for this call).
            unsafe { sys::cuCtxPushCurrent_v2(ours) }.result()
        })?;
    }
    Ok(CurrentContext {
        pushed,
        _not_send: std::marker::PhantomData,
    })
}

/// A CUDA context the driver works in, and its device: the context a device buffer was allocated
/// in, or, for memory that names none (stream-ordered pools, VMM mappings), the primary context
/// of the buffer's device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceContext {
    handle: usize,
    pub device: i32,
}

impl DeviceContext {
    /// The context a face's cudarc `stream` belongs to, and its device (array-io's arrays live
    /// in it).
    pub fn of_stream(stream: &cudarc::driver::CudaStream) -> DeviceContext {
        let context = stream.context();
        DeviceContext {
            handle: context.cu_ctx() as usize,
            device: context.ordinal() as i32,
        }
    }
}

/// Device `device`'s primary context, retained on first use and never released (releasing it at
/// exit races other users of the device; KvikIO keeps its primary contexts the same way).
pub fn primary_context(device: i32) -> Result<DeviceContext, CudaError> {
    let driver = cuda()?;
    if device == 0 {
        return Ok(DeviceContext {
            handle: driver.context,
            device,
        });
    }
    if !(0..driver.device_count).contains(&device) {
        return Err(CudaError::new(
            "cuDeviceGet",
            format!(
                "no device {device} (this process sees {})",
                driver.device_count
            ),
        ));
    }
    static RETAINED: std::sync::Mutex<Vec<(i32, usize)>> = std::sync::Mutex::new(Vec::new());
    let mut retained = RETAINED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(&(_, handle)) = retained.iter().find(|(d, _)| *d == device) {
        return Ok(DeviceContext { handle, device });
    }
    let dev = call("cuDeviceGet", || result::device::get(device))?;
    // SAFETY: a device handle from cuDeviceGet; the context is retained for the process.
    let handle = call("cuDevicePrimaryCtxRetain", || unsafe {
        result::primary_ctx::retain(dev)
    })? as usize;
    retained.push((device, handle));
    Ok(DeviceContext { handle, device })
}

impl Drop for CurrentContext {
    fn drop(&mut self) {
        if !self.pushed {
            return;
        }
        let mut popped: sys::CUcontext = std::ptr::null_mut();
        let result = call("cuCtxPopCurrent", || {
            // SAFETY: a valid out-pointer; this thread pushed a context in `enter_context`.
            unsafe { sys::cuCtxPopCurrent_v2(&mut popped) }.result()
        });
        if let Err(err) = result {
            tracing::warn!("{err}: the calling thread's CUDA context may not be restored");
        }
    }
}

/// Where a buffer lives, as the CUDA driver reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PointerKind {
    /// Ordinary or pinned host memory, or memory CUDA does not know.
    Host,
    /// Device or managed memory.
    Device(DeviceRange),
}

/// The device memory around a pointer: one allocation, or for VMM and pool memory one mapping
/// (never a range that spans mappings, which cuFile and copies cannot take as one buffer), with
/// the context to move it in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceRange {
    pub base: CUdeviceptr,
    pub size: usize,
    pub context: DeviceContext,
    /// CU_POINTER_ATTRIBUTE_BUFFER_ID, "a process-wide unique ID for an allocated memory
    /// region": a cached range is used again only while the memory there still has this id.
    pub id: u64,
    /// Managed (unified) memory: cuFile documents device and host buffers only (`cufile.h`:
    /// `bufPtr_base` is the "base address of buffer in device or host memory", and
    /// CU_FILE_CUDA_MEMORY_TYPE_INVALID is "invalid pointer memory type"), so it is staged.
    pub managed: bool,
    /// What CUDA's range attributes (CU_POINTER_ATTRIBUTE_RANGE_START_ADDR/_SIZE) name: the
    /// allocation, or for VMM and pool memory possibly the whole address reservation. The
    /// bounds a caller's array must stay inside (the Python extension checks them).
    pub allocation: (CUdeviceptr, usize),
}

impl DeviceRange {
    /// One past the last address of the range.
    pub fn end(&self) -> CUdeviceptr {
        self.base + self.size as CUdeviceptr
    }
}

/// Asks the driver what `ptr` is. Unknown pointers are host memory.
///
/// The context is the pointer's own (CU_POINTER_ATTRIBUTE_CONTEXT, "the CUcontext in which ptr
/// was allocated or registered"); memory from stream-ordered pools (`cuMemAllocAsync`) and VMM
/// mappings (`cuMemCreate`/`cuMemMap`) belongs to a device, not a context, and reports none, so
/// the primary context of its device (CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL) serves, as in KvikIO.
/// The bounds are those of the mapping holding `ptr` (CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR and
/// _MAPPING_SIZE, CUDA 12): for VMM and pool memory the range attributes
/// (CU_POINTER_ATTRIBUTE_RANGE_START_ADDR/_SIZE) may describe the whole address reservation,
/// parts of which are unmapped or mapped to other allocations. Where the mapping attributes are
/// not known (older drivers), `cuMemGetAddressRange` in the pointer's context gives the
/// allocation, and the range attributes are the last resort.
pub fn query_pointer(ptr: usize) -> Result<PointerKind, CudaError> {
    if let Some(parent) = forked_from() {
        return Err(forked_error(parent));
    }
    use sys::CUpointer_attribute as A;
    let mut attrs = [
        A::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        A::CU_POINTER_ATTRIBUTE_IS_MANAGED,
        A::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        A::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
        A::CU_POINTER_ATTRIBUTE_CONTEXT,
        A::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        A::CU_POINTER_ATTRIBUTE_BUFFER_ID,
    ];
    let mut memory_type: u32 = 0;
    // C bools, written as one byte.
    let mut managed: u8 = 0;
    let mut start: CUdeviceptr = 0;
    let mut size: usize = 0;
    let mut context: sys::CUcontext = std::ptr::null_mut();
    let mut ordinal: c_int = -1;
    let mut id: u64 = 0;
    let mut data: [*mut c_void; 7] = [
        (&mut memory_type as *mut u32).cast(),
        (&mut managed as *mut u8).cast(),
        (&mut start as *mut CUdeviceptr).cast(),
        (&mut size as *mut usize).cast(),
        (&mut context as *mut sys::CUcontext).cast(),
        (&mut ordinal as *mut c_int).cast(),
        (&mut id as *mut u64).cast(),
    ];
    // SAFETY: each data slot points at storage of its attribute's documented type.
    unsafe { pointer_attributes(ptr as CUdeviceptr, &mut attrs, &mut data) }?;
    let managed = managed != 0;
    let device = memory_type == sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32 || managed;
    if !device || size == 0 {
        return Ok(PointerKind::Host);
    }
    let allocation = (start, size);
    let context = if context.is_null() {
        primary_context(ordinal)?
    } else {
        DeviceContext {
            handle: context as usize,
            device: ordinal,
        }
    };
    let holds_ptr = |&(base, size): &(CUdeviceptr, usize)| {
        (base..base + size as CUdeviceptr).contains(&(ptr as CUdeviceptr))
    };
    let (base, size) = mapping_of(ptr)
        .or_else(|| address_range(context, ptr).filter(holds_ptr))
        .or_else(|| Some((start, size)).filter(holds_ptr))
        .ok_or_else(|| {
            CudaError::new(
                "cuPointerGetAttributes",
                format!("device memory at {ptr:#x}, but no range the driver names holds it"),
            )
        })?;
    Ok(PointerKind::Device(DeviceRange {
        base,
        size,
        context,
        id,
        managed,
        allocation,
    }))
}

/// `cuPointerGetAttributes`: each of `attrs` written to the storage its slot of `data` points at
/// (cudarc's result layer has no wrapper for this call). The plural query writes defaults for
/// memory CUDA does not know instead of failing.
///
/// # Safety
/// `data[i]` must point at storage of the C type of `attrs[i]`.
unsafe fn pointer_attributes(
    ptr: CUdeviceptr,
    attrs: &mut [sys::CUpointer_attribute],
    data: &mut [*mut c_void],
) -> Result<(), CudaError> {
    assert_eq!(attrs.len(), data.len(), "one storage slot per attribute");
    call("cuPointerGetAttributes", || {
        // SAFETY: the caller's contract; the counts match (asserted above).
        unsafe {
            sys::cuPointerGetAttributes(
                attrs.len() as u32,
                attrs.as_mut_ptr(),
                data.as_mut_ptr(),
                ptr,
            )
        }
        .result()
    })
}

/// CU_POINTER_ATTRIBUTE_BUFFER_ID of the memory at `ptr`, if CUDA knows it.
pub fn buffer_id(ptr: usize) -> Option<u64> {
    if forked_from().is_some() {
        return None;
    }
    let mut id: u64 = 0;
    let attr = sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_BUFFER_ID;
    // SAFETY: `id` is storage of the attribute's type (unsigned long long).
    call("cuPointerGetAttribute", || unsafe {
        sys::cuPointerGetAttribute((&mut id as *mut u64).cast(), attr, ptr as CUdeviceptr).result()
    })
    .ok()
    .map(|()| id)
}

/// The mapping holding `ptr` (CUDA 12's mapping attributes), if the driver knows them.
fn mapping_of(ptr: usize) -> Option<(CUdeviceptr, usize)> {
    use sys::CUpointer_attribute as A;
    let mut base: CUdeviceptr = 0;
    let mut size: usize = 0;
    for (attr, out) in [
        (
            A::CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR,
            (&mut base as *mut CUdeviceptr).cast::<c_void>(),
        ),
        (
            A::CU_POINTER_ATTRIBUTE_MAPPING_SIZE,
            (&mut size as *mut usize).cast::<c_void>(),
        ),
    ] {
        // SAFETY: `out` points at storage of the attribute's type (CUdeviceptr, size_t).
        let known = call("cuPointerGetAttribute", || unsafe {
            sys::cuPointerGetAttribute(out, attr, ptr as CUdeviceptr).result()
        });
        known.ok()?;
    }
    (size > 0 && (base..base + size as CUdeviceptr).contains(&(ptr as CUdeviceptr)))
        .then_some((base, size))
}

/// `cuMemGetAddressRange` for `ptr`, asked in `context` (the allocation must be visible there).
fn address_range(context: DeviceContext, ptr: usize) -> Option<(CUdeviceptr, usize)> {
    let _context = enter(context).ok()?;
    let (mut base, mut size): (CUdeviceptr, usize) = (0, 0);
    // SAFETY: valid out-pointers (cudarc's result layer has no wrapper for this call).
    call("cuMemGetAddressRange", || unsafe {
        sys::cuMemGetAddressRange_v2(&mut base, &mut size, ptr as CUdeviceptr).result()
    })
    .ok()?;
    (size > 0).then_some((base, size))
}

/// What kind of device memory a buffer is, as far as cuFile's refusals go: its device and
/// whether it is managed memory (cuFile refuses by memory type and by context, never by
/// address).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferKind {
    pub device: i32,
    pub managed: bool,
}

impl std::fmt::Display for BufferKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = if self.managed { "managed" } else { "device" };
        write!(f, "{what} memory of device {}", self.device)
    }
}

/// The kind of the device memory at `ptr`.
pub fn buffer_kind(ptr: CUdeviceptr) -> Result<BufferKind, CudaError> {
    use sys::CUpointer_attribute as A;
    if let Some(parent) = forked_from() {
        return Err(forked_error(parent));
    }
    let mut attrs = [
        A::CU_POINTER_ATTRIBUTE_IS_MANAGED,
        A::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
    ];
    let mut managed: u32 = 0;
    let mut device: c_int = -1;
    let mut data: [*mut c_void; 2] = [
        (&mut managed as *mut u32).cast(),
        (&mut device as *mut c_int).cast(),
    ];
    // SAFETY: each data slot points at storage of its attribute's documented type (a C bool is
    // written into the low byte of the zeroed u32).
    unsafe { pointer_attributes(ptr, &mut attrs, &mut data) }?;
    Ok(BufferKind {
        device,
        managed: managed != 0,
    })
}

/// `CU_STREAM_LEGACY`: the legacy default stream, whichever default stream the caller's code
/// was built for.
const LEGACY_STREAM: usize = 0x1;

/// Waits for the work queued on the current context's legacy default stream (and so on the
/// blocking streams, which synchronize with it).
fn synchronize_legacy_stream() -> Result<(), CudaError> {
    call("cuStreamSynchronize", || {
        // SAFETY: CU_STREAM_LEGACY is a valid stream handle in every context.
        unsafe { result::stream::synchronize(LEGACY_STREAM as sys::CUstream) }
    })
}

/// Orders a device transfer after the work the caller queued on the legacy default stream: a
/// write must not read a buffer before the kernel or upload producing it has finished (the
/// driver reads it through cuFile or on its own non-blocking streams, which do not wait for the
/// legacy stream), nor a read fill one still in use. Work on the caller's own non-blocking
/// streams is the caller's to finish before calling HDF5 (docs/driver.md, "Streams"). In `context`, the buffer's:
/// each context has its own legacy stream.
pub fn wait_for_legacy_stream(context: DeviceContext) -> Result<(), CudaError> {
    let _context = enter(context)?;
    synchronize_legacy_stream()
}

/// Copies between any two buffers CUDA can address (unified addressing), in `context` (the
/// device side's), and waits until the bytes are in place: `cuMemcpy` runs on the legacy stream and, from pageable memory to the
/// device or between device buffers, "the DMA to final destination may not have completed" when
/// it returns (CUDA Driver API, "API synchronization behavior").
///
/// # Safety
/// Both ranges must be valid for `len` bytes.
pub unsafe fn copy_any(
    context: DeviceContext,
    dst: usize,
    src: usize,
    len: usize,
) -> Result<(), CudaError> {
    let _context = enter(context)?;
    call("cuMemcpy", || {
        // SAFETY: the caller's contract (cudarc's result layer has no unified-address copy).
        unsafe { sys::cuMemcpy(dst as CUdeviceptr, src as CUdeviceptr, len) }.result()
    })?;
    synchronize_legacy_stream()
}

/// Sets `len` bytes of device memory to zero, in `context` (the memory's), and waits until they are: "the synchronous memset
/// functions are asynchronous with respect to the host" for device memory (CUDA Driver API,
/// "API synchronization behavior").
///
/// # Safety
/// `dst` must be device memory of at least `len` bytes.
pub unsafe fn zero_device(
    context: DeviceContext,
    dst: CUdeviceptr,
    len: usize,
) -> Result<(), CudaError> {
    let _context = enter(context)?;
    // SAFETY: the caller's contract.
    call("cuMemsetD8", || unsafe {
        result::memset_d8_sync(dst, 0, len)
    })?;
    synchronize_legacy_stream()
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
        let _context = enter_context()?;
        // Portable: bounce buffers serve buffers of every device, and cuMemHostAlloc's memory is
        // pinned only for the allocating context without CU_MEMHOSTALLOC_PORTABLE ("The memory
        // returned by this call will be considered as pinned memory by all CUDA contexts, not
        // just the one that performed the allocation", CUDA Driver API, cuMemHostAlloc).
        let flags = sys::CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: portable pinned memory; the bytes are only ever used as u8.
        let ptr = call("cuMemHostAlloc", || unsafe {
            result::malloc_host(len, flags)
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
        // Without a context the buffer cannot be freed: it is left allocated, and logged.
        let freed = enter_context().and_then(|_context| {
            // SAFETY: allocated by cuMemHostAlloc in `new` and freed once.
            call("cuMemFreeHost", || unsafe {
                result::free_host(self.ptr.cast())
            })
        });
        if let Err(err) = freed {
            tracing::debug!("{err}");
        }
    }
}

/// A CUDA stream made by `thread_streams`, and the context it belongs to (a stream is used with
/// its own context current: `cuStreamCreate` makes it in the current context, and
/// `cuStreamGetCtx` "returns the CUDA context that the stream is associated with").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stream {
    handle: usize,
    context: DeviceContext,
}

impl Stream {
    fn raw(self) -> sys::CUstream {
        self.handle as sys::CUstream
    }
}

/// Two non-blocking streams of `context` for this thread's pipelined staged copies, made on first
/// use. They are never destroyed: a pool thread may still hold them while the process exits.
pub fn thread_streams(context: DeviceContext) -> Result<[Stream; 2], CudaError> {
    thread_local! {
        /// (context, its two streams), one entry per context this thread has staged for.
        static STREAMS: std::cell::RefCell<Vec<(usize, [usize; 2])>> =
            const { std::cell::RefCell::new(Vec::new()) };
    }
    let stream = |handle| Stream { handle, context };
    let known = STREAMS.with(|s| {
        s.borrow()
            .iter()
            .find(|(ctx, _)| *ctx == context.handle)
            .map(|(_, streams)| *streams)
    });
    if let Some(streams) = known {
        return Ok(streams.map(stream));
    }
    let _context = enter(context)?;
    let mut made = [0usize; 2];
    for slot in &mut made {
        let kind = result::stream::StreamKind::NonBlocking;
        *slot = call("cuStreamCreate", || result::stream::create(kind))? as usize;
    }
    STREAMS.with(|s| s.borrow_mut().push((context.handle, made)));
    Ok(made.map(stream))
}

/// Starts a copy of `len` bytes on `stream` between pinned host memory `host` and device memory
/// `dev` (of the stream's context): host to device for a read (the file's bytes go to the
/// device), device to host for a write.
///
/// # Safety
/// `host` must be valid for `len` bytes and stay so, untouched by anything else, until `stream`
/// is synchronized; `dev` must be device memory of at least `len` bytes.
pub unsafe fn copy_async(
    dir: Direction,
    host: *mut u8,
    dev: CUdeviceptr,
    len: usize,
    stream: Stream,
) -> Result<(), CudaError> {
    let _context = enter(stream.context)?;
    let stream = stream.raw();
    // SAFETY: the caller's contract.
    unsafe {
        match dir {
            Direction::Read => call("cuMemcpyHtoDAsync", || {
                result::memcpy_htod_async(dev, std::slice::from_raw_parts(host, len), stream)
            }),
            Direction::Write => call("cuMemcpyDtoHAsync", || {
                result::memcpy_dtoh_async(std::slice::from_raw_parts_mut(host, len), dev, stream)
            }),
        }
    }
}

/// Waits for the work queued on a caller's stream, given by its raw `CUstream` handle (the
/// legacy and per-thread default streams, 1 and 2, and the null stream mean everything queued in
/// the current context), with the stream's context current.
pub fn synchronize_handle(stream: u64) -> Result<(), CudaError> {
    if stream <= 2 {
        return call("cuCtxSynchronize", result::ctx::synchronize);
    }
    call("cuStreamSynchronize", || {
        // SAFETY: the caller names a live stream of the current context (the CUDA Array
        // Interface v3 and DLPack producers promise it); a stale handle is an error from CUDA.
        unsafe { sys::cuStreamSynchronize(stream as sys::CUstream) }.result()
    })
}

/// Waits for everything queued on `stream`.
pub fn synchronize(stream: Stream) -> Result<(), CudaError> {
    let _context = enter(stream.context)?;
    // SAFETY: the stream was created by `thread_streams` and is never destroyed.
    call("cuStreamSynchronize", || unsafe {
        result::stream::synchronize(stream.raw())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_code() {
        let err = CudaError::driver(
            "cuMemAlloc",
            DriverError(sys::CUresult::CUDA_ERROR_INVALID_VALUE),
        );
        assert_eq!(err.to_string(), "cuMemAlloc: CUDA_ERROR_INVALID_VALUE");
    }
}
