//! Device-memory I/O for one open file: the path chosen by `compat_mode` (at open, or for
//! `auto` at the first device transfer, so that host-only programs never open cuFile; where
//! cuFile is still opening in the background, transfers are staged until it has opened), and
//! transfers split into tasks on the pool. A cuFile error in the middle of a transfer sends the rest of that
//! task through the staged path, with a warning; nothing partial is reported as success. A cuFile
//! error that will recur (`recurring_scope`) is decided once: that file, or that kind of buffer
//! on that file, goes through the staged path from then on, with one warning.

use super::gds::{self, CuFileDriver, DirectFile, GdsHandle};
use super::parallel::run_split;
use super::target::Storage;
use super::{Direction, PartialTransfer};
use crate::config::{CompatMode, VfdSettings};
use crate::cuda::{self, CUdeviceptr, DeviceRange};
use crate::error::{Error, Result};
use h5gds_runtime::cufile::sys::CUfileOpError;
use h5gds_runtime::cufile::CuFileError;
use std::ffi::{CStr, CString};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

/// How device buffers reach one open file.
#[derive(Debug)]
pub(crate) enum FileDevicePath {
    /// GPUDirect Storage (or cuFile's own compatibility mode when `compat_mode=off` demanded
    /// cuFile on a machine without the GDS kernel path).
    Gds(GdsFile),
    /// The driver's pinned bounce buffers; the reason GDS is not used.
    Staged(String),
    /// No working CUDA: every buffer is host memory.
    Unavailable(String),
    /// `compat_mode=auto`: cuFile is opened, and the file registered, when a device buffer first
    /// needs them, so programs that never move device data never touch libcufile.
    Deferred(DeferredGds),
    /// `compat_mode=auto` while cuFile opens in the background: the driver's pinned bounce
    /// buffers, for the transfers that come before the open has finished (never a file's
    /// decided path: see `DeferredGds::decide`).
    StagedWhileCuFileOpens(&'static str),
}

/// What a deferred file's transfers get while cuFile opens; the reason GDS may follow.
static STAGED_WHILE_NVIDIA_FS: FileDevicePath =
    FileDevicePath::StagedWhileCuFileOpens(gds::NVIDIA_FS_LOADED);

/// A file registered with cuFile, and what cuFile has refused for good.
#[derive(Debug)]
pub(crate) struct GdsFile {
    handle: GdsHandle,
    refused: Mutex<Vec<Refusal>>,
    /// Whether a cuFile transfer of this file has succeeded. Until one has, its cuFile transfers
    /// go one at a time (`trial`), so that an error that recurs is met once, not by every task
    /// of the first transfer at once.
    proven: AtomicBool,
    trial: Mutex<()>,
}

/// What a recurring cuFile error rules out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scope {
    /// The file, for every buffer.
    File,
    /// One kind of buffer (device, managed) on the file.
    Buffer(cuda::BufferKind),
}

#[derive(Debug)]
struct Refusal {
    scope: Scope,
    /// The cuFile error, as first met.
    why: String,
}

/// Whether cuFile error `code` will recur, and for what: the file (its file system, its open
/// flags, the platform, the GPU, the configuration: nothing a retry changes) or the kind of
/// buffer (its memory type, its context). Codes and meanings from `cufile.h` 1.20 and NVIDIA's
/// cuFile API reference ("cuFile IO Error codes"). Everything else (`-1` with errno, a pointer
/// range, memory pinning, internal errors) may be transient and is decided per task.
fn recurring_scope(code: CUfileOpError) -> Option<Recurs> {
    use CUfileOpError as E;
    match code {
        // "GPUDirect Storage not supported on current platform", "IO not supported", "GPUDirect
        // Storage not supported on current device", "unsupported file type", "unsupported file
        // open flags", "fd direct IO not set", "GPUDirect Storage disabled by config on
        // current file".
        E::CU_FILE_PLATFORM_NOT_SUPPORTED
        | E::CU_FILE_IO_NOT_SUPPORTED
        | E::CU_FILE_DEVICE_NOT_SUPPORTED
        | E::CU_FILE_INVALID_FILE_TYPE
        | E::CU_FILE_INVALID_FILE_OPEN_FLAG
        | E::CU_FILE_DIO_NOT_SET
        | E::CU_FILE_IO_DISABLED => Some(Recurs::ForTheFile),
        // "invalid pointer memory type", "CUDA context mismatch".
        E::CU_FILE_CUDA_MEMORY_TYPE_INVALID | E::CU_FILE_CUDA_CONTEXT_MISMATCH => {
            Some(Recurs::ForTheBufferKind)
        }
        _ => None,
    }
}

