//! HDF5 dataspace selections, read through the H5S API of the HDF5 library that made the request
//! (resolved at run time with the rest of that library's API in `hdf5_runtime`), for the driver's
//! selection callbacks.
//!
//! A selection becomes either a [`Strided`] pattern (any regular hyperslab, or "all"), computed
//! in Rust without a call per element, or an irregular selection walked with HDF5's own selection
//! iterator (`H5Ssel_iter_*`) in batches.

use crate::abi::{herr_t, hid_t, hsize_t, htri_t, H5S_MAX_RANK, H5S_SEL_ALL};
use crate::abi::{H5S_SEL_HYPERSLABS, H5S_SEL_NONE};
use crate::error::{Error, Result};
use crate::io::strided::Strided;
use std::ffi::{c_int, c_uint, c_void, CStr};

type GetSelectType = unsafe extern "C" fn(space: hid_t) -> c_int;
type IsRegular = unsafe extern "C" fn(space: hid_t) -> htri_t;
type GetRegular = unsafe extern "C" fn(
    space: hid_t,
    start: *mut hsize_t,
    stride: *mut hsize_t,
    count: *mut hsize_t,
    block: *mut hsize_t,
) -> herr_t;
type GetDims = unsafe extern "C" fn(space: hid_t, dims: *mut hsize_t, max: *mut hsize_t) -> c_int;
type GetBounds =
    unsafe extern "C" fn(space: hid_t, start: *mut hsize_t, end: *mut hsize_t) -> herr_t;
type IterCreate = unsafe extern "C" fn(space: hid_t, elmt_size: usize, flags: c_uint) -> hid_t;
type IterGetSeqList = unsafe extern "C" fn(
    iter: hid_t,
    maxseq: usize,
    maxbytes: usize,
    nseq: *mut usize,
    nbytes: *mut usize,
    off: *mut hsize_t,
    len: *mut usize,
) -> herr_t;
type IterClose = unsafe extern "C" fn(iter: hid_t) -> herr_t;

/// The H5S entry points the selection callbacks use, from one loaded HDF5 library.
pub struct SpaceApi {
    get_select_type: GetSelectType,
    is_regular: IsRegular,
    get_regular: GetRegular,
    get_dims: GetDims,
    get_bounds: GetBounds,
    iter_create: IterCreate,
    iter_get_seq_list: IterGetSeqList,
    iter_close: IterClose,
}

const SYMBOLS: [&CStr; 8] = [
    c"H5Sget_select_type",
    c"H5Sis_regular_hyperslab",
    c"H5Sget_regular_hyperslab",
    c"H5Sget_simple_extent_dims",
    c"H5Sget_select_bounds",
    c"H5Ssel_iter_create",
    c"H5Ssel_iter_get_seq_list",
    c"H5Ssel_iter_close",
];

impl SpaceApi {
    /// The H5S entry points as `symbol` finds them in one HDF5 library; None unless all are there.
    pub fn resolve(symbol: impl Fn(&CStr) -> Option<*mut c_void>) -> Option<SpaceApi> {
        let mut found: [*mut c_void; 8] = [std::ptr::null_mut(); 8];
        for (slot, name) in found.iter_mut().zip(SYMBOLS) {
            *slot = symbol(name)?;
        }
        // SAFETY: each symbol has the C signature declared above (HDF5 1.14 and 2.x, H5Spublic.h).
        unsafe {
            Some(SpaceApi {
                get_select_type: std::mem::transmute::<*mut c_void, GetSelectType>(found[0]),
                is_regular: std::mem::transmute::<*mut c_void, IsRegular>(found[1]),
                get_regular: std::mem::transmute::<*mut c_void, GetRegular>(found[2]),
                get_dims: std::mem::transmute::<*mut c_void, GetDims>(found[3]),
                get_bounds: std::mem::transmute::<*mut c_void, GetBounds>(found[4]),
                iter_create: std::mem::transmute::<*mut c_void, IterCreate>(found[5]),
                iter_get_seq_list: std::mem::transmute::<*mut c_void, IterGetSeqList>(found[6]),
                iter_close: std::mem::transmute::<*mut c_void, IterClose>(found[7]),
            })
        }
    }
}

/// How one side (memory or file) of a selection is laid out.
pub enum Shape {
    /// Nothing selected.
    Empty,
    /// A regular pattern, in bytes from the start of the dataspace.
    Strided(Strided),
    /// Anything else (point selections, unions of hyperslabs): walked with HDF5's iterator.
    Irregular,
}

fn check(call: &str, status: i64) -> Result<()> {
    if status < 0 {
        return Err(Error::InvalidArgument(format!(
            "{call} failed on a dataspace of a selection request"
        )));
    }
    Ok(())
}

