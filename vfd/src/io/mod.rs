//! Moving bytes between the file and memory.

pub mod device;
pub mod gds;
pub mod host;
pub mod parallel;
pub mod posix;
pub mod readahead;
pub mod selection;
pub mod staged;
pub mod vector;
