//! vfd-gds's public API (`H5FD_gds_init`, `H5Pset_fapl_gds`, `H5Pget_fapl_gds`) on h5gds's
//! driver, for the compatibility library (`vfd-gds-compat`, `libhdf5_vfd_gds.so.1`) that exports
//! it under vfd-gds's names. A call works on the HDF5 copy its caller uses (the file access list
//! belongs to it): h5gds's class is registered there once, as vfd-gds registers its own, and set
//! on the list with the settings `H5Pset_fapl_gds` got. Unlike vfd-gds, nothing here needs cuFile
//! or a GPU: device transfers take the driver's staged path where GDS cannot work.

use crate::abi::{hid_t, H5FD_class_t, DRIVER_VALUE};
use crate::config::{CarriedSettings, VFD_GDS_DEFAULT_SIZES};
use crate::error::{Error, Result};
use crate::plugin::{bound_class, guard};
use h5gds_runtime::hdf5::{self as runtime_hdf5, Hdf5Library, MissingSymbol, BINDINGS};
use std::sync::atomic::{AtomicI64, Ordering};

/// h5gds's driver id in each bound HDF5 copy, once registered there (-1: not yet). Atomics, not a
/// lock: a child forked while another thread registers must not wait on it; two threads that race
/// both register, and either id works.
static REGISTERED: [AtomicI64; BINDINGS] = [const { AtomicI64::new(-1) }; BINDINGS];

/// The HDF5 copy the code calling the compatibility library uses, and its binding.
fn callers_hdf5() -> Result<(usize, &'static Hdf5Library)> {
    let caller = runtime_hdf5::calling_code()
        .ok_or_else(|| Error::InvalidArgument("the calling code could not be found".into()))?;
    let slot = runtime_hdf5::bind_hdf5_used_by(caller).map_err(Error::InvalidArgument)?;
    let api = runtime_hdf5::bound_library(slot)
        .ok_or_else(|| Error::InvalidArgument("binding without a library".into()))?;
    Ok((slot, api))
}

/// A function of `hdf5`'s table, or the error naming the library and the missing function.
fn function<F>(hdf5: &Hdf5Library, found: std::result::Result<F, MissingSymbol>) -> Result<F> {
    found.map_err(|missing| Error::InvalidArgument(hdf5.missing(missing)))
}

/// h5gds's driver id in the HDF5 copy of binding `slot`, registered there on first use and again
/// after HDF5 was closed and reopened (its ids then are gone).
fn driver_id(slot: usize, api: &Hdf5Library) -> Result<hid_t> {
    let is_valid = function(api, api.api.H5Iis_valid)?;
    let known = REGISTERED[slot].load(Ordering::Acquire);
    // SAFETY: a query of HDF5's id table; an id never comes back with another type.
    if known >= 0 && unsafe { is_valid(known) } > 0 {
        return Ok(known);
    }
    // SAFETY: the class is a static of HDF5 1.14.4+/2.x's H5FD_class_t layout; HDF5 copies it.
    let id = unsafe { api.register_class(bound_class(Some(slot)).cast(), crate::abi::DRIVER_NAME) }
        .map_err(Error::InvalidArgument)?;
    tracing::debug!(
        "registered the gds driver in {} for vfd-gds's API: id {id}",
        api.path
    );
    REGISTERED[slot].store(id, Ordering::Release);
    Ok(id)
}

/// `H5FD_gds_init`: h5gds's driver id in the caller's HDF5; -1 (an error on HDF5's stack) if it
/// cannot be registered.
pub fn gds_init() -> hid_t {
    let bound = callers_hdf5();
    let hdf5 = bound.as_ref().ok().map(|(_, api)| *api);
    guard("H5FD_gds_init", hdf5, -1, || {
        let (slot, api) = bound?;
        driver_id(slot, api)
    })
}

