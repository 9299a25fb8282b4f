//! The facts about a stored dataset that decide how its bytes may reach device memory (see
//! `route`), gathered with hdf5-metno: its element type against the requested one, and how it is
//! stored.

use crate::element::{describe, descriptor_of, Element};
use crate::error::{Error, Result};
use crate::file::OpenDataset;
use crate::hdf5_raw::locked;
use crate::route::Storage;
use hdf5::dataset::Layout;
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

/// How the dataset is stored.
pub(crate) fn storage(ds: &OpenDataset) -> Result<Storage> {
    let fail = |op: &str, e: hdf5::Error| Error::hdf5(op, &ds.path, Some(&ds.name), e);
    let dcpl = ds
        .dset
        .dcpl()
        .map_err(|e| fail("getting the creation properties", e))?;
    Ok(
        match dcpl
            .get_layout()
            .map_err(|e| fail("getting the layout", e))?
        {
            Layout::Contiguous => {
                let external = dcpl
                    .get_external()
                    .map_err(|e| fail("listing external files", e))?;
                if !external.is_empty() {
                    Storage::External
                } else {
                    // Contiguous storage has an address once it is allocated.
                    Storage::Contiguous {
                        allocated: ds.dset.offset().is_some(),
                    }
                }
            }
            Layout::Compact => Storage::Compact,
            Layout::Chunked => {
                let chunk = dcpl
                    .get_chunk()
                    .map_err(|e| fail("getting the chunk shape", e))?
                    .unwrap_or_default();
                let filters = dcpl
                    .get_filters()
                    .map_err(|e| fail("listing the filters", e))?;
                let mut allocated = HashSet::new();
                ds.dset
                    .chunks_visit(|info| {
                        allocated.insert(info.offset.to_vec());
                        0
                    })
                    .map_err(|e| fail("listing the allocated chunks", e))?;
                Storage::Chunked {
                    chunk: chunk.iter().map(|&c| c as u64).collect(),
                    filtered: !filters.is_empty(),
                    allocated,
                    // array-io opens datasets for device reads with the chunk cache disabled.
                    cached: false,
                }
            }
            Layout::Virtual => Storage::Virtual,
        },
    )
}

/// The ids of the dataset's filters, in pipeline order (empty when unfiltered).
pub(crate) fn filter_ids(ds: &OpenDataset) -> Result<Vec<i32>> {
    let fail = |op: &str, e: hdf5::Error| Error::hdf5(op, &ds.path, Some(&ds.name), e);
    let dcpl = ds
        .dset
        .dcpl()
        .map_err(|e| fail("getting the creation properties", e))?;
    let filters = dcpl
        .get_filters()
        .map_err(|e| fail("listing the filters", e))?;
    Ok(filters.iter().map(|f| f.id()).collect())
}
