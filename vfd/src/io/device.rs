//! Device-memory I/O for one open file: the path chosen by `compat_mode` at open, and transfers
//! split into tasks on the pool. A cuFile error in the middle of a transfer sends the rest of that
//! task through the staged path, with a warning; nothing partial is reported as success.

use super::gds::{self, CuFileDriver, GdsHandle};
use super::parallel::run_split;
use super::{staged, Direction};
use crate::config::{CompatMode, VfdSettings};
use crate::cuda::{self, CUdeviceptr};
use crate::error::{Error, Result};
use std::ffi::CStr;
use std::os::fd::RawFd;

/// How device buffers reach one open file.
#[derive(Debug)]
pub(crate) enum FileDevicePath {
    /// GPUDirect Storage (or cuFile's own compatibility mode when `compat_mode=off` demanded
    /// cuFile on a machine without the GDS kernel path).
    Gds(GdsHandle),
    /// The driver's pinned bounce buffers; the reason GDS is not used.
    Staged(String),
    /// No working CUDA: every buffer is host memory.
    Unavailable(String),
}

/// The device path decided before the file is opened: everything but the cuFile handle, so a
/// `compat_mode=off` failure leaves no file behind.
pub(crate) enum DevicePathPlan {
    /// Register the file with this cuFile driver once it is open.
    Gds(&'static CuFileDriver),
    Decided(FileDevicePath),
}

/// The phrase for a file that goes through cuFile `driver`; `condition` is what only the open
/// itself can check.
fn through_cufile(driver: &CuFileDriver, condition: &str) -> String {
    if driver.gds_available() {
        format!("GPUDirect Storage through {}{condition}", driver.describe())
    } else {
        format!(
            "{} in cuFile's own compatibility mode (no GDS kernel path)",
            driver.describe()
        )
    }
}

impl DevicePathPlan {
    /// Decides per `compat_mode`: `on` never touches libcufile; `auto` uses cuFile only where
    /// GDS is really available; `off` requires cuFile or fails.
    pub(crate) fn prepare(settings: &VfdSettings) -> Result<DevicePathPlan> {
        let strict = settings.compat_mode == CompatMode::Off;
        let cuda = match cuda::cuda() {
            Ok(cuda) => cuda,
            Err(err) if strict => {
                return Err(Error::Device(format!(
                    "compat_mode=off requires cuFile, but CUDA is not available: {err}"
                )))
            }
            Err(err) => {
                return Ok(DevicePathPlan::Decided(FileDevicePath::Unavailable(
                    format!("no usable CUDA ({err})"),
                )))
            }
        };
        tracing::debug!(
            "CUDA driver {} with {} device(s), device 0: {}",
            cuda.driver_version,
            cuda.device_count,
            cuda.device_names.first().map_or("?", String::as_str)
        );
        if settings.compat_mode == CompatMode::On {
            return Ok(DevicePathPlan::Decided(FileDevicePath::Staged(
                "compat_mode=on".into(),
            )));
        }
        match gds::driver() {
            Err(err) if strict => Err(Error::Device(format!(
                "compat_mode=off requires cuFile: {err}"
            ))),
            Err(err) => Ok(DevicePathPlan::Decided(FileDevicePath::Staged(err))),
            Ok(driver) if !driver.gds_available() && !strict => Ok(DevicePathPlan::Decided(
                FileDevicePath::Staged(format!("{}: no GDS kernel path", driver.describe())),
            )),
            Ok(driver) => Ok(DevicePathPlan::Gds(driver)),
        }
    }

    /// Completes the plan for the opened file: registers it with cuFile where planned. Where
    /// that fails, `off` fails the open and `auto` stages.
    pub(crate) fn finish(
        self,
        settings: &VfdSettings,
        path: &CStr,
        rdwr: bool,
    ) -> Result<FileDevicePath> {
        let driver = match self {
            DevicePathPlan::Decided(path) => return Ok(path),
            DevicePathPlan::Gds(driver) => driver,
        };
        match GdsHandle::register(driver, path, rdwr) {
            Ok(handle) => Ok(FileDevicePath::Gds(handle)),
            Err(err) if settings.compat_mode == CompatMode::Off => Err(Error::Device(format!(
                "compat_mode=off requires cuFile: {err}"
            ))),
            Err(err) => Ok(FileDevicePath::Staged(err)),
        }
    }

