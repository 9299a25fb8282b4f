//! The plugin entry points (`H5PLget_plugin_type`, `H5PLget_plugin_info`), the driver classes,
//! and the `extern "C"` trampolines HDF5 calls.
//!
//! Every HDF5 copy in the process that asks for the driver gets a class bound to it (see
//! `h5gds_runtime::hdf5`): the callbacks that get no file (`open`, `del`) are distinct functions per
//! binding, and each open file keeps its binding's library, so every call back into HDF5 goes to
//! the copy that made the request. Every trampoline runs its body through `guard`: panics are
//! caught, errors become HDF5's failure value plus an error-stack record in that copy (and a log
//! line). Nothing unwinds into HDF5. Registering the class in-process, and telling it from
//! another `gds` driver, is `registration`'s job.

use crate::abi::*;
use crate::config::{CarriedSettings, VfdSettings};
use crate::error::{Error, ErrorClass, Result};
use crate::file::OpenFile;
use crate::io::{vector, BufPtr, Direction};
use crate::log::with_logging;
use crate::selection;
use h5gds_runtime::hdf5::{self as runtime_hdf5, Hdf5Library, BINDINGS};
use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

mod registration;
pub use registration::{
    class_for_hdf5_at, h5gds_library, register_in_loaded_hdf5, set_fapl_driver, Registration,
    IDENTITY_SYMBOL,
};

/// sec2's features, without DATA_SIEVE: raw-data buffers must reach the driver untouched (the
/// GPU paths depend on it, and selection I/O then delivers strided reads as vectors); with
/// MEMMANAGE where a file asks for it (`device_copies`), so HDF5 asks the driver
/// (`ctl(MEM_COPY)`) to copy compact data and cached chunks to and from possibly device buffers.
const FEATURES: c_ulong = H5FD_FEAT_AGGREGATE_METADATA
    | H5FD_FEAT_ACCUMULATE_METADATA
    | H5FD_FEAT_AGGREGATE_SMALLDATA
    | H5FD_FEAT_POSIX_COMPAT_HANDLE
    | H5FD_FEAT_SUPPORTS_SWMR_IO
    | H5FD_FEAT_DEFAULT_VFD_COMPATIBLE
    | H5FD_FEAT_MEMMANAGE;

/// The memory HDF5 sees for an open file: its public header first, then the driver's state, to
/// which the driver only makes shared references (see `state`), the HDF5 library that opened
/// it (None for the unbound class), and the vfd-gds sizes its access list carried (passed on by
/// `fapl_get`).
#[repr(C)]
struct GdsFile {
    public: H5FD_t,
    state: OpenFile,
    hdf5: Option<&'static Hdf5Library>,
    vfd_gds_sizes: [u64; 3],
}

struct Class(H5FD_class_t);
// SAFETY: the class is immutable; its pointers are to static strings and functions.
unsafe impl Sync for Class {}
// SAFETY: as above: nothing in it belongs to a thread.
unsafe impl Send for Class {}

type OpenFn = unsafe extern "C" fn(*const c_char, c_uint, hid_t, haddr_t) -> *mut H5FD_t;
type DeleteFn = unsafe extern "C" fn(*const c_char, hid_t) -> herr_t;

/// The index of the unbound class's callbacks in `OPENS` and `DELETES`.
const UNBOUND: usize = BINDINGS;

/// `open` and `del` of each binding (the last: the unbound class's), distinct functions so that
/// HDF5's copy of a class tells the driver which library it belongs to.
const OPENS: [OpenFn; BINDINGS + 1] = [
    gds_open::<0>,
    gds_open::<1>,
    gds_open::<2>,
    gds_open::<3>,
    gds_open::<4>,
    gds_open::<5>,
    gds_open::<6>,
    gds_open::<7>,
    gds_open::<UNBOUND>,
];
const DELETES: [DeleteFn; BINDINGS + 1] = [
    gds_delete::<0>,
    gds_delete::<1>,
    gds_delete::<2>,
    gds_delete::<3>,
    gds_delete::<4>,
    gds_delete::<5>,
    gds_delete::<6>,
    gds_delete::<7>,
    gds_delete::<UNBOUND>,
];

