//! The layout of one side (memory or file) of a selection request, from what the calling HDF5's
//! H5S functions (`h5gds_runtime::hdf5::space`) say it selects: a regular hyperslab (or "all")
//! becomes a [`Strided`] pattern, computed in Rust without a call per element; anything else is
//! walked with HDF5's own selection iterator.

use crate::error::{Error, Result};
use crate::io::strided::Strided;
use h5gds_runtime::hdf5::hid_t;
use h5gds_runtime::hdf5::space::{Selection, SpaceError};
use h5gds_runtime::hdf5::Hdf5Library;

/// How one side (memory or file) of a selection is laid out.
pub enum Shape {
    /// Nothing selected.
    Empty,
    /// A regular pattern, in bytes from the start of the dataspace.
    Strided(Strided),
    /// Anything else (point selections, unions of hyperslabs): walked with HDF5's iterator.
    Irregular,
}

impl From<SpaceError> for Error {
    fn from(err: SpaceError) -> Error {
        Error::InvalidArgument(err.0)
    }
}

/// The layout of `space`'s selection for elements of `elem` bytes.
pub fn shape(api: &Hdf5Library, space: hid_t, elem: usize) -> Result<Shape> {
    // Matched in place, by reference: moving the answer out of its `Result` copied its 1.3 KB
    // (`H5S_MAX_RANK` arrays) twice per side of every selection request.
    Ok(match &api.selection(space) {
        Err(err) => return Err(Error::InvalidArgument(err.0.clone())),
        Ok(Selection::None) => Shape::Empty,
        Ok(Selection::Irregular) => Shape::Irregular,
        Ok(Selection::Regular(slab)) if slab.is_empty() => Shape::Empty,
        Ok(Selection::Regular(slab)) => Shape::Strided(Strided::from_hyperslab(
            elem,
            slab.dims(),
            slab.start(),
            slab.stride(),
            slab.count(),
            slab.block(),
        )?),
    })
}
