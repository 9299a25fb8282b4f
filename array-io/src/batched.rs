//! Batched reads: a dataset split into chunks of a caller-chosen shape, read one at a time in
//! row-major order (boundary chunks clipped), each reading only its own elements. Useful when
//! the whole dataset does not fit in memory, or to overlap reading with computing.

use crate::device::{DeviceArray, DeviceSource};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::file::OpenDataset;
use crate::layout::Types;
use crate::select::{chunk_grid, ChunkGrid};
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

/// Host chunks of a dataset: `(chunk, offsets)` pairs, `offsets` being the chunk's position in
/// the dataset. Returned by [`crate::from_file_batched`].
pub struct Batches<T> {
    ds: OpenDataset,
    types: Types,
    grid: ChunkGrid,
    failed: bool,
    marker: PhantomData<T>,
}

impl<T: Element> Batches<T> {
    pub(crate) fn open(
        path: &Path,
        dataset: &str,
        chunk_shape: &[usize],
        options: &ReadOptions,
    ) -> Result<Batches<T>> {
        let (ds, types) = crate::host::open_checked::<T>(path, dataset, options)?;
        let chunk = check_chunk_shape(dataset, &ds.shape, chunk_shape)?;
        let grid = chunk_grid(&ds.shape, &chunk);
        Ok(Batches {
            ds,
            types,
            grid,
            failed: false,
            marker: PhantomData,
        })
    }

    /// The dataset's shape.
    pub fn shape(&self) -> Vec<usize> {
        self.ds.shape.iter().map(|&d| d as usize).collect()
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

impl<T: Element> Iterator for Batches<T> {
    type Item = Result<(ArrayD<T>, Vec<usize>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let block = self.grid.next()?;
        let result = crate::host::read_region::<T>(&self.ds, &self.types, &block)
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

/// Device chunks of a dataset: `(chunk, offsets)` pairs, each chunk a [`DeviceArray`]. Returned
/// by [`crate::from_file_batched_to_device`].
pub struct DeviceBatches<T> {
    source: DeviceSource,
    stream: Arc<CudaStream>,
    grid: ChunkGrid,
    failed: bool,
    marker: PhantomData<T>,
}

impl<T: Element> DeviceBatches<T> {
    pub(crate) fn open(
        path: &Path,
        dataset: &str,
        chunk_shape: &[usize],
        stream: Arc<CudaStream>,
        options: &ReadOptions,
    ) -> Result<DeviceBatches<T>> {
        let source = crate::error::no_panic("opening for device reads", || {
            DeviceSource::open::<T>(path, dataset, options, &stream)
        })?;
        let chunk = check_chunk_shape(dataset, &source.ds.shape, chunk_shape)?;
        let grid = chunk_grid(&source.ds.shape, &chunk);
        Ok(DeviceBatches {
            source,
            stream,
            grid,
            failed: false,
            marker: PhantomData,
        })
    }

    /// The dataset's shape.
    pub fn shape(&self) -> Vec<usize> {
        self.source.ds.shape.iter().map(|&d| d as usize).collect()
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

impl<T: Element> Iterator for DeviceBatches<T> {
    type Item = Result<(DeviceArray<T>, Vec<usize>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let block = self.grid.next()?;
        let result = crate::error::no_panic("reading a chunk into device memory", || {
            self.source.read::<T>(&block, &self.stream)
        })
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
