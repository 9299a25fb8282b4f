//! The H5S calls of the driver's selection callbacks, through one loaded HDF5 library's table:
//! what a dataspace selects (nothing, one regular hyperslab, or something irregular), and HDF5's
//! own iterator over an irregular selection (`H5Ssel_iter_*`), in batches.

use super::api::{Hdf5Api, MissingSymbol};
use super::library::Hdf5Library;
use super::{hid_t, hsize_t, H5S_MAX_RANK};
use std::ffi::c_int;

// `H5S_sel_type` (H5Spublic.h; checked against real headers by tests/abi_layout.rs).
pub const H5S_SEL_NONE: c_int = 0;
pub const H5S_SEL_HYPERSLABS: c_int = 2;
pub const H5S_SEL_ALL: c_int = 3;

/// An H5S call that failed, or a selection outside its extent: the message says which.
#[derive(Debug)]
pub struct SpaceError(pub String);

impl From<MissingSymbol> for SpaceError {
    fn from(missing: MissingSymbol) -> SpaceError {
        SpaceError(format!(
            "{missing}, needed for a dataspace of a selection request"
        ))
    }
}

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
    /// Point selections, unions of hyperslabs: walked with [`Hdf5Library::selection_iter`].
    Irregular,
}

impl Hdf5Library {
    /// What `space` (a dataspace id of this library) selects.
    pub fn selection(&self, space: hid_t) -> Result<Selection, SpaceError> {
        let api = &self.api;
        let (get_select_type, get_dims) = (api.H5Sget_select_type?, api.H5Sget_simple_extent_dims?);
        // SAFETY: queries on a dataspace id HDF5 handed the caller, with out-arrays of the
        // largest rank HDF5 allows.
        unsafe {
            let sel = get_select_type(space);
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
            let rank = get_dims(space, slab.dims.as_mut_ptr(), std::ptr::null_mut());
            check("H5Sget_simple_extent_dims", rank as i64)?;
            slab.rank = (rank as usize).min(H5S_MAX_RANK);
            let rank = slab.rank;
            if sel == H5S_SEL_ALL {
                slab.block[..rank].copy_from_slice(&slab.dims[..rank]);
            } else if sel == H5S_SEL_HYPERSLABS && (api.H5Sis_regular_hyperslab?)(space) > 0 {
                check(
                    "H5Sget_regular_hyperslab",
                    (api.H5Sget_regular_hyperslab?)(
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
                    (api.H5Sget_select_bounds?)(space, lo.as_mut_ptr(), hi.as_mut_ptr()) as i64,
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
    pub fn selection_iter(&self, space: hid_t, elem: usize) -> Result<SeqIter<'_>, SpaceError> {
        let api = &self.api;
        // Both resolved before the iterator exists, so that it can always be closed.
        let (_, _) = (api.H5Ssel_iter_get_seq_list?, api.H5Ssel_iter_close?);
        // SAFETY: creates an iterator on a dataspace id HDF5 handed the caller; flags 0 copy the
        // selection, so the iterator stays valid on its own.
        let id = unsafe { (api.H5Ssel_iter_create?)(space, elem, 0) };
        check("H5Ssel_iter_create", id)?;
        Ok(SeqIter { api, id })
    }
}

/// An open `H5Ssel_iter`, closed on drop.
pub struct SeqIter<'a> {
    api: &'a Hdf5Api,
    id: hid_t,
}

impl SeqIter<'_> {
    /// Fills `off`/`len` with the next sequences; returns how many (0 at the end).
    pub fn next_batch(&mut self, off: &mut [u64], len: &mut [usize]) -> Result<usize, SpaceError> {
        let (mut nseq, mut nbytes) = (0usize, 0usize);
        let max = off.len().min(len.len());
        let get_seq_list = self.api.H5Ssel_iter_get_seq_list?;
        // SAFETY: both arrays hold at least `max` entries.
        let status = unsafe {
            get_seq_list(
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
        if let Ok(close) = self.api.H5Ssel_iter_close {
            // SAFETY: closes the iterator this value created, once.
            unsafe { close(self.id) };
        }
    }
}
