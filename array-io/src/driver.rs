//! The `gds` driver registered in this process, and the file access lists that select it or
//! sec2 (which of the two a call takes, its settings decide: `options`).
//!
//! Rust programs link HDF5 statically, so HDF5's plugin loader would have to find
//! `libh5gds.so` through `HDF5_PLUGIN_PATH`; instead the driver class from the `h5gds` crate is
//! registered directly (`H5FDregister`). If a driver of value 512 is already registered, it is
//! used only when it is h5gds: this class, or the h5gds plugin (loaded through
//! `HDF5_PLUGIN_PATH` and `HDF5_DRIVER=gds`). Another driver of the same name and value (the
//! GPUDirect Storage VFD, vfd-gds, that Legate and others ship) is refused with an error that
//! says what to do, rather than silently writing through it.

use crate::error::{Error, Result};
use crate::hdf5_raw::{self, FileDriver};
use hdf5::plist::FileAccess;
use hdf5_sys::h5i::hid_t;
use std::path::Path;
use std::sync::OnceLock;

/// How the `gds` driver came to be registered in this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Registration {
    /// array-io registered the class of the linked `h5gds` crate.
    InProcess,
    /// h5gds's driver was already registered (for example the plugin, loaded through
    /// `HDF5_PLUGIN_PATH` and `HDF5_DRIVER=gds`); array-io uses it.
    AlreadyRegistered,
}

/// The `gds` driver's HDF5 id, registering it on first use. Fails if another driver of the
/// same value (512) is registered in this process.
pub fn gds_driver() -> Result<(hid_t, Registration)> {
    static DRIVER: OnceLock<std::result::Result<(hid_t, Registration), String>> = OnceLock::new();
    DRIVER
        .get_or_init(|| hdf5_raw::locked(register))
        .clone()
        .map_err(|message| Error::Hdf5 {
            op: "registering the gds driver".into(),
            path: Default::default(),
            dataset: None,
            message,
        })
}

fn register() -> std::result::Result<(hid_t, Registration), String> {
    let value = h5gds::DRIVER_VALUE;
    if let Some(id) = hdf5_raw::registered_driver(value).map_err(|e| e.to_string())? {
        let class = hdf5_raw::driver_class(id).map_err(|e| e.to_string())?;
        // SAFETY: HDF5's copy of the registered class.
        return match unsafe { h5gds::h5gds_library(class.cast()) } {
            Ok(()) => Ok((id, Registration::AlreadyRegistered)),
            Err(library) => Err(another_gds_driver(&library)),
        };
    }
    // The class bound to the HDF5 this program calls (the one defining H5FDregister).
    let hdf5_code = hdf5_raw::linked_code_address().map_err(|e| e.to_string())?;
    let class = h5gds::class_for_hdf5_at(hdf5_code);
    // SAFETY: the h5gds class is a static of HDF5 1.14.4+/2.x's H5FD_class_t layout (tested in
    // h5gds against the C headers).
    let id = unsafe { hdf5_raw::register_driver(class.cast()) }.map_err(|e| e.to_string())?;
    crate::log::debug(format_args!(
        "registered the gds driver in-process (id {id})"
    ));
    Ok((id, Registration::InProcess))
}

/// The error for another driver registered as `gds`, saying what the user can do.
fn another_gds_driver(library: &str) -> String {
    format!(
        "another HDF5 driver is registered as gds (value 512) in this process, from \
         {library}: probably vfd-gds, the GPUDirect Storage driver Legate and \
         others ship. array-io uses only h5gds's gds driver. Do not load the other one in this \
         process (take its directory out of HDF5_PLUGIN_PATH, or put h5gds's first, where \
         HDF5_DRIVER=gds is set), or set H5GDS_USE_VFD_GDS=0 to read and write through sec2 \
         and the staged path instead"
    )
}

/// The file driver of one open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Driver {
    Gds,
    Sec2,
}

impl Driver {
    /// `gds`, unless `blocker` says why device data must be staged (then sec2).
    pub(crate) fn unless(blocker: &Option<String>) -> Driver {
        match blocker {
            None => Driver::Gds,
            Some(_) => Driver::Sec2,
        }
    }
}

/// A file access property list selecting `driver`, for opening `path` (`write`: creating it).
/// The engine checks the open first (`h5gds_engine::opening`), as for the Python package: an
/// invalid setting is refused naming it (where HDF5's refusal of the open would name only the
/// open), a write to a URL as a read-only file system's.
pub(crate) fn file_access(driver: Driver, path: &Path, write: bool) -> Result<FileAccess> {
    let name = path.to_string_lossy();
    h5gds_engine::opening(write.then_some(&*name)).map_err(|e| match e.facts().errno {
        Some(errno) => Error::Io {
            op: "writing",
            path: path.to_path_buf(),
            source: std::io::Error::new(
                std::io::Error::from_raw_os_error(errno).kind(),
                e.facts().detail.clone(),
            ),
        },
        None => Error::engine(path, "")(e),
    })?;
    let driver = match driver {
        Driver::Gds => FileDriver::Registered(gds_driver()?.0),
        Driver::Sec2 => FileDriver::Sec2,
    };
    hdf5_raw::file_access(&driver)
        .map_err(|e| Error::hdf5("selecting the file driver", path, None, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_driver_registers_once_and_selects_on_a_file_access_list() {
        let (id, how) = gds_driver().unwrap();
        assert_eq!(gds_driver().unwrap(), (id, how));
        let fapl = file_access(Driver::Gds, Path::new("x.h5"), false).unwrap();
        assert_eq!(hdf5_raw::selected_driver(&fapl).unwrap(), id);
    }
}
