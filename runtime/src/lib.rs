//! h5gds-runtime: the low-level crate beneath the `gds` driver. The driver, `route` and the
//! crates around them share what is here without depending on the driver itself (its CUDA,
//! cuFile and thread pool). ARCHITECTURE.md says what is meant to move here next (CUDA through
//! one wrapper, the loaders of cuFile and nvCOMP, HDF5 resolved at run time, one settings table).
#![forbid(unsafe_code)]

pub mod size;