/// The class of binding `slot`, with or without the selection callbacks (which need the H5S calls
/// of that binding's library).
const fn make_class(slot: usize, selection: bool) -> H5FD_class_t {
    H5FD_class_t {
        version: H5FD_CLASS_VERSION,
        value: DRIVER_VALUE,
        name: DRIVER_NAME.as_ptr(),
        maxaddr: MAXADDR,
        fc_degree: H5F_CLOSE_WEAK,
        terminate: Some(gds_terminate),
        sb_size: None,
        sb_encode: None,
        sb_decode: None,
        fapl_size: std::mem::size_of::<CarriedSettings>(),
        fapl_get: Some(gds_fapl_get),
        fapl_copy: Some(gds_fapl_copy),
        fapl_free: Some(gds_fapl_free),
        dxpl_size: 0,
        dxpl_copy: None,
        dxpl_free: None,
        open: Some(OPENS[slot]),
        close: Some(gds_close),
        cmp: Some(gds_cmp),
        query: Some(gds_query),
        get_type_map: None,
        alloc: None,
        free: None,
        get_eoa: Some(gds_get_eoa),
        set_eoa: Some(gds_set_eoa),
        get_eof: Some(gds_get_eof),
        get_handle: Some(gds_get_handle),
        read: Some(gds_io::<*mut c_void, false>),
        write: Some(gds_io::<*const c_void, true>),
        read_vector: Some(gds_vector::<*mut c_void, false>),
        write_vector: Some(gds_vector::<*const c_void, true>),
        read_selection: if selection {
            Some(gds_selection::<false>)
        } else {
            None
        },
        write_selection: if selection {
            Some(gds_selection::<true>)
        } else {
            None
        },
        flush: Some(gds_flush),
        truncate: Some(gds_truncate),
        lock: Some(gds_lock),
        unlock: Some(gds_unlock),
        del: Some(DELETES[slot]),
        ctl: Some(gds_ctl),
        fl_map: FLMAP_DICHOTOMY,
    }
}

static BOUND_CLASSES: [OnceLock<Class>; BINDINGS] = [const { OnceLock::new() }; BINDINGS];
/// The class for an HDF5 that cannot be told apart: it makes no call into HDF5, so no selection
/// callbacks (HDF5 then hands selections over as vectors).
static UNBOUND_CLASS: Class = Class(make_class(UNBOUND, false));

/// The class of binding `slot` (the unbound class for None or a slot not bound).
pub(crate) fn bound_class(slot: Option<usize>) -> *const H5FD_class_t {
    let Some((slot, library)) = slot.and_then(|s| Some((s, runtime_hdf5::bound_library(s)?)))
    else {
        return &UNBOUND_CLASS.0;
    };
    &BOUND_CLASSES[slot]
        .get_or_init(|| Class(make_class(slot, library.has_selection_calls())))
        .0
}

/// Tells HDF5's plugin loader that this library is a virtual file driver.
#[no_mangle]
pub extern "C" fn H5PLget_plugin_type() -> c_int {
    H5PL_TYPE_VFD
}

/// Hands HDF5's plugin loader the class bound to the HDF5 copy calling: the one this call returns
/// into.
#[no_mangle]
#[inline(never)]
pub extern "C" fn H5PLget_plugin_info() -> *const c_void {
    with_logging(|| {
        let slot = catch_unwind(|| runtime_hdf5::calling_code().and_then(runtime_hdf5::bind_code));
        bound_class(slot.ok().flatten()).cast()
    })
}

/// Runs a callback body with the driver's logger current: panics are caught and errors reported
/// (to `hdf5`, the library that called, where known); `fail` is returned for both.
pub(crate) fn guard<T>(
    func: &'static str,
    hdf5: Option<&Hdf5Library>,
    fail: T,
    body: impl FnOnce() -> Result<T>,
) -> T {
    with_logging(|| guard_quiet(func, hdf5, fail, body))
}

/// `guard` for the bodies that log nothing (eoa, eof, cmp, handle, flush) or make the logger
/// current themselves where they may log (read, write, vector and selection transfers, whose
/// small host requests take a short way that logs nothing): the logger is made current only to
/// report a failure. HDF5 calls these several times per dataset read, and making the logger
/// current cost more than their bodies (callgrind, 100 000 `H5FDread`s of 8 bytes: about 150 of
/// the driver's 613 instructions per read went to the dispatcher's set-up and tear-down).
fn guard_quiet<T>(
    func: &'static str,
    hdf5: Option<&Hdf5Library>,
    fail: T,
    body: impl FnOnce() -> Result<T>,
) -> T {
    let err = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(value)) => return value,
        Ok(Err(err)) => err,
        Err(_) => Error::Panic(func),
    };
    with_logging(|| report(func, hdf5, &err));
    fail
}

