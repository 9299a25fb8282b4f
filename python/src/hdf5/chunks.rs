//! The raw chunk calls of h5py's HDF5: the engine's (`h5gds_engine::chunks`) over the table of
//! h5py's HDF5, their failures the engine's (naming h5py's HDF5 error stack). The caller holds
//! h5py's lock.

use super::{api, Hid};
use h5gds_engine::chunks::{self as engine, Face, StoredChunks};
use h5gds_engine::Error;
use h5gds_runtime::hdf5::Hdf5Api;

/// Every allocated chunk of `dataset` (chunks of `chunk` elements): its stored size, filter mask
/// and address by first element (`H5Dchunk_iter`, one call for the whole index).
pub fn chunk_index(dataset: Hid, chunk: &[u64]) -> Result<h5gds_chunk_codec::ChunkIndex, String> {
    let api = api()?;
    engine::index(api, dataset, chunk).map_err(|e| e.to_string())
}

/// An h5py dataset as the engine's chunk source (and its encoded writes, `crate::encode`) see it:
/// its errors (`error`, which the host reads and the device reads each have) name the dataset;
/// h5py's lock is held around the read.
pub struct H5pyFace<'a, E> {
    pub api: &'static Hdf5Api,
    dataset: Hid,
    name: &'a str,
    error: fn(String) -> E,
}

impl<E: Send> Face for H5pyFace<'_, E> {
    type Error = E;

    fn failed(&self, failed: Error) -> E {
        (self.error)(failed.in_dataset(self.name).to_string())
    }

    fn corrupt(&self, offset: &[u64], reason: String) -> E {
        (self.error)(format!(
            "dataset {}: the chunk at {offset:?} cannot be decoded: {reason}",
            self.name
        ))
    }

    fn never_written(&self, offset: &[u64], message: String) -> E {
        (self.error)(format!(
            "dataset {}: H5Dread of the chunk never written at {offset:?} failed: {message}",
            self.name
        ))
    }

    fn direct_file(&self) -> Option<std::fs::File> {
        super::direct_file(self.dataset)
    }
}

/// `dataset` (`name`) as the engine sees it in h5py's HDF5, errors made by `error`.
fn h5py_face<E: Send>(
    dataset: Hid,
    name: &str,
    error: fn(String) -> E,
) -> Result<H5pyFace<'_, E>, E> {
    let api = api().map_err(|m| error(format!("dataset {name}: {m}")))?;
    Ok(H5pyFace {
        api,
        dataset,
        name,
        error,
    })
}

/// The stored chunks of `dataset` (`name`, chunks of `chunk` elements) for a read touching
/// `touched` chunks, errors made by `error`.
pub fn stored_chunks<'a, E: Send>(
    dataset: Hid,
    name: &'a str,
    chunk: &[u64],
    touched: usize,
    error: fn(String) -> E,
) -> Result<StoredChunks<'static, H5pyFace<'a, E>>, E> {
    let face = h5py_face(dataset, name, error)?;
    StoredChunks::new(face.api, dataset, chunk, touched, face)
}
