//! How a dataset's bytes may travel between a file and device memory, decided once for every
//! binding: `route` (direct through the `gds` driver, or staged, and why) over plain facts,
//! `select` (the index arithmetic it and the staged paths use), given the settings that choose
//! the path (read by `h5gds_runtime::settings`). Pure functions that depend on no other crate, so
//! array-io (hdf5-metno) and the Python extension (h5py's own HDF5, no libhdf5 linked) share them.
#![forbid(unsafe_code)]

pub mod route;
pub mod select;