/// An error reaches the caller through HDF5's error stack where the calling library took the
/// record; then, as sec2 does, the driver prints nothing at the default level (programs probe for
/// files and catch the exceptions as control flow). What HDF5 cannot pass on is printed, except
/// a missing or already existing file, which HDF5's own failure says well enough.
fn report(func: &'static str, hdf5: Option<&Hdf5Library>, err: &Error) {
    let message = err.to_string();
    let pushed = hdf5.is_some_and(|api| api.push_error(func, err.class(), &message));
    let routine = matches!(err, Error::Open { source, .. }
        if matches!(source.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::AlreadyExists));
    match err.class() {
        _ if pushed || routine => tracing::info!("{func}: {message}"),
        ErrorClass::BadValue => tracing::error!("{func}: {message}"),
        _ => tracing::warn!("{func}: {message}"),
    }
}

/// The driver state behind an `H5FD_t` HDF5 hands back, and the HDF5 library that opened it
/// (None for the unbound class): never `&mut`, since HDF5 passes one file through `const` and
/// non-`const` pointers and `cmp` may get it twice (see `OpenFile`). A null pointer is an error
/// for the callback to report.
///
/// # Safety
/// `file` must be null or a pointer this driver's `open` returned and `close` has not yet freed,
/// and the state must outlive `'a`.
unsafe fn open_file<'a>(
    file: *const H5FD_t,
) -> (Option<&'static Hdf5Library>, Result<&'a OpenFile>) {
    crate::memory::callback_boundary();
    // SAFETY: the caller's contract.
    unsafe { file_state(file) }
}

/// `open_file` without marking a callback boundary: for `read` and `write`, whose transfers mark
/// it themselves where they can meet device memory (`OpenFile::transfer`).
///
/// # Safety
/// As `open_file`.
unsafe fn file_state<'a>(
    file: *const H5FD_t,
) -> (Option<&'static Hdf5Library>, Result<&'a OpenFile>) {
    if file.is_null() {
        return (
            None,
            Err(Error::InvalidArgument("null file pointer".into())),
        );
    }
    // SAFETY: every H5FD_t this driver hands out is the first field of a live GdsFile
    // (repr(C)); the caller guarantees it is still open.
    let file = unsafe { &*file.cast::<GdsFile>() };
    (file.hdf5, Ok(&file.state))
}

/// sec2's reading of `HDF5_USE_FILE_LOCKING`, else the fapl's flag, else HDF5's default (true).
fn ignore_disabled_locks(hdf5: Option<&Hdf5Library>, fapl: hid_t) -> bool {
    match std::env::var("HDF5_USE_FILE_LOCKING").as_deref() {
        Ok("BEST_EFFORT") => true,
        Ok("TRUE") | Ok("1") => false,
        _ => hdf5
            .and_then(|api| api.ignore_disabled_file_locks(fapl))
            .unwrap_or(true),
    }
}

/// The config string for this open: from the fapl when the calling HDF5 is known, else from the
/// environment variable HDF5 itself would have read.
fn config_string(hdf5: Option<&Hdf5Library>, fapl: hid_t) -> Option<Vec<u8>> {
    match hdf5 {
        Some(api) => api.driver_config(fapl),
        None => crate::config::config_from_environment(),
    }
}

/// The settings a file access list carries (its driver info, where it is this driver's), copied
/// out of the list.
fn carried_settings(hdf5: &Hdf5Library, fapl: hid_t) -> Option<CarriedSettings> {
    let api = &hdf5.api;
    // SAFETY: HDF5 checks the id; the info it returns is the list's copy, made by this class's
    // `fapl_copy` (`fapl_size` bytes), valid while the list is, which outlasts this open.
    let info = unsafe { (api.H5Pget_driver_info.ok()?)(fapl) };
    if info.is_null() {
        // A list with no driver info is no error for the open: drop the record HDF5 pushed.
        if let Ok(clear) = api.H5Eclear2 {
            // SAFETY: H5Eclear2(H5E_DEFAULT) clears the default error stack.
            unsafe { clear(0) };
        }
        return None;
    }
    // SAFETY: see above: `fapl_size` readable bytes.
    unsafe { CarriedSettings::at(info) }.copied()
}

/// `fapl_get`: the settings an open file passes on to the files HDF5 opens from its access list
/// (virtual dataset sources, external link targets); HDF5 frees them with `fapl_free`.
unsafe extern "C" fn gds_fapl_get(file: *mut H5FD_t) -> *mut c_void {
    // SAFETY: HDF5 passes an open file of this driver.
    let (hdf5, f) = unsafe { open_file(file) };
    guard("gds_fapl_get", hdf5, std::ptr::null_mut(), || {
        let f = f?;
        // SAFETY: `open_file` succeeded, so `file` is a live GdsFile.
        let sizes = unsafe { (*file.cast::<GdsFile>()).vfd_gds_sizes };
        let carried = CarriedSettings::of_open_file(&f.settings, sizes);
        Ok(Box::into_raw(Box::new(carried)).cast())
    })
}

