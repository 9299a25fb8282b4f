//! What the one native call of `h5gds.read`/`h5gds.write` asks HDF5 about a dataset: the
//! engine's queries (`h5gds_engine::facts`) through h5py's HDF5. The caller holds h5py's lock.

use super::{api, Hid};
use h5gds_engine::facts;
use h5gds_runtime::hdf5::Hdf5Error;

pub use facts::{DatasetFacts, StoredLayout};

/// The layout of `dataset` and whether its stored type is `mem_type`.
pub fn dataset_facts(dataset: Hid, mem_type: Hid) -> Result<DatasetFacts, String> {
    Ok(facts::dataset_facts(api()?, dataset, mem_type)?)
}

/// Whether the file holding `dataset` is open read-only and not for SWMR reading.
pub fn read_only_file(dataset: Hid) -> Result<bool, String> {
    Ok(facts::read_only_file(api()?, dataset)?)
}

/// The dataset's name in its file, "None" for an anonymous dataset, as h5py's `Dataset.name`
/// prints.
pub fn object_name(object: Hid) -> String {
    let name = api().ok().and_then(|api| facts::object_name(api, object));
    name.unwrap_or_else(|| "None".into())
}

/// The dataset's dimensions; a failure is reported as HDF5's stack alone.
pub fn dataset_dims(dataset: Hid) -> Result<Vec<u64>, String> {
    facts::dimensions(api()?, dataset).map_err(|e| match e {
        Hdf5Error::Failed { stack, .. } => stack,
        missing => missing.to_string(),
    })
}
