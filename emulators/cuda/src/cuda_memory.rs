//! CUDA driver API, part 2: allocation, and the entry points of copies and memset (done by
//! `copies`).
//!
//! Every call needs `cuInit` and a current context (CUDA_ERROR_INVALID_CONTEXT otherwise, as
//! with the real driver: each thread of an I/O pool must set the context). All copies are
//! synchronous, the `Async` ones too, so data is in place when a call returns, unless
//! `H5GDS_EMU_DEFER_ASYNC=1`: then what the real driver may leave running when the call
//! returns is queued on its stream and runs when something synchronizes with that stream.

use crate::consts::*;
use crate::context;
use crate::copies::{
    copy, copy_async, device_end, host_end, memset, run_deferred, strided_copy, unified_end, Side,
    LEGACY,
};
use crate::counters;
use crate::ffi::{call, code, cuda_panic, put};
use crate::memory;
use crate::switches;
use std::ffi::{c_uint, c_void};

/// The current context's allocation for `H5GDS_EMU_FAIL_ALLOC` and friends; `host_flags` are
/// `cuMemHostAlloc`'s, `None` for device memory.
fn allocate(size: usize, host_flags: Option<c_uint>) -> Result<usize, CUresult> {
    context::require_init()?;
    let (ctx, dev) = context::require_current()?;
    if size == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let switches = switches::get();
    if counters::is_nth_call(&counters::ALLOCATION_CALLS, switches.fail_alloc) {
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    }
    match host_flags {
        None => memory::alloc_device(size, ctx, dev, switches.poison),
        Some(flags) => {
            let portable = flags & CU_MEMHOSTALLOC_PORTABLE != 0;
            memory::alloc_host(size, ctx, dev, portable, switches.poison)
        }
    }
}

/// `CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)`: memory is filled with the
/// poison byte (`H5GDS_EMU_POISON`), since real device memory starts out as garbage.
///
/// # Safety
/// `dptr` must be null or valid for writing a `CUdeviceptr`.
#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytesize: usize) -> CUresult {
    call(
        "cuMemAlloc_v2",
        format_args!("{dptr:?}, bytesize={bytesize}"),
        cuda_panic,
        || {
            code((|| {
                if dptr.is_null() {
                    context::require_init()?;
                    return Err(CUDA_ERROR_INVALID_VALUE);
                }
                let base = allocate(bytesize, None)?;
                // SAFETY: checked non-null; the caller passes a writable CUdeviceptr.
                unsafe { put(dptr, base as CUdeviceptr) }
            })())
        },
    )
}

/// `CUresult cuMemFree_v2(CUdeviceptr dptr)`
///
/// # Safety
/// None beyond the C API's: arguments are validated.
#[no_mangle]
pub unsafe extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> CUresult {
    call(
        "cuMemFree_v2",
        format_args!("{dptr:#x}"),
        cuda_panic,
        || {
            code((|| {
                context::require_init()?;
                context::require_current()?;
                let base = usize::try_from(dptr).map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
                run_deferred(None);
                crate::timeline::wait_all();
                // Pool allocations may be freed synchronously too.
                if crate::cuda_vmm::pool_free(base)? {
                    return Ok(());
                }
                memory::free_device(base)
            })())
        },
    )
}

/// `CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)`: page-aligned
/// host memory, tracked as pinned. Flags (PORTABLE 1, DEVICEMAP 2, WRITECOMBINED 4) are
/// accepted; PORTABLE makes it pinned for every context, not only the current one.
///
/// # Safety
/// `pp` must be null or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn cuMemHostAlloc(
    pp: *mut *mut c_void,
    bytesize: usize,
    flags: c_uint,
) -> CUresult {
    call(
        "cuMemHostAlloc",
        format_args!("{pp:?}, bytesize={bytesize}, flags={flags:#x}"),
        cuda_panic,
        || {
            code((|| {
                if pp.is_null() || flags & !0x7 != 0 {
                    context::require_init()?;
                    return Err(CUDA_ERROR_INVALID_VALUE);
                }
                let base = allocate(bytesize, Some(flags))?;
                // SAFETY: checked non-null; the caller passes a writable pointer.
                unsafe { put(pp, base as *mut c_void) }
            })())
        },
    )
}

