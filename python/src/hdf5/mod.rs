//! The HDF5 library h5py loaded, through the table of that library
//! (`h5gds_runtime::hdf5::primary_api`): the extension links no libhdf5, exactly like the driver.
//! The caller holds h5py's lock (`phil`), which serialises all calls into that HDF5.
//!
//! - this module: h5py's table of HDF5's functions;
//! - [`facts`]: the engine's dataset query of the file's driver (`h5gds_engine::facts`), through
//!   h5py's HDF5.

mod facts;

pub use facts::other_driver;
use h5gds_runtime::hdf5::Hdf5Api;

pub type Hid = i64;

/// The function table of h5py's HDF5: the library the driver was registered into.
pub(crate) fn api() -> Result<&'static Hdf5Api, String> {
    h5gds_runtime::hdf5::primary_api()
        .ok_or_else(|| "the gds driver is not registered in h5py's HDF5 library yet".to_string())
}
