//! GPUDirect Storage through cuFile: the process-wide cuFile driver and per-file handles.
//!
//! libcufile is touched only after CUDA is known to work (libcuda loads, `cuInit` succeeds, a
//! device exists): without an NVIDIA driver, `cuFileDriverOpen` and `cuFileHandleRegister` spin
//! forever. The driver is opened once, when a device buffer first needs it (never by an open
//! that moves only host data), and deliberately never closed (closing it at process exit, while
//! other threads may still run, is what crashes other cuFile users).
//!
//! Under `compat_mode=auto` the open runs on a thread of its own (`driver_without_waiting`),
//! started by the first device transfer, which the caller serves through the staged path
//! meanwhile: `cuFileDriverOpen` took 0.47 s on the first real-GPU machine, longer than the first
//! read it delayed. No transfer waits for it. Process exit does, for a bounded time
//! (`wait_for_the_open_at_exit`), so that libcufile's static destructors never run under a
//! `cuFileDriverOpen` still in progress; a forked child, which has no such thread, neither waits
//! nor calls into cuFile.
//!
//! `cuFileDriverOpen` and `cuFileHandleRegister` fail on a thread without a current CUDA context
//! (NVIDIA/cudf issue #14140), so both run inside `cuda::enter_context`, which leaves the
//! caller's context as it was. cuFile writes `cufile.log` into the working directory unless told
//! otherwise; `keep_log_out_of_working_directory` tells it otherwise where the user has not.

use super::target::Storage;
use super::{Direction, PartialTransfer};
use crate::cuda::{self, CUdeviceptr};
use h5gds_runtime::cufile::sys::{
    self as cufile_sys, CUfileDescr_t, CUfileDrvProps_t, CUfileFileHandleType, CUfileHandle_t,
    CUfileOpError, CuFileLib,
};
use h5gds_runtime::cufile::{self, function, CuFileError};
use std::ffi::{c_void, CStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The cuFile library, opened.
pub struct CuFileDriver {
    lib: &'static CuFileLib,
    /// `cuFileGetVersion`, e.g. 1200 for 1.20.
    pub version: i32,
    /// nvidia-fs kernel module version; 0.0 means no nvidia-fs.
    pub nvfs: (u32, u32),
    /// cuFile moves data GPU-direct through the kernel's PCI P2PDMA, without nvidia-fs.
    pub p2pdma: bool,
    /// `CUfileDriverStatusFlags` bits: the storage cuFile reports it supports.
    dstatusflags: u32,
}

// SAFETY: cuFile's API is thread-safe; the struct holds the loaded library and plain numbers.
unsafe impl Sync for CuFileDriver {}
// SAFETY: as above.
unsafe impl Send for CuFileDriver {}

impl CuFileDriver {
    /// Whether reads and writes can go GPU-direct: a GDS kernel path is present, nvidia-fs or
    /// PCI P2PDMA (which "works without nvidia-fs": `cuFileDriverGetProperties` then reports
    /// nvidia-fs 0.0 but the feature flag `CU_FILE_P2P_SUPPORTED`, and cufile.json's
    /// `use_pci_p2pdma` is on).
    pub fn gds_available(&self) -> bool {
        self.nvfs != (0, 0) || self.p2pdma
    }

    pub fn describe(&self) -> String {
        let version = format!(
            "cuFile {}.{}",
            self.version / 1000,
            (self.version % 1000) / 10
        );
        if self.nvfs == (0, 0) && self.p2pdma {
            return format!("{version} (PCI P2PDMA, no nvidia-fs)");
        }
        format!("{version} (nvidia-fs {}.{})", self.nvfs.0, self.nvfs.1)
    }

    /// Why cuFile would do `storage`'s I/O in its compatibility mode although a GDS kernel path
    /// is present, where cuFile says so: a shared file system it does not list as supported.
    /// Local file systems are decided by cuFile from the block device (`target`).
    pub(crate) fn refuses(&self, storage: &Storage) -> Option<String> {
        match storage {
            Storage::Shared { name, flag } if self.dstatusflags & (1 << flag.0) == 0 => Some(
                format!("cuFile does not list {name} among the file systems it supports for GDS"),
            ),
            _ => None,
        }
    }
}

/// libcufile, loaded once per process and kept (by the runtime crate); or why not.
pub(crate) fn library() -> Result<&'static CuFileLib, String> {
    h5gds_runtime::libraries::cufile()
}

