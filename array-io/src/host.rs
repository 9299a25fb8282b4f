//! Host arrays (`ndarray`) to and from files: one `H5Dwrite` or `H5Dread` of the whole array (or
//! of one block, for batched reads) through the `gds` driver's host path, which is sec2 with
//! large reads split across threads (or through sec2 itself with `H5GDS_USE_VFD_GDS=0`).

use crate::driver::Driver;
use crate::element::{descriptor_of, Element};
use crate::error::{Error, Result};
use crate::file::{create_dataset, open_dataset, Metno, OpenDataset};
use crate::hdf5_raw::NewLayout;
use crate::layout::{check_types, Types};
use crate::options::{DevicePath, Settings};
use crate::select::Block;
use crate::ReadOptions;
use h5gds_chunk_codec::Hyperslab;
use h5gds_engine::{Dataset, Selection};
use ndarray::{ArrayBase, ArrayD, Data, Dimension, IxDyn};
use std::path::Path;

/// The driver for host data: `gds` unless the settings ask for the staged path (then sec2).
pub(crate) fn host_driver(settings: &Settings) -> Result<Driver> {
    Ok(match settings.device_path()? {
        DevicePath::Staged => Driver::Sec2,
        DevicePath::Gds | DevicePath::Auto => Driver::Gds,
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
    let contiguous = (&shape[..], NewLayout::Contiguous { early: false });
    let (ds, mem_type) = create_dataset(path, dataset, driver, &desc, contiguous)?;
    if !standard.is_empty() {
        let elements = standard.as_slice().expect("standard layout is contiguous");
        // SAFETY: the elements' own initialised bytes, borrowed for the write.
        let bytes = unsafe {
            std::slice::from_raw_parts(elements.as_ptr().cast(), std::mem::size_of_val(elements))
        };
        let (zeros, ones) = (vec![0; shape.len()], vec![1; shape.len()]);
        let all = Hyperslab {
            start: &zeros,
            step: &ones,
            count: &shape,
        };
        (ds.engine(&mem_type).write(all, bytes)).map_err(Error::engine(path, dataset))?;
    }
    ds.close()
}

/// Reads `region` (file coordinates) of an open dataset into a host array of its shape through
/// the engine's dataset handle (`h5gds_engine::Dataset`, the way `policy::host_read` takes, as
/// the Python package's); chunks h5gds decodes are decoded on the driver's I/O threads (its
/// settings, loaded once per open dataset).
pub(crate) fn read_region<T: Element>(
    ds: &OpenDataset,
    types: &Types,
    region: &Block,
) -> Result<ArrayD<T>> {
    let shape: Vec<usize> = region.count.iter().map(|&d| d as usize).collect();
    let mut values: Vec<T> = zeroed(region.len() as usize);
    if !values.is_empty() {
        let ones = vec![1; region.count.len()];
        let slab = Selection::Slab(Hyperslab {
            start: &region.start,
            step: &ones,
            count: &region.count,
        });
        let handle = ds.handle(types);
        handle
            .read(slab, bytes_of(&mut values))
            .map_err(Error::engine(&ds.path, &ds.name))?;
    }
    shaped(shape, checked(ds, values)?)
}

impl OpenDataset {
    /// The engine's handle of this dataset, its elements moved as `types.mem`, keeping what the
    /// engine learns of it in the open dataset (its storage for reads with no HDF5 call,
    /// resolved at its first read).
    pub(crate) fn handle(&self, types: &Types) -> Dataset<'_, Metno> {
        self.engine(&types.mem).keeping(&self.kept)
    }
}

/// From this size on, a new host array's memory is asked of the kernel in huge pages, as NumPy
/// asks for its arrays (`madvise(MADV_HUGEPAGE)` from 4 MiB): with 4 KiB pages, faulting in a
/// fresh array cost more than reading the file into it (a 128 MiB read spent most of its time in
/// page faults where `h5gds.from_file`'s NumPy array did not).
const HUGE_PAGES_FROM: usize = 4 << 20;

/// A vector of `n` elements of zero bytes (a valid value of every element type: integers,
/// floats, bool false), zeroed by the allocator (a large one's fresh pages are the kernel's zero
/// pages, with no pass over them), its memory advised to be backed by huge pages where it is large
/// (advice only: where the kernel has none to give it changes nothing).
fn zeroed<T: Element>(n: usize) -> Vec<T> {
    let layout = std::alloc::Layout::array::<T>(n).expect("capacity overflow");
    if layout.size() == 0 {
        return Vec::new();
    }
    // SAFETY: a layout of non-zero size.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<T>();
    if ptr.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    // SAFETY: allocated by the global allocator with the layout of `n` elements of T, each of
    // zero bytes, a valid value of every Element type (`ValidAsZeroBits`).
    let mut values = unsafe { Vec::from_raw_parts(ptr, n, n) };
    let bytes = layout.size();
    if bytes >= HUGE_PAGES_FROM {
        const HUGE: usize = 2 << 20;
        let start = values.as_mut_ptr() as usize;
        let first = start.next_multiple_of(HUGE);
        let end = (start + bytes) & !(HUGE - 1);
        if end > first {
            // SAFETY: the range lies inside this vector's own allocation, untouched yet; the
            // advice changes how its pages are backed, not their contents or mapping.
            unsafe { libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE) };
        }
    }
    values
}

