//! cuFile API: driver, file handles, buffer registration, `cuFileRead` / `cuFileWrite`.
//!
//! The driver opens implicitly on the first `cuFileHandleRegister` / `cuFileBufRegister`, as
//! real cuFile does, and opening it initialises CUDA (so it fails, instead of hanging, when
//! CUDA has no device). Transfers go between the file and the shadow mapping of device memory
//! with pread/pwrite on the handle's buffered descriptor; they are synchronous and complete
//! unless the end of the file (reads), an error after some bytes, or `H5GDS_EMU_SHORT_IO`
//! stops them early.

use crate::consts::{CUDA_SUCCESS, CUFILE_VERSION, NVFS_VERSION};
use crate::counters::{self, bump};
use crate::cufile_handles::{self as handles, FileHandle};
use crate::ffi::{self, call, cufile_panic, cufile_status, errno, set_errno};
use crate::memory;
use crate::switches;
use cufile_sys::{
    CUfileDescr_t, CUfileDriverControlFlags, CUfileDriverStatusFlags, CUfileDrvProps_t,
    CUfileError_t, CUfileFileHandleType, CUfileHandle_t, CUfileOpError, CU_FILE_RDMA_REGISTER,
    CU_FILE_RDMA_RELAXED_ORDERING,
};
use std::ffi::{c_int, c_void};

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

/// `cuFileDriverOpen`'s work: injected failure, else CUDA initialisation, else one more user.
fn open_driver() -> Status {
    if let Some(code) = switches::get().cufile_open_error {
        return Err(fail(CUfileOpError(code)));
    }
    if let Err(cu_err) = crate::context::init(0) {
        return Err(cufile_status(
            CUfileOpError::CU_FILE_CUDA_DRIVER_ERROR,
            cu_err,
        ));
    }
    handles::driver_opened();
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

/// The properties reported with GDS present (`gds`) or in compat mode.
fn properties(gds: bool) -> CUfileDrvProps_t {
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
        per_buffer_cache_size: 1024,
        max_device_pinned_mem_size: 32 * 1024 * 1024,
        max_batch_io_size: 128,
        max_batch_io_timeout_msecs: 5,
    };
    if gds {
        props.nvfs.major_version = NVFS_VERSION.0;
        props.nvfs.minor_version = NVFS_VERSION.1;
        props.nvfs.dstatusflags = 1 << CUfileDriverStatusFlags::CU_FILE_NVME_SUPPORTED.0;
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
    if switches::get().gds && flags & libc::O_DIRECT == 0 {
        return Err(fail(E::CU_FILE_INVALID_FILE_OPEN_FLAG));
    }
    if handles::is_registered_fd(fd) {
        return Err(fail(E::CU_FILE_HANDLE_ALREADY_REGISTERED));
    }
    let io_fd = handles::reopen_buffered(fd, flags).ok_or(fail(E::CU_FILE_GETNEWFD_FAILED))?;
    let value = handles::insert(FileHandle { user_fd: fd, io_fd });
    // SAFETY: checked non-null; the caller passes a writable handle slot.
    unsafe { fh.write_unaligned(value as CUfileHandle_t) };
    Ok(())
}

/// `CUfileError_t cuFileHandleRegister(CUfileHandle_t *fh, CUfileDescr_t *descr)`: takes a
/// CU_FILE_HANDLE_TYPE_OPAQUE_FD descriptor of a regular file or block device. With GDS
/// present the fd must have O_DIRECT (else CU_FILE_INVALID_FILE_OPEN_FLAG, as `cufile.h`
/// documents); in compat mode any fd is accepted. Registering an fd twice is
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
        // SAFETY: the caller passes null or valid pointers.
        || status(unsafe { register_handle(fh, descr) }),
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Read,
    Write,
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
    let Some(block) = memory::device_range(start, size) else {
        bump(&counters::BOUNDS_VIOLATIONS);
        return negated(E::CU_FILE_INVALID_VALUE);
    };
    let switches = switches::get();
    if counters::is_nth_call(&counters::IO_CALLS, switches.fail_io) {
        set_errno(switches.fail_io_errno);
        return -1;
    }
    let len = switches.short_io.map_or(size, |limit| size.min(limit));
    let buf = block.shadow_of(start);
    // SAFETY: [start, start + len) lies inside the allocation, so the shadow range is mapped
    // (the Arc keeps it so) and read-write; io_fd is open while the Arc<FileHandle> lives.
    let result = unsafe { move_bytes(direction, handle.io_fd, buf, len, file_offset) };
    if result >= 0 {
        bump(match direction {
            Direction::Read => &counters::CUFILE_READS,
            Direction::Write => &counters::CUFILE_WRITES,
        });
    }
    result
}

/// pread/pwrite `len` bytes between `buf` and `fd` at `offset`, retrying EINTR and short
/// counts. Returns the bytes moved (fewer at end of file, or if an error follows some
/// progress), or -1 with errno.
///
/// # Safety
/// `buf` must be valid for reads and writes of `len` bytes.
unsafe fn move_bytes(
    direction: Direction,
    fd: c_int,
    buf: *mut u8,
    len: usize,
    offset: libc::off_t,
) -> isize {
    let mut done = 0usize;
    while done < len {
        let at = offset + done as libc::off_t;
        // SAFETY: buf + done .. buf + len is inside the caller's buffer.
        let n = unsafe {
            let p = buf.add(done);
            match direction {
                Direction::Read => libc::pread(fd, p.cast(), len - done, at),
                Direction::Write => libc::pwrite(fd, p.cast::<c_void>(), len - done, at),
            }
        };
        if n < 0 {
            let e = errno();
            if e == libc::EINTR {
                continue;
            }
            if done > 0 {
                break;
            }
            set_errno(e);
            return -1;
        }
        if n == 0 {
            break;
        }
        done += n as usize;
    }
    done as isize
}

/// `ssize_t cuFileRead(CUfileHandle_t fh, void *bufPtr_base, size_t size, off_t file_offset,
/// off_t bufPtr_offset)`: bytes read (short at end of file, 0 at or past it), -1 with errno,
/// or a negated `CUfileOpError`: CU_FILE_HANDLE_NOT_REGISTERED for an unknown handle,
/// CU_FILE_INVALID_VALUE for negative offsets or a buffer range not inside one device
/// allocation (also a bounds violation).
///
/// # Safety
/// None beyond the C API's: the buffer is validated against the device allocations.
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
            transfer(
                Direction::Read,
                fh as usize,
                base as usize,
                size,
                file_offset,
                buf_offset,
            )
        },
    )
}

/// `ssize_t cuFileWrite(CUfileHandle_t fh, const void *bufPtr_base, size_t size, off_t
/// file_offset, off_t bufPtr_offset)`: as `cuFileRead`, in the other direction.
///
/// # Safety
/// None beyond the C API's: the buffer is validated against the device allocations.
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
            transfer(
                Direction::Write,
                fh as usize,
                base as usize,
                size,
                file_offset,
                buf_offset,
            )
        },
    )
}
