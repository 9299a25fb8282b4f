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

#[cfg(test)]
mod tests {
    use crate::hdf5_raw::{
        create_file, file_access, linked_hdf5, locked, open_dataset, open_file, FileDriver,
    };
    use h5gds_engine::facts::{self, StoredLayout};
    use h5gds_runtime::hdf5::Hdf5Error;
    use hdf5::dataset::Layout;
    use hdf5::plist::DatasetAccess;
    use hdf5::Datatype;

    /// The engine's one query through the HDF5 array-io links: each layout as HDF5 stores it,
    /// the stored element, the file's intent, the name, the dimensions, and a failure's text.
    #[test]
    fn the_engine_asks_the_linked_hdf5_how_each_dataset_is_stored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("layouts.h5");
        let sec2 = file_access(&FileDriver::Sec2).unwrap();
        let api = linked_hdf5();
        {
            let file = create_file(&path, &sec2).unwrap();
            let unwritten = file.new_dataset::<f32>().shape([4, 3]);
            unwritten.create("unwritten").unwrap();
            let written = file.new_dataset_builder().with_data(&[1i16, 2, 3]);
            let written = written.create("written").unwrap();
            let compact = file.new_dataset::<u8>().shape(8).layout(Layout::Compact);
            compact.create("compact").unwrap();
            let external = file.new_dataset::<u8>().shape(8).external("ext.bin", 0, 8);
            external.create("external").unwrap();
            let chunked = file
                .new_dataset::<f64>()
                .shape([4, 6])
                .chunk([2, 3])
                .deflate(4);
            chunked.create("chunked").unwrap();
            assert!(!locked(|| facts::read_only_file(api, written.id())).unwrap());
        }
        let file = open_file(&path, &sec2).unwrap();
        let layout = |name: &str| {
            let ds = file.dataset(name).unwrap();
            locked(|| facts::stored_layout(api, ds.id())).unwrap()
        };
        let unallocated = StoredLayout::Contiguous {
            address: None,
            external: false,
        };
        assert_eq!(layout("unwritten"), unallocated);
        let written = layout("written");
        assert!(
            matches!(written, StoredLayout::Contiguous { address: Some(a), external: false } if a > 0),
            "{written:?}"
        );
        assert_eq!(layout("compact"), StoredLayout::Compact);
        let external = layout("external");
        assert!(
            matches!(external, StoredLayout::Contiguous { external: true, .. }),
            "{external:?}"
        );
        // Opened with a chunk cache of its own, which the engine reads from the dataset.
        let dapl = DatasetAccess::build()
            .chunk_cache(521, 3 << 20, 0.5)
            .finish()
            .unwrap();
        let chunked = open_dataset(&file, "chunked", &dapl).unwrap();
        let chunked_layout = locked(|| facts::stored_layout(api, chunked.id())).unwrap();
        // Deflate (filter 1) at level 4.
        let expected = StoredLayout::Chunked {
            chunk: vec![2, 3],
            filters: vec![h5gds_chunk_codec::Filter {
                id: 1,
                values: vec![4],
            }],
            cache_bytes: 3 << 20,
        };
        assert_eq!(chunked_layout, expected);
        let (f64_type, f32_type) = (
            Datatype::from_type::<f64>().unwrap(),
            Datatype::from_type::<f32>().unwrap(),
        );
        locked(|| {
            let same = facts::dataset_facts(api, chunked.id(), f64_type.id()).unwrap();
            assert!(same.same_type && same.stored_size == 8);
            let other = facts::dataset_facts(api, chunked.id(), f32_type.id()).unwrap();
            assert!(!other.same_type && other.stored_size == 8);
            assert!(facts::read_only_file(api, chunked.id()).unwrap());
            assert_eq!(
                facts::object_name(api, chunked.id()).as_deref(),
                Some("/chunked")
            );
            assert_eq!(facts::dimensions(api, chunked.id()).unwrap(), [4, 6]);
            // A datatype is no dataset: the failure names the call and carries HDF5's stack.
            let err = facts::stored_layout(api, f64_type.id()).unwrap_err();
            let Hdf5Error::Failed { call, stack } = &err else {
                panic!("{err}");
            };
            assert_eq!(*call, "H5Dget_create_plist");
            assert!(stack.contains("H5Dget_create_plist"), "{stack}");
            // The stack was cleared: the next failure carries its own records only.
            let err = facts::dimensions(api, f64_type.id())
                .unwrap_err()
                .to_string();
            assert!(
                err.starts_with("H5Dget_space failed: ") && !err.contains("create_plist"),
                "{err}"
            );
        });
    }
}
