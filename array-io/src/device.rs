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
use crate::file::{create_file, open_dataset, OpenDataset};
use crate::hdf5_raw::{self, select_blocks, Spaces};
use crate::host_codec::Planned;
use crate::host_staging::{read_block, write_all, Elements, HostStaging};
use crate::layout::{check_types, filter_ids, storage};
use crate::options::{driver_settings, goes_through_gds, Settings};
use crate::route::{blocker, driver_blocker, plan, Decoder, Route, Storage, Transfer};
use crate::select::Block;
use crate::ReadOptions;
use cudarc::driver::{sys, CudaContext, CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use h5gds_chunk_codec::Hyperslab;
use h5gds_engine::gpu_decoded::{self, CompressedRead};
use h5gds_runtime::cuda::call;
use h5gds_runtime::stream::synchronize;
use ndarray::{ArrayBase, ArrayD, Data, Dimension, IxDyn};
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
        ArrayD::from_shape_vec(IxDyn(&self.shape), values).map_err(|_| Error::ShapeMismatch {
            shape: self.shape.clone(),
            expected: self.len(),
            actual: self.data.as_ref().map_or(0, |d| d.len()),
        })
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
fn transfer<T: Element>(use_gds: bool) -> Transfer {
    Transfer {
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
        write_unguarded(array, path, dataset, settings)
    })
}

fn write_unguarded<T: Element>(
    array: &DeviceArray<T>,
    path: &Path,
    dataset: &str,
    settings: &Settings,
) -> Result<()> {
    let desc = descriptor_of::<T>()?;
    crate::file::check_dataset_name(dataset)?;
    let stream = &array.stream;
    // Writes never check bytes or convert: only the settings and the device decide.
    let blocker = driver_blocker(&transfer::<T>(settings.use_gds()?));
    let direct = blocker.is_none();
    let driver = if direct { Driver::Gds } else { Driver::Sec2 };
    let shape: Vec<u64> = array.shape.iter().map(|&d| d as u64).collect();
    let file = create_file(path, driver)?;
    let mem_type = hdf5_raw::locked(|| hdf5::Datatype::from_descriptor(&desc))
        .map_err(|e| Error::hdf5("creating the element type", path, Some(dataset), e))?;
    let dset = crate::host::create_dataset(&file, path, dataset, &mem_type, &shape, false)?;
    if let Some(data) = &array.data {
        // The data is ready once every stream that wrote it is done: device_ptr makes the
        // array's stream wait for recorded writes, then the stream is synchronized.
        let (ptr, record) = data.device_ptr(stream);
        synchronize(stream)?;
        if direct {
            crate::log::debug(format_args!(
                "{}: writing {dataset:?} straight from device memory through the gds driver",
                path.display()
            ));
            // SAFETY: the allocation holds the whole array in the memory type; the gds driver
            // hands device buffers to cuFile or its bounce buffers.
            unsafe { hdf5_raw::write(&dset, &mem_type, Spaces::default(), ptr as *const _) }
                .map_err(|e| Error::hdf5("writing from device memory", path, Some(dataset), e))?;
        } else {
            let size = settings.staging_buffer_size()?;
            crate::log::debug(format_args!(
                "{}: writing {dataset:?} through a host staging buffer: {}",
                path.display(),
                blocker.as_deref().unwrap_or("")
            ));
            let bytes = array.len() * std::mem::size_of::<T>();
            let driver = crate::options::driver_settings();
            let mut staging = HostStaging::pipelined(size, bytes, &driver, stream);
            let elements = Elements {
                mem_type: &mem_type,
                size: std::mem::size_of::<T>(),
                check_bool: false,
            };
            write_all(&dset, path, dataset, &shape, &elements, ptr, &mut staging)?;
        }
        drop(record);
    }
    drop(dset);
    file.close()
        .map_err(|e| Error::hdf5("closing the file", path, None, e))
}

