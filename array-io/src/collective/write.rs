//! The collective write, in four agreed steps (docs/mpi.md, "How a collective write works"):
//! describe the tiles, create the file and its early-allocated dataset on rank 0 under a temporary
//! name, write every rank's byte runs through the driver's I/O engine (`H5FDwrite`), and rename
//! (or remove) the file on rank 0.

use super::agree::{agree, agree_with, Unwire, Wire};
use crate::device::{write_blocker, DeviceArray};
use crate::driver::{file_access, Driver};
use crate::element::{descriptor_of, Element};
use crate::error::no_panic;
use crate::error::{Error, Result};
use crate::file::{check_dataset_name, create_file};
use crate::hdf5_raw::{self, DriverFile};
use crate::host_staging::HostStaging;
use crate::options::Settings;
use crate::select::{staging_pieces, Block, Runs};
use cudarc::driver::DevicePtr;
use h5gds_engine::staged;
use h5gds_engine::tiles::{write_boxes, Decomposition, TileClaim};
use h5gds_runtime::stream::synchronize;
use mpi::traits::*;
use std::ffi::c_void;
use std::path::{Path, PathBuf};

/// A tile as the write needs it: its facts, and how its bytes reach the file.
pub(crate) trait Source {
    /// The tile's element type.
    type Item: Element;
    fn shape(&self) -> Vec<u64>;
    fn element_name(&self) -> &'static str {
        Self::Item::NAME
    }
    fn element_size(&self) -> usize {
        std::mem::size_of::<Self::Item>()
    }
    fn descriptor(&self) -> Result<hdf5::types::TypeDescriptor> {
        descriptor_of::<Self::Item>()
    }
    /// The driver the tile's bytes are written through.
    fn driver(&self, settings: &Settings) -> Result<Driver>;
    /// Writes the tile, whose elements in its own row-major order lie in the file as `runs`
    /// of elements from file address `base`.
    fn write(&self, file: &DriverFile, base: u64, runs: &Runs, settings: &Settings) -> Result<()>;
}

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
    fn write(&self, file: &DriverFile, base: u64, runs: &Runs, _: &Settings) -> Result<()> {
        let es = std::mem::size_of::<T>() as u64;
        for (at, element, len) in runs.pieces(0, self.elements.len() as u64) {
            let piece = &self.elements[at as usize..(at + len) as usize];
            // SAFETY: `piece` is host memory of exactly `len` elements.
            unsafe {
                file.write(
                    base + element * es,
                    piece.len() * es as usize,
                    piece.as_ptr().cast(),
                )
            }
            .map_err(|e| Error::hdf5("writing the tile", Path::new(""), None, e))?;
        }
        Ok(())
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
        Ok(match write_blocker::<T>(settings)? {
            None => Driver::Gds,
            Some(_) => Driver::Sec2,
        })
    }
    fn write(&self, file: &DriverFile, base: u64, runs: &Runs, settings: &Settings) -> Result<()> {
        no_panic("writing a tile from device memory", || {
            self.write_unguarded(file, base, runs, settings)
        })
    }
}

impl<T: Element> DeviceTile<'_, T> {
    fn write_unguarded(
        &self,
        file: &DriverFile,
        base: u64,
        runs: &Runs,
        settings: &Settings,
    ) -> Result<()> {
        let Some(data) = self.0.as_slice() else {
            return Ok(());
        };
        let stream = self.0.stream();
        let es = std::mem::size_of::<T>() as u64;
        let n = data.len() as u64;
        let fail = |e| Error::hdf5("writing the tile", Path::new(""), None, e);
        // The data is ready once every stream that wrote it is done.
        let (ptr, record) = data.device_ptr(stream);
        synchronize(stream)?;
        match write_blocker::<T>(settings)? {
            None => {
                crate::log::debug(format_args!(
                    "writing a tile straight from device memory through the gds driver"
                ));
                for (at, element, len) in runs.pieces(0, n) {
                    let src = (ptr + at * es) as *const c_void;
                    // SAFETY: the run lies inside the allocation; the gds driver hands device
                    // memory to cuFile or its bounce buffers.
                    unsafe { file.write(base + element * es, (len * es) as usize, src) }
                        .map_err(fail)?;
                }
            }
            Some(reason) => {
                crate::log::debug(format_args!(
                    "writing a tile through a host staging buffer: {reason}"
                ));
                let bytes = (n * es) as usize;
                let mut staging = HostStaging::new(settings.staging_buffer_size()?, bytes, stream);
                let per = (staging.len() as u64 / es).max(1);
                let spans = staging_pieces(n, per, &[]);
                // Piece [a, b)'s runs from its buffer to their places in the file, while the
                // next piece comes from the device.
                staged::write(&mut staging.ring, &spans, es as usize, ptr, |a, b, buf| {
                    for (at, element, len) in runs.pieces(a, b) {
                        let src = buf[(at * es) as usize..((at + len) * es) as usize].as_ptr();
                        // SAFETY: host memory of `len` elements.
                        unsafe { file.write(base + element * es, (len * es) as usize, src.cast()) }
                            .map_err(fail)?;
                    }
                    Ok::<(), Error>(())
                })?;
            }
        }
        drop(record);
        Ok(())
    }
}

