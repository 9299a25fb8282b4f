//! The collective write, written once for both faces (docs/mpi.md, "How a collective write
//! works"), over a small [`Communicator`] each face implements (array-io over rsmpi, the Python
//! extension over mpi4py), and the agreements every collective call ends its steps with:
//!
//! - [`write`]: the protocol (describe, create, write, finish) and the [`Writer`] a face brings;
//! - [`agree`]: the agreements, and the [`Communicator`] trait;
//! - [`error`]: the account of a failed collective call ([`CollectiveError`], each rank's
//!   [`Failure`]), which reaches the faces as the engine's one [`crate::Error`];
//! - [`description`]: what a rank tells the others, and the check every rank makes alike;
//! - [`wire`]: the encoding of the messages;
//! - [`target`]: the temporary file next to the target, renamed into place or removed;
//! - `driver_file`: the file opened through its driver alone (`H5FDopen`), over a face's table;
//! - `tile_write`: one rank's tile's byte runs written through it, straight or staged.

pub mod agree;
pub mod description;
pub(crate) mod driver_file;
pub mod error;
pub mod target;
pub(crate) mod tile_write;
pub mod wire;
pub mod write;

pub use agree::{agree, Communicator};
pub use description::Tile;
pub use error::{CollectiveError, Failure, Field};
pub use write::{write, TileFile, Writer};