fn open_driver() -> Result<CuFileDriver, String> {
    // The guard that keeps libcufile from hanging: CUDA must work first.
    cuda::cuda().map_err(|e| format!("CUDA is not available ({e}); libcufile was not touched"))?;
    let lib = library()?;
    let open = function(&lib.cuFileDriverOpen, "cuFileDriverOpen").map_err(|e| e.to_string())?;
    keep_log_out_of_working_directory(lib);
    let _context = cuda::enter_context().map_err(|e| e.to_string())?;
    // SAFETY: a function of the loaded libcufile, taking no arguments.
    let status = unsafe { open() };
    cufile::check("cuFileDriverOpen", &status).map_err(|e| e.to_string())?;
    // SAFETY: the properties struct is plain data; zeroed is a valid starting state.
    let mut props: CUfileDrvProps_t = unsafe { std::mem::zeroed() };
    let get_properties = function(&lib.cuFileDriverGetProperties, "cuFileDriverGetProperties")
        .map_err(|e| e.to_string())?;
    // SAFETY: a valid out-pointer; the driver is open.
    let status = unsafe { get_properties(&mut props) };
    cufile::check("cuFileDriverGetProperties", &status).map_err(|e| e.to_string())?;
    let mut version = 0;
    if let Ok(get_version) = lib.cuFileGetVersion.as_ref() {
        // SAFETY: a valid out-pointer.
        unsafe { get_version(&mut version) };
    }
    let p2p_feature = props.fflags & (1 << cufile_sys::CUfileFeatureFlags::CU_FILE_P2P_SUPPORTED.0);
    let p2pdma = p2p_feature != 0 && use_pci_p2pdma(lib);
    Ok(CuFileDriver {
        version,
        nvfs: (props.nvfs.major_version, props.nvfs.minor_version),
        p2pdma,
        dstatusflags: props.nvfs.dstatusflags,
        lib,
    })
}

/// cufile.json's `use_pci_p2pdma` (`CUFILE_PARAM_USE_PCIP2PDMA`); false where cuFile cannot say.
fn use_pci_p2pdma(lib: &CuFileLib) -> bool {
    let Ok(get) = lib.cuFileGetParameterBool.as_ref() else {
        return false;
    };
    let mut value = false;
    let param = cufile_sys::CUFileBoolConfigParameter_t::CUFILE_PARAM_USE_PCIP2PDMA;
    // SAFETY: a valid out-pointer for a C bool.
    let status = unsafe { get(param, &mut value) };
    cufile::check("cuFileGetParameterBool", &status).is_ok() && value
}

/// Points cuFile's log at a directory of the driver's own, unless the user (or the system's
/// cufile.json) placed it: cuFile writes `cufile.log` "in the current working directory" by
/// default, and `CUFILE_LOGFILE_PATH` or cufile.json's `"logging": {"dir": ...}` (a config file
/// the user names with `CUFILE_ENV_PATH_JSON`) move it (NVIDIA GPUDirect Storage troubleshooting
/// guide, "Enabling a Different cufile.log File for Each Application"; configuration guide,
/// "GPUDirect Storage Parameters"). cuFile 1.20's `cuFileSetParameterString(CUFILE_PARAM_LOG_DIR)`
/// sets the directory before the driver opens and takes precedence over both (`cufile.h`), so it
/// is used only where neither variable is set and cuFile reports no directory of its own. Older
/// cuFile without the call keeps its default.
fn keep_log_out_of_working_directory(lib: &CuFileLib) {
    use cufile_sys::CUFileStringConfigParameter_t as P;
    let user_set = |var| std::env::var_os(var).is_some_and(|v| !v.is_empty());
    if user_set("CUFILE_LOGFILE_PATH") || user_set("CUFILE_ENV_PATH_JSON") {
        return;
    }
    let (Ok(get), Ok(set)) = (
        lib.cuFileGetParameterString.as_ref(),
        lib.cuFileSetParameterString.as_ref(),
    ) else {
        tracing::debug!("this libcufile cannot place its log; it keeps its default");
        return;
    };
    for param in [P::CUFILE_PARAM_LOG_DIR, P::CUFILE_PARAM_ENV_LOGFILE_PATH] {
        let mut value = [0 as std::ffi::c_char; 4096];
        // SAFETY: the buffer holds `len` bytes; cuFile NUL-terminates what it writes.
        let status = unsafe { get(param, value.as_mut_ptr(), value.len() as i32) };
        // SAFETY: as above; the buffer was zeroed, so it ends in a NUL either way.
        let placed = unsafe { !CStr::from_ptr(value.as_ptr()).is_empty() };
        if cufile::check("cuFileGetParameterString", &status).is_ok() && placed {
            return;
        }
    }
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let dir = std::env::temp_dir().join(format!("h5gds-cufile-{uid}"));
    use std::os::unix::fs::DirBuilderExt;
    let made = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir);
    let c_dir = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(dir.as_os_str()));
    match (made, c_dir) {
        (Ok(()), Ok(c_dir)) => {
            // SAFETY: a NUL-terminated string; the driver is not open yet.
            let status = unsafe { set(P::CUFILE_PARAM_LOG_DIR, c_dir.as_ptr()) };
            match cufile::check("cuFileSetParameterString", &status) {
                Ok(()) => tracing::debug!("cuFile logs to {dir:?}"),
                Err(err) => tracing::debug!("{err}; cuFile keeps its default log place"),
            }
        }
        (Err(err), _) => {
            tracing::debug!("cannot make {dir:?} ({err}); cuFile keeps its default log place")
        }
        (_, Err(err)) => tracing::debug!("{err}; cuFile keeps its default log place"),
    }
}

