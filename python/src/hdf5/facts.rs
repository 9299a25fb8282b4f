//! What the one native call of `h5gds.read`/`h5gds.write` asks HDF5 about a dataset
//! (`crate::facts`): how it is stored, whether its file can change, its name and dimensions.

use super::{api, stack, Herr, Hid, Hsize, MAX_RANK};
use h5gds_runtime::hdf5::{Hdf5Api, HADDR_UNDEF};
use std::ffi::{c_int, c_uint};

/// HDF5's layouts (`H5D_layout_t`).
const H5D_COMPACT: c_int = 0;
const H5D_CONTIGUOUS: c_int = 1;
const H5D_CHUNKED: c_int = 2;
/// `H5F_ACC_RDWR` and `H5F_ACC_SWMR_READ` of a file's intent.
const H5F_ACC_RDWR: c_uint = 0x0001;
const H5F_ACC_SWMR_READ: c_uint = 0x0040;

/// An id this module opened, closed with `close` when dropped.
struct Opened(Hid, unsafe extern "C" fn(Hid) -> Herr);

impl Opened {
    fn new(
        api: &Hdf5Api,
        id: Hid,
        close: unsafe extern "C" fn(Hid) -> Herr,
        what: &str,
    ) -> Result<Opened, String> {
        if id < 0 {
            return Err(format!("{what} failed: {}", stack(api)));
        }
        Ok(Opened(id, close))
    }
}

impl Drop for Opened {
    fn drop(&mut self) {
        // SAFETY: an id HDF5 handed to this module, closed once with its own close function.
        unsafe { (self.1)(self.0) };
    }
}

/// How a dataset is stored, as its creation property list says (`H5D_layout_t`).
pub enum StoredLayout {
    /// One run of bytes: at `address` where allocated; `external`: in external files.
    Contiguous {
        address: Option<u64>,
        external: bool,
    },
    Compact,
    /// Chunks of `chunk` elements through the pipeline `filters` (`(id, client values)` in
    /// order); `cache_bytes`: the dataset's chunk cache size.
    Chunked {
        chunk: Vec<u64>,
        filters: Vec<(i32, Vec<u32>)>,
        cache_bytes: usize,
    },
    Virtual,
}

/// What the one native call needs to know about a dataset, asked of HDF5 once per call.
pub struct DatasetFacts {
    pub layout: StoredLayout,
    /// The stored type is the memory type in HDF5's terms (`H5Tequal`): HDF5 converts nothing.
    pub same_type: bool,
    /// The stored element's size in bytes.
    pub stored_size: usize,
}

/// The layout of `dataset` and whether its stored type is `mem_type`. The caller holds h5py's
/// lock.
pub fn dataset_facts(dataset: Hid, mem_type: Hid) -> Result<DatasetFacts, String> {
    let api = api()?;
    // SAFETY: plain queries on ids HDF5 checks (a failure is reported, its stack cleared);
    // every id opened here is closed by `Opened`; the out-pointers are valid for the calls.
    unsafe {
        let stored_type = Opened::new(
            api,
            (api.H5Dget_type?)(dataset),
            api.H5Tclose?,
            "H5Dget_type",
        )?;
        let same_type = (api.H5Tequal?)(stored_type.0, mem_type) > 0;
        let stored_size = (api.H5Tget_size?)(stored_type.0);
        let dcpl = Opened::new(
            api,
            (api.H5Dget_create_plist?)(dataset),
            api.H5Pclose?,
            "H5Dget_create_plist",
        )?;
        let layout = match (api.H5Pget_layout?)(dcpl.0) {
            H5D_CONTIGUOUS => {
                let address = (api.H5Dget_offset?)(dataset);
                stack(api); // an unallocated dataset has no offset: not an error here
                StoredLayout::Contiguous {
                    address: (address != HADDR_UNDEF).then_some(address),
                    external: (api.H5Pget_external_count?)(dcpl.0) > 0,
                }
            }
            H5D_COMPACT => StoredLayout::Compact,
            H5D_CHUNKED => {
                let mut dims = [0 as Hsize; MAX_RANK];
                let rank = (api.H5Pget_chunk?)(dcpl.0, MAX_RANK as c_int, dims.as_mut_ptr());
                if rank < 0 {
                    return Err(format!("H5Pget_chunk failed: {}", stack(api)));
                }
                let mut filters = Vec::new();
                for i in 0..(api.H5Pget_nfilters?)(dcpl.0).max(0) as c_uint {
                    filters.push(filter(api, dcpl.0, i)?);
                }
                let dapl = Opened::new(
                    api,
                    (api.H5Dget_access_plist?)(dataset),
                    api.H5Pclose?,
                    "H5Dget_access_plist",
                )?;
                let (mut slots, mut cache_bytes, mut w0) = (0usize, 0usize, 0f64);
                if (api.H5Pget_chunk_cache?)(dapl.0, &mut slots, &mut cache_bytes, &mut w0) < 0 {
                    return Err(format!("H5Pget_chunk_cache failed: {}", stack(api)));
                }
                StoredLayout::Chunked {
                    chunk: dims[..rank as usize].to_vec(),
                    filters,
                    cache_bytes,
                }
            }
            _ => StoredLayout::Virtual,
        };
        Ok(DatasetFacts {
            layout,
            same_type,
            stored_size,
        })
    }
}

/// Filter `index` of the pipeline in `dcpl`: its id and client values.
///
/// # Safety
/// `dcpl` must be an open dataset creation property list with more than `index` filters.
unsafe fn filter(api: &Hdf5Api, dcpl: Hid, index: c_uint) -> Result<(i32, Vec<u32>), String> {
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
        if id < 0 {
            return Err(format!("H5Pget_filter2 failed: {}", stack(api)));
        }
        if count <= values.len() {
            values.truncate(count);
            return Ok((id, values));
        }
        values.resize(count, 0);
    }
}

/// Whether the file holding `dataset` is open read-only and not for SWMR reading: nothing can
/// change its storage while it is open. The caller holds h5py's lock.
pub fn read_only_file(dataset: Hid) -> Result<bool, String> {
    let api = api()?;
    // SAFETY: plain queries on ids HDF5 checks; the file id opened here is closed by `Opened`.
    unsafe {
        let file = Opened::new(
            api,
            (api.H5Iget_file_id?)(dataset),
            api.H5Fclose?,
            "H5Iget_file_id",
        )?;
        let mut intent: c_uint = H5F_ACC_RDWR;
        if (api.H5Fget_intent?)(file.0, &mut intent) < 0 {
            return Err(format!("H5Fget_intent failed: {}", stack(api)));
        }
        Ok(intent & (H5F_ACC_RDWR | H5F_ACC_SWMR_READ) == 0)
    }
}

/// The dataset's name in its file (`H5Iget_name`), "None" for an anonymous dataset, as h5py's
/// `Dataset.name` prints. The caller holds h5py's lock.
pub fn object_name(object: Hid) -> String {
    let Some(get) = api().ok().and_then(|api| api.H5Iget_name.ok()) else {
        return "None".into();
    };
    // SAFETY: a length query (NULL buffer), then a buffer of that length plus the NUL.
    unsafe {
        let len = get(object, std::ptr::null_mut(), 0);
        if len <= 0 {
            if let Ok(api) = api() {
                stack(api);
            }
            return "None".into();
        }
        let mut name = vec![0u8; len as usize + 1];
        get(object, name.as_mut_ptr().cast(), name.len());
        name.truncate(len as usize);
        String::from_utf8_lossy(&name).into_owned()
    }
}