/// `fapl_copy`: a copy of a list's carried settings (HDF5 hands over what `H5Pset_driver` got or
/// what `fapl_get` made); null for bytes that are not carried settings.
unsafe extern "C" fn gds_fapl_copy(info: *const c_void) -> *mut c_void {
    guard("gds_fapl_copy", None, std::ptr::null_mut(), || {
        // SAFETY: HDF5 passes a driver info of this class: `fapl_size` bytes.
        let carried = unsafe { CarriedSettings::at(info) }.ok_or_else(|| {
            Error::InvalidArgument("driver info that is not the gds driver's settings".into())
        })?;
        Ok(Box::into_raw(Box::new(*carried)).cast())
    })
}

/// `fapl_free`: frees what `fapl_copy` or `fapl_get` made.
unsafe extern "C" fn gds_fapl_free(info: *mut c_void) -> herr_t {
    guard("gds_fapl_free", None, -1, || {
        if !info.is_null() {
            // SAFETY: HDF5 frees only what this class's `fapl_copy`/`fapl_get` returned, a
            // boxed CarriedSettings, once.
            drop(unsafe { Box::from_raw(info.cast::<CarriedSettings>()) });
        }
        Ok(0)
    })
}

/// `open` of binding `SLOT` (or the unbound class's, `UNBOUND`).
unsafe extern "C" fn gds_open<const SLOT: usize>(
    name: *const c_char,
    flags: c_uint,
    fapl: hid_t,
    maxaddr: haddr_t,
) -> *mut H5FD_t {
    let hdf5 = runtime_hdf5::bound_library(SLOT);
    guard("gds_open", hdf5, std::ptr::null_mut(), || {
        crate::memory::callback_boundary();
        if name.is_null() {
            return Err(Error::InvalidArgument("invalid file name: null".into()));
        }
        // SAFETY: HDF5 passes a NUL-terminated file name.
        let c_name = unsafe { CStr::from_ptr(name) };
        let carried = hdf5.and_then(|api| carried_settings(api, fapl));
        let settings =
            VfdSettings::load_for_open(config_string(hdf5, fapl).as_deref(), carried.as_ref())?;
        let state = OpenFile::open(
            c_name,
            flags,
            maxaddr,
            settings,
            ignore_disabled_locks(hdf5, fapl),
        )?;
        // The descriptions are a few thousand instructions: made only for a log that shows them.
        if tracing::enabled!(tracing::Level::INFO) {
            let (host, device) = state.path_descriptions();
            tracing::info!(
                "opened {:?} (flags {flags:#x}); host buffers: {host}; device buffers: {device}; settings: {}",
                state.path,
                state.settings.describe()
            );
        }
        let file = Box::new(GdsFile {
            public: H5FD_t::empty(),
            state,
            hdf5,
            vfd_gds_sizes: carried.map_or([0; 3], |c| c.vfd_gds_sizes),
        });
        Ok(Box::into_raw(file).cast::<H5FD_t>())
    })
}

unsafe extern "C" fn gds_close(file: *mut H5FD_t) -> herr_t {
    // SAFETY: HDF5 passes an open file of this driver (or null, refused).
    let (hdf5, open) = unsafe { open_file(file) };
    guard("gds_close", hdf5, -1, || {
        open?;
        // SAFETY: `file` came from `gds_open` (a boxed GdsFile) and HDF5 closes it once.
        let boxed = unsafe { Box::from_raw(file.cast::<GdsFile>()) };
        boxed.state.close()?;
        Ok(0)
    })
}

unsafe extern "C" fn gds_cmp(f1: *const H5FD_t, f2: *const H5FD_t) -> c_int {
    // SAFETY: both are open files of this driver (HDF5 compares files of one class).
    let ((hdf5, a), (_, b)) = unsafe { (open_file(f1), open_file(f2)) };
    guard_quiet("gds_cmp", hdf5, -1, || Ok(a?.compare(b?) as c_int))
}

unsafe extern "C" fn gds_query(file: *const H5FD_t, flags: *mut c_ulong) -> herr_t {
    // SAFETY: HDF5 passes an open file of this driver, or null to ask about the class.
    let (hdf5, open) = unsafe { open_file(file) };
    guard("gds_query", hdf5, -1, || {
        if !flags.is_null() {
            // HDF5 routes every copy out of a cached chunk or compact dataset through
            // ctl(MEM_COPY) when MEMMANAGE is set, one call per sequence (each element of
            // `chunked[::3]`: 0.77x sec2 on a GPU machine). So only a file opened with
            // device_copies=on, where CUDA works, asks for it (HDF5 reads the flags once, at
            // open); array-io and the Python package stage such data themselves.
            let memmanage = open.as_ref().is_ok_and(|f| f.settings.device_copies)
                && h5gds_runtime::device_ranges::cuda_works();
            let mut features = if memmanage {
                FEATURES
            } else {
                FEATURES & !H5FD_FEAT_MEMMANAGE
            };
            // A remote file has no descriptor (HDF5 would lstat its URL as a path).
            if open.as_ref().is_ok_and(|f| f.remote.is_some()) {
                features &= !H5FD_FEAT_POSIX_COMPAT_HANDLE;
            }
            // SAFETY: HDF5 passes a valid out-pointer.
            unsafe { *flags = features };
        }
        Ok(0)
    })
}

