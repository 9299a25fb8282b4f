//! cuFile API: driver, file handles, buffer registration, `cuFileRead` / `cuFileWrite`.
//!
//! The driver opens implicitly on the first `cuFileHandleRegister` / `cuFileBufRegister`, as
//! real cuFile does, and opening it initialises CUDA (so it fails, instead of hanging, when
//! CUDA has no device). Transfers move bytes between the file and device memory (its shadow
//! mapping) or host memory the way `cufile_io` describes; they are synchronous and complete
//! unless the end of the file (reads), an error after some bytes, or `H5GDS_EMU_SHORT_IO`
//! stops them early.

use crate::consts::{CUDA_SUCCESS, CUFILE_VERSION, NVFS_VERSION};
use crate::counters::{self, bump};
use crate::cufile_handles::{self as handles, FileHandle};
use crate::cufile_io::{self, Buffer, Direction};
use crate::ffi::{self, call, cufile_panic, cufile_status, set_errno};
use crate::memory::{self, DeviceBlock};
use crate::switches;
use crate::timeline::{self, Way};
use cufile_sys::{
    CUfileDescr_t, CUfileDriverControlFlags, CUfileDrvProps_t, CUfileError_t, CUfileFileHandleType,
    CUfileHandle_t, CUfileOpError, CU_FILE_RDMA_REGISTER, CU_FILE_RDMA_RELAXED_ORDERING,
};
use std::ffi::{c_int, c_void};
use std::sync::Arc;

type Status = Result<(), CUfileError_t>;

fn fail(err: CUfileOpError) -> CUfileError_t {
    cufile_status(err, CUDA_SUCCESS)
}

fn status(result: Status) -> CUfileError_t {
    result.err().unwrap_or(fail(CUfileOpError::CU_FILE_SUCCESS))
}

/// The negated error code a transfer returns.
fn negated(err: CUfileOpError) -> isize {
    -(err.0 as isize)
}

/// CU_FILE_CUDA_DRIVER_ERROR with `cu_err` = CUDA_ERROR_INVALID_CONTEXT unless the calling
/// thread has a current CUDA context. Real cuFile needs one for `cuFileDriverOpen` and
/// `cuFileHandleRegister`: called without, libcufile's own `cuCtxPopCurrent_v2` fails with
/// CUDA_ERROR_INVALID_CONTEXT (201) (compute-sanitizer trace in NVIDIA/cudf issue #14140, whose
/// fix, cudf PR #15293, makes a CUDA call first), and cuFile reports a failed CUDA driver call as
/// CU_FILE_CUDA_DRIVER_ERROR (5011, "CUDA Driver API error") with the `CUresult` in `cu_err`
/// (`cufile.h`: `IS_CUDA_ERR(status)`, `CU_FILE_CUDA_ERR(status)`).
fn require_context() -> Status {
    crate::context::require_current()
        .map(drop)
        .map_err(|cu_err| cufile_status(CUfileOpError::CU_FILE_CUDA_DRIVER_ERROR, cu_err))
}

/// `cuFileDriverOpen`'s work (explicit, or implied by the first call that needs the driver): its
/// cost where the driver is not open yet (`H5GDS_EMU_CUFILE_OPEN_MS`), then injected failure,
/// else CUDA initialisation and a current context, else one more user (the first writes the log
/// line, see `cufile_log`). Counted when it returns, whatever the outcome ("cufile driver opens
/// completed").
fn open_driver() -> Status {
    let result = open_driver_work();
    bump(&counters::CUFILE_DRIVER_OPENS_COMPLETED);
    result
}