/// `H5Pset_fapl_gds(fapl, alignment, block_size, cbuf_size)`: h5gds's driver on `fapl`, with
/// the copy buffer size as its bounce buffer size (see `CarriedSettings::from_set_fapl_gds`).
/// Sizes vfd-gds refuses, or h5gds cannot use, are refused with the list left as it was.
pub fn set_fapl_gds(fapl: hid_t, alignment: usize, block_size: usize, cbuf_size: usize) -> i32 {
    let bound = callers_hdf5();
    let hdf5 = bound.as_ref().ok().map(|(_, api)| *api);
    guard("H5Pset_fapl_gds", hdf5, -1, || {
        let (slot, api) = bound?;
        let carried = CarriedSettings::from_set_fapl_gds(
            alignment as u64,
            block_size as u64,
            cbuf_size as u64,
        )?;
        let id = driver_id(slot, api)?;
        let set_driver = function(api, api.api.H5Pset_driver)?;
        // SAFETY: HDF5 checks both ids and copies the info with the class's `fapl_copy`.
        if unsafe { set_driver(fapl, id, std::ptr::from_ref(&carried).cast()) } < 0 {
            return Err(Error::InvalidArgument(format!(
                "H5Pset_fapl_gds: H5Pset_driver refused file access list {fapl} (not a file \
                 access property list?)"
            )));
        }
        Ok(0)
    })
}

/// `H5Pget_fapl_gds`: the memory alignment, file block size and copy buffer size `fapl` carries
/// (vfd-gds's defaults where it was given none, as for a list set by name); an error where the
/// list's driver is not `gds` (None, the error on HDF5's stack and in the log).
pub fn get_fapl_gds(fapl: hid_t) -> Option<[usize; 3]> {
    let bound = callers_hdf5();
    let hdf5 = bound.as_ref().ok().map(|(_, api)| *api);
    guard("H5Pget_fapl_gds", hdf5, None, || {
        let (_, api) = bound?;
        let (get_driver, get_class, get_info, clear) = (
            function(api, api.api.H5Pget_driver)?,
            function(api, api.api.H5FD_get_class)?,
            function(api, api.api.H5Pget_driver_info)?,
            function(api, api.api.H5Eclear2)?,
        );
        // SAFETY: HDF5 checks the id.
        let driver = unsafe { get_driver(fapl) };
        // SAFETY: as above; the class is HDF5's copy of a registered class, of this layout.
        let class = (driver >= 0).then(|| unsafe { get_class(driver) }.cast::<H5FD_class_t>());
        // SAFETY: a non-null class of this layout (above).
        if !class.is_some_and(|c| !c.is_null() && unsafe { (*c).value } == DRIVER_VALUE) {
            return Err(Error::InvalidArgument(format!(
                "H5Pget_fapl_gds: file access list {fapl} does not use the gds driver"
            )));
        }
        // Another `gds` (vfd-gds itself) keeps an info of its own layout: only h5gds's is read.
        // SAFETY: a registered class of this layout (above).
        let ours = class.is_some_and(|c| unsafe { crate::plugin::h5gds_library(c) }.is_ok());
        let mut given = [0; 3];
        if ours {
            // SAFETY: the list's own copy of h5gds's driver info: `fapl_size` bytes.
            let info = unsafe { get_info(fapl) };
            if info.is_null() {
                // No info (a list set by name) is no error: drop the record HDF5 pushed.
                // SAFETY: clears the default error stack.
                unsafe { clear(0) };
            }
            // SAFETY: as above.
            if let Some(carried) = unsafe { CarriedSettings::at(info) } {
                given = carried.vfd_gds_sizes;
            }
        }
        let mut sizes = [0usize; 3];
        for ((out, given), default) in sizes.iter_mut().zip(given).zip(VFD_GDS_DEFAULT_SIZES) {
            *out = if given == 0 { default } else { given } as usize;
        }
        Ok(Some(sizes))
    })
}
