//! Behaviour of the CPU-backed CUDA / cuFile emulator (`emulators/cuda`, `libh5gds_emu.so`):
//! it must be honest, or the GPU tests built on it prove nothing. Needs
//! `cargo build -p h5gds-cuda-emulator` first.
//!
//! Most tests load the emulator into this process by absolute path. Tests that need switches
//! (environment variables the emulator reads once) or a fresh, uninitialised emulator re-run
//! this test binary for just themselves (`--exact NAME`) with the switches set: the same test
//! function runs the body in the child and, in the parent, checks that the child passed.

use cufile_sys::{CUfileDescr_t, CUfileDrvProps_t, CUfileError_t, CUfileHandle_t, CUfileOpError};
use h5gds_tests::emulator::{emulator_lib_dir, emulator_library, LIBRARY_ALIASES};
use h5gds_tests::pattern::bytes as pattern;
use h5gds_tests::process::{self, remove_env};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard, OnceLock};

type CUresult = c_int;
type CUdeviceptr = u64;
type CUcontext = *mut c_void;
type CUstream = *mut c_void;
type CUevent = *mut c_void;

const CUDA_SUCCESS: CUresult = 0;
const CUDA_ERROR_INVALID_VALUE: CUresult = 1;
const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
const CUDA_ERROR_NO_DEVICE: CUresult = 100;
const CUDA_ERROR_INVALID_DEVICE: CUresult = 101;
const CUDA_ERROR_INVALID_CONTEXT: CUresult = 201;
const CUDA_ERROR_INVALID_HANDLE: CUresult = 400;
const CUDA_ERROR_NOT_FOUND: CUresult = 500;
const CUDA_ERROR_NOT_SUPPORTED: CUresult = 801;
const CUDA_ERROR_UNKNOWN: CUresult = 999;

const CU_POINTER_ATTRIBUTE_CONTEXT: c_uint = 1;
const CU_POINTER_ATTRIBUTE_MEMORY_TYPE: c_uint = 2;
const CU_POINTER_ATTRIBUTE_DEVICE_POINTER: c_uint = 3;
const CU_POINTER_ATTRIBUTE_HOST_POINTER: c_uint = 4;
const CU_POINTER_ATTRIBUTE_IS_MANAGED: c_uint = 8;
const CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: c_uint = 9;
const CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: c_uint = 11;
const CU_POINTER_ATTRIBUTE_RANGE_SIZE: c_uint = 12;
const CU_MEMORYTYPE_HOST: c_uint = 1;
const CU_MEMORYTYPE_DEVICE: c_uint = 2;

/// The poison byte fresh allocations are filled with.
const POISON: u8 = 0xA5;

/// `h5gds_emu_counters`' output.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Counters {
    live_device_allocations: u64,
    live_device_bytes: u64,
    live_pinned_host_allocations: u64,
    double_frees: u64,
    bounds_violations: u64,
    cufile_reads: u64,
    cufile_writes: u64,
    copies_htod: u64,
    copies_dtoh: u64,
}

macro_rules! emulator_api {
    ($($name:ident: fn($($arg:ty),*) -> $ret:ty;)*) => {
        /// The emulator's exported functions.
        #[allow(non_snake_case)]
        struct Api {
            $($name: unsafe extern "C" fn($($arg),*) -> $ret,)*
            _lib: libloading::Library,
        }

        impl Api {
            #[allow(non_snake_case)]
            fn load(path: &Path) -> Api {
                // SAFETY: the emulator's only initialiser records the process id.
                let lib = unsafe { libloading::Library::new(path) }
                    .unwrap_or_else(|e| panic!("load {}: {e}", path.display()));
                $(
                    // SAFETY: the emulator exports this symbol with this C signature.
                    let $name = unsafe {
                        *lib.get::<unsafe extern "C" fn($($arg),*) -> $ret>(
                            concat!(stringify!($name), "\0").as_bytes(),
                        )
                        .unwrap_or_else(|e| panic!("{}: {e}", stringify!($name)))
                    };
                )*
                Api { $($name,)* _lib: lib }
            }
        }
    };
}

emulator_api! {
    cuInit: fn(c_uint) -> CUresult;
    cuDriverGetVersion: fn(*mut c_int) -> CUresult;
    cuDeviceGetCount: fn(*mut c_int) -> CUresult;
    cuDeviceGet: fn(*mut c_int, c_int) -> CUresult;
    cuDeviceGetName: fn(*mut c_char, c_int, c_int) -> CUresult;
    cuDevicePrimaryCtxRetain: fn(*mut CUcontext, c_int) -> CUresult;
    cuDevicePrimaryCtxRelease_v2: fn(c_int) -> CUresult;
    cuCtxSetCurrent: fn(CUcontext) -> CUresult;
    cuCtxGetCurrent: fn(*mut CUcontext) -> CUresult;
    cuCtxPushCurrent_v2: fn(CUcontext) -> CUresult;
    cuCtxPopCurrent_v2: fn(*mut CUcontext) -> CUresult;
    cuCtxSynchronize: fn() -> CUresult;
    cuMemAlloc_v2: fn(*mut CUdeviceptr, usize) -> CUresult;
    cuMemFree_v2: fn(CUdeviceptr) -> CUresult;
    cuMemHostAlloc: fn(*mut *mut c_void, usize, c_uint) -> CUresult;
    cuMemFreeHost: fn(*mut c_void) -> CUresult;
    cuMemcpyHtoD_v2: fn(CUdeviceptr, *const c_void, usize) -> CUresult;
    cuMemcpyDtoH_v2: fn(*mut c_void, CUdeviceptr, usize) -> CUresult;
    cuMemcpyDtoD_v2: fn(CUdeviceptr, CUdeviceptr, usize) -> CUresult;
    cuMemcpy: fn(CUdeviceptr, CUdeviceptr, usize) -> CUresult;
    cuMemcpyHtoDAsync_v2: fn(CUdeviceptr, *const c_void, usize, CUstream) -> CUresult;
    cuMemcpyDtoHAsync_v2: fn(*mut c_void, CUdeviceptr, usize, CUstream) -> CUresult;
    cuMemcpyDtoDAsync_v2: fn(CUdeviceptr, CUdeviceptr, usize, CUstream) -> CUresult;
    cuMemcpy2DAsync_v2: fn(*const cudarc::driver::sys::CUDA_MEMCPY2D, CUstream) -> CUresult;
    cuMemcpy3DAsync_v2: fn(*const cudarc::driver::sys::CUDA_MEMCPY3D, CUstream) -> CUresult;
    cuMemsetD8_v2: fn(CUdeviceptr, u8, usize) -> CUresult;
    cuPointerGetAttribute: fn(*mut c_void, c_uint, CUdeviceptr) -> CUresult;
    cuPointerGetAttributes: fn(c_uint, *mut c_uint, *mut *mut c_void, CUdeviceptr) -> CUresult;
    cuMemGetAddressRange_v2: fn(*mut CUdeviceptr, *mut usize, CUdeviceptr) -> CUresult;
    cuStreamCreate: fn(*mut CUstream, c_uint) -> CUresult;
    cuStreamDestroy_v2: fn(CUstream) -> CUresult;
    cuStreamSynchronize: fn(CUstream) -> CUresult;
    cuGetErrorString: fn(CUresult, *mut *const c_char) -> CUresult;
    cuGetErrorName: fn(CUresult, *mut *const c_char) -> CUresult;
    cuDeviceGetAttribute: fn(*mut c_int, c_int, c_int) -> CUresult;
    cuMemsetD8Async: fn(CUdeviceptr, u8, usize, CUstream) -> CUresult;
    cuEventCreate: fn(*mut CUevent, c_uint) -> CUresult;
    cuEventDestroy_v2: fn(CUevent) -> CUresult;
    cuEventRecord: fn(CUevent, CUstream) -> CUresult;
    cuEventQuery: fn(CUevent) -> CUresult;
    cuEventSynchronize: fn(CUevent) -> CUresult;
    cuStreamWaitEvent: fn(CUstream, CUevent, c_uint) -> CUresult;
    cuFileDriverOpen: fn() -> CUfileError_t;
    cuFileDriverClose: fn() -> CUfileError_t;
    cuFileDriverClose_v2: fn() -> CUfileError_t;
    cuFileDriverGetProperties: fn(*mut CUfileDrvProps_t) -> CUfileError_t;
    cuFileGetVersion: fn(*mut c_int) -> CUfileError_t;
    cuFileSetParameterString: fn(cufile_sys::CUFileStringConfigParameter_t, *const c_char) -> CUfileError_t;
    cuFileGetParameterString: fn(cufile_sys::CUFileStringConfigParameter_t, *mut c_char, c_int) -> CUfileError_t;
    cuFileHandleRegister: fn(*mut CUfileHandle_t, *mut CUfileDescr_t) -> CUfileError_t;
    cuFileHandleDeregister: fn(CUfileHandle_t) -> ();
    cuFileBufRegister: fn(*const c_void, usize, c_int) -> CUfileError_t;
    cuFileBufDeregister: fn(*const c_void) -> CUfileError_t;
    cuFileRead: fn(CUfileHandle_t, *mut c_void, usize, libc::off_t, libc::off_t) -> isize;
    cuFileWrite: fn(CUfileHandle_t, *const c_void, usize, libc::off_t, libc::off_t) -> isize;
    h5gds_emu_counters: fn(*mut Counters) -> c_int;
    h5gds_emu_report_counter: fn(*const c_char, *mut u64) -> c_int;
    h5gds_emu_enqueue: fn(CUstream, Option<unsafe extern "C" fn(*mut c_void)>, *mut c_void) -> c_int;
    cuFileGetParameterBool: fn(cufile_sys::CUFileBoolConfigParameter_t, *mut bool) -> CUfileError_t;
}

/// Set (to anything) for a child that checks where cuFile's log goes by default.
const DEFAULT_LOG_PLACE: &str = "H5GDS_TEST_DEFAULT_CUFILE_LOG_PLACE";

/// The emulator, loaded once into this process. Its cuFile log is placed in a temporary
/// directory before any test can open the driver, as it would otherwise land in the working
/// directory (the source tree), unless the test checks that default.
fn api() -> &'static Api {
    static API: OnceLock<Api> = OnceLock::new();
    static LOGS: OnceLock<tempfile::TempDir> = OnceLock::new();
    API.get_or_init(|| {
        let api = Api::load(&emulator_library());
        if std::env::var_os(DEFAULT_LOG_PLACE).is_none() {
            let dir = LOGS.get_or_init(|| tempfile::tempdir().unwrap());
            let dir = std::ffi::CString::new(dir.path().to_str().unwrap()).unwrap();
            use cufile_sys::CUFileStringConfigParameter_t as P;
            // SAFETY: a NUL-terminated string; the driver is not open yet.
            let status =
                unsafe { (api.cuFileSetParameterString)(P::CUFILE_PARAM_LOG_DIR, dir.as_ptr()) };
            assert_eq!(status.err, CUfileOpError::CU_FILE_SUCCESS);
        }
        api
    })
}

/// In-process tests share the emulator's global state (counters, allocations): one at a time.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The emulator's name of a `CUresult`, for messages.
fn error_name(code: CUresult) -> String {
    let mut text: *const c_char = std::ptr::null();
    // SAFETY: text is a valid out-pointer; the result is a static C string or null.
    let status = unsafe { (api().cuGetErrorName)(code, &mut text) };
    if status != CUDA_SUCCESS || text.is_null() {
        return format!("unknown CUresult {code}");
    }
    // SAFETY: non-null results are static C strings.
    unsafe { CStr::from_ptr(text) }
        .to_string_lossy()
        .into_owned()
}

#[track_caller]
fn check(code: CUresult) {
    assert_eq!(code, CUDA_SUCCESS, "CUDA call failed: {}", error_name(code));
}

#[track_caller]
fn expect_code(code: CUresult, expected: CUresult) {
    assert_eq!(
        code,
        expected,
        "got {} instead of {}",
        error_name(code),
        error_name(expected)
    );
}

/// Initialises CUDA and makes device 0's primary context current on this thread.
fn init_with_context() -> CUcontext {
    let api = api();
    let mut ctx: CUcontext = std::ptr::null_mut();
    // SAFETY: plain calls with valid out-pointers.
    unsafe {
        check((api.cuInit)(0));
        check((api.cuDevicePrimaryCtxRetain)(&mut ctx, 0));
        check((api.cuCtxSetCurrent)(ctx));
    }
    assert!(!ctx.is_null());
    ctx
}

/// In-process setup: the serial lock, CUDA initialised, a context current on this thread.
fn setup() -> (MutexGuard<'static, ()>, CUcontext) {
    let guard = serial();
    let ctx = init_with_context();
    (guard, ctx)
}

fn counters() -> Counters {
    let mut out = Counters::default();
    // SAFETY: out is a valid Counters.
    assert_eq!(unsafe { (api().h5gds_emu_counters)(&mut out) }, 0);
    out
}

fn alloc(size: usize) -> CUdeviceptr {
    let mut ptr: CUdeviceptr = 0;
    // SAFETY: valid out-pointer.
    check(unsafe { (api().cuMemAlloc_v2)(&mut ptr, size) });
    assert_ne!(ptr, 0);
    ptr
}

fn free(ptr: CUdeviceptr) {
    // SAFETY: plain call.
    check(unsafe { (api().cuMemFree_v2)(ptr) });
}

fn host_alloc(size: usize) -> *mut u8 {
    let mut ptr: *mut c_void = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    check(unsafe { (api().cuMemHostAlloc)(&mut ptr, size, 0) });
    assert!(!ptr.is_null());
    ptr.cast()
}

fn htod(dst: CUdeviceptr, data: &[u8]) -> CUresult {
    // SAFETY: data is valid for its length.
    unsafe { (api().cuMemcpyHtoD_v2)(dst, data.as_ptr().cast(), data.len()) }
}

fn dtoh(src: CUdeviceptr, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    // SAFETY: out is valid for len bytes.
    check(unsafe { (api().cuMemcpyDtoH_v2)(out.as_mut_ptr().cast(), src, len) });
    out
}

fn succeeded(status: &CUfileError_t) -> bool {
    status.err == CUfileOpError::CU_FILE_SUCCESS
}

#[track_caller]
fn expect_cufile(status: CUfileError_t, expected: CUfileOpError) {
    assert_eq!(
        (status.err, status.cu_err),
        (expected, 0),
        "unexpected cuFile status"
    );
}

