//! HDF5 calls resolved at run time from the HDF5 libraries already loaded in the process, each
//! bound to the HDF5 copy that called the driver.
//!
//! The plugin links no libhdf5: h5py, netCDF4 and PyTables wheels each load their own HDF5
//! privately under a hashed file name, so a plain-name reference would fail to resolve or reach
//! another HDF5. A process may hold several such copies, each loading this plugin (the loader
//! maps the file once, so one copy of the driver serves them all), and an id of one copy means
//! nothing, or something else, to another. So every HDF5 copy that asks for the driver class gets
//! a class of its own ("binding"): the class's file-less callbacks (`open`, `del`) are distinct
//! functions that know their binding, and each open file remembers it, so every call back into
//! HDF5 (config string, file locking flag, error stack, dataspace selections) goes to the copy
//! that made the request. The copy is recognised by the address of its code: the plugin loader's
//! call of `H5PLget_plugin_info` returns into it, and in-process registration passes a function
//! of it. A caller that cannot be recognised (an HDF5 linked statically without exported symbols,
//! more copies than bindings) gets the unbound class, which needs no HDF5 call: settings from
//! the environment, errors through the log only, selections handed over as vectors.

use crate::abi::{herr_t, hid_t};
use crate::dataspace::SpaceApi;
use crate::error::ErrorClass;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::sync::{Mutex, OnceLock};

type GetDriverConfigStr = unsafe extern "C" fn(fapl: hid_t, buf: *mut c_char, size: usize) -> isize;
type GetFileLocking =
    unsafe extern "C" fn(fapl: hid_t, use_locking: *mut bool, ignore_disabled: *mut bool) -> herr_t;
type IsDriverRegistered = unsafe extern "C" fn(value: std::ffi::c_int) -> crate::abi::htri_t;
type EPush2 = unsafe extern "C" fn(
    stack: hid_t,
    file: *const c_char,
    func: *const c_char,
    line: c_uint,
    cls: hid_t,
    maj: hid_t,
    min: hid_t,
    fmt: *const c_char,
    ...
) -> herr_t;
type FdRegister = unsafe extern "C" fn(class: *const crate::abi::H5FD_class_t) -> hid_t;
type SetDriverByName =
    unsafe extern "C" fn(fapl: hid_t, name: *const c_char, config: *const c_char) -> herr_t;

/// The HDF5 entry points the driver uses, from one loaded HDF5 library.
pub struct Hdf5Library {
    /// Path of the object the symbols came from ("" for the main program).
    pub path: String,
    /// Where the object is loaded (its load bias): tells two objects of one path apart.
    base: usize,
    /// The library's dlopen handle, kept open so its symbols stay valid.
    handle: *mut c_void,
    pub(crate) register: Option<FdRegister>,
    set_driver_by_name: Option<SetDriverByName>,
    get_driver_config_str: GetDriverConfigStr,
    get_file_locking: Option<GetFileLocking>,
    epush2: Option<EPush2>,
    pub(crate) gds_registered: Option<IsDriverRegistered>,
    err_cls: *const hid_t,
    maj_vfl: *const hid_t,
    minors: [*const hid_t; 6],
    /// The H5S calls of the selection callbacks, where this library exports them all.
    pub space: Option<SpaceApi>,
}

// SAFETY: the pointers refer to functions and global variables of a loaded library that is never
// unloaded (its handle is kept open); reading them from any thread is what HDF5 itself does.
unsafe impl Send for Hdf5Library {}
// SAFETY: as above; the struct is immutable after construction.
unsafe impl Sync for Hdf5Library {}

const H5E_DEFAULT: hid_t = 0;

impl Hdf5Library {
    /// The config string stored on a file access property list, if any, as raw bytes.
    pub fn driver_config(&self, fapl: hid_t) -> Option<Vec<u8>> {
        // SAFETY: a null buffer with size 0 asks only for the length, as documented.
        let len = unsafe { (self.get_driver_config_str)(fapl, std::ptr::null_mut(), 0) };
        if len <= 0 {
            return None;
        }
        let mut buf = vec![0u8; len as usize + 1];
        // SAFETY: buf holds len + 1 bytes, room for the string and its terminator.
        let written =
            unsafe { (self.get_driver_config_str)(fapl, buf.as_mut_ptr().cast(), buf.len()) };
        if written <= 0 {
            return None;
        }
        buf.truncate(written as usize);
        Some(buf)
    }

