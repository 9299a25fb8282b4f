//! Many processes, one file (cargo feature `mpi`): collective [`to_file`], [`from_file`] and
//! [`from_file_batched`] over an MPI communicator, each rank passing or receiving its own tile
//! of the global array, on the host (`ndarray`) or on its GPU ([`DeviceArray`]).
//!
//! ```no_run
//! use array_io::collective::{self, mpi::traits::*};
//! # fn main() -> array_io::Result<()> {
//! let universe = collective::mpi::initialize().unwrap();
//! let world = universe.world();
//! let (rank, size) = (world.rank() as usize, world.size() as usize);
//! // Rank r holds rows [r*10/p, (r+1)*10/p) of a 10 x 4 array: uneven shares are fine.
//! let rows = (rank + 1) * 10 / size - rank * 10 / size;
//! let tile = ndarray::Array2::<f32>::from_elem((rows, 4), rank as f32);
//! collective::to_file(&world, &tile, "out/data.h5", "/x")?; // stacked along axis 0
//! let mine = collective::from_file::<_, f32>(&world, "out/data.h5", "/x")?; // this rank's rows
//! assert_eq!(mine, tile.into_dyn());
//! # Ok(()) }
//! ```
//!
//! The file is one ordinary HDF5 file with one contiguous dataset, which any HDF5 program reads.
//! Rank 0 writes all HDF5 metadata; every rank writes its own tile's bytes through the `gds`
//! driver (device tiles straight from GPU memory). Every call is collective (all ranks of the
//! communicator must make it) and its errors are too: every rank returns the same
//! [`Error::Collective`] naming each failed rank and its cause, and no rank is left waiting.
//! After a failed write the target path is as it was before the call. The protocol is the
//! engine's (`h5gds_engine::collective`), over rsmpi here. See docs/mpi.md.

mod write;

pub use h5gds_engine::tiles::Decomposition;
/// The `mpi` crate (rsmpi) array-io is built with, so callers use the same version.
pub use mpi;

use crate::batched::{self, Batches, ChunkBatches, DeviceBatches};
use crate::device::{DeviceArray, IntoStream};
use crate::element::Element;
use crate::error::no_panic;
use crate::error::{Error, Result};
use crate::options::Settings;
use crate::select::Block;
use crate::ReadOptions;
use cudarc::driver::CudaContext;
use h5gds_engine::collective as engine;
use h5gds_engine::tiles::{read_box, share};
use mpi::datatype::PartitionMut;
use mpi::traits::*;
use mpi::Count;
use ndarray::{ArrayBase, ArrayD, Data, Dimension};
use std::path::Path;
use std::sync::Arc;
use write::{DeviceTile, HostTile, Source, Write};

/// Where a collective write goes, and how: the path, the dataset, the decomposition, the settings.
#[doc(hidden)]
pub type Target<'a> = (&'a Path, &'a str, &'a Decomposition, &'a Settings);

/// An rsmpi communicator as the engine's.
struct Mpi<'a, C>(&'a C);

impl<C: Communicator> engine::Communicator for Mpi<'_, C> {
    fn rank(&self) -> usize {
        self.0.rank() as usize
    }

    fn size(&self) -> usize {
        self.0.size() as usize
    }

    fn all_gather(&self, mine: &[u8]) -> std::result::Result<Vec<Vec<u8>>, String> {
        let comm = self.0;
        let mut lens = vec![0u64; comm.size() as usize];
        comm.all_gather_into(&(mine.len() as u64), &mut lens[..]);
        // Messages are descriptions and error texts: far below MPI's int count limit.
        let counts: Vec<Count> = lens.iter().map(|&l| l as Count).collect();
        let displs: Vec<Count> = counts
            .iter()
            .scan(0, |at, &c| Some(std::mem::replace(at, *at + c)))
            .collect();
        let mut all = vec![0u8; lens.iter().sum::<u64>() as usize];
        let mut partition = PartitionMut::new(&mut all[..], &counts[..], &displs[..]);
        comm.all_gather_varcount_into(mine, &mut partition);
        let ends = displs.iter().zip(&counts);
        Ok(ends
            .map(|(&d, &c)| all[d as usize..(d + c) as usize].to_vec())
            .collect())
    }
}

/// The engine's agreement on `outcome` over rsmpi.
fn agree<C: Communicator, T>(comm: &C, op: &str, outcome: Result<T>) -> Result<T> {
    let outcome = outcome.map_err(|e| e.to_engine());
    engine::agree(&Mpi(comm), op, outcome).map_err(Error::Collective)
}

