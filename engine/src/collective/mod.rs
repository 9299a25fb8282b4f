//! The shared steps of a collective write (docs/mpi.md, "How a collective write works"), for both
//! faces; the MPI exchange itself stays in each face (rsmpi, mpi4py), which sends the bytes this
//! module makes and words its errors:
//!
//! - [`description`]: what a rank tells the others, and the check every rank makes alike;
//! - [`wire`]: the encoding of the messages;
//! - [`target`]: the temporary file next to the target, renamed into place or removed;
//! - [`driver_file`]: the file opened through its driver alone (`H5FDopen`), over a face's table;
//! - [`tile_write`]: one rank's tile's byte runs written through it, straight or staged.

pub mod description;
pub mod driver_file;
pub mod target;
pub mod tile_write;
pub mod wire;

pub use description::{decode_all, disagreement, Description, Field};
pub use driver_file::{DriverFile, DriverFileError};
pub use target::{finish, temporary_path, FileStepError};
pub use tile_write::{byte_runs, write_runs, write_staged, ByteRun};
pub use wire::{Unwire, Wire};