    /// The fapl's "ignore file locking errors when locking is disabled" flag.
    pub fn ignore_disabled_file_locks(&self, fapl: hid_t) -> Option<bool> {
        let get = self.get_file_locking?;
        let (mut use_locking, mut ignore) = (true, true);
        // SAFETY: both out-pointers are valid bools for the duration of the call.
        let status = unsafe { get(fapl, &mut use_locking, &mut ignore) };
        (status >= 0).then_some(ignore)
    }

    /// Pushes one record onto this library's default error stack; whether it was pushed.
    pub fn push_error(&self, func: &str, class: ErrorClass, message: &str) -> bool {
        let Some(push) = self.epush2 else {
            return false;
        };
        let minor = self.minors[match class {
            ErrorClass::BadValue => 0,
            ErrorClass::CantOpen => 1,
            ErrorClass::Read => 2,
            ErrorClass::Write => 3,
            ErrorClass::Overflow => 4,
            ErrorClass::Other => 5,
        }];
        let file = c"h5gds";
        let func = CString::new(func).unwrap_or_default();
        let message = CString::new(message.replace('\0', " ")).unwrap_or_default();
        // SAFETY: the id globals are initialised by HDF5 before any driver callback runs; the
        // format is "%s" with one C string argument.
        let status = unsafe {
            push(
                H5E_DEFAULT,
                file.as_ptr(),
                func.as_ptr(),
                0,
                *self.err_cls,
                *self.maj_vfl,
                *minor,
                c"%s".as_ptr(),
                message.as_ptr(),
            )
        };
        status >= 0
    }

    /// A symbol of this library.
    pub(crate) fn symbol(&self, name: &CStr) -> Option<*mut c_void> {
        // SAFETY: a lookup in the library's open handle has no side effects.
        let p = unsafe { libc::dlsym(self.handle, name.as_ptr()) };
        (!p.is_null()).then_some(p)
    }
}

/// One object loaded in the process, as the dynamic loader reports it.
struct LoadedObject {
    /// Its path ("" for the main program).
    name: CString,
    /// Its load bias.
    base: usize,
    /// The address ranges of its loaded segments.
    segments: Vec<std::ops::Range<usize>>,
}

impl LoadedObject {
    fn contains(&self, addr: usize) -> bool {
        self.segments.iter().any(|s| s.contains(&addr))
    }
}

/// Every object loaded in the process.
fn loaded_objects() -> Vec<LoadedObject> {
    unsafe extern "C" fn collect(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: `data` is the Vec passed below; `info` and its program headers are valid for
        // the callback's duration, and a non-null name is a NUL-terminated string.
        unsafe {
            let objects = &mut *(data as *mut Vec<LoadedObject>);
            let info = &*info;
            if info.dlpi_name.is_null() {
                return 0;
            }
            let base = info.dlpi_addr as usize;
            let headers = if info.dlpi_phdr.is_null() {
                &[][..]
            } else {
                std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize)
            };
            let segments = headers
                .iter()
                .filter(|h| h.p_type == libc::PT_LOAD)
                .map(|h| {
                    let start = base.wrapping_add(h.p_vaddr as usize);
                    start..start.wrapping_add(h.p_memsz as usize)
                })
                .collect();
            objects.push(LoadedObject {
                name: CStr::from_ptr(info.dlpi_name).to_owned(),
                base,
                segments,
            });
        }
        0
    }
    let mut objects: Vec<LoadedObject> = Vec::new();
    // SAFETY: the callback only reads `info` and appends to `objects`.
    unsafe {
        libc::dl_iterate_phdr(
            Some(collect),
            (&mut objects as *mut Vec<LoadedObject>).cast(),
        )
    };
    objects
}

/// The loaded object whose code or data is at `addr`.
fn object_containing(addr: usize) -> Option<LoadedObject> {
    loaded_objects().into_iter().find(|o| o.contains(addr))
}

