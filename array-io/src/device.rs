//! Arrays in GPU memory: [`DeviceArray`] (a cudarc allocation plus its shape), and reading and
//! writing them through the `gds` driver or the staged path.
//!
//! Host code never touches device memory here: data moves only through HDF5 with the `gds`
//! driver (which hands device buffers to cuFile or its own bounce buffers) and through CUDA
//! copies.

use crate::driver::Driver;
use crate::element::{descriptor_of, Element};
use crate::error::no_panic;
use crate::error::{Error, Result};
use crate::file::{create_dataset, open_dataset, OpenDataset};
use crate::hdf5_raw::NewLayout;
use crate::layout::check_types;
use crate::options::Settings;
use crate::route::{driver_blocker, Transfer as RouteFacts};
use crate::select::Block;
use crate::ReadOptions;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use h5gds_chunk_codec::{Filter, Hyperslab};
use h5gds_engine::Selection;
use h5gds_engine::{CompressedWrite, DeviceArray as EngineArray, DeviceMemory, Kept, Memory};
use h5gds_runtime::cuda::{call, DeviceContext};
use h5gds_runtime::stream::synchronize;
use ndarray::{ArrayBase, ArrayD, Data, Dimension};
use std::mem::size_of;
use std::path::Path;
use std::sync::Arc;

/// An n-dimensional array in GPU memory: a cudarc allocation of its elements in row-major
/// order, and its shape. An array with no elements has no allocation (CUDA cannot allocate
/// zero bytes).
#[derive(Debug)]
pub struct DeviceArray<T> {
    data: Option<CudaSlice<T>>,
    shape: Vec<usize>,
    stream: Arc<CudaStream>,
}

impl<T> Drop for DeviceArray<T> {
    /// The `gds` driver caches which address ranges are device memory; once this allocation is
    /// freed its addresses may come back as host memory (a staging buffer, say), so the
    /// in-process driver forgets the range first.
    fn drop(&mut self) {
        let data = self.data.as_ref();
        let stream = &self.stream;
        // Nothing may unwind out of a destructor; a failure here only costs a cache entry.
        let _ = no_panic("forgetting a device range", || {
            forget_range(data, stream);
            Ok(())
        });
    }
}

/// Tells the in-process `gds` driver that `data`'s range is about to stop being device memory.
fn forget_range<T>(data: Option<&CudaSlice<T>>, stream: &Arc<CudaStream>) {
    if let Some(data) = data {
        let (base, _record) = data.device_ptr(stream);
        h5gds_runtime::device_ranges::forget_device_range(base);
    }
}

/// Where device data is placed: a cudarc stream, or a context (meaning its default stream).
pub trait IntoStream {
    fn into_stream(self) -> Arc<CudaStream>;
}

impl IntoStream for Arc<CudaStream> {
    fn into_stream(self) -> Arc<CudaStream> {
        self
    }
}

impl IntoStream for &Arc<CudaStream> {
    fn into_stream(self) -> Arc<CudaStream> {
        self.clone()
    }
}

impl IntoStream for &Arc<CudaContext> {
    fn into_stream(self) -> Arc<CudaStream> {
        self.default_stream()
    }
}

impl IntoStream for Arc<CudaContext> {
    fn into_stream(self) -> Arc<CudaStream> {
        self.default_stream()
    }
}

fn element_count(shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or(Error::ShapeMismatch {
            shape: shape.to_vec(),
            expected: usize::MAX,
            actual: 0,
        })
}

impl<T: Element> DeviceArray<T> {
    /// Wraps a device allocation holding an array of `shape` in row-major order.
    pub fn from_slice(data: CudaSlice<T>, shape: &[usize]) -> Result<DeviceArray<T>> {
        let expected = element_count(shape)?;
        if expected != data.len() {
            return Err(Error::ShapeMismatch {
                shape: shape.to_vec(),
                expected,
                actual: data.len(),
            });
        }
        let stream = data.stream().clone();
        Ok(DeviceArray {
            data: (expected > 0).then_some(data),
            shape: shape.to_vec(),
            stream,
        })
    }

