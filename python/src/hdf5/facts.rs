//! What the one native call of `h5gds.read`/`h5gds.write` asks HDF5 about a dataset: the
//! engine's queries (`h5gds_engine::facts`) through h5py's HDF5. The caller holds h5py's lock.

use super::{api, Hid};
use h5gds_engine::{facts, Error};

/// The driver the file holding `dataset` is open with: `None` when it is h5gds's `gds` driver,
/// else its name.
pub fn other_driver(dataset: Hid) -> Result<Option<String>, Error> {
    let api = api().map_err(Error::hdf5)?;
    Ok(facts::other_driver(api, dataset)?)
}