/// `symbol` where `object` (opened as `handle`) defines it itself: a handle's lookup also searches
/// the object's dependencies, whose definitions are not the object's.
fn own_symbol(object: &LoadedObject, handle: *mut c_void, symbol: &CStr) -> Option<*mut c_void> {
    // SAFETY: looking a name up in a valid handle has no side effects.
    let p = unsafe { libc::dlsym(handle, symbol.as_ptr()) };
    (!p.is_null() && object.contains(p as usize)).then_some(p)
}

/// The dlopen handle of a loaded object (`RTLD_NOLOAD`: never loads anything); null if none.
fn handle_of(object: &LoadedObject) -> *mut c_void {
    let path_ptr = if object.name.to_bytes().is_empty() {
        std::ptr::null()
    } else {
        object.name.as_ptr()
    };
    // SAFETY: RTLD_NOLOAD only returns a handle to an already loaded object; nothing new runs.
    unsafe { libc::dlopen(path_ptr, libc::RTLD_LAZY | libc::RTLD_NOLOAD) }
}

/// The file of the loaded object whose code or data is at `addr` ("" for the main program).
pub fn loaded_file_of(addr: *const c_void) -> Option<String> {
    object_containing(addr as usize).map(|o| o.name.to_string_lossy().into_owned())
}

/// The loaded object whose code is at `addr`: its file (for messages), and whether it defines
/// `symbol` itself. None where no loaded object holds `addr`.
pub(crate) fn object_defining(addr: usize, symbol: &CStr) -> Option<(String, bool)> {
    let object = object_containing(addr)?;
    let name = match object.name.to_string_lossy() {
        n if n.is_empty() => "the main program".to_string(),
        n => n.into_owned(),
    };
    let handle = handle_of(&object);
    if handle.is_null() {
        return Some((name, false));
    }
    let defines = own_symbol(&object, handle, symbol).is_some();
    // SAFETY: balances the dlopen in `handle_of`; the object stays loaded by its owner.
    unsafe { libc::dlclose(handle) };
    Some((name, defines))
}

/// The HDF5 API of one loaded object, if it is an HDF5 library itself: it defines
/// `H5Pget_driver_config_str` (an object that merely links one, such as an extension module, is
/// not one). The returned library holds a dlopen handle of the object.
fn open_library(object: &LoadedObject) -> Option<Hdf5Library> {
    let handle = handle_of(object);
    if handle.is_null() {
        return None;
    }
    let sym = |symbol: &CStr| own_symbol(object, handle, symbol);
    let Some(config_fn) = sym(c"H5Pget_driver_config_str") else {
        // SAFETY: balances the dlopen above; the object stays loaded by its owner.
        unsafe { libc::dlclose(handle) };
        return None;
    };
    let ids = [
        sym(c"H5E_ERR_CLS_g"),
        sym(c"H5E_VFL_g"),
        sym(c"H5E_BADVALUE_g"),
        sym(c"H5E_CANTOPENFILE_g"),
        sym(c"H5E_READERROR_g"),
        sym(c"H5E_WRITEERROR_g"),
        sym(c"H5E_OVERFLOW_g"),
        sym(c"H5E_SYSERRSTR_g"),
    ];
    let epush = sym(c"H5Epush2").filter(|_| ids.iter().all(Option::is_some));
    let id = |i: usize| ids[i].map_or(std::ptr::null(), |p| p as *const hid_t);
    let space = SpaceApi::resolve(|name| sym(name));
    // SAFETY: the symbols have the C signatures declared above (HDF5 1.14 and 2.x).
    let library = unsafe {
        Hdf5Library {
            path: object.name.to_string_lossy().into_owned(),
            base: object.base,
            handle,
            register: sym(c"H5FDregister")
                .map(|p| std::mem::transmute::<*mut c_void, FdRegister>(p)),
            set_driver_by_name: sym(c"H5Pset_driver_by_name")
                .map(|p| std::mem::transmute::<*mut c_void, SetDriverByName>(p)),
            get_driver_config_str: std::mem::transmute::<*mut c_void, GetDriverConfigStr>(
                config_fn,
            ),
            get_file_locking: sym(c"H5Pget_file_locking")
                .map(|p| std::mem::transmute::<*mut c_void, GetFileLocking>(p)),
            epush2: epush.map(|p| std::mem::transmute::<*mut c_void, EPush2>(p)),
            gds_registered: sym(c"H5FDis_driver_registered_by_value")
                .map(|p| std::mem::transmute::<*mut c_void, IsDriverRegistered>(p)),
            err_cls: id(0),
            maj_vfl: id(1),
            minors: [id(2), id(3), id(4), id(5), id(6), id(7)],
            space,
        }
    };
    Some(library)
}

