//! The HDF5 library h5py loaded, through the table of that library
//! (`h5gds_runtime::hdf5::primary_api`): the extension links no libhdf5, exactly like the driver.
//! The caller holds h5py's lock (`phil`), which serialises all calls into that HDF5.
//!
//! - this module: one transfer (`h5gds_engine::transfer` over h5py's table), the file's driver;
//! - [`chunks`]: the raw chunk calls (stored bytes, locations, the whole index);
//! - [`facts`]: the engine's dataset queries (`h5gds_engine::facts`: how a dataset is stored,
//!   whether its file can change, its name and dimensions) through h5py's HDF5.

mod chunks;
mod facts;

pub use chunks::{chunk_index, stored_chunks, H5pyFace};
pub use facts::{dataset_facts, object_name, other_driver, DatasetFacts, StoredLayout};
pub use h5gds_engine::transfer::{Prepared, Transfer};
use h5gds_engine::Error;

use h5gds_engine::transfer;
use h5gds_runtime::hdf5::Hdf5Api;

pub type Hid = i64;

/// The function table of h5py's HDF5: the library the driver was registered into.
pub(crate) fn api() -> Result<&'static Hdf5Api, String> {
    h5gds_runtime::hdf5::primary_api()
        .ok_or_else(|| "the gds driver is not registered in h5py's HDF5 library yet".to_string())
}

/// `h5gds_engine::transfer::prepare` in h5py's HDF5.
pub fn prepare(t: &Transfer) -> Result<Option<Prepared>, Error> {
    transfer::prepare(api().map_err(Error::hdf5)?, t)
}

/// The file holding `dataset`, opened anew for reading, when its chunks may be read from it
/// directly at the addresses HDF5 reports: through sec2 or h5gds's `gds` driver, as
/// `h5gds_engine::stored::direct_file` says. `None` otherwise, or when HDF5 cannot tell. The
/// caller holds h5py's lock.
pub fn direct_file(dataset: Hid) -> Option<std::fs::File> {
    bytes_at_hdf5s_addresses(dataset)
        .then(|| h5gds_engine::stored::direct_file(api().ok()?, dataset))?
}

/// Whether the file of `dataset` is open with `gds` (no other driver named) or sec2, whose bytes
/// lie at the addresses HDF5 reports; false where HDF5 cannot tell.
fn bytes_at_hdf5s_addresses(dataset: Hid) -> bool {
    match other_driver(dataset) {
        Ok(None) => true,
        Ok(Some(name)) => name == "sec2",
        Err(_) => false,
    }
}
