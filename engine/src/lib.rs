//! The one engine of dataset reads and writes, beneath array-io (its `ndarray`/cudarc face) and
//! the Python extension (its pyo3 face), so that each way of moving a dataset is written once.
//! It holds no `ndarray`, pyo3, HDF5 binding nor CUDA: the faces convert their arrays and
//! errors. Today it holds the collective decomposition ([`tiles`]).
#![forbid(unsafe_code)]

pub mod tiles;
