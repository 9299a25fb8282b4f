//! What a DLPack capsule (`__dlpack__()`'s result) describes: the tensor's address, shape,
//! strides, element type, device and read-only flag, read from the C structs of dlpack.h
//! (unversioned `DLManagedTensor`, capsule "dltensor"; versioned `DLManagedTensorVersioned`,
//! "dltensor_versioned", DLPack 1.x). The capsule stays unconsumed: its producer's destructor
//! frees the tensor once the Python caller drops it, after the transfer.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyCapsuleMethods};
use std::ffi::c_void;

#[repr(C)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *const i64,
    strides: *const i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: *const c_void,
}

#[repr(C)]
struct DLManagedTensorVersioned {
    version: [u32; 2],
    manager_ctx: *mut c_void,
    deleter: *const c_void,
    flags: u64,
    dl_tensor: DLTensor,
}

/// `DLPACK_FLAG_BITMASK_READ_ONLY`.
const READ_ONLY: u64 = 1;

/// What `tensor()` returns to Python.
type Described = (
    u64,
    Vec<i64>,
    Option<Vec<i64>>,
    (u8, u8, u16),
    (i32, i32),
    bool,
);

/// The tensor in a DLPack capsule: (address of its first element, shape, strides in elements or
/// None for row-major, (type code, bits, lanes), (device type, device id), read-only).
#[pyfunction]
pub fn dlpack_tensor(capsule: &Bound<'_, PyCapsule>) -> PyResult<Described> {
    let (tensor, read_only) = if capsule.is_valid_checked(Some(c"dltensor_versioned")) {
        let ptr = capsule.pointer_checked(Some(c"dltensor_versioned"))?;
        // SAFETY: a live capsule of this name holds a DLManagedTensorVersioned (dlpack.h).
        let managed = unsafe { &*ptr.cast::<DLManagedTensorVersioned>().as_ptr() };
        if managed.version[0] != 1 {
            return Err(PyTypeError::new_err(format!(
                "DLPack version {}.{} is not supported (1.x is)",
                managed.version[0], managed.version[1]
            )));
        }
        (&managed.dl_tensor, managed.flags & READ_ONLY != 0)
    } else if capsule.is_valid_checked(Some(c"dltensor")) {
        let ptr = capsule.pointer_checked(Some(c"dltensor"))?;
        // SAFETY: a live capsule of this name holds a DLManagedTensor (dlpack.h).
        let managed = unsafe { &*ptr.cast::<DLManagedTensor>().as_ptr() };
        (&managed.dl_tensor, false)
    } else {
        return Err(PyTypeError::new_err(
            "__dlpack__() returned no DLPack capsule (named \"dltensor\" or \"dltensor_versioned\", \
             not yet consumed)",
        ));
    };
    let ndim = usize::try_from(tensor.ndim)
        .ok()
        .filter(|&n| n <= 64)
        .ok_or_else(|| {
            PyTypeError::new_err(format!("DLPack tensor of {} dimensions", tensor.ndim))
        })?;
    let read = |p: *const i64| -> PyResult<Vec<i64>> {
        if ndim == 0 {
            return Ok(Vec::new());
        }
        if p.is_null() {
            return Err(PyTypeError::new_err("DLPack tensor without a shape"));
        }
        // SAFETY: dlpack.h: shape (and strides, if not null) hold `ndim` values.
        Ok(unsafe { std::slice::from_raw_parts(p, ndim) }.to_vec())
    };
    let shape = read(tensor.shape)?;
    let strides = if tensor.strides.is_null() {
        None
    } else {
        Some(read(tensor.strides)?)
    };
    Ok((
        (tensor.data as u64).wrapping_add(tensor.byte_offset),
        shape,
        strides,
        (tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes),
        (tensor.device.device_type, tensor.device.device_id),
        read_only,
    ))
}
