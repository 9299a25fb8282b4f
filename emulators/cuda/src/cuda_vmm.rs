//! CUDA driver API, part 4: memory that is not one `cuMemAlloc` of a context — virtual memory
//! management (VMM), stream-ordered pools and managed memory — as the applications h5gds serves
//! allocate it (PyTorch's expandable segments map physical handles into one reservation; cudarc
//! and RMM allocate from stream-ordered pools; unified memory from `cuMemAllocManaged`).
//!
//! * **VMM** (CUDA Driver API, Virtual Memory Management): `cuMemAddressReserve` "reserves a
//!   virtual address range"; `cuMemCreate` "creates a CUDA memory handle representing a memory
//!   allocation of a given size described by the given properties" (on the device named by
//!   `prop->location`, not in a context); `cuMemMap` "maps an allocation handle to a reserved
//!   virtual address range"; `cuMemSetAccess` sets the access flags, without which the mapping
//!   cannot be accessed; `cuMemUnmap`, `cuMemRelease`, `cuMemAddressFree` undo them. Sizes are
//!   multiples of the granularity (`GRANULARITY`). Data lives in the reservation's backing, so a
//!   handle mapped twice does not alias (no test needs it).
//! * **Pools** (Stream Ordered Memory Allocator): `cuMemAllocAsync` "allocates memory from the
//!   current device's default memory pool"; `cuMemFreeAsync` returns it. Each device's pool is
//!   one reservation of `POOL_BYTES` mapped in `GRANULARITY` chunks as allocations need them;
//!   allocations of at most one chunk share chunks (never straddling two), larger ones get a
//!   mapping of their own, unmapped again when freed. Freed addresses are reused, first fit.
//!   `CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED` is 1 only with `H5GDS_EMU_POOLS=1`, so cudarc
//!   allocates from pools only when a test asks for it.
//! * **Managed** (`cuMemAllocManaged`: "memory that will be automatically managed by the Unified
//!   Memory system", accessible from the host too): a block host code may read and write.
//!
//! How pointer queries answer for these is in `cuda_pointer`; cuFile's refusals in `cufile_api`.

use crate::consts::*;
use crate::context;
use crate::counters::{self, bump};
use crate::ffi::{call, code, cuda_panic, put};
use crate::memory::{self, Kind, Region, GRANULARITY};
use crate::switches;
use std::collections::BTreeMap;
use std::ffi::{c_int, c_uint, c_void};
use std::sync::{Mutex, MutexGuard};

/// The address range of each device's pool.
const POOL_BYTES: usize = 256 << 20;
/// Pool allocations are aligned to this.
const POOL_ALIGN: usize = 512;

/// `cuMemCreate` handles: id -> (size, device).
static HANDLES: Mutex<BTreeMap<u64, (usize, c_int)>> = Mutex::new(BTreeMap::new());
static NEXT_HANDLE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Pool state: each device's reservation base, and the live allocations (address -> size).
struct Pools {
    base: BTreeMap<c_int, usize>,
    allocations: BTreeMap<usize, usize>,
}

static POOLS: Mutex<Pools> = Mutex::new(Pools {
    base: BTreeMap::new(),
    allocations: BTreeMap::new(),
});