/// For what a cuFile error recurs.
enum Recurs {
    ForTheFile,
    ForTheBufferKind,
}

impl GdsFile {
    fn new(handle: GdsHandle) -> GdsFile {
        GdsFile {
            handle,
            refused: Mutex::new(Vec::new()),
            proven: AtomicBool::new(false),
            trial: Mutex::new(()),
        }
    }

    fn refusals(&self) -> std::sync::MutexGuard<'_, Vec<Refusal>> {
        self.refused.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Why cuFile will refuse a buffer at `dev` on this file, if an earlier transfer found out.
    /// Asks CUDA for the buffer's kind only if some kind was refused.
    fn refusal_for(&self, dev: CUdeviceptr) -> Result<Option<String>> {
        let refused = self.refusals();
        if let Some(r) = refused.iter().find(|r| r.scope == Scope::File) {
            return Ok(Some(r.why.clone()));
        }
        if refused.is_empty() {
            return Ok(None);
        }
        let kind = cuda::buffer_kind(dev).map_err(|e| Error::Device(e.to_string()))?;
        Ok(refused
            .iter()
            .find(|r| r.scope == Scope::Buffer(kind))
            .map(|r| r.why.clone()))
    }

    /// Records a recurring cuFile error; true if it is the first for its scope (then the caller
    /// warns).
    fn refuse(&self, scope: Scope, why: String) -> bool {
        let mut refused = self.refusals();
        if refused.iter().any(|r| r.scope == scope) {
            return false;
        }
        refused.push(Refusal { scope, why });
        true
    }
}

/// The cuFile decision of a `compat_mode=auto` file, made at its first device transfer, or, where
/// that transfer started cuFile's open in the background, at the first after the open finished.
#[derive(Debug)]
pub(crate) struct DeferredGds {
    path: CString,
    rdwr: bool,
    decided: OnceLock<Box<FileDevicePath>>,
    /// Whether a transfer of this file was staged while cuFile opened (its line written).
    staged_while_opening: AtomicBool,
}