/// Where cuFile writes its log, by its precedence (see `keep_log_out_of_working_directory`).
fn cufile_log_location(lib: &CuFileLib) -> String {
    use cufile_sys::CUFileStringConfigParameter_t as P;
    if let Some(file) = std::env::var_os("CUFILE_LOGFILE_PATH").filter(|v| !v.is_empty()) {
        return format!("{file:?}");
    }
    if let Ok(get) = lib.cuFileGetParameterString.as_ref() {
        let mut value = [0 as std::ffi::c_char; 4096];
        // SAFETY: the buffer holds `len` bytes; cuFile NUL-terminates what it writes.
        let status = unsafe {
            get(
                P::CUFILE_PARAM_LOG_DIR,
                value.as_mut_ptr(),
                value.len() as i32,
            )
        };
        // SAFETY: as above; the buffer was zeroed, so it ends in a NUL either way.
        let dir = unsafe { CStr::from_ptr(value.as_ptr()) }.to_string_lossy();
        if cufile::check("cuFileGetParameterString", &status).is_ok() && !dir.is_empty() {
            return format!("{:?}", std::path::Path::new(&*dir).join("cufile.log"));
        }
    }
    match std::env::var_os("CUFILE_ENV_PATH_JSON") {
        Some(json) => format!(
            "the directory \"logging\": {{\"dir\"}} names in {json:?}, else cufile.log in the \
             working directory"
        ),
        None => "cufile.log in the working directory".into(),
    }
}

static DRIVER: OnceLock<Result<CuFileDriver, String>> = OnceLock::new();

/// The process's cuFile driver, opened on first use, on the calling thread; or, while the
/// background open of `driver_without_waiting` runs, once that has finished. In a forked child,
/// never: an open its parent had under way has no thread in the child to finish it.
pub(crate) fn driver() -> Result<&'static CuFileDriver, String> {
    if let Some(parent) = cuda::forked_from() {
        if let Some(done) = driver_if_opened() {
            return done;
        }
        return Err(format!(
            "not opened: this process is a fork of process {parent}, and cuFile is not used in a \
             forked child"
        ));
    }
    DRIVER
        .get_or_init(|| {
            // A panic in the open (a bug) must not leave the cell to be initialised again by
            // every later caller, nor cross a thread or C boundary.
            std::panic::catch_unwind(open_driver)
                .unwrap_or_else(|_| Err("opening cuFile panicked".into()))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// The outcome of `driver`, if it has been asked already; opens nothing.
pub(crate) fn driver_if_opened() -> Option<Result<&'static CuFileDriver, String>> {
    DRIVER.get().map(|d| d.as_ref().map_err(Clone::clone))
}

/// The process's cuFile driver for `compat_mode=auto`, which uses cuFile only for GDS: opened only
/// where it could give GDS (see [`gds_kernel_path_possible`]); one already open is used as it is.
/// Opens it on the calling thread (or waits for the background open): for `h5gds info`, which
/// says exactly what a transfer gets. Transfers use [`driver_without_waiting`].
pub(crate) fn driver_for_auto() -> Result<&'static CuFileDriver, String> {
    if let Some(driver) = driver_if_opened() {
        return driver;
    }
    gds_kernel_path_possible()?;
    driver()
}