fn lock<T>(m: &'static Mutex<T>) -> MutexGuard<'static, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn granular(size: usize) -> bool {
    size > 0 && size % GRANULARITY == 0
}

/// The reservation holding `addr`.
fn reservation(addr: usize) -> Result<std::sync::Arc<memory::DeviceBlock>, CUresult> {
    match memory::find(addr) {
        Region::Device(block) if block.is_reservation() => Ok(block),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

/// `CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr
/// addr, unsigned long long flags)`: a reservation anywhere (the address hint is ignored).
///
/// # Safety
/// `ptr` must be null or valid for writing a `CUdeviceptr`.
#[no_mangle]
pub unsafe extern "C" fn cuMemAddressReserve(
    ptr: *mut CUdeviceptr,
    size: usize,
    alignment: usize,
    addr: CUdeviceptr,
    flags: u64,
) -> CUresult {
    call(
        "cuMemAddressReserve",
        format_args!("{ptr:?}, size={size}, alignment={alignment}, addr={addr:#x}, flags={flags}"),
        cuda_panic,
        || {
            code((|| {
                context::require_init()?;
                if ptr.is_null() || !granular(size) || flags != 0 {
                    return Err(CUDA_ERROR_INVALID_VALUE);
                }
                let mappings = Mutex::new(BTreeMap::new());
                let kind = Kind::Reservation { mappings };
                let base = memory::alloc_block(size, 0, -1, None, kind)?;
                counters::bump(&counters::LIVE_DEVICE_ALLOCATIONS);
                // SAFETY: checked non-null; the caller passes a writable CUdeviceptr.
                unsafe { put(ptr, base as CUdeviceptr) }
            })())
        },
    )
}

/// `CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)`
///
/// # Safety
/// None beyond the C API's: arguments are validated.
#[no_mangle]
pub unsafe extern "C" fn cuMemAddressFree(ptr: CUdeviceptr, size: usize) -> CUresult {
    call(
        "cuMemAddressFree",
        format_args!("{ptr:#x}, size={size}"),
        cuda_panic,
        || {
            code((|| {
                context::require_init()?;
                crate::copies::run_deferred(None);
                memory::free_block(ptr as usize, true)?;
                counters::drop_by(&counters::LIVE_DEVICE_ALLOCATIONS, 1);
                Ok(())
            })())
        },
    )
}

/// `CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const
/// CUmemAllocationProp *prop, unsigned long long flags)`: pinned device memory on
/// `prop->location.id` (CUmemAllocationProp: type, requestedHandleTypes, location {type, id},
/// ...: the device ordinal is the fourth 32-bit field).
///
/// # Safety
/// `handle` must be null or writable; `prop` null or a valid CUmemAllocationProp.
#[no_mangle]
pub unsafe extern "C" fn cuMemCreate(
    handle: *mut u64,
    size: usize,
    prop: *const c_uint,
    flags: u64,
) -> CUresult {
    call(
        "cuMemCreate",
        format_args!("{handle:?}, size={size}, {prop:?}, flags={flags}"),
        cuda_panic,
        || {
            code((|| {
                context::require_init()?;
                if handle.is_null() || prop.is_null() || !granular(size) || flags != 0 {
                    return Err(CUDA_ERROR_INVALID_VALUE);
                }
                // SAFETY: the caller passes a CUmemAllocationProp, which starts with four
                // 32-bit fields.
                let device = unsafe { prop.add(3).read_unaligned() } as c_int;
                context::check_device(device)?;
                let id = NEXT_HANDLE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                lock(&HANDLES).insert(id, (size, device));
                // SAFETY: checked non-null; the caller passes a writable handle.
                unsafe { put(handle, id) }
            })())
        },
    )
}

/// `CUresult cuMemRelease(CUmemGenericAllocationHandle handle)`
///
/// # Safety
/// None beyond the C API's: the handle is looked up.
#[no_mangle]
pub unsafe extern "C" fn cuMemRelease(handle: u64) -> CUresult {
    call("cuMemRelease", format_args!("{handle}"), cuda_panic, || {
        code((|| {
            context::require_init()?;
            lock(&HANDLES)
                .remove(&handle)
                .map(drop)
                .ok_or(CUDA_ERROR_INVALID_VALUE)
        })())
    })
}

/// `CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
/// CUmemGenericAllocationHandle handle, unsigned long long flags)`: the whole handle at `ptr`,
/// inside a reservation, overlapping no other mapping.
///
/// # Safety
/// None beyond the C API's: arguments are validated.
#[no_mangle]
pub unsafe extern "C" fn cuMemMap(
    ptr: CUdeviceptr,
    size: usize,
    offset: usize,
    handle: u64,
    flags: u64,
) -> CUresult {
    call(
        "cuMemMap",
        format_args!("{ptr:#x}, size={size}, offset={offset}, handle={handle}, flags={flags}"),
        cuda_panic,
        || {
            code((|| {
                context::require_init()?;
                let (len, device) = *lock(&HANDLES)
                    .get(&handle)
                    .ok_or(CUDA_ERROR_INVALID_VALUE)?;
                let ptr = ptr as usize;
                let block = reservation(ptr)?;
                if size != len || offset != 0 || flags != 0 || (ptr - block.base) % GRANULARITY != 0
                {
                    return Err(CUDA_ERROR_INVALID_VALUE);
                }
                if !block.map(ptr - block.base, len, device) {
                    return Err(CUDA_ERROR_INVALID_VALUE);
                }
                Ok(())
            })())
        },
    )
}

/// `CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)`
///
/// # Safety
/// None beyond the C API's: arguments are validated.
#[no_mangle]
pub unsafe extern "C" fn cuMemUnmap(ptr: CUdeviceptr, size: usize) -> CUresult {
    call(
        "cuMemUnmap",
        format_args!("{ptr:#x}, size={size}"),
        cuda_panic,
        || {
            code((|| {
                context::require_init()?;
                crate::copies::run_deferred(None);
                let block = reservation(ptr as usize)?;
                if block.unmap(ptr as usize - block.base, size) {
                    Ok(())
                } else {
                    Err(CUDA_ERROR_INVALID_VALUE)
                }
            })())
        },
    )
}

/// `CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t
/// count)`: makes the mappings in the range accessible (the descriptors are not checked).
///
/// # Safety
/// `desc` must be null or hold `count` descriptors.
#[no_mangle]
pub unsafe extern "C" fn cuMemSetAccess(
    ptr: CUdeviceptr,
    size: usize,
    desc: *const c_void,
    count: usize,
) -> CUresult {
    call(
        "cuMemSetAccess",
        format_args!("{ptr:#x}, size={size}, {desc:?}, count={count}"),
        cuda_panic,
        || {
            code((|| {
                context::require_init()?;
                if desc.is_null() || count == 0 {
                    return Err(CUDA_ERROR_INVALID_VALUE);
                }
                let block = reservation(ptr as usize)?;
                if block.set_access(ptr as usize - block.base, size) {
                    Ok(())
                } else {
                    Err(CUDA_ERROR_INVALID_VALUE)
                }
            })())
        },
    )
}

/// Where a pool allocation of `size` bytes goes in a pool whose live allocations are `live`
/// (offsets in the pool): the first fit inside one chunk for sizes of at most a chunk, else the
/// first run of whole chunks holding no allocation.
fn place(live: &BTreeMap<usize, usize>, size: usize) -> Option<usize> {
    let size = size.div_ceil(POOL_ALIGN) * POOL_ALIGN;
    let free = |start: usize, end: usize| {
        live.range(..end)
            .next_back()
            .is_none_or(|(&s, &n)| s + n <= start)
    };
    if size <= GRANULARITY {
        let mut at = 0;
        while at + size <= POOL_BYTES {
            let chunk_end = (at / GRANULARITY + 1) * GRANULARITY;
            if at + size > chunk_end {
                at = chunk_end;
                continue;
            }
            // A chunk holding part of a large allocation is that allocation's own mapping.
            let chunk = at / GRANULARITY * GRANULARITY;
            match live
                .range(..chunk_end)
                .find(|(&s, &n)| s + n > chunk && n > GRANULARITY)
            {
                Some((&s, &n)) => at = (s + n).div_ceil(GRANULARITY) * GRANULARITY,
                None => match live.range(..at + size).next_back() {
                    Some((&s, &n)) if s + n > at => at = (s + n).div_ceil(POOL_ALIGN) * POOL_ALIGN,
                    _ => return Some(at),
                },
            }
        }
        return None;
    }
    let span = size.div_ceil(GRANULARITY) * GRANULARITY;
    (0..POOL_BYTES / GRANULARITY)
        .map(|k| k * GRANULARITY)
        .find(|&at| at + span <= POOL_BYTES && free(at, at + span))
}

/// `cuMemAllocAsync`'s work: a pool allocation for the current context's device.
fn pool_alloc(size: usize, stream: CUstream) -> Result<usize, CUresult> {
    context::require_init()?;
    let (_, device) = context::require_current()?;
    context::check_stream(stream as usize)?;
    context::note_stream_use(stream as usize);
    if size == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let switches = switches::get();
    if counters::is_nth_call(&counters::ALLOCATION_CALLS, switches.fail_alloc) {
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    }
    let mut pools = lock(&POOLS);
    let base = match pools.base.get(&device) {
        Some(&base) => base,
        None => {
            let kind = Kind::Reservation {
                mappings: Mutex::new(BTreeMap::new()),
            };
            let base = memory::alloc_block(POOL_BYTES, 0, device, None, kind)?;
            pools.base.insert(device, base);
            base
        }
    };
    let block = reservation(base)?;
    let live: BTreeMap<usize, usize> = pools
        .allocations
        .range(base..base + POOL_BYTES)
        .map(|(&a, &n)| (a - base, n))
        .collect();
    let offset = place(&live, size).ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
    // Map the chunks the allocation needs (one shared chunk, or its own run of chunks).
    let (first, span) = if size <= GRANULARITY {
        (offset / GRANULARITY * GRANULARITY, GRANULARITY)
    } else {
        (offset, size.div_ceil(GRANULARITY) * GRANULARITY)
    };
    if block.mapping_at(base + first).is_none() {
        block.map(first, span, device);
        block.set_access(first, span);
    }
    let addr = base + offset;
    if let Some(byte) = switches.poison {
        // SAFETY: [addr, addr + size) lies in the mapped, writable shadow of the reservation.
        unsafe { std::ptr::write_bytes(block.shadow_of(addr), byte, size) };
    }
    pools.allocations.insert(addr, size);
    bump(&counters::LIVE_DEVICE_ALLOCATIONS);
    counters::LIVE_DEVICE_BYTES.fetch_add(size as u64, std::sync::atomic::Ordering::Relaxed);
    Ok(addr)
}

/// Frees the pool allocation at `addr`; `Ok(false)` if `addr` is none (`cuMemFree` then looks
/// elsewhere). A large allocation's own mapping goes with it.
pub fn pool_free(addr: usize) -> Result<bool, CUresult> {
    let mut pools = lock(&POOLS);
    let Some(size) = pools.allocations.remove(&addr) else {
        return Ok(false);
    };
    drop(pools);
    crate::copies::run_deferred(None);
    if size > GRANULARITY {
        let block = reservation(addr)?;
        block.unmap(addr - block.base, 1);
    }
    counters::drop_by(&counters::LIVE_DEVICE_ALLOCATIONS, 1);
    counters::drop_by(&counters::LIVE_DEVICE_BYTES, size as u64);
    Ok(true)
}

/// `CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)`
///
/// # Safety
/// `dptr` must be null or valid for writing a `CUdeviceptr`.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocAsync(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    stream: CUstream,
) -> CUresult {
    call(
        "cuMemAllocAsync",
        format_args!("{dptr:?}, bytesize={bytesize}, stream={stream:?}"),
        cuda_panic,
        || {
            code((|| {
                if dptr.is_null() {
                    return Err(CUDA_ERROR_INVALID_VALUE);
                }
                let addr = pool_alloc(bytesize, stream)?;
                // SAFETY: checked non-null; the caller passes a writable CUdeviceptr.
                unsafe { put(dptr, addr as CUdeviceptr) }
            })())
        },
    )
}

/// `CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)`
///
/// # Safety
/// None beyond the C API's: arguments are validated.
#[no_mangle]
pub unsafe extern "C" fn cuMemFreeAsync(dptr: CUdeviceptr, stream: CUstream) -> CUresult {
    call(
        "cuMemFreeAsync",
        format_args!("{dptr:#x}, stream={stream:?}"),
        cuda_panic,
        || {
            code((|| {
                context::require_init()?;
                context::require_current()?;
                context::check_stream(stream as usize)?;
                if pool_free(dptr as usize)? {
                    Ok(())
                } else {
                    bump(&counters::DOUBLE_FREES);
                    Err(CUDA_ERROR_INVALID_VALUE)
                }
            })())
        },
    )
}

/// `CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)`:
/// flags CU_MEM_ATTACH_GLOBAL (1) or CU_MEM_ATTACH_HOST (2).
///
/// # Safety
/// `dptr` must be null or valid for writing a `CUdeviceptr`.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocManaged(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    flags: c_uint,
) -> CUresult {
    call(
        "cuMemAllocManaged",
        format_args!("{dptr:?}, bytesize={bytesize}, flags={flags}"),
        cuda_panic,
        || {
            code((|| {
                context::require_init()?;
                let (ctx, device) = context::require_current()?;
                if dptr.is_null() || !(flags == 1 || flags == 2) {
                    return Err(CUDA_ERROR_INVALID_VALUE);
                }
                let switches = switches::get();
                if counters::is_nth_call(&counters::ALLOCATION_CALLS, switches.fail_alloc) {
                    return Err(CUDA_ERROR_OUT_OF_MEMORY);
                }
                let addr =
                    memory::alloc_block(bytesize, ctx, device, switches.poison, Kind::Managed)?;
                // SAFETY: checked non-null; the caller passes a writable CUdeviceptr.
                unsafe { put(dptr, addr as CUdeviceptr) }
            })())
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_placement_keeps_small_allocations_in_one_chunk_and_reuses_freed_space() {
        let mut live = BTreeMap::new();
        assert_eq!(place(&live, 100), Some(0));
        live.insert(0, 100);
        assert_eq!(place(&live, 100), Some(512));
        // Does not fit the rest of chunk 0: the next chunk.
        live.insert(512, GRANULARITY - 1024);
        assert_eq!(place(&live, 4096), Some(GRANULARITY));
        // Large allocations take whole free chunks.
        assert_eq!(place(&live, GRANULARITY + 1), Some(GRANULARITY));
        live.insert(GRANULARITY, 10);
        assert_eq!(place(&live, GRANULARITY + 1), Some(2 * GRANULARITY));
        // Small allocations never share a large allocation's mapping.
        live.insert(2 * GRANULARITY, GRANULARITY + 1);
        live.insert(GRANULARITY + 10, GRANULARITY - 10);
        assert_eq!(place(&live, 1000), Some(4 * GRANULARITY));
        // A freed address is reused.
        live.remove(&0);
        assert_eq!(place(&live, 100), Some(0));
    }
}