/// What opening the cuFile driver costs: on the first real-GPU machine (an H200 VM) the first
/// `cuFileDriverOpen` took about 0.47 s; a driver already open is only counted again.
fn pay_for_the_open() {
    let ms = switches::get().cufile_open_ms;
    if ms > 0 && !handles::driver_is_open() {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

fn open_driver_work() -> Status {
    pay_for_the_open();
    if let Some(code) = switches::get().cufile_open_error {
        return Err(fail(CUfileOpError(code)));
    }
    if let Err(cu_err) = crate::context::init(0) {
        return Err(cufile_status(
            CUfileOpError::CU_FILE_CUDA_DRIVER_ERROR,
            cu_err,
        ));
    }
    require_context()?;
    if handles::driver_opened() {
        crate::cufile_log::driver_opened();
    }
    Ok(())
}

/// Opens the driver if nobody has (the implicit open of the first API call).
fn ensure_driver_open() -> Status {
    if handles::driver_is_open() {
        Ok(())
    } else {
        open_driver()
    }
}

/// `CUfileError_t cuFileDriverOpen(void)`
///
/// # Safety
/// None beyond the C API's.
#[no_mangle]
pub unsafe extern "C" fn cuFileDriverOpen() -> CUfileError_t {
    call("cuFileDriverOpen", format_args!(""), cufile_panic, || {
        bump(&counters::CUFILE_DRIVER_OPEN_CALLS);
        status(open_driver())
    })
}

fn close_driver() -> CUfileError_t {
    if handles::driver_closed() {
        fail(CUfileOpError::CU_FILE_SUCCESS)
    } else {
        fail(CUfileOpError::CU_FILE_DRIVER_NOT_INITIALIZED)
    }
}

/// `CUfileError_t cuFileDriverClose(void)`: CU_FILE_DRIVER_NOT_INITIALIZED if not open.
///
/// # Safety
/// None beyond the C API's.
#[no_mangle]
pub unsafe extern "C" fn cuFileDriverClose() -> CUfileError_t {
    call(
        "cuFileDriverClose",
        format_args!(""),
        cufile_panic,
        close_driver,
    )
}

/// `CUfileError_t cuFileDriverClose_v2(void)` (what `cufile.h` maps `cuFileDriverClose` to).
///
/// # Safety
/// None beyond the C API's.
#[no_mangle]
pub unsafe extern "C" fn cuFileDriverClose_v2() -> CUfileError_t {
    call(
        "cuFileDriverClose_v2",
        format_args!(""),
        cufile_panic,
        close_driver,
    )
}

/// `CUfileError_t cuFileSetParameterString(CUFileStringConfigParameter_t param, const char *s)`:
/// stages a string parameter (see `cufile_log`); CU_FILE_DRIVER_ALREADY_OPEN once the driver
/// is open, CU_FILE_INVALID_VALUE for a null string or an unknown parameter.
///
/// # Safety
/// `desc_str` must be null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn cuFileSetParameterString(
    param: cufile_sys::CUFileStringConfigParameter_t,
    desc_str: *const std::ffi::c_char,
) -> CUfileError_t {
    call(
        "cuFileSetParameterString",
        format_args!("{}, {desc_str:?}", param.0),
        cufile_panic,
        || {
            if handles::driver_is_open() {
                return fail(CUfileOpError::CU_FILE_DRIVER_ALREADY_OPEN);
            }
            if desc_str.is_null() {
                return fail(CUfileOpError::CU_FILE_INVALID_VALUE);
            }
            // SAFETY: checked non-null; the caller passes a NUL-terminated string.
            let value = unsafe { std::ffi::CStr::from_ptr(desc_str) }.to_owned();
            if crate::cufile_log::set(param.0, value) {
                fail(CUfileOpError::CU_FILE_SUCCESS)
            } else {
                fail(CUfileOpError::CU_FILE_INVALID_VALUE)
            }
        },
    )
}

/// `CUfileError_t cuFileGetParameterBool(CUFileBoolConfigParameter_t param, bool *value)`:
/// cufile.json's value: `use_pci_p2pdma` as the cufile.json in effect says (see
/// `cufile_config`: `CUFILE_ENV_PATH_JSON`'s file, else the emulated machine's, which asks for
/// it wherever the machine has a GDS kernel path), `allow_compat_mode` true, `force_compat_mode` and `use_poll_mode` false (the
/// configuration guide's defaults); CU_FILE_INVALID_VALUE for a null `value` or a parameter the
/// emulator does not model. Readable before `cuFileDriverOpen`, as cuFile's configuration is.
///
/// # Safety
/// `value` must be null or valid for writing a C bool.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetParameterBool(
    param: cufile_sys::CUFileBoolConfigParameter_t,
    value: *mut bool,
) -> CUfileError_t {
    use cufile_sys::CUFileBoolConfigParameter_t as P;
    call(
        "cuFileGetParameterBool",
        format_args!("{}, {value:?}", param.0),
        cufile_panic,
        || {
            let answer = match param {
                P::CUFILE_PARAM_USE_PCIP2PDMA => crate::cufile_config::use_pci_p2pdma(),
                P::CUFILE_PARAM_PROPERTIES_ALLOW_COMPAT_MODE => true,
                P::CUFILE_PARAM_FORCE_COMPAT_MODE | P::CUFILE_PARAM_PROPERTIES_USE_POLL_MODE => {
                    false
                }
                _ => return fail(CUfileOpError::CU_FILE_INVALID_VALUE),
            };
            // SAFETY: the caller passes null or a writable bool.
            match unsafe { ffi::put(value, answer) } {
                Ok(()) => fail(CUfileOpError::CU_FILE_SUCCESS),
                Err(_) => fail(CUfileOpError::CU_FILE_INVALID_VALUE),
            }
        },
    )
}