unsafe extern "C" fn gds_get_eoa(file: *const H5FD_t, _type: H5FD_mem_t) -> haddr_t {
    // SAFETY: HDF5 passes an open file of this driver.
    let (hdf5, f) = unsafe { open_file(file) };
    guard_quiet("gds_get_eoa", hdf5, HADDR_UNDEF, || Ok(f?.eoa()))
}

unsafe extern "C" fn gds_set_eoa(file: *mut H5FD_t, _type: H5FD_mem_t, addr: haddr_t) -> herr_t {
    // SAFETY: HDF5 passes an open file of this driver.
    let (hdf5, f) = unsafe { open_file(file) };
    guard_quiet("gds_set_eoa", hdf5, -1, || f?.set_eoa(addr).map(|_| 0))
}

unsafe extern "C" fn gds_get_eof(file: *const H5FD_t, _type: H5FD_mem_t) -> haddr_t {
    // SAFETY: HDF5 passes an open file of this driver.
    let (hdf5, f) = unsafe { open_file(file) };
    guard_quiet("gds_get_eof", hdf5, HADDR_UNDEF, || Ok(f?.eof()))
}

unsafe extern "C" fn gds_get_handle(
    file: *mut H5FD_t,
    _fapl: hid_t,
    handle: *mut *mut c_void,
) -> herr_t {
    // SAFETY: HDF5 passes an open file of this driver.
    let (hdf5, f) = unsafe { open_file(file) };
    guard_quiet("gds_get_handle", hdf5, -1, || {
        let f = f?;
        if handle.is_null() {
            return Err(Error::InvalidArgument("file handle not valid".into()));
        }
        // A remote file has no descriptor: its handle is an int -1 whose address names it to
        // the engine (`remote::remote_file_at`).
        let at = match &f.remote {
            Some(remote) => remote.handle_ptr(),
            None => (&raw const f.raw_fd).cast_mut().cast(),
        };
        // SAFETY: HDF5 passes a valid out-pointer. The descriptor is handed out as sec2 does (a
        // pointer to the int), and HDF5 only reads it.
        unsafe { *handle = at };
        Ok(0)
    })
}

/// A buffer pointer as HDF5's read (`*mut c_void`) and write (`*const c_void`) callbacks pass it.
trait CallerBuffer: Copy {
    fn buf_ptr(self) -> BufPtr;
}

impl CallerBuffer for *mut c_void {
    fn buf_ptr(self) -> BufPtr {
        BufPtr::new(self.cast())
    }
}

impl CallerBuffer for *const c_void {
    fn buf_ptr(self) -> BufPtr {
        BufPtr::from_const(self.cast())
    }
}

/// `read` (`WRITE` false, `B` a `*mut c_void`) and `write` (true, `*const c_void`).
unsafe extern "C" fn gds_io<B: CallerBuffer, const WRITE: bool>(
    file: *mut H5FD_t,
    mem_type: H5FD_mem_t,
    _dxpl: hid_t,
    addr: haddr_t,
    size: usize,
    buf: B,
) -> herr_t {
    let (func, dir, null) = if WRITE {
        ("gds_write", Direction::Write, "write from a null buffer")
    } else {
        ("gds_read", Direction::Read, "read into a null buffer")
    };
    // SAFETY: HDF5 passes an open file of this driver.
    let (hdf5, f) = unsafe { file_state(file) };
    // Quiet: `OpenFile::transfer` makes the logger current where it may log.
    guard_quiet(func, hdf5, -1, || {
        let f = f?;
        let buf = buf.buf_ptr();
        if buf.as_ptr().is_null() && size > 0 {
            return Err(Error::InvalidArgument(null.into()));
        }
        // SAFETY: HDF5 passes a buffer of at least `size` bytes, writable for a read.
        unsafe { f.transfer(dir, addr, size, buf, mem_type)? };
        Ok(0)
    })
}

