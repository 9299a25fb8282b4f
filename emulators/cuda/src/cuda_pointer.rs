//! CUDA driver API, part 3: pointer queries.
//!
//! Answers as the real driver does with unified addressing: `cuMemAlloc`'d memory (and any
//! interior pointer) is DEVICE memory with no host pointer; `cuMemHostAlloc`'d memory is HOST
//! memory whose device and host pointers are the address itself. The singular query fails
//! with CUDA_ERROR_INVALID_VALUE for memory CUDA does not know; the plural query succeeds and
//! writes default values (null, 0, false, device ordinal -2). Boolean attributes are written
//! as one byte (C `bool`), so pass a zero-initialised variable if yours is wider. No context
//! is needed for these queries.
//!
//! Memory that is not a plain allocation (see `cuda_vmm`) answers as follows. Managed memory:
//! CU_POINTER_ATTRIBUTE_IS_MANAGED true ("Indicates if the pointer points to managed memory"),
//! memory type DEVICE, and a host pointer (it is host-accessible). VMM and pool memory, which
//! belongs to a device and not to a context (`cuMemCreate` names a location, not a context):
//! CU_POINTER_ATTRIBUTE_CONTEXT null (KvikIO's `get_context_from_pointer` handles exactly that
//! case), CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL the mapping's device, the range attributes
//! (RANGE_START_ADDR "Starting address for this requested pointer", RANGE_SIZE "Size of the
//! address range for this requested pointer", `cuda.h`) the whole reservation, which other
//! allocations and unmapped holes share, and MAPPING_BASE_ADDR / MAPPING_SIZE ("The start address
//! of the mapping that the pointer belongs to", "Size of the actual underlying mapping that the
//! pointer belongs to", `cuda.h` 12) the mapping. An unmapped address of a reservation answers
//! only CU_POINTER_ATTRIBUTE_MAPPED ("1 if this pointer is in a valid address range that is
//! mapped to a backing allocation, 0 otherwise"), false.

use crate::consts::*;
use crate::context;
use crate::ffi::{call, code, cuda_panic, put};
use crate::memory::{self, Region};
use std::ffi::{c_int, c_uint, c_void};

/// A value to store for one attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Value {
    /// A pointer-sized value (CUcontext, void*, CUdeviceptr, size_t).
    Word(u64),
    /// An unsigned int (CUmemorytype).
    Uint(c_uint),
    /// An int (device ordinal).
    Int(c_int),
    /// An unsigned long long (buffer id).
    U64(u64),
    /// A C bool.
    Bool(bool),
}

impl Value {
    /// Stores the value at `data`.
    ///
    /// # Safety
    /// `data` must be null or valid for writing the attribute's C type.
    unsafe fn store(self, data: *mut c_void) -> Result<(), CUresult> {
        // SAFETY: the caller passes storage of the attribute's type, which is this variant's.
        unsafe {
            match self {
                Value::Word(v) | Value::U64(v) => put(data.cast::<u64>(), v),
                Value::Uint(v) => put(data.cast::<c_uint>(), v),
                Value::Int(v) => put(data.cast::<c_int>(), v),
                Value::Bool(v) => put(data.cast::<u8>(), u8::from(v)),
            }
        }
    }
}