/// An open dataset prepared for device reads: its types, storage and the settings' verdict.
pub(crate) struct DeviceSource {
    pub ds: OpenDataset,
    pub types: crate::layout::Types,
    pub storage: crate::route::Storage,
    pub blocker: Option<String>,
    pub staging_size: usize,
    /// The pipeline's filter ids (filtered chunks; whether nvCOMP decodes them is asked per read).
    filters: Vec<i32>,
    /// How h5gds decodes the chunks on the host's threads, or why it cannot (filtered chunks).
    host: std::result::Result<Planned, String>,
    /// Whether the chunks are filtered (then one of the three decodes them).
    filtered: bool,
    /// The allocated chunks' stored sizes, listed at the first GPU-decoded read.
    chunk_index: std::cell::OnceCell<h5gds_chunk_codec::ChunkIndex>,
    /// The device path the settings ask for.
    device_path: crate::DevicePath,
    /// The driver's settings (thread counts, its staging verdict), loaded at most once for the
    /// dataset, however many reads decode its chunks (batched reads are many reads).
    vfd_settings: std::cell::OnceCell<h5gds::VfdSettings>,
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
        let mut facts = transfer::<T>(goes_through_gds(device_path));
        let driver = match driver_blocker(&facts) {
            None => Driver::Gds,
            Some(_) => Driver::Sec2,
        };
        // With the cache off, HDF5 reads unfiltered chunks straight into the caller's buffer.
        let ds = open_dataset(path, dataset, driver, driver == Driver::Gds)?;
        let types = check_types::<T>(&ds, options.allow_conversion)?;
        facts.conversion = types.conversion.clone();
        let blocker = blocker(&facts);
        let storage = storage(&ds)?;
        let filtered = matches!(storage, Storage::Chunked { filtered: true, .. });
        let vfd_settings = std::cell::OnceCell::new();
        let (filters, host) = if filtered {
            let filters = filter_ids(&ds)?;
            let threads = vfd_settings.get_or_init(driver_settings).nthreads;
            (
                filters,
                crate::host_codec::for_dataset(&ds, &types, threads)?,
            )
        } else {
            (Vec::new(), Err("its chunks are not filtered".to_string()))
        };
        Ok(DeviceSource {
            ds,
            types,
            storage,
            blocker,
            staging_size: settings.staging_buffer_size()?,
            filters,
            host,
            filtered,
            chunk_index: std::cell::OnceCell::new(),
            device_path,
            vfd_settings,
        })
    }

    /// The driver's settings, loaded at the first call.
    fn driver_settings(&self) -> &h5gds::VfdSettings {
        self.vfd_settings.get_or_init(driver_settings)
    }

    /// The allocated chunks' stored sizes and filter masks (listed once).
    pub fn chunk_index(&self) -> Result<&h5gds_chunk_codec::ChunkIndex> {
        if let Some(index) = self.chunk_index.get() {
            return Ok(index);
        }
        // Once per `DeviceSource`: batched reads ask again.
        let index = self.ds.chunk_index()?;
        Ok(self.chunk_index.get_or_init(|| index))
    }

    /// Reads `region` (file coordinates) into a new device array of its shape.
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
        let mut staging: Option<HostStaging> = None;
        let elements = Elements {
            mem_type: &self.types.mem,
            size: std::mem::size_of::<T>(),
            check_bool: T::CHECKED_BYTES,
        };
        let decoder = if self.filtered {
            self.decoder(region)?
        } else {
            None
        };
        if let (Some(Decoder::Host), Ok(planned)) = (decoder, &self.host) {
            let reason = plan(&self.storage, region, self.blocker.clone())
                .into_iter()
                .find_map(|(_, route)| match route {
                    Route::Staged(reason) => Some(reason),
                    Route::Direct => None,
                })
                .unwrap_or_else(|| "its chunks are compressed".into());
            crate::log::debug(format_args!(
                "{}: reading {:?} (elements {:?} + {:?}) through pinned host memory, its chunks \
                 decoded by h5gds on the host's threads: {reason}",
                ds.path.display(),
                ds.name,
                region.start,
                region.count
            ));
            let bytes = region.len() as usize * elements.size;
            let threads = self.driver_settings().nthreads;
            let ones = vec![1; region.count.len()];
            let pieces = crate::select::decoded_pieces(
                &region.start,
                &ones,
                &region.count,
                planned.chunk(),
                elements.size as u64,
                threads as u64,
                self.staging_size as u64,
            );
            let mut staging = HostStaging::new(pieces.piece_bytes as usize, bytes, stream);
            read_block(
                ds,
                &elements,
                region,
                region,
                dest,
                stream,
                &mut staging,
                Some((planned, &pieces.cuts)),
            )?;
            synchronize(stream)?;
            drop(record);
            return Ok(array);
        }
        if let (Some(Decoder::Gpu(codec)), Ok(lib)) = (decoder, h5gds_gpu_codec::nvcomp::library())
        {
            let compressed = crate::gpu_codec::CompressedDataset {
                ds: &self.ds,
                storage: &self.storage,
                index: self.chunk_index()?,
                staging_size: self.staging_size,
                device_path: self.device_path,
                driver: self.driver_settings(),
            };
            crate::gpu_codec::read(&compressed, lib, codec, &elements, region, dest, stream)?;
            synchronize(stream)?;
            drop(record);
            return Ok(array);
        }
        let routes = plan(&self.storage, region, self.blocker.clone());
        let whole = region.count == ds.shape && routes.len() == 1;
        let mut staged_reasons: Vec<&str> = Vec::new();
        for (block, route) in &routes {
            match route {
                Route::Direct => self.read_direct(&elements, block, region, dest, whole)?,
                Route::Staged(reason) => {
                    if !staged_reasons.contains(&reason.as_str()) && staged_reasons.len() < 3 {
                        crate::log::debug(format_args!(
                            "{}: reading {:?} (elements {:?} + {:?}) through pinned host \
                             memory: {reason}",
                            ds.path.display(),
                            ds.name,
                            block.start,
                            block.count
                        ));
                        staged_reasons.push(reason);
                    }
                    if staging.is_none() {
                        let bytes = region.len() as usize * elements.size;
                        staging = Some(HostStaging::pipelined(
                            self.staging_size,
                            bytes,
                            self.driver_settings(),
                            stream,
                        ));
                    }
                    let buf = staging.as_mut().expect("created above");
                    read_block(ds, &elements, block, region, dest, stream, buf, None)?;
                }
            }
        }
        synchronize(stream)?;
        drop(record);
        Ok(array)
    }

    /// Where the chunks `region` touches are decoded (`h5gds_engine::gpu_decoded::decoder`), with
    /// the choice and its reason in the debug log; `None`: by HDF5 (staged).
    fn decoder(&self, region: &Block) -> Result<Option<Decoder>> {
        let Storage::Chunked { chunk, .. } = &self.storage else {
            return Ok(None);
        };
        let ones = vec![1; region.count.len()];
        let selection = Hyperslab {
            start: &region.start,
            step: &ones,
            count: &region.count,
        };
        let (choice, words) = gpu_decoded::decoder(CompressedRead {
            filters: &self.filters,
            chunk,
            selection: &selection,
            item: self.types.mem.size(),
            blocker: self.blocker.clone(),
            host: self.host.as_ref().map(drop).map_err(Clone::clone),
            host_threads: self.driver_settings().nthreads,
        })?;
        crate::log::debug(format_args!(
            "{}: {:?}: {words}",
            self.ds.path.display(),
            self.ds.name
        ));
        Ok(choice)
    }

    /// Reads `block` straight into device memory `dest`, which holds the array `region`.
    fn read_direct(
        &self,
        elements: &Elements,
        block: &Block,
        region: &Block,
        dest: sys::CUdeviceptr,
        whole: bool,
    ) -> Result<()> {
        let ds = &self.ds;
        crate::log::debug(format_args!(
            "{}: reading {:?} (elements {:?} + {:?}) straight into device memory through the \
             gds driver",
            ds.path.display(),
            ds.name,
            block.start,
            block.count
        ));
        let fail = |op: &str, e: hdf5::Error| Error::hdf5(op, &ds.path, Some(&ds.name), e);
        let spaces = if whole {
            None
        } else {
            let file = select_blocks(&ds.shape, &[(&block.start, &block.count)])
                .map_err(|e| fail("selecting a hyperslab", e))?;
            let inside = block.relative_to(&region.start);
            let mem = select_blocks(&region.count, &[(&inside.start, &inside.count)])
                .map_err(|e| fail("selecting a hyperslab", e))?;
            Some((mem, file))
        };
        let spaces = spaces.as_ref().map_or(Spaces::default(), |(m, f)| Spaces {
            memory: Some(m),
            file: Some(f),
        });
        // SAFETY: `dest` holds the region in the memory type, and the memory selection lies
        // inside it; HDF5 neither converts nor caches here (see `route`), so the pointer reaches
        // the driver untouched.
        unsafe { hdf5_raw::read(&ds.dset, elements.mem_type, spaces, dest as *mut _) }
            .map_err(|e| fail("reading into device memory", e))?;
        Ok(())
    }
}

/// Reads a whole dataset into device memory (see [`crate::from_file_to_device`]).
pub(crate) fn read<T: Element>(
    path: &Path,
    dataset: &str,
    stream: Arc<CudaStream>,
    options: &ReadOptions,
) -> Result<DeviceArray<T>> {
    no_panic("reading into device memory", || {
        let source = DeviceSource::open::<T>(path, dataset, options)?;
        let region = Block::whole(&source.ds.shape);
        let array = source.read(&region, &stream)?;
        source.ds.close()?;
        Ok(array)
    })
}