/// `compat_mode=auto`'s cuFile driver as a device transfer sees it.
pub(crate) enum AutoDriver {
    /// Open, or known not to be usable (then why).
    Ready(Result<&'static CuFileDriver, String>),
    /// Opening on a background thread; the reason cuFile may give GDS here.
    Opening(&'static str),
}

/// `compat_mode=auto`'s cuFile driver for a device transfer, without waiting for it: where cuFile
/// could give GDS and is not open yet, its open is started on a background thread (once per
/// process) and the transfer is told to go elsewhere meanwhile. Only where no thread can be
/// started is the driver opened on the calling thread, as before there was a background open.
/// Call only where CUDA works and not in a forked child.
pub(crate) fn driver_without_waiting() -> AutoDriver {
    if let Some(driver) = driver_if_opened() {
        return AutoDriver::Ready(driver);
    }
    let why = match gds_kernel_path_possible() {
        Ok(why) => why,
        Err(err) => return AutoDriver::Ready(Err(err)),
    };
    match start_background_open() {
        // Even where the open has just finished (it never does that fast on a real machine),
        // this transfer stays on the path it was told: the one that starts the open is staged.
        Ok(()) => AutoDriver::Opening(why),
        Err(err) => {
            tracing::info!("{err}; opening cuFile on the calling thread");
            AutoDriver::Ready(driver())
        }
    }
}

/// Whether the background open has started in this process and not yet finished.
pub(crate) fn opening_in_background() -> bool {
    OPEN_STARTED_IN.load(Ordering::Acquire) == h5gds_runtime::process::id()
        && !OPEN_FINISHED.load(Ordering::Acquire)
        && DRIVER.get().is_none()
}

/// The process that started the background open (0: none has); a forked child of it is another.
static OPEN_STARTED_IN: AtomicU32 = AtomicU32::new(0);
/// Set when the background open's thread is done with cuFile (opened or failed).
static OPEN_FINISHED: AtomicBool = AtomicBool::new(false);

/// How long process exit waits for a background open still running: far beyond the 0.47 s the
/// open took on the first real-GPU machine, and bounded, so exit never hangs on cuFile.
const EXIT_WAIT: Duration = Duration::from_secs(10);

/// Starts the background open of cuFile, once per process: the exit hook first, then the thread.
/// Err where the thread could not be started.
fn start_background_open() -> Result<(), String> {
    static STARTED: OnceLock<Result<(), String>> = OnceLock::new();
    STARTED.get_or_init(spawn_open_thread).clone()
}

fn spawn_open_thread() -> Result<(), String> {
    // libcufile is loaded before the exit hook is registered, so that the hook runs before the
    // library's static destructors (exit runs handlers in the reverse order of registration).
    library()?;
    OPEN_STARTED_IN.store(h5gds_runtime::process::id(), Ordering::Release);
    // SAFETY: registers a function that never unwinds (it catches panics) and touches only
    // atomics and the clock; its code stays mapped until exit (the plugin is linked with
    // -z nodelete; Python never unloads extension modules; programs link the driver in).
    if unsafe { libc::atexit(wait_for_the_open_at_exit) } != 0 {
        tracing::debug!("could not register the exit hook that waits for cuFile's open");
    }
    let spawned = std::thread::Builder::new()
        .name("h5gds-cufile-open".into())
        .spawn(|| {
            let _ = std::panic::catch_unwind(|| {
                crate::log::with_logging(|| {
                    let started = Instant::now();
                    match driver() {
                        Ok(driver) => tracing::info!(
                            "cuFile opened in the background in {:.3} s: {}",
                            started.elapsed().as_secs_f64(),
                            driver.describe()
                        ),
                        Err(err) => tracing::info!(
                            "cuFile did not open in the background ({err}); device buffers stay \
                             on the staged path"
                        ),
                    }
                })
            });
            OPEN_FINISHED.store(true, Ordering::Release);
        });
    match spawned {
        Ok(_detached) => Ok(()),
        Err(err) => {
            OPEN_STARTED_IN.store(0, Ordering::Release);
            Err(format!("cannot start a thread to open cuFile ({err})"))
        }
    }
}

/// At process exit: lets a background `cuFileDriverOpen` still running finish (for at most
/// `EXIT_WAIT`) before libcufile's static destructors run under it. In a forked child the thread
/// does not exist, so nothing is waited for there.
extern "C" fn wait_for_the_open_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if OPEN_STARTED_IN.load(Ordering::Acquire) != h5gds_runtime::process::id() {
            return;
        }
        let deadline = Instant::now() + EXIT_WAIT;
        while !OPEN_FINISHED.load(Ordering::Acquire) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}

/// Why cuFile may give GDS: nvidia-fs.
pub(crate) const NVIDIA_FS_LOADED: &str = "nvidia-fs is loaded";
/// Why cuFile may give GDS: PCI P2PDMA.
pub(crate) const P2PDMA_ASKED: &str = "cuFile's configuration asks for PCI P2PDMA";

/// Whether opening cuFile could find a GDS kernel path: the nvidia-fs module is loaded (its
/// `/proc/driver/nvidia-fs`), or cuFile's configuration asks for PCI P2PDMA (`use_pci_p2pdma`,
/// which libcufile reads from the cufile.json in effect, `CUFILE_ENV_PATH_JSON` else
/// `/etc/cufile.json`, without opening its driver). Where neither holds, `cuFileDriverOpen` would
/// only find that out, and it took 0.47 s on the first real-GPU machine (an H200 VM), the
/// longest part of the first device read. Asked once per process; call only where CUDA works.
/// Ok says which of the two holds.
pub fn gds_kernel_path_possible() -> Result<&'static str, String> {
    static POSSIBLE: OnceLock<Result<&'static str, String>> = OnceLock::new();
    POSSIBLE
        .get_or_init(|| {
            if std::path::Path::new("/proc/driver/nvidia-fs").exists() {
                return Ok(NVIDIA_FS_LOADED);
            }
            if use_pci_p2pdma(library()?) {
                return Ok(P2PDMA_ASKED);
            }
            Err("cuFile not opened: no nvidia-fs and P2PDMA off".into())
        })
        .clone()
}

