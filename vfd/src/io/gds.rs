//! GPUDirect Storage through cuFile: the process-wide cuFile driver and per-file handles.
//!
//! libcufile is touched only after CUDA is known to work (libcuda loads, `cuInit` succeeds, a
//! device exists): without an NVIDIA driver, `cuFileDriverOpen` and `cuFileHandleRegister` spin
//! forever. The driver is opened once, when a device buffer first needs it (never by an open
//! that moves only host data), and deliberately never closed (closing it at process exit, while
//! other threads may still run, is what crashes other cuFile users).
//!
//! `cuFileDriverOpen` and `cuFileHandleRegister` fail on a thread without a current CUDA context
//! (NVIDIA/cudf issue #14140), so both run inside `cuda::enter_context`, which leaves the
//! caller's context as it was. cuFile writes `cufile.log` into the working directory unless told
//! otherwise; `keep_log_out_of_working_directory` tells it otherwise where the user has not.

use super::target::Storage;
use super::{Direction, PartialTransfer};
use crate::cuda::{self, CUdeviceptr, CudaError};
use cufile_sys::{
    CUfileDescr_t, CUfileDrvProps_t, CUfileFileHandleType, CUfileHandle_t, CUfileOpError, CuFileLib,
};
use std::ffi::{c_void, CStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::OnceLock;

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

fn symbol<'a, T>(field: &'a Result<T, libloading::Error>, name: &str) -> Result<&'a T, String> {
    field
        .as_ref()
        .map_err(|e| format!("libcufile has no {name}: {e}"))
}

/// libcufile, loaded once per process and kept (loading calls nothing in it, so it is safe
/// without CUDA; unloading a C++ library that may have started threads is not); or why not.
pub(crate) fn library() -> Result<&'static CuFileLib, String> {
    static LIBRARY: OnceLock<Result<CuFileLib, String>> = OnceLock::new();
    LIBRARY
        .get_or_init(|| {
            cufile_sys::load().map_err(|e| format!("cannot load {}: {e}", cufile_sys::LIBRARY_NAME))
        })
        .as_ref()
        .map_err(Clone::clone)
}

fn open_driver() -> Result<CuFileDriver, String> {
    // The guard that keeps libcufile from hanging: CUDA must work first.
    cuda::cuda().map_err(|e| format!("CUDA is not available ({e}); libcufile was not touched"))?;
    let lib = library()?;
    let open = symbol(&lib.cuFileDriverOpen, "cuFileDriverOpen")?;
    keep_log_out_of_working_directory(lib);
    let _context = cuda::enter_context().map_err(|e| e.to_string())?;
    // SAFETY: a function of the loaded libcufile, taking no arguments.
    let status = unsafe { open() };
    if !cufile_sys::succeeded(&status) {
        return Err(CudaError::cufile("cuFileDriverOpen", &status).to_string());
    }
    // SAFETY: the properties struct is plain data; zeroed is a valid starting state.
    let mut props: CUfileDrvProps_t = unsafe { std::mem::zeroed() };
    let get_properties = symbol(&lib.cuFileDriverGetProperties, "cuFileDriverGetProperties")?;
    // SAFETY: a valid out-pointer; the driver is open.
    let status = unsafe { get_properties(&mut props) };
    if !cufile_sys::succeeded(&status) {
        return Err(CudaError::cufile("cuFileDriverGetProperties", &status).to_string());
    }
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
    cufile_sys::succeeded(&status) && value
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
        if cufile_sys::succeeded(&status) && placed {
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
            if cufile_sys::succeeded(&status) {
                tracing::debug!("cuFile logs to {dir:?}");
            } else {
                let err = CudaError::cufile("cuFileSetParameterString", &status);
                tracing::debug!("{err}; cuFile keeps its default log place");
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
        if cufile_sys::succeeded(&status) && !dir.is_empty() {
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

/// The process's cuFile driver, opened on first use.
pub(crate) fn driver() -> Result<&'static CuFileDriver, String> {
    DRIVER
        .get_or_init(open_driver)
        .as_ref()
        .map_err(Clone::clone)
}

/// The outcome of `driver`, if it has been asked already; opens nothing.
pub(crate) fn driver_if_opened() -> Option<Result<&'static CuFileDriver, String>> {
    DRIVER.get().map(|d| d.as_ref().map_err(Clone::clone))
}

/// The process's cuFile driver for `compat_mode=auto`, which uses cuFile only for GDS: opened only
/// where it could give GDS (see [`gds_kernel_path_possible`]); one already open is used as it is.
pub(crate) fn driver_for_auto() -> Result<&'static CuFileDriver, String> {
    if let Some(driver) = driver_if_opened() {
        return driver;
    }
    gds_kernel_path_possible()?;
    driver()
}

/// Whether opening cuFile could find a GDS kernel path: the nvidia-fs module is loaded (its
/// `/proc/driver/nvidia-fs`), or cuFile's configuration asks for PCI P2PDMA (`use_pci_p2pdma`,
/// which libcufile reads from the cufile.json in effect, `CUFILE_ENV_PATH_JSON` else
/// `/etc/cufile.json`, without opening its driver). Where neither holds, `cuFileDriverOpen` would
/// only find that out, and it took 0.47 s on the first real-GPU machine (an H200 VM), the
/// longest part of the first device read. Asked once per process; call only where CUDA works.
pub(crate) fn gds_kernel_path_possible() -> Result<(), String> {
    static POSSIBLE: OnceLock<Result<(), String>> = OnceLock::new();
    POSSIBLE
        .get_or_init(|| {
            if std::path::Path::new("/proc/driver/nvidia-fs").exists() {
                return Ok(());
            }
            if use_pci_p2pdma(library()?) {
                return Ok(());
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
        let register = symbol(&driver.lib.cuFileHandleRegister, "cuFileHandleRegister")?;
        let context = cuda::enter_context().map_err(|e| e.to_string())?;
        // SAFETY: valid out-pointer and descriptor; the driver is open.
        let status = unsafe { register(&mut handle, &mut descr) };
        drop(context);
        if !cufile_sys::succeeded(&status) {
            let err = CudaError::cufile("cuFileHandleRegister", &status);
            return Err(match status.err {
                CUfileOpError::CU_FILE_HANDLE_NOT_REGISTERED => format!(
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
        let missing = || io::Error::other(format!("no {call} in libcufile"));
        let mut done = 0usize;
        while done < len {
            let (n, pos, at) = (len - done, offset + done as u64, buf_off + done);
            let (pos, at) = (pos as libc::off_t, at as libc::off_t);
            // SAFETY: the handle is registered; base + at .. + n lies in the caller's device
            // allocation.
            let n = unsafe {
                match (dir, read, write) {
                    (Direction::Read, Ok(f), _) => f(self.handle, base as *mut c_void, n, pos, at),
                    (Direction::Write, _, Ok(f)) => f(self.handle, base as _, n, pos, at),
                    _ => return Err(fail(missing(), done)),
                }
            };
            match n {
                n if n > 0 => done += n as usize,
                0 if dir == Direction::Read => break,
                0 => {
                    let source =
                        io::Error::new(io::ErrorKind::WriteZero, "cuFileWrite wrote nothing");
                    return Err(fail(source, done));
                }
                n => return Err(fail(CudaError::cufile_io(call, n), done)),
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
