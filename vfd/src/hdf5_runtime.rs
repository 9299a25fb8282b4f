//! HDF5 calls resolved at run time from the HDF5 library already loaded in the process.
//!
//! The plugin links no libhdf5: h5py and other wheels load their own HDF5 privately under a hashed
//! file name, so a plain-name reference would fail to resolve or reach a second HDF5. Instead the
//! loaded objects are walked (`dl_iterate_phdr`) and the first one that defines
//! `H5Pget_driver_config_str` is used (where several are loaded, the one with this driver
//! registered). When none does (for example a statically linked HDF5 whose
//! symbols are not exported), the driver still works: it reads `HDF5_DRIVER_CONFIG` itself and
//! reports errors only through the log.

use crate::abi::{herr_t, hid_t};
use crate::error::ErrorClass;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::sync::OnceLock;

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
pub struct Hdf5Api {
    /// Path of the object the symbols came from ("" for the main program).
    pub library: String,
    /// The library's dlopen handle, kept open so its symbols stay valid.
    handle: *mut c_void,
    register: Option<FdRegister>,
    set_driver_by_name: Option<SetDriverByName>,
    get_driver_config_str: GetDriverConfigStr,
    get_file_locking: Option<GetFileLocking>,
    epush2: Option<EPush2>,
    gds_registered: Option<IsDriverRegistered>,
    /// HDF5's "library initialised" flag, where exported.
    libinit: *const bool,
    err_cls: *const hid_t,
    maj_vfl: *const hid_t,
    minors: [*const hid_t; 6],
}

// SAFETY: the pointers refer to functions and global variables of a loaded library that is never
// unloaded while HDF5 uses this driver; reading them from any thread is what HDF5 itself does.
unsafe impl Send for Hdf5Api {}
// SAFETY: as above; the struct is immutable after construction.
unsafe impl Sync for Hdf5Api {}

const H5E_DEFAULT: hid_t = 0;

/// The HDF5 library this copy of the driver works with, chosen once.
static API: OnceLock<Option<Hdf5Api>> = OnceLock::new();

/// The HDF5 library of this process, looked up once.
pub fn api() -> Option<&'static Hdf5Api> {
    API.get_or_init(|| find_hdf5(None)).as_ref()
}

impl Hdf5Api {
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

    /// Pushes one record onto HDF5's default error stack.
    pub fn push_error(&self, func: &str, class: ErrorClass, message: &str) {
        let Some(push) = self.epush2 else { return };
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
        unsafe {
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
            );
        }
    }
}

/// Names of the loaded objects that are HDF5 libraries this module would consider (as `api`
/// does), without choosing one.
pub fn loaded_hdf5_libraries() -> Vec<String> {
    loaded_objects()
        .iter()
        .filter_map(|name| {
            let (api, handle) = candidate(name)?;
            // SAFETY: balances the dlopen in `candidate`; the object stays loaded by its owner.
            unsafe { libc::dlclose(handle) };
            Some(api.library)
        })
        .collect()
}

/// Names of every object loaded in the process ("" is the main program).
fn loaded_objects() -> Vec<CString> {
    unsafe extern "C" fn collect(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: `data` is the Vec passed below; `info` is valid for the callback's duration,
        // and a non-null name is a NUL-terminated string.
        unsafe {
            let names = &mut *(data as *mut Vec<CString>);
            let name = (*info).dlpi_name;
            if !name.is_null() {
                names.push(CStr::from_ptr(name).to_owned());
            }
        }
        0
    }
    let mut names: Vec<CString> = Vec::new();
    // SAFETY: the callback only reads `info` and appends to `names`.
    unsafe { libc::dl_iterate_phdr(Some(collect), (&mut names as *mut Vec<CString>).cast()) };
    names
}