    /// An uninitialised array of `shape` on `stream` (the caller fills every element).
    pub(crate) fn alloc(stream: Arc<CudaStream>, shape: &[usize]) -> Result<DeviceArray<T>> {
        let len = element_count(shape)?;
        let data = if len == 0 {
            None
        } else {
            // SAFETY: the memory is unset; every caller writes all of it before it is read.
            Some(call("allocating device memory", || unsafe {
                stream.alloc::<T>(len)
            })?)
        };
        Ok(DeviceArray {
            data,
            shape: shape.to_vec(),
            stream,
        })
    }

    /// An array of zeros of `shape`, on `stream` (or a context's default stream).
    pub fn zeros(stream: impl IntoStream, shape: &[usize]) -> Result<DeviceArray<T>> {
        let mut array = Self::alloc(stream.into_stream(), shape)?;
        if let Some(data) = array.data.as_mut() {
            let stream = array.stream.clone();
            call("zeroing device memory", || stream.memset_zeros(data))?;
        }
        Ok(array)
    }

    /// A copy of a host array, on `stream` (or a context's default stream).
    pub fn from_host<S, D>(stream: impl IntoStream, array: &ArrayBase<S, D>) -> Result<Self>
    where
        S: Data<Elem = T>,
        D: Dimension,
    {
        let stream = stream.into_stream();
        let standard = array.as_standard_layout();
        let elements = standard.as_slice().unwrap_or(&[]);
        let data = if elements.is_empty() {
            None
        } else {
            Some(call("copying to the device", || {
                stream.clone_htod(elements)
            })?)
        };
        synchronize(&stream)?;
        Ok(DeviceArray {
            data,
            shape: array.shape().to_vec(),
            stream,
        })
    }

    /// A host copy of the array.
    pub fn to_host(&self) -> Result<ArrayD<T>> {
        let values = match &self.data {
            None => Vec::new(),
            Some(data) => call("copying from the device", || self.stream.clone_dtoh(data))?,
        };
        synchronize(&self.stream)?;
        crate::host::shaped(self.shape.clone(), values)
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The number of dimensions.
    pub fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.data.as_ref().map_or(0, |d| d.len())
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.data.is_none()
    }

    /// The stream the array lives on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The allocation (`None` for an empty array).
    pub fn as_slice(&self) -> Option<&CudaSlice<T>> {
        self.data.as_ref()
    }

    /// The allocation, mutably (`None` for an empty array).
    pub fn as_slice_mut(&mut self) -> Option<&mut CudaSlice<T>> {
        self.data.as_mut()
    }

    /// The allocation and the shape.
    pub fn into_parts(mut self) -> (Option<CudaSlice<T>>, Vec<usize>) {
        // The allocation lives on with the caller; a stale cache entry for it is harmless
        // until it is freed, and the driver re-asks CUDA when a cached range fails.
        (self.data.take(), std::mem::take(&mut self.shape))
    }
}

/// The facts of a transfer of `T` that the settings (`use_gds`) and the element type decide. The
/// array's device is not one of them: the driver moves every device's memory in its own context.
fn transfer<T: Element>(use_gds: bool) -> RouteFacts {
    RouteFacts {
        staged_by_settings: !use_gds,
        checked_bytes: T::CHECKED_BYTES,
        conversion: None,
        other_driver: None,
    }
}

/// Why a write of `T` must go through the staged path instead of the `gds` driver, if it must
/// (the settings, or the device).
#[cfg(feature = "mpi")]
pub(crate) fn write_blocker<T: Element>(settings: &Settings) -> Result<Option<String>> {
    Ok(driver_blocker(&transfer::<T>(settings.use_gds()?)))
}

