//! Arrays in GPU memory: [`DeviceArray`] (a cudarc allocation plus its shape), and reading and
//! writing them through the `gds` driver or the staged path.
//!
//! Host code never touches device memory here: data moves only through HDF5 with the `gds`
//! driver (which hands device buffers to cuFile or its own bounce buffers) and through CUDA
//! copies.

use crate::chunks::DatasetFace;
use crate::driver::Driver;
use crate::element::{descriptor_of, Element};
use crate::error::no_panic;
use crate::error::{Error, Result};
use crate::file::{create_dataset, open_dataset, OpenDataset};
use crate::hdf5_raw::{self, NewLayout};
use crate::host::Metno;
use crate::layout::{check_types, stored_layout};
use crate::options::Settings;
use crate::route::{driver_blocker, Storage, Transfer as RouteFacts};
use crate::select::Block;
use crate::transfer::Locked;
use crate::ReadOptions;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use h5gds_chunk_codec::Filter;
use h5gds_chunk_codec::{ChunkIndex, Hyperslab};
use h5gds_engine::chunks::StoredChunks;
use h5gds_engine::device::{self, Face, ReadFace, Selected, Step};
use h5gds_engine::facts::StoredLayout;
use h5gds_engine::policy::device_read::{self, ReadRoute, StoredRead};
use h5gds_engine::policy::settings::CallSettings;
use h5gds_engine::staged::NotBool;
use h5gds_engine::{CompressedWrite, Dataset, DeviceArray as EngineArray, Memory};
use h5gds_runtime::cuda::call;
use h5gds_runtime::staging_ring::StagingRing;
use h5gds_runtime::stream::{copy_to_device, synchronize};
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
            let (ptr, record) = data.device_ptr(stream);
            synchronize(stream)?;
            let face = Moving {
                write: true,
                path,
                name: dataset,
                stream,
                driver: &CallSettings::default(),
                source: (),
            };
            let zeros = vec![0; shape.len()];
            // Read only for a staged write, as before the engine moved it.
            let staging_size = match blocker {
                Some(_) => settings.staging_buffer_size()?,
                None => 0,
            };
            let (ids, at) = (
                (ds.dset.id(), mem_type.id()),
                (ptr, size_of::<T>(), staging_size),
            );
            face.transfer(ids, (&zeros, &shape), at, |io| {
                // SAFETY: the allocation holds the whole array in the memory type, alive until
                // `record` is dropped; the gds driver hands device buffers to cuFile or its
                // bounce buffers.
                unsafe { device::write(&face, io, dataset, blocker.as_deref()) }
            })?;
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
            threads: crate::options::driver_settings()?.nthreads()?,
        };
        let memory = Memory::Device(EngineArray { address, stream }, nbytes);
        let (id, mem) = (ds.dset.id(), mem_type.id());
        let handle = Dataset::new(hdf5_raw::linked_hdf5(), id, mem, size_of::<T>(), Metno);
        (handle.named(dataset).write_chunks(&write, memory))
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

/// An open dataset prepared for device reads: its types, storage and the settings' facts.
pub(crate) struct DeviceSource {
    pub ds: OpenDataset,
    pub types: crate::layout::Types,
    /// How it is stored, in HDF5's words and in route's.
    layout: StoredLayout,
    storage: Storage,
    /// What stages a whole read, whatever the storage (`route::blocker`).
    facts: RouteFacts,
    staging_size: usize,
    /// How h5gds decodes the chunks on the host's threads, or why it cannot (filtered chunks).
    host: std::result::Result<h5gds_engine::decoded::Plan, String>,
    /// The allocated chunks' stored sizes, listed at the first GPU-decoded read.
    chunk_index: std::cell::OnceCell<ChunkIndex>,
    /// The device path the settings ask for.
    device_path: crate::DevicePath,
    /// The driver's settings (thread counts, its staging verdict), loaded at most once for the
    /// dataset, however many reads decode its chunks (batched reads are many reads).
    vfd_settings: CallSettings,
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
        let mut facts = transfer::<T>(h5gds_runtime::settings::goes_through_gds(device_path));
        let driver = Driver::unless(&driver_blocker(&facts));
        // With the cache off, HDF5 reads unfiltered chunks straight into the caller's buffer.
        let ds = open_dataset(path, dataset, driver, driver == Driver::Gds)?;
        let types = check_types::<T>(&ds, options.allow_conversion)?;
        facts.conversion = types.conversion.clone();
        let layout = stored_layout(&ds)?;
        // The chunk cache is off where the route could be direct, so the memory type's size
        // tells as well as the stored one that no chunk fits it.
        let storage = device::storage(&layout, types.mem.size(), |chunk| {
            Ok::<_, Error>(ds.index_of(chunk)?.offsets().into_iter().collect())
        })?;
        let vfd_settings = CallSettings::default();
        let host = match &layout {
            StoredLayout::Chunked { filters, .. } if !filters.is_empty() => {
                let threads = vfd_settings.nthreads()?;
                crate::host::host_decoding(&ds, &types, threads)?
            }
            _ => Err("its chunks are not filtered".to_string()),
        };
        Ok(DeviceSource {
            ds,
            types,
            layout,
            storage,
            facts,
            staging_size: settings.staging_buffer_size()?,
            host,
            chunk_index: std::cell::OnceCell::new(),
            device_path,
            vfd_settings,
        })
    }

    /// Reads `region` (file coordinates) into a new device array of its shape, in the order
    /// `h5gds_engine::policy::device_read` gives: a read-only file's bytes with no HDF5 call
    /// where the driver would stage them anyway, else decoded, direct or staged.
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
        let ds = &self.ds;
        let (dest, record) = data.device_ptr_mut(stream);
        // The allocation is usable by other contexts and threads (the driver's) once the
        // stream has made it.
        synchronize(stream)?;
        let ones = vec![1; region.count.len()];
        let selection = Hyperslab {
            start: &region.start,
            step: &ones,
            count: &region.count,
        };
        let nbytes = region.len() as usize * size_of::<T>();
        let read = StoredRead {
            selection: &selection,
            nbytes,
            facts: &self.facts,
            path: self.device_path,
        };
        let vfd = || self.vfd_settings.get().map_err(|e| e.to_string());
        let stored = || crate::host::stored_of(ds, &self.types);
        let copy = |host: *const u8| {
            // SAFETY: `dest` holds the region's `nbytes` (allocated above for its shape); the
            // pinned buffer holds them until the copy has finished (synchronized here).
            unsafe { copy_to_device(stream, dest, host, nbytes) }?;
            Ok(synchronize(stream)?)
        };
        let error = Error::engine(&ds.path, &ds.name);
        if device_read::read_stored(read, stored, vfd, copy, error)? {
            drop(record);
            return Ok(array);
        }
        let face = Moving {
            write: false,
            path: &ds.path,
            name: &ds.name,
            stream,
            driver: &self.vfd_settings,
            source: self,
        };
        let route = ReadRoute {
            dataset: &ds.name,
            layout: &self.layout,
            storage: &self.storage,
            facts: &self.facts,
            path: self.device_path,
            host: (self.host.as_ref())
                .map(|p| p.decoding().pipeline)
                .map_err(Clone::clone),
        };
        let ids = (ds.dset.id(), self.types.mem.id());
        let at = (dest, size_of::<T>(), self.staging_size);
        face.transfer(ids, (&region.start, &region.count), at, |io| {
            // SAFETY: `dest` holds the region's elements of `T` (allocated above for its
            // shape), alive until `record` is dropped.
            unsafe { device_read::read(&face, io, &route) }
        })?;
        synchronize(stream)?;
        drop(record);
        Ok(array)
    }
}