/// Registers `fd` with cuFile; the error is the status' `(err, cu_err)`.
fn register(fd: c_int) -> Result<CUfileHandle_t, (CUfileOpError, c_int)> {
    // SAFETY: an all-zero descriptor is a valid value; the fields are set below.
    let mut descr: CUfileDescr_t = unsafe { std::mem::zeroed() };
    descr.type_ = cufile_sys::CUfileFileHandleType::CU_FILE_HANDLE_TYPE_OPAQUE_FD;
    descr.handle.fd = fd;
    let mut fh: CUfileHandle_t = std::ptr::null_mut();
    // SAFETY: valid pointers to a handle slot and a descriptor.
    let status = unsafe { (api().cuFileHandleRegister)(&mut fh, &mut descr) };
    if succeeded(&status) {
        Ok(fh)
    } else {
        Err((status.err, status.cu_err))
    }
}

fn file_write(fh: CUfileHandle_t, base: CUdeviceptr, size: usize, off: i64, buf_off: i64) -> isize {
    // SAFETY: the emulator validates the device range itself.
    unsafe { (api().cuFileWrite)(fh, base as *const c_void, size, off, buf_off) }
}

fn file_read(fh: CUfileHandle_t, base: CUdeviceptr, size: usize, off: i64, buf_off: i64) -> isize {
    // SAFETY: the emulator validates the device range itself.
    unsafe { (api().cuFileRead)(fh, base as *mut c_void, size, off, buf_off) }
}

fn errno() -> c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// A temporary file opened read-write, with O_DIRECT if `direct`.
fn temp_file(dir: &Path, name: &str, direct: bool) -> std::fs::File {
    let mut options = std::fs::OpenOptions::new();
    options.read(true).write(true).create(true).truncate(true);
    if direct {
        options.custom_flags(libc::O_DIRECT);
    }
    let path = dir.join(name);
    options.open(&path).unwrap_or_else(|e| {
        panic!(
            "open {} (O_DIRECT: {direct}): {e}; the temporary directory's file system must \
             accept O_DIRECT (set TMPDIR to one that does)",
            path.display()
        )
    })
}

// ---- children: tests that need switches or a fresh process ----

/// Runs `body` in a child process (this test binary, only test `name`) whose environment has
/// `env` and no other `H5GDS_EMU_*` switches. In the parent returns the child's output after
/// checking that it passed; in the child runs `body` and returns `None`.
fn in_child(name: &str, env: &[(&str, &str)], body: impl FnOnce()) -> Option<Output> {
    let configure = |cmd: &mut Command| {
        remove_env(cmd, &["H5GDS_EMU_"]).envs(env.iter().copied());
    };
    process::in_child(name, configure, body)
}

// ---- initialisation and devices ----

#[test]
fn every_call_but_a_few_is_not_initialized_before_cuinit() {
    in_child(
        "every_call_but_a_few_is_not_initialized_before_cuinit",
        &[],
        || {
            let api = api();
            let mut n: c_int = -1;
            let mut ptr: CUdeviceptr = 0;
            let mut ctx: CUcontext = std::ptr::null_mut();
            let mut value: c_uint = 0;
            let mut buf = [0u8; 16];
            // SAFETY: plain calls with valid out-pointers.
            unsafe {
                expect_code((api.cuDeviceGetCount)(&mut n), CUDA_ERROR_NOT_INITIALIZED);
                expect_code((api.cuDeviceGet)(&mut n, 0), CUDA_ERROR_NOT_INITIALIZED);
                expect_code(
                    (api.cuDevicePrimaryCtxRetain)(&mut ctx, 0),
                    CUDA_ERROR_NOT_INITIALIZED,
                );
                expect_code((api.cuCtxGetCurrent)(&mut ctx), CUDA_ERROR_NOT_INITIALIZED);
                expect_code(
                    (api.cuMemAlloc_v2)(&mut ptr, 64),
                    CUDA_ERROR_NOT_INITIALIZED,
                );
                expect_code((api.cuMemFree_v2)(0x1000), CUDA_ERROR_NOT_INITIALIZED);
                expect_code(
                    (api.cuMemcpyHtoD_v2)(0x1000, buf.as_ptr().cast(), 16),
                    CUDA_ERROR_NOT_INITIALIZED,
                );
                expect_code(
                    (api.cuMemcpyDtoH_v2)(buf.as_mut_ptr().cast(), 0x1000, 16),
                    CUDA_ERROR_NOT_INITIALIZED,
                );
                expect_code(
                    (api.cuPointerGetAttribute)(
                        (&mut value as *mut c_uint).cast(),
                        CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                        buf.as_ptr() as CUdeviceptr,
                    ),
                    CUDA_ERROR_NOT_INITIALIZED,
                );
                expect_code((api.cuCtxSynchronize)(), CUDA_ERROR_NOT_INITIALIZED);

                // The exceptions work before cuInit.
                check((api.cuDriverGetVersion)(&mut n));
                assert_eq!(n, 12090);
                assert_eq!(error_name(2), "CUDA_ERROR_OUT_OF_MEMORY");
                let mut text: *const c_char = std::ptr::null();
                check((api.cuGetErrorString)(CUDA_ERROR_NO_DEVICE, &mut text));
                assert_eq!(
                    CStr::from_ptr(text).to_str().unwrap(),
                    "no CUDA-capable device is detected"
                );
                expect_code(
                    (api.cuGetErrorString)(123_456, &mut text),
                    CUDA_ERROR_INVALID_VALUE,
                );
                assert!(text.is_null());

                expect_code((api.cuInit)(1), CUDA_ERROR_INVALID_VALUE);
                check((api.cuInit)(0));
                check((api.cuDeviceGetCount)(&mut n));
                assert_eq!(n, 1);
                // No context yet: memory calls need one.
                expect_code(
                    (api.cuMemAlloc_v2)(&mut ptr, 64),
                    CUDA_ERROR_INVALID_CONTEXT,
                );
            }
        },
    );
}

#[test]
fn devices_contexts_and_streams_behave_like_the_driver() {
    in_child(
        "devices_contexts_and_streams_behave_like_the_driver",
        &[("H5GDS_EMU_DEVICES", "3")],
        || {
            let api = api();
            let mut n: c_int = 0;
            let mut dev: c_int = -1;
            let mut name = [0 as c_char; 64];
            let mut ctx: CUcontext = std::ptr::null_mut();
            let mut ctx2: CUcontext = std::ptr::null_mut();
            let mut current: CUcontext = std::ptr::null_mut();
            let mut stream: CUstream = std::ptr::null_mut();
            // SAFETY: plain calls with valid out-pointers.
            unsafe {
                check((api.cuInit)(0));
                check((api.cuDeviceGetCount)(&mut n));
                assert_eq!(n, 3);
                check((api.cuDeviceGet)(&mut dev, 2));
                assert_eq!(dev, 2);
                expect_code((api.cuDeviceGet)(&mut dev, 3), CUDA_ERROR_INVALID_DEVICE);
                check((api.cuDeviceGetName)(name.as_mut_ptr(), 64, 1));
                assert_eq!(
                    CStr::from_ptr(name.as_ptr()).to_str().unwrap(),
                    "h5gds emulated GPU 1"
                );
                check((api.cuDeviceGetName)(name.as_mut_ptr(), 6, 1));
                assert_eq!(CStr::from_ptr(name.as_ptr()).to_str().unwrap(), "h5gds");

                check((api.cuCtxGetCurrent)(&mut current));
                assert!(current.is_null());
                expect_code((api.cuCtxSynchronize)(), CUDA_ERROR_INVALID_CONTEXT);
                check((api.cuDevicePrimaryCtxRetain)(&mut ctx, 0));
                check((api.cuDevicePrimaryCtxRetain)(&mut ctx2, 1));
                assert_ne!(ctx, ctx2);
                expect_code(
                    (api.cuCtxSetCurrent)(0x1234 as CUcontext),
                    CUDA_ERROR_INVALID_CONTEXT,
                );
                check((api.cuCtxSetCurrent)(ctx2));
                check((api.cuCtxGetCurrent)(&mut current));
                assert_eq!(current, ctx2);
                check((api.cuCtxSynchronize)());

                // Memory records the device of the current context.
                let ptr = alloc(100);
                let mut ordinal: c_int = -1;
                check((api.cuPointerGetAttribute)(
                    (&mut ordinal as *mut c_int).cast(),
                    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                    ptr,
                ));
                assert_eq!(ordinal, 1);
                free(ptr);

                check((api.cuStreamCreate)(&mut stream, 0));
                assert!(!stream.is_null());
                check((api.cuStreamSynchronize)(stream));
                check((api.cuStreamSynchronize)(std::ptr::null_mut()));
                check((api.cuStreamDestroy_v2)(stream));
                expect_code((api.cuStreamSynchronize)(stream), 400);
                expect_code((api.cuStreamDestroy_v2)(stream), 400);

                // Releasing the last reference makes the context unusable.
                check((api.cuDevicePrimaryCtxRelease_v2)(1));
                expect_code((api.cuCtxSynchronize)(), CUDA_ERROR_INVALID_CONTEXT);
                expect_code(
                    (api.cuDevicePrimaryCtxRelease_v2)(1),
                    CUDA_ERROR_INVALID_CONTEXT,
                );
                check((api.cuCtxSetCurrent)(std::ptr::null_mut()));
            }
        },
    );
}

#[test]
fn injected_init_error_fails_cuinit_and_cufile_open() {
    in_child(
        "injected_init_error_fails_cuinit_and_cufile_open",
        &[("H5GDS_EMU_INIT_ERROR", "304")],
        || {
            let api = api();
            let mut n: c_int = 0;
            // SAFETY: plain calls with valid out-pointers.
            unsafe {
                expect_code((api.cuInit)(0), 304);
                expect_code((api.cuDeviceGetCount)(&mut n), CUDA_ERROR_NOT_INITIALIZED);
                let status = (api.cuFileDriverOpen)();
                assert_eq!(status.err, CUfileOpError::CU_FILE_CUDA_DRIVER_ERROR);
                assert_eq!(status.cu_err, 304);
            }
        },
    );
}

#[test]
fn no_device_fails_cuinit_and_cufile_open() {
    in_child(
        "no_device_fails_cuinit_and_cufile_open",
        &[("H5GDS_EMU_DEVICES", "0")],
        || {
            let api = api();
            // SAFETY: plain calls.
            unsafe {
                expect_code((api.cuInit)(0), CUDA_ERROR_NO_DEVICE);
                let status = (api.cuFileDriverOpen)();
                assert_eq!(status.err, CUfileOpError::CU_FILE_CUDA_DRIVER_ERROR);
                assert_eq!(status.cu_err, CUDA_ERROR_NO_DEVICE);
            }
        },
    );
}

// ---- device memory ----

#[test]
fn data_round_trips_through_device_memory() {
    let (_serial, _ctx) = setup();
    let api = api();
    let before = counters();
    let size = 1 << 20;
    let a = alloc(size);
    let b = alloc(size);
    // Fresh device memory is garbage, not zeros.
    assert!(dtoh(a, 4096).iter().all(|&x| x == POISON));

    let data = pattern(size, 7);
    check(htod(a, &data));
    assert_eq!(dtoh(a, size), data);
    // Interior pointers work for both directions.
    assert_eq!(dtoh(a + 1000, 100), data[1000..1100]);
    check(htod(a + 5, &[1, 2, 3]));
    assert_eq!(dtoh(a + 4, 5), [data[4], 1, 2, 3, data[8]]);

    // SAFETY: plain calls; host buffers are valid for the lengths given.
    unsafe {
        check((api.cuMemcpyDtoD_v2)(b, a, size));
        assert_eq!(dtoh(b + 4, 5), [data[4], 1, 2, 3, data[8]]);
        check((api.cuMemsetD8_v2)(b + 10, 0x42, 20));
        let got = dtoh(b, 40);
        assert!(got[10..30].iter().all(|&x| x == 0x42));
        assert_eq!(got[30..40], data[30..40]);

        // cuMemcpy classifies each end itself.
        let host = pattern(256, 99);
        let mut back = vec![0u8; 256];
        check((api.cuMemcpy)(b + 64, host.as_ptr() as CUdeviceptr, 256));
        check((api.cuMemcpy)(
            back.as_mut_ptr() as CUdeviceptr,
            b + 64,
            256,
        ));
        assert_eq!(back, host);
        let mut copy = vec![0u8; 256];
        check((api.cuMemcpy)(
            copy.as_mut_ptr() as CUdeviceptr,
            host.as_ptr() as CUdeviceptr,
            256,
        ));
        assert_eq!(copy, host);

        // Async copies are complete when they return, on any valid stream.
        let mut stream: CUstream = std::ptr::null_mut();
        check((api.cuStreamCreate)(&mut stream, 0));
        let more = pattern(512, 3);
        check((api.cuMemcpyHtoDAsync_v2)(
            a,
            more.as_ptr().cast(),
            512,
            stream,
        ));
        let mut back = vec![0u8; 512];
        check((api.cuMemcpyDtoHAsync_v2)(
            back.as_mut_ptr().cast(),
            a,
            512,
            std::ptr::null_mut(),
        ));
        assert_eq!(back, more);
        expect_code(
            (api.cuMemcpyHtoDAsync_v2)(a, more.as_ptr().cast(), 512, 0xdead0 as CUstream),
            400,
        );
        check((api.cuStreamDestroy_v2)(stream));

        // Pinned host memory is ordinary, page-aligned, writable memory.
        let pinned = host_alloc(10_000);
        assert_eq!(pinned as usize % 4096, 0);
        std::ptr::write_bytes(pinned, 0x11, 10_000);
        check((api.cuMemcpyHtoD_v2)(a, pinned.cast_const().cast(), 10_000));
        assert!(dtoh(a, 10_000).iter().all(|&x| x == 0x11));
        check((api.cuMemFreeHost)(pinned.cast()));
    }

    let mid = counters();
    assert_eq!(
        mid.live_device_allocations,
        before.live_device_allocations + 2
    );
    assert_eq!(
        mid.live_device_bytes,
        before.live_device_bytes + 2 * size as u64
    );
    free(a);
    free(b);
    let after = counters();
    // htod: 2 HtoD, 1 cuMemcpy, 1 async, 1 from pinned; dtoh: 7 DtoH, 1 cuMemcpy, 1 async.
    assert_eq!(after.copies_htod - before.copies_htod, 5);
    assert_eq!(after.copies_dtoh - before.copies_dtoh, 9);
    assert_eq!(
        after.live_device_allocations,
        before.live_device_allocations
    );
    assert_eq!(after.live_device_bytes, before.live_device_bytes);
    assert_eq!(
        after.live_pinned_host_allocations,
        before.live_pinned_host_allocations
    );
    assert_eq!(after.bounds_violations, before.bounds_violations);
}