/// `read_vector` (`WRITE` false, `B` a `*mut c_void`) and `write_vector` (true, `*const
/// c_void`): the two differ only in the constness of the buffer pointers.
unsafe extern "C" fn gds_vector<B, const WRITE: bool>(
    file: *mut H5FD_t,
    _dxpl: hid_t,
    count: u32,
    types: *mut H5FD_mem_t,
    addrs: *mut haddr_t,
    sizes: *mut usize,
    bufs: *mut B,
) -> herr_t {
    const { assert!(std::mem::size_of::<B>() == std::mem::size_of::<BufPtr>()) };
    let (func, dir) = if WRITE {
        ("gds_write_vector", Direction::Write)
    } else {
        ("gds_read_vector", Direction::Read)
    };
    // SAFETY: HDF5 passes an open file of this driver.
    let (hdf5, f) = unsafe { open_file(file) };
    // Quiet: `OpenFile::transfer_vector` makes the logger current where it may log.
    guard_quiet(func, hdf5, -1, || {
        let f = f?;
        // SAFETY: HDF5 passes `count` entries in each array and buffers valid in direction `dir`
        // for their sizes; a buffer pointer has BufPtr's layout.
        unsafe {
            let pieces = vector::request_pieces(count, types, addrs, sizes, bufs.cast())?;
            f.transfer_vector(dir, pieces)?
        };
        Ok(0)
    })
}

/// `read_selection` (`WRITE` false) and `write_selection` (true).
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn gds_selection<const WRITE: bool>(
    file: *mut H5FD_t,
    mem_type: H5FD_mem_t,
    _dxpl: hid_t,
    count: usize,
    mem_spaces: *mut hid_t,
    file_spaces: *mut hid_t,
    offsets: *mut haddr_t,
    element_sizes: *mut usize,
    bufs: *mut *mut c_void,
) -> herr_t {
    let (func, dir) = if WRITE {
        ("gds_write_selection", Direction::Write)
    } else {
        ("gds_read_selection", Direction::Read)
    };
    // SAFETY: HDF5 passes an open file of this driver.
    let (hdf5, f) = unsafe { open_file(file) };
    // The dataspace ids belong to the library that opened the file: only its H5S calls may read
    // them (a class without a library offers no selection callbacks).
    let spaces = hdf5.filter(|l| l.has_selection_calls());
    // Quiet: `selection::transfer_entries` makes the logger current where it may log.
    guard_quiet(func, hdf5, -1, || {
        let spaces = spaces.ok_or_else(|| {
            Error::InvalidArgument(
                "selection request, but the calling HDF5's H5S calls are not reachable".into(),
            )
        })?;
        // SAFETY: HDF5 passes `count` entries in each array, valid dataspace ids, and buffers
        // valid in direction `dir` for their memory selections.
        unsafe {
            let entries = selection::request_entries(
                count,
                mem_spaces,
                file_spaces,
                offsets,
                element_sizes,
                bufs.cast(),
            )?;
            selection::transfer_entries(f?, spaces, &entries, mem_type, dir)?;
        }
        Ok(0)
    })
}

/// Every write is complete when its callback returns and nothing is cached in the driver, so
/// there is nothing to flush; sec2 likewise does not `fsync`.
unsafe extern "C" fn gds_flush(file: *mut H5FD_t, _dxpl: hid_t, _closing: bool) -> herr_t {
    // SAFETY: HDF5 passes an open file of this driver; only validity is checked.
    let (hdf5, f) = unsafe { open_file(file) };
    guard_quiet("gds_flush", hdf5, -1, || f.map(|_| 0))
}

unsafe extern "C" fn gds_truncate(file: *mut H5FD_t, _dxpl: hid_t, _closing: bool) -> herr_t {
    // SAFETY: HDF5 passes an open file of this driver.
    let (hdf5, f) = unsafe { open_file(file) };
    guard("gds_truncate", hdf5, -1, || f?.truncate().map(|_| 0))
}

unsafe extern "C" fn gds_lock(file: *mut H5FD_t, rw: bool) -> herr_t {
    // SAFETY: HDF5 passes an open file of this driver.
    let (hdf5, f) = unsafe { open_file(file) };
    guard("gds_lock", hdf5, -1, || f?.lock(rw).map(|_| 0))
}

unsafe extern "C" fn gds_unlock(file: *mut H5FD_t) -> herr_t {
    // SAFETY: HDF5 passes an open file of this driver.
    let (hdf5, f) = unsafe { open_file(file) };
    guard("gds_unlock", hdf5, -1, || f?.unlock().map(|_| 0))
}

