//! The benchmarks behind `h5gds bench`: the `gds` driver against sec2 and a plain `pread`
//! roofline for host memory, and against the 128 MB staged path for device memory; alternatives
//! interleaved in one run and reported as ratios.

pub mod access;
pub mod device;
pub mod gpu;
pub mod h5;
pub mod host;
pub mod report;
pub mod stats;