/// A transfer as the engine's device transfer sees it: on the array's stream, its errors and
/// debug log lines naming the file and the dataset; `source`: the [`DeviceSource`] of a read.
struct Moving<'a, S> {
    write: bool,
    path: &'a Path,
    name: &'a str,
    stream: &'a Arc<CudaStream>,
    /// The driver's settings, loaded at the first ask.
    driver: &'a CallSettings,
    source: S,
}

impl<S> Moving<'_, S> {
    /// Prepares the transfer of the box `(start, count)` of the dataset `ids` names (with the
    /// memory type's id) to or from the device array at `address` (elements of `item` bytes,
    /// staged through buffers of at most `staging_size`), and runs `go` over it where it moves
    /// anything.
    fn transfer(
        &self,
        ids: (i64, i64),
        (start, count): (&[u64], &[u64]),
        (address, item, staging_size): (u64, usize, usize),
        go: impl FnOnce(&Selected) -> Result<()>,
    ) -> Result<()> {
        let ones = vec![1; count.len()];
        let selection = Hyperslab {
            start,
            step: &ones,
            count,
        };
        let bytes = count.iter().product::<u64>() as usize * item;
        let prepared = Locked::prepare(self.write, ids, selection, (address as usize, bytes))
            .map_err(|m| self.failed(Step::Direct, m))?;
        let Some(prepared) = &prepared.0 else {
            return Ok(());
        };
        go(&Selected {
            prepared,
            selection,
            item,
            address,
            staging_size,
        })
    }
}

impl<S> Face for Moving<'_, S> {
    type Error = Error;
    type Stream = Arc<CudaStream>;

    fn locked<R>(&self, call: impl FnOnce() -> R) -> R {
        hdf5_raw::locked(call)
    }

    fn ring(&self, bytes: usize, _: usize) -> Result<StagingRing<Arc<CudaStream>>> {
        Ok(crate::host_staging::ring(bytes, bytes, self.stream).0)
    }

    fn driver(&self) -> Result<&h5gds::VfdSettings> {
        Ok(self.driver.get()?)
    }

    fn failed(&self, step: Step, message: String) -> Error {
        let op = match (self.write, step) {
            (true, Step::Direct) => "writing from device memory",
            (true, _) => "writing from the staging buffer",
            (false, Step::Direct) => "reading into device memory",
            (false, Step::Codec) => "loading nvCOMP",
            (false, _) => "reading into the staging buffer",
        };
        Error::hdf5(op, self.path, Some(self.name), message)
    }
}

impl<'a> ReadFace for Moving<'a, &'a DeviceSource> {
    type Chunks = DatasetFace<'a>;

    fn not_bool(&self, n: NotBool) -> Error {
        Error::not_bool(self.path, self.name)(n)
    }

    fn stored_chunks(
        &self,
        chunk: &[u64],
        touched: usize,
    ) -> Result<StoredChunks<'static, DatasetFace<'a>>> {
        self.source.ds.stored_chunks(chunk, touched)
    }

    fn with_index<R>(
        &self,
        chunk: &[u64],
        _: Vec<Vec<u64>>,
        read: impl FnOnce(&StoredChunks<'static, DatasetFace<'a>>, &ChunkIndex) -> Result<R>,
    ) -> Result<R> {
        // The index is listed once per source (batched reads read many regions): the stored
        // chunks only read the chunks they are handed.
        let (ds, listed) = (&self.source.ds, &self.source.chunk_index);
        let index = match listed.get() {
            Some(index) => index,
            None => {
                let index = ds.index_of(chunk)?;
                listed.get_or_init(|| index)
            }
        };
        read(&ds.stored_chunks(chunk, 0)?, index)
    }

    fn stream(&self) -> Result<Arc<CudaStream>> {
        Ok(self.stream.clone())
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