#[test]
fn copies_outside_an_allocation_are_rejected_and_counted() {
    let (_serial, _ctx) = setup();
    let api = api();
    let before = counters();
    let a = alloc(4096);
    let b = alloc(4096);
    let data = pattern(8192, 1);
    let mut sink = vec![0u8; 8192];
    // SAFETY: plain calls; host buffers are valid for the lengths given.
    unsafe {
        expect_code(htod(a, &data[..4097]), CUDA_ERROR_INVALID_VALUE);
        expect_code(
            (api.cuMemcpyDtoH_v2)(sink.as_mut_ptr().cast(), a + 4000, 200),
            CUDA_ERROR_INVALID_VALUE,
        );
        expect_code(
            (api.cuMemsetD8_v2)(a + 1, 0, 4096),
            CUDA_ERROR_INVALID_VALUE,
        );
        expect_code(
            (api.cuMemcpyDtoD_v2)(b, a + 1, 4096),
            CUDA_ERROR_INVALID_VALUE,
        );
        // Device memory passed as the host side is a violation too.
        expect_code(
            (api.cuMemcpyHtoD_v2)(a, b as *const c_void, 16),
            CUDA_ERROR_INVALID_VALUE,
        );
        // A pointer into no allocation at all.
        expect_code(htod(0x10, &data[..16]), CUDA_ERROR_INVALID_VALUE);
        expect_code(
            (api.cuMemcpy)(a + 4090, data.as_ptr() as CUdeviceptr, 16),
            CUDA_ERROR_INVALID_VALUE,
        );
    }
    let after = counters();
    assert_eq!(after.bounds_violations - before.bounds_violations, 7);
    // Nothing was written by the rejected calls.
    assert!(dtoh(a, 4096).iter().all(|&x| x == POISON));
    assert!(dtoh(b, 4096).iter().all(|&x| x == POISON));
    assert_eq!(counters().copies_htod, before.copies_htod);
    // The exact end of an allocation is fine.
    check(htod(a + 4000, &data[..96]));
    free(a);
    free(b);
}

#[test]
fn double_frees_are_rejected_and_counted() {
    let (_serial, _ctx) = setup();
    let api = api();
    let before = counters();
    let a = alloc(1000);
    let pinned = host_alloc(1000);
    // SAFETY: plain calls.
    unsafe {
        expect_code((api.cuMemFree_v2)(a + 8), CUDA_ERROR_INVALID_VALUE);
        check((api.cuMemFree_v2)(a));
        expect_code((api.cuMemFree_v2)(a), CUDA_ERROR_INVALID_VALUE);
        expect_code((api.cuMemFree_v2)(0xbad000), CUDA_ERROR_INVALID_VALUE);
        check((api.cuMemFreeHost)(pinned.cast()));
        expect_code((api.cuMemFreeHost)(pinned.cast()), CUDA_ERROR_INVALID_VALUE);
    }
    let after = counters();
    assert_eq!(after.double_frees - before.double_frees, 4);
    assert_eq!(
        after.live_device_allocations,
        before.live_device_allocations
    );
    assert_eq!(
        after.live_pinned_host_allocations,
        before.live_pinned_host_allocations
    );
}

#[test]
fn calls_from_a_thread_without_a_context_fail() {
    let (_serial, ctx) = setup();
    let ctx = ctx as usize;
    std::thread::spawn(move || {
        let api = api();
        let mut ptr: CUdeviceptr = 0;
        // SAFETY: plain calls with valid out-pointers.
        unsafe {
            expect_code(
                (api.cuMemAlloc_v2)(&mut ptr, 64),
                CUDA_ERROR_INVALID_CONTEXT,
            );
            check((api.cuCtxSetCurrent)(ctx as CUcontext));
            check((api.cuMemAlloc_v2)(&mut ptr, 64));
            check((api.cuMemFree_v2)(ptr));
        }
    })
    .join()
    .expect("the thread's checks pass");
}

// ---- what cudarc's safe API needs: attributes, events, stream waits, async memset ----

#[test]
fn device_attributes_answer_only_what_an_emulated_device_can() {
    let (_serial, _ctx) = setup();
    let api = api();
    let get = |attrib: c_int, dev: c_int| {
        let mut value: c_int = -7;
        // SAFETY: a valid out-pointer.
        let status = unsafe { (api.cuDeviceGetAttribute)(&mut value, attrib, dev) };
        (status, value)
    };
    assert_eq!(get(41, 0), (CUDA_SUCCESS, 1), "unified addressing");
    assert_eq!(get(75, 0), (CUDA_SUCCESS, 8), "compute capability major");
    assert_eq!(get(76, 0), (CUDA_SUCCESS, 0), "compute capability minor");
    assert_eq!(get(115, 0), (CUDA_SUCCESS, 0), "no memory pools");
    // cuMemAllocManaged works (see emulators/cuda/src/cuda_vmm.rs); no concurrent access.
    assert_eq!(get(83, 0), (CUDA_SUCCESS, 1), "managed memory");
    assert_eq!(get(116, 0), (CUDA_SUCCESS, 1), "GDS present by default");
    // Attributes it cannot answer honestly fail loudly, and leave the output alone.
    assert_eq!(get(1, 0), (CUDA_ERROR_NOT_SUPPORTED, -7));
    assert_eq!(get(0, 0), (CUDA_ERROR_INVALID_VALUE, -7));
    assert_eq!(get(41, 1), (CUDA_ERROR_INVALID_DEVICE, -7));
    // SAFETY: a null output pointer is rejected, not written.
    expect_code(
        unsafe { (api.cuDeviceGetAttribute)(std::ptr::null_mut(), 41, 0) },
        CUDA_ERROR_INVALID_VALUE,
    );
}

#[test]
fn events_and_stream_waits_check_handles_flags_and_context() {
    let (_serial, _ctx) = setup();
    let api = api();
    let mut stream: CUstream = std::ptr::null_mut();
    let mut events: Vec<CUevent> = Vec::new();
    // SAFETY: plain calls with valid out-pointers; handles are only passed back.
    unsafe {
        check((api.cuStreamCreate)(&mut stream, 1));
        for flags in [0, 1, 2, 2 | 4] {
            let mut event: CUevent = std::ptr::null_mut();
            check((api.cuEventCreate)(&mut event, flags));
            assert!(!event.is_null());
            events.push(event);
        }
        let mut unused: CUevent = std::ptr::null_mut();
        // INTERPROCESS needs DISABLE_TIMING; unknown bits are rejected.
        expect_code(
            (api.cuEventCreate)(&mut unused, 4),
            CUDA_ERROR_INVALID_VALUE,
        );
        expect_code(
            (api.cuEventCreate)(&mut unused, 8),
            CUDA_ERROR_INVALID_VALUE,
        );
        expect_code(
            (api.cuEventCreate)(std::ptr::null_mut(), 0),
            CUDA_ERROR_INVALID_VALUE,
        );
        let event = events[0];
        check((api.cuEventRecord)(event, std::ptr::null_mut()));
        check((api.cuEventRecord)(event, stream));
        check((api.cuEventQuery)(event));
        check((api.cuEventSynchronize)(event));
        check((api.cuStreamWaitEvent)(stream, event, 0));
        check((api.cuStreamWaitEvent)(std::ptr::null_mut(), event, 1));
        expect_code(
            (api.cuStreamWaitEvent)(stream, event, 2),
            CUDA_ERROR_INVALID_VALUE,
        );
        expect_code(
            (api.cuEventRecord)(event, 0xdead0 as CUstream),
            CUDA_ERROR_INVALID_HANDLE,
        );
        for &e in &events {
            check((api.cuEventDestroy_v2)(e));
        }
        // Destroyed events are unknown handles everywhere.
        expect_code((api.cuEventDestroy_v2)(event), CUDA_ERROR_INVALID_HANDLE);
        expect_code(
            (api.cuEventRecord)(event, stream),
            CUDA_ERROR_INVALID_HANDLE,
        );
        expect_code((api.cuEventQuery)(event), CUDA_ERROR_INVALID_HANDLE);
        expect_code((api.cuEventSynchronize)(event), CUDA_ERROR_INVALID_HANDLE);
        expect_code(
            (api.cuStreamWaitEvent)(stream, event, 0),
            CUDA_ERROR_INVALID_HANDLE,
        );
        check((api.cuStreamDestroy_v2)(stream));
    }
    // Creating or recording an event needs a current context, as with the driver.
    std::thread::spawn(|| {
        let mut event: CUevent = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        unsafe {
            expect_code(
                (self::api().cuEventCreate)(&mut event, 0),
                CUDA_ERROR_INVALID_CONTEXT,
            );
        }
    })
    .join()
    .expect("the thread's checks pass");
}

#[test]
fn async_memset_sets_bytes_inside_one_allocation_only() {
    let (_serial, _ctx) = setup();
    let api = api();
    let before = counters();
    let ptr = alloc(64);
    check(htod(ptr, &[0u8; 64]));
    // SAFETY: plain calls; the emulator checks every device range.
    unsafe {
        check((api.cuMemsetD8Async)(ptr + 8, 7, 16, std::ptr::null_mut()));
        check((api.cuMemsetD8Async)(ptr, 9, 0, std::ptr::null_mut()));
        expect_code(
            (api.cuMemsetD8Async)(ptr + 60, 1, 8, std::ptr::null_mut()),
            CUDA_ERROR_INVALID_VALUE,
        );
        expect_code(
            (api.cuMemsetD8Async)(ptr, 1, 8, 0xdead0 as CUstream),
            CUDA_ERROR_INVALID_HANDLE,
        );
    }
    let mut want = vec![0u8; 64];
    want[8..24].fill(7);
    assert_eq!(dtoh(ptr, 64), want);
    free(ptr);
    assert_eq!(counters().bounds_violations - before.bounds_violations, 1);
}

