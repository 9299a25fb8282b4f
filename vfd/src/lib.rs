//! h5gds: the `gds` HDF5 virtual file driver.
//!
//! Built as `libh5gds.so`, an HDF5 VFD plugin that any HDF5 1.14.4+ or 2.x program loads with
//! `HDF5_PLUGIN_PATH=<dir> HDF5_DRIVER=gds`. Host buffers go through POSIX I/O, split across a
//! thread pool when large. The library links no libhdf5: HDF5 calls it needs are resolved at run
//! time from the HDF5 copy that calls the driver, which may be one of several in the process
//! (see `h5gds_runtime::hdf5`).
//! For array-io, the `h5gds` tool, the Python extension and tests it exports a small surface
//! (below); the rest is private to the driver. ARCHITECTURE.md at the repository root maps the
//! crates, the path of a read and a write, and the invariants; docs/driver.md ("Inside the
//! driver") describes each module.
#![deny(unsafe_op_in_unsafe_fn)]

/// The HDF5 virtual-file-driver ABI (public so its layout can be checked against real headers).
pub mod abi;
mod config;
/// CUDA lives in the runtime crate; `crate::cuda` names it for the driver's modules.
use h5gds_runtime::cuda;
mod aws_profile;
mod dataspace;
mod error;
mod file;
mod io;
mod log;
mod memory;
#[cfg(test)]
mod model_tests;
mod plugin;
mod remote;
mod selection;
mod transfer;
mod url_name;
mod verdicts;
/// vfd-gds's public API on h5gds's driver, for the compatibility library (`vfd-gds-compat`).
pub mod vfd_gds_api;

pub use abi::{DRIVER_NAME, DRIVER_VALUE};
pub use config::{
    config_from_environment, format_size, parse_size, CarriedSettings, CompatMode, DirectIo,
    Key as SettingKey, RemoteSettings, SettingSpec, Source as SettingSource, VfdSettings, SETTINGS,
};
pub use error::Error;
pub use h5gds_runtime::cuda::{cuda, CudaDriver, CudaError};
pub use h5gds_runtime::device_ranges::forget_device_range;
pub use io::gds::{gds_kernel_path_possible, CuFileDriver};
pub use log::with_logging;
pub use plugin::{
    class_for_hdf5_at, h5gds_library, register_in_loaded_hdf5, set_fapl_driver,
    Registration as DriverRegistration, IDENTITY_SYMBOL,
};
pub use remote::{
    remote_file_at, url_report, InOrder, ObjectFacts, RemoteFile, StoreFacts, UrlReport,
    CACHE_BLOCK as REMOTE_CACHE_BLOCK,
};
pub use url_name::{is_url, shown_url};
pub use verdicts::{
    cufile_driver, cufile_library_file, device_transfers_staged, path_verdicts, PathVerdicts,
};