/// `del` of binding `SLOT` (or the unbound class's, `UNBOUND`).
unsafe extern "C" fn gds_delete<const SLOT: usize>(name: *const c_char, _fapl: hid_t) -> herr_t {
    guard("gds_delete", runtime_hdf5::bound_library(SLOT), -1, || {
        if name.is_null() {
            return Err(Error::InvalidArgument("invalid file name: null".into()));
        }
        // SAFETY: HDF5 passes a NUL-terminated file name.
        let c_name = unsafe { CStr::from_ptr(name) };
        // SAFETY: unlink of a valid C string.
        if unsafe { libc::remove(c_name.as_ptr()) } < 0 {
            return Err(Error::File {
                op: "unable to delete file (remove)",
                path: c_name.to_string_lossy().into_owned(),
                source: std::io::Error::last_os_error(),
            });
        }
        Ok(0)
    })
}

/// HDF5's memory-copy request for `ctl(H5FD_CTL_MEM_COPY)` (`H5FD_ctl_memcpy_args_t`).
#[repr(C)]
struct MemcpyArgs {
    dstbuf: *mut c_void,
    dst_off: hsize_t,
    srcbuf: *const c_void,
    src_off: hsize_t,
    len: usize,
}

/// The per-element fast path of `MEM_COPY`: both base pointers already classified as host memory
/// in this copy loop (`memory::memoised_copy_base`), so a plain copy, outside `guard`, whose
/// logger set-up would cost as much as the copy. Returns whether it copied.
///
/// # Safety
/// `args` must point to HDF5's copy request, both of whose ranges are valid for `len` bytes.
unsafe fn mem_copy_between_known_host_buffers(args: *const MemcpyArgs) -> bool {
    // SAFETY: the caller's contract.
    let args = unsafe { &*args };
    let (dst, src) = (
        BufPtr::new(args.dstbuf.cast()),
        BufPtr::from_const(args.srcbuf.cast()),
    );
    let host = |side, base| {
        crate::memory::memoised_copy_base(side, base) == Some(crate::cuda::PointerKind::Host)
    };
    if args.dstbuf.is_null() || args.srcbuf.is_null() || !host(0, dst) || !host(1, src) {
        return false;
    }
    // SAFETY: both are host memory valid for `len` bytes at their offsets (caller's contract);
    // `copy` allows overlap.
    unsafe {
        std::ptr::copy(
            src.add(args.src_off as usize).as_ptr(),
            dst.add(args.dst_off as usize).as_ptr(),
            args.len,
        )
    };
    true
}

/// `MEM_COPY` copies between host and device buffers; other op codes are not understood and fail
/// only when the caller asks for that, as in sec2.
unsafe extern "C" fn gds_ctl(
    file: *mut H5FD_t,
    op_code: u64,
    flags: u64,
    input: *const c_void,
    _output: *mut *mut c_void,
) -> herr_t {
    if op_code == H5FD_CTL_MEM_COPY && !input.is_null() {
        // SAFETY: HDF5 passes an H5FD_ctl_memcpy_args_t for this op code, with both ranges valid
        // for `len` bytes.
        let copied = catch_unwind(|| unsafe { mem_copy_between_known_host_buffers(input.cast()) });
        if matches!(copied, Ok(true)) {
            return 0;
        }
    }
    // Not through `open_file`: `ctl` is no callback boundary (see `memory::callback_boundary`).
    // SAFETY: HDF5 passes an open file of this driver, whose GdsFile is live.
    let hdf5 = (!file.is_null())
        .then(|| unsafe { (*file.cast::<GdsFile>()).hdf5 })
        .flatten();
    guard("gds_ctl", hdf5, -1, || {
        if op_code == H5FD_CTL_MEM_COPY {
            if input.is_null() {
                return Err(Error::InvalidArgument("MEM_COPY without arguments".into()));
            }
            // SAFETY: HDF5 passes an H5FD_ctl_memcpy_args_t for this op code.
            let args = unsafe { &*(input as *const MemcpyArgs) };
            if args.len > 0 && (args.dstbuf.is_null() || args.srcbuf.is_null()) {
                return Err(Error::InvalidArgument("MEM_COPY with a null buffer".into()));
            }
            let dst = (BufPtr::new(args.dstbuf.cast()), args.dst_off as usize);
            let src = (
                BufPtr::from_const(args.srcbuf.cast()),
                args.src_off as usize,
            );
            // SAFETY: HDF5 guarantees both ranges hold `len` bytes.
            unsafe { OpenFile::mem_copy(dst, src, args.len)? };
            return Ok(0);
        }
        if flags & H5FD_CTL_FAIL_IF_UNKNOWN_FLAG != 0 {
            return Err(Error::InvalidArgument(format!(
                "unknown ctl op code {op_code} and the fail-if-unknown flag is set"
            )));
        }
        Ok(0)
    })
}