/// `CUfileError_t cuFileGetParameterString(CUFileStringConfigParameter_t param, char *s, int
/// len)`: the staged value, NUL-terminated; CU_FILE_INVALID_VALUE for a null or too short
/// buffer or an unknown parameter.
///
/// # Safety
/// `desc_str` must be null or valid for writing `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetParameterString(
    param: cufile_sys::CUFileStringConfigParameter_t,
    desc_str: *mut std::ffi::c_char,
    len: c_int,
) -> CUfileError_t {
    call(
        "cuFileGetParameterString",
        format_args!("{}, {desc_str:?}, {len}", param.0),
        cufile_panic,
        || {
            let Some(value) = crate::cufile_log::get(param.0) else {
                return fail(CUfileOpError::CU_FILE_INVALID_VALUE);
            };
            let bytes = value.as_bytes_with_nul();
            if desc_str.is_null() || len < 0 || (len as usize) < bytes.len() {
                return fail(CUfileOpError::CU_FILE_INVALID_VALUE);
            }
            // SAFETY: the caller's buffer holds len >= bytes.len() bytes.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr().cast(), desc_str, bytes.len()) };
            fail(CUfileOpError::CU_FILE_SUCCESS)
        },
    )
}

/// The properties reported with GDS present (`gds`) or in compat mode: cufile.json's defaults
/// in KiB, as NVIDIA's GPUDirect Storage configuration guide ("GPUDirect Storage Parameters")
/// lists them (max_direct_io_size_kb 16384, max_device_cache_size_kb 131072,
/// max_device_pinned_mem_size_kb 33554432) and per_buffer_cache_size_kb 1024, the size of the
/// bounce buffers `cufile_io` moves compatibility-mode data through.
fn properties(gds: bool) -> CUfileDrvProps_t {
    let switches = switches::get();
    let mut props = CUfileDrvProps_t {
        nvfs: cufile_sys::CUfileDrvProps__bindgen_ty_1 {
            major_version: 0,
            minor_version: 0,
            poll_thresh_size: 4,
            max_direct_io_size: 16 * 1024,
            dstatusflags: 0,
            dcontrolflags: 1 << CUfileDriverControlFlags::CU_FILE_ALLOW_COMPAT_MODE.0,
        },
        fflags: 0,
        max_device_cache_size: 128 * 1024,
        per_buffer_cache_size: cufile_io::PER_BUFFER_CACHE_KB as u32,
        max_device_pinned_mem_size: 32 * 1024 * 1024,
        max_batch_io_size: 128,
        max_batch_io_timeout_msecs: 5,
    };
    if gds {
        props.nvfs.dstatusflags = switches.gds_targets;
        if switches.p2pdma {
            // PCI P2PDMA: no nvidia-fs (version 0.0), the feature flag instead.
            props.fflags |= 1 << cufile_sys::CUfileFeatureFlags::CU_FILE_P2P_SUPPORTED.0;
        } else {
            props.nvfs.major_version = NVFS_VERSION.0;
            props.nvfs.minor_version = NVFS_VERSION.1;
        }
    }
    props
}

/// `CUfileError_t cuFileDriverGetProperties(CUfileDrvProps_t *props)`: nvfs 2.20 with GDS
/// present, 0.0 in compat mode (`H5GDS_EMU_GDS=0`). Does not open the driver.
///
/// # Safety
/// `props` must be null or valid for writing a `CUfileDrvProps_t`.
#[no_mangle]
pub unsafe extern "C" fn cuFileDriverGetProperties(props: *mut CUfileDrvProps_t) -> CUfileError_t {
    call(
        "cuFileDriverGetProperties",
        format_args!("{props:?}"),
        cufile_panic,
        || {
            let value = properties(switches::get().gds);
            // SAFETY: the caller passes null or a writable CUfileDrvProps_t.
            match unsafe { ffi::put(props, value) } {
                Ok(()) => fail(CUfileOpError::CU_FILE_SUCCESS),
                Err(_) => fail(CUfileOpError::CU_FILE_INVALID_VALUE),
            }
        },
    )
}