/// The device path decided before the file is opened: everything but the cuFile handle, so a
/// `compat_mode=off` failure leaves no file behind.
pub(crate) enum DevicePathPlan {
    /// Register the file with this cuFile driver once it is open (`compat_mode=off`).
    Gds(&'static CuFileDriver),
    /// Decide at the first device transfer (`compat_mode=auto` with working CUDA).
    Deferred,
    Decided(FileDevicePath),
}

/// The phrase for a registered file: GPU-direct to its storage, or cuFile's compatibility mode
/// and why.
fn through_cufile_to(driver: &CuFileDriver, storage: Option<&Storage>) -> String {
    match storage {
        Some(storage) if driver.gds_available() => match driver.refuses(storage) {
            Some(why) => format!(
                "{} in cuFile's own compatibility mode for {storage} ({why})",
                driver.describe()
            ),
            None => format!(
                "GPUDirect Storage through {} to {storage}",
                driver.describe()
            ),
        },
        _ => through_cufile(driver, ""),
    }
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

/// `compat_mode=auto`'s use of an opened (or unopenable) cuFile driver: GDS only where the GDS
/// kernel path is there.
fn auto_plan(driver: std::result::Result<&'static CuFileDriver, String>) -> DevicePathPlan {
    match driver {
        Err(err) => DevicePathPlan::Decided(FileDevicePath::Staged(err)),
        Ok(driver) if !driver.gds_available() => DevicePathPlan::Decided(FileDevicePath::Staged(
            format!("{}: no GDS kernel path", driver.describe()),
        )),
        Ok(driver) => DevicePathPlan::Gds(driver),
    }
}

impl DevicePathPlan {
    /// Decides per `compat_mode`: `on` never touches libcufile; `auto` uses cuFile only where
    /// GDS is really available, and when `defer` leaves cuFile unopened until a device buffer
    /// needs it (file opens defer; `h5gds info` does not, to say exactly what a transfer gets);
    /// `off` requires cuFile or fails, before the file is touched.
    pub(crate) fn prepare(settings: &VfdSettings, defer: bool) -> Result<DevicePathPlan> {
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
        match settings.compat_mode {
            CompatMode::On => Ok(DevicePathPlan::Decided(FileDevicePath::Staged(
                "compat_mode=on".into(),
            ))),
            CompatMode::Off => match gds::driver() {
                Err(err) => Err(Error::Device(format!(
                    "compat_mode=off requires cuFile: {err}"
                ))),
                Ok(driver) => Ok(DevicePathPlan::Gds(driver)),
            },
            CompatMode::Auto if defer => Ok(DevicePathPlan::Deferred),
            CompatMode::Auto => Ok(auto_plan(gds::driver_for_auto())),
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
            DevicePathPlan::Deferred => {
                return Ok(FileDevicePath::Deferred(DeferredGds {
                    path: path.to_owned(),
                    rdwr,
                    decided: OnceLock::new(),
                    staged_while_opening: AtomicBool::new(false),
                }))
            }
            DevicePathPlan::Gds(driver) => driver,
        };
        let direct = DirectFile::open(path, rdwr);
        // compat_mode=auto takes its own staged path where cuFile would use its compatibility
        // mode for this file.
        let refused = direct.as_ref().ok().and_then(|d| {
            let storage = d.storage.as_ref()?;
            let why = driver.refuses(storage)?;
            Some(format!(
                "{storage}: {why}, so cuFile would use its compatibility mode"
            ))
        });
        if let (Some(why), CompatMode::Auto) = (refused, settings.compat_mode) {
            return Ok(FileDevicePath::Staged(why));
        }
        match direct.and_then(|direct| GdsHandle::register(driver, direct)) {
            Ok(handle) => Ok(FileDevicePath::Gds(GdsFile::new(handle))),
            Err(err) if settings.compat_mode == CompatMode::Off => Err(Error::Device(format!(
                "compat_mode=off requires cuFile: {err}"
            ))),
            Err(err) => Ok(FileDevicePath::Staged(err)),
        }
    }

    /// The device path a file opened now would get, for `h5gds info`: for a file in the working
    /// directory, whose storage is known.
    pub(crate) fn describe(&self, settings: &VfdSettings) -> String {
        match self {
            DevicePathPlan::Gds(driver) => match working_directory_storage() {
                Some(storage) => match driver.refuses(&storage) {
                    Some(why) if settings.compat_mode == CompatMode::Auto => staged_description(
                        settings,
                        &format!(
                            "files in the working directory, on {storage}: {why}, so cuFile \
                             would use its compatibility mode"
                        ),
                    ),
                    _ => format!(
                        "{} for files in the working directory (where the file system accepts \
                         O_DIRECT){}",
                        through_cufile_to(driver, Some(&storage)),
                        background_note(settings, driver)
                    ),
                },
                None => format!(
                    "{}{}",
                    through_cufile(driver, " (where the file system accepts O_DIRECT)"),
                    background_note(settings, driver)
                ),
            },
            DevicePathPlan::Deferred => deferred_description(settings),
            DevicePathPlan::Decided(path) => path.describe(settings),
        }
    }
}

/// For `h5gds info` under `compat_mode=auto` where cuFile gives GDS: what a new process does
/// before cuFile has opened.
fn background_note(settings: &VfdSettings, driver: &CuFileDriver) -> &'static str {
    if settings.compat_mode == CompatMode::Auto && driver.gds_available() {
        "; a process stages its first device transfers while cuFile opens in the background, \
         started by the first"
    } else {
        ""
    }
}

/// The storage of the working directory, where files opened by relative path live.
fn working_directory_storage() -> Option<Storage> {
    let dir = std::fs::File::open(".").ok()?;
    super::target::storage_of(std::os::fd::AsRawFd::as_raw_fd(&dir))
}

fn staged_description(settings: &VfdSettings, why: &str) -> String {
    format!(
        "staged through pinned bounce buffers of {} ({why})",
        crate::config::format_size(settings.bounce_buffer_size as u64)
    )
}

/// What a deferred file's device buffers will get, said without opening cuFile: exactly, once
/// this process has opened it (or failed to).
fn deferred_description(settings: &VfdSettings) -> String {
    match gds::driver_if_opened() {
        Some(driver) => match auto_plan(driver) {
            DevicePathPlan::Gds(driver) => through_cufile(
                driver,
                " (where the file system accepts O_DIRECT; registered at the first device transfer)",
            ),
            plan => plan.describe(settings),
        },
        None if gds::opening_in_background() => format!(
            "{} while cuFile opens in the background; then GPUDirect Storage where it finds the \
             GDS kernel path and the file system accepts O_DIRECT",
            staged_base(settings)
        ),
        None => format!(
            "cuFile opens at the first device transfer, in the background where it could give \
             GDS (that transfer and those until it has opened are staged): then GPUDirect \
             Storage where it finds the GDS kernel path and the file system accepts O_DIRECT, \
             else {}",
            staged_description(settings, "compat_mode=auto")
        ),
    }
}

/// The staged path, without its reason.
fn staged_base(settings: &VfdSettings) -> String {
    format!(
        "staged through pinned bounce buffers of {}",
        crate::config::format_size(settings.bounce_buffer_size as u64)
    )
}

impl DeferredGds {
    /// The path, decided on first use: cuFile opened, the file registered; any failure stages.
    /// Where cuFile could give GDS but is not open yet, its open starts in the background and
    /// this transfer (and every one until the open has finished) is staged, undecided: no
    /// transfer waits for cuFile.
    fn decide(&self, settings: &VfdSettings, file_name: &str) -> &FileDevicePath {
        if let Some(path) = self.decided.get() {
            return path;
        }
        let driver = match gds::driver_without_waiting() {
            gds::AutoDriver::Ready(driver) => driver,
            gds::AutoDriver::Opening(why) => {
                let path = if why == gds::P2PDMA_ASKED {
                    &STAGED_WHILE_P2PDMA
                } else {
                    &STAGED_WHILE_NVIDIA_FS
                };
                STAGED_WHILE_OPENING.store(true, Ordering::Relaxed);
                if !self.staged_while_opening.swap(true, Ordering::Relaxed) {
                    tracing::info!(
                        "{file_name:?}: first device transfer; device buffers: {}",
                        path.describe(settings)
                    );
                }
                return path;
            }
        };
        self.decided.get_or_init(|| {
            let plan = auto_plan(driver);
            let path = match plan.finish(settings, &self.path, self.rdwr) {
                Ok(path) => path,
                // `finish` fails only under compat_mode=off, which never defers.
                Err(err) => FileDevicePath::Staged(err.to_string()),
            };
            let bridged = self.staged_while_opening.load(Ordering::Relaxed);
            if matches!(path, FileDevicePath::Gds(_))
                && STAGED_WHILE_OPENING.swap(false, Ordering::Relaxed)
            {
                // Pinned only to bridge the wait: a later staged transfer pins what it needs again.
                let released = h5gds_runtime::pinned::release_idle();
                tracing::debug!(
                    "{released} idle bounce buffers, pinned while cuFile opened, released"
                );
            }
            let when = if bridged {
                "cuFile has opened"
            } else {
                "first device transfer"
            };
            tracing::info!(
                "{file_name:?}: {when}; device buffers: {}",
                path.describe(settings)
            );
            Box::new(path)
        })
    }
}

/// Whether transfers of this process were staged while cuFile opened, and the bounce buffers
/// pinned for them not yet released (the first file that goes GPU-direct after the open does).
static STAGED_WHILE_OPENING: AtomicBool = AtomicBool::new(false);

/// As `STAGED_WHILE_NVIDIA_FS`, where the configuration asks for PCI P2PDMA.
static STAGED_WHILE_P2PDMA: FileDevicePath =
    FileDevicePath::StagedWhileCuFileOpens(gds::P2PDMA_ASKED);

impl FileDevicePath {
    /// One phrase for the open log line and `h5gds info`.
    pub(crate) fn describe(&self, settings: &VfdSettings) -> String {
        match self {
            FileDevicePath::Gds(file) => {
                let path = through_cufile_to(file.handle.driver(), file.handle.storage());
                match file.refusals().iter().find(|r| r.scope == Scope::File) {
                    Some(r) => {
                        staged_description(settings, &format!("cuFile refused the file: {}", r.why))
                    }
                    None => path,
                }
            }
            FileDevicePath::Staged(why) => staged_description(settings, why),
            FileDevicePath::StagedWhileCuFileOpens(why) => format!(
                "{} while cuFile opens in the background ({why}, so cuFile may give GPUDirect \
                 Storage; transfers after it has opened use what it gives)",
                staged_base(settings)
            ),
            FileDevicePath::Unavailable(why) => format!("not possible: {why}"),
            FileDevicePath::Deferred(deferred) => match deferred.decided.get() {
                Some(path) => path.describe(settings),
                None => deferred_description(settings),
            },
        }
    }

