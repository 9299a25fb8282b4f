//! The driver's class registered in-process, and how h5gds's class is told from another `gds`
//! driver: the class for an HDF5 linked into the program (`class_for_hdf5_at`, for array-io's
//! `H5FDregister`), registration into an HDF5 already loaded in the process (h5py's, for the
//! Python extension), and the identity symbol that marks a class as h5gds's.

use super::{bound_class, OPENS, UNBOUND_CLASS};
use crate::abi::*;
use crate::log::with_logging;
use h5gds_runtime::hdf5::{self as runtime_hdf5, Hdf5Library};
use std::ffi::{c_void, CStr};
use std::panic::catch_unwind;

/// The driver class for registering in-process (`H5FDregister`) into the HDF5 library whose code
/// is at `hdf5_code` (pass a function of that library, such as the `H5FDregister` being called):
/// bound to that library, or unbound where it exports no API to call back (a static HDF5).
pub fn class_for_hdf5_at(hdf5_code: *const c_void) -> *const H5FD_class_t {
    with_logging(|| {
        let slot = catch_unwind(|| runtime_hdf5::bind_code(hdf5_code as usize));
        bound_class(slot.ok().flatten())
    })
}

/// The exported name of `h5gds_driver_class`, the unbound class under a name only h5gds exports.
pub const IDENTITY_SYMBOL: &CStr = c"h5gds_driver_class";

/// The unbound driver class, under a name only h5gds exports: a process holding a driver
/// registered as `gds` (value 512) finds out whether it is h5gds's by looking this symbol up in
/// the library whose code the registered class runs (vfd-gds shares the name and value), and
/// `h5gds info` tells the `gds` drivers on the plugin path apart by it.
#[no_mangle]
pub extern "C" fn h5gds_driver_class() -> *const H5FD_class_t {
    &UNBOUND_CLASS.0
}

/// Whether a registered driver `class` (HDF5's copy of it) is h5gds's: a class of this copy of
/// the driver, or one whose code lives in another loaded copy of h5gds (the plugin library, an
/// extension module carrying the driver), recognised by its identity symbol. Else the library
/// the class's code lives in, for the message that names it.
///
/// # Safety
/// `class` must be null or point to a driver class of HDF5 1.14.4+/2.x's layout (HDF5's copy of
/// a registered class is).
pub unsafe fn h5gds_library(class: *const H5FD_class_t) -> std::result::Result<(), String> {
    if class.is_null() {
        return Err("an unknown library".into());
    }
    // SAFETY: HDF5 keeps a full copy of every registered class, of this layout (the same for
    // every driver of HDF5 1.14.4+ and 2.x).
    let Some(open) = (unsafe { (*class).open }).map(|f| f as usize) else {
        return Err("an unknown library".into());
    };
    if OPENS.iter().any(|ours| *ours as usize == open) {
        return Ok(());
    }
    // The library whose code the class runs, and whether it is h5gds: it exports h5gds's
    // identity symbol itself.
    match runtime_hdf5::object_defining(open, IDENTITY_SYMBOL) {
        Some((_, true)) => Ok(()),
        Some((library, false)) => Err(library),
        None => Err("an unknown library".into()),
    }
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

/// Registers this copy of the driver (`H5FDregister`) in the HDF5 library that `near` (a loaded
/// object, such as one of h5py's extension modules) is linked with, with a class bound to that
/// library, which becomes the primary one (`h5gds_runtime::hdf5::primary_api`, `set_fapl_driver`). The caller
/// must hold whatever lock serialises calls into that HDF5 (h5py's `phil`).
pub fn register_in_loaded_hdf5(near: &CStr) -> std::result::Result<Registration, String> {
    let (slot, api) = runtime_hdf5::bind_primary(near)?;
    if api.driver_registered(crate::abi::DRIVER_VALUE)? {
        // SAFETY: HDF5's copy of a registered class.
        let ours = registered_gds_class(api).map(|c| unsafe { h5gds_library(c) });
        return Ok(match ours {
            Some(Err(library)) => Registration::Another(library),
            // Ours, or no way to look (an HDF5 without the symbols): it stays in place.
            _ => Registration::AlreadyRegistered,
        });
    }
    // SAFETY: the class is a static of HDF5 1.14.4+/2.x's H5FD_class_t layout; HDF5 copies it.
    let id =
        unsafe { api.register_class(bound_class(Some(slot)).cast(), crate::abi::DRIVER_NAME) }?;
    Ok(Registration::Registered(id))
}

/// Selects the `gds` driver on a file access property list with a config string
/// (`H5Pset_driver_by_name`), in the HDF5 library `register_in_loaded_hdf5` registered into.
/// The string is passed as given; an empty one stores none, so the environment's settings apply.
pub fn set_fapl_driver(fapl: hid_t, config: &str) -> std::result::Result<(), String> {
    runtime_hdf5::primary_library()
        .ok_or("the gds driver is not registered in any HDF5 library yet")?
        .set_driver_by_name(fapl, crate::abi::DRIVER_NAME, config)
}

/// HDF5's copy of the class registered as value 512, found through a scratch file access list
/// (HDF5 has no public lookup of a class by value).
fn registered_gds_class(hdf5: &Hdf5Library) -> Option<*const crate::abi::H5FD_class_t> {
    let api = &hdf5.api;
    let (fapl_class, create, set_by_value, get_driver, get_class, close) = (
        api.H5P_CLS_FILE_ACCESS_ID_g.ok()?,
        api.H5Pcreate.ok()?,
        api.H5Pset_driver_by_value.ok()?,
        api.H5Pget_driver.ok()?,
        api.H5FD_get_class.ok()?,
        api.H5Pclose.ok()?,
    );
    // SAFETY: the library is initialised (the driver is registered in it), so the class id
    // global holds the file access class; the list is closed before returning; a class HDF5
    // returns is its copy of a registered class, of this layout.
    unsafe {
        let fapl = create(*fapl_class);
        if fapl < 0 {
            return None;
        }
        let class = if set_by_value(fapl, crate::abi::DRIVER_VALUE, std::ptr::null()) >= 0 {
            let id = get_driver(fapl);
            (id >= 0)
                .then(|| get_class(id).cast::<crate::abi::H5FD_class_t>())
                .filter(|c| !c.is_null())
        } else {
            None
        };
        close(fapl);
        class
    }
}