/// Writes a device array as `dataset` of a new file at `path` (see [`crate::to_file`]).
pub(crate) fn write<T: Element>(
    array: &DeviceArray<T>,
    path: &Path,
    dataset: &str,
    settings: &Settings,
) -> Result<()> {
    no_panic("writing from device memory", || {
        let desc = descriptor_of::<T>()?;
        crate::file::check_dataset_name(dataset)?;
        let stream = &array.stream;
        // Writes never check bytes or convert: only the settings and the device decide.
        let blocker = driver_blocker(&transfer::<T>(settings.use_gds()?));
        let driver = Driver::unless(&blocker);
        let shape: Vec<u64> = array.shape.iter().map(|&d| d as u64).collect();
        let contiguous = (&shape[..], NewLayout::Contiguous { early: false });
        let (ds, mem_type) = create_dataset(path, dataset, driver, &desc, contiguous)?;
        if let Some(data) = &array.data {
            // The data is ready once every stream that wrote it is done: device_ptr makes the
            // array's stream wait for recorded writes, then the stream is synchronized.
            let (address, record) = data.device_ptr(stream);
            synchronize(stream)?;
            let memory = DeviceMemory {
                address,
                nbytes: data.len() * size_of::<T>(),
                context: DeviceContext::of_stream(stream),
                stream: Some(stream),
                bools: false,
                path: Some(settings.device_path()?),
                staging_size: settings.staging_buffer_size,
            };
            let (zeros, ones) = (vec![0; shape.len()], vec![1; shape.len()]);
            let all = Hyperslab {
                start: &zeros,
                step: &ones,
                count: &shape,
            };
            (ds.engine(&mem_type).write(all, memory)).map_err(Error::engine(path, dataset))?;
            drop(record);
        }
        ds.close()
    })
}

/// Writes a device array as chunked dataset `dataset` of a new file at `path`, in chunks of
/// `chunk`, its chunks encoded through `filter` where the engine decides
/// (`h5gds_engine::policy::write`; see [`crate::to_file_compressed`]).
pub(crate) fn write_compressed<T: Element>(
    array: &DeviceArray<T>,
    path: &Path,
    dataset: &str,
    chunk: &[usize],
    filter: Filter,
) -> Result<()> {
    no_panic("writing compressed from device memory", || {
        let desc = descriptor_of::<T>()?;
        crate::file::check_dataset_name(dataset)?;
        check_chunk(&array.shape, chunk, dataset)?;
        let blocker = driver_blocker(&transfer::<T>(Settings::default().use_gds()?));
        let shape: Vec<u64> = array.shape.iter().map(|&d| d as u64).collect();
        let chunk: Vec<u64> = chunk.iter().map(|&c| c as u64).collect();
        let (filter_id, cd_values) = (filter.id, &filter.values[..]);
        let stored = NewLayout::Filtered {
            chunk: &chunk,
            filter: filter_id,
            cd_values,
        };
        let (driver, stream) = (Driver::unless(&blocker), &array.stream);
        let (ds, mem_type) = create_dataset(path, dataset, driver, &desc, (&shape, stored))?;
        // As for `write`: the array's stream waits for recorded writes, then is synchronized.
        let pointer = array.data.as_ref().map(|data| data.device_ptr(stream));
        synchronize(stream)?;
        let address = pointer.as_ref().map_or(0, |(ptr, _)| *ptr);
        let nbytes = element_count(&array.shape)? * size_of::<T>();
        let write = CompressedWrite {
            shape: &shape,
            chunk: &chunk,
            element_size: size_of::<T>(),
            filters: std::slice::from_ref(&filter),
            driver_blocker: blocker,
        };
        let memory = Memory::Device(EngineArray { address, stream }, nbytes);
        (ds.engine(&mem_type).write_chunks(&write, memory))
            .map_err(Error::engine(path, dataset))?;
        drop(pointer);
        ds.close()
    })
}