/// The elements of `values` as bytes: where the engine and the host decoding write the stored
/// type's bytes (no conversion is planned when they read). Taken through the vector's pointer,
/// never a slice of `T`: a bool read may write bytes other than 0 and 1, which [`checked`]
/// refuses before any element is read as `T`.
fn bytes_of<T: Element>(values: &mut Vec<T>) -> &mut [u8] {
    let len = values.len() * std::mem::size_of::<T>();
    // SAFETY: the vector's own initialised elements, borrowed mutably from it, as bytes (every
    // byte of an Element is initialised).
    unsafe { std::slice::from_raw_parts_mut(values.as_mut_ptr().cast::<u8>(), len) }
}

/// `values` as read, after checking, for `bool`, that each byte is 0 or 1.
fn checked<T: Element>(ds: &OpenDataset, values: Vec<T>) -> Result<Vec<T>> {
    if T::CHECKED_BYTES {
        // SAFETY: the one-byte elements, read as bytes only.
        let bytes =
            unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), values.len()) };
        h5gds_engine::Error::check_bools(bytes, &ds.name)
            .map_err(Error::engine(&ds.path, &ds.name))?;
    }
    Ok(values)
}

/// `values` as an array of `shape`.
pub(crate) fn shaped<T>(shape: Vec<usize>, values: Vec<T>) -> Result<ArrayD<T>> {
    let actual = values.len();
    ArrayD::from_shape_vec(IxDyn(&shape), values).map_err(|_| Error::ShapeMismatch {
        expected: shape.iter().product(),
        shape,
        actual,
    })
}

/// Reads rows `rows` of a dataset (indices along its first axis, in any order, repeats allowed,
/// negative ones from the end) into a host array of one row per index (see
/// [`crate::from_file_rows`]), the way `h5gds_engine::policy::gather` decides.
pub(crate) fn read_rows<T: Element>(
    path: &Path,
    dataset: &str,
    rows: &[i64],
    options: &ReadOptions,
) -> Result<ArrayD<T>> {
    let (ds, types) = open_checked::<T>(path, dataset, options)?;
    let Some((&extent, rest)) = ds.shape.split_first() else {
        return Err(Error::UnsupportedDataset {
            path: ds.path.clone(),
            dataset: ds.name.clone(),
            reason: "is a scalar: it has no rows to read".into(),
        });
    };
    let resolved = rows
        .iter()
        .map(|&index| {
            let row = if index < 0 {
                (extent as i64).checked_add(index)
            } else {
                Some(index)
            };
            row.filter(|&r| r >= 0 && (r as u64) < extent)
                .map(|r| r as u64)
                .ok_or_else(|| Error::RowOutOfRange {
                    path: ds.path.clone(),
                    dataset: ds.name.clone(),
                    index,
                    rows: extent,
                })
        })
        .collect::<Result<Vec<u64>>>()?;
    let row_len: u64 = rest.iter().product();
    let mut shape: Vec<usize> = vec![rows.len()];
    shape.extend(rest.iter().map(|&d| d as usize));
    // Every row whole: all of the other axes.
    let (zeros, ones) = (vec![0; rest.len()], vec![1; rest.len()]);
    let rest = Hyperslab {
        start: &zeros,
        step: &ones,
        count: rest,
    };
    let mut out: Vec<T> = zeroed(rows.len() * row_len as usize);
    let sel = Selection::Rows {
        rows: &resolved,
        rest,
    };
    ds.handle(&types)
        .read(sel, bytes_of(&mut out))
        .map_err(Error::engine(&ds.path, &ds.name))?;
    let out = checked(&ds, out)?;
    drop(types);
    ds.close()?;
    shaped(shape, out)
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

/// Reads the box `region` gives of a dataset's shape into a host array (the whole dataset: see
/// [`crate::from_file`]).
pub(crate) fn read<T: Element>(
    path: &Path,
    dataset: &str,
    options: &ReadOptions,
    region: impl FnOnce(&[u64]) -> Result<Block>,
) -> Result<ArrayD<T>> {
    let (ds, types) = open_checked::<T>(path, dataset, options)?;
    let array = read_region(&ds, &types, &region(&ds.shape)?)?;
    drop(types);
    ds.close()?;
    Ok(array)
}