/// Which decomposition a rank uses, for the check that all use the same.
fn kind(decomposition: &Decomposition) -> (u64, u64, u64) {
    match decomposition {
        Decomposition::LeadingAxis => (0, 0, 0),
        Decomposition::Grid { rows, cols } => (1, *rows as u64, *cols as u64),
        Decomposition::Tile { .. } => (2, 0, 0),
    }
}

/// What a rank tells the others about its write.
struct Description {
    path: String,
    dataset: String,
    element: String,
    kind: (u64, u64, u64),
    claim: TileClaim,
}

fn describe<S: Source>(
    tile: &S,
    path: &Path,
    dataset: &str,
    decomposition: &Decomposition,
    settings: &Settings,
) -> Result<Vec<u8>> {
    tile.descriptor()?;
    check_dataset_name(dataset)?;
    tile.driver(settings)?;
    settings.staging_buffer_size()?;
    let shape = tile.shape();
    let start = match decomposition {
        Decomposition::Tile {
            start,
            shape: given,
        } => {
            let given: Vec<u64> = given.iter().map(|&d| d as u64).collect();
            if given != shape {
                return Err(Error::Decomposition {
                    reason: format!(
                        "Decomposition::Tile gives the shape {given:?}, but the tile has shape \
                         {shape:?}"
                    ),
                });
            }
            Some(start.iter().map(|&s| s as u64).collect::<Vec<_>>())
        }
        _ => None,
    };
    let (k, rows, cols) = kind(decomposition);
    Ok(Wire::default()
        .text(&path.to_string_lossy())
        .text(dataset)
        .text(&format!(
            "{} ({} bytes)",
            tile.element_name(),
            tile.element_size()
        ))
        .u64s(&[k, rows, cols])
        .u64s(&shape)
        .u64(start.is_some() as u64)
        .u64s(start.as_deref().unwrap_or(&[]))
        .finish())
}

fn parse_description(bytes: &[u8]) -> std::result::Result<Description, String> {
    let mut r = Unwire::new(bytes);
    let path = r.text()?;
    let dataset = r.text()?;
    let element = r.text()?;
    let k = r.u64s()?;
    let shape = r.u64s()?;
    let has_start = r.u64()? != 0;
    let start = r.u64s()?;
    if k.len() != 3 {
        return Err("a malformed message from another rank".into());
    }
    Ok(Description {
        path,
        dataset,
        element,
        kind: (k[0], k[1], k[2]),
        claim: TileClaim {
            shape,
            start: has_start.then_some(start),
        },
    })
}

/// Checks that every rank writes the same dataset of the same file with the same element type
/// and kind of decomposition; the global shape and every rank's box.
fn plan(descriptions: &[Vec<u8>], decomposition: &Decomposition) -> Result<(Vec<u64>, Vec<Block>)> {
    let bad = |reason: String| Error::Decomposition { reason };
    let all: Vec<Description> = descriptions
        .iter()
        .map(|d| parse_description(d))
        .collect::<std::result::Result<_, _>>()
        .map_err(bad)?;
    let first = &all[0];
    for (r, d) in all.iter().enumerate().skip(1) {
        let differs = if d.path != first.path {
            Some(format!(
                "writes the file {:?}, rank 0 {:?}",
                d.path, first.path
            ))
        } else if d.dataset != first.dataset {
            Some(format!(
                "writes the dataset {:?}, rank 0 {:?}",
                d.dataset, first.dataset
            ))
        } else if d.element != first.element {
            Some(format!(
                "has a tile of {}, rank 0 of {}",
                d.element, first.element
            ))
        } else if d.kind != first.kind {
            Some("uses another kind of decomposition (or grid) than rank 0".to_string())
        } else {
            None
        };
        if let Some(what) = differs {
            return Err(bad(format!("rank {r} {what}")));
        }
    }
    let claims: Vec<TileClaim> = all.into_iter().map(|d| d.claim).collect();
    write_boxes(decomposition, &claims).map_err(|e| Error::Decomposition {
        reason: e.to_string(),
    })
}

