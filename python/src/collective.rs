//! The native calls of a collective `to_file` (`python/h5gds/_collective.py`): each rank's tile
//! written at its file addresses through a file opened with HDF5's driver API in h5py's HDF5
//! (`hdf5::driver_file`). A file is passed to Python as its `H5FD_t *` (an int), which
//! `device_tile_write` also takes. The caller holds h5py's lock.

use crate::hdf5::driver_file;
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use std::ffi::c_void;

/// Opens the existing file at `path` (bytes) read-write with the driver the file access list
/// `fapl` selects, its end of address set to `eoa`; returns the file (`H5FD_t *`). OSError with
/// HDF5's error stack where either step fails (the file is closed again).
#[pyfunction]
pub fn driver_file_open(path: &[u8], fapl: i64, eoa: u64) -> PyResult<usize> {
    let file = driver_file::open(path, fapl).map_err(|stack| {
        PyOSError::new_err(format!("opening the file for the tile's bytes: {stack}"))
    })?;
    // SAFETY: a file just opened, not yet passed on.
    if let Err(stack) = unsafe { driver_file::set_eoa(file, eoa) } {
        // SAFETY: as above; closed once, and not passed on.
        let _ = unsafe { driver_file::close(file) };
        return Err(PyOSError::new_err(format!(
            "setting the end of address: {stack}"
        )));
    }
    Ok(file)
}

/// Writes a host tile's byte `runs` (`(file address, byte offset in the tile, byte length)`) from
/// the tile at `address` into `file`, with the GIL released. The caller keeps the tile alive and
/// passes a file `driver_file_open` returned and not yet closed.
#[pyfunction]
pub fn host_tile_write(
    py: Python<'_>,
    file: usize,
    runs: Vec<(u64, u64, u64)>,
    address: usize,
) -> PyResult<()> {
    py.detach(|| {
        runs.iter().try_for_each(|&(file_at, at, len)| {
            // SAFETY: the caller's file; each run lies inside the tile the caller keeps alive
            // (`_collective._runs` of the tile's own shape).
            unsafe {
                driver_file::driver_write(
                    file,
                    file_at,
                    len as usize,
                    (address + at as usize) as *const c_void,
                )
            }
        })
    })
    .map_err(|stack| PyOSError::new_err(format!("writing the tile: {stack}")))
}

/// Closes `file` (from `driver_file_open`, not used again); OSError where the close fails.
#[pyfunction]
pub fn driver_file_close(file: usize) -> PyResult<()> {
    // SAFETY: the caller's file, closed once.
    unsafe { driver_file::close(file) }
        .map_err(|stack| PyOSError::new_err(format!("closing the file: {stack}")))
}