/// The value of `attr` for `region` (which holds `ptr`). `Ok(None)`: the attribute does not
/// apply to this memory (singular call: CUDA_ERROR_INVALID_VALUE; plural: default value).
/// Attributes the emulator does not implement are CUDA_ERROR_NOT_SUPPORTED.
fn value_of(
    attr: CUpointerAttribute,
    region: &Region,
    ptr: u64,
) -> Result<Option<Value>, CUresult> {
    if let Region::Device(b) = region {
        if b.is_reservation() {
            return reservation_value(attr, b, ptr);
        }
    }
    let managed = matches!(region, Region::Device(b) if b.is_managed());
    // (base, size, context, device, id, memory type, is device memory)
    let (base, size, ctx, dev, id, is_device) = match region {
        Region::Device(b) => (b.base, b.size, b.context, b.device, b.id, true),
        Region::PinnedHost(b) => (b.base, b.size, b.context, b.device, b.id, false),
        Region::Unknown => return default_of(attr).map(|_| None),
    };
    let value = match attr {
        CU_POINTER_ATTRIBUTE_CONTEXT => Value::Word(ctx as u64),
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE => Value::Uint(if is_device {
            CU_MEMORYTYPE_DEVICE
        } else {
            CU_MEMORYTYPE_HOST
        }),
        CU_POINTER_ATTRIBUTE_DEVICE_POINTER => Value::Word(ptr),
        CU_POINTER_ATTRIBUTE_HOST_POINTER if is_device && !managed => return Ok(None),
        CU_POINTER_ATTRIBUTE_HOST_POINTER => Value::Word(ptr),
        CU_POINTER_ATTRIBUTE_SYNC_MEMOPS => Value::Bool(false),
        CU_POINTER_ATTRIBUTE_BUFFER_ID => Value::U64(id),
        CU_POINTER_ATTRIBUTE_IS_MANAGED => Value::Bool(managed),
        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL => Value::Int(dev),
        CU_POINTER_ATTRIBUTE_RANGE_START_ADDR => Value::Word(base as u64),
        CU_POINTER_ATTRIBUTE_RANGE_SIZE => Value::Word(size as u64),
        CU_POINTER_ATTRIBUTE_MAPPED => Value::Bool(true),
        // "The start address of the mapping that the pointer belongs to" and "Size of the actual
        // underlying mapping" (`cuda.h` 12, CUpointer_attribute): for cuMemAlloc'd memory, the
        // allocation.
        CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR if is_device => Value::Word(base as u64),
        CU_POINTER_ATTRIBUTE_MAPPING_SIZE if is_device => Value::Word(size as u64),
        CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR | CU_POINTER_ATTRIBUTE_MAPPING_SIZE => {
            return Ok(None)
        }
        _ => return Err(CUDA_ERROR_NOT_SUPPORTED),
    };
    Ok(Some(value))
}

/// `value_of` for an address of a VMM or pool reservation (see the module documentation).
fn reservation_value(
    attr: CUpointerAttribute,
    block: &memory::DeviceBlock,
    ptr: u64,
) -> Result<Option<Value>, CUresult> {
    let Some((map_base, map_size, device, id)) = block.mapping_and_id(ptr as usize) else {
        return match attr {
            CU_POINTER_ATTRIBUTE_MAPPED => Ok(Some(Value::Bool(false))),
            _ => default_of(attr).map(|_| None),
        };
    };
    let value = match attr {
        CU_POINTER_ATTRIBUTE_CONTEXT => Value::Word(0),
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE => Value::Uint(CU_MEMORYTYPE_DEVICE),
        CU_POINTER_ATTRIBUTE_DEVICE_POINTER => Value::Word(ptr),
        CU_POINTER_ATTRIBUTE_HOST_POINTER => return Ok(None),
        CU_POINTER_ATTRIBUTE_SYNC_MEMOPS | CU_POINTER_ATTRIBUTE_IS_MANAGED => Value::Bool(false),
        // "A process-wide unique ID for an allocated memory region": the mapping's.
        CU_POINTER_ATTRIBUTE_BUFFER_ID => Value::U64(id),
        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL => Value::Int(device),
        CU_POINTER_ATTRIBUTE_RANGE_START_ADDR => Value::Word(block.base as u64),
        CU_POINTER_ATTRIBUTE_RANGE_SIZE => Value::Word(block.size as u64),
        CU_POINTER_ATTRIBUTE_MAPPED => Value::Bool(true),
        CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR => Value::Word(map_base as u64),
        CU_POINTER_ATTRIBUTE_MAPPING_SIZE => Value::Word(map_size as u64),
        _ => return Err(CUDA_ERROR_NOT_SUPPORTED),
    };
    Ok(Some(value))
}

/// The value the plural query writes for memory CUDA does not know.
fn default_of(attr: CUpointerAttribute) -> Result<Value, CUresult> {
    Ok(match attr {
        CU_POINTER_ATTRIBUTE_CONTEXT
        | CU_POINTER_ATTRIBUTE_DEVICE_POINTER
        | CU_POINTER_ATTRIBUTE_HOST_POINTER
        | CU_POINTER_ATTRIBUTE_RANGE_START_ADDR
        | CU_POINTER_ATTRIBUTE_RANGE_SIZE
        | CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR
        | CU_POINTER_ATTRIBUTE_MAPPING_SIZE => Value::Word(0),
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE => Value::Uint(0),
        CU_POINTER_ATTRIBUTE_BUFFER_ID => Value::U64(0),
        CU_POINTER_ATTRIBUTE_SYNC_MEMOPS
        | CU_POINTER_ATTRIBUTE_IS_MANAGED
        | CU_POINTER_ATTRIBUTE_MAPPED => Value::Bool(false),
        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL => Value::Int(INVALID_DEVICE_ORDINAL),
        _ => return Err(CUDA_ERROR_NOT_SUPPORTED),
    })
}

