//! Batched reads: a dataset split into chunks of a caller-chosen shape, read one at a time in
//! row-major order (boundary chunks clipped), each reading only its own elements. Useful when
//! the whole dataset does not fit in memory, or to overlap reading with computing.

use crate::device::{DeviceArray, DeviceSource};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::file::OpenDataset;
use crate::layout::Types;
use crate::select::{chunk_grid, Block, ChunkGrid};
use crate::ReadOptions;
use cudarc::driver::CudaStream;
use ndarray::ArrayD;
use std::marker::PhantomData;
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

/// Where a batched read's chunks come from: the dataset's shape, and one block read at a time.
pub trait BlockReader {
    /// One chunk as read.
    type Chunk;
    /// The dataset's shape.
    fn dims(&self) -> &[u64];
    /// Reads one block of the dataset.
    fn read(&mut self, block: &Block) -> Result<Self::Chunk>;
    /// Closes the dataset and its file, reporting what HDF5 reports.
    fn close(self) -> Result<()>;
}

/// Chunks of a dataset: `(chunk, offsets)` pairs, `offsets` being the chunk's position in the
/// dataset, read from `S` (host memory: [`Batches`], device memory: [`DeviceBatches`]). After an
/// error it yields nothing more.
pub struct ChunkBatches<S> {
    source: S,
    grid: ChunkGrid,
    failed: bool,
}

impl<S: BlockReader> ChunkBatches<S> {
    /// Batches of `chunk_shape` over what `source` reads.
    pub(crate) fn over(source: S, dataset: &str, chunk_shape: &[usize]) -> Result<Self> {
        let chunk = check_chunk_shape(dataset, source.dims(), chunk_shape)?;
        let grid = chunk_grid(source.dims(), &chunk);
        Ok(ChunkBatches {
            source,
            grid,
            failed: false,
        })
    }

    /// The dataset's shape.
    pub fn shape(&self) -> Vec<usize> {
        self.source.dims().iter().map(|&d| d as usize).collect()
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

impl<S: BlockReader> Iterator for ChunkBatches<S> {
    type Item = Result<(S::Chunk, Vec<usize>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let block = self.grid.next()?;
        let result = self
            .source
            .read(&block)
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

/// A dataset read into host arrays.
pub struct HostBlockReader<T> {
    ds: OpenDataset,
    types: Types,
    /// The driver's I/O threads, which decode compressed chunks (its settings, read at open).
    threads: usize,
    marker: PhantomData<T>,
}

impl<T: Element> HostBlockReader<T> {
    pub(crate) fn open(path: &Path, dataset: &str, options: &ReadOptions) -> Result<Self> {
        let (ds, types) = crate::host::open_checked::<T>(path, dataset, options)?;
        Ok(HostBlockReader {
            ds,
            types,
            threads: crate::options::driver_settings().nthreads,
            marker: PhantomData,
        })
    }
}

impl<T: Element> BlockReader for HostBlockReader<T> {
    type Chunk = ArrayD<T>;
    fn dims(&self) -> &[u64] {
        &self.ds.shape
    }
    fn read(&mut self, block: &Block) -> Result<ArrayD<T>> {
        crate::host::read_region::<T>(&self.ds, &self.types, block, self.threads)
    }
    fn close(self) -> Result<()> {
        drop(self.types);
        self.ds.close()
    }
}

/// A dataset read into device arrays on one stream.
pub struct DeviceBlockReader<T> {
    source: DeviceSource,
    stream: Arc<CudaStream>,
    marker: PhantomData<T>,
}

impl<T: Element> DeviceBlockReader<T> {
    pub(crate) fn open(
        path: &Path,
        dataset: &str,
        options: &ReadOptions,
        stream: Arc<CudaStream>,
    ) -> Result<Self> {
        let source = crate::error::no_panic("opening for device reads", || {
            DeviceSource::open::<T>(path, dataset, options)
        })?;
        Ok(DeviceBlockReader {
            source,
            stream,
            marker: PhantomData,
        })
    }
}

impl<T: Element> BlockReader for DeviceBlockReader<T> {
    type Chunk = DeviceArray<T>;
    fn dims(&self) -> &[u64] {
        &self.source.ds.shape
    }
    fn read(&mut self, block: &Block) -> Result<DeviceArray<T>> {
        crate::error::no_panic("reading a chunk into device memory", || {
            self.source.read::<T>(block, &self.stream)
        })
    }
    fn close(self) -> Result<()> {
        self.source.ds.close()
    }
}

/// Host chunks of a dataset, each an `ArrayD`. Returned by [`crate::from_file_batched`].
pub type Batches<T> = ChunkBatches<HostBlockReader<T>>;

/// Device chunks of a dataset, each a [`DeviceArray`]. Returned by
/// [`crate::from_file_batched_to_device`].
pub type DeviceBatches<T> = ChunkBatches<DeviceBlockReader<T>>;

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
