//! One binding per HDF5 copy that calls the driver, and the primary binding: the HDF5 library the
//! Python extension registered the driver into and makes its own calls into.
//!
//! A binding is set once and never changed; the driver keeps a class per binding whose callbacks
//! know it (see the driver's `plugin`). The copy is recognised by the address of its code: the
//! plugin loader's call of `H5PLget_plugin_info` returns into it, and in-process registration
//! passes a function of it. A caller that cannot be recognised (an HDF5 linked statically without
//! exported symbols, more copies than bindings) gets no binding.

use super::api::Hdf5Api;
use super::library::{loaded_hdf5_libraries, loaded_hdf5_objects, Hdf5Library};
use super::objects::{object_containing, LoadedObject};
use std::ffi::{c_void, CStr};
use std::sync::{Mutex, OnceLock};

/// How many HDF5 copies one copy of the driver can tell apart; a further one gets no binding.
/// Processes seen hold up to three (h5py's, netCDF4's, PyTables').
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
    let library = Hdf5Library::open(object)?;
    // Under the lock, the free slot stays free until set here.
    let _ = BOUND[slot].set(library);
    Some(slot)
}

/// The binding of the HDF5 library that the loaded object holding `addr` calls (a program or
/// library calling an HDF5 API of its own, such as vfd-gds's `H5Pset_fapl_gds`, whose file
/// access list belongs to that HDF5): the first `H5Pget_driver_config_str` its lookup scope
/// finds, which is its own where it is an HDF5 library itself. A caller that links no HDF5
/// (Python's ctypes) gets the process's HDF5 where exactly one is loaded.
pub fn bind_hdf5_used_by(addr: usize) -> Result<usize, String> {
    let object = object_containing(addr)
        .ok_or_else(|| format!("no loaded object holds the calling code at {addr:#x}"))?;
    let shown = match object.name.to_string_lossy() {
        n if n.is_empty() => "the main program".to_string(),
        n => n.into_owned(),
    };
    let hdf5 = hdf5_object_of_handle(object.handle(), &shown).or_else(|err| {
        let mut loaded = loaded_hdf5_objects();
        match loaded.len() {
            1 => Ok(loaded.remove(0)),
            0 => Err(format!("{err}, and no HDF5 library is loaded")),
            n => Err(format!(
                "{err}, and {n} HDF5 libraries are loaded: call from code linked with the one \
                 the file access list belongs to"
            )),
        }
    })?;
    let hdf5_name = hdf5.name.to_string_lossy().into_owned();
    bind_object(&hdf5).ok_or_else(|| {
        format!(
            "{hdf5_name} (the HDF5 {shown} uses) exports no HDF5 1.14+ API, or this process \
             holds more than {BINDINGS} HDF5 libraries"
        )
    })
}

/// The primary binding (see the module's comment), set by [`bind_primary`].
static PRIMARY: OnceLock<usize> = OnceLock::new();

/// The primary HDF5 library; None before [`bind_primary`].
pub fn primary_library() -> Option<&'static Hdf5Library> {
    bound_library(*PRIMARY.get()?)
}

/// The function table of the primary HDF5 library (for callers that make their own HDF5 calls
/// into the library the driver was registered into, such as the Python extension's H5Dread).
pub fn primary_api() -> Option<&'static Hdf5Api> {
    Some(&primary_library()?.api)
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
    hdf5_object_of_handle(handle, &shown)
}

/// The HDF5 library that the object opened as `handle` (null: not loaded) resolves HDF5
/// symbols to; closes the handle.
fn hdf5_object_of_handle(handle: *mut c_void, shown: &str) -> Result<LoadedObject, String> {
    if handle.is_null() {
        return Err(format!("{shown} is not loaded in this process"));
    }
    // A handle's lookup searches the object and its dependencies: the HDF5 it was linked with.
    // SAFETY: a lookup in a valid handle.
    let symbol = unsafe { libc::dlsym(handle, c"H5Pget_driver_config_str".as_ptr()) };
    // SAFETY: balances the dlopen that made the handle; the object stays loaded by its owner,
    // and so does the library the symbol belongs to.
    unsafe { libc::dlclose(handle) };
    if symbol.is_null() {
        return Err(format!(
            "{shown} uses no HDF5 1.14+ library whose API can be reached (no exported \
             H5Pget_driver_config_str)"
        ));
    }
    object_containing(symbol as usize)
        .ok_or_else(|| format!("the HDF5 library {shown} uses is not among the loaded objects"))
}

/// Binds the HDF5 library that `near` (a loaded object, such as one of h5py's extension modules)
/// is linked with, and makes it the primary one: its binding slot and library. A second,
/// different primary library is refused.
pub fn bind_primary(near: &CStr) -> Result<(usize, &'static Hdf5Library), String> {
    let object = hdf5_object_of(near)?;
    let shown = object.name.to_string_lossy().into_owned();
    let slot = bind_object(&object).ok_or_else(|| {
        format!("{shown} exports no HDF5 1.14+ API, or this process holds more than {BINDINGS} HDF5 libraries")
    })?;
    let chosen = *PRIMARY.get_or_init(|| slot);
    let api = bound_library(slot).ok_or("binding without a library")?;
    if chosen != slot {
        let previous = primary_library().map_or("", |l| l.path.as_str());
        return Err(format!(
            "the gds driver already works with the HDF5 library {previous}, not {shown}"
        ));
    }
    Ok((slot, api))
}