/// Paths of the HDF5 libraries loaded in the process ("" is the main program): objects that
/// define HDF5's API themselves, not every object that links it.
fn loaded_hdf5_libraries() -> Vec<String> {
    loaded_objects()
        .iter()
        .filter_map(|object| {
            let library = open_library(object)?;
            // SAFETY: balances the dlopen in `open_library`; the object stays loaded by its owner.
            unsafe { libc::dlclose(library.handle) };
            Some(library.path)
        })
        .collect()
}

/// How many HDF5 copies one copy of the driver can tell apart; a further one gets the unbound
/// class. Processes seen hold up to three (h5py's, netCDF4's, PyTables').
pub const BINDINGS: usize = 8;

/// The library each binding talks to, set once (under `BINDING_LOCK`) and never changed.
static BOUND: [OnceLock<Hdf5Library>; BINDINGS] = [const { OnceLock::new() }; BINDINGS];
static BINDING_LOCK: Mutex<()> = Mutex::new(());

/// The HDF5 library of binding `slot`, once bound.
pub fn bound_library(slot: usize) -> Option<&'static Hdf5Library> {
    BOUND.get(slot)?.get()
}

/// The binding of the HDF5 library whose code is at `addr` (for example the return address of
/// the plugin loader's call), bound now if it is the first request from that library. None where
/// the object at `addr` is not an HDF5 library with exported symbols, or every binding is taken.
pub fn bind_code(addr: usize) -> Option<usize> {
    let object = object_containing(addr)?;
    let slot = bind_object(&object);
    match slot {
        Some(slot) => tracing::debug!(
            "HDF5 library {:?} calls the driver through binding {slot} ({} HDF5 libraries loaded)",
            object.name,
            loaded_hdf5_libraries().len()
        ),
        None => tracing::debug!(
            "the code at {addr:#x} ({:?}) is no HDF5 library the driver can call back, or every \
             binding is taken: it gets the class that makes no HDF5 call",
            object.name
        ),
    }
    slot
}

/// The binding of a loaded object, bound now if new.
fn bind_object(object: &LoadedObject) -> Option<usize> {
    let _serial = BINDING_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let same =
        |l: &Hdf5Library| l.base == object.base && l.path.as_bytes() == object.name.to_bytes();
    if let Some(slot) = BOUND.iter().position(|b| b.get().is_some_and(same)) {
        return Some(slot);
    }
    let slot = BOUND.iter().position(|b| b.get().is_none())?;
    let library = open_library(object)?;
    // Under the lock, the free slot stays free until set here.
    let _ = BOUND[slot].set(library);
    Some(slot)
}

/// The binding whose library the Python extension registered its class into (it makes its own
/// calls into that library: `hdf5_symbol`, `set_fapl_driver`).
static PRIMARY: OnceLock<usize> = OnceLock::new();

fn primary() -> Option<&'static Hdf5Library> {
    bound_library(*PRIMARY.get()?)
}

