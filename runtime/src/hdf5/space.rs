//! The H5S calls of the driver's selection callbacks, from one loaded HDF5 library: what a
//! dataspace selects (nothing, one regular hyperslab, or something irregular), and HDF5's own
//! iterator over an irregular selection (`H5Ssel_iter_*`), in batches.

use super::{herr_t, hid_t, hsize_t, htri_t, H5S_MAX_RANK};
use std::ffi::{c_int, c_uint, c_void, CStr};

// `H5S_sel_type` (H5Spublic.h; checked against real headers by tests/abi_layout.rs).
pub const H5S_SEL_NONE: c_int = 0;
pub const H5S_SEL_HYPERSLABS: c_int = 2;
pub const H5S_SEL_ALL: c_int = 3;

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

/// An H5S call that failed, or a selection outside its extent: the message says which.
#[derive(Debug)]
pub struct SpaceError(pub String);

fn check(call: &str, status: i64) -> Result<(), SpaceError> {
    if status < 0 {
        return Err(SpaceError(format!(
            "{call} failed on a dataspace of a selection request"
        )));
    }
    Ok(())
}

/// A regular hyperslab (or "all": one block of the whole extent), in elements.
pub struct Hyperslab {
    rank: usize,
    dims: [hsize_t; H5S_MAX_RANK],
    start: [hsize_t; H5S_MAX_RANK],
    stride: [hsize_t; H5S_MAX_RANK],
    count: [hsize_t; H5S_MAX_RANK],
    block: [hsize_t; H5S_MAX_RANK],
}

impl Hyperslab {
    pub fn dims(&self) -> &[hsize_t] {
        &self.dims[..self.rank]
    }
    pub fn start(&self) -> &[hsize_t] {
        &self.start[..self.rank]
    }
    pub fn stride(&self) -> &[hsize_t] {
        &self.stride[..self.rank]
    }
    pub fn count(&self) -> &[hsize_t] {
        &self.count[..self.rank]
    }
    pub fn block(&self) -> &[hsize_t] {
        &self.block[..self.rank]
    }
    /// Whether it selects no element (a count or block of 0).
    pub fn is_empty(&self) -> bool {
        self.count().contains(&0) || self.block().contains(&0)
    }
}

/// What a dataspace selects.
// On the stack for one call: boxing the hyperslab would allocate in every small selection read.
#[allow(clippy::large_enum_variant)]
pub enum Selection {
    None,
    Regular(Hyperslab),
    /// Point selections, unions of hyperslabs: walked with [`SpaceApi::iter`].
    Irregular,
}

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

    /// What `space` (a dataspace id of this library) selects.
    pub fn selection(&self, space: hid_t) -> Result<Selection, SpaceError> {
        // SAFETY: queries on a dataspace id HDF5 handed the caller, with out-arrays of the
        // largest rank HDF5 allows.
        unsafe {
            let sel = (self.get_select_type)(space);
            check("H5Sget_select_type", sel as i64)?;
            if sel == H5S_SEL_NONE {
                return Ok(Selection::None);
            }
            // Each H5S call costs about half a microsecond; a small read makes few of them.
            let mut slab = Hyperslab {
                rank: 0,
                dims: [0; H5S_MAX_RANK],
                start: [0; H5S_MAX_RANK],
                stride: [1; H5S_MAX_RANK],
                count: [1; H5S_MAX_RANK],
                block: [1; H5S_MAX_RANK],
            };
            let rank = (self.get_dims)(space, slab.dims.as_mut_ptr(), std::ptr::null_mut());
            check("H5Sget_simple_extent_dims", rank as i64)?;
            slab.rank = (rank as usize).min(H5S_MAX_RANK);
            let rank = slab.rank;
            if sel == H5S_SEL_ALL {
                slab.block[..rank].copy_from_slice(&slab.dims[..rank]);
            } else if sel == H5S_SEL_HYPERSLABS && (self.is_regular)(space) > 0 {
                check(
                    "H5Sget_regular_hyperslab",
                    (self.get_regular)(
                        space,
                        slab.start.as_mut_ptr(),
                        slab.stride.as_mut_ptr(),
                        slab.count.as_mut_ptr(),
                        slab.block.as_mut_ptr(),
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
                if (0..rank).any(|d| hi[d] >= slab.dims[d]) {
                    return Err(SpaceError(format!(
                        "selection reaches {:?}, outside the extent {:?}",
                        &hi[..rank],
                        slab.dims()
                    )));
                }
                slab.start[..rank].copy_from_slice(&lo[..rank]);
            } else {
                return Ok(Selection::Irregular);
            }
            Ok(Selection::Regular(slab))
        }
    }

    /// HDF5's iterator over `space`'s selection, in (byte offset, byte length) sequences.
    pub fn iter(&self, space: hid_t, elem: usize) -> Result<SeqIter<'_>, SpaceError> {
        // SAFETY: creates an iterator on a dataspace id HDF5 handed the caller; flags 0 copy the
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
    pub fn next_batch(&mut self, off: &mut [u64], len: &mut [usize]) -> Result<usize, SpaceError> {
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
