//! One loaded HDF5 library's entry points, looked up in that object itself.

use super::objects::{loaded_objects, LoadedObject};
use super::space::SpaceApi;
use super::{herr_t, hid_t, htri_t, ErrorClass};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};

type GetDriverConfigStr = unsafe extern "C" fn(fapl: hid_t, buf: *mut c_char, size: usize) -> isize;
type GetFileLocking =
    unsafe extern "C" fn(fapl: hid_t, use_locking: *mut bool, ignore_disabled: *mut bool) -> herr_t;
type IsDriverRegistered = unsafe extern "C" fn(value: c_int) -> htri_t;
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
/// `H5FDregister`; the class is an `H5FD_class_t`, whose layout the driver's `abi` owns.
type FdRegister = unsafe extern "C" fn(class: *const c_void) -> hid_t;
type SetDriverByName =
    unsafe extern "C" fn(fapl: hid_t, name: *const c_char, config: *const c_char) -> herr_t;

/// The HDF5 entry points the driver and the Python extension use, from one loaded HDF5 library.
pub struct Hdf5Library {
    /// Path of the object the symbols came from ("" for the main program).
    pub path: String,
    /// Where the object is loaded (its load bias): tells two objects of one path apart.
    pub(crate) base: usize,
    /// The library's dlopen handle, kept open so its symbols stay valid.
    handle: *mut c_void,
    register: Option<FdRegister>,
    set_driver_by_name: Option<SetDriverByName>,
    get_driver_config_str: GetDriverConfigStr,
    get_file_locking: Option<GetFileLocking>,
    epush2: Option<EPush2>,
    is_driver_registered: Option<IsDriverRegistered>,
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

    /// Whether a driver of class value `value` is registered (`H5FDis_driver_registered_by_value`).
    pub fn driver_registered(&self, value: c_int) -> Result<bool, String> {
        let query = self
            .is_driver_registered
            .ok_or_else(|| self.missing("H5FDis_driver_registered_by_value"))?;
        // SAFETY: a plain query of the driver table.
        match unsafe { query(value) } {
            n if n < 0 => Err(format!(
                "{}: H5FDis_driver_registered_by_value failed",
                self.path
            )),
            n => Ok(n > 0),
        }
    }

    /// Registers the class of the driver `name` (`H5FDregister`); HDF5's id for it.
    ///
    /// # Safety
    /// `class` must point to an `H5FD_class_t` of this library's layout (HDF5 copies it).
    pub unsafe fn register_class(
        &self,
        class: *const c_void,
        name: &CStr,
    ) -> Result<hid_t, String> {
        let register = self.register.ok_or_else(|| self.missing("H5FDregister"))?;
        // SAFETY: the caller passes a class of the layout HDF5 expects.
        let id = unsafe { register(class) };
        if id < 0 {
            let name = name.to_string_lossy();
            return Err(format!(
                "{}: H5FDregister refused the {name} driver",
                self.path
            ));
        }
        Ok(id)
    }

    /// Selects the driver `name` on a file access property list with a config string
    /// (`H5Pset_driver_by_name`). The string is passed as given; an empty one stores none.
    pub fn set_driver_by_name(&self, fapl: hid_t, name: &CStr, config: &str) -> Result<(), String> {
        let set = self
            .set_driver_by_name
            .ok_or_else(|| self.missing("H5Pset_driver_by_name"))?;
        let config = CString::new(config).map_err(|_| {
            format!(
                "the {} config string contains a NUL byte",
                name.to_string_lossy()
            )
        })?;
        let config_ptr = if config.as_bytes().is_empty() {
            std::ptr::null()
        } else {
            config.as_ptr()
        };
        // SAFETY: valid C strings for the call's duration; HDF5 checks the fapl id itself.
        let status = unsafe { set(fapl, name.as_ptr(), config_ptr) };
        if status < 0 {
            return Err(format!(
                "H5Pset_driver_by_name(fapl {fapl}, {name:?}) failed in {}",
                self.path
            ));
        }
        Ok(())
    }

    /// A symbol of this library.
    pub fn symbol(&self, name: &CStr) -> Option<*mut c_void> {
        // SAFETY: a lookup in the library's open handle has no side effects.
        let p = unsafe { libc::dlsym(self.handle, name.as_ptr()) };
        (!p.is_null()).then_some(p)
    }

    fn missing(&self, name: &str) -> String {
        format!("{} has no {name} (HDF5 1.14+ needed)", self.path)
    }

    /// The HDF5 API of one loaded object, if it is an HDF5 library itself: it defines
    /// `H5Pget_driver_config_str` (an object that merely links one, such as an extension module,
    /// is not one). The returned library holds a dlopen handle of the object.
    pub(crate) fn open(object: &LoadedObject) -> Option<Hdf5Library> {
        let handle = object.handle();
        if handle.is_null() {
            return None;
        }
        let sym = |symbol: &CStr| object.own_symbol(handle, symbol);
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
                is_driver_registered: sym(c"H5FDis_driver_registered_by_value")
                    .map(|p| std::mem::transmute::<*mut c_void, IsDriverRegistered>(p)),
                err_cls: id(0),
                maj_vfl: id(1),
                minors: [id(2), id(3), id(4), id(5), id(6), id(7)],
                space,
            }
        };
        Some(library)
    }
}

/// Paths of the HDF5 libraries loaded in the process ("" is the main program): objects that
/// define HDF5's API themselves, not every object that links it.
pub(crate) fn loaded_hdf5_libraries() -> Vec<String> {
    loaded_hdf5_objects()
        .into_iter()
        .map(|object| object.name.to_string_lossy().into_owned())
        .collect()
}

/// The loaded objects that are HDF5 libraries (see `loaded_hdf5_libraries`).
pub(crate) fn loaded_hdf5_objects() -> Vec<LoadedObject> {
    loaded_objects()
        .into_iter()
        .filter(|object| {
            let Some(library) = Hdf5Library::open(object) else {
                return false;
            };
            // SAFETY: balances the dlopen in `open`; the object stays loaded by its owner.
            unsafe { libc::dlclose(library.handle) };
            true
        })
        .collect()
}
