//! Moving bytes between the file and memory.

pub mod host;
pub mod parallel;
pub mod posix;
pub mod vector;