/// `CUfileError_t cuFileGetVersion(int *version)`: 1200 (cuFile 1.20.0).
///
/// # Safety
/// `version` must be null or valid for writing an `int`.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetVersion(version: *mut c_int) -> CUfileError_t {
    call(
        "cuFileGetVersion",
        format_args!("{version:?}"),
        cufile_panic,
        || {
            // SAFETY: the caller passes null or a writable int.
            match unsafe { ffi::put(version, CUFILE_VERSION) } {
                Ok(()) => fail(CUfileOpError::CU_FILE_SUCCESS),
                Err(_) => fail(CUfileOpError::CU_FILE_INVALID_VALUE),
            }
        },
    )
}

/// Validates `descr` and registers its file.
///
/// # Safety
/// `fh` and `descr` must be null or valid.
unsafe fn register_handle(fh: *mut CUfileHandle_t, descr: *const CUfileDescr_t) -> Status {
    use CUfileOpError as E;
    if fh.is_null() || descr.is_null() {
        return Err(fail(E::CU_FILE_INVALID_VALUE));
    }
    // SAFETY: checked non-null; the caller passes a valid descriptor struct.
    let descr = unsafe { &*descr };
    if descr.type_ != CUfileFileHandleType::CU_FILE_HANDLE_TYPE_OPAQUE_FD {
        return Err(fail(E::CU_FILE_INVALID_VALUE));
    }
    // SAFETY: for the OPAQUE_FD type the union holds the fd.
    let fd = unsafe { descr.handle.fd };
    if fd < 0 {
        return Err(fail(E::CU_FILE_INVALID_VALUE));
    }
    require_context()?;
    ensure_driver_open()?;
    // SAFETY: fcntl on any integer is memory-safe; a bad fd gives -1/EBADF.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(fail(E::CU_FILE_INVALID_VALUE));
    }
    // SAFETY: an all-zero stat is a valid value to be overwritten by fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: st is a valid, writable stat buffer.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(fail(E::CU_FILE_INVALID_VALUE));
    }
    let kind = st.st_mode & libc::S_IFMT;
    if kind != libc::S_IFREG && kind != libc::S_IFBLK {
        return Err(fail(E::CU_FILE_INVALID_FILE_TYPE));
    }
    // No O_DIRECT check: GDS >= 1.7 (CUDA 12.2) takes descriptors opened without it and still
    // moves their data the O_DIRECT way (see `cufile_io`).
    if handles::is_registered_fd(fd) {
        return Err(fail(E::CU_FILE_HANDLE_ALREADY_REGISTERED));
    }
    if let Some(code) = switches::get().cufile_register_error {
        crate::cufile_log::handle_not_registered(code);
        return Err(fail(CUfileOpError(code)));
    }
    let io_fd = handles::reopen(fd, flags, false).ok_or(fail(E::CU_FILE_GETNEWFD_FAILED))?;
    // Where the file system refuses O_DIRECT, "GDS is not functional for the IO target" and,
    // with compatibility mode allowed (cufile.json `allow_compat_mode`, which the emulator
    // assumes), cuFile "fall[s] back to the standard POSIX read/write path" (NVIDIA GPUDirect
    // Storage configuration guide, "GPUDirect Storage Parameters").
    let direct_fd = if crate::cufile_config::gds_path() && gds_target(fd) {
        handles::reopen(fd, flags, true)
    } else {
        None
    };
    let value = handles::insert(FileHandle {
        user_fd: fd,
        io_fd,
        direct_fd,
    });
    // SAFETY: checked non-null; the caller passes a writable handle slot.
    unsafe { fh.write_unaligned(value as CUfileHandle_t) };
    Ok(())
}

