//! The facts about a stored dataset that decide how its bytes may reach device memory (see
//! `route`): its element type against the requested one (hdf5-metno's datatypes), and how it is
//! stored (the engine's query and chunk index, through the linked HDF5's table).

use crate::element::{describe, descriptor_of, Element};
use crate::error::{Error, Result};
use crate::file::OpenDataset;
use crate::hdf5_raw::locked;
use hdf5::Datatype;

/// The element type the caller asked for, checked against the stored one.
pub(crate) struct Types {
    /// The memory type to read with.
    pub mem: Datatype,
}

/// Checks the stored type against `T`: the same kind of value (byte order aside) unless
/// `allow_conversion`, in which case HDF5 must know a conversion.
pub(crate) fn check_types<T: Element>(ds: &OpenDataset, allow_conversion: bool) -> Result<Types> {
    let want = descriptor_of::<T>()?;
    let where_ = |e: hdf5::Error| Error::hdf5("describing the types", &ds.path, Some(&ds.name), e);
    locked(|| {
        let mem = Datatype::from_descriptor(&want).map_err(where_)?;
        let file = ds.dset.dtype().map_err(where_)?;
        let stored_desc = file.to_descriptor().ok();
        let stored = match &stored_desc {
            Some(desc) => describe(desc),
            None => "a type array-io does not read".into(),
        };
        let same_kind = stored_desc.as_ref() == Some(&want);
        if !same_kind {
            if !allow_conversion {
                return Err(Error::TypeMismatch {
                    path: ds.path.clone(),
                    dataset: ds.name.clone(),
                    stored,
                    requested: T::NAME,
                });
            }
            if file.conv_path(&mem).is_none() {
                return Err(Error::NoConversion {
                    path: ds.path.clone(),
                    dataset: ds.name.clone(),
                    stored,
                    requested: T::NAME,
                });
            }
        }
        Ok(Types { mem })
    })
}
