//! Files opened through a driver alone (HDF5's public driver API, `H5FDopen`), in h5py's HDF5:
//! bytes at file addresses, with no HDF5 metadata read or written. A collective `to_file` writes
//! each rank's tile this way into the file rank 0 created. The caller holds h5py's lock.

use super::{api, stack, Hid, H5P_DEFAULT};
use std::ffi::{c_int, c_uint, c_void, CString};

/// `H5FD_MEM_DRAW`: raw data, the type of the bytes a collective write puts into a dataset.
const H5FD_MEM_DRAW: c_int = 3;
/// `H5F_ACC_RDWR`.
const H5F_ACC_RDWR: c_uint = 0x0001;
/// The largest address of a signed 64-bit file offset, as sec2's and gds's maxaddr.
const MAXADDR: u64 = (1 << 63) - 1;

/// Opens the existing file at `path` read-write with the driver `fapl` selects; its `H5FD_t *`.
pub fn open(path: &[u8], fapl: Hid) -> Result<usize, String> {
    let api = api()?;
    let open = api.H5FDopen?;
    let name = CString::new(path).map_err(|_| "the path contains a NUL byte".to_string())?;
    // SAFETY: a valid C string; HDF5 checks the list.
    let file = unsafe { open(name.as_ptr(), H5F_ACC_RDWR, fapl, MAXADDR) };
    if file.is_null() {
        return Err(stack(api));
    }
    Ok(file as usize)
}

/// Sets the end of the address space of `file` (an `H5FD_t *` from [`open`]): writes must lie
/// below it.
///
/// # Safety
/// `file` must be an open `H5FD_t *` of h5py's HDF5.
pub unsafe fn set_eoa(file: usize, eoa: u64) -> Result<(), String> {
    let api = api()?;
    // SAFETY: as the caller guarantees.
    if unsafe { (api.H5FDset_eoa?)(file as *mut c_void, H5FD_MEM_DRAW, eoa) } < 0 {
        return Err(stack(api));
    }
    Ok(())
}

/// Writes `size` bytes from `buffer` at file address `addr` through the driver of `file` (an
/// `H5FD_t *` from [`open`]), as raw data.
///
/// # Safety
/// `file` must be an open `H5FD_t *` of h5py's HDF5, and `buffer` valid for `size` bytes (host
/// memory, or device memory when the file's driver is `gds`).
pub unsafe fn driver_write(
    file: usize,
    addr: u64,
    size: usize,
    buffer: *const c_void,
) -> Result<(), String> {
    let api = api()?;
    let write = api.H5FDwrite?;
    // SAFETY: as the caller guarantees; H5P_DEFAULT is the default transfer list.
    let status = unsafe {
        write(
            file as *mut c_void,
            H5FD_MEM_DRAW,
            H5P_DEFAULT,
            addr,
            size,
            buffer,
        )
    };
    if status < 0 {
        return Err(stack(api));
    }
    Ok(())
}

/// Closes `file` (an `H5FD_t *` from [`open`]), reporting a failed close.
///
/// # Safety
/// `file` must be an open `H5FD_t *` of h5py's HDF5, not used again.
pub unsafe fn close(file: usize) -> Result<(), String> {
    let api = api()?;
    // SAFETY: as the caller guarantees.
    if unsafe { (api.H5FDclose?)(file as *mut c_void) } < 0 {
        return Err(stack(api));
    }
    Ok(())
}