/// One file registered with cuFile, through its own `O_DIRECT` descriptor.
pub(crate) struct GdsHandle {
    driver: &'static CuFileDriver,
    handle: CUfileHandle_t,
    _direct: File,
    storage: Option<Storage>,
}

/// A file opened with `O_DIRECT` for cuFile, and the storage it lives on.
pub(crate) struct DirectFile {
    file: File,
    pub(crate) storage: Option<Storage>,
}

impl DirectFile {
    /// Opens `path` again with `O_DIRECT` (read-write when `rdwr`).
    pub(crate) fn open(path: &CStr, rdwr: bool) -> Result<DirectFile, String> {
        let mode = if rdwr { libc::O_RDWR } else { libc::O_RDONLY };
        // SAFETY: a valid C string; the descriptor is owned by the File below.
        let fd = unsafe { libc::open(path.as_ptr(), mode | libc::O_DIRECT | libc::O_CLOEXEC) };
        if fd < 0 {
            let err = io::Error::last_os_error();
            return Err(format!(
                "the file system refuses O_DIRECT, which cuFile needs ({err})"
            ));
        }
        // SAFETY: fd was just opened and is owned by nothing else.
        let file = unsafe { File::from_raw_fd(fd) };
        let storage = super::target::storage_of(file.as_raw_fd());
        Ok(DirectFile { file, storage })
    }
}

// SAFETY: a cuFile handle may be used from any thread; the descriptor is owned here.
unsafe impl Send for GdsHandle {}
// SAFETY: as above; cuFileRead/Write on one handle from several threads is supported.
unsafe impl Sync for GdsHandle {}

impl std::fmt::Debug for GdsHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GdsHandle({})", self.driver.describe())
    }
}

