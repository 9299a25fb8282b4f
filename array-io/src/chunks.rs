//! A dataset's stored chunks through the engine (`h5gds_engine::chunks`, written once for both
//! faces) over the linked HDF5: the engine's errors as array-io's, naming the file and the dataset, each call under hdf5-metno's lock, and the file read directly by the decoding threads
//! where `OpenDataset::direct_file` allows. The host decoder (`host::read_decoded`) and the GPU
//! decoder (`gpu_codec`) read from the same source; compressed writes
//! (`h5gds_engine::policy::write`) write chunks through the same face.

use crate::error::{Error, Result};
use crate::file::OpenDataset;
use crate::hdf5_raw::{self, linked_hdf5};
use h5gds_engine::chunks::{self as engine, Face, StoredChunks};
use h5gds_engine::Error as EngineError;

/// An open dataset as the engine's chunk source (and its compressed writes) see it.
pub(crate) struct DatasetFace<'a> {
    pub ds: &'a OpenDataset,
}

impl Face for DatasetFace<'_> {
    type Error = Error;

    fn locked<T>(&self, call: impl FnOnce() -> T) -> T {
        hdf5_raw::locked(call)
    }

    fn failed(&self, failed: EngineError) -> Error {
        Error::engine(&self.ds.path, &self.ds.name)(failed.in_dataset(&self.ds.name))
    }

    fn corrupt(&self, offset: &[u64], reason: String) -> Error {
        Error::ChunkDecode {
            path: self.ds.path.clone(),
            dataset: self.ds.name.clone(),
            chunk: offset.to_vec(),
            reason,
        }
    }

    fn never_written(&self, offset: &[u64], message: String) -> Error {
        let op = format!("reading the chunk never written at {offset:?}");
        Error::hdf5(op, &self.ds.path, Some(&self.ds.name), message)
    }

    fn direct_file(&self) -> Option<std::fs::File> {
        self.ds.direct_file()
    }
}

impl OpenDataset {
    /// The dataset's file opened anew, where its bytes may be read at the addresses HDF5
    /// reports (`h5gds_engine::stored::direct_file`; array-io opens files through sec2 or gds
    /// only, whose addresses are the file's offsets).
    pub fn direct_file(&self) -> Option<std::fs::File> {
        hdf5_raw::locked(|| h5gds_engine::stored::direct_file(linked_hdf5(), self.dset.id()))
    }

    /// The stored chunks (of `chunk` elements) for a read touching `touched` of them (0: a
    /// reader that is handed the chunks it reads, which lists nothing).
    pub fn stored_chunks(
        &self,
        chunk: &[u64],
        touched: usize,
    ) -> Result<StoredChunks<'static, DatasetFace<'_>>> {
        let face = DatasetFace { ds: self };
        StoredChunks::new(linked_hdf5(), self.dset.id(), chunk, touched, face)
    }

    /// Every allocated chunk (of `chunk` elements): its stored size, filter mask and address by
    /// first element, in one listing of the chunk index (`H5Dchunk_iter`; a lookup by coordinate
    /// iterates over the index each time, `h5gds_chunk_codec::LIST_INDEX_FROM`).
    pub fn index_of(&self, chunk: &[u64]) -> Result<h5gds_chunk_codec::ChunkIndex> {
        let face = DatasetFace { ds: self };
        face.locked(|| {
            engine::index(linked_hdf5(), self.dset.id(), chunk).map_err(|e| face.failed(e))
        })
    }
}
