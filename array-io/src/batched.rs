//! Batched reads: a dataset split into chunks of a caller-chosen shape, read one at a time in
//! row-major order (boundary chunks clipped), each reading only its own elements. Useful when
//! the whole dataset does not fit in memory, or to overlap reading with computing.

use crate::device::{DeviceArray, DeviceSource};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::select::{chunk_grid, Block, ChunkGrid};
use crate::ReadOptions;
use cudarc::driver::CudaStream;
use ndarray::ArrayD;
use std::path::Path;
use std::sync::Arc;

/// Checks `chunk_shape` against a dataset of `shape`.
fn check_chunk_shape(dataset: &str, shape: &[u64], chunk_shape: &[usize]) -> Result<Vec<u64>> {
    let fail = |reason: String| Error::InvalidChunkShape {
        dataset: dataset.to_string(),
        chunk_shape: chunk_shape.to_vec(),
        shape: shape.iter().map(|&d| d as usize).collect(),
        reason,
    };
    if chunk_shape.len() != shape.len() {
        return Err(fail(format!(
            "it has {} entries, but the dataset has rank {} (one entry per dimension is needed)",
            chunk_shape.len(),
            shape.len()
        )));
    }
    if let Some(i) = chunk_shape.iter().position(|&c| c == 0) {
        return Err(fail(format!(
            "entry {i} is 0; every entry must be positive"
        )));
    }
    Ok(chunk_shape.iter().map(|&c| c as u64).collect())
}

/// Reads one block of a dataset.
type ReadBlock<C> = Box<dyn FnMut(&Block) -> Result<C> + Send>;

/// Chunks of a dataset: `(chunk, offsets)` pairs, `offsets` being the chunk's position in the
/// dataset, each read by `read` (host memory: [`Batches`], device memory: [`DeviceBatches`]).
/// After an error it yields nothing more.
pub struct ChunkBatches<C> {
    shape: Vec<u64>,
    read: ReadBlock<C>,
    grid: ChunkGrid,
    failed: bool,
}

impl<C> ChunkBatches<C> {
    /// Batches of `chunk_shape` over a dataset of `shape`, each read by `read`.
    fn over(shape: Vec<u64>, read: ReadBlock<C>, dataset: &str, chunk: &[usize]) -> Result<Self> {
        let chunk = check_chunk_shape(dataset, &shape, chunk)?;
        let grid = chunk_grid(&shape, &chunk);
        Ok(ChunkBatches {
            shape,
            read,
            grid,
            failed: false,
        })
    }

    /// The dataset's shape.
    pub fn shape(&self) -> Vec<usize> {
        self.shape.iter().map(|&d| d as usize).collect()
    }

    /// The number of chunks in all (read or not).
    pub fn total(&self) -> usize {
        self.grid.total() as usize
    }

    /// Yields only chunks `[first, end)` (a rank's share of a collective batched read).
    #[cfg(feature = "mpi")]
    pub(crate) fn restrict(&mut self, first: u64, end: u64) {
        self.grid.restrict(first, end);
    }
}

impl<C> Iterator for ChunkBatches<C> {
    type Item = Result<(C, Vec<usize>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let block = self.grid.next()?;
        let result = (self.read)(&block)
            .map(|chunk| (chunk, block.start.iter().map(|&s| s as usize).collect()));
        self.failed = result.is_err();
        Some(result)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.failed {
            (0, Some(0))
        } else {
            self.grid.size_hint()
        }
    }
}

/// Host chunks of a dataset, each an `ArrayD`. Returned by [`crate::from_file_batched`].
pub type Batches<T> = ChunkBatches<ArrayD<T>>;

/// Device chunks of a dataset, each a [`DeviceArray`]. Returned by
/// [`crate::from_file_batched_to_device`].
pub type DeviceBatches<T> = ChunkBatches<DeviceArray<T>>;

/// Batches of `chunk_shape` of `dataset` read into host arrays, compressed chunks decoded on
/// the driver's I/O threads (its settings, read at open).
pub(crate) fn host<T: Element>(
    path: &Path,
    dataset: &str,
    options: &ReadOptions,
    chunk_shape: &[usize],
) -> Result<Batches<T>> {
    let (ds, types) = crate::host::open_checked::<T>(path, dataset, options)?;
    let shape = ds.shape.clone();
    let read = move |block: &Block| crate::host::read_region::<T>(&ds, &types, block);
    ChunkBatches::over(shape, Box::new(read), dataset, chunk_shape)
}

/// Batches of `chunk_shape` of `dataset` read into device arrays on `stream`.
pub(crate) fn device<T: Element>(
    path: &Path,
    dataset: &str,
    options: &ReadOptions,
    stream: Arc<CudaStream>,
    chunk_shape: &[usize],
) -> Result<DeviceBatches<T>> {
    let source = crate::error::no_panic("opening for device reads", || {
        DeviceSource::open::<T>(path, dataset, options)
    })?;
    let shape = source.ds.shape.clone();
    let read = move |block: &Block| {
        crate::error::no_panic("reading a chunk into device memory", || {
            source.read::<T>(block, &stream)
        })
    };
    ChunkBatches::over(shape, Box::new(read), dataset, chunk_shape)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_shapes_must_match_the_rank_and_be_positive() {
        assert_eq!(check_chunk_shape("/d", &[5, 4], &[2, 3]).unwrap(), [2, 3]);
        let err = check_chunk_shape("/d", &[5, 4], &[2])
            .unwrap_err()
            .to_string();
        assert!(err.contains("1 entries") && err.contains("rank 2"), "{err}");
        assert!(err.contains("\"/d\"") && err.contains("[5, 4]"), "{err}");
        let err = check_chunk_shape("/d", &[5, 4], &[2, 0])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("entry 1 is 0") && err.contains("positive"),
            "{err}"
        );
        assert!(check_chunk_shape("/s", &[], &[]).unwrap().is_empty());
    }
}
