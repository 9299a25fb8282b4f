//! Device-memory I/O for one open file: the path chosen by `compat_mode` at open, and reads and
//! writes split into tasks on the pool. A cuFile error in the middle of a transfer sends the rest
//! of that task through the staged path, with a warning; nothing partial is reported as success.

use super::gds::{self, GdsHandle};
use super::parallel::run_split;
use super::staged;
use crate::config::{CompatMode, Settings};
use crate::cuda::{self, CUdeviceptr};
use crate::error::{Error, Result};
use std::ffi::CStr;
use std::os::fd::RawFd;

/// How device buffers reach this file.
#[derive(Debug)]
pub enum DevicePath {
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
pub enum DevicePlan {
    /// Register the file with this cuFile driver once it is open.
    Gds(&'static gds::CuFileDriver),
    Decided(DevicePath),
}

impl DevicePlan {
    /// Decides per `compat_mode`: `on` never touches libcufile; `auto` uses cuFile only where
    /// GDS is really available; `off` requires cuFile or fails.
    pub fn prepare(settings: &Settings) -> Result<DevicePlan> {
        let strict = settings.compat_mode == CompatMode::Off;
        let cuda = match cuda::cuda() {
            Ok(cuda) => cuda,
            Err(err) if strict => {
                return Err(Error::Device(format!(
                    "compat_mode=off requires cuFile, but CUDA is not available: {err}"
                )))
            }
            Err(err) => {
                return Ok(DevicePlan::Decided(DevicePath::Unavailable(format!(
                    "no usable CUDA ({err})"
                ))))
            }
        };
        tracing::debug!(
            "CUDA driver {} with {} device(s), device 0: {}",
            cuda.driver_version,
            cuda.device_count,
            cuda.device_names.first().map_or("?", String::as_str)
        );
        if settings.compat_mode == CompatMode::On {
            return Ok(DevicePlan::Decided(DevicePath::Staged(
                "compat_mode=on".into(),
            )));
        }
        match gds::driver() {
            Err(err) if strict => Err(Error::Device(format!(
                "compat_mode=off requires cuFile: {err}"
            ))),
            Err(err) => Ok(DevicePlan::Decided(DevicePath::Staged(err))),
            Ok(driver) if !driver.gds_available() && !strict => Ok(DevicePlan::Decided(
                DevicePath::Staged(format!("{}: no GDS kernel path", driver.describe())),
            )),
            Ok(driver) => Ok(DevicePlan::Gds(driver)),
        }
    }

    /// Completes the plan for the opened file: registers it with cuFile where planned. Where
    /// that fails, `off` fails the open and `auto` stages.
    pub fn finish(self, settings: &Settings, path: &CStr, rdwr: bool) -> Result<DevicePath> {
        let driver = match self {
            DevicePlan::Decided(path) => return Ok(path),
            DevicePlan::Gds(driver) => driver,
        };
        match GdsHandle::register(driver, path, rdwr) {
            Ok(handle) => Ok(DevicePath::Gds(handle)),
            Err(err) if settings.compat_mode == CompatMode::Off => Err(Error::Device(format!(
                "compat_mode=off requires cuFile: {err}"
            ))),
            Err(err) => Ok(DevicePath::Staged(err)),
        }
    }
}

impl DevicePath {
    /// One phrase for the open log line and `h5gds info`.
    pub fn describe(&self, settings: &Settings) -> String {
        match self {
            DevicePath::Gds(h) if h.driver().gds_available() => {
                format!("GPUDirect Storage through {}", h.driver().describe())
            }
            DevicePath::Gds(h) => format!(
                "{} in cuFile's own compatibility mode (no GDS kernel path)",
                h.driver().describe()
            ),
            DevicePath::Staged(why) => format!(
                "staged through pinned bounce buffers of {} ({why})",
                crate::config::format_size(settings.bounce_buffer_size as u64)
            ),
            DevicePath::Unavailable(why) => format!("not possible: {why}"),
        }
    }
}

/// What device I/O needs to know about an open file.
pub struct DeviceIo<'a> {
    pub path: &'a DevicePath,
    pub fd: RawFd,
    pub file_name: &'a str,
    pub settings: &'a Settings,
}

/// Which way bytes move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    /// File to device memory.
    Read,
    /// Device memory to file.
    Write,
}

impl DeviceIo<'_> {
    /// Reads `len` bytes at file offset `addr` into device memory `base + buf_off`.
    ///
    /// # Safety
    /// `base + buf_off .. + len` must lie in one device allocation starting at `base`.
    pub unsafe fn read(
        &self,
        base: CUdeviceptr,
        buf_off: usize,
        len: usize,
        addr: u64,
    ) -> Result<()> {
        self.transfer(Direction::Read, base, buf_off, len, addr)
    }

    /// Writes `len` bytes from device memory `base + buf_off` at file offset `addr`.
    ///
    /// # Safety
    /// As for `read`.
    pub unsafe fn write(
        &self,
        base: CUdeviceptr,
        buf_off: usize,
        len: usize,
        addr: u64,
    ) -> Result<()> {
        self.transfer(Direction::Write, base, buf_off, len, addr)
    }

    /// Splits a transfer into `task_size` tasks, on the pool when it is large.
    unsafe fn transfer(
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

    /// The staged path for `len` bytes at device address `dev` and file offset `addr`.
    unsafe fn staged(&self, dir: Direction, dev: CUdeviceptr, len: usize, addr: u64) -> Result<()> {
        let bounce = self.settings.bounce_buffer_size;
        match dir {
            Direction::Read => staged::read(self.fd, self.file_name, dev, len, addr, bounce),
            Direction::Write => staged::write(self.fd, self.file_name, dev, len, addr, bounce),
        }
    }

    /// One task on the file's path. Through cuFile, a read ending short at end of file is
    /// zero-filled on the device, and an error sends the rest of the task through the staged
    /// path.
    unsafe fn task(
        &self,
        dir: Direction,
        base: CUdeviceptr,
        buf_off: usize,
        len: usize,
        addr: u64,
    ) -> Result<()> {
        let dev = base + buf_off as u64;
        let handle = match self.path {
            DevicePath::Gds(handle) => handle,
            DevicePath::Staged(_) => return self.staged(dir, dev, len, addr),
            DevicePath::Unavailable(why) => {
                return Err(Error::Device(format!(
                    "device buffer, but device I/O is {why}"
                )))
            }
        };
        let device_error = |e: cuda::CudaError| Error::Device(e.to_string());
        cuda::make_current().map_err(device_error)?;
        let outcome = match dir {
            Direction::Read => handle.read(base, buf_off, len, addr),
            Direction::Write => handle.write(base, buf_off, len, addr).map(|()| len),
        };
        match outcome {
            Ok(done) if done < len => {
                cuda::zero_device(dev + done as u64, len - done).map_err(device_error)
            }
            Ok(_) => Ok(()),
            Err(failure) => {
                let (done, rest) = (failure.done, len - failure.done);
                tracing::warn!(
                    "{} at offset {} of {:?}; the remaining {rest} bytes go through the staged path",
                    failure.message,
                    addr + done as u64,
                    self.file_name
                );
                self.staged(dir, dev + done as u64, rest, addr + done as u64)
            }
        }
    }
}