/// The collective write of `tile` (the engine's protocol).
fn write<C: Communicator, S: Source>(comm: &C, tile: &S, to: Target) -> Result<()> {
    let (path, dataset, decomposition, settings) = to;
    let writer = Write {
        tile,
        path,
        dataset,
        settings,
    };
    engine::write(&Mpi(comm), &writer, decomposition).map_err(Error::Collective)
}

/// A tile [`to_file`] can write: a host array (`ndarray`, any dimension, any memory order) or a
/// [`DeviceArray`].
pub trait Tile {
    #[doc(hidden)]
    fn write_collective<C: Communicator>(&self, comm: &C, to: Target) -> Result<()>;
}

impl<T, S, D> Tile for ArrayBase<S, D>
where
    T: Element,
    S: Data<Elem = T>,
    D: Dimension,
{
    fn write_collective<C: Communicator>(&self, comm: &C, to: Target) -> Result<()> {
        let standard = self.as_standard_layout();
        let tile = HostTile {
            elements: standard.as_slice().unwrap_or(&[]),
            shape: self.shape().iter().map(|&d| d as u64).collect(),
        };
        write(comm, &tile, to)
    }
}

impl<T: Element> Tile for DeviceArray<T> {
    fn write_collective<C: Communicator>(&self, comm: &C, to: Target) -> Result<()> {
        write(comm, &DeviceTile(self), to)
    }
}

/// Collectively writes every rank's `tile`, stacked along axis 0 in rank order, as dataset
/// `dataset` of a new HDF5 file at `path` (the same on every rank; a shared file system
/// across nodes). The tiles must agree on every dimension but the first, which may differ
/// (also be 0).
///
/// **Destructive** once it succeeds: an existing file at `path` is replaced. A failed call
/// leaves `path` as it was (see the module documentation).
pub fn to_file<C: Communicator, A: Tile + ?Sized>(
    comm: &C,
    tile: &A,
    path: impl AsRef<Path>,
    dataset: &str,
) -> Result<()> {
    let (decomposition, settings) = (&Decomposition::LeadingAxis, &Settings::default());
    to_file_with(comm, tile, path, dataset, decomposition, settings)
}

/// [`to_file`] with another decomposition (a 2-D grid, or caller-given boxes) and settings.
pub fn to_file_with<C: Communicator, A: Tile + ?Sized>(
    comm: &C,
    tile: &A,
    path: impl AsRef<Path>,
    dataset: &str,
    decomposition: &Decomposition,
    settings: &Settings,
) -> Result<()> {
    tile.write_collective(comm, (path.as_ref(), dataset, decomposition, settings))
}

/// The box (`start`, `shape`) of the dataset of `shape` that rank `rank` of `size` receives
/// from the collective reads under `decomposition`.
pub fn tile_of(
    decomposition: &Decomposition,
    shape: &[usize],
    rank: usize,
    size: usize,
) -> Result<(Vec<usize>, Vec<usize>)> {
    let shape: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
    let block = read_box(decomposition, &shape, rank, size).map_err(Error::Collective)?;
    let usizes = |v: &[u64]| v.iter().map(|&d| d as usize).collect();
    Ok((usizes(&block.start), usizes(&block.count)))
}

/// Collectively reads dataset `dataset` of the file at `path`: every rank receives its block
/// of the leading axis (rank r of p: rows `[r*n/p, (r+1)*n/p)` of n; see [`tile_of`]).
pub fn from_file<C: Communicator, T: Element>(
    comm: &C,
    path: impl AsRef<Path>,
    dataset: &str,
) -> Result<ArrayD<T>> {
    from_file_with(
        comm,
        path,
        dataset,
        &Decomposition::LeadingAxis,
        &ReadOptions::default(),
    )
}

/// [`from_file`] with another decomposition and options.
pub fn from_file_with<C: Communicator, T: Element>(
    comm: &C,
    path: impl AsRef<Path>,
    dataset: &str,
    decomposition: &Decomposition,
    options: &ReadOptions,
) -> Result<ArrayD<T>> {
    read_own_tile(comm, decomposition, |own| {
        crate::host::read(path.as_ref(), dataset, options, own)
    })
}

/// Every rank's tile of `decomposition`, read by `read` (given this rank's box of a dataset's
/// shape); collective (every rank learns whether all succeeded).
fn read_own_tile<C: Communicator, R>(
    comm: &C,
    decomposition: &Decomposition,
    read: impl FnOnce(&dyn Fn(&[u64]) -> Result<Block>) -> Result<R>,
) -> Result<R> {
    let (rank, size) = (comm.rank() as usize, comm.size() as usize);
    let own = |shape: &[u64]| read_box(decomposition, shape, rank, size).map_err(Error::Collective);
    let read = no_panic("reading a tile", || read(&own));
    agree(comm, "reading the tiles", read)
}

