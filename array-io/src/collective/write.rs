//! The collective write, in four agreed steps (docs/mpi.md, "How a collective write works"):
//! describe the tiles, create the file and its early-allocated dataset on rank 0 under a temporary
//! name, write every rank's byte runs through the driver's I/O engine (`H5FDwrite`), and rename
//! (or remove) the file on rank 0. The steps' shared parts are the engine's
//! (`h5gds_engine::collective`); the exchange is rsmpi's.

use super::agree::{agree, agree_with};
use crate::device::{write_blocker, DeviceArray};
use crate::driver::{file_access, Driver};
use crate::element::{descriptor_of, Element};
use crate::error::no_panic;
use crate::error::{Error, Result};
use crate::file::{check_dataset_name, create_dataset, refuse_directory};
use crate::hdf5_raw::{self, linked_hdf5, NewLayout};
use crate::options::Settings;
use crate::select::{staging_pieces, Block};
use cudarc::driver::DevicePtr;
use h5gds_engine::collective::{self as engine, ByteRun, Description, Field};
use h5gds_engine::collective::{DriverFile, DriverFileError, FileStepError};
use h5gds_engine::collective::{Unwire, Wire};
use h5gds_engine::tiles::{write_boxes, Decomposition};
use h5gds_runtime::stream::synchronize;
use mpi::traits::*;
use std::ffi::CString;
use std::mem::size_of;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A tile as the write needs it: its facts, and how its bytes reach the file.
pub(crate) trait Source {
    /// The tile's element type.
    type Item: Element;
    fn shape(&self) -> Vec<u64>;
    /// The driver the tile's bytes are written through.
    fn driver(&self, settings: &Settings) -> Result<Driver>;
    /// Writes the tile's byte `runs` (of its own row-major order, inside the tile) into the
    /// file; `fail` words the file's errors.
    fn write(
        &self,
        file: &DriverFile,
        runs: &[ByteRun],
        settings: &Settings,
        fail: Fail,
    ) -> Result<()>;
}

type Fail<'a> = &'a dyn Fn(DriverFileError) -> Error;

/// A host tile: its elements in row-major order.
pub(crate) struct HostTile<'a, T> {
    pub elements: &'a [T],
    pub shape: Vec<u64>,
}

impl<T: Element> Source for HostTile<'_, T> {
    type Item = T;
    fn shape(&self) -> Vec<u64> {
        self.shape.clone()
    }
    fn driver(&self, settings: &Settings) -> Result<Driver> {
        crate::host::host_driver(settings)
    }
    fn write(&self, file: &DriverFile, runs: &[ByteRun], _: &Settings, fail: Fail) -> Result<()> {
        // SAFETY: every run lies inside the tile's host memory (the caller's contract).
        unsafe { engine::write_runs(file, runs, self.elements.as_ptr() as u64) }.map_err(fail)
    }
}

/// A device tile.
pub(crate) struct DeviceTile<'a, T>(pub &'a DeviceArray<T>);

impl<T: Element> Source for DeviceTile<'_, T> {
    type Item = T;
    fn shape(&self) -> Vec<u64> {
        self.0.shape().iter().map(|&d| d as u64).collect()
    }
    fn driver(&self, settings: &Settings) -> Result<Driver> {
        Ok(Driver::unless(&write_blocker::<T>(settings)?))
    }
    fn write(
        &self,
        file: &DriverFile,
        runs: &[ByteRun],
        settings: &Settings,
        fail: Fail,
    ) -> Result<()> {
        no_panic("writing a tile from device memory", || {
            let Some(data) = self.0.as_slice() else {
                return Ok(());
            };
            let stream = self.0.stream();
            let es = std::mem::size_of::<T>();
            let n = data.len() as u64;
            // The data is ready once every stream that wrote it is done.
            let (ptr, record) = data.device_ptr(stream);
            synchronize(stream)?;
            match write_blocker::<T>(settings)? {
                None => {
                    crate::log::debug(format_args!(
                        "writing a tile straight from device memory through the gds driver"
                    ));
                    // SAFETY: the runs lie inside the allocation (the caller's contract); the gds
                    // driver hands device memory to cuFile or its bounce buffers.
                    unsafe { engine::write_runs(file, runs, ptr) }.map_err(fail)?;
                }
                Some(reason) => {
                    crate::log::debug(format_args!(
                        "writing a tile through a host staging buffer: {reason}"
                    ));
                    let bytes = n as usize * es;
                    let size = settings.staging_buffer_size()?;
                    let (mut ring, len) = crate::host_staging::ring(size, bytes, stream);
                    let pieces = staging_pieces(n, (len / es).max(1) as u64, &[]);
                    let ring = (&mut ring, &pieces[..]);
                    engine::write_staged(file, ring, (ptr, es), runs, fail)?;
                }
            }
            drop(record);
            Ok(())
        })
    }
}

