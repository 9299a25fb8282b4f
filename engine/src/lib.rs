//! The one engine of dataset reads and writes, beneath array-io (its `ndarray`/cudarc face) and
//! the Python extension (its pyo3 face), so that each way of moving a dataset is written once.
//! It holds no `ndarray`, pyo3 nor HDF5 binding: the faces convert their arrays and errors and
//! hand it the table of their HDF5's functions (`h5gds_runtime::hdf5::Hdf5Api`). It holds the
//! collective decomposition ([`tiles`]) and the HDF5 side of stored chunks ([`chunks`]).

pub mod chunks;
pub mod tiles;
