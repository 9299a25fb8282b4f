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
//! - [`api`]: every HDF5 function h5gds calls, declared once ([`Hdf5Api`]), filled from a loaded
//!   copy's symbols or (`linked_hdf5_api!`) from the HDF5 a program links.
//! - [`objects`]: the objects the dynamic loader has loaded, and which one holds an address.
//! - [`library`]: one loaded HDF5 library: its table and the calls the driver makes through it.
//! - [`binding`]: the bindings (one per HDF5 copy) and the primary one the Python extension uses.
//! - [`space`]: what a dataspace selects, for the selection callbacks.
//! - [`error`]: the result layer: failed calls with HDF5's stack, ids closed on drop.
#![allow(non_camel_case_types)]

pub mod api;
pub mod binding;
pub mod error;
pub mod library;
pub mod objects;
pub mod space;

pub use api::{Hdf5Api, MissingSymbol};
pub use binding::{
    bind_code, bind_hdf5_used_by, bind_primary, bound_library, primary_api, primary_library,
    BINDINGS,
};
pub use error::{stack, Hdf5Error, IdKind, Owned};
pub use library::Hdf5Library;
pub use objects::{calling_code, loaded_file_of, object_defining};

/// HDF5's C integer types (H5Ipublic.h, H5public.h; the same in 1.14 and 2.x).
pub type hid_t = i64;
pub type herr_t = std::ffi::c_int;
pub type htri_t = std::ffi::c_int;
pub type hsize_t = u64;
pub type hssize_t = i64;
pub type haddr_t = u64;

/// HDF5's "undefined address" (`HADDR_UNDEF`): a chunk never written.
pub const HADDR_UNDEF: haddr_t = u64::MAX;

/// One record of an error stack (`H5E_error2_t`).
#[repr(C)]
pub struct H5E_error2_t {
    pub cls_id: hid_t,
    pub maj_num: hid_t,
    pub min_num: hid_t,
    pub line: std::ffi::c_uint,
    pub func_name: *const std::ffi::c_char,
    pub file_name: *const std::ffi::c_char,
    pub desc: *const std::ffi::c_char,
}

/// `H5Ewalk2`'s callback: record number, record, the caller's data.
pub type H5E_walk2_t =
    unsafe extern "C" fn(std::ffi::c_uint, *const H5E_error2_t, *mut std::ffi::c_void) -> herr_t;

/// `H5Dchunk_iter`'s callback: a chunk's offset, filter mask, address and stored size.
pub type H5D_chunk_iter_op_t = unsafe extern "C" fn(
    *const hsize_t,
    std::ffi::c_uint,
    haddr_t,
    hsize_t,
    *mut std::ffi::c_void,
) -> std::ffi::c_int;

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