/// The HDF5 library that a loaded object (`near`, for example one of h5py's extension modules)
/// resolves HDF5 symbols to.
fn hdf5_object_of(near: &CStr) -> Result<LoadedObject, String> {
    let shown = near.to_string_lossy();
    // SAFETY: RTLD_NOLOAD only returns a handle to an already loaded object; nothing new runs.
    let handle = unsafe { libc::dlopen(near.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        return Err(format!("{shown} is not loaded in this process"));
    }
    // A handle's lookup searches the object and its dependencies: the HDF5 it was linked with.
    // SAFETY: a lookup in a valid handle.
    let symbol = unsafe { libc::dlsym(handle, c"H5Pget_driver_config_str".as_ptr()) };
    // SAFETY: balances the dlopen above; the object stays loaded by its owner, and so does the
    // library the symbol belongs to.
    unsafe { libc::dlclose(handle) };
    if symbol.is_null() {
        return Err(format!(
            "{shown} uses no HDF5 1.14+ library (no H5Pget_driver_config_str)"
        ));
    }
    object_containing(symbol as usize)
        .ok_or_else(|| format!("the HDF5 library {shown} uses is not among the loaded objects"))
}

/// Binds the HDF5 library that `near` (a loaded object, such as one of h5py's extension modules)
/// is linked with, and makes it the primary one, which [`hdf5_symbol`] and [`set_fapl_driver`]
/// call: its binding slot and library. A second, different primary library is refused.
pub(crate) fn bind_primary(near: &CStr) -> Result<(usize, &'static Hdf5Library), String> {
    let object = hdf5_object_of(near)?;
    let shown = object.name.to_string_lossy().into_owned();
    let slot = bind_object(&object).ok_or_else(|| {
        format!("{shown} exports no HDF5 1.14+ API, or this process holds more than {BINDINGS} HDF5 libraries")
    })?;
    let chosen = *PRIMARY.get_or_init(|| slot);
    let api = bound_library(slot).ok_or("binding without a library")?;
    if chosen != slot {
        let previous = primary().map_or("", |l| l.path.as_str());
        return Err(format!(
            "the gds driver already works with the HDF5 library {previous}, not {shown}"
        ));
    }
    Ok((slot, api))
}

/// Selects the `gds` driver on a file access property list with a config string
/// (`H5Pset_driver_by_name`), in the HDF5 library `register_in_loaded_hdf5` registered into.
/// The string is passed as given; an empty one stores none, so the environment's settings apply.
pub fn set_fapl_driver(fapl: hid_t, config: &str) -> Result<(), String> {
    let api = primary().ok_or("the gds driver is not registered in any HDF5 library yet")?;
    let set = api.set_driver_by_name.ok_or_else(|| {
        format!(
            "{} has no H5Pset_driver_by_name (HDF5 1.14+ needed)",
            api.path
        )
    })?;
    let config = CString::new(config)
        .map_err(|_| "the gds config string contains a NUL byte".to_string())?;
    let config_ptr = if config.as_bytes().is_empty() {
        std::ptr::null()
    } else {
        config.as_ptr()
    };
    // SAFETY: valid C strings for the call's duration; HDF5 checks the fapl id itself.
    let status = unsafe { set(fapl, crate::abi::DRIVER_NAME.as_ptr(), config_ptr) };
    if status < 0 {
        return Err(format!(
            "H5Pset_driver_by_name(fapl {fapl}, \"gds\") failed in {}",
            api.path
        ));
    }
    Ok(())
}

/// A symbol of the HDF5 library `register_in_loaded_hdf5` registered into (for callers that
/// make their own HDF5 calls into the same library, such as the Python extension's H5Dread).
pub fn hdf5_symbol(name: &CStr) -> Option<*mut c_void> {
    primary()?.symbol(name)
}

/// Path of the HDF5 library `register_in_loaded_hdf5` registered into ("" for the main
/// program); None before that.
pub fn hdf5_library() -> Option<&'static str> {
    primary().map(|api| api.path.as_str())
}

/// The return address into the code that called this library's entry point now running: the
/// first frame, walking up the stack, outside the object holding this code. Only this library's
/// own unwind tables are needed to get there.
pub fn calling_code() -> Option<usize> {
    // A private static, addressed directly: an exported function's address could be another
    // object's copy that interposes it (a program linking the driver's crate and exporting its
    // symbols, as the test programs do).
    static HERE: u8 = 0;
    let own = object_containing(std::ptr::addr_of!(HERE) as usize)?;
    let (mut inside, mut caller) = (false, None);
    backtrace::trace(|frame| {
        let ip = frame.ip() as usize;
        if own.contains(ip) {
            inside = true;
            true
        } else if inside {
            caller = Some(ip);
            false
        } else {
            true
        }
    });
    caller
}