#[test]
fn concurrent_copies_from_many_threads_stay_correct() {
    let (_serial, ctx) = setup();
    let ctx = ctx as usize;
    let before = counters();
    let threads: Vec<_> = (0..8u8)
        .map(|t| {
            std::thread::spawn(move || {
                // SAFETY: plain call.
                check(unsafe { (api().cuCtxSetCurrent)(ctx as CUcontext) });
                for round in 0..20u8 {
                    let size = 4096 + usize::from(t) * 1000 + usize::from(round);
                    let ptr = alloc(size);
                    let data = pattern(size, t.wrapping_mul(17).wrapping_add(round));
                    check(htod(ptr, &data));
                    assert_eq!(dtoh(ptr, size), data);
                    free(ptr);
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("every thread's data round-trips");
    }
    let after = counters();
    assert_eq!(after.copies_htod - before.copies_htod, 160);
    assert_eq!(after.copies_dtoh - before.copies_dtoh, 160);
    assert_eq!(
        after.live_device_allocations,
        before.live_device_allocations
    );
}

// ---- pointer queries ----

/// The plural query for the eight attributes the project uses.
#[derive(Debug, Default, PartialEq, Eq)]
struct Attributes {
    context: usize,
    memory_type: c_uint,
    device_pointer: u64,
    host_pointer: usize,
    is_managed: u8,
    device_ordinal: c_int,
    range_start: u64,
    range_size: usize,
}

fn attributes(ptr: CUdeviceptr) -> Attributes {
    let mut a = Attributes {
        context: 7,
        memory_type: 7,
        device_pointer: 7,
        host_pointer: 7,
        is_managed: 7,
        device_ordinal: 7,
        range_start: 7,
        range_size: 7,
    };
    let mut kinds = [
        CU_POINTER_ATTRIBUTE_CONTEXT,
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
        CU_POINTER_ATTRIBUTE_HOST_POINTER,
        CU_POINTER_ATTRIBUTE_IS_MANAGED,
        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        CU_POINTER_ATTRIBUTE_RANGE_SIZE,
    ];
    let mut data: [*mut c_void; 8] = [
        (&mut a.context as *mut usize).cast(),
        (&mut a.memory_type as *mut c_uint).cast(),
        (&mut a.device_pointer as *mut u64).cast(),
        (&mut a.host_pointer as *mut usize).cast(),
        (&mut a.is_managed as *mut u8).cast(),
        (&mut a.device_ordinal as *mut c_int).cast(),
        (&mut a.range_start as *mut u64).cast(),
        (&mut a.range_size as *mut usize).cast(),
    ];
    // SAFETY: eight attributes, each with storage of its C type.
    check(unsafe { (api().cuPointerGetAttributes)(8, kinds.as_mut_ptr(), data.as_mut_ptr(), ptr) });
    a
}

fn attribute<T: Default>(kind: c_uint, ptr: CUdeviceptr) -> Result<T, CUresult> {
    let mut value = T::default();
    // SAFETY: value is storage of the attribute's C type (the caller picks T accordingly).
    let code = unsafe { (api().cuPointerGetAttribute)((&mut value as *mut T).cast(), kind, ptr) };
    if code == CUDA_SUCCESS {
        Ok(value)
    } else {
        Err(code)
    }
}

#[test]
fn pointer_queries_answer_like_the_driver() {
    let (_serial, ctx) = setup();
    let api = api();
    let size = 3 * 4096 + 5;
    let dev = alloc(size);
    let pinned = host_alloc(1000) as usize;

    let expected_device = |ptr: u64| Attributes {
        context: ctx as usize,
        memory_type: CU_MEMORYTYPE_DEVICE,
        device_pointer: ptr,
        host_pointer: 0,
        is_managed: 0,
        device_ordinal: 0,
        range_start: dev,
        range_size: size,
    };
    assert_eq!(attributes(dev), expected_device(dev));
    assert_eq!(attributes(dev + 5000), expected_device(dev + 5000));
    assert_eq!(
        attributes(dev + size as u64 - 1),
        expected_device(dev + size as u64 - 1)
    );
    assert_eq!(
        attribute::<c_uint>(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dev + 77),
        Ok(CU_MEMORYTYPE_DEVICE)
    );
    assert_eq!(
        attribute::<u64>(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, dev + 77),
        Ok(dev)
    );
    // Device memory has no host pointer.
    assert_eq!(
        attribute::<usize>(CU_POINTER_ATTRIBUTE_HOST_POINTER, dev),
        Err(CUDA_ERROR_INVALID_VALUE)
    );

    let pinned_attrs = attributes(pinned as u64 + 10);
    assert_eq!(
        pinned_attrs,
        Attributes {
            context: ctx as usize,
            memory_type: CU_MEMORYTYPE_HOST,
            device_pointer: pinned as u64 + 10,
            host_pointer: pinned + 10,
            is_managed: 0,
            device_ordinal: 0,
            range_start: pinned as u64,
            range_size: 1000,
        }
    );

    // Memory CUDA does not know: the plural query succeeds with defaults, the singular fails.
    let stack_value = [0u8; 64];
    let unknown = stack_value.as_ptr() as u64;
    assert_eq!(
        attributes(unknown),
        Attributes {
            device_ordinal: -2,
            ..Attributes::default()
        }
    );
    assert_eq!(
        attribute::<c_uint>(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, unknown),
        Err(CUDA_ERROR_INVALID_VALUE)
    );
    // One past the end is not part of the allocation.
    assert_eq!(attributes(dev + size as u64).memory_type, 0);

    let mut base: CUdeviceptr = 0;
    let mut len: usize = 0;
    // SAFETY: plain calls with valid out-pointers.
    unsafe {
        check((api.cuMemGetAddressRange_v2)(
            &mut base,
            &mut len,
            dev + 4097,
        ));
        assert_eq!((base, len), (dev, size));
        check((api.cuMemGetAddressRange_v2)(
            std::ptr::null_mut(),
            &mut len,
            dev,
        ));
        expect_code(
            (api.cuMemGetAddressRange_v2)(&mut base, &mut len, unknown),
            CUDA_ERROR_NOT_FOUND,
        );
        check((api.cuMemFreeHost)(pinned as *mut c_void));
    }
    free(dev);
    // Freed memory is unknown again.
    assert_eq!(attributes(dev).memory_type, 0);
    assert_eq!(
        attribute::<c_uint>(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dev),
        Err(CUDA_ERROR_INVALID_VALUE)
    );
}

// ---- device memory is not host memory ----

/// Forks; the child reads one byte at `addr` and exits 0 if it survives. Returns the child's
/// wait status.
fn read_in_forked_child(addr: usize) -> c_int {
    // SAFETY: the child only resets a signal disposition, reads one byte and _exits: no
    // allocation, no locks.
    unsafe {
        let pid = libc::fork();
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            libc::signal(libc::SIGSEGV, libc::SIG_DFL);
            let byte = std::ptr::read_volatile(addr as *const u8);
            libc::_exit(if byte == POISON { 0 } else { 3 });
        }
        let mut status: c_int = 0;
        assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
        status
    }
}

#[test]
fn host_code_dereferencing_device_memory_dies_of_sigsegv() {
    let (_serial, _ctx) = setup();
    let dev = alloc(4096);
    let pinned = host_alloc(4096);

    let status = read_in_forked_child(dev as usize + 100);
    assert!(
        libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSEGV,
        "reading device memory from the host did not crash with SIGSEGV (status {status:#x})"
    );
    // The control: pinned host memory is readable (and poisoned, like device memory).
    let status = read_in_forked_child(pinned as usize + 100);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "reading pinned host memory failed (status {status:#x})"
    );
    // The emulator itself still sees the data.
    assert!(dtoh(dev + 100, 1)[0] == POISON);
    free(dev);
    // SAFETY: plain call.
    check(unsafe { (api().cuMemFreeHost)(pinned.cast()) });
}

// ---- cuFile ----

#[test]
fn cufile_with_gds_registers_files_and_round_trips_unaligned_data() {
    let (_serial, _ctx) = setup();
    let api = api();
    let before = counters();
    let dir = tempfile::tempdir().unwrap();
    let direct = temp_file(dir.path(), "direct.bin", true);
    let buffered = temp_file(dir.path(), "buffered.bin", false);

    // SAFETY: an all-zero CUfileDrvProps_t is a valid value.
    let mut props: CUfileDrvProps_t = unsafe { std::mem::zeroed() };
    let mut version: c_int = 0;
    // SAFETY: valid out-pointers.
    unsafe {
        check_cufile((api.cuFileDriverOpen)());
        check_cufile((api.cuFileDriverGetProperties)(&mut props));
        check_cufile((api.cuFileGetVersion)(&mut version));
        expect_cufile(
            (api.cuFileDriverGetProperties)(std::ptr::null_mut()),
            CUfileOpError::CU_FILE_INVALID_VALUE,
        );
    }
    assert_eq!(
        (props.nvfs.major_version, props.nvfs.minor_version),
        (2, 20)
    );
    assert_eq!(version, 1200);

    // GDS >= 1.7 takes a descriptor without O_DIRECT too (see the fidelity tests below).
    let buffered_fh = register(buffered.as_raw_fd()).expect("a buffered fd registers");
    // SAFETY: buffered_fh is registered.
    unsafe { (api.cuFileHandleDeregister)(buffered_fh) };
    let fh = register(direct.as_raw_fd()).expect("an O_DIRECT fd registers");
    assert_eq!(
        register(direct.as_raw_fd()).map(|_| ()),
        Err((CUfileOpError::CU_FILE_HANDLE_ALREADY_REGISTERED, 0)),
        "a second registration is refused"
    );

    let src = alloc(10_000);
    let dst = alloc(10_000);
    let data = pattern(10_000, 5);
    check(htod(src, &data));
    // Unaligned everything: size, file offset, buffer offset.
    assert_eq!(file_write(fh, src, 5000, 123, 77), 5000);
    let on_disk = std::fs::read(dir.path().join("direct.bin")).unwrap();
    assert_eq!(on_disk.len(), 5123);
    assert_eq!(on_disk[123..], data[77..5077]);

    assert_eq!(file_read(fh, dst, 5000, 123, 10), 5000);
    let back = dtoh(dst, 5010);
    assert_eq!(back[10..], data[77..5077]);
    assert!(back[..10].iter().all(|&x| x == POISON));

    // Out of bounds, bad offsets and unknown handles are cuFile errors, not -1.
    let invalid = -(CUfileOpError::CU_FILE_INVALID_VALUE.0 as isize);
    let not_registered = -(CUfileOpError::CU_FILE_HANDLE_NOT_REGISTERED.0 as isize);
    let violations = counters().bounds_violations;
    assert_eq!(file_read(fh, dst, 10_000, 0, 1), invalid);
    assert_eq!(file_write(fh, src + 9_000, 1001, 0, 0), invalid);
    assert_eq!(file_read(fh, 0x10, 1, 0, 0), invalid);
    assert_eq!(counters().bounds_violations - violations, 3);
    assert_eq!(file_read(fh, dst, 10, -1, 0), invalid);
    assert_eq!(file_read(fh, dst, 10, 0, -1), invalid);
    assert_eq!(
        file_read(0x4242 as CUfileHandle_t, dst, 10, 0, 0),
        not_registered
    );

    // Buffer registration: device ranges inside one allocation, once each.
    // SAFETY: plain calls; the pointers are looked up, not dereferenced.
    unsafe {
        check_cufile((api.cuFileBufRegister)(src as *const c_void, 10_000, 0));
        expect_cufile(
            (api.cuFileBufRegister)(src as *const c_void, 10_000, 0),
            CUfileOpError::CU_FILE_MEMORY_ALREADY_REGISTERED,
        );
        check_cufile((api.cuFileBufDeregister)(src as *const c_void));
        expect_cufile(
            (api.cuFileBufDeregister)(src as *const c_void),
            CUfileOpError::CU_FILE_INVALID_VALUE,
        );
        expect_cufile(
            (api.cuFileBufRegister)((src + 1) as *const c_void, 10_000, 0),
            CUfileOpError::CU_FILE_INVALID_VALUE,
        );
    }

    // SAFETY: fh is registered.
    unsafe { (api.cuFileHandleDeregister)(fh) };
    assert_eq!(file_read(fh, dst, 10, 0, 0), not_registered);
    // SAFETY: plain call.
    unsafe { check_cufile((api.cuFileDriverClose_v2)()) };
    let after = counters();
    assert_eq!(after.cufile_writes - before.cufile_writes, 1);
    assert_eq!(after.cufile_reads - before.cufile_reads, 1);
    free(src);
    free(dst);
}

#[track_caller]
fn check_cufile(status: CUfileError_t) {
    expect_cufile(status, CUfileOpError::CU_FILE_SUCCESS);
}

#[test]
fn cufile_reads_past_the_end_of_the_file_are_short() {
    let (_serial, _ctx) = setup();
    let dir = tempfile::tempdir().unwrap();
    let file = temp_file(dir.path(), "short.bin", true);
    let contents = pattern(1000, 9);
    std::fs::write(dir.path().join("short.bin"), &contents).unwrap();
    let fh = register(file.as_raw_fd()).expect("an O_DIRECT fd registers");
    let buf = alloc(8192);

    assert_eq!(file_read(fh, buf, 8192, 0, 0), 1000);
    let back = dtoh(buf, 8192);
    assert_eq!(back[..1000], contents[..]);
    // cuFile does not zero-fill: the rest of the buffer is untouched.
    assert!(back[1000..].iter().all(|&x| x == POISON));
    assert_eq!(file_read(fh, buf, 4096, 900, 0), 100);
    assert_eq!(dtoh(buf, 100), contents[900..]);
    assert_eq!(file_read(fh, buf, 4096, 1000, 0), 0);
    assert_eq!(file_read(fh, buf, 4096, 1 << 30, 0), 0);
    // SAFETY: fh is registered.
    unsafe { (api().cuFileHandleDeregister)(fh) };
    free(buf);
}

/// A compat-mode child's round trip through a buffered (non-O_DIRECT) file.
fn compat_round_trip(dir: &Path) -> (CUfileHandle_t, CUdeviceptr, Vec<u8>) {
    init_with_context();
    let file = temp_file(dir, "compat.bin", false);
    let fh = register(file.as_raw_fd()).expect("compat mode takes any fd");
    std::mem::forget(file); // keep the fd open for the child's lifetime
    let buf = alloc(2500);
    let data = pattern(2500, 4);
    check(htod(buf, &data));
    (fh, buf, data)
}

#[test]
fn cufile_compat_mode_reports_nvfs_0_and_takes_buffered_fds() {
    in_child(
        "cufile_compat_mode_reports_nvfs_0_and_takes_buffered_fds",
        &[("H5GDS_EMU_GDS", "0")],
        || {
            let dir = tempfile::tempdir().unwrap();
            // SAFETY: an all-zero CUfileDrvProps_t is a valid value.
            let mut props: CUfileDrvProps_t = unsafe { std::mem::zeroed() };
            props.nvfs.major_version = 9;
            // SAFETY: valid out-pointer.
            check_cufile(unsafe { (api().cuFileDriverGetProperties)(&mut props) });
            assert_eq!((props.nvfs.major_version, props.nvfs.minor_version), (0, 0));
            let (fh, buf, data) = compat_round_trip(dir.path());
            assert_eq!(file_write(fh, buf, 2500, 0, 0), 2500);
            assert_eq!(std::fs::read(dir.path().join("compat.bin")).unwrap(), data);
            check(htod(buf, &[0; 2500]));
            assert_eq!(file_read(fh, buf, 2500, 0, 0), 2500);
            assert_eq!(dtoh(buf, 2500), data);
        },
    );
}

#[test]
fn short_io_switch_caps_every_transfer() {
    in_child(
        "short_io_switch_caps_every_transfer",
        &[("H5GDS_EMU_GDS", "0"), ("H5GDS_EMU_SHORT_IO", "1000")],
        || {
            let dir = tempfile::tempdir().unwrap();
            let (fh, buf, data) = compat_round_trip(dir.path());
            // A caller's continuation loop needs three calls for 2500 bytes.
            let mut done = 0usize;
            let mut calls = Vec::new();
            while done < 2500 {
                let n = file_write(fh, buf, 2500 - done, done as i64, done as i64);
                assert!(n > 0, "write returned {n}");
                calls.push(n);
                done += n as usize;
            }
            assert_eq!(calls, [1000, 1000, 500]);
            assert_eq!(std::fs::read(dir.path().join("compat.bin")).unwrap(), data);
            check(htod(buf, &[0; 2500]));
            assert_eq!(file_read(fh, buf, 2500, 0, 0), 1000);
            assert_eq!(file_read(fh, buf, 1500, 1000, 1000), 1000);
            assert_eq!(file_read(fh, buf, 500, 2000, 2000), 500);
            assert_eq!(dtoh(buf, 2500), data);
        },
    );
}

#[test]
fn injected_io_failure_returns_minus_one_with_eio_once() {
    in_child(
        "injected_io_failure_returns_minus_one_with_eio_once",
        &[("H5GDS_EMU_GDS", "0"), ("H5GDS_EMU_FAIL_IO", "2")],
        || {
            let dir = tempfile::tempdir().unwrap();
            let (fh, buf, data) = compat_round_trip(dir.path());
            let before = counters();
            assert_eq!(file_write(fh, buf, 1000, 0, 0), 1000);
            assert_eq!(file_write(fh, buf, 1500, 1000, 1000), -1);
            assert_eq!(errno(), libc::EIO);
            // Nothing was written by the failed call.
            assert_eq!(
                std::fs::read(dir.path().join("compat.bin")).unwrap(),
                data[..1000]
            );
            assert_eq!(file_write(fh, buf, 1500, 1000, 1000), 1500);
            assert_eq!(counters().cufile_writes - before.cufile_writes, 2);
        },
    );
}

#[test]
fn injected_io_failure_uses_the_configured_errno() {
    in_child(
        "injected_io_failure_uses_the_configured_errno",
        &[
            ("H5GDS_EMU_GDS", "0"),
            ("H5GDS_EMU_FAIL_IO", "1"),
            ("H5GDS_EMU_FAIL_IO_ERRNO", "28"),
        ],
        || {
            let dir = tempfile::tempdir().unwrap();
            let (fh, buf, _) = compat_round_trip(dir.path());
            assert_eq!(file_read(fh, buf, 100, 0, 0), -1);
            assert_eq!(errno(), libc::ENOSPC);
            assert_eq!(file_read(fh, buf, 100, 0, 0), 0);
        },
    );
}

#[test]
fn injected_allocation_and_copy_failures_hit_the_nth_call_only() {
    in_child(
        "injected_allocation_and_copy_failures_hit_the_nth_call_only",
        &[("H5GDS_EMU_FAIL_ALLOC", "2"), ("H5GDS_EMU_FAIL_COPY", "3")],
        || {
            init_with_context();
            let api = api();
            let a = alloc(100);
            let mut pinned: *mut c_void = std::ptr::null_mut();
            // SAFETY: valid out-pointer.
            let code = unsafe { (api.cuMemHostAlloc)(&mut pinned, 100, 0) };
            expect_code(code, CUDA_ERROR_OUT_OF_MEMORY);
            let b = alloc(100);
            let data = pattern(100, 2);
            check(htod(a, &data));
            check(htod(b, &data));
            let mut back = vec![0u8; 100];
            // SAFETY: back is valid for 100 bytes.
            let code = unsafe { (api.cuMemcpyDtoH_v2)(back.as_mut_ptr().cast(), a, 100) };
            expect_code(code, CUDA_ERROR_UNKNOWN);
            assert!(back.iter().all(|&x| x == 0), "a failed copy copies nothing");
            assert_eq!(dtoh(a, 100), data);
            assert_eq!(counters().copies_dtoh, 1);
            free(a);
            free(b);
        },
    );
}

#[test]
fn injected_cufile_open_error_fails_open_and_registration() {
    in_child(
        "injected_cufile_open_error_fails_open_and_registration",
        &[("H5GDS_EMU_CUFILE_OPEN_ERROR", "5007")],
        || {
            init_with_context();
            let dir = tempfile::tempdir().unwrap();
            let file = temp_file(dir.path(), "x.bin", true);
            // SAFETY: plain call.
            let status = unsafe { (api().cuFileDriverOpen)() };
            expect_cufile(status, CUfileOpError::CU_FILE_PLATFORM_NOT_SUPPORTED);
            assert_eq!(
                register(file.as_raw_fd()).map(|_| ()),
                Err((CUfileOpError::CU_FILE_PLATFORM_NOT_SUPPORTED, 0)),
                "registration opens the driver, which fails"
            );
            // SAFETY: plain call.
            let status = unsafe { (api().cuFileDriverClose)() };
            expect_cufile(status, CUfileOpError::CU_FILE_DRIVER_NOT_INITIALIZED);
        },
    );
}

// ---- fidelity to cuFile 1.20 and CUDA (issue 14) ----

/// How many of the pages of `path`'s first `len` bytes are in the page cache.
fn cached_pages(path: &Path, len: usize) -> usize {
    let file = std::fs::File::open(path).unwrap();
    // SAFETY: a new shared read-only mapping of an open file, unmapped below.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    assert_ne!(map, libc::MAP_FAILED, "mmap {}", path.display());
    let count = resident_pages(map as usize, len);
    // SAFETY: unmapping the mapping made above.
    unsafe { libc::munmap(map, len) };
    count
}

/// How many pages of the mapping `[addr, addr + len)` are resident (mincore).
fn resident_pages(addr: usize, len: usize) -> usize {
    let pages = len.div_ceil(4096);
    let mut vec = vec![0u8; pages];
    // SAFETY: [addr, addr + len) is a mapping of this process; vec has one byte per page.
    let rc = unsafe { libc::mincore(addr as *mut c_void, len, vec.as_mut_ptr()) };
    assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
    vec.iter().filter(|&&b| b & 1 == 1).count()
}

/// Drops `path` from the page cache (written back first).
fn evict(path: &Path) {
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.sync_all().unwrap();
    // SAFETY: plain call on an open descriptor.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0);
}

fn host_read(fh: CUfileHandle_t, buf: *mut u8, size: usize, off: i64, buf_off: i64) -> isize {
    // SAFETY: the caller passes host memory valid for buf_off + size bytes.
    unsafe { (api().cuFileRead)(fh, buf.cast(), size, off, buf_off) }
}

fn host_write(fh: CUfileHandle_t, buf: *const u8, size: usize, off: i64, buf_off: i64) -> isize {
    // SAFETY: the caller passes host memory valid for buf_off + size bytes.
    unsafe { (api().cuFileWrite)(fh, buf.cast(), size, off, buf_off) }
}

/// NVIDIA GPUDirect Storage O_DIRECT Requirements Guide: "O_DIRECT is the only supported mode
/// before CUDA toolkit 12.2 (GDS version 1.7). CUDA 12.2 (GDS version 1.7) introduces support
/// for non O_DIRECT file descriptors as well." Troubleshooting Guide, "Managing Coherency of
/// Data in the Page Cache and on Disk": with such a descriptor, "whenever the library software
/// deems fit, it will follow the GDS enabled O_DIRECT path". So with GDS on, a descriptor
/// without O_DIRECT registers, and its transfers bypass the page cache like any other.
#[test]
fn gds_registers_descriptors_without_o_direct_and_bypasses_the_page_cache() {
    let (_serial, _ctx) = setup();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plain.bin");
    let file = temp_file(dir.path(), "plain.bin", false);
    let fh = register(file.as_raw_fd()).expect("GDS >= 1.7 takes a non-O_DIRECT fd");
    let size = 4 << 20;
    let data = pattern(size, 3);
    let dev = alloc(size);
    check(htod(dev, &data));
    // Aligned write: every page O_DIRECT, none left in the page cache.
    assert_eq!(file_write(fh, dev, size, 0, 0), size as isize);
    assert_eq!(
        cached_pages(&path, size),
        0,
        "a GDS write left pages cached"
    );
    assert_eq!(std::fs::read(&path).unwrap(), data);
    // Aligned read of an evicted file: still nothing cached.
    evict(&path);
    assert_eq!(cached_pages(&path, size), 0, "eviction failed");
    check(htod(dev, &vec![0u8; size]));
    assert_eq!(file_read(fh, dev, size, 0, 0), size as isize);
    assert_eq!(dtoh(dev, size), data);
    assert_eq!(
        cached_pages(&path, size),
        0,
        "a GDS read went through the page cache"
    );
    // Unaligned: only the partial pages at the ends of a write go through the page cache.
    evict(&path);
    assert_eq!(
        file_write(fh, dev, size - 3000, 1000, 0),
        (size - 3000) as isize
    );
    assert!(
        cached_pages(&path, size) <= 2,
        "{}",
        cached_pages(&path, size)
    );
    let mut want = data.clone();
    want.copy_within(0..size - 3000, 1000);
    assert_eq!(std::fs::read(&path).unwrap(), want);
    // SAFETY: fh is registered.
    unsafe { (api().cuFileHandleDeregister)(fh) };
    free(dev);
}

/// In compatibility mode cuFile does POSIX I/O, through the page cache ("When you enable
/// compatibility mode, and GDS is not functional for the IO target, the code that uses the
/// cuFile APIs fall backs to the standard POSIX read/write path": NVIDIA GPUDirect Storage
/// configuration guide, "GPUDirect Storage Parameters").
#[test]
fn compat_mode_goes_through_the_page_cache() {
    in_child(
        "compat_mode_goes_through_the_page_cache",
        &[("H5GDS_EMU_GDS", "0")],
        || {
            init_with_context();
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("c.bin");
            let file = temp_file(dir.path(), "c.bin", false);
            let fh = register(file.as_raw_fd()).unwrap();
            let size = 1 << 20;
            let dev = alloc(size);
            check(htod(dev, &pattern(size, 8)));
            assert_eq!(file_write(fh, dev, size, 0, 0), size as isize);
            evict(&path);
            assert_eq!(file_read(fh, dev, size, 0, 0), size as isize);
            assert_eq!(cached_pages(&path, size), size / 4096);
            free(dev);
        },
    );
}

/// Where the file system refuses O_DIRECT, GDS is not functional for the file; with
/// compatibility mode allowed (`allow_compat_mode`, which the emulator assumes), "the code that
/// uses the cuFile APIs fall backs to the standard POSIX read/write path" (NVIDIA GPUDirect
/// Storage configuration guide, "GPUDirect Storage Parameters"): the transfer still works,
/// through POSIX bounce buffers and the page cache.
#[test]
fn gds_falls_back_to_compat_mode_where_o_direct_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.txt");
    let shim = h5gds_tests::refuse_o_direct_shim();
    let ran = in_child(
        "gds_falls_back_to_compat_mode_where_o_direct_is_refused",
        &[
            ("LD_PRELOAD", shim.to_str().unwrap()),
            ("H5GDS_EMU_REPORT", report.to_str().unwrap()),
        ],
        || {
            init_with_context();
            let dir = tempfile::tempdir().unwrap();
            let file = temp_file(dir.path(), "r.bin", false);
            let fh = register(file.as_raw_fd()).expect("registers without O_DIRECT");
            let data = pattern(100_000, 6);
            let dev = alloc(100_000);
            check(htod(dev, &data));
            assert_eq!(file_write(fh, dev, 100_000, 0, 0), 100_000);
            check(htod(dev, &[0u8; 100_000]));
            assert_eq!(file_read(fh, dev, 100_000, 0, 0), 100_000);
            assert_eq!(dtoh(dev, 100_000), data);
            free(dev);
        },
    );
    if ran.is_some() {
        let report = h5gds_tests::emulator::read_report(&report);
        assert_eq!(report["cufile o_direct requests"], 0, "{report:?}");
        assert_eq!(report["cufile posix bounce copies"], 2, "{report:?}");
    }
}

/// `cufile.h` 1.20, `cuFileRead`/`cuFileWrite`: `bufPtr_base` is the "base address of buffer in
/// device or host memory", and an unregistered buffer's data "will be buffered through
/// preallocated pinned buffers if needed". Pageable and pinned host memory both work, with GDS
/// and in compatibility mode.
#[test]
fn cufile_reads_and_writes_pageable_and_pinned_host_memory() {
    fn round_trips(dir: &Path) {
        let file = temp_file(dir, "host.bin", false);
        let fh = register(file.as_raw_fd()).expect("registers");
        let size = 3_000_000;
        let data = pattern(size, 12);
        // Pageable: a Vec, at an unaligned buffer offset and file offset.
        assert_eq!(
            host_write(fh, data.as_ptr(), size - 7, 4097, 7),
            (size - 7) as isize
        );
        let on_disk = std::fs::read(dir.join("host.bin")).unwrap();
        assert_eq!(on_disk[4097..], data[7..]);
        let mut back = vec![0u8; size];
        assert_eq!(
            host_read(fh, back.as_mut_ptr(), size - 7, 4097, 7),
            (size - 7) as isize
        );
        assert_eq!(back[7..], data[7..]);
        // Pinned (cuMemHostAlloc), reading past the end of the file: short.
        let pinned = host_alloc(size);
        assert_eq!(
            host_read(fh, pinned, size, 4097 + 1000, 0),
            (size - 1007) as isize
        );
        // SAFETY: pinned holds size bytes.
        let got = unsafe { std::slice::from_raw_parts(pinned, size - 1007) };
        assert_eq!(got, &data[1007..]);
        assert_eq!(host_write(fh, pinned, 5000, 0, 0), 5000);
        assert_eq!(
            std::fs::read(dir.join("host.bin")).unwrap()[..5000],
            data[1007..6007]
        );
        // Host memory overlapping device memory is refused, as before.
        let dev = alloc(4096);
        let invalid = -(CUfileOpError::CU_FILE_INVALID_VALUE.0 as isize);
        let below = (dev - 100) as *mut u8;
        assert_eq!(host_read(fh, below, 200, 0, 0), invalid);
        free(dev);
        // SAFETY: plain calls on what this function registered and allocated.
        unsafe {
            (api().cuFileHandleDeregister)(fh);
            check((api().cuMemFreeHost)(pinned.cast()));
        }
    }
    {
        let (_serial, _ctx) = setup();
        let dir = tempfile::tempdir().unwrap();
        round_trips(dir.path());
    }
    in_child(
        "cufile_reads_and_writes_pageable_and_pinned_host_memory",
        &[("H5GDS_EMU_GDS", "0")],
        || {
            init_with_context();
            let dir = tempfile::tempdir().unwrap();
            round_trips(dir.path());
        },
    );
}

/// Compatibility mode moves device data through cuFile's POSIX bounce buffers of
/// `per_buffer_cache_size_kb` (cufile.json default 1024), then copies it: one bounce copy per
/// MiB. Host memory needs no bounce. The properties report cufile.json's defaults (NVIDIA
/// GPUDirect Storage configuration guide: max_direct_io_size_kb 16384,
/// max_device_cache_size_kb 131072).
#[test]
fn compat_mode_bounces_device_data_through_1_mib_posix_buffers() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.txt");
    let ran = in_child(
        "compat_mode_bounces_device_data_through_1_mib_posix_buffers",
        &[
            ("H5GDS_EMU_GDS", "0"),
            ("H5GDS_EMU_REPORT", report.to_str().unwrap()),
        ],
        || {
            init_with_context();
            // SAFETY: an all-zero CUfileDrvProps_t is a valid value.
            let mut props: CUfileDrvProps_t = unsafe { std::mem::zeroed() };
            // SAFETY: valid out-pointer.
            check_cufile(unsafe { (api().cuFileDriverGetProperties)(&mut props) });
            assert_eq!(props.per_buffer_cache_size, 1024);
            assert_eq!(props.max_device_cache_size, 131_072);
            assert_eq!(props.nvfs.max_direct_io_size, 16_384);
            let dir = tempfile::tempdir().unwrap();
            let file = temp_file(dir.path(), "b.bin", false);
            let fh = register(file.as_raw_fd()).unwrap();
            let size = (3 << 20) + 5; // four bounce buffers' worth
            let data = pattern(size, 1);
            let dev = alloc(size);
            check(htod(dev, &data));
            assert_eq!(file_write(fh, dev, size, 0, 0), size as isize); // 4 copies
            check(htod(dev, &vec![0u8; size]));
            assert_eq!(file_read(fh, dev, size, 0, 0), size as isize); // 4 copies
            assert_eq!(dtoh(dev, size), data);
            let mut host = vec![0u8; size];
            assert_eq!(host_read(fh, host.as_mut_ptr(), size, 0, 0), size as isize); // none
            assert_eq!(host, data);
            free(dev);
        },
    );
    if ran.is_some() {
        let report = h5gds_tests::emulator::read_report(&report);
        assert_eq!(report["cufile posix bounce copies"], 8, "{report:?}");
        assert_eq!(report["cufile o_direct requests"], 0, "{report:?}");
        assert_eq!(report["cufile reads"], 2, "{report:?}");
    }
}

