//! CUDA driver API, part 1: initialisation, devices, primary contexts, streams, error strings.

use crate::consts::*;
use crate::context;
use crate::ffi::{call, code, cuda_panic, put};
use std::ffi::{c_char, c_int, c_uint};

/// `CUresult cuInit(unsigned int Flags)`
///
/// # Safety
/// None beyond the C API's: arguments are validated.
#[no_mangle]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> CUresult {
    call("cuInit", format_args!("flags={flags}"), cuda_panic, || {
        code(context::init(flags))
    })
}

/// `CUresult cuDriverGetVersion(int *driverVersion)`: works before `cuInit`.
///
/// # Safety
/// `version` must be null or valid for writing an `int`.
#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> CUresult {
    call(
        "cuDriverGetVersion",
        format_args!("{version:?}"),
        cuda_panic,
        // SAFETY: the caller passes null or a writable int.
        || code(unsafe { put(version, DRIVER_VERSION) }),
    )
}

/// `CUresult cuDeviceGetCount(int *count)`
///
/// # Safety
/// `count` must be null or valid for writing an `int`.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CUresult {
    call(
        "cuDeviceGetCount",
        format_args!("{count:?}"),
        cuda_panic,
        || {
            code(context::require_init().and_then(|()| {
                // SAFETY: the caller passes null or a writable int.
                unsafe { put(count, context::device_count()) }
            }))
        },
    )
}

/// `CUresult cuDeviceGet(CUdevice *device, int ordinal)`
///
/// # Safety
/// `device` must be null or valid for writing a `CUdevice`.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> CUresult {
    call(
        "cuDeviceGet",
        format_args!("{device:?}, ordinal={ordinal}"),
        cuda_panic,
        || {
            code((|| {
                context::require_init()?;
                context::check_device(ordinal)?;
                // SAFETY: the caller passes null or a writable CUdevice.
                unsafe { put(device, ordinal) }
            })())
        },
    )
}

/// `CUresult cuDeviceGetName(char *name, int len, CUdevice dev)`: "h5gds emulated GPU <dev>",
/// truncated to `len - 1` bytes plus the terminating NUL.
///
/// # Safety
/// `name` must be null or valid for writing `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    call(
        "cuDeviceGetName",
        format_args!("{name:?}, len={len}, dev={dev}"),
        cuda_panic,
        || {
            code((|| {
                context::require_init()?;
                context::check_device(dev)?;
                if name.is_null() || len <= 0 {
                    return Err(CUDA_ERROR_INVALID_VALUE);
                }
                let text = format!("h5gds emulated GPU {dev}");
                let n = text.len().min(len as usize - 1);
                // SAFETY: name is valid for len bytes and n + 1 <= len.
                unsafe {
                    std::ptr::copy_nonoverlapping(text.as_ptr(), name.cast::<u8>(), n);
                    *name.add(n) = 0;
                }
                Ok(())
            })())
        },
    )
}

/// `CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)`
///
/// # Safety
/// `pctx` must be null or valid for writing a `CUcontext`.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    call(
        "cuDevicePrimaryCtxRetain",
        format_args!("{pctx:?}, dev={dev}"),
        cuda_panic,
        || {
            code((|| {
                context::require_init()?;
                if pctx.is_null() {
                    return Err(CUDA_ERROR_INVALID_VALUE);
                }
                let handle = context::retain_primary(dev)?;
                // SAFETY: checked non-null; the caller passes a writable CUcontext.
                unsafe { put(pctx, handle as CUcontext) }
            })())
        },
    )
}

/// `CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)`
///
/// # Safety
/// None beyond the C API's: arguments are validated.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) -> CUresult {
    call(
        "cuDevicePrimaryCtxRelease_v2",
        format_args!("dev={dev}"),
        cuda_panic,
        || code(context::require_init().and_then(|()| context::release_primary(dev))),
    )
}

/// `CUresult cuCtxSetCurrent(CUcontext ctx)`
///
/// # Safety
/// None beyond the C API's: arguments are validated.
#[no_mangle]
pub unsafe extern "C" fn cuCtxSetCurrent(ctx: CUcontext) -> CUresult {
    call(
        "cuCtxSetCurrent",
        format_args!("{ctx:?}"),
        cuda_panic,
        || code(context::require_init().and_then(|()| context::set_current(ctx as usize))),
    )
}

/// `CUresult cuCtxGetCurrent(CUcontext *pctx)`: null if the thread has no context.
///
/// # Safety
/// `pctx` must be null or valid for writing a `CUcontext`.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCurrent(pctx: *mut CUcontext) -> CUresult {
    call(
        "cuCtxGetCurrent",
        format_args!("{pctx:?}"),
        cuda_panic,
        || {
            code(context::require_init().and_then(|()| {
                // SAFETY: the caller passes null or a writable CUcontext.
                unsafe { put(pctx, context::current_handle() as CUcontext) }
            }))
        },
    )
}

/// `CUresult cuCtxPushCurrent_v2(CUcontext ctx)`: onto the calling thread's context stack.
///
/// # Safety
/// None beyond the C API's: arguments are validated.
#[no_mangle]
pub unsafe extern "C" fn cuCtxPushCurrent_v2(ctx: CUcontext) -> CUresult {
    call(
        "cuCtxPushCurrent_v2",
        format_args!("{ctx:?}"),
        cuda_panic,
        || code(context::require_init().and_then(|()| context::push_current(ctx as usize))),
    )
}