/// Whether cuFile moves `fd`'s file GPU-direct: a shared file system only where it is among
/// the reported targets (`H5GDS_EMU_GDS_TARGETS`); any other file system is taken as local on a
/// supported device (the emulator does not model cuFile's block-device check). Elsewhere the
/// handle registers in compatibility mode, silently, as cuFile does: "cuFileHandleRegister GDS
/// not supported or disabled by config, using cuFile posix read/write with compat mode enabled"
/// (cufile.log in NVIDIA/gds-nvidia-fs issue #62).
fn gds_target(fd: c_int) -> bool {
    // statfs magic numbers of NFS, Lustre, GPFS, BeeGFS and their flag bits.
    const SHARED: [(i64, u32); 4] = [
        (0x6969, 2),
        (0x0BD0_0BD0, 0),
        (0x4750_4653, 3),
        (0x1983_0326, 9),
    ];
    // SAFETY: a zeroed statfs is a valid value for the kernel to overwrite.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-pointer; a bad fd gives -1.
    if unsafe { libc::fstatfs(fd, &mut fs) } != 0 {
        return false;
    }
    match SHARED.iter().find(|(magic, _)| *magic == fs.f_type as i64) {
        Some((_, bit)) => switches::get().gds_targets & (1 << bit) != 0,
        None => true,
    }
}

/// `CUfileError_t cuFileHandleRegister(CUfileHandle_t *fh, CUfileDescr_t *descr)`: takes a
/// CU_FILE_HANDLE_TYPE_OPAQUE_FD descriptor of a regular file or block device, with or without
/// O_DIRECT: "O_DIRECT is the only supported mode before CUDA toolkit 12.2 (GDS version 1.7).
/// CUDA 12.2 (GDS version 1.7) introduces support for non O_DIRECT file descriptors as well"
/// (NVIDIA GPUDirect Storage O_DIRECT Requirements Guide, introduction; `cufile.h`'s
/// CU_FILE_INVALID_FILE_OPEN_FLAG predates it). Registering an fd twice is
/// CU_FILE_HANDLE_ALREADY_REGISTERED.
///
/// # Safety
/// `fh` and `descr` must be null or valid.
#[no_mangle]
pub unsafe extern "C" fn cuFileHandleRegister(
    fh: *mut CUfileHandle_t,
    descr: *mut CUfileDescr_t,
) -> CUfileError_t {
    call(
        "cuFileHandleRegister",
        format_args!("{fh:?}, {descr:?}"),
        cufile_panic,
        || {
            bump(&counters::CUFILE_HANDLE_REGISTER_CALLS);
            // SAFETY: the caller passes null or valid pointers.
            status(unsafe { register_handle(fh, descr) })
        },
    )
}

/// `void cuFileHandleDeregister(CUfileHandle_t fh)`: unknown handles are ignored.
///
/// # Safety
/// None beyond the C API's: the handle is looked up, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuFileHandleDeregister(fh: CUfileHandle_t) {
    call(
        "cuFileHandleDeregister",
        format_args!("{fh:?}"),
        || (),
        || {
            handles::remove(fh as usize);
        },
    )
}

fn register_buffer(base: usize, length: usize, flags: c_int) -> Status {
    use CUfileOpError as E;
    let known_flags = (CU_FILE_RDMA_REGISTER | CU_FILE_RDMA_RELAXED_ORDERING) as c_int;
    if base == 0 || length == 0 || flags & !known_flags != 0 {
        return Err(fail(E::CU_FILE_INVALID_VALUE));
    }
    require_context()?;
    ensure_driver_open()?;
    let inside_device = memory::device_range(base, length).is_some();
    if !inside_device && memory::overlaps_device(base, length) {
        bump(&counters::BOUNDS_VIOLATIONS);
        return Err(fail(E::CU_FILE_INVALID_VALUE));
    }
    if !memory::register_buffer(base, length) {
        return Err(fail(E::CU_FILE_MEMORY_ALREADY_REGISTERED));
    }
    Ok(())
}

/// `CUfileError_t cuFileBufRegister(const void *bufPtr_base, size_t length, int flags)`:
/// device memory must lie inside one allocation; host memory is accepted; registering the
/// same base twice is CU_FILE_MEMORY_ALREADY_REGISTERED. Freeing device memory drops its
/// registrations.
///
/// # Safety
/// None beyond the C API's: the pointer is looked up, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuFileBufRegister(
    base: *const c_void,
    length: usize,
    flags: c_int,
) -> CUfileError_t {
    call(
        "cuFileBufRegister",
        format_args!("{base:?}, length={length}, flags={flags}"),
        cufile_panic,
        || status(register_buffer(base as usize, length, flags)),
    )
}

