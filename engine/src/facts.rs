//! What h5gds asks HDF5 about a dataset before moving its bytes, asked one way for both faces:
//! how it is stored, its stored element, whether its file can change, its name and dimensions.
//! Every function takes the table of the HDF5 that holds the dataset (the extension: h5py's,
//! `primary_api`; array-io: the linked one) and the dataset's id in it; the caller holds the lock
//! that serialises calls into that HDF5 (h5py's, or hdf5-metno's).

use h5gds_chunk_codec::Filter;
use h5gds_runtime::hdf5::{hid_t, hsize_t, Hdf5Api, H5S_MAX_RANK, HADDR_UNDEF};
use h5gds_runtime::hdf5::{stack, Hdf5Error, IdKind, Owned};
use std::ffi::{c_int, c_uint};

/// HDF5's layouts (`H5D_layout_t`).
const H5D_COMPACT: c_int = 0;
const H5D_CONTIGUOUS: c_int = 1;
const H5D_CHUNKED: c_int = 2;
const H5D_VIRTUAL: c_int = 3;
/// `H5F_ACC_RDWR` and `H5F_ACC_SWMR_READ` of a file's intent.
const H5F_ACC_RDWR: c_uint = 0x0001;
const H5F_ACC_SWMR_READ: c_uint = 0x0040;

/// How a dataset is stored, as its creation property list says (`H5D_layout_t`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoredLayout {
    /// One run of bytes: at `address` where allocated; `external`: in external files.
    Contiguous {
        address: Option<u64>,
        external: bool,
    },
    Compact,
    /// Chunks of `chunk` elements through the pipeline `filters` (in order, as the chunk codec
    /// takes them); `cache_bytes`: the dataset's chunk cache size.
    Chunked {
        chunk: Vec<u64>,
        filters: Vec<Filter>,
        cache_bytes: usize,
    },
    Virtual,
}

/// A dataset's layout and its stored element against the memory type of a transfer.
pub struct DatasetFacts {
    pub layout: StoredLayout,
    /// The stored type is the memory type in HDF5's terms (`H5Tequal`): HDF5 converts nothing.
    pub same_type: bool,
    /// The stored element's size in bytes.
    pub stored_size: usize,
}

/// The layout of `dataset` and whether its stored type is `mem_type`.
pub fn dataset_facts(
    api: &Hdf5Api,
    dataset: hid_t,
    mem_type: hid_t,
) -> Result<DatasetFacts, Hdf5Error> {
    // SAFETY: plain queries on ids HDF5 checks; the stored type is closed when its `Owned` drops.
    let (same_type, stored_size) = unsafe {
        let stored = (api.H5Dget_type?)(dataset);
        let stored = Owned::new(api, IdKind::Datatype, stored, "H5Dget_type")?;
        (
            (api.H5Tequal?)(stored.id(), mem_type) > 0,
            (api.H5Tget_size?)(stored.id()),
        )
    };
    Ok(DatasetFacts {
        layout: stored_layout(api, dataset)?,
        same_type,
        stored_size,
    })
}

/// How `dataset` is stored.
pub fn stored_layout(api: &Hdf5Api, dataset: hid_t) -> Result<StoredLayout, Hdf5Error> {
    // SAFETY: plain queries on ids HDF5 checks (a failure is reported, its stack cleared);
    // every id opened here is closed when its `Owned` drops; the out-pointers are valid for the calls.
    unsafe {
        let dcpl = (api.H5Dget_create_plist?)(dataset);
        let dcpl = Owned::new(api, IdKind::PropertyList, dcpl, "H5Dget_create_plist")?;
        Ok(match (api.H5Pget_layout?)(dcpl.id()) {
            H5D_CONTIGUOUS => {
                let external = (api.H5Pget_external_count?)(dcpl.id());
                Hdf5Error::check(api, external, "H5Pget_external_count")?;
                let address = (api.H5Dget_offset?)(dataset);
                stack(api); // an unallocated dataset has no offset: not an error here
                StoredLayout::Contiguous {
                    address: (address != HADDR_UNDEF).then_some(address),
                    external: external > 0,
                }
            }
            H5D_COMPACT => StoredLayout::Compact,
            H5D_CHUNKED => {
                let mut dims = [0 as hsize_t; H5S_MAX_RANK];
                let rank = (api.H5Pget_chunk?)(dcpl.id(), H5S_MAX_RANK as c_int, dims.as_mut_ptr());
                Hdf5Error::check(api, rank, "H5Pget_chunk")?;
                let count = (api.H5Pget_nfilters?)(dcpl.id());
                Hdf5Error::check(api, count, "H5Pget_nfilters")?;
                let mut filters = Vec::new();
                for i in 0..count as c_uint {
                    filters.push(filter(api, dcpl.id(), i)?);
                }
                let dapl = (api.H5Dget_access_plist?)(dataset);
                let dapl = Owned::new(api, IdKind::PropertyList, dapl, "H5Dget_access_plist")?;
                let (mut slots, mut cache_bytes, mut w0) = (0usize, 0usize, 0f64);
                let cache =
                    (api.H5Pget_chunk_cache?)(dapl.id(), &mut slots, &mut cache_bytes, &mut w0);
                Hdf5Error::check(api, cache, "H5Pget_chunk_cache")?;
                StoredLayout::Chunked {
                    chunk: dims[..rank as usize].to_vec(),
                    filters,
                    cache_bytes,
                }
            }
            H5D_VIRTUAL => StoredLayout::Virtual,
            _ => return Err(Hdf5Error::failed(api, "H5Pget_layout")),
        })
    }
}