/// The HDF5 API of one loaded object, if it is an HDF5 library; with its dlopen handle.
fn candidate(name: &CStr) -> Option<(Hdf5Api, *mut c_void)> {
    let path_ptr = if name.to_bytes().is_empty() {
        std::ptr::null()
    } else {
        name.as_ptr()
    };
    // SAFETY: RTLD_NOLOAD only returns a handle to an already loaded object; nothing new runs.
    let handle = unsafe { libc::dlopen(path_ptr, libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        return None;
    }
    let sym = |symbol: &CStr| {
        // SAFETY: looking a name up in a valid handle has no side effects.
        let p = unsafe { libc::dlsym(handle, symbol.as_ptr()) };
        (!p.is_null()).then_some(p)
    };
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
    // SAFETY: the symbols have the C signatures declared above (HDF5 1.14 and 2.x).
    let api = unsafe {
        Hdf5Api {
            library: name.to_string_lossy().into_owned(),
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
            libinit: sym(c"H5_libinit_g").map_or(std::ptr::null(), |p| p as *const bool),
            gds_registered: sym(c"H5FDis_driver_registered_by_value")
                .map(|p| std::mem::transmute::<*mut c_void, IsDriverRegistered>(p)),
            err_cls: id(0),
            maj_vfl: id(1),
            minors: [id(2), id(3), id(4), id(5), id(6), id(7)],
        }
    };
    Some((api, handle))
}

/// The loaded HDF5 library. Processes can hold several (h5py, netCDF4 and PyTables wheels each
/// bring their own): then the one `preferred` names (a library path) is chosen, else the one that
/// has this driver registered, as it is the one calling it.
fn find_hdf5(preferred: Option<&CStr>) -> Option<Hdf5Api> {
    let mut found: Vec<(Hdf5Api, *mut c_void)> = loaded_objects()
        .iter()
        .filter_map(|n| candidate(n))
        .collect();
    if found.len() > 1 {
        // Only an initialised library can be the caller, and asking an uninitialised one
        // anything would initialise it (and make it load this plugin too).
        // SAFETY: reading a bool global of a loaded library.
        let initialised = |api: &Hdf5Api| api.libinit.is_null() || unsafe { *api.libinit };
        let registered = |api: &Hdf5Api| {
            // SAFETY: a plain query of an initialised library's driver table.
            initialised(api)
                && api
                    .gds_registered
                    .is_some_and(|f| unsafe { f(crate::abi::DRIVER_VALUE) } > 0)
        };
        let wanted = |api: &Hdf5Api| {
            preferred.is_some_and(|p| same_object(api.library.as_bytes(), p.to_bytes()))
        };
        if let Some(i) = found
            .iter()
            .position(|(api, _)| wanted(api))
            .or_else(|| found.iter().position(|(api, _)| registered(api)))
        {
            found.swap(0, i);
        }
        tracing::debug!(
            "{} HDF5 libraries loaded; using {:?}",
            found.len(),
            found.first().map(|(api, _)| api.library.as_str())
        );
    }
    let mut found = found.into_iter();
    let chosen = found.next().map(|(api, _)| api); // its handle stays open: the symbols must stay valid
    for (_, handle) in found {
        // SAFETY: balances the dlopen in `candidate`; the object stays loaded by its owner.
        unsafe { libc::dlclose(handle) };
    }
    chosen
}

/// Whether two paths name the same loaded object (the loader may report a path unresolved).
fn same_object(a: &[u8], b: &[u8]) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let canonical = |p: &[u8]| std::fs::canonicalize(std::ffi::OsStr::from_bytes(p)).ok();
    a == b || (canonical(a).is_some() && canonical(a) == canonical(b))
}

/// The HDF5 library that a loaded object (`near`, for example one of h5py's extension modules)
/// resolves HDF5 symbols to: the file name of that library.
fn hdf5_library_of(near: &CStr) -> Result<CString, String> {
    let shown = near.to_string_lossy();
    // SAFETY: RTLD_NOLOAD only returns a handle to an already loaded object; nothing new runs.
    let handle = unsafe { libc::dlopen(near.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        return Err(format!("{shown} is not loaded in this process"));
    }
    // A handle's lookup searches the object and its dependencies: the HDF5 it was linked with.
    // SAFETY: a lookup in a valid handle.
    let symbol = unsafe { libc::dlsym(handle, c"H5Pget_driver_config_str".as_ptr()) };
    // SAFETY: Dl_info is pointers and integers, for which all zeros is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only looks the address up; `info` is a valid out-pointer.
    let found = !symbol.is_null()
        && unsafe { libc::dladdr(symbol, &mut info) } != 0
        && !info.dli_fname.is_null();
    // SAFETY: dli_fname names a loaded object; copied before the handle is released.
    let library = found.then(|| unsafe { CStr::from_ptr(info.dli_fname) }.to_owned());
    // SAFETY: balances the dlopen above; the object stays loaded by its owner.
    unsafe { libc::dlclose(handle) };
    library
        .ok_or_else(|| format!("{shown} uses no HDF5 1.14+ library (no H5Pget_driver_config_str)"))
}

/// How [`register_in_loaded_hdf5`] found the driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Registration {
    /// This copy of the driver was registered now; HDF5's id for it.
    Registered(hid_t),
    /// h5gds's driver was already registered there (for example the plugin, loaded through
    /// `HDF5_PLUGIN_PATH` and `HDF5_DRIVER=gds`); it is left in place and serves `gds`.
    AlreadyRegistered,
    /// Another driver holds the name `gds` and value 512 there (vfd-gds, the GPUDirect Storage
    /// driver other projects ship), from the library named; h5gds could not register.
    Another(String),
}

