//! Host arrays (`ndarray`) to and from files: one `H5Dwrite` or `H5Dread` of the whole array (or
//! of one block, for batched reads) through the `gds` driver's host path, which is sec2 with
//! large reads split across threads (or through sec2 itself with `H5GDS_USE_VFD_GDS=0`).

use crate::driver::{DevicePath, Driver, Settings};
use crate::element::{descriptor_of, first_invalid_bool, Element};
use crate::error::{Error, Result};
use crate::file::{create_file, open_dataset, OpenDataset};
use crate::hdf::{check, dataspace, locked, selection, Handle};
use crate::layout::{check_types, Types};
use crate::select::Block;
use crate::ReadOptions;
use hdf5_sys::h5d::{H5D_fill_time_t, H5Dclose, H5Dcreate2, H5Dread, H5Dwrite};
use hdf5_sys::h5i::hid_t;
use hdf5_sys::h5p::{
    H5Pclose, H5Pcreate, H5Pset_create_intermediate_group, H5Pset_fill_time,
    H5P_CLS_DATASET_CREATE, H5P_CLS_LINK_CREATE, H5P_DEFAULT,
};
use hdf5_sys::h5s::H5S_ALL;
use ndarray::{ArrayBase, ArrayD, Data, Dimension, IxDyn};
use std::path::Path;

/// The driver for host data: `gds` unless the settings ask for the staged path (then sec2).
pub(crate) fn host_driver(settings: &Settings) -> Result<Driver> {
    Ok(match settings.device_path()? {
        DevicePath::Staged => Driver::Sec2,
        DevicePath::Gds | DevicePath::Auto => Driver::Gds,
    })
}

/// Creates contiguous dataset `name` of `file_type` and `shape` in `file`, with any missing
/// intermediate groups. Fill values are never written: the whole dataset is written next.
pub(crate) fn create_dataset(
    file: &Handle,
    path: &Path,
    name: &str,
    file_type: hid_t,
    shape: &[u64],
) -> Result<Handle> {
    let space = dataspace(shape, path, Some(name))?;
    let c_name = crate::hdf::c_name(name)?;
    locked(|| {
        // SAFETY: plain calls on ids created here; the C string outlives them.
        unsafe {
            let lcpl = Handle::new(
                H5Pcreate(*H5P_CLS_LINK_CREATE),
                H5Pclose,
                "creating a link creation list",
                path,
                Some(name),
            )?;
            let status = H5Pset_create_intermediate_group(lcpl.id(), 1);
            check(
                status as i64,
                "asking for intermediate groups",
                path,
                Some(name),
            )?;
            let dcpl = Handle::new(
                H5Pcreate(*H5P_CLS_DATASET_CREATE),
                H5Pclose,
                "creating a dataset creation list",
                path,
                Some(name),
            )?;
            let status = H5Pset_fill_time(dcpl.id(), H5D_fill_time_t::H5D_FILL_TIME_NEVER);
            check(status as i64, "setting the fill time", path, Some(name))?;
            Handle::new(
                H5Dcreate2(
                    file.id(),
                    c_name.as_ptr(),
                    file_type,
                    space.id(),
                    lcpl.id(),
                    dcpl.id(),
                    H5P_DEFAULT,
                ),
                H5Dclose,
                "creating the dataset",
                path,
                Some(name),
            )
        }
    })
}