/// `CUresult cuMemFreeHost(void *p)`
///
/// # Safety
/// None beyond the C API's: the pointer is looked up, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuMemFreeHost(p: *mut c_void) -> CUresult {
    call("cuMemFreeHost", format_args!("{p:?}"), cuda_panic, || {
        code((|| {
            context::require_init()?;
            context::require_current()?;
            run_deferred(None);
            crate::timeline::wait_all();
            memory::free_host(p as usize)
        })())
    })
}

/// `CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)`
///
/// # Safety
/// Host pointers must be valid for `len` bytes, as the C API requires.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoD_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    len: usize,
) -> CUresult {
    call(
        "cuMemcpyHtoD_v2",
        format_args!("dst={dst:#x}, src={src:?}, len={len}"),
        cuda_panic,
        || {
            code(copy(
                len,
                || device_end(dst, len),
                || host_end(src as usize, len),
            ))
        },
    )
}

/// `CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)`
///
/// # Safety
/// Host pointers must be valid for `len` bytes, as the C API requires.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(
    dst: *mut c_void,
    src: CUdeviceptr,
    len: usize,
) -> CUresult {
    call(
        "cuMemcpyDtoH_v2",
        format_args!("dst={dst:?}, src={src:#x}, len={len}"),
        cuda_panic,
        || {
            code(copy(
                len,
                || host_end(dst as usize, len),
                || device_end(src, len),
            ))
        },
    )
}

/// `CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)`
///
/// # Safety
/// None beyond the C API's: arguments are validated.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoD_v2(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    len: usize,
) -> CUresult {
    call(
        "cuMemcpyDtoD_v2",
        format_args!("dst={dst:#x}, src={src:#x}, len={len}"),
        cuda_panic,
        || code(copy(len, || device_end(dst, len), || device_end(src, len))),
    )
}

/// `CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t
/// ByteCount, CUstream hStream)`: done before it returns, or queued on the stream
/// (`H5GDS_EMU_DEFER_ASYNC=1`).
///
/// # Safety
/// None beyond the C API's: arguments are validated.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoDAsync_v2(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    len: usize,
    stream: CUstream,
) -> CUresult {
    call(
        "cuMemcpyDtoDAsync_v2",
        format_args!("dst={dst:#x}, src={src:#x}, len={len}, stream={stream:?}"),
        cuda_panic,
        || {
            code(copy_async(
                stream,
                len,
                || device_end(dst, len),
                || device_end(src, len),
            ))
        },
    )
}

/// `CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *pCopy, CUstream hStream)`: linear
/// memory only (`copies::strided_copy`); done before it returns, or queued on the stream as
/// `cuMemcpyDtoDAsync_v2` and `cuMemcpyHtoDAsync_v2` are.
///
/// # Safety
/// `copy` must be null or point to a `CUDA_MEMCPY2D`; host ends must hold the rows it names.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpy2DAsync_v2(
    copy: *const CudaMemcpy2D,
    stream: CUstream,
) -> CUresult {
    // SAFETY: the caller passes null or a valid descriptor.
    let p = unsafe { copy.as_ref() };
    call(
        "cuMemcpy2DAsync_v2",
        format_args!("{p:?}, stream={stream:?}"),
        cuda_panic,
        || {
            code((|| {
                context::require_init()?;
                let p = p.ok_or(CUDA_ERROR_INVALID_VALUE)?;
                let side = |kind, host, device, array: *mut c_void, x, y, pitch| Side {
                    memory_type: kind,
                    host,
                    device,
                    array: array as usize,
                    lod: 0,
                    reserved: 0,
                    x,
                    y,
                    z: 0,
                    pitch,
                    rows: p.height,
                };
                strided_copy(
                    stream,
                    (p.width_in_bytes, p.height, 1),
                    side(
                        p.src_memory_type,
                        p.src_host as usize,
                        p.src_device,
                        p.src_array,
                        p.src_x_in_bytes,
                        p.src_y,
                        p.src_pitch,
                    ),
                    side(
                        p.dst_memory_type,
                        p.dst_host as usize,
                        p.dst_device,
                        p.dst_array,
                        p.dst_x_in_bytes,
                        p.dst_y,
                        p.dst_pitch,
                    ),
                )
            })())
        },
    )
}