/// `CUresult cuCtxPopCurrent_v2(CUcontext *pctx)`: off the calling thread's context stack;
/// the popped context goes to `pctx` unless it is null.
///
/// # Safety
/// `pctx` must be null or valid for writing a `CUcontext`.
#[no_mangle]
pub unsafe extern "C" fn cuCtxPopCurrent_v2(pctx: *mut CUcontext) -> CUresult {
    call(
        "cuCtxPopCurrent_v2",
        format_args!("{pctx:?}"),
        cuda_panic,
        || {
            code(context::require_init().and_then(|()| {
                let popped = context::pop_current()?;
                if pctx.is_null() {
                    return Ok(());
                }
                // SAFETY: the caller passes null (handled above) or a writable CUcontext.
                unsafe { put(pctx, popped as CUcontext) }
            }))
        },
    )
}

/// `CUresult cuCtxSynchronize(void)`: all work is synchronous, so only the context is checked.
///
/// # Safety
/// None beyond the C API's: arguments are validated.
#[no_mangle]
pub unsafe extern "C" fn cuCtxSynchronize() -> CUresult {
    call("cuCtxSynchronize", format_args!(""), cuda_panic, || {
        code(
            context::require_init()
                .and_then(|()| context::require_current().map(drop))
                .map(|()| {
                    crate::copies::run_deferred(None);
                    crate::timeline::wait_all();
                }),
        )
    })
}

/// `CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)`
///
/// # Safety
/// `stream` must be null or valid for writing a `CUstream`.
#[no_mangle]
pub unsafe extern "C" fn cuStreamCreate(stream: *mut CUstream, flags: c_uint) -> CUresult {
    call(
        "cuStreamCreate",
        format_args!("{stream:?}, flags={flags}"),
        cuda_panic,
        || {
            code((|| {
                context::require_init()?;
                let (current, _) = context::require_current()?;
                // CU_STREAM_DEFAULT (0) and CU_STREAM_NON_BLOCKING (1) are the only flags.
                if stream.is_null() || flags > 1 {
                    return Err(CUDA_ERROR_INVALID_VALUE);
                }
                let handle = context::create_stream(current);
                // SAFETY: checked non-null; the caller passes a writable CUstream.
                unsafe { put(stream, handle as CUstream) }
            })())
        },
    )
}

/// `CUresult cuStreamDestroy_v2(CUstream hStream)`
///
/// # Safety
/// None beyond the C API's: arguments are validated.
#[no_mangle]
pub unsafe extern "C" fn cuStreamDestroy_v2(stream: CUstream) -> CUresult {
    call(
        "cuStreamDestroy_v2",
        format_args!("{stream:?}"),
        cuda_panic,
        || {
            code((|| {
                context::require_init()?;
                context::require_current()?;
                crate::copies::run_deferred(Some(stream as usize));
                context::destroy_stream(stream as usize)?;
                // The device finishes the stream's work on its own ("the function will return
                // immediately", CUDA Driver API, cuStreamDestroy).
                crate::timeline::forget(stream as usize);
                Ok(())
            })())
        },
    )
}

/// `CUresult cuStreamSynchronize(CUstream hStream)`: work is synchronous; checks the handle.
///
/// # Safety
/// None beyond the C API's: arguments are validated.
#[no_mangle]
pub unsafe extern "C" fn cuStreamSynchronize(stream: CUstream) -> CUresult {
    call(
        "cuStreamSynchronize",
        format_args!("{stream:?}"),
        cuda_panic,
        || {
            code((|| {
                context::require_init()?;
                context::require_current()?;
                context::check_stream(stream as usize)?;
                context::note_stream_use(stream as usize);
                crate::copies::run_deferred(Some(stream as usize));
                crate::timeline::wait_stream(crate::copies::queue_key(stream as usize));
                Ok(())
            })())
        },
    )
}

/// `CUresult cuGetErrorString(CUresult error, const char **pStr)`: works before `cuInit`;
/// an unknown code gives CUDA_ERROR_INVALID_VALUE and `*pStr = NULL`.
///
/// # Safety
/// `text` must be null or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(error: CUresult, text: *mut *const c_char) -> CUresult {
    call(
        "cuGetErrorString",
        format_args!("error={error}, {text:?}"),
        cuda_panic,
        // SAFETY: the caller passes null or a writable pointer.
        || unsafe { error_text(text, crate::errors::description(error)) },
    )
}

/// `CUresult cuGetErrorName(CUresult error, const char **pStr)`: as `cuGetErrorString`.
///
/// # Safety
/// `text` must be null or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(error: CUresult, text: *mut *const c_char) -> CUresult {
    call(
        "cuGetErrorName",
        format_args!("error={error}, {text:?}"),
        cuda_panic,
        // SAFETY: the caller passes null or a writable pointer.
        || unsafe { error_text(text, crate::errors::name(error)) },
    )
}

/// Stores a static string (or NULL) for `cuGetError*`.
///
/// # Safety
/// `out` must be null or valid for writing a pointer.
unsafe fn error_text(out: *mut *const c_char, text: Option<&'static std::ffi::CStr>) -> CUresult {
    let ptr = text.map_or(std::ptr::null(), |t| t.as_ptr());
    // SAFETY: the caller passes null or a writable pointer.
    if let Err(code) = unsafe { put(out, ptr) } {
        return code;
    }
    if text.is_some() {
        CUDA_SUCCESS
    } else {
        CUDA_ERROR_INVALID_VALUE
    }
}