/// Writes a host array as `dataset` of a new file at `path` (see [`crate::to_file`]).
pub(crate) fn write<T, S, D>(
    array: &ArrayBase<S, D>,
    path: &Path,
    dataset: &str,
    settings: &Settings,
) -> Result<()>
where
    T: Element,
    S: Data<Elem = T>,
    D: Dimension,
{
    let desc = descriptor_of::<T>()?;
    crate::file::check_dataset_name(dataset)?;
    let driver = host_driver(settings)?;
    let shape: Vec<u64> = array.shape().iter().map(|&d| d as u64).collect();
    let standard = array.as_standard_layout();
    let file = create_file(path, driver)?;
    let mem_type = locked(|| hdf5::Datatype::from_descriptor(&desc))
        .map_err(|e| Error::hdf5("creating the element type", path, Some(dataset), e))?;
    let dset = create_dataset(&file, path, dataset, mem_type.id(), &shape)?;
    if !standard.is_empty() {
        let elements = standard.as_slice().expect("standard layout is contiguous");
        locked(|| {
            // SAFETY: `elements` holds the whole array, row-major, in the memory type.
            let status = unsafe {
                H5Dwrite(
                    dset.id(),
                    mem_type.id(),
                    H5S_ALL,
                    H5S_ALL,
                    H5P_DEFAULT,
                    elements.as_ptr().cast(),
                )
            };
            check(status as i64, "writing the dataset", path, Some(dataset))
        })?;
    }
    dset.close("closing the dataset", path, Some(dataset))?;
    file.close("closing the file", path, None)
}

/// Reads `region` (file coordinates) of an open dataset into a host array of its shape.
pub(crate) fn read_region<T: Element>(
    ds: &OpenDataset,
    types: &Types,
    region: &Block,
) -> Result<ArrayD<T>> {
    let shape: Vec<usize> = region.count.iter().map(|&d| d as usize).collect();
    let n = region.len() as usize;
    let mut values: Vec<T> = Vec::with_capacity(n);
    if n > 0 {
        let whole = region.count == ds.shape;
        let spaces = if whole {
            None
        } else {
            let file = selection(
                &ds.shape,
                std::slice::from_ref(region),
                &ds.path,
                Some(&ds.name),
            )?;
            let mem = dataspace(&region.count, &ds.path, Some(&ds.name))?;
            Some((mem, file))
        };
        let (m, f) = spaces
            .as_ref()
            .map_or((H5S_ALL, H5S_ALL), |(m, f)| (m.id(), f.id()));
        locked(|| {
            // SAFETY: the vector has room for the region's n elements of the memory type.
            let status = unsafe {
                H5Dread(
                    ds.dset.id(),
                    types.mem.id(),
                    m,
                    f,
                    H5P_DEFAULT,
                    values.as_mut_ptr().cast(),
                )
            };
            check(
                status as i64,
                "reading the dataset",
                &ds.path,
                Some(&ds.name),
            )
        })?;
        if T::CHECKED_BYTES {
            // SAFETY: HDF5 has written all n one-byte elements; they are read as bytes only.
            let bytes = unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), n) };
            if let Some((index, value)) = first_invalid_bool(bytes) {
                return Err(Error::InvalidBool {
                    path: ds.path.clone(),
                    dataset: ds.name.clone(),
                    index,
                    value,
                });
            }
        }
        // SAFETY: HDF5 has initialised all n elements, and (for bool) each is 0 or 1.
        unsafe { values.set_len(n) };
    }
    ArrayD::from_shape_vec(IxDyn(&shape), values).map_err(|_| Error::ShapeMismatch {
        shape: shape.clone(),
        expected: n,
        actual: n,
    })
}

/// Opens a dataset for host reads and checks its type against `T`.
pub(crate) fn open_checked<T: Element>(
    path: &Path,
    dataset: &str,
    options: &ReadOptions,
) -> Result<(OpenDataset, Types)> {
    descriptor_of::<T>()?;
    let driver = host_driver(&options.settings)?;
    let ds = open_dataset(path, dataset, driver, false)?;
    let types = check_types::<T>(&ds, options.allow_conversion)?;
    Ok((ds, types))
}

/// Reads a whole dataset into a host array (see [`crate::from_file`]).
pub(crate) fn read<T: Element>(
    path: &Path,
    dataset: &str,
    options: &ReadOptions,
) -> Result<ArrayD<T>> {
    let (ds, types) = open_checked::<T>(path, dataset, options)?;
    let array = read_region(&ds, &types, &Block::whole(&ds.shape))?;
    drop(types);
    ds.close()?;
    Ok(array)
}