/// `CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *pCopy, CUstream hStream)`: as
/// `cuMemcpy2DAsync_v2`, slice by slice.
///
/// # Safety
/// `copy` must be null or point to a `CUDA_MEMCPY3D`; host ends must hold the rows it names.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpy3DAsync_v2(
    copy: *const CudaMemcpy3D,
    stream: CUstream,
) -> CUresult {
    // SAFETY: the caller passes null or a valid descriptor.
    let p = unsafe { copy.as_ref() };
    call(
        "cuMemcpy3DAsync_v2",
        format_args!("{p:?}, stream={stream:?}"),
        cuda_panic,
        || {
            code((|| {
                context::require_init()?;
                let p = p.ok_or(CUDA_ERROR_INVALID_VALUE)?;
                let src = Side {
                    memory_type: p.src_memory_type,
                    host: p.src_host as usize,
                    device: p.src_device,
                    array: p.src_array as usize,
                    lod: p.src_lod,
                    reserved: p.reserved0 as usize,
                    x: p.src_x_in_bytes,
                    y: p.src_y,
                    z: p.src_z,
                    pitch: p.src_pitch,
                    rows: p.src_height,
                };
                let dst = Side {
                    memory_type: p.dst_memory_type,
                    host: p.dst_host as usize,
                    device: p.dst_device,
                    array: p.dst_array as usize,
                    lod: p.dst_lod,
                    reserved: p.reserved1 as usize,
                    x: p.dst_x_in_bytes,
                    y: p.dst_y,
                    z: p.dst_z,
                    pitch: p.dst_pitch,
                    rows: p.dst_height,
                };
                strided_copy(stream, (p.width_in_bytes, p.height, p.depth), src, dst)
            })())
        },
    )
}

/// `CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)`: unified
/// addressing; each end is device memory if it starts in a device allocation, else host.
///
/// # Safety
/// Host pointers must be valid for `len` bytes, as the C API requires.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpy(dst: CUdeviceptr, src: CUdeviceptr, len: usize) -> CUresult {
    call(
        "cuMemcpy",
        format_args!("dst={dst:#x}, src={src:#x}, len={len}"),
        cuda_panic,
        || {
            code(copy(
                len,
                || unified_end(dst, len),
                || unified_end(src, len),
            ))
        },
    )
}

/// `CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t
/// ByteCount, CUstream hStream)`: done before it returns.
///
/// # Safety
/// Host pointers must be valid for `len` bytes, as the C API requires.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    len: usize,
    stream: CUstream,
) -> CUresult {
    call(
        "cuMemcpyHtoDAsync_v2",
        format_args!("dst={dst:#x}, src={src:?}, len={len}, stream={stream:?}"),
        cuda_panic,
        || {
            code(copy_async(
                stream,
                len,
                || device_end(dst, len),
                || host_end(src as usize, len),
            ))
        },
    )
}

/// `CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
/// CUstream hStream)`: done before it returns.
///
/// # Safety
/// Host pointers must be valid for `len` bytes, as the C API requires.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(
    dst: *mut c_void,
    src: CUdeviceptr,
    len: usize,
    stream: CUstream,
) -> CUresult {
    call(
        "cuMemcpyDtoHAsync_v2",
        format_args!("dst={dst:?}, src={src:#x}, len={len}, stream={stream:?}"),
        cuda_panic,
        || {
            code(copy_async(
                stream,
                len,
                || host_end(dst as usize, len),
                || device_end(src, len),
            ))
        },
    )
}

/// `CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)`
///
/// # Safety
/// None beyond the C API's: arguments are validated.
#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8_v2(dst: CUdeviceptr, value: u8, n: usize) -> CUresult {
    call(
        "cuMemsetD8_v2",
        format_args!("dst={dst:#x}, value={value}, n={n}"),
        cuda_panic,
        || code(memset(dst, value, n, LEGACY)),
    )
}

/// `CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream
/// hStream)`: done before it returns.
///
/// # Safety
/// None beyond the C API's: arguments are validated.
#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8Async(
    dst: CUdeviceptr,
    value: u8,
    n: usize,
    stream: CUstream,
) -> CUresult {
    call(
        "cuMemsetD8Async",
        format_args!("dst={dst:#x}, value={value}, n={n}, stream={stream:?}"),
        cuda_panic,
        || {
            code((|| {
                context::require_init()?;
                context::require_current()?;
                context::check_stream(stream as usize)?;
                memset(dst, value, n, stream as usize)
            })())
        },
    )
}