    /// The path itself: a deferred one is decided now (its first device transfer).
    fn resolve(&self, settings: &VfdSettings, file_name: &str) -> &FileDevicePath {
        match self {
            FileDevicePath::Deferred(deferred) => deferred.decide(settings, file_name),
            path => path,
        }
    }
}

/// What device I/O needs to know about an open file.
#[derive(Clone, Copy)]
pub(crate) struct DeviceIo<'a> {
    pub(crate) path: &'a FileDevicePath,
    pub(crate) fd: RawFd,
    pub(crate) file_name: &'a str,
    pub(crate) settings: &'a VfdSettings,
    /// A remote file: no descriptor for cuFile, so its path is always the staged one, whose
    /// bounce buffers are filled by ranged GETs.
    pub(crate) remote: Option<&'a crate::remote::RemoteFile>,
}

impl DeviceIo<'_> {
    /// Moves `len` bytes between device memory `range.base + buf_off` and file offset `addr`,
    /// split into `task_size` tasks, on the pool when it is large. Every CUDA and cuFile call for
    /// the buffer runs in its range's context. Managed memory is always staged.
    ///
    /// # Safety
    /// `range.base + buf_off .. + len` must lie in `range`.
    pub(crate) unsafe fn transfer(
        &self,
        dir: Direction,
        range: DeviceRange,
        buf_off: usize,
        len: usize,
        addr: u64,
    ) -> Result<()> {
        // Nothing of CUDA or cuFile is touched in a forked child (`cuda::forked_from`).
        if let Some(parent) = cuda::forked_from() {
            let err = cuda::cuda().err().map_or_else(
                || format!("process {parent} initialised CUDA"),
                |e| e.to_string(),
            );
            return Err(Error::Device(format!("device buffer: {err}")));
        }
        let (nthreads, task_size) = (self.settings.nthreads, self.settings.task_size);
        // A deferred path is decided here, on the caller's thread, before any task runs.
        let io = DeviceIo {
            path: self.path.resolve(self.settings, self.file_name),
            ..*self
        };
        // The caller's legacy-stream work on the buffer (its producer, for a write) comes first.
        if !matches!(io.path, FileDevicePath::Unavailable(_)) {
            cuda::wait_for_legacy_stream(range.context)
                .map_err(|e| Error::Device(e.to_string()))?;
        }
        run_split(nthreads, len, task_size, true, |off, n| {
            // SAFETY: each task covers a disjoint part of the caller's device range.
            unsafe { io.task(dir, range, buf_off + off, n, addr + off as u64) }
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
        range: DeviceRange,
        buf_off: usize,
        len: usize,
        addr: u64,
    ) -> Result<()> {
        let (base, context) = (range.base, range.context);
        let dev = base + buf_off as u64;
        let (fd, name, bounce) = (self.fd, self.file_name, self.settings.bounce_buffer_size);
        let file = match self.remote {
            Some(remote) => super::bounce::FileSide::Remote(remote),
            None => super::bounce::FileSide::Fd(fd),
        };
        let staged = |dev, len, addr| {
            // SAFETY: `dev .. dev + len` is device memory of `context` (caller's contract).
            unsafe { super::bounce::transfer(dir, file, name, context, dev, len, addr, bounce) }
        };
        let gds = match self.path {
            FileDevicePath::Unavailable(why) => {
                return Err(Error::Device(format!(
                    "device buffer, but device I/O is {why}"
                )))
            }
            // cuFile does not document managed memory as a buffer it takes.
            _ if range.managed => return staged(dev, len, addr),
            FileDevicePath::Gds(gds) => gds,
            // `resolve` never leaves a deferred path; staging is its fallback all the same.
            FileDevicePath::Staged(_)
            | FileDevicePath::StagedWhileCuFileOpens(_)
            | FileDevicePath::Deferred(_) => return staged(dev, len, addr),
        };
        // Until a cuFile transfer of the file has succeeded, one at a time (see `GdsFile`).
        let trial = (!gds.proven.load(Ordering::Acquire))
            .then(|| gds.trial.lock().unwrap_or_else(|p| p.into_inner()));
        if gds.refusal_for(base)?.is_some() {
            drop(trial);
            return staged(dev, len, addr);
        }
        let device_error = |e: cuda::CudaError| Error::Device(e.to_string());
        // cuFileRead/cuFileWrite need the buffer's context current (cuFile refuses another with
        // CU_FILE_CUDA_CONTEXT_MISMATCH); the caller's is restored afterwards.
        let _context = cuda::enter(context).map_err(device_error)?;
        // SAFETY: the range lies in one allocation or mapping starting at `base` (caller's
        // contract).
        let outcome = unsafe { gds.handle.transfer(dir, base, buf_off, len, addr) };
        match &outcome {
            Ok(_) => gds.proven.store(true, Ordering::Release),
            // Recorded before the trial ends, so that the transfers waiting for it stage.
            Err(failure) => self.note_failure(gds, base, addr, len, failure)?,
        }
        drop(trial);
        match outcome {
            // End of file: the rest of the read is zeros, as for host buffers.
            Ok(done) if done < len => {
                // SAFETY: dev + done .. dev + len lies in the caller's device range.
                unsafe { cuda::zero_device(context, dev + done as u64, len - done) }
                    .map_err(device_error)
            }
            Ok(_) => Ok(()),
            Err(failure) => {
                let (done, rest) = (failure.done, len - failure.done);
                staged(dev + done as u64, rest, addr + done as u64)
            }
        }
    }

    /// Says why a cuFile transfer failed (its remaining bytes go through the staged path), and
    /// records an error that recurs for what it rules out, warning once per scope.
    fn note_failure(
        &self,
        gds: &GdsFile,
        base: CUdeviceptr,
        addr: u64,
        len: usize,
        failure: &PartialTransfer,
    ) -> Result<()> {
        let at = addr + failure.done as u64;
        let code = CuFileError::in_io(&failure.source).and_then(CuFileError::code);
        let Some(recurs) = code.and_then(recurring_scope) else {
            tracing::warn!(
                "{} at offset {at} of {:?}; the remaining {} bytes go through the staged path",
                failure.source,
                self.file_name,
                len - failure.done
            );
            return Ok(());
        };
        let scope = match recurs {
            Recurs::ForTheFile => Scope::File,
            Recurs::ForTheBufferKind => {
                Scope::Buffer(cuda::buffer_kind(base).map_err(|e| Error::Device(e.to_string()))?)
            }
        };
        if gds.refuse(scope, failure.source.to_string()) {
            let which = match scope {
                Scope::File => "device buffers".to_string(),
                Scope::Buffer(kind) => format!("buffers in {kind}"),
            };
            tracing::warn!(
                "{} at offset {at} of {:?}: an error that recurs, so {which} of this file go \
                 through the staged path from now on",
                failure.source,
                self.file_name
            );
        }
        Ok(())
    }
}