/// `CUfileError_t cuFileBufDeregister(const void *bufPtr_base)`: CU_FILE_INVALID_VALUE if
/// `base` is not registered.
///
/// # Safety
/// None beyond the C API's: the pointer is looked up, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuFileBufDeregister(base: *const c_void) -> CUfileError_t {
    call(
        "cuFileBufDeregister",
        format_args!("{base:?}"),
        cufile_panic,
        || {
            if memory::deregister_buffer(base as usize) {
                fail(CUfileOpError::CU_FILE_SUCCESS)
            } else {
                fail(CUfileOpError::CU_FILE_INVALID_VALUE)
            }
        },
    )
}

/// Whether device memory `block` may be moved by cuFile on this thread: its context (for memory
/// of no context, pool and VMM memory, a context of its device) must be current. cuFile reports
/// CU_FILE_CUDA_CONTEXT_MISMATCH ("cuda context mismatch", `cufile.h` 1.20) otherwise, which is
/// why KvikIO pushes the buffer's own context (CU_POINTER_ATTRIBUTE_CONTEXT, else the primary
/// context of CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL) around every cuFileRead and cuFileWrite.
fn in_current_context(block: &DeviceBlock, addr: usize) -> bool {
    match crate::context::require_current() {
        Ok((current, _)) if block.context != 0 => current == block.context,
        Ok((_, device)) => block.owner_device(addr) == device,
        Err(_) => false,
    }
}

/// The buffer of a transfer: `[start, start + size)` inside one device allocation, or host
/// memory (pageable or pinned) touching no device allocation. Addresses in the first page
/// are refused as invalid (they are never a buffer, and would crash the emulator).
fn buffer_of(start: usize, size: usize) -> Result<(Buffer, Option<Arc<DeviceBlock>>), isize> {
    let invalid = || {
        bump(&counters::BOUNDS_VIOLATIONS);
        negated(CUfileOpError::CU_FILE_INVALID_VALUE)
    };
    match memory::find(start) {
        memory::Region::Device(block) if block.usable(start, size) => {
            let ptr = block.shadow_of(start);
            Ok((
                Buffer {
                    ptr,
                    on_device: true,
                },
                Some(block),
            ))
        }
        memory::Region::Device(_) => Err(invalid()),
        _ if start < 4096 || start.checked_add(size).is_none() => Err(invalid()),
        _ if memory::overlaps_device(start, size) => Err(invalid()),
        _ => Ok((
            Buffer {
                ptr: start as *mut u8,
                on_device: false,
            },
            None,
        )),
    }
}

/// The common body of `cuFileRead` / `cuFileWrite`.
fn transfer(
    direction: Direction,
    fh: usize,
    base: usize,
    size: usize,
    file_offset: libc::off_t,
    buf_offset: libc::off_t,
) -> isize {
    use CUfileOpError as E;
    let called = std::time::Instant::now();
    if !handles::driver_is_open() {
        return negated(E::CU_FILE_DRIVER_NOT_INITIALIZED);
    }
    let Some(handle) = handles::get(fh) else {
        return negated(E::CU_FILE_HANDLE_NOT_REGISTERED);
    };
    if file_offset < 0 || buf_offset < 0 || size > isize::MAX as usize {
        return negated(E::CU_FILE_INVALID_VALUE);
    }
    if (file_offset as u64)
        .checked_add(size as u64)
        .is_none_or(|end| end > i64::MAX as u64)
    {
        return negated(E::CU_FILE_INVALID_VALUE);
    }
    let Some(start) = usize::try_from(buf_offset)
        .ok()
        .and_then(|off| base.checked_add(off))
    else {
        bump(&counters::BOUNDS_VIOLATIONS);
        return negated(E::CU_FILE_INVALID_VALUE);
    };
    // The Arc keeps a device allocation mapped while its bytes move.
    let (buf, keep) = match buffer_of(start, size) {
        Ok(found) => found,
        Err(code) => return code,
    };
    if let Some(block) = &keep {
        // Managed memory: cuFile documents `bufPtr_base` as the "base address of buffer in device
        // or host memory" (`cufile.h` 1.20) and has a code for any other, "invalid pointer memory
        // type"; the emulator refuses managed memory with it.
        if block.is_managed() {
            return negated(E::CU_FILE_CUDA_MEMORY_TYPE_INVALID);
        }
        // cuFile takes `bufPtr_base` as the start of one buffer that holds `bufPtr_offset +
        // size` bytes: a range from it that leaves its mapping (a VMM or pool reservation's
        // range attributes taken for the buffer) is CU_FILE_CUDA_POINTER_RANGE_ERROR ("pointer
        // range error", `cufile.h` 1.20).
        if !block.in_one_mapping(base, start + size - base) {
            return negated(E::CU_FILE_CUDA_POINTER_RANGE_ERROR);
        }
        if !in_current_context(block, start) {
            return negated(E::CU_FILE_CUDA_CONTEXT_MISMATCH);
        }
    }
    let switches = switches::get();
    if counters::is_nth_call(&counters::IO_CALLS, switches.fail_io) {
        set_errno(switches.fail_io_errno);
        return -1;
    }
    if let (Some(code), true) = (switches.cufile_io_error, buf.on_device) {
        return negated(CUfileOpError(code));
    }
    let len = switches.short_io.map_or(size, |limit| size.min(limit));
    // SAFETY: buf is the shadow of [start, start + len) inside a live allocation (kept mapped
    // by _keep) or the caller's host memory of at least size bytes; the descriptors are open
    // while the Arc<FileHandle> lives.
    let result = unsafe {
        cufile_io::transfer(
            direction,
            handle.descriptors(),
            buf,
            len,
            file_offset as u64,
        )
    };
    if result >= 0 {
        bump(match direction {
            Direction::Read => &counters::CUFILE_READS,
            Direction::Write => &counters::CUFILE_WRITES,
        });
    }
    if let (Some(block), true) = (&keep, result > 0) {
        let device = block.owner_device(start);
        let way = match direction {
            Direction::Read => Way::ToDevice,
            Direction::Write => Way::ToHost,
        };
        timeline::file_transfer(called, device, way, result as usize);
    }
    result
}

