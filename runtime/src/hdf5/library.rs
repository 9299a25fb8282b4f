//! One loaded HDF5 library: its function table, looked up in that object itself, and the calls
//! the driver makes through it.

use super::api::{Hdf5Api, MissingSymbol};
use super::objects::{loaded_objects, LoadedObject};
use super::{hid_t, ErrorClass};
use std::ffi::{c_int, c_void, CStr, CString};

/// One loaded HDF5 library: where it is, and its functions.
pub struct Hdf5Library {
    /// Path of the object the symbols came from ("" for the main program).
    pub path: String,
    /// Where the object is loaded (its load bias): tells two objects of one path apart.
    pub(crate) base: usize,
    /// The library's dlopen handle, held open (never read) so that its symbols stay valid.
    #[allow(dead_code)]
    handle: *mut c_void,
    /// Every HDF5 function h5gds calls, from this library.
    pub api: Hdf5Api,
}

// SAFETY: the handle refers to a loaded library that is never unloaded (it is kept open), and the
// table is Send and Sync; nothing here is mutated after construction.
unsafe impl Send for Hdf5Library {}
// SAFETY: as above.
unsafe impl Sync for Hdf5Library {}

const H5E_DEFAULT: hid_t = 0;

impl Hdf5Library {
    /// The config string stored on a file access property list, if any, as raw bytes.
    pub fn driver_config(&self, fapl: hid_t) -> Option<Vec<u8>> {
        let get = self.api.H5Pget_driver_config_str.ok()?;
        // SAFETY: a null buffer with size 0 asks only for the length, as documented.
        let len = unsafe { get(fapl, std::ptr::null_mut(), 0) };
        if len <= 0 {
            return None;
        }
        let mut buf = vec![0u8; len as usize + 1];
        // SAFETY: buf holds len + 1 bytes, room for the string and its terminator.
        let written = unsafe { get(fapl, buf.as_mut_ptr().cast(), buf.len()) };
        if written <= 0 {
            return None;
        }
        buf.truncate(written as usize);
        Some(buf)
    }

    /// The fapl's "ignore file locking errors when locking is disabled" flag.
    pub fn ignore_disabled_file_locks(&self, fapl: hid_t) -> Option<bool> {
        let get = self.api.H5Pget_file_locking.ok()?;
        let (mut use_locking, mut ignore) = (true, true);
        // SAFETY: both out-pointers are valid bools for the duration of the call.
        let status = unsafe { get(fapl, &mut use_locking, &mut ignore) };
        (status >= 0).then_some(ignore)
    }

    /// Pushes one record onto this library's default error stack; whether it was pushed.
    pub fn push_error(&self, func: &str, class: ErrorClass, message: &str) -> bool {
        let api = &self.api;
        let minor = match class {
            ErrorClass::BadValue => api.H5E_BADVALUE_g,
            ErrorClass::CantOpen => api.H5E_CANTOPENFILE_g,
            ErrorClass::Read => api.H5E_READERROR_g,
            ErrorClass::Write => api.H5E_WRITEERROR_g,
            ErrorClass::Overflow => api.H5E_OVERFLOW_g,
            ErrorClass::Other => api.H5E_SYSERRSTR_g,
        };
        let (Ok(push), Ok(err_cls), Ok(maj_vfl), Ok(minor)) =
            (api.H5Epush2, api.H5E_ERR_CLS_g, api.H5E_VFL_g, minor)
        else {
            return false;
        };
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
                *err_cls,
                *maj_vfl,
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
            .api
            .H5FDis_driver_registered_by_value
            .map_err(|m| self.missing(m))?;
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
        let register = self.api.H5FDregister.map_err(|m| self.missing(m))?;
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
            .api
            .H5Pset_driver_by_name
            .map_err(|m| self.missing(m))?;
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

    /// The message for a function this library lacks, naming the library and the function.
    pub fn missing(&self, missing: MissingSymbol) -> String {
        format!(
            "{} has no {} (HDF5 1.14+ needed)",
            self.path, missing.symbol
        )
    }

    /// Whether the selection callbacks' H5S calls ([`super::space`]) are all there.
    pub fn has_selection_calls(&self) -> bool {
        let api = &self.api;
        [
            api.H5Sget_select_type.is_ok(),
            api.H5Sis_regular_hyperslab.is_ok(),
            api.H5Sget_regular_hyperslab.is_ok(),
            api.H5Sget_simple_extent_dims.is_ok(),
            api.H5Sget_select_bounds.is_ok(),
            api.H5Ssel_iter_create.is_ok(),
            api.H5Ssel_iter_get_seq_list.is_ok(),
            api.H5Ssel_iter_close.is_ok(),
        ]
        .iter()
        .all(|&found| found)
    }

    /// The HDF5 API of one loaded object, if it is an HDF5 library itself (see
    /// [`is_hdf5_library`]). The returned library holds a dlopen handle of the object.
    pub(crate) fn open(object: &LoadedObject) -> Option<Hdf5Library> {
        let handle = object.handle();
        if handle.is_null() {
            return None;
        }
        if !is_hdf5_library(object, handle) {
            // SAFETY: balances the dlopen above; the object stays loaded by its owner.
            unsafe { libc::dlclose(handle) };
            return None;
        }
        Some(Hdf5Library {
            path: object.name.to_string_lossy().into_owned(),
            base: object.base,
            handle,
            api: Hdf5Api::from_symbols(|name| object.own_symbol(handle, name)),
        })
    }
}

/// Whether a loaded object (opened as `handle`) is an HDF5 library itself: it defines
/// `H5Pget_driver_config_str` (an object that merely links one, such as an extension module, is
/// not one).
fn is_hdf5_library(object: &LoadedObject, handle: *mut c_void) -> bool {
    object
        .own_symbol(handle, c"H5Pget_driver_config_str")
        .is_some()
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
            let handle = object.handle();
            if handle.is_null() {
                return false;
            }
            let hdf5 = is_hdf5_library(object, handle);
            // SAFETY: balances the dlopen in `handle`; the object stays loaded by its owner.
            unsafe { libc::dlclose(handle) };
            hdf5
        })
        .collect()
}
