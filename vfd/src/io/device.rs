//! Device-memory I/O for one open file: the path chosen by `compat_mode` at open, and reads and
//! writes split into tasks on the pool. A cuFile error in the middle of a transfer sends the rest
//! of that task through the staged path, with a warning; nothing partial is reported as success.

use super::gds::{self, GdsHandle};
use super::parallel::{run_tasks, split};
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

impl DevicePath {
    /// Decides the path for a file, per `compat_mode`: `on` never touches libcufile; `auto` uses
    /// cuFile only where GDS is really available; `off` requires cuFile or fails the open.
    pub fn choose(settings: &Settings, path: &CStr, rdwr: bool) -> Result<DevicePath> {
        let cuda = match cuda::cuda() {
            Ok(cuda) => cuda,
            Err(err) if settings.compat_mode == CompatMode::Off => {
                return Err(Error::Device(format!(
                    "compat_mode=off requires cuFile, but CUDA is not available: {err}"
                )))
            }
            Err(err) => return Ok(DevicePath::Unavailable(format!("no usable CUDA ({err})"))),
        };
        tracing::debug!(
            "CUDA driver {} with {} device(s), device 0: {}",
            cuda.driver_version,
            cuda.device_count,
            cuda.device_name
        );
        if settings.compat_mode == CompatMode::On {
            return Ok(DevicePath::Staged("compat_mode=on".into()));
        }
        let strict = settings.compat_mode == CompatMode::Off;
        let not_gds = |why: String| {
            if strict {
                Err(Error::Device(format!(
                    "compat_mode=off requires cuFile: {why}"
                )))
            } else {
                Ok(DevicePath::Staged(why))
            }
        };
        let driver = match gds::driver() {
            Ok(driver) => driver,
            Err(err) => return not_gds(err),
        };
        if !driver.gds_available() && !strict {
            return Ok(DevicePath::Staged(format!(
                "{}: no GDS kernel path",
                driver.describe()
            )));
        }
        match GdsHandle::register(driver, path, rdwr) {
            Ok(handle) => Ok(DevicePath::Gds(handle)),
            Err(err) => not_gds(err),
        }
    }

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
        let tasks: Vec<(usize, usize)> = split(len, self.settings.task_size).collect();
        run_tasks(
            self.settings.nthreads,
            tasks.len(),
            len >= self.settings.task_size,
            |i| {
                let (off, n) = tasks[i];
                // SAFETY: each task covers a disjoint part of the caller's device range.
                unsafe { self.read_task(base, buf_off + off, n, addr + off as u64) }
            },
        )
    }

    unsafe fn read_task(
        &self,
        base: CUdeviceptr,
        buf_off: usize,
        len: usize,
        addr: u64,
    ) -> Result<()> {
        let dst = base + buf_off as u64;
        let bounce = self.settings.bounce_buffer_size;
        match self.path {
            DevicePath::Gds(handle) => {
                cuda::make_current().map_err(|e| Error::Device(e.to_string()))?;
                match handle.read(base, buf_off, len, addr) {
                    Ok(got) if got < len => {
                        // End of file: the rest reads as zeros, filled on the device.
                        cuda::zero_device(dst + got as u64, len - got)
                            .map_err(|e| Error::Device(e.to_string()))
                    }
                    Ok(_) => Ok(()),
                    Err(failure) => {
                        let rest = len - failure.done;
                        tracing::warn!(
                            "{} at offset {} of {:?}; the remaining {rest} bytes go through the staged path",
                            failure.message,
                            addr + failure.done as u64,
                            self.file_name
                        );
                        let done = failure.done as u64;
                        staged::read(
                            self.fd,
                            self.file_name,
                            dst + done,
                            rest,
                            addr + done,
                            bounce,
                        )
                    }
                }
            }
            DevicePath::Staged(_) => staged::read(self.fd, self.file_name, dst, len, addr, bounce),
            DevicePath::Unavailable(why) => Err(Error::Device(format!(
                "device buffer, but device I/O is {why}"
            ))),
        }
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
        let tasks: Vec<(usize, usize)> = split(len, self.settings.task_size).collect();
        run_tasks(
            self.settings.nthreads,
            tasks.len(),
            len >= self.settings.task_size,
            |i| {
                let (off, n) = tasks[i];
                // SAFETY: each task covers a disjoint part of the caller's device range.
                unsafe { self.write_task(base, buf_off + off, n, addr + off as u64) }
            },
        )
    }

    unsafe fn write_task(
        &self,
        base: CUdeviceptr,
        buf_off: usize,
        len: usize,
        addr: u64,
    ) -> Result<()> {
        let src = base + buf_off as u64;
        let bounce = self.settings.bounce_buffer_size;
        match self.path {
            DevicePath::Gds(handle) => {
                cuda::make_current().map_err(|e| Error::Device(e.to_string()))?;
                match handle.write(base, buf_off, len, addr) {
                    Ok(()) => Ok(()),
                    Err(failure) => {
                        let rest = len - failure.done;
                        tracing::warn!(
                            "{} at offset {} of {:?}; the remaining {rest} bytes go through the staged path",
                            failure.message,
                            addr + failure.done as u64,
                            self.file_name
                        );
                        let done = failure.done as u64;
                        staged::write(
                            self.fd,
                            self.file_name,
                            src + done,
                            rest,
                            addr + done,
                            bounce,
                        )
                    }
                }
            }
            DevicePath::Staged(_) => staged::write(self.fd, self.file_name, src, len, addr, bounce),
            DevicePath::Unavailable(why) => Err(Error::Device(format!(
                "device buffer, but device I/O is {why}"
            ))),
        }
    }
}