impl SpaceApi {
    /// The layout of `space`'s selection for elements of `elem` bytes.
    pub fn shape(&self, space: hid_t, elem: usize) -> Result<Shape> {
        // SAFETY: queries on a dataspace id HDF5 handed the driver, with out-arrays of the
        // largest rank HDF5 allows.
        unsafe {
            let sel = (self.get_select_type)(space);
            check("H5Sget_select_type", sel as i64)?;
            if sel == H5S_SEL_NONE {
                return Ok(Shape::Empty);
            }
            // Each H5S call costs about half a microsecond; a small read makes few of them.
            let mut dims = [0 as hsize_t; H5S_MAX_RANK];
            let rank = (self.get_dims)(space, dims.as_mut_ptr(), std::ptr::null_mut());
            check("H5Sget_simple_extent_dims", rank as i64)?;
            let rank = (rank as usize).min(H5S_MAX_RANK);
            let dims = &dims[..rank];
            let (mut start, mut stride, mut count, mut block) = (
                [0 as hsize_t; H5S_MAX_RANK],
                [1 as hsize_t; H5S_MAX_RANK],
                [1 as hsize_t; H5S_MAX_RANK],
                [1 as hsize_t; H5S_MAX_RANK],
            );
            if sel == H5S_SEL_ALL {
                block[..rank].copy_from_slice(dims);
            } else if sel == H5S_SEL_HYPERSLABS && (self.is_regular)(space) > 0 {
                check(
                    "H5Sget_regular_hyperslab",
                    (self.get_regular)(
                        space,
                        start.as_mut_ptr(),
                        stride.as_mut_ptr(),
                        count.as_mut_ptr(),
                        block.as_mut_ptr(),
                    ) as i64,
                )?;
                // A selection moved by an offset (H5Soffset_simple; HDF5 1.14 reads chunks that
                // way) reports its hyperslab without the offset, its bounds with it: a regular
                // hyperslab starts at its lower bound.
                let (mut lo, mut hi) = ([0 as hsize_t; H5S_MAX_RANK], [0 as hsize_t; H5S_MAX_RANK]);
                check(
                    "H5Sget_select_bounds",
                    (self.get_bounds)(space, lo.as_mut_ptr(), hi.as_mut_ptr()) as i64,
                )?;
                if (0..rank).any(|d| hi[d] >= dims[d]) {
                    return Err(Error::InvalidArgument(format!(
                        "selection reaches {:?}, outside the extent {dims:?}",
                        &hi[..rank]
                    )));
                }
                start[..rank].copy_from_slice(&lo[..rank]);
            } else {
                return Ok(Shape::Irregular);
            }
            if (0..rank).any(|d| count[d] == 0 || block[d] == 0) {
                return Ok(Shape::Empty);
            }
            Ok(Shape::Strided(Strided::from_hyperslab(
                elem,
                dims,
                &start[..rank],
                &stride[..rank],
                &count[..rank],
                &block[..rank],
            )?))
        }
    }

    /// HDF5's iterator over `space`'s selection, in (byte offset, byte length) sequences.
    pub fn iter(&self, space: hid_t, elem: usize) -> Result<SeqIter<'_>> {
        // SAFETY: creates an iterator on a dataspace id HDF5 handed the driver; flags 0 copy the
        // selection, so the iterator stays valid on its own.
        let id = unsafe { (self.iter_create)(space, elem, 0) };
        check("H5Ssel_iter_create", id)?;
        Ok(SeqIter { api: self, id })
    }
}

/// An open `H5Ssel_iter`, closed on drop.
pub struct SeqIter<'a> {
    api: &'a SpaceApi,
    id: hid_t,
}

impl SeqIter<'_> {
    /// Fills `off`/`len` with the next sequences; returns how many (0 at the end).
    pub fn next_batch(&mut self, off: &mut [u64], len: &mut [usize]) -> Result<usize> {
        let (mut nseq, mut nbytes) = (0usize, 0usize);
        let max = off.len().min(len.len());
        // SAFETY: both arrays hold at least `max` entries.
        let status = unsafe {
            (self.api.iter_get_seq_list)(
                self.id,
                max,
                usize::MAX,
                &mut nseq,
                &mut nbytes,
                off.as_mut_ptr(),
                len.as_mut_ptr(),
            )
        };
        check("H5Ssel_iter_get_seq_list", status as i64)?;
        Ok(nseq.min(max))
    }
}

impl Drop for SeqIter<'_> {
    fn drop(&mut self) {
        // SAFETY: closes the iterator this value created, once.
        unsafe { (self.api.iter_close)(self.id) };
    }
}