/// Registers this copy of the driver (`H5FDregister`) in an HDF5 library already loaded in the
/// process: the one `near` (a loaded object, such as one of h5py's extension modules) is linked
/// with, else the one [`api`] picks. That library becomes the one this copy of the driver calls.
/// The caller must hold whatever lock serialises calls into that HDF5 (h5py's `phil`).
pub fn register_in_loaded_hdf5(near: Option<&CStr>) -> Result<Registration, String> {
    let preferred = near.map(hdf5_library_of).transpose()?;
    let api = API
        .get_or_init(|| find_hdf5(preferred.as_deref()))
        .as_ref()
        .ok_or("no HDF5 library with exported symbols is loaded in this process")?;
    if let Some(wanted) = &preferred {
        if !same_object(api.library.as_bytes(), wanted.to_bytes()) {
            return Err(format!(
                "the gds driver already works with the HDF5 library {}, not {}",
                api.library,
                wanted.to_string_lossy()
            ));
        }
    }
    let missing = |name: &str| format!("{} has no {name} (HDF5 1.14+ needed)", api.library);
    let is_registered = api
        .gds_registered
        .ok_or_else(|| missing("H5FDis_driver_registered_by_value"))?;
    let register = api.register.ok_or_else(|| missing("H5FDregister"))?;
    // SAFETY: a plain query of the driver table.
    match unsafe { is_registered(crate::abi::DRIVER_VALUE) } {
        n if n > 0 => {
            // SAFETY: HDF5's copy of a registered class.
            let ours =
                registered_gds_class(api).map(|c| unsafe { crate::plugin::h5gds_library(c) });
            return Ok(match ours {
                Some(Err(library)) => Registration::Another(library),
                // Ours, or no way to look (an HDF5 without the symbols): it stays in place.
                _ => Registration::AlreadyRegistered,
            });
        }
        n if n < 0 => {
            return Err(format!(
                "{}: H5FDis_driver_registered_by_value failed",
                api.library
            ))
        }
        _ => {}
    }
    // SAFETY: the class is a static of HDF5 1.14.4+/2.x's H5FD_class_t layout; HDF5 copies it.
    let id = unsafe { register(crate::plugin::class()) };
    if id < 0 {
        return Err(format!(
            "{}: H5FDregister refused the gds driver",
            api.library
        ));
    }
    Ok(Registration::Registered(id))
}

/// HDF5's copy of the class registered as value 512, found through a scratch file access list
/// (HDF5 has no public lookup of a class by value).
fn registered_gds_class(api: &Hdf5Api) -> Option<*const crate::abi::H5FD_class_t> {
    let sym = |name: &CStr| {
        // SAFETY: a lookup in the library's open handle.
        let p = unsafe { libc::dlsym(api.handle, name.as_ptr()) };
        (!p.is_null()).then_some(p)
    };
    let fapl_class = sym(c"H5P_CLS_FILE_ACCESS_ID_g")? as *const hid_t;
    // SAFETY: the symbols have these C signatures in HDF5 1.14 and 2.x (H5FD_get_class is
    // library-private but exported by every shared build).
    let (create, set_by_value, get_driver, get_class, close) = unsafe {
        (
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn(hid_t) -> hid_t>(sym(
                c"H5Pcreate",
            )?),
            std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(hid_t, c_int, *const c_char) -> herr_t,
            >(sym(c"H5Pset_driver_by_value")?),
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn(hid_t) -> hid_t>(sym(
                c"H5Pget_driver",
            )?),
            std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(hid_t) -> *const crate::abi::H5FD_class_t,
            >(sym(c"H5FD_get_class")?),
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn(hid_t) -> herr_t>(sym(
                c"H5Pclose",
            )?),
        )
    };
    // SAFETY: the library is initialised (the driver is registered in it), so the class id
    // global holds the file access class; the list is closed before returning.
    unsafe {
        let fapl = create(*fapl_class);
        if fapl < 0 {
            return None;
        }
        let class = if set_by_value(fapl, crate::abi::DRIVER_VALUE, std::ptr::null()) >= 0 {
            let id = get_driver(fapl);
            (id >= 0).then(|| get_class(id)).filter(|c| !c.is_null())
        } else {
            None
        };
        close(fapl);
        class
    }
}

/// Selects the `gds` driver on a file access property list with a config string
/// (`H5Pset_driver_by_name`), in the HDF5 library [`register_in_loaded_hdf5`] chose. The string is
/// passed as given; an empty one stores none, so the environment's settings apply.
pub fn set_fapl_driver(fapl: hid_t, config: &str) -> Result<(), String> {
    let api = api().ok_or("no HDF5 library with exported symbols is loaded in this process")?;
    let set = api.set_driver_by_name.ok_or_else(|| {
        format!(
            "{} has no H5Pset_driver_by_name (HDF5 1.14+ needed)",
            api.library
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
            api.library
        ));
    }
    Ok(())
}

/// A symbol of the HDF5 library this copy of the driver works with (for callers that make their
/// own HDF5 calls into the same library, such as the Python extension's H5Dread).
pub fn hdf5_symbol(name: &CStr) -> Option<*mut c_void> {
    let api = api()?;
    // SAFETY: a lookup in the library's open handle.
    let p = unsafe { libc::dlsym(api.handle, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

/// Path of the HDF5 library this copy of the driver works with ("" for the main program), once
/// chosen (by [`register_in_loaded_hdf5`] or the first callback); None where none is loaded.
pub fn hdf5_library() -> Option<&'static str> {
    api().map(|api| api.library.as_str())
}