/// The temporary name rank 0 creates the file under: hidden, next to the target, so the final
/// rename is atomic and a crash never leaves a file under the target name.
fn temporary_path(path: &Path) -> Result<PathBuf> {
    let name = path.file_name().ok_or_else(|| Error::Io {
        op: "naming a file at",
        path: path.to_path_buf(),
        source: std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the path has no file name",
        ),
    })?;
    let mut tmp = std::ffi::OsString::from(".");
    tmp.push(name);
    tmp.push(format!(".h5gds-{}.partial", std::process::id()));
    Ok(path.with_file_name(tmp))
}

/// Rank 0: creates the temporary file holding the dataset, allocated, and returns its name and
/// the dataset's file offset (`None` for a dataset without elements, which has no storage).
fn create<S: Source>(
    tile: &S,
    path: &Path,
    dataset: &str,
    shape: &[u64],
    settings: &Settings,
) -> Result<(PathBuf, Option<u64>)> {
    if path.is_dir() {
        return Err(Error::PathIsDirectory {
            path: path.to_path_buf(),
        });
    }
    let tmp = temporary_path(path)?;
    let result = (|| {
        let file = create_file(&tmp, crate::host::host_driver(settings)?)?;
        let desc = tile.descriptor()?;
        let file_type = hdf5_raw::locked(|| hdf5::Datatype::from_descriptor(&desc))
            .map_err(|e| Error::hdf5("creating the element type", path, Some(dataset), e))?;
        let dset = crate::host::create_dataset(&file, path, dataset, &file_type, shape, true)?;
        let offset = dset.offset();
        drop(dset);
        file.close()
            .map_err(|e| Error::hdf5("closing the file", path, None, e))?;
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

/// Every rank: writes its tile's runs into the temporary file.
#[allow(clippy::too_many_arguments)]
fn write_tile<S: Source>(
    tile: &S,
    tmp: &Path,
    path: &Path,
    dataset: &str,
    offset: Option<u64>,
    shape: &[u64],
    my_box: &Block,
    settings: &Settings,
) -> Result<()> {
    let Some(offset) = offset.filter(|_| !my_box.is_empty()) else {
        return Ok(());
    };
    let es = tile.element_size() as u64;
    let end = offset + shape.iter().product::<u64>() * es;
    let with_path = |e: Error| match e {
        Error::Hdf5 { op, message, .. } => Error::Hdf5 {
            op,
            path: path.to_path_buf(),
            dataset: Some(dataset.to_string()),
            message,
        },
        other => other,
    };
    let fapl = file_access(tile.driver(settings)?, path)?;
    let file = DriverFile::open_rdwr(tmp, &fapl)
        .map_err(|e| Error::hdf5("opening the file for the tile's bytes", path, None, e))?;
    file.set_eoa(end)
        .map_err(|e| Error::hdf5("setting the end of address", path, None, e))?;
    let runs = Runs::new(my_box, shape);
    tile.write(&file, offset, &runs, settings)
        .map_err(with_path)?;
    file.close()
        .map_err(|e| Error::hdf5("closing the file", path, None, e))
}

/// Rank 0, once the writes are agreed: the temporary file becomes the target, or goes.
fn finish(tmp: &Path, path: &Path, written: bool) -> Result<()> {
    if written {
        std::fs::rename(tmp, path).map_err(|source| {
            let _ = std::fs::remove_file(tmp);
            Error::Io {
                op: "renaming the written file into place at",
                path: path.to_path_buf(),
                source,
            }
        })
    } else {
        std::fs::remove_file(tmp).map_err(|source| Error::Io {
            op: "removing the partly written file",
            path: tmp.to_path_buf(),
            source,
        })
    }
}

/// The collective write (see [`super::to_file_with`]).
pub(crate) fn write<C: Communicator, S: Source>(
    comm: &C,
    tile: &S,
    path: &Path,
    dataset: &str,
    decomposition: &Decomposition,
    settings: &Settings,
) -> Result<()> {
    let rank = comm.rank() as usize;
    let described = describe(tile, path, dataset, decomposition, settings);
    let (_, descriptions) = agree_with(comm, "describing the tiles", described, |d| d.clone())?;
    // The same data on every rank: every rank reaches the same verdict, with no agreement.
    let (shape, boxes) = plan(&descriptions, decomposition)?;

    let created = if rank == 0 {
        create(tile, path, dataset, &shape, settings)
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

    let wrote = write_tile(
        tile,
        &tmp,
        path,
        dataset,
        offset,
        &shape,
        &boxes[rank],
        settings,
    );
    let written = agree(comm, "writing the tiles", wrote);

    let finished = if rank == 0 {
        finish(&tmp, path, written.is_ok())
    } else {
        Ok(())
    };
    let finished = agree(comm, "finishing the file", finished);
    written.and(finished)
}
