//! HDF5's compressed chunks on the host, with no HDF5 binding of its own: the filters' stored
//! formats ([`format`](mod@format), which the GPU codec uses too), the pipelines h5gds decodes
//! itself and the decoding of one chunk ([`pipeline`]), which chunks a selection touches and the
//! copy of their elements into place ([`place`]), a dataset's chunk index held compactly for
//! lookups with no HDF5 call ([`index`]), and a selection read with its chunks decoded in parallel
//! on the process's thread pool ([`read()`]; several selections, such as a gather's runs of rows,
//! with each chunk decoded once for all of them: [`read_placed`]). The Python extension (h5py's
//! HDF5) and array-io (hdf5-metno) supply the raw chunk reads; pipelines it does not decode stay
//! with HDF5. Writing goes the other way ([`encode`]): an array cut into chunks encoded in parallel
//! on the same pool, which the caller writes raw in chunk order.

pub mod encode;
mod fletcher32;
pub mod format;
mod in_flight;
pub mod index;
mod lz4_frame;
pub mod pipeline;
pub mod place;
pub mod read;
mod shuffle;
mod step_buffers;

pub use encode::{ChunkWriter, EncodeScratch, Encoding, HostWrite};
pub use index::{ChunkIndex, ChunkListing};
pub use pipeline::{chunks_decoded, Filter, Pipeline};
pub use place::Hyperslab;
pub use read::{
    place_missing, read, read_placed, read_stored_at, reopen, Decoding, HostRead, Outcome, Placed,
    RawChunks, StoredChunk, LIST_INDEX_FROM,
};
