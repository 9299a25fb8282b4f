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
use crate::host_staging;
use crate::options::Settings;
use cudarc::driver::DevicePtr;
use h5gds_engine::collective::{Tile, TileFile, Writer};
use h5gds_engine::Error as EngineError;
use h5gds_runtime::hdf5::hid_t;
use h5gds_runtime::stream::synchronize;
use std::mem::{size_of, size_of_val};
use std::path::Path;

/// A tile as the write needs it: its shape, and how its bytes reach the file.
pub(crate) trait Source {
    /// The tile's element type.
    type Item: Element;
    fn shape(&self) -> Vec<u64>;
    /// The driver the tile's bytes are written through.
    fn driver(&self, settings: &Settings) -> Result<Driver>;
    /// Writes the tile into `to` through the file access list `fapl` (the HDF5 lock held).
    fn write(&self, to: &TileFile, fapl: hid_t, settings: &Settings) -> Result<(), EngineError>;
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
    fn write(&self, to: &TileFile, fapl: hid_t, _: &Settings) -> Result<(), EngineError> {
        let held = (fapl, size_of_val(self.elements) as u64);
        // SAFETY: the tile's host memory, of the bytes given.
        unsafe { to.write_direct(linked_hdf5(), held, self.elements.as_ptr() as u64) }
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
    fn write(&self, to: &TileFile, fapl: hid_t, settings: &Settings) -> Result<(), EngineError> {
        let api = linked_hdf5();
        let Some(data) = self.0.as_slice() else {
            // SAFETY: no memory and no byte to read (the engine checks the tile has none).
            return unsafe { to.write_direct(api, (fapl, 0), 0) };
        };
        let held = (fapl, (data.len() * size_of::<T>()) as u64);
        no_panic("writing a tile from device memory", || {
            let stream = self.0.stream();
            // The data is ready once every stream that wrote it is done.
            let (ptr, record) = data.device_ptr(stream);
            synchronize(stream)?;
            let written = match write_blocker::<T>(settings)? {
                // SAFETY: the tile's device allocation, of the bytes given; the gds driver hands
                // device memory to cuFile or its bounce buffers.
                None => unsafe { to.write_direct(api, held, ptr) },
                Some(_) => {
                    let size = settings.staging_buffer_size()?;
                    let ring =
                        |_: &[(u64, u64)]| Ok(host_staging::ring(size, held.1 as usize, stream).0);
                    // SAFETY: the tile's device allocation, of the bytes given.
                    unsafe { to.write_staged(api, held, (ptr, size), ring) }
                }
            };
            drop(record);
            Ok(written)
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
        let fapl = file_access(driver, self.path, false).map_err(|e| e.to_engine())?;
        hdf5_raw::locked(|| self.tile.write(to, fapl.id(), self.settings))
    }
}