impl GdsHandle {
    /// Registers a file opened with `O_DIRECT` with cuFile.
    pub(crate) fn register(
        driver: &'static CuFileDriver,
        direct: DirectFile,
    ) -> Result<GdsHandle, String> {
        let DirectFile {
            file: direct,
            storage,
        } = direct;
        // SAFETY: the descriptor struct is plain data; zeroed is a valid starting state.
        let mut descr: CUfileDescr_t = unsafe { std::mem::zeroed() };
        descr.type_ = CUfileFileHandleType::CU_FILE_HANDLE_TYPE_OPAQUE_FD;
        descr.handle.fd = direct.as_raw_fd();
        let mut handle: CUfileHandle_t = std::ptr::null_mut();
        let register = function(&driver.lib.cuFileHandleRegister, "cuFileHandleRegister")
            .map_err(|e| e.to_string())?;
        let context = cuda::enter_context().map_err(|e| e.to_string())?;
        // SAFETY: valid out-pointer and descriptor; the driver is open.
        let status = unsafe { register(&mut handle, &mut descr) };
        drop(context);
        if let Err(err) = cufile::check("cuFileHandleRegister", &status) {
            return Err(match err.code() {
                Some(CUfileOpError::CU_FILE_HANDLE_NOT_REGISTERED) => format!(
                    "{err}: cuFile could not register the file, usually because it cannot read \
                     the attributes of the volume the file is on (common in VMs and containers, \
                     whose virtual disks udev describes without a file-system usage: \
                     \"udev property not found: ID_FS_USAGE\" in cuFile's log); cuFile's log: {}",
                    cufile_log_location(driver.lib)
                ),
                _ => err.to_string(),
            });
        }
        Ok(GdsHandle {
            driver,
            handle,
            _direct: direct,
            storage,
        })
    }

    pub(crate) fn driver(&self) -> &'static CuFileDriver {
        self.driver
    }

    /// The storage the file lives on, where the kernel said.
    pub(crate) fn storage(&self) -> Option<&Storage> {
        self.storage.as_ref()
    }

    /// Moves `len` bytes between device memory `base + buf_off` and file offset `offset`,
    /// continuing short transfers. Returns the bytes moved: fewer than `len` only for a read that
    /// reaches end of file (the caller zero-fills the rest).
    ///
    /// # Safety
    /// `base + buf_off .. + len` must lie in one device allocation starting at `base`.
    pub(crate) unsafe fn transfer(
        &self,
        dir: Direction,
        base: CUdeviceptr,
        buf_off: usize,
        len: usize,
        offset: u64,
    ) -> Result<usize, PartialTransfer> {
        let (read, write) = (&self.driver.lib.cuFileRead, &self.driver.lib.cuFileWrite);
        let call = match dir {
            Direction::Read => "cuFileRead",
            Direction::Write => "cuFileWrite",
        };
        let fail = |source, done| PartialTransfer { source, done };
        let mut done = 0usize;
        while done < len {
            let (n, pos, at) = (len - done, offset + done as u64, buf_off + done);
            let (pos, at) = (pos as libc::off_t, at as libc::off_t);
            // SAFETY: the handle is registered; base + at .. + n lies in the caller's device
            // allocation.
            let ret = unsafe {
                match (dir, read, write) {
                    (Direction::Read, Ok(f), _) => f(self.handle, base as *mut c_void, n, pos, at),
                    (Direction::Write, _, Ok(f)) => f(self.handle, base as _, n, pos, at),
                    (Direction::Read, Err(e), _) | (Direction::Write, _, Err(e)) => {
                        let missing = CuFileError::missing_function(call, e);
                        return Err(fail(io::Error::other(missing), done));
                    }
                }
            };
            match cufile::transferred(call, ret) {
                Ok(0) if dir == Direction::Read => break,
                Ok(0) => {
                    let source =
                        io::Error::new(io::ErrorKind::WriteZero, "cuFileWrite wrote nothing");
                    return Err(fail(source, done));
                }
                Ok(n) => done += n,
                Err(source) => return Err(fail(source, done)),
            }
        }
        Ok(done)
    }
}

impl Drop for GdsHandle {
    fn drop(&mut self) {
        // In a forked child the handle is the parent's: cuFile's state is undefined here.
        if cuda::forked_from().is_some() {
            return;
        }
        if let Ok(deregister) = self.driver.lib.cuFileHandleDeregister.as_ref() {
            let _context = cuda::enter_context();
            // SAFETY: the handle was registered in `register` and is deregistered once.
            unsafe { deregister(self.handle) };
        }
    }
}
