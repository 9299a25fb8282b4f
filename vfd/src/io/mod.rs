//! Moving bytes between the file and memory; each transfer is written once, over a [`Direction`]
//! (defined in `crate::transfer`, which CUDA copies share).

pub(crate) mod bounce;
pub(crate) mod device;
pub(crate) mod gds;
pub(crate) mod host;
pub(crate) mod parallel;
pub(crate) mod posix;
pub(crate) mod strided;
pub(crate) mod target;
pub(crate) mod vector;

pub(crate) use crate::transfer::{BufPtr, Direction, PartialTransfer};