/// HDF5 is shutting the driver down (H5close, or unregistering): stop the I/O threads so none
/// outlives the driver's use. The library is linked `-z nodelete`, so a thread still finishing
/// never runs unmapped code.
unsafe extern "C" fn gds_terminate() -> herr_t {
    guard("gds_terminate", None, -1, || {
        h5gds_runtime::pool::shutdown();
        Ok(0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    /// Opens a new file through the class, as HDF5 does (no HDF5 here: settings come from the
    /// environment).
    fn open(path: &std::path::Path) -> *mut H5FD_t {
        let name = CString::new(path.to_str().unwrap()).unwrap();
        let flags = H5F_ACC_RDWR | H5F_ACC_CREAT | H5F_ACC_TRUNC;
        // SAFETY: a valid NUL-terminated name; -1 is no property list.
        let file = unsafe { gds_open::<UNBOUND>(name.as_ptr(), flags, -1, MAXADDR) };
        assert!(!file.is_null());
        file
    }

    /// `fapl_get` hands HDF5 the open file's settings to carry, `fapl_copy` copies them and
    /// refuses bytes of another kind, `fapl_free` frees both.
    #[test]
    fn the_class_carries_settings_through_fapl_get_copy_and_free() {
        let dir = tempfile::tempdir().unwrap();
        let f = open(&dir.path().join("f.h5"));
        // SAFETY: f is an open file of this driver; every info is freed once, by fapl_free.
        unsafe {
            let info = gds_fapl_get(f);
            let carried = CarriedSettings::at(info).expect("fapl_get returns carried settings");
            let copy = gds_fapl_copy(info);
            assert_eq!(CarriedSettings::at(copy), Some(carried));
            let foreign = [0u64; 64];
            assert!(gds_fapl_copy(foreign.as_ptr().cast()).is_null());
            assert_eq!(gds_fapl_free(copy), 0);
            assert_eq!(gds_fapl_free(info), 0);
            assert_eq!(gds_close(f), 0);
        }
        assert_eq!(
            UNBOUND_CLASS.0.fapl_size,
            std::mem::size_of::<CarriedSettings>()
        );
    }

    /// HDF5 may pass one file to `cmp` twice and calls `const` callbacks on a file it also
    /// passes mutably: every callback here gets the same pointer while the others' results are
    /// still in use, and the state is only ever borrowed shared (`state` returns `&OpenFile`).
    #[test]
    fn callbacks_share_one_file_through_const_and_mut_pointers() {
        let dir = tempfile::tempdir().unwrap();
        let (f, g) = (
            open(&dir.path().join("f.h5")),
            open(&dir.path().join("g.h5")),
        );
        let data = *b"abcdefgh";
        let mut out = [0u8; 8];
        let mut handle: *mut c_void = std::ptr::null_mut();
        // SAFETY: f and g are open files of this driver until closed at the end; every buffer
        // is a live local of the length passed.
        unsafe {
            assert_eq!(gds_cmp(f, f), 0);
            assert_eq!(gds_set_eoa(f, H5FD_MEM_DRAW, 4096), 0);
            assert_eq!(gds_get_eoa(f, H5FD_MEM_DRAW), 4096);
            assert_eq!(
                gds_io::<*const c_void, true>(f, H5FD_MEM_DRAW, 0, 100, 8, data.as_ptr().cast()),
                0
            );
            assert_eq!(gds_get_eof(f, H5FD_MEM_DRAW), 108);
            assert_eq!(gds_get_handle(f, -1, &mut handle), 0);
            let fd = *handle.cast::<c_int>();
            assert_eq!(
                gds_io::<*mut c_void, false>(f, H5FD_MEM_DRAW, 0, 100, 8, out.as_mut_ptr().cast()),
                0
            );
            assert_eq!(out, data);
            // The handed-out descriptor is the file's: it sees the same bytes.
            let mut direct = [0u8; 8];
            assert_eq!(libc::pread(fd, direct.as_mut_ptr().cast(), 8, 100), 8);
            assert_eq!(direct, data);
            assert_ne!(gds_cmp(f, g), 0);
            assert_eq!(gds_cmp(f, g), -gds_cmp(g, f));
            assert_eq!(gds_cmp(f, f), 0);
            assert_eq!(gds_truncate(f, 0, false), 0);
            assert_eq!(gds_get_eof(f, H5FD_MEM_DRAW), 4096);
            assert_eq!(gds_close(g), 0);
            assert_eq!(gds_close(f), 0);
        }
        assert_eq!(
            std::fs::metadata(dir.path().join("f.h5")).unwrap().len(),
            4096
        );
    }
}
