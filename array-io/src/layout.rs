//! The facts about a stored dataset that decide how its bytes may reach device memory (see
//! `route`): its element type against the requested one (hdf5-metno's datatypes), and how it is
//! stored (the engine's query, through the linked HDF5's table).

use crate::element::{describe, descriptor_of, Element};
use crate::error::{Error, Result};
use crate::file::OpenDataset;
use crate::hdf5_raw::{linked_hdf5, locked};
use crate::route::Storage;
use h5gds_engine::facts::{self, StoredLayout};
use h5gds_engine::hdf5_error::Hdf5Error;
use hdf5::Datatype;
use std::collections::HashSet;

/// The element type the caller asked for, checked against the stored one.
pub(crate) struct Types {
    /// The memory type to read with.
    pub mem: Datatype,
    /// Why HDF5 must convert (byte order, float layout, or an allowed conversion), if it must.
    pub conversion: Option<String>,
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
        let equal = file == mem;
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
        let conversion = match (equal, same_kind) {
            (true, _) => None,
            (false, true) => Some(format!(
                "the stored {stored} has another byte order or layout than {}, so HDF5 \
                 converts it in the buffer itself",
                T::NAME
            )),
            (false, false) => Some(format!(
                "HDF5 converts the stored {stored} to {} in the buffer itself",
                T::NAME
            )),
        };
        Ok(Types { mem, conversion })
    })
}

/// What the engine says of the dataset's storage (`h5gds_engine::facts`), asked through the
/// linked HDF5 under hdf5-metno's lock, a failure named as array-io names the step.
fn stored_layout(ds: &OpenDataset) -> Result<StoredLayout> {
    let layout = locked(|| facts::stored_layout(linked_hdf5(), ds.dset.id()));
    layout.map_err(|e| {
        let op = match &e {
            Hdf5Error::Failed { call, .. } => match *call {
                "H5Dget_create_plist" => "getting the creation properties",
                "H5Pget_layout" => "getting the layout",
                "H5Pget_external_count" => "listing external files",
                "H5Pget_chunk" => "getting the chunk shape",
                "H5Pget_nfilters" | "H5Pget_filter2" => "listing the filters",
                "H5Dget_access_plist" | "H5Pget_chunk_cache" => "getting the chunk cache size",
                other => other,
            },
            Hdf5Error::Missing(_) => "asking how the dataset is stored",
        };
        Error::hdf5(op, &ds.path, Some(&ds.name), e)
    })
}

/// How the dataset is stored.
pub(crate) fn storage(ds: &OpenDataset) -> Result<Storage> {
    Ok(match stored_layout(ds)? {
        StoredLayout::Contiguous { external: true, .. } => Storage::External,
        // Contiguous storage has an address once it is allocated.
        StoredLayout::Contiguous { address, .. } => Storage::Contiguous {
            allocated: address.is_some(),
        },
        StoredLayout::Compact => Storage::Compact,
        StoredLayout::Chunked { chunk, filters, .. } => {
            let mut allocated = HashSet::new();
            ds.dset
                .chunks_visit(|info| {
                    allocated.insert(info.offset.to_vec());
                    0
                })
                .map_err(|e| {
                    Error::hdf5("listing the allocated chunks", &ds.path, Some(&ds.name), e)
                })?;
            Storage::Chunked {
                chunk,
                filtered: !filters.is_empty(),
                allocated,
                // array-io opens datasets for device reads with the chunk cache disabled.
                cached: false,
            }
        }
        StoredLayout::Virtual => Storage::Virtual,
    })
}

/// The ids of the dataset's filters, in pipeline order (empty when unfiltered).
pub(crate) fn filter_ids(ds: &OpenDataset) -> Result<Vec<i32>> {
    Ok(match stored_layout(ds)? {
        StoredLayout::Chunked { filters, .. } => filters.into_iter().map(|(id, _)| id).collect(),
        _ => Vec::new(),
    })
}