/// Collectively reads every rank's block (as [`from_file`]) into device memory on `stream`
/// (each rank its own device: see [`local_device`]). Contiguous and unfiltered chunked datasets
/// go straight into GPU memory through the `gds` driver; others are staged as in
/// [`crate::from_file_to_device`].
pub fn from_file_to_device<C: Communicator, T: Element>(
    comm: &C,
    path: impl AsRef<Path>,
    dataset: &str,
    stream: impl IntoStream,
) -> Result<DeviceArray<T>> {
    from_file_to_device_with(
        comm,
        path,
        dataset,
        stream,
        &Decomposition::LeadingAxis,
        &ReadOptions::default(),
    )
}

/// [`from_file_to_device`] with another decomposition and options.
pub fn from_file_to_device_with<C: Communicator, T: Element>(
    comm: &C,
    path: impl AsRef<Path>,
    dataset: &str,
    stream: impl IntoStream,
    decomposition: &Decomposition,
    options: &ReadOptions,
) -> Result<DeviceArray<T>> {
    let stream = stream.into_stream();
    read_own_tile(comm, decomposition, |own| {
        crate::device::read(path.as_ref(), dataset, stream, options, own)
    })
}

/// Collectively opens dataset `dataset` for batched reads in chunks of `chunk_shape`: every
/// rank receives its share of the chunks — the row-major chunk grid split into contiguous
/// blocks of chunk indices by the r*n/p rule — as `(chunk, offsets)` pairs. The open is
/// collective; the iteration is each rank's own.
pub fn from_file_batched<C: Communicator, T: Element>(
    comm: &C,
    path: impl AsRef<Path>,
    dataset: &str,
    chunk_shape: &[usize],
) -> Result<Batches<T>> {
    from_file_batched_with(comm, path, dataset, chunk_shape, &ReadOptions::default())
}

/// [`from_file_batched`] with options.
pub fn from_file_batched_with<C: Communicator, T: Element>(
    comm: &C,
    path: impl AsRef<Path>,
    dataset: &str,
    chunk_shape: &[usize],
    options: &ReadOptions,
) -> Result<Batches<T>> {
    own_share(
        comm,
        batched::host(path.as_ref(), dataset, options, chunk_shape),
    )
}

/// This rank's share of the chunks (see [`from_file_batched`]), once every rank has opened.
fn own_share<C: Communicator, R>(
    comm: &C,
    opened: Result<ChunkBatches<R>>,
) -> Result<ChunkBatches<R>> {
    let (rank, size) = (comm.rank() as usize, comm.size() as usize);
    let opened = opened.map(|mut batches| {
        let (first, count) = share(batches.total() as u64, size as u64, rank as u64);
        batches.restrict(first, first + count);
        batches
    });
    agree(comm, "opening for batched reads", opened)
}

/// [`from_file_batched`] into device memory: each chunk a [`DeviceArray`] on `stream`.
pub fn from_file_batched_to_device<C: Communicator, T: Element>(
    comm: &C,
    path: impl AsRef<Path>,
    dataset: &str,
    chunk_shape: &[usize],
    stream: impl IntoStream,
) -> Result<DeviceBatches<T>> {
    let options = ReadOptions::default();
    let opened = batched::device(
        path.as_ref(),
        dataset,
        &options,
        stream.into_stream(),
        chunk_shape,
    );
    own_share(comm, opened)
}

/// This process's rank among the ranks of `comm` on the same node (sharing memory:
/// `MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)`). Collective.
pub fn local_rank<C: Communicator>(comm: &C) -> usize {
    comm.split_shared(comm.rank()).rank() as usize
}

/// The GPU of this rank: device `local_rank % device count`, so that the ranks of a node
/// spread over its GPUs without a per-rank `CUDA_VISIBLE_DEVICES`. Collective (through
/// [`local_rank`]); fails on every rank, naming the ranks, where CUDA does not work.
pub fn local_device<C: Communicator>(comm: &C) -> Result<Arc<CudaContext>> {
    let local = local_rank(comm);
    let device = no_panic("choosing this rank's device", || {
        h5gds_runtime::cuda::cuda().map_err(|e| Error::cuda("initialising CUDA", e))?;
        let count = h5gds_runtime::cuda::call("counting devices", CudaContext::device_count)?;
        if count <= 0 {
            return Err(Error::cuda("counting devices", "no CUDA device"));
        }
        let ordinal = local % count as usize;
        Ok(h5gds_runtime::cuda::call("creating a context", || {
            CudaContext::new(ordinal)
        })?)
    });
    agree(comm, "choosing each rank's device", device)
}
