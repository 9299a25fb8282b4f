//! A file opened through HDF5's public driver API (`H5FDopen`), over a face's table: bytes at
//! file addresses through the driver's I/O engine, no HDF5 metadata read or written. Every rank
//! of a collective write writes its tile's bytes this way into the file rank 0 created. The
//! caller holds the table's HDF5's lock for every call on the file.

use crate::{Error, ErrorKind};
use h5gds_runtime::hdf5::Hdf5Error;
use h5gds_runtime::hdf5::{hid_t, Hdf5Api};
use std::ffi::{c_int, c_uint, c_void, CStr};

/// `H5FD_MEM_DRAW`: raw data, the type of the bytes a collective write puts into a dataset.
const H5FD_MEM_DRAW: c_int = 3;
const H5F_ACC_RDWR: c_uint = 0x0001;
const H5P_DEFAULT: hid_t = 0;
/// The largest address of a signed 64-bit file offset, as sec2's and gds's maxaddr.
const MAXADDR: u64 = (1 << 63) - 1;

/// An open file; closed when dropped (a failure then unreported: [`DriverFile::close`] reports).
pub struct DriverFile {
    api: &'static Hdf5Api,
    /// The `H5FD_t *` (null once closed).
    file: *mut c_void,
}

/// A step `op` on the file that failed, as a failure of the storage naming HDF5's account of it
/// (its error stack alone, or the missing function).
fn failed(op: &'static str, error: impl Into<Hdf5Error>) -> Error {
    let error = error.into();
    let cause = match &error {
        Hdf5Error::Failed { stack, .. } => stack.clone(),
        missing => missing.to_string(),
    };
    let mut e = Error::new(ErrorKind::Io, format!("{op}: {cause}"));
    e.facts_mut().hdf5 = Some(error);
    e
}

impl DriverFile {
    /// Opens the existing file at `path` read-write with the driver `fapl` selects, its end of
    /// address set to `eoa` (writes must lie below it).
    pub fn open(
        api: &'static Hdf5Api,
        path: &CStr,
        fapl: hid_t,
        eoa: u64,
    ) -> crate::Result<DriverFile> {
        const OPENING: &str = "opening the file for the tile's bytes";
        let open = api.H5FDopen.map_err(|m| failed(OPENING, m))?;
        // SAFETY: a valid C string; HDF5 checks the list.
        let file = unsafe { open(path.as_ptr(), H5F_ACC_RDWR, fapl, MAXADDR) };
        if file.is_null() {
            return Err(failed(OPENING, Hdf5Error::failed(api, "H5FDopen")));
        }
        let file = DriverFile { api, file };
        const SETTING: &str = "setting the end of address";
        let set_eoa = api.H5FDset_eoa.map_err(|m| failed(SETTING, m))?;
        // SAFETY: an open driver file.
        let status = unsafe { set_eoa(file.file, H5FD_MEM_DRAW, eoa) };
        Hdf5Error::check(api, status, "H5FDset_eoa").map_err(|e| failed(SETTING, e))?;
        Ok(file)
    }

    /// Writes `len` bytes from `buf` at file address `addr`, as raw data.
    ///
    /// # Safety
    /// `buf` must be valid for reads of `len` bytes: host memory, or device memory when the
    /// file's driver is `gds` (which moves it itself).
    pub unsafe fn write(&self, addr: u64, len: usize, buf: *const c_void) -> crate::Result<()> {
        const WRITING: &str = "writing the tile";
        let write = self.api.H5FDwrite.map_err(|m| failed(WRITING, m))?;
        // SAFETY: an open driver file; `buf` as the caller guarantees.
        let status = unsafe { write(self.file, H5FD_MEM_DRAW, H5P_DEFAULT, addr, len, buf) };
        Hdf5Error::check(self.api, status, "H5FDwrite").map_err(|e| failed(WRITING, e))?;
        Ok(())
    }

    /// Closes the file (its descriptor), reporting a failed close.
    pub fn close(mut self) -> crate::Result<()> {
        const CLOSING: &str = "closing the file";
        let file = std::mem::replace(&mut self.file, std::ptr::null_mut());
        let close = self.api.H5FDclose.map_err(|m| failed(CLOSING, m))?;
        // SAFETY: an open driver file, closed once (Drop skips a null pointer).
        let status = unsafe { close(file) };
        Hdf5Error::check(self.api, status, "H5FDclose").map_err(|e| failed(CLOSING, e))?;
        Ok(())
    }
}

impl Drop for DriverFile {
    fn drop(&mut self) {
        if let (false, Ok(close)) = (self.file.is_null(), self.api.H5FDclose) {
            // SAFETY: an open driver file, closed once; a failure here has no one to report to.
            unsafe { close(self.file) };
        }
    }
}