/// Device memory from `cuMemAlloc` is physical GPU memory from the start (only managed memory
/// is demand-paged), and `cuMemHostAlloc` "allocates bytesize bytes of host memory that is
/// page-locked" (CUDA Driver API reference): neither may pay first-touch page faults later.
/// With poisoning off (as in benchmarks) nothing else touches the pages.
#[test]
fn device_and_pinned_memory_are_backed_when_allocated() {
    in_child(
        "device_and_pinned_memory_are_backed_when_allocated",
        &[("H5GDS_EMU_POISON", "off")],
        || {
            init_with_context();
            let size = 32 << 20;
            let dev = alloc(size);
            assert_eq!(resident_pages(dev as usize, size), size / 4096);
            let pinned = host_alloc(size);
            assert_eq!(resident_pages(pinned as usize, size), size / 4096);
            // Still zeroed, as POISON=off promises.
            assert!(dtoh(dev, size).iter().all(|&b| b == 0));
            free(dev);
        },
    );
}

// ---- the exit report ----

#[test]
fn exit_report_counts_leaks_misuse_and_traffic_even_with_busy_threads() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.txt");
    let report_str = report.to_str().unwrap().to_string();
    let ran = in_child(
        "exit_report_counts_leaks_misuse_and_traffic_even_with_busy_threads",
        &[("H5GDS_EMU_GDS", "0"), ("H5GDS_EMU_REPORT", &report_str)],
        || {
            let dir = tempfile::tempdir().unwrap();
            let (fh, buf, _) = compat_round_trip(dir.path()); // 1 htod, leaks `buf` (2500)
            assert_eq!(file_write(fh, buf, 2500, 0, 0), 2500);
            assert_eq!(file_read(fh, buf, 2500, 0, 0), 2500);
            let _leaked_pinned = host_alloc(64);
            let freed = alloc(10);
            free(freed);
            // SAFETY: plain call.
            expect_code(
                unsafe { (api().cuMemFree_v2)(freed) },
                CUDA_ERROR_INVALID_VALUE,
            );
            expect_code(htod(buf + 2000, &[0; 501]), CUDA_ERROR_INVALID_VALUE);
            let _ = dtoh(buf, 10);
            // Threads still copying while the process exits must not crash the report.
            let (ready, started) = std::sync::mpsc::channel();
            for _ in 0..4 {
                let ready = ready.clone();
                std::thread::spawn(move || {
                    init_with_context();
                    let scratch = alloc(4096);
                    let mut host = vec![0u8; 4096];
                    ready.send(()).unwrap();
                    loop {
                        // SAFETY: host is valid for 4096 bytes.
                        unsafe {
                            (api().cuMemcpyDtoD_v2)(scratch, scratch, 4096);
                            (api().cuMemcpyDtoH_v2)(host.as_mut_ptr().cast(), scratch, 4096);
                        }
                    }
                });
            }
            for _ in 0..4 {
                started.recv().unwrap();
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        },
    );
    if ran.is_some() {
        let text = std::fs::read_to_string(&report).expect("the child wrote its report");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 19, "{text}");
        assert_eq!(lines[0], "leaked device allocations: 5 (bytes 18884)");
        assert_eq!(lines[1], "leaked pinned host allocations: 1");
        assert_eq!(lines[2], "double frees: 1");
        assert_eq!(lines[3], "bounds violations: 1");
        assert_eq!(lines[4], "cufile reads: 1");
        assert_eq!(lines[5], "cufile writes: 1");
        assert_eq!(lines[6], "copies htod: 1");
        assert!(
            lines[7]
                .strip_prefix("copies dtoh: ")
                .and_then(|n| n.parse::<u64>().ok())
                .is_some_and(|n| n >= 1),
            "{text}"
        );
        // Compatibility mode: one posix bounce copy per 2500-byte transfer, no O_DIRECT.
        assert_eq!(lines[8], "cufile posix bounce copies: 2");
        assert_eq!(lines[9], "cufile o_direct requests: 0");
        // compat_round_trip registers one file; the driver opens implicitly there.
        assert_eq!(lines[10], "cufile driver open calls: 0");
        assert_eq!(lines[11], "cufile driver opens completed: 1");
        assert_eq!(lines[12], "cufile handle register calls: 1");
        // One context on every thread: nothing crossed contexts.
        assert_eq!(lines[13], "cross-context uses: 0");
        assert_eq!(lines[14], "cufile failed transfers: 0");
        assert_eq!(lines[15], "calls from a forked child: 0");
        assert!(lines[16].starts_with("pointer queries: "), "{text}");
        // The busy threads' copies within device memory.
        assert!(
            lines[17]
                .strip_prefix("copies dtod: ")
                .and_then(|n| n.parse::<u64>().ok())
                .is_some_and(|n| n >= 1),
            "{text}"
        );
        assert!(
            lines[18].starts_with("pinned host bytes allocated: "),
            "{text}"
        );
    }
}