fn region_of(ptr: CUdeviceptr) -> Region {
    usize::try_from(ptr).map_or(Region::Unknown, memory::find)
}

/// `CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr
/// ptr)`: CUDA_ERROR_INVALID_VALUE for memory CUDA does not know.
///
/// # Safety
/// `data` must be null or valid for writing the attribute's C type.
#[no_mangle]
pub unsafe extern "C" fn cuPointerGetAttribute(
    data: *mut c_void,
    attribute: CUpointerAttribute,
    ptr: CUdeviceptr,
) -> CUresult {
    call(
        "cuPointerGetAttribute",
        format_args!("{data:?}, attribute={attribute}, ptr={ptr:#x}"),
        cuda_panic,
        || {
            code((|| {
                context::require_init()?;
                let value = value_of(attribute, &region_of(ptr), ptr)?;
                let value = value.ok_or(CUDA_ERROR_INVALID_VALUE)?;
                // SAFETY: the caller passes storage of the attribute's type.
                unsafe { value.store(data) }
            })())
        },
    )
}

/// `CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute
/// *attributes, void **data, CUdeviceptr ptr)`: never fails for an unknown pointer.
///
/// # Safety
/// `attributes` and `data` must be null or hold `n` entries; each `data[i]` must be valid for
/// writing the C type of `attributes[i]`.
#[no_mangle]
pub unsafe extern "C" fn cuPointerGetAttributes(
    n: c_uint,
    attributes: *mut CUpointerAttribute,
    data: *mut *mut c_void,
    ptr: CUdeviceptr,
) -> CUresult {
    call(
        "cuPointerGetAttributes",
        format_args!("n={n}, {attributes:?}, {data:?}, ptr={ptr:#x}"),
        cuda_panic,
        || {
            code((|| {
                context::require_init()?;
                if n == 0 || attributes.is_null() || data.is_null() {
                    return Err(CUDA_ERROR_INVALID_VALUE);
                }
                if crate::lifecycle::pointer_query_turns_sticky() {
                    return Err(crate::lifecycle::CUDA_ERROR_ILLEGAL_ADDRESS);
                }
                let region = region_of(ptr);
                for i in 0..n as usize {
                    // SAFETY: both arrays hold n entries, as the caller guarantees.
                    let (attr, out) = unsafe { (*attributes.add(i), *data.add(i)) };
                    let value = match value_of(attr, &region, ptr)? {
                        Some(value) => value,
                        None => default_of(attr)?,
                    };
                    // SAFETY: data[i] is storage of attributes[i]'s type.
                    unsafe { value.store(out) }?;
                }
                Ok(())
            })())
        },
    )
}

/// `CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)`:
/// the allocation (device or pinned host) holding `dptr`; either output may be null;
/// CUDA_ERROR_NOT_FOUND for memory CUDA does not know. The documentation speaks of "the
/// allocation by cuMemAlloc() or cuMemAllocPitch() that contains the input pointer"; for VMM and
/// pool memory it says nothing, and the emulator answers the whole reservation, the least
/// useful answer a driver could give (a driver must not take it for the buffer's bounds).
///
/// # Safety
/// `pbase` and `psize` must each be null or valid for writing.
#[no_mangle]
pub unsafe extern "C" fn cuMemGetAddressRange_v2(
    pbase: *mut CUdeviceptr,
    psize: *mut usize,
    dptr: CUdeviceptr,
) -> CUresult {
    call(
        "cuMemGetAddressRange_v2",
        format_args!("{pbase:?}, {psize:?}, dptr={dptr:#x}"),
        cuda_panic,
        || {
            code((|| {
                context::require_init()?;
                let (base, size) = match region_of(dptr) {
                    Region::Device(b) => (b.base, b.size),
                    Region::PinnedHost(b) => (b.base, b.size),
                    Region::Unknown => return Err(CUDA_ERROR_NOT_FOUND),
                };
                if !pbase.is_null() {
                    // SAFETY: checked non-null; the caller passes a writable CUdeviceptr.
                    unsafe { put(pbase, base as CUdeviceptr) }?;
                }
                if !psize.is_null() {
                    // SAFETY: checked non-null; the caller passes a writable size_t.
                    unsafe { put(psize, size) }?;
                }
                Ok(())
            })())
        },
    )
}
