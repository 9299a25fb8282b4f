//! array-io's side of the collective write (`h5gds_engine::collective::write`, which runs the
//! protocol): a tile's own checks and description, rank 0's file created with hdf5-metno, and the
//! tile's memory handed to the file's driver (host memory straight; device memory straight to
//! `gds`, or staged through pinned buffers where the settings stage it).

use crate::device::{write_blocker, DeviceArray};
use crate::driver::{file_access, Driver};
use crate::element::{descriptor_of, Element};
use crate::error::{no_panic, Result};
use crate::file::{check_dataset_name, create_dataset};
use crate::hdf5_raw::{self, linked_hdf5, NewLayout};
use crate::options::Settings;
use cudarc::driver::DevicePtr;
use h5gds_engine::collective::{self as engine, ByteRun, DriverFile};
use h5gds_engine::collective::{Tile, TileFile, Way, Writer};
use h5gds_engine::Error as EngineError;
use h5gds_runtime::stream::synchronize;
use std::mem::{size_of, size_of_val};
use std::path::Path;

/// A tile as the write needs it: its shape, and how its bytes reach the file.
pub(crate) trait Source {
    /// The tile's element type.
    type Item: Element;
    fn shape(&self) -> Vec<u64>;
    /// The bytes of the tile's memory.
    fn held(&self) -> u64;
    /// The driver the tile's bytes are written through.
    fn driver(&self, settings: &Settings) -> Result<Driver>;
    /// Writes the tile's byte `runs` (of its own row-major order, inside the tile) into `file`.
    fn write(
        &self,
        file: &DriverFile,
        runs: &[ByteRun],
        settings: &Settings,
    ) -> Result<Way, EngineError>;
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
    fn held(&self) -> u64 {
        size_of_val(self.elements) as u64
    }
    fn driver(&self, settings: &Settings) -> Result<Driver> {
        crate::host::host_driver(settings)
    }
    fn write(&self, file: &DriverFile, runs: &[ByteRun], _: &Settings) -> Result<Way, EngineError> {
        // SAFETY: every run lies inside the tile's host memory (the engine's contract).
        unsafe { engine::write_runs(file, runs, self.elements.as_ptr() as u64) }?;
        Ok(Way::Direct)
    }
}

/// A device tile.
pub(crate) struct DeviceTile<'a, T>(pub &'a DeviceArray<T>);

impl<T: Element> Source for DeviceTile<'_, T> {
    type Item = T;
    fn shape(&self) -> Vec<u64> {
        self.0.shape().iter().map(|&d| d as u64).collect()
    }
    fn held(&self) -> u64 {
        (self.0.as_slice().map_or(0, |d| d.len()) * size_of::<T>()) as u64
    }
    fn driver(&self, settings: &Settings) -> Result<Driver> {
        Ok(Driver::unless(&write_blocker::<T>(settings)?))
    }
    fn write(
        &self,
        file: &DriverFile,
        runs: &[ByteRun],
        settings: &Settings,
    ) -> Result<Way, EngineError> {
        let Some(data) = self.0.as_slice() else {
            return Ok(Way::Direct);
        };
        no_panic("writing a tile from device memory", || {
            let stream = self.0.stream();
            let es = size_of::<T>();
            // The data is ready once every stream that wrote it is done.
            let (ptr, record) = data.device_ptr(stream);
            synchronize(stream)?;
            let way = match write_blocker::<T>(settings)? {
                // SAFETY: the runs lie inside the allocation (the engine's contract); the gds
                // driver hands device memory to cuFile or its bounce buffers.
                None => unsafe { engine::write_runs(file, runs, ptr) }.map(|()| Way::Direct),
                Some(_) => {
                    let size = settings.staging_buffer_size()?;
                    let (mut ring, _) = crate::host_staging::ring(size, data.len() * es, stream);
                    engine::staged_pieces(data.len() as u64, es, size).and_then(|pieces| {
                        let ring = (&mut ring, &pieces[..]);
                        engine::write_staged(file, ring, (ptr, es), runs).map(|()| Way::Staged)
                    })
                }
            };
            drop(record);
            Ok(way)
        })
        .map_err(|e| e.to_engine())?
    }
}

/// A tile with where it goes: what array-io brings to the engine's protocol.
pub(crate) struct Write<'a, S> {
    pub tile: &'a S,
    pub path: &'a Path,
    pub dataset: &'a str,
    pub settings: &'a Settings,
}

impl<S: Source> Writer for Write<'_, S> {
    fn describe(&self) -> Result<Tile, EngineError> {
        (|| {
            descriptor_of::<S::Item>()?;
            check_dataset_name(self.dataset)?;
            self.tile.driver(self.settings)?;
            self.settings.staging_buffer_size()?;
            Ok(Tile {
                path: self.path.to_path_buf(),
                dataset: self.dataset.to_string(),
                element: S::Item::NAME.into(),
                item: size_of::<S::Item>(),
                shape: self.tile.shape(),
            })
        })()
        .map_err(|e: crate::Error| e.to_engine())
    }

    fn create(&self, tmp: &Path, dataset: &str, shape: &[u64]) -> Result<Option<u64>, EngineError> {
        (|| {
            let driver = crate::host::host_driver(self.settings)?;
            let desc = descriptor_of::<S::Item>()?;
            let early = (shape, NewLayout::Contiguous { early: true });
            let (ds, _) = create_dataset(tmp, dataset, driver, &desc, early)?;
            let offset = ds.dset.offset();
            ds.close()?;
            Ok(offset)
        })()
        .map_err(|e: crate::Error| e.to_engine())
    }

    fn write(&self, to: &TileFile) -> Result<(), EngineError> {
        let driver = self.tile.driver(self.settings).map_err(|e| e.to_engine())?;
        let fapl = file_access(driver, self.path).map_err(|e| e.to_engine())?;
        hdf5_raw::locked(|| {
            to.write(
                linked_hdf5(),
                (fapl.id(), self.tile.held()),
                |file, runs| self.tile.write(file, runs, self.settings),
            )
        })
    }
}
