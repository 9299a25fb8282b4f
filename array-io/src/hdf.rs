//! Raw HDF5 calls that hdf5-metno does not offer (device pointers, selections built from
//! blocks, chunk queries, driver ids), made under hdf5-metno's library lock so that they never
//! race its own calls from other threads.

use crate::error::{Error, Result};
use crate::select::Block;
use hdf5_sys::h5::{herr_t, hsize_t};
use hdf5_sys::h5i::hid_t;
use hdf5_sys::h5s::{
    H5S_class_t, H5S_seloper_t, H5Sclose, H5Screate, H5Screate_simple, H5Sselect_hyperslab,
    H5Sselect_none,
};
use std::ffi::CString;
use std::path::Path;

/// Runs `f` holding HDF5's library lock (shared with hdf5-metno, reentrant).
pub(crate) fn locked<T>(f: impl FnOnce() -> T) -> T {
    hdf5::sync::sync(f)
}

/// HDF5's account of the last failure on this thread, for error messages.
pub(crate) fn last_error() -> String {
    match hdf5::h5check(-1i32) {
        Err(err) => err.to_string(),
        Ok(_) => "unknown HDF5 error".into(),
    }
}

/// Fails with HDF5's message when `status` is negative.
pub(crate) fn check(status: i64, op: &str, path: &Path, dataset: Option<&str>) -> Result<i64> {
    if status < 0 {
        Err(Error::hdf5(op, path, dataset, last_error()))
    } else {
        Ok(status)
    }
}

/// An HDF5 identifier closed (under the lock) when dropped.
pub(crate) struct Handle {
    id: hid_t,
    close: unsafe extern "C" fn(hid_t) -> herr_t,
}

impl Handle {
    /// Wraps `id`, or fails with HDF5's message if it is negative.
    pub fn new(
        id: hid_t,
        close: unsafe extern "C" fn(hid_t) -> herr_t,
        op: &str,
        path: &Path,
        dataset: Option<&str>,
    ) -> Result<Handle> {
        check(id, op, path, dataset)?;
        Ok(Handle { id, close })
    }

    pub fn id(&self) -> hid_t {
        self.id
    }

    /// Closes now, reporting a failure (closing a file flushes it).
    pub fn close(self, op: &str, path: &Path, dataset: Option<&str>) -> Result<()> {
        let me = std::mem::ManuallyDrop::new(self);
        // SAFETY: the id is valid and, with Drop suppressed, closed exactly once.
        let status = locked(|| unsafe { (me.close)(me.id) });
        check(status as i64, op, path, dataset).map(drop)
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: the id is valid and closed exactly once; a failure here has nowhere to go.
        locked(|| unsafe { (self.close)(self.id) });
    }
}

/// A C string of `text`, or an error naming it.
pub(crate) fn c_name(text: &str) -> Result<CString> {
    CString::new(text).map_err(|_| Error::InvalidDatasetName {
        dataset: text.to_string(),
        reason: "it contains a NUL byte",
    })
}

/// The path as a C string.
pub(crate) fn c_path(path: &Path) -> Result<CString> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(path.as_os_str().as_bytes()).map_err(|_| Error::Io {
        op: "using path",
        path: path.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "contains a NUL byte"),
    })
}

/// A dataspace of `shape`: scalar for rank 0.
pub(crate) fn dataspace(shape: &[u64], path: &Path, dataset: Option<&str>) -> Result<Handle> {
    locked(|| {
        // SAFETY: plain calls; `shape` outlives them.
        let id = unsafe {
            if shape.is_empty() {
                H5Screate(H5S_class_t::H5S_SCALAR)
            } else {
                H5Screate_simple(shape.len() as i32, shape.as_ptr(), std::ptr::null())
            }
        };
        Handle::new(id, H5Sclose, "creating a dataspace", path, dataset)
    })
}

/// A dataspace of `shape` with the union of `blocks` selected (none selected if empty).
pub(crate) fn selection(
    shape: &[u64],
    blocks: &[Block],
    path: &Path,
    dataset: Option<&str>,
) -> Result<Handle> {
    let space = dataspace(shape, path, dataset)?;
    if shape.is_empty() {
        return Ok(space); // a scalar: its one element is selected
    }
    locked(|| {
        if blocks.is_empty() {
            // SAFETY: a valid dataspace id.
            let status = unsafe { H5Sselect_none(space.id()) };
            check(status as i64, "selecting nothing", path, dataset)?;
        }
        for (k, block) in blocks.iter().enumerate() {
            let op = if k == 0 {
                H5S_seloper_t::H5S_SELECT_SET
            } else {
                H5S_seloper_t::H5S_SELECT_OR
            };
            // SAFETY: start and count hold one entry per dimension of the dataspace.
            let status = unsafe {
                H5Sselect_hyperslab(
                    space.id(),
                    op,
                    block.start.as_ptr() as *const hsize_t,
                    std::ptr::null(),
                    block.count.as_ptr() as *const hsize_t,
                    std::ptr::null(),
                )
            };
            check(status as i64, "selecting a hyperslab", path, dataset)?;
        }
        Ok(space)
    })
}