// ---- standing in for the real libraries ----

#[test]
fn emulator_lib_dir_stands_in_for_libcuda_and_libcufile() {
    let libs = emulator_lib_dir();
    for alias in LIBRARY_ALIASES {
        let target = std::fs::canonicalize(libs.path().join(alias)).unwrap();
        assert_eq!(target, std::fs::canonicalize(emulator_library()).unwrap());
    }
    let ld_path = libs.ld_library_path().into_string().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("cufile.log");
    in_child(
        "emulator_lib_dir_stands_in_for_libcuda_and_libcufile",
        &[
            ("LD_LIBRARY_PATH", &ld_path),
            ("H5GDS_EMU_GDS", "0"),
            ("CUFILE_LOGFILE_PATH", log.to_str().unwrap()),
        ],
        || {
            // By bare name, as cudarc and the cuFile loader open them.
            // SAFETY: loading the emulator under its aliases.
            let (cuda, cufile) = unsafe {
                (
                    libloading::Library::new("libcuda.so.1").expect("libcuda.so.1 loads"),
                    libloading::Library::new("libcufile.so.0").expect("libcufile.so.0 loads"),
                )
            };
            type Counter = unsafe extern "C" fn(*mut Counters) -> c_int;
            // SAFETY: both export h5gds_emu_counters with this signature.
            let (a, b) = unsafe {
                (
                    *cuda.get::<Counter>(b"h5gds_emu_counters\0").unwrap(),
                    *cufile.get::<Counter>(b"h5gds_emu_counters\0").unwrap(),
                )
            };
            assert_eq!(a as usize, b as usize, "one emulator behind both names");
            // The project's own cuFile loader finds it, and every field it needs resolves.
            let lib = h5gds_runtime::libraries::cufile().expect("the runtime loads libcufile.so.0");
            // SAFETY: cuInit and a current context first, as the project must, then the driver.
            unsafe {
                let init = *cuda
                    .get::<unsafe extern "C" fn(c_uint) -> CUresult>(b"cuInit\0")
                    .unwrap();
                check(init(0));
                type Retain = unsafe extern "C" fn(*mut CUcontext, c_int) -> CUresult;
                type SetCurrent = unsafe extern "C" fn(CUcontext) -> CUresult;
                let retain = *cuda.get::<Retain>(b"cuDevicePrimaryCtxRetain\0").unwrap();
                let set_current = *cuda.get::<SetCurrent>(b"cuCtxSetCurrent\0").unwrap();
                let mut ctx: CUcontext = std::ptr::null_mut();
                check(retain(&mut ctx, 0));
                check(set_current(ctx));
                let open = lib.cuFileDriverOpen.as_ref().expect("cuFileDriverOpen");
                check_cufile(open());
                let mut version: c_int = 0;
                let get_version = lib.cuFileGetVersion.as_ref().expect("cuFileGetVersion");
                check_cufile(get_version(&mut version));
                assert_eq!(version, 1200);
            }
            // A function the emulator does not provide is missing, not silently faked.
            assert!(lib.cuFileBatchIOSetUp.is_err());
            // SAFETY: looking up a symbol.
            assert!(unsafe { cuda.get::<unsafe extern "C" fn()>(b"cuLaunchKernel\0") }.is_err());
        },
    );
}

#[test]
fn deferred_async_copies_run_when_their_stream_is_synchronized() {
    in_child(
        "deferred_async_copies_run_when_their_stream_is_synchronized",
        &[("H5GDS_EMU_DEFER_ASYNC", "1")],
        || {
            let _ctx = init_with_context();
            let api = api();
            let dev = alloc(64);
            check(htod(dev, &[0u8; 64]));
            let pinned = host_alloc(64);
            let mut stream: CUstream = std::ptr::null_mut();
            // SAFETY: plain calls; `pinned` holds 64 bytes.
            unsafe {
                check((api.cuStreamCreate)(&mut stream, 1));
                std::ptr::write_bytes(pinned, 1, 64);
                check((api.cuMemcpyHtoDAsync_v2)(dev, pinned.cast(), 64, stream));
                // The copy has not run: the device still holds zeros, and what the pinned
                // buffer holds when the stream is synchronized is what arrives.
                assert_eq!(dtoh(dev, 64), vec![0u8; 64]);
                std::ptr::write_bytes(pinned, 2, 64);
                check((api.cuStreamSynchronize)(stream));
                assert_eq!(dtoh(dev, 64), vec![2u8; 64]);
                // Device to pinned host: the host buffer changes only at synchronization.
                check(htod(dev, &[7u8; 64]));
                check((api.cuMemcpyDtoHAsync_v2)(pinned.cast(), dev, 64, stream));
                assert_eq!(*pinned, 2);
                check((api.cuCtxSynchronize)());
                assert_eq!(std::slice::from_raw_parts(pinned, 64), &[7u8; 64]);
                // Pageable memory is copied before the call returns, as CUDA does.
                let pageable = [9u8; 64];
                check((api.cuMemcpyHtoDAsync_v2)(
                    dev,
                    pageable.as_ptr().cast(),
                    64,
                    stream,
                ));
                assert_eq!(dtoh(dev, 64), vec![9u8; 64]);
                // Device to device: lands at synchronization.
                let other = alloc(64);
                check(htod(other, &[3u8; 64]));
                check((api.cuMemcpyDtoDAsync_v2)(dev, other, 64, stream));
                assert_eq!(dtoh(dev, 64), vec![9u8; 64]);
                // A pageable copy to the host waits for the stream's earlier work.
                let mut back = [0u8; 64];
                check((api.cuMemcpyDtoHAsync_v2)(
                    back.as_mut_ptr().cast(),
                    dev,
                    64,
                    stream,
                ));
                assert_eq!(back, [3u8; 64]);
                // Device work a companion library launches (the nvCOMP emulator's calls) runs
                // in stream order, at synchronization.
                unsafe extern "C" fn mark(data: *mut c_void) {
                    // SAFETY: `data` is the AtomicU8 below, alive until the stream is synced.
                    unsafe { &*data.cast::<std::sync::atomic::AtomicU8>() }
                        .store(1, std::sync::atomic::Ordering::SeqCst);
                }
                let ran = std::sync::atomic::AtomicU8::new(0);
                let data = (&ran as *const std::sync::atomic::AtomicU8)
                    .cast_mut()
                    .cast();
                assert_eq!((api.h5gds_emu_enqueue)(stream, Some(mark), data), 0);
                assert_eq!(ran.load(std::sync::atomic::Ordering::SeqCst), 0);
                check((api.cuStreamSynchronize)(stream));
                assert_eq!(ran.load(std::sync::atomic::Ordering::SeqCst), 1);
                // An unknown stream is refused, and the work never runs.
                let bogus = 0xdead_0000usize as CUstream;
                assert_eq!((api.h5gds_emu_enqueue)(bogus, Some(mark), data), 400);
                free(other);
                check((api.cuMemFreeHost)(pinned.cast()));
            }
            free(dev);
        },
    );
}

#[test]
fn the_modelled_link_times_copies_streams_and_events() {
    // 256 KiB at 1 MB/s pinned (262 ms), 0.5 MB/s pageable: long against the calls themselves,
    // so each check below is a lower bound or a state right after a call, never a race.
    const LEN: usize = 256 << 10;
    in_child(
        "the_modelled_link_times_copies_streams_and_events",
        &[("H5GDS_EMU_LINK_GBPS", "0.001,0.0005")],
        || {
            use std::time::{Duration, Instant};
            let _ctx = init_with_context();
            let api = api();
            let one = Duration::from_secs_f64(LEN as f64 / 1e6);
            let (dev, other) = (alloc(LEN), alloc(LEN));
            let pinned = host_alloc(LEN);
            let (mut a, mut b): (CUstream, CUstream) = (std::ptr::null_mut(), std::ptr::null_mut());
            let (mut done_a, mut done_b): (CUevent, CUevent) =
                (std::ptr::null_mut(), std::ptr::null_mut());
            // SAFETY: plain calls; `pinned` holds LEN bytes.
            unsafe {
                check((api.cuStreamCreate)(&mut a, 1));
                check((api.cuStreamCreate)(&mut b, 1));
                check((api.cuEventCreate)(&mut done_a, 0));
                check((api.cuEventCreate)(&mut done_b, 0));
                std::ptr::write_bytes(pinned, 4, LEN);

                // An async copy from pinned memory returns before its modelled end: the event
                // recorded after it is not ready, and waiting for it takes the copy's time.
                let start = Instant::now();
                check((api.cuMemcpyHtoDAsync_v2)(dev, pinned.cast(), LEN, a));
                check((api.cuEventRecord)(done_a, a));
                expect_code((api.cuEventQuery)(done_a), 600);
                check((api.cuEventSynchronize)(done_a));
                assert!(start.elapsed() >= one);
                check((api.cuEventQuery)(done_a));
                assert_eq!(dtoh(dev, LEN), vec![4u8; LEN]);

                // Two streams copying the same way share the link: both done takes twice as
                // long as one.
                let start = Instant::now();
                check((api.cuMemcpyHtoDAsync_v2)(dev, pinned.cast(), LEN, a));
                check((api.cuMemcpyHtoDAsync_v2)(other, pinned.cast(), LEN, b));
                check((api.cuStreamSynchronize)(b));
                assert!(start.elapsed() >= 2 * one);
                check((api.cuCtxSynchronize)());

                // A stream waiting for an event starts its next copy, even the other way,
                // only after the event.
                let start = Instant::now();
                check((api.cuMemcpyHtoDAsync_v2)(dev, pinned.cast(), LEN, a));
                check((api.cuEventRecord)(done_a, a));
                check((api.cuStreamWaitEvent)(b, done_a, 0));
                check((api.cuMemcpyDtoHAsync_v2)(pinned.cast(), other, LEN, b));
                check((api.cuEventRecord)(done_b, b));
                check((api.cuStreamSynchronize)(a));
                expect_code((api.cuEventQuery)(done_b), 600);
                check((api.cuStreamSynchronize)(b));
                assert!(start.elapsed() >= 2 * one);

                // A synchronous copy returns when it ends; pageable memory at its own rate,
                // even through an async call.
                let start = Instant::now();
                check((api.cuMemcpyHtoD_v2)(dev, pinned.cast(), LEN));
                assert!(start.elapsed() >= one);
                let pageable = vec![6u8; LEN];
                let start = Instant::now();
                check((api.cuMemcpyHtoDAsync_v2)(
                    dev,
                    pageable.as_ptr().cast(),
                    LEN,
                    a,
                ));
                assert!(start.elapsed() >= 2 * one);
                assert_eq!(dtoh(dev, LEN), vec![6u8; LEN]);

                // Copies within device memory do not cross the link.
                check((api.cuMemcpyDtoDAsync_v2)(other, dev, LEN, a));
                check((api.cuEventRecord)(done_a, a));
                check((api.cuEventQuery)(done_a));

                // Freeing waits for the work in flight.
                let start = Instant::now();
                check((api.cuMemcpyHtoDAsync_v2)(other, pinned.cast(), LEN, b));
                check((api.cuMemFreeHost)(pinned.cast()));
                assert!(start.elapsed() >= one);
                for e in [done_a, done_b] {
                    check((api.cuEventDestroy_v2)(e));
                }
                for s in [a, b] {
                    check((api.cuStreamDestroy_v2)(s));
                }
            }
            free(dev);
            free(other);
        },
    );
}

