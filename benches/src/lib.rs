//! The benchmarks behind `h5gds bench`: the `gds` driver against sec2 and against a plain `pread`
//! roofline, alternatives interleaved in one run and reported as ratios.

pub mod h5;
pub mod host;
pub mod report;
pub mod stats;