fn file_step(e: FileStepError) -> Error {
    Error::Io {
        op: e.op,
        path: e.path,
        source: e.source,
    }
}

fn describe<S: Source>(
    tile: &S,
    path: &Path,
    dataset: &str,
    decomposition: &Decomposition,
    settings: &Settings,
) -> Result<Vec<u8>> {
    descriptor_of::<S::Item>()?;
    check_dataset_name(dataset)?;
    tile.driver(settings)?;
    settings.staging_buffer_size()?;
    let element = format!("{} ({} bytes)", S::Item::NAME, size_of::<S::Item>());
    let (path, dataset) = (path.to_string_lossy().into_owned(), dataset.to_string());
    let description = Description::new(path, dataset, element, decomposition, tile.shape())?;
    Ok(description.encode())
}

/// Checks that every rank writes the same dataset of the same file with the same element type
/// and kind of decomposition; the global shape and every rank's box.
fn plan(descriptions: &[Vec<u8>], decomposition: &Decomposition) -> Result<(Vec<u64>, Vec<Block>)> {
    let bad = |reason: String| Error::Decomposition { reason };
    let all = engine::decode_all(descriptions).map_err(bad)?;
    if let Some((r, field)) = engine::disagreement(&all) {
        let (d, first) = (&all[r], &all[0]);
        return Err(bad(match field {
            Field::File => format!(
                "rank {r} writes the file {:?}, rank 0 {:?}",
                d.path, first.path
            ),
            Field::Dataset => format!(
                "rank {r} writes the dataset {:?}, rank 0 {:?}",
                d.dataset, first.dataset
            ),
            Field::Element => format!(
                "rank {r} has a tile of {}, rank 0 of {}",
                d.element, first.element
            ),
            Field::Decomposition => {
                format!("rank {r} uses another kind of decomposition (or grid) than rank 0")
            }
        }));
    }
    let claims: Vec<_> = all.into_iter().map(|d| d.claim).collect();
    Ok(write_boxes(decomposition, &claims)?)
}

/// Rank 0: creates the temporary file holding the dataset, allocated, and returns its name and
/// the dataset's file offset (`None` for a dataset without elements, which has no storage).
fn create<S: Source>(
    path: &Path,
    dataset: &str,
    shape: &[u64],
    settings: &Settings,
) -> Result<(PathBuf, Option<u64>)> {
    refuse_directory(path)?;
    let tmp = engine::temporary_path(path).map_err(file_step)?;
    let result = (|| {
        let (driver, desc) = (
            crate::host::host_driver(settings)?,
            descriptor_of::<S::Item>()?,
        );
        let early = (shape, NewLayout::Contiguous { early: true });
        let (ds, _) = create_dataset(&tmp, dataset, driver, &desc, early)?;
        let offset = ds.dset.offset();
        ds.close()?;
        if offset.is_none() && shape.iter().product::<u64>() > 0 {
            return Err(Error::Hdf5 {
                op: "allocating the dataset".into(),
                path: path.to_path_buf(),
                dataset: Some(dataset.to_string()),
                message: "HDF5 gave the early-allocated dataset no file offset".into(),
            });
        }
        Ok(offset)
    })();
    match result {
        Ok(offset) => Ok((tmp, offset)),
        Err(err) => {
            let _ = std::fs::remove_file(&tmp);
            Err(err)
        }
    }
}