/// A 2-D copy descriptor (cudarc's, the layout of `cuda.h`) between two device addresses.
fn copy_2d(
    dst: CUdeviceptr,
    dst_pitch: usize,
    src: CUdeviceptr,
    src_pitch: usize,
    width: usize,
    height: usize,
) -> cudarc::driver::sys::CUDA_MEMCPY2D {
    use cudarc::driver::sys::CUmemorytype::CU_MEMORYTYPE_DEVICE;
    let null = std::ptr::null_mut();
    cudarc::driver::sys::CUDA_MEMCPY2D {
        srcXInBytes: 0,
        srcY: 0,
        srcMemoryType: CU_MEMORYTYPE_DEVICE,
        srcHost: null,
        srcDevice: src,
        srcArray: null.cast(),
        srcPitch: src_pitch,
        dstXInBytes: 0,
        dstY: 0,
        dstMemoryType: CU_MEMORYTYPE_DEVICE,
        dstHost: null,
        dstDevice: dst,
        dstArray: null.cast(),
        dstPitch: dst_pitch,
        WidthInBytes: width,
        Height: height,
    }
}

fn strided_copies_body() {
    use cudarc::driver::sys::CUmemorytype;
    let _ctx = init_with_context();
    let api = api();
    // A 4x6 array of bytes 0..24 on the device; copy its 3x2 block at (1, 2) into a 3x4 array.
    let (src, dst) = (alloc(24), alloc(12));
    let values: Vec<u8> = (0..24).collect();
    check(htod(src, &values));
    check(htod(dst, &[0u8; 12]));
    let mut stream: CUstream = std::ptr::null_mut();
    let before = counters();
    // SAFETY: plain calls on checked descriptors.
    unsafe {
        check((api.cuStreamCreate)(&mut stream, 1));
        let mut p = copy_2d(dst, 4, src, 6, 2, 3);
        p.srcXInBytes = 2;
        p.srcY = 1;
        p.dstXInBytes = 1;
        check((api.cuMemcpy2DAsync_v2)(&p, stream));
        check((api.cuStreamSynchronize)(stream));
    }
    assert_eq!(
        dtoh(dst, 12),
        [0, 8, 9, 0, 0, 14, 15, 0, 0, 20, 21, 0],
        "rows 1..4, columns 2..4 of the source at column 1 of the destination"
    );
    let mut copied = 0u64;
    let name = std::ffi::CString::new("copies dtod").unwrap();
    // SAFETY: a NUL-terminated name and a valid out pointer.
    let found = unsafe { (api.h5gds_emu_report_counter)(name.as_ptr(), &mut copied) };
    assert_eq!(found, 0);
    assert_eq!(copied, 1, "a 2-D copy counts once");
    // Refused as CUDA documents, nothing written: a row wider than its pitch, a pitch over
    // the maximum, rows reaching outside the allocation, a CUDA array.
    let refused = [
        copy_2d(dst, 4, src, 6, 5, 2),
        copy_2d(dst, 4, src, 1 << 31, 2, 2),
        copy_2d(dst, 4, src, 6, 2, 5),
        {
            let mut p = copy_2d(dst, 4, src, 6, 2, 2);
            p.srcMemoryType = CUmemorytype::CU_MEMORYTYPE_ARRAY;
            p
        },
    ];
    for p in &refused {
        // SAFETY: as above.
        expect_code(unsafe { (api.cuMemcpy2DAsync_v2)(p, stream) }, 1);
    }
    // SAFETY: as above.
    expect_code(
        unsafe { (api.cuMemcpy2DAsync_v2)(std::ptr::null(), stream) },
        1,
    );
    assert_eq!(dtoh(dst, 12), [0, 8, 9, 0, 0, 14, 15, 0, 0, 20, 21, 0]);
    assert_eq!(counters().bounds_violations, before.bounds_violations + 1);
    // 3-D: two slices of two rows of 2 bytes out of a 2x3x4 array (slices of 3 rows) into a
    // packed 2x2x2 one, then back from pinned host memory into the device, 2-D.
    let packed = alloc(8);
    let pinned = host_alloc(8);
    // SAFETY: plain calls; `pinned` holds 8 bytes.
    unsafe {
        let null = std::ptr::null_mut();
        let mut p = cudarc::driver::sys::CUDA_MEMCPY3D {
            srcXInBytes: 1,
            srcY: 1,
            srcZ: 0,
            srcLOD: 0,
            srcMemoryType: CUmemorytype::CU_MEMORYTYPE_DEVICE,
            srcHost: null,
            srcDevice: src,
            srcArray: null.cast(),
            reserved0: null,
            srcPitch: 4,
            srcHeight: 3,
            dstXInBytes: 0,
            dstY: 0,
            dstZ: 0,
            dstLOD: 0,
            dstMemoryType: CUmemorytype::CU_MEMORYTYPE_UNIFIED,
            dstHost: null,
            dstDevice: packed,
            dstArray: null.cast(),
            reserved1: null,
            dstPitch: 2,
            dstHeight: 2,
            WidthInBytes: 2,
            Height: 2,
            Depth: 2,
        };
        check((api.cuMemcpy3DAsync_v2)(&p, stream));
        check((api.cuStreamSynchronize)(stream));
        assert_eq!(dtoh(packed, 8), [5, 6, 9, 10, 17, 18, 21, 22]);
        // Rows of a slice overrunning the array's height are refused.
        p.srcY = 2;
        expect_code((api.cuMemcpy3DAsync_v2)(&p, stream), 1);
        std::ptr::copy_nonoverlapping([1u8, 2, 3, 4].as_ptr(), pinned, 4);
        let mut h = copy_2d(dst, 4, 0, 2, 2, 2);
        (h.srcMemoryType, h.srcHost) = (CUmemorytype::CU_MEMORYTYPE_HOST, pinned.cast());
        check((api.cuMemcpy2DAsync_v2)(&h, stream));
        check((api.cuStreamSynchronize)(stream));
        check((api.cuStreamDestroy_v2)(stream));
        check((api.cuMemFreeHost)(pinned.cast()));
    }
    assert_eq!(dtoh(dst, 12), [1, 2, 9, 0, 3, 4, 15, 0, 0, 20, 21, 0]);
    for ptr in [src, dst, packed] {
        free(ptr);
    }
}

#[test]
fn strided_copies_move_their_rows_and_refuse_what_cuda_refuses() {
    in_child(
        "strided_copies_move_their_rows_and_refuse_what_cuda_refuses",
        &[],
        strided_copies_body,
    );
}

#[test]
fn deferred_strided_copies_land_at_synchronization_and_can_be_refused_within_the_device() {
    in_child(
        "deferred_strided_copies_land_at_synchronization_and_can_be_refused_within_the_device",
        &[
            ("H5GDS_EMU_DEFER_ASYNC", "1"),
            ("H5GDS_EMU_REFUSE_STRIDED_DTOD", "1"),
        ],
        || {
            let _ctx = init_with_context();
            let api = api();
            let (src, dst) = (alloc(16), alloc(16));
            check(htod(src, &[7u8; 16]));
            check(htod(dst, &[0u8; 16]));
            let pinned = host_alloc(16);
            let mut stream: CUstream = std::ptr::null_mut();
            // SAFETY: plain calls; `pinned` holds 16 bytes.
            unsafe {
                check((api.cuStreamCreate)(&mut stream, 1));
                // Within the device, several rows: refused (CUDA says it may be).
                expect_code(
                    (api.cuMemcpy2DAsync_v2)(&copy_2d(dst, 4, src, 4, 2, 2), stream),
                    1,
                );
                // One row is a plain copy, never refused.
                check((api.cuMemcpy2DAsync_v2)(
                    &copy_2d(dst, 4, src, 4, 2, 1),
                    stream,
                ));
                assert_eq!(dtoh(dst, 4), [0, 0, 0, 0], "landed before synchronization");
                check((api.cuStreamSynchronize)(stream));
                assert_eq!(dtoh(dst, 4), [7, 7, 0, 0]);
                // From pinned host memory: queued, reading the buffer at synchronization.
                std::ptr::write_bytes(pinned, 1, 16);
                let mut p = copy_2d(dst, 4, 0, 2, 2, 4);
                (p.srcMemoryType, p.srcHost) = (
                    cudarc::driver::sys::CUmemorytype::CU_MEMORYTYPE_HOST,
                    pinned.cast(),
                );
                check((api.cuMemcpy2DAsync_v2)(&p, stream));
                std::ptr::write_bytes(pinned, 2, 16);
                assert_eq!(dtoh(dst, 4), [7, 7, 0, 0]);
                check((api.cuStreamSynchronize)(stream));
                check((api.cuStreamDestroy_v2)(stream));
                check((api.cuMemFreeHost)(pinned.cast()));
            }
            assert_eq!(
                dtoh(dst, 16),
                [2, 2, 0, 0, 2, 2, 0, 0, 2, 2, 0, 0, 2, 2, 0, 0]
            );
            free(src);
            free(dst);
        },
    );
}

#[test]
fn legacy_stream_memsets_and_pageable_copies_land_at_synchronization() {
    in_child(
        "legacy_stream_memsets_and_pageable_copies_land_at_synchronization",
        &[("H5GDS_EMU_DEFER_ASYNC", "1")],
        || {
            let _ctx = init_with_context();
            let api = api();
            let dev = alloc(64);
            let pinned = host_alloc(64);
            let mut other: CUstream = std::ptr::null_mut();
            // SAFETY: plain calls; `pinned` holds 64 bytes.
            unsafe {
                check((api.cuStreamCreate)(&mut other, 1));
                // Seen from a non-blocking stream: nothing of the legacy stream's work yet.
                let seen = |api: &Api| {
                    check((api.cuMemcpyDtoHAsync_v2)(pinned.cast(), dev, 64, other));
                    check((api.cuStreamSynchronize)(other));
                    std::slice::from_raw_parts(pinned, 64).to_vec()
                };
                let poison = seen(api);
                check((api.cuMemsetD8_v2)(dev, 0, 64));
                assert_eq!(seen(api), poison, "a memset landed before synchronization");
                check((api.cuStreamSynchronize)(std::ptr::null_mut()));
                assert_eq!(seen(api), vec![0u8; 64]);
                // Pageable to device: the bytes are taken at the call, land later.
                let mut pageable = [5u8; 64];
                check(htod(dev, &pageable));
                pageable.fill(6);
                assert_eq!(seen(api), vec![0u8; 64]);
                // CU_STREAM_LEGACY
                check((api.cuStreamSynchronize)(0x1 as CUstream));
                assert_eq!(seen(api), vec![5u8; 64]);
                // A synchronous copy to the host waits for the legacy stream's earlier work.
                check((api.cuMemsetD8_v2)(dev, 8, 64));
                assert_eq!(dtoh(dev, 64), vec![8u8; 64]);
                check((api.cuStreamDestroy_v2)(other));
                check((api.cuMemFreeHost)(pinned.cast()));
            }
            free(dev);
        },
    );
}

#[test]
fn calls_from_a_process_forked_after_cuinit_are_refused_and_counted() {
    in_child(
        "calls_from_a_process_forked_after_cuinit_are_refused_and_counted",
        &[],
        || {
            let _ctx = init_with_context();
            let api = api();
            // SAFETY: fork in a single-threaded test child; the grandchild only calls the
            // emulator and exits with _exit.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0);
            if pid == 0 {
                let mut n: c_int = -1;
                // SAFETY: plain calls with valid out-pointers; _exit ends the grandchild.
                unsafe {
                    let cuda = (api.cuDeviceGetCount)(&mut n);
                    let cufile = (api.cuFileDriverOpen)();
                    let ok = cuda == CUDA_ERROR_NOT_INITIALIZED
                        && cufile.err == CUfileOpError::CU_FILE_CUDA_DRIVER_ERROR
                        && cufile.cu_err == CUDA_ERROR_NOT_INITIALIZED;
                    libc::_exit(if ok { 0 } else { 1 });
                }
            }
            let mut status = 0;
            // SAFETY: waits for the grandchild just forked.
            assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
            assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
            // The parent, which initialised CUDA, is unaffected.
            let mut n: c_int = -1;
            // SAFETY: a valid out-pointer.
            check(unsafe { (api.cuDeviceGetCount)(&mut n) });
            assert_eq!(n, 1);
        },
    );
}

// ---- contexts, and what cuFile needs of them ----