    /// The device path a file opened now would get, for `h5gds info`.
    pub(crate) fn describe(&self, settings: &VfdSettings) -> String {
        match self {
            DevicePathPlan::Gds(driver) => {
                through_cufile(driver, " (where the file system accepts O_DIRECT)")
            }
            DevicePathPlan::Decided(path) => path.describe(settings),
        }
    }
}

impl FileDevicePath {
    /// One phrase for the open log line and `h5gds info`.
    pub(crate) fn describe(&self, settings: &VfdSettings) -> String {
        match self {
            FileDevicePath::Gds(h) => through_cufile(h.driver(), ""),
            FileDevicePath::Staged(why) => format!(
                "staged through pinned bounce buffers of {} ({why})",
                crate::config::format_size(settings.bounce_buffer_size as u64)
            ),
            FileDevicePath::Unavailable(why) => format!("not possible: {why}"),
        }
    }
}

/// What device I/O needs to know about an open file.
pub(crate) struct DeviceIo<'a> {
    pub(crate) path: &'a FileDevicePath,
    pub(crate) fd: RawFd,
    pub(crate) file_name: &'a str,
    pub(crate) settings: &'a VfdSettings,
}

impl DeviceIo<'_> {
    /// Moves `len` bytes between device memory `base + buf_off` and file offset `addr`, split
    /// into `task_size` tasks, on the pool when it is large.
    ///
    /// # Safety
    /// `base + buf_off .. + len` must lie in one device allocation starting at `base`.
    pub(crate) unsafe fn transfer(
        &self,
        dir: Direction,
        base: CUdeviceptr,
        buf_off: usize,
        len: usize,
        addr: u64,
    ) -> Result<()> {
        let (nthreads, task_size) = (self.settings.nthreads, self.settings.task_size);
        run_split(nthreads, len, task_size, true, |off, n| {
            // SAFETY: each task covers a disjoint part of the caller's device range.
            unsafe { self.task(dir, base, buf_off + off, n, addr + off as u64) }
        })
    }

    /// One task on the file's path. Through cuFile, a read ending short at end of file is
    /// zero-filled on the device, and an error sends the rest of the task through the staged
    /// path.
    ///
    /// # Safety
    /// As for `transfer`.
    unsafe fn task(
        &self,
        dir: Direction,
        base: CUdeviceptr,
        buf_off: usize,
        len: usize,
        addr: u64,
    ) -> Result<()> {
        let dev = base + buf_off as u64;
        let (fd, name, bounce) = (self.fd, self.file_name, self.settings.bounce_buffer_size);
        // SAFETY (both uses below): `dev .. dev + len` is device memory (caller's contract).
        let staged =
            |dev, len, addr| unsafe { staged::transfer(dir, fd, name, dev, len, addr, bounce) };
        let handle = match self.path {
            FileDevicePath::Gds(handle) => handle,
            FileDevicePath::Staged(_) => return staged(dev, len, addr),
            FileDevicePath::Unavailable(why) => {
                return Err(Error::Device(format!(
                    "device buffer, but device I/O is {why}"
                )))
            }
        };
        let device_error = |e: cuda::CudaError| Error::Device(e.to_string());
        cuda::make_current().map_err(device_error)?;
        // SAFETY: the range lies in one allocation starting at `base` (caller's contract).
        match unsafe { handle.transfer(dir, base, buf_off, len, addr) } {
            // End of file: the rest of the read is zeros, as for host buffers.
            Ok(done) if done < len => {
                // SAFETY: dev + done .. dev + len lies in the caller's device range.
                unsafe { cuda::zero_device(dev + done as u64, len - done) }.map_err(device_error)
            }
            Ok(_) => Ok(()),
            Err(failure) => {
                let (done, rest) = (failure.done, len - failure.done);
                tracing::warn!(
                    "{} at offset {} of {:?}; the remaining {rest} bytes go through the staged path",
                    failure.source,
                    addr + done as u64,
                    self.file_name
                );
                staged(dev + done as u64, rest, addr + done as u64)
            }
        }
    }
}