/// Every rank: writes its tile's runs (its box `my_box` of the array of `shape`, stored from
/// `offset`) into the temporary file `tmp` of the target `path`.
fn write_tile<S: Source>(
    tile: &S,
    (tmp, path, dataset): (&Path, &Path, &str),
    (offset, shape, my_box): (Option<u64>, &[u64], &Block),
    settings: &Settings,
) -> Result<()> {
    let Some(offset) = offset.filter(|_| !my_box.is_empty()) else {
        return Ok(());
    };
    let es = size_of::<S::Item>() as u64;
    let end = offset + shape.iter().product::<u64>() * es;
    let in_file = |e: DriverFileError| Error::hdf5(e.op, path, None, e.cause());
    let in_dataset = |e: DriverFileError| Error::hdf5(e.op, path, Some(dataset), e.cause());
    // The runs lie inside the tile (its memory's contract) where its box has its shape.
    if my_box.count != tile.shape() {
        let reason = format!("the box {my_box:?} does not have the tile's shape");
        return Err(Error::Decomposition { reason });
    }
    let fapl = file_access(tile.driver(settings)?, path)?;
    let name = CString::new(tmp.as_os_str().as_bytes()).map_err(|_| {
        let reason = "the path contains a NUL byte";
        Error::hdf5("opening the file for the tile's bytes", path, None, reason)
    })?;
    let runs = engine::byte_runs(my_box, shape, offset, es);
    hdf5_raw::locked(|| {
        let file = DriverFile::open(linked_hdf5(), &name, fapl.id(), end).map_err(in_file)?;
        tile.write(&file, &runs, settings, &in_dataset)?;
        file.close().map_err(in_file)
    })
}

/// Rank 0, once the writes are agreed: the temporary file becomes the target, or goes.
fn finish(tmp: &Path, path: &Path, written: bool) -> Result<()> {
    engine::finish(tmp, path, written).map_err(file_step)
}

/// Where a collective write goes, and how: the path, the dataset, the decomposition, the settings.
pub type Target<'a> = (&'a Path, &'a str, &'a Decomposition, &'a Settings);

/// The collective write (see [`super::to_file_with`]).
pub(crate) fn write<C: Communicator, S: Source>(comm: &C, tile: &S, to: Target) -> Result<()> {
    let (path, dataset, decomposition, settings) = to;
    let rank = comm.rank() as usize;
    let described = describe(tile, path, dataset, decomposition, settings);
    let (_, descriptions) = agree_with(comm, "describing the tiles", described, |d| d.clone())?;
    // The same data on every rank: every rank reaches the same verdict, with no agreement.
    let (shape, boxes) = plan(&descriptions, decomposition)?;

    let created = if rank == 0 {
        create::<S>(path, dataset, &shape, settings)
    } else {
        Ok((PathBuf::new(), None))
    };
    let (_, created) = agree_with(comm, "creating the file", created, |(tmp, offset)| {
        Wire::default()
            .text(&tmp.to_string_lossy())
            .u64(offset.unwrap_or(u64::MAX))
            .finish()
    })?;
    let mut from_rank0 = Unwire::new(&created[0]);
    let (tmp, offset) = match (from_rank0.text(), from_rank0.u64()) {
        (Ok(tmp), Ok(offset)) => (PathBuf::from(tmp), (offset != u64::MAX).then_some(offset)),
        (Err(reason), _) | (_, Err(reason)) => return Err(Error::Decomposition { reason }),
    };

    let placed = (offset, &shape[..], &boxes[rank]);
    let wrote = write_tile(tile, (&tmp, path, dataset), placed, settings);
    let written = agree(comm, "writing the tiles", wrote);

    let finished = if rank == 0 {
        finish(&tmp, path, written.is_ok())
    } else {
        Ok(())
    };
    let finished = agree(comm, "finishing the file", finished);
    written.and(finished)
}
