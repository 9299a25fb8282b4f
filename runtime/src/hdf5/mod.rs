//! HDF5 functions resolved at run time from the HDF5 libraries already loaded in the process,
//! each bound to the HDF5 copy that called.
//!
//! Nothing here links libhdf5: h5py, netCDF4 and PyTables wheels each load their own HDF5
//! privately under a hashed file name, so a plain-name reference would fail to resolve or reach
//! another HDF5. A process may hold several such copies, and an id of one copy means nothing, or
//! something else, to another. So every HDF5 copy that calls the driver gets a binding of its own
//! ([`binding`]), recognised by the address of its code, and every call back into HDF5 (config
//! string, file locking flag, error stack, dataspace selections, the Python extension's dataset
//! reads) goes to the [`Hdf5Library`] of that binding.
//!
//! - [`objects`]: the objects the dynamic loader has loaded, and which one holds an address.
//! - [`library`]: one loaded HDF5 library's entry points.
//! - [`binding`]: the bindings (one per HDF5 copy) and the primary one the Python extension uses.
//! - [`space`]: the H5S calls of the selection callbacks.
#![allow(non_camel_case_types)]

pub mod binding;
pub mod library;
pub mod objects;
pub mod space;

pub use binding::{
    bind_code, bind_hdf5_used_by, bind_primary, bound_library, primary_library, primary_symbol,
    BINDINGS,
};
pub use library::Hdf5Library;
pub use objects::{calling_code, loaded_file_of, object_defining};

/// HDF5's C integer types (H5Ipublic.h, H5public.h; the same in 1.14 and 2.x).
pub type hid_t = i64;
pub type herr_t = std::ffi::c_int;
pub type htri_t = std::ffi::c_int;
pub type hsize_t = u64;

/// HDF5's largest dataspace rank (`H5S_MAX_RANK`).
pub const H5S_MAX_RANK: usize = 32;

/// Which HDF5 minor error code a pushed error record carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    BadValue,
    CantOpen,
    Read,
    Write,
    Overflow,
    Other,
}