fn check_chunk(shape: &[usize], chunk: &[usize], dataset: &str) -> Result<()> {
    let bad = |reason: String| Error::InvalidChunkShape {
        dataset: dataset.to_string(),
        chunk_shape: chunk.to_vec(),
        shape: shape.to_vec(),
        reason,
    };
    if shape.is_empty() {
        return Err(bad("a scalar cannot be stored in chunks".into()));
    }
    if chunk.len() != shape.len() {
        let rank = shape.len();
        return Err(bad(format!("it needs {rank} entries, one per dimension")));
    }
    for (d, (&c, &n)) in chunk.iter().zip(shape).enumerate() {
        if c == 0 || c > n.max(1) {
            return Err(bad(format!(
                "entry {d} must be between 1 and the array's length there ({n})"
            )));
        }
    }
    Ok(())
}

/// An open dataset prepared for device reads: its types, and what the engine learns of it.
pub(crate) struct DeviceSource {
    pub ds: OpenDataset,
    pub types: crate::layout::Types,
    /// What the engine learns of the dataset, kept across the reads of a batch.
    kept: Kept,
    device_path: crate::DevicePath,
    staging_size: usize,
}

impl DeviceSource {
    pub fn open<T: Element>(
        path: &Path,
        dataset: &str,
        options: &ReadOptions,
    ) -> Result<DeviceSource> {
        descriptor_of::<T>()?;
        let settings = &options.settings;
        let device_path = settings.device_path()?;
        // The settings and the device choose the driver; a bool or a conversion only stages
        // the data.
        let facts = transfer::<T>(h5gds_runtime::settings::goes_through_gds(device_path));
        let driver = Driver::unless(&driver_blocker(&facts));
        // With the cache off, HDF5 reads unfiltered chunks straight into the caller's buffer.
        let ds = open_dataset(path, dataset, driver, driver == Driver::Gds)?;
        let types = check_types::<T>(&ds, options.allow_conversion)?;
        Ok(DeviceSource {
            kept: Kept::default(),
            ds,
            types,
            device_path,
            staging_size: settings.staging_buffer_size()?,
        })
    }

    /// Reads `region` (file coordinates) into a new device array of its shape, the way the
    /// engine's dataset handle takes (`h5gds_engine::policy::device_read`'s order).
    pub fn read<T: Element>(
        &self,
        region: &Block,
        stream: &Arc<CudaStream>,
    ) -> Result<DeviceArray<T>> {
        let shape: Vec<usize> = region.count.iter().map(|&d| d as usize).collect();
        let mut array = DeviceArray::<T>::alloc(stream.clone(), &shape)?;
        let Some(data) = array.data.as_mut() else {
            return Ok(array);
        };
        let (address, record) = data.device_ptr_mut(stream);
        // The allocation is usable by other contexts and threads (the driver's) once the
        // stream has made it.
        synchronize(stream)?;
        let ones = vec![1; region.count.len()];
        let sel = Selection::Slab(Hyperslab {
            start: &region.start,
            step: &ones,
            count: &region.count,
        });
        let out = DeviceMemory {
            address,
            nbytes: region.len() as usize * size_of::<T>(),
            context: DeviceContext::of_stream(stream),
            stream: Some(stream),
            bools: T::CHECKED_BYTES,
            path: Some(self.device_path),
            staging_size: Some(self.staging_size),
        };
        let ds = &self.ds;
        let handle = ds.engine(&self.types.mem).keeping(&self.kept);
        (handle.read(sel, out)).map_err(Error::engine(&ds.path, &ds.name))?;
        synchronize(stream)?;
        drop(record);
        Ok(array)
    }
}

/// Reads the box `region` gives of a dataset's shape into device memory (the whole dataset: see
/// [`crate::from_file_to_device`]).
pub(crate) fn read<T: Element>(
    path: &Path,
    dataset: &str,
    stream: Arc<CudaStream>,
    options: &ReadOptions,
    region: impl FnOnce(&[u64]) -> Result<Block>,
) -> Result<DeviceArray<T>> {
    no_panic("reading into device memory", || {
        let source = DeviceSource::open::<T>(path, dataset, options)?;
        let array = source.read(&region(&source.ds.shape)?, &stream)?;
        source.ds.close()?;
        Ok(array)
    })
}