fn current(api: &Api) -> CUcontext {
    let mut ctx: CUcontext = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    check(unsafe { (api.cuCtxGetCurrent)(&mut ctx) });
    ctx
}

#[test]
fn each_thread_has_a_context_stack_that_push_pop_and_set_follow() {
    in_child(
        "each_thread_has_a_context_stack_that_push_pop_and_set_follow",
        &[("H5GDS_EMU_DEVICES", "2")],
        || {
            let api = api();
            let (mut c0, mut c1): (CUcontext, CUcontext) =
                (std::ptr::null_mut(), std::ptr::null_mut());
            let mut popped: CUcontext = std::ptr::null_mut();
            // SAFETY: plain calls with valid out-pointers.
            unsafe {
                check((api.cuInit)(0));
                check((api.cuDevicePrimaryCtxRetain)(&mut c0, 0));
                check((api.cuDevicePrimaryCtxRetain)(&mut c1, 1));
                // An empty stack: nothing current, nothing to pop.
                assert!(current(api).is_null());
                expect_code(
                    (api.cuCtxPopCurrent_v2)(&mut popped),
                    CUDA_ERROR_INVALID_CONTEXT,
                );
                // Push onto it, pop back to what was there.
                check((api.cuCtxSetCurrent)(c1));
                check((api.cuCtxPushCurrent_v2)(c0));
                assert_eq!(current(api), c0);
                check((api.cuCtxPopCurrent_v2)(&mut popped));
                assert_eq!((popped, current(api)), (c0, c1));
                // Set replaces the top; null pops it.
                check((api.cuCtxPushCurrent_v2)(c0));
                check((api.cuCtxSetCurrent)(c1));
                check((api.cuCtxPopCurrent_v2)(std::ptr::null_mut()));
                assert_eq!(current(api), c1);
                check((api.cuCtxSetCurrent)(std::ptr::null_mut()));
                assert!(current(api).is_null());
                // Only live contexts are pushed; another thread starts with an empty stack.
                expect_code(
                    (api.cuCtxPushCurrent_v2)(0x1234 as CUcontext),
                    CUDA_ERROR_INVALID_CONTEXT,
                );
                check((api.cuCtxPushCurrent_v2)(c0));
                let other = std::thread::spawn(|| current(self::api()) as usize)
                    .join()
                    .unwrap();
                assert_eq!(other, 0);
                assert_eq!(current(api), c0);
            }
        },
    );
}

#[test]
fn cufile_driver_open_and_handle_register_need_a_current_context() {
    in_child(
        "cufile_driver_open_and_handle_register_need_a_current_context",
        &[],
        || {
            let api = api();
            let dir = tempfile::tempdir().unwrap();
            let file = temp_file(dir.path(), "ctx.bin", false);
            let mut ctx: CUcontext = std::ptr::null_mut();
            // SAFETY: plain calls with valid out-pointers.
            unsafe {
                check((api.cuInit)(0));
                check((api.cuDevicePrimaryCtxRetain)(&mut ctx, 0));
                // Without a current context: the CUDA driver error INVALID_CONTEXT.
                let status = (api.cuFileDriverOpen)();
                assert_eq!(
                    (status.err, status.cu_err),
                    (
                        CUfileOpError::CU_FILE_CUDA_DRIVER_ERROR,
                        CUDA_ERROR_INVALID_CONTEXT
                    )
                );
                assert_eq!(
                    register(file.as_raw_fd()).err(),
                    Some((
                        CUfileOpError::CU_FILE_CUDA_DRIVER_ERROR,
                        CUDA_ERROR_INVALID_CONTEXT
                    ))
                );
                // With one (pushed, as the driver does), both succeed.
                check((api.cuCtxPushCurrent_v2)(ctx));
                check_cufile((api.cuFileDriverOpen)());
                let fh = register(file.as_raw_fd()).expect("registers with a context");
                (api.cuFileHandleDeregister)(fh);
                check((api.cuCtxPopCurrent_v2)(std::ptr::null_mut()));
                // The driver is open now, but registration still needs the thread's context.
                assert_eq!(
                    register(file.as_raw_fd()).err(),
                    Some((
                        CUfileOpError::CU_FILE_CUDA_DRIVER_ERROR,
                        CUDA_ERROR_INVALID_CONTEXT
                    ))
                );
            }
        },
    );
}

/// The emulator's report counter `name` now (`h5gds_emu_report_counter`).
#[track_caller]
fn report_counter(name: &str) -> u64 {
    let name = std::ffi::CString::new(name).unwrap();
    let mut out = u64::MAX;
    // SAFETY: a NUL-terminated string and a valid out-pointer.
    let status = unsafe { (api().h5gds_emu_report_counter)(name.as_ptr(), &mut out) };
    assert_eq!(status, 0, "{name:?}");
    out
}

#[test]
fn report_counters_can_be_read_while_the_program_runs() {
    let _guard = serial();
    assert_eq!(report_counter("double frees"), counters().double_frees);
    assert_eq!(
        report_counter("leaked device allocations"),
        counters().live_device_allocations
    );
    report_counter("pinned host bytes allocated");
    let mut out = 7u64;
    // SAFETY: a NUL-terminated string, null and valid out-pointers.
    unsafe {
        let api = api();
        assert_eq!(
            (api.h5gds_emu_report_counter)(c"no such line".as_ptr(), &mut out),
            -1
        );
        assert_eq!(
            (api.h5gds_emu_report_counter)(std::ptr::null(), &mut out),
            -1
        );
        let name = c"double frees".as_ptr();
        assert_eq!(
            (api.h5gds_emu_report_counter)(name, std::ptr::null_mut()),
            -1
        );
    }
    assert_eq!(out, 7);
}

#[test]
fn opening_cufile_costs_what_the_switch_says_explicitly_or_implied_once() {
    in_child(
        "opening_cufile_costs_what_the_switch_says_explicitly_or_implied_once",
        &[("H5GDS_EMU_CUFILE_OPEN_MS", "300")],
        || {
            let api = api();
            init_with_context();
            let dir = tempfile::tempdir().unwrap();
            let file = temp_file(dir.path(), "open.bin", false);
            assert_eq!(report_counter("cufile driver opens completed"), 0);
            // The implied open of the first call that needs the driver pays the cost.
            let start = std::time::Instant::now();
            let fh = register(file.as_raw_fd()).expect("registers");
            assert!(start.elapsed() >= std::time::Duration::from_millis(300));
            assert_eq!(report_counter("cufile driver opens completed"), 1);
            assert_eq!(report_counter("cufile driver open calls"), 0);
            // SAFETY: a handle registered above; plain calls.
            unsafe {
                (api.cuFileHandleDeregister)(fh);
                // The driver is open: an explicit open is counted, and costs nothing more.
                check_cufile((api.cuFileDriverOpen)());
                check_cufile((api.cuFileDriverClose)());
                check_cufile((api.cuFileDriverClose)());
                // Closed again: an explicit open pays again, and is counted when it returns.
                let start = std::time::Instant::now();
                check_cufile((api.cuFileDriverOpen)());
                assert!(start.elapsed() >= std::time::Duration::from_millis(300));
            }
            assert_eq!(report_counter("cufile driver open calls"), 2);
            assert_eq!(report_counter("cufile driver opens completed"), 3);
        },
    );
}

#[test]
fn an_open_under_way_is_not_counted_as_completed() {
    in_child(
        "an_open_under_way_is_not_counted_as_completed",
        &[("H5GDS_EMU_CUFILE_OPEN_MS", "2000")],
        || {
            init_with_context();
            let ctx = {
                let mut ctx: CUcontext = std::ptr::null_mut();
                // SAFETY: a valid out-pointer.
                check(unsafe { (api().cuCtxGetCurrent)(&mut ctx) });
                ctx as usize
            };
            let opener = std::thread::spawn(move || {
                // SAFETY: the context is device 0's primary context, retained by this process.
                unsafe {
                    check((api().cuCtxSetCurrent)(ctx as CUcontext));
                    check_cufile((api().cuFileDriverOpen)());
                }
            });
            while report_counter("cufile driver open calls") == 0 {
                std::thread::yield_now();
            }
            assert_eq!(report_counter("cufile driver opens completed"), 0);
            opener.join().unwrap();
            assert_eq!(report_counter("cufile driver opens completed"), 1);
        },
    );
}

/// `cuFileGetParameterBool(CUFILE_PARAM_USE_PCIP2PDMA)` in a child (test `name`) with `env`
/// and no other `H5GDS_EMU_*` or `CUFILE_*` variable; `json` is written to a file that
/// `CUFILE_ENV_PATH_JSON` names.
fn use_pci_p2pdma_reads(name: &str, env: &[(&str, &str)], json: Option<&str>, expected: bool) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cufile.json");
    if let Some(json) = json {
        std::fs::write(&path, json).unwrap();
    }
    let path = path.to_str().unwrap().to_owned();
    process::in_child(
        name,
        |cmd| {
            remove_env(cmd, &["H5GDS_EMU_", "CUFILE_"]).envs(env.iter().copied());
            if json.is_some() {
                cmd.env("CUFILE_ENV_PATH_JSON", &path);
            }
        },
        || {
            let mut value = !expected;
            // SAFETY: a valid out-pointer for a C bool.
            check_cufile(unsafe {
                (api().cuFileGetParameterBool)(
                    cufile_sys::CUFileBoolConfigParameter_t::CUFILE_PARAM_USE_PCIP2PDMA,
                    &mut value,
                )
            });
            assert_eq!(value, expected);
        },
    );
}

#[test]
fn use_pci_p2pdma_is_the_emulated_machines_without_cufile_env_path_json() {
    // The emulated machine's own cufile.json asks for it wherever it has a GDS kernel path.
    let name = "use_pci_p2pdma_is_the_emulated_machines_without_cufile_env_path_json";
    use_pci_p2pdma_reads(name, &[("H5GDS_EMU_GDS", "1")], None, true);
}

#[test]
fn use_pci_p2pdma_comes_from_the_file_cufile_env_path_json_names() {
    // Whatever the machine, the application's file decides; NVIDIA's cufile.json has comments.
    let name = "use_pci_p2pdma_comes_from_the_file_cufile_env_path_json_names";
    let json = "{\n  // comments, as in NVIDIA's cufile.json\n  \"properties\": {\n    \
                \"allow_compat_mode\": true, \"use_pci_p2pdma\": true\n  }\n}\n";
    use_pci_p2pdma_reads(name, &[("H5GDS_EMU_GDS", "0")], Some(json), true);
}

#[test]
fn use_pci_p2pdma_absent_from_the_file_is_cufiles_default_false() {
    let name = "use_pci_p2pdma_absent_from_the_file_is_cufiles_default_false";
    let json = r#"{"properties": {"allow_compat_mode": true}}"#;
    use_pci_p2pdma_reads(name, &[("H5GDS_EMU_GDS", "p2pdma")], Some(json), false);
}

#[test]
fn use_pci_p2pdma_of_a_broken_file_is_false() {
    let name = "use_pci_p2pdma_of_a_broken_file_is_false";
    use_pci_p2pdma_reads(
        name,
        &[("H5GDS_EMU_GDS", "1")],
        Some(r#"{"properties": "#),
        false,
    );
}

/// Opens the cuFile driver with a context, in a child (see the callers).
fn open_cufile_driver() {
    let api = api();
    init_with_context();
    // SAFETY: plain call.
    check_cufile(unsafe { (api.cuFileDriverOpen)() });
}

#[test]
fn cufile_logs_into_the_working_directory_by_default() {
    let cwd = tempfile::tempdir().unwrap();
    let cwd_path = cwd.path().to_path_buf();
    let ran = process::in_child(
        "cufile_logs_into_the_working_directory_by_default",
        |cmd| {
            remove_env(cmd, &["H5GDS_EMU_", "CUFILE_"])
                .env(DEFAULT_LOG_PLACE, "1")
                .current_dir(&cwd_path);
        },
        open_cufile_driver,
    );
    if ran.is_some() {
        let text = std::fs::read_to_string(cwd.path().join("cufile.log")).unwrap_or_default();
        assert!(text.contains("cuFile driver opened"), "{text:?}");
    }
}

#[test]
fn cufile_logs_where_its_parameters_and_environment_say() {
    in_child(
        "cufile_logs_where_its_parameters_and_environment_say",
        &[],
        || {
            use cufile_sys::CUFileStringConfigParameter_t as P;
            let api = api();
            // `api()` staged a log directory: it reads back before the driver opens.
            let mut value = [0 as c_char; 512];
            // SAFETY: the buffer holds 512 bytes.
            check_cufile(unsafe {
                (api.cuFileGetParameterString)(P::CUFILE_PARAM_LOG_DIR, value.as_mut_ptr(), 512)
            });
            // SAFETY: cuFile NUL-terminated it.
            let dir = unsafe { CStr::from_ptr(value.as_ptr()) }
                .to_str()
                .unwrap()
                .to_string();
            assert!(!dir.is_empty());
            open_cufile_driver();
            let text = std::fs::read_to_string(Path::new(&dir).join("cufile.log")).unwrap();
            assert!(text.contains("cuFile driver opened"), "{text:?}");
            assert!(
                !Path::new("cufile.log").exists(),
                "not in the working directory"
            );
            // Parameters are set before the driver opens, never after.
            // SAFETY: a NUL-terminated string.
            let late =
                unsafe { (api.cuFileSetParameterString)(P::CUFILE_PARAM_LOG_DIR, c"/".as_ptr()) };
            assert_eq!(late.err, CUfileOpError::CU_FILE_DRIVER_ALREADY_OPEN);
        },
    );
}

#[test]
fn cufile_logs_to_the_file_cufile_logfile_path_names() {
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("mine.log");
    let cwd = tempfile::tempdir().unwrap();
    let cwd_path = cwd.path().to_path_buf();
    let log_str = log.to_str().unwrap().to_string();
    let ran = process::in_child(
        "cufile_logs_to_the_file_cufile_logfile_path_names",
        |cmd| {
            remove_env(cmd, &["H5GDS_EMU_", "CUFILE_"])
                .env(DEFAULT_LOG_PLACE, "1")
                .env("CUFILE_LOGFILE_PATH", &log_str)
                .current_dir(&cwd_path);
        },
        open_cufile_driver,
    );
    if ran.is_some() {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(text.contains("cuFile driver opened"), "{text:?}");
        assert!(!cwd.path().join("cufile.log").exists());
    }
}