/// Counts a transfer that failed ("cufile failed transfers" in the report).
fn counted(result: isize) -> isize {
    if result < 0 {
        bump(&counters::CUFILE_FAILED_TRANSFERS);
    }
    result
}

/// `ssize_t cuFileRead(CUfileHandle_t fh, void *bufPtr_base, size_t size, off_t file_offset,
/// off_t bufPtr_offset)`: bytes read (short at end of file, 0 at or past it), -1 with errno,
/// or a negated `CUfileOpError`: CU_FILE_HANDLE_NOT_REGISTERED for an unknown handle,
/// CU_FILE_INVALID_VALUE for negative offsets or a buffer range that starts in a device
/// allocation and leaves it, or host memory overlapping one (also a bounds violation). The
/// buffer may be device or host memory ("base address of buffer in device or host memory",
/// `cufile.h` 1.20).
///
/// # Safety
/// A host buffer must be valid for `size` bytes from `base + buf_offset`, as the C API
/// requires; device buffers are validated against the allocations.
#[no_mangle]
pub unsafe extern "C" fn cuFileRead(
    fh: CUfileHandle_t,
    base: *mut c_void,
    size: usize,
    file_offset: libc::off_t,
    buf_offset: libc::off_t,
) -> isize {
    call(
        "cuFileRead",
        format_args!(
            "{fh:?}, {base:?}, size={size}, file_offset={file_offset}, buf_offset={buf_offset}"
        ),
        || negated(CUfileOpError::CU_FILE_INTERNAL_ERROR),
        || {
            counted(transfer(
                Direction::Read,
                fh as usize,
                base as usize,
                size,
                file_offset,
                buf_offset,
            ))
        },
    )
}

/// `ssize_t cuFileWrite(CUfileHandle_t fh, const void *bufPtr_base, size_t size, off_t
/// file_offset, off_t bufPtr_offset)`: as `cuFileRead`, in the other direction.
///
/// # Safety
/// As `cuFileRead`.
#[no_mangle]
pub unsafe extern "C" fn cuFileWrite(
    fh: CUfileHandle_t,
    base: *const c_void,
    size: usize,
    file_offset: libc::off_t,
    buf_offset: libc::off_t,
) -> isize {
    call(
        "cuFileWrite",
        format_args!(
            "{fh:?}, {base:?}, size={size}, file_offset={file_offset}, buf_offset={buf_offset}"
        ),
        || negated(CUfileOpError::CU_FILE_INTERNAL_ERROR),
        || {
            counted(transfer(
                Direction::Write,
                fh as usize,
                base as usize,
                size,
                file_offset,
                buf_offset,
            ))
        },
    )
}
