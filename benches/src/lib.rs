//! The benchmarks behind `h5gds bench`: the `gds` driver against sec2 and a plain `pread`
//! roofline for host memory, and against the 128 MB staged path for device memory; alternatives
//! interleaved in one run and reported as ratios. HDF5 goes through hdf5-metno and array-io's
//! raw layer (`array_io::hdf5_raw`).

#![deny(unsafe_op_in_unsafe_fn)]

pub mod access;
pub mod device;
pub mod gpu;
pub mod harness;
pub mod host;
pub mod report;
pub mod stats;
