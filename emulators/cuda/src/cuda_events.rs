//! CUDA driver API, part 3: what cudarc's safe API needs beyond plain copies — device
//! attributes, events, stream waits and asynchronous memset.
//!
//! The bytes of all work have moved by the time an event is recorded, so a wait has nothing to
//! wait for, except on the modelled link's timeline (`H5GDS_EMU_LINK_GBPS`, see `timeline`),
//! where an event completes when the modelled copies queued before it end. The calls check their
//! handles, flags and context as the driver does, so misuse fails here as it would on a GPU.

use crate::consts::*;
use crate::context;
use crate::ffi::{call, code, cuda_panic, put};
use crate::switches;
use std::ffi::{c_int, c_uint};

/// The value of device attribute `attrib`, for the attributes the emulator models.
fn attribute(attrib: CUdeviceAttribute) -> Result<c_int, CUresult> {
    Ok(match attrib {
        a if a <= 0 => return Err(CUDA_ERROR_INVALID_VALUE),
        CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY | CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING => 1,
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR => 8,
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR => 0,
        // cuMemAllocManaged works; host and device never access it concurrently.
        CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY => 1,
        CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS => 0,
        CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED => c_int::from(switches::get().pools),
        CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED => c_int::from(switches::get().gds),
        _ => return Err(CUDA_ERROR_NOT_SUPPORTED),
    })
}

/// `CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)`
///
/// # Safety
/// `pi` must be null or valid for writing an `int`.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    pi: *mut c_int,
    attrib: CUdeviceAttribute,
    dev: CUdevice,
) -> CUresult {
    call(
        "cuDeviceGetAttribute",
        format_args!("{pi:?}, attrib={attrib}, dev={dev}"),
        cuda_panic,
        || {
            code((|| {
                context::require_init()?;
                context::check_device(dev)?;
                if pi.is_null() {
                    return Err(CUDA_ERROR_INVALID_VALUE);
                }
                let value = attribute(attrib)?;
                // SAFETY: checked non-null; the caller passes a writable int.
                unsafe { put(pi, value) }
            })())
        },
    )
}

/// `CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)`: needs a current context.
///
/// # Safety
/// `event` must be null or valid for writing a `CUevent`.
#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(event: *mut CUevent, flags: c_uint) -> CUresult {
    call(
        "cuEventCreate",
        format_args!("{event:?}, flags={flags:#x}"),
        cuda_panic,
        || {
            code((|| {
                context::require_init()?;
                context::require_current()?;
                let known =
                    CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
                let interprocess_needs_no_timing =
                    flags & CU_EVENT_INTERPROCESS != 0 && flags & CU_EVENT_DISABLE_TIMING == 0;
                if event.is_null() || flags & !known != 0 || interprocess_needs_no_timing {
                    return Err(CUDA_ERROR_INVALID_VALUE);
                }
                let handle = context::create_event();
                // SAFETY: checked non-null; the caller passes a writable CUevent.
                unsafe { put(event, handle as CUevent) }
            })())
        },
    )
}

/// `CUresult cuEventDestroy_v2(CUevent hEvent)`
///
/// # Safety
/// None beyond the C API's: the handle is looked up, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuEventDestroy_v2(event: CUevent) -> CUresult {
    call(
        "cuEventDestroy_v2",
        format_args!("{event:?}"),
        cuda_panic,
        || {
            code(
                context::require_init()
                    .and_then(|()| context::destroy_event(event as usize))
                    .map(|()| crate::timeline::forget(event as usize)),
            )
        },
    )
}

/// `CUresult cuEventRecord(CUevent hEvent, CUstream hStream)`: needs a current context; the
/// event is complete at once, so the work queued on `hStream` before it (`H5GDS_EMU_DEFER_ASYNC`)
/// runs now: whoever waits for the event sees it done.
///
/// # Safety
/// None beyond the C API's: handles are looked up, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuEventRecord(event: CUevent, stream: CUstream) -> CUresult {
    call(
        "cuEventRecord",
        format_args!("{event:?}, stream={stream:?}"),
        cuda_panic,
        || {
            code((|| {
                context::require_init()?;
                context::require_current()?;
                context::check_event(event as usize)?;
                context::check_stream(stream as usize)?;
                crate::copies::run_deferred(Some(stream as usize));
                let key = crate::copies::queue_key(stream as usize);
                crate::timeline::record(event as usize, key);
                Ok(())
            })())
        },
    )
}

/// `CUresult cuEventQuery(CUevent hEvent)`: CUDA_SUCCESS, or CUDA_ERROR_NOT_READY while the
/// modelled copies queued before the event run (`timeline`).
///
/// # Safety
/// None beyond the C API's: the handle is looked up, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuEventQuery(event: CUevent) -> CUresult {
    call(
        "cuEventQuery",
        format_args!("{event:?}"),
        cuda_panic,
        || {
            code(
                context::require_init()
                    .and_then(|()| context::check_event(event as usize))
                    .and_then(|()| crate::timeline::query(event as usize)),
            )
        },
    )
}

/// `CUresult cuEventSynchronize(CUevent hEvent)`: checks the handle; waits for the event on the
/// modelled timeline.
///
/// # Safety
/// None beyond the C API's: the handle is looked up, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuEventSynchronize(event: CUevent) -> CUresult {
    call(
        "cuEventSynchronize",
        format_args!("{event:?}"),
        cuda_panic,
        || {
            code(
                context::require_init()
                    .and_then(|()| context::check_event(event as usize))
                    .map(|()| crate::timeline::wait_event(event as usize)),
            )
        },
    )
}

/// `CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)`: needs a
/// current context; on the modelled timeline the stream's later work starts after the event.
///
/// # Safety
/// None beyond the C API's: handles are looked up, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuStreamWaitEvent(
    stream: CUstream,
    event: CUevent,
    flags: c_uint,
) -> CUresult {
    call(
        "cuStreamWaitEvent",
        format_args!("stream={stream:?}, {event:?}, flags={flags:#x}"),
        cuda_panic,
        || {
            code((|| {
                context::require_init()?;
                context::require_current()?;
                if flags & !CU_EVENT_WAIT_EXTERNAL != 0 {
                    return Err(CUDA_ERROR_INVALID_VALUE);
                }
                context::check_stream(stream as usize)?;
                context::check_event(event as usize)?;
                let key = crate::copies::queue_key(stream as usize);
                crate::timeline::stream_waits(key, event as usize);
                Ok(())
            })())
        },
    )
}