/// Filter `index` of the pipeline in `dcpl`: its id and client values.
///
/// # Safety
/// `dcpl` must be an open dataset creation property list with more than `index` filters.
unsafe fn filter(api: &Hdf5Api, dcpl: hid_t, index: c_uint) -> Result<Filter, Hdf5Error> {
    let get = api.H5Pget_filter2?;
    let mut values = vec![0 as c_uint; 16];
    loop {
        let (mut flags, mut config) = (0 as c_uint, 0 as c_uint);
        let mut count = values.len();
        // SAFETY: `values` holds `count` entries; no name is asked for (namelen 0).
        let id = unsafe {
            get(
                dcpl,
                index,
                &mut flags,
                &mut count,
                values.as_mut_ptr(),
                0,
                std::ptr::null_mut(),
                &mut config,
            )
        };
        Hdf5Error::check(api, id, "H5Pget_filter2")?;
        if count <= values.len() {
            values.truncate(count);
            return Ok(Filter { id, values });
        }
        values.resize(count, 0);
    }
}

/// Whether the file holding `dataset` is open read-only and not for SWMR reading: nothing can
/// change its storage while it is open.
pub fn read_only_file(api: &Hdf5Api, dataset: hid_t) -> Result<bool, Hdf5Error> {
    // SAFETY: plain queries on ids HDF5 checks; the file id opened here is closed when its `Owned` drops.
    unsafe {
        let file = (api.H5Iget_file_id?)(dataset);
        let file = Owned::new(api, IdKind::File, file, "H5Iget_file_id")?;
        let mut intent: c_uint = H5F_ACC_RDWR;
        let status = (api.H5Fget_intent?)(file.id(), &mut intent);
        Hdf5Error::check(api, status, "H5Fget_intent")?;
        Ok(intent & (H5F_ACC_RDWR | H5F_ACC_SWMR_READ) == 0)
    }
}

/// The object's name in its file (`H5Iget_name`); `None` for an anonymous object, or when HDF5
/// cannot tell.
pub fn object_name(api: &Hdf5Api, object: hid_t) -> Option<String> {
    let get = api.H5Iget_name.ok()?;
    // SAFETY: a length query (NULL buffer), then a buffer of that length plus the NUL.
    unsafe {
        let len = get(object, std::ptr::null_mut(), 0);
        if len <= 0 {
            stack(api);
            return None;
        }
        let mut name = vec![0u8; len as usize + 1];
        get(object, name.as_mut_ptr().cast(), name.len());
        name.truncate(len as usize);
        Some(String::from_utf8_lossy(&name).into_owned())
    }
}

/// The dataset's dimensions (`H5Sget_simple_extent_dims`; none for a scalar or null dataspace).
pub fn dimensions(api: &Hdf5Api, dataset: hid_t) -> Result<Vec<u64>, Hdf5Error> {
    // SAFETY: a dataset id HDF5 checks; the dataspace is closed when its `Owned` drops; `dims` has room
    // for HDF5's largest rank.
    unsafe {
        let space = (api.H5Dget_space?)(dataset);
        let space = Owned::new(api, IdKind::Dataspace, space, "H5Dget_space")?;
        let mut dims = [0 as hsize_t; H5S_MAX_RANK];
        let rank =
            (api.H5Sget_simple_extent_dims?)(space.id(), dims.as_mut_ptr(), std::ptr::null_mut());
        Hdf5Error::check(api, rank, "H5Sget_simple_extent_dims")?;
        Ok(dims[..rank as usize].to_vec())
    }
}

/// The driver the file holding `dataset` is open with: `None` when it is h5gds's `gds` driver,
/// else its name (or a description when HDF5 cannot tell). The caller holds the lock of `api`'s
/// HDF5.
pub fn other_driver(api: &Hdf5Api, dataset: hid_t) -> Result<Option<String>, Hdf5Error> {
    let unknown = || Some("(unknown: HDF5 cannot tell which)".to_string());
    let (Ok(file_of), Ok(access_of), Ok(driver_of), Ok(class_of)) = (
        api.H5Iget_file_id,
        api.H5Fget_access_plist,
        api.H5Pget_driver,
        api.H5FD_get_class,
    ) else {
        return Ok(unknown());
    };
    // SAFETY: plain queries on ids HDF5 checks, each id opened here owned by an `Owned`; the
    // class HDF5 returns is its copy of a registered class, of the layout the driver's `abi`
    // declares, read while the file is open.
    unsafe {
        let file = Owned::new(api, IdKind::File, file_of(dataset), "H5Iget_file_id")?;
        let fapl = Owned::new(
            api,
            IdKind::PropertyList,
            access_of(file.id()),
            "H5Fget_access_plist",
        );
        let driver = fapl.as_ref().map_or(-1, |fapl| driver_of(fapl.id()));
        let class = match driver {
            ..0 => std::ptr::null(),
            _ => class_of(driver).cast::<h5gds::abi::H5FD_class_t>(),
        };
        drop((fapl, file));
        if class.is_null() {
            stack(api);
            return Ok(unknown());
        }
        if h5gds::h5gds_library(class).is_ok() {
            return Ok(None);
        }
        let name = (*class).name;
        Ok(Some(match name.is_null() {
            true => "(unnamed)".into(),
            false => std::ffi::CStr::from_ptr(name)
                .to_string_lossy()
                .into_owned(),
        }))
    }
}
