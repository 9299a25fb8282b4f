//! h5gds: the `gds` HDF5 virtual file driver.
//!
//! Built as `libh5gds.so`, an HDF5 VFD plugin that any HDF5 1.14.4+ or 2.x program loads with
//! `HDF5_PLUGIN_PATH=<dir> HDF5_DRIVER=gds`. Host buffers go through POSIX I/O, split across a
//! thread pool when large. The library links no libhdf5: HDF5 calls it needs are resolved at run
//! time from the HDF5 already loaded in the process (see `hdf5_runtime`).

pub mod abi;
pub mod config;
pub mod cuda;
pub mod dataspace;
pub mod error;
pub mod file;
pub mod hdf5_runtime;
pub mod io;
pub mod log;
pub mod memory;
pub mod plugin;

pub use plugin::{class, DRIVER_NAME, DRIVER_VALUE};
