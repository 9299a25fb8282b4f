//! `h5gds.read`/`h5gds.write` for device arrays, the pyo3 face of the engine's device transfer
//! (`h5gds_engine::device`, which array-io runs too): the address checked with CUDA (`pointer`:
//! device memory of a device this process sees, the whole array inside one allocation), the
//! producer's stream synchronised, then the engine moves the bytes (straight through the `gds`
//! driver, staged through pinned host buffers, or compressed chunks decoded on the GPU or by
//! h5gds on the host's threads) on the runtime's streams, under h5py's lock, in the order
//! `h5gds_engine::policy::device_read` gives (which writes a read's verdict lines); errors and a
//! write's log lines are the extension's.

mod pointer;
mod tile;

use pointer::checked_pointer;
pub use pointer::{copy_with_host, device_count, with_device_array};
pub use tile::write_tile;

pub use crate::error::DeviceError;
use crate::hdf5::{self, H5pyFace, Hid, Prepared, StoredLayout};
use cudarc::driver::{CudaContext, CudaStream};
use h5gds_chunk_codec::{ChunkIndex, Hyperslab, Pipeline};
use h5gds_engine::chunks::StoredChunks;
use h5gds_engine::decoded;
use h5gds_engine::device::{self, Face, ReadFace, Selected, Step};
use h5gds_engine::policy::device_read::{self, ReadRoute};
use h5gds_engine::policy::settings::CallSettings;
use h5gds_engine::staged::{self, NotBool, ThreadLane};
use h5gds_route::route::{blocker, Transfer};
use h5gds_route::select::chunks_touching;
use h5gds_runtime::cuda::{self, DeviceContext};
use h5gds_runtime::device_ranges::forget_device_range;
use h5gds_runtime::settings;
use h5gds_runtime::staging_ring::StagingRing;
use std::collections::HashSet;
use std::sync::Arc;

/// One device transfer, checked and ready to run without the GIL.
pub struct DeviceTransfer<'a> {
    pub role: &'a str,
    pub dataset_name: &'a str,
    /// The dataset's id in h5py's HDF5 (for raw chunk reads).
    pub dataset: Hid,
    pub write: bool,
    pub prepared: Option<Prepared>,
    pub start: &'a [u64],
    pub step: &'a [u64],
    pub count: &'a [u64],
    pub address: u64,
    pub nbytes: usize,
    /// The device the array says it is on (DLPack), if it says.
    pub claimed_ordinal: Option<i32>,
    /// The stream to synchronise before bytes move (0: none named).
    pub stream: u64,
    pub conversion: Option<String>,
    pub checked_bytes: bool,
    pub other_driver: Option<String>,
    /// The driver's settings, as the native call reads them (at most once).
    pub settings: &'a CallSettings,
}

fn argument(message: String) -> DeviceError {
    DeviceError::Argument(message)
}

/// Checks the array's memory with CUDA, then moves the bytes as the engine decides
/// (`h5gds_engine::device` for a write, `policy::device_read` for a read). `layout`: how the dataset is stored, as
/// h5py's HDF5 reported it (`hdf5::dataset_facts`), with the stored element's size, which with
/// the chunk cache's size tells whether HDF5 copies a chunk through its cache.
pub fn run(t: DeviceTransfer, layout: StoredLayout, stored_size: usize) -> Result<(), DeviceError> {
    let Some(prepared) = t.prepared.as_ref() else {
        return Ok(()); // nothing to move
    };
    let pointer = checked_pointer(t.role, t.address, t.nbytes, t.claimed_ordinal)?;
    let path = settings::environment_device_path()?;
    let staging_size = settings::environment_staging_buffer_size()?;
    // Why h5gds may not decode a read's chunks on the host (H5GDS_HOST_CODEC=0, a conversion).
    let declined = match t.write {
        true => None,
        false => decoded::declined(t.conversion.as_deref()).map_err(|e| argument(e.to_string()))?,
    };
    let facts = Transfer {
        staged_by_settings: !settings::goes_through_gds(path),
        checked_bytes: t.checked_bytes,
        conversion: t.conversion.clone(),
        other_driver: t.other_driver.clone(),
    };
    let selection = Hyperslab {
        start: t.start,
        step: t.step,
        count: t.count,
    };
    let region = device::spanned(&selection);
    // Of the chunks the region touches, those written (the caller holds h5py's lock).
    let allocated = |chunk: &[u64]| match region.count.len() == chunk.len() {
        true => hdf5::chunk_index(t.dataset, chunk).map(|index| {
            let touched = chunks_touching(&region, chunk).into_iter();
            touched
                .map(|(at, _)| at)
                .filter(|at| index.contains(at))
                .collect()
        }),
        false => Ok(HashSet::new()),
    };
    let storage = device::storage(&layout, stored_size, allocated).map_err(DeviceError::Failed)?;
    let context = cuda::enter(pointer.context)?;
    if t.stream != 0 {
        cuda::synchronize_handle(t.stream)?;
    }
    let item = t.nbytes / t.count.iter().product::<u64>() as usize;
    let io = Selected {
        prepared,
        selection,
        item,
        address: t.address,
        staging_size,
    };
    let face = Moving {
        t: &t,
        context: pointer.context,
    };
    let done = if t.write {
        let staged = device::staged_reason(&storage, &region, blocker(&facts));
        // SAFETY: the address range lies inside one device allocation (checked above) and holds
        // the selection in the memory type (checked by `prepare`).
        unsafe { device::write(&face, &io, t.dataset_name, staged.as_deref()) }
    } else {
        // As the engine's host-decoded reads decide: the filters as stored (client values too).
        let host = match (&layout, declined) {
            (_, Some(reason)) => Err(reason),
            (StoredLayout::Chunked { filters, .. }, None) => Pipeline::for_filters(filters, item),
            _ => Err("it is not chunked".into()),
        };
        let route = ReadRoute {
            dataset: t.dataset_name,
            layout: &layout,
            storage: &storage,
            facts: &facts,
            path,
            host: host.as_ref().map_err(Clone::clone),
        };
        // SAFETY: as for the write, the array writable (the caller's checked `out`).
        unsafe { device_read::read(&face, &io, &route) }
    };
    // The array may be freed once this returns; the driver must not keep its range.
    forget_device_range(pointer.base);
    drop(context);
    done
}

/// A transfer as the engine's device transfer sees it: h5py's lock held by the caller, the
/// runtime's streams of the array's context, errors naming the dataset.
struct Moving<'a> {
    t: &'a DeviceTransfer<'a>,
    context: DeviceContext,
}

impl Face for Moving<'_> {
    type Error = DeviceError;
    type Stream = ThreadLane;

    fn locked<R>(&self, call: impl FnOnce() -> R) -> R {
        call()
    }

    fn ring(&self, bytes: usize, pieces: usize) -> Result<StagingRing<ThreadLane>, DeviceError> {
        Ok(staged::ring_of(self.context, bytes, pieces)?)
    }

    fn driver(&self) -> Result<&h5gds::VfdSettings, DeviceError> {
        Ok(self.t.settings.get()?)
    }

    fn failed(&self, step: Step, m: String) -> DeviceError {
        let op = if self.t.write { "write" } else { "read" };
        DeviceError::Failed(match step {
            Step::Direct => format!("H5D{op} into device memory failed: {m}"),
            Step::Staged => format!("H5D{op} failed: {m}"),
            Step::NeverWritten => format!("H5Dread of the chunk never written failed: {m}"),
            Step::Codec => m,
        })
    }
}

impl<'a> ReadFace for Moving<'a> {
    type Chunks = H5pyFace<'a, DeviceError>;

    fn not_bool(&self, n: NotBool) -> DeviceError {
        not_a_bool(self.t.dataset_name, n)
    }

    fn stored_chunks(
        &self,
        chunk: &[u64],
        touched: usize,
    ) -> Result<StoredChunks<'static, Self::Chunks>, DeviceError> {
        let (dataset, name) = (self.t.dataset, self.t.dataset_name);
        hdf5::stored_chunks(dataset, name, chunk, touched, DeviceError::Failed)
    }

    fn with_index<R>(
        &self,
        chunk: &[u64],
        touched: Vec<Vec<u64>>,
        read: impl FnOnce(&StoredChunks<'static, Self::Chunks>, &ChunkIndex) -> Result<R, DeviceError>,
    ) -> Result<R, DeviceError> {
        let mut source = self.stored_chunks(chunk, touched.len())?;
        let index = source.index_of(chunk, touched)?;
        read(&source, &index)
    }

    fn stream(&self) -> Result<Arc<CudaStream>, DeviceError> {
        let context = cuda::call("making the array's device's context", || {
            CudaContext::new(self.context.device as usize)
        })?;
        Ok(context.default_stream())
    }
}

/// The refusal of a byte read from dataset `dataset_name` as a bool that is not 0 or 1 (which a
/// device library's bool cannot hold), naming its element of the selection.
pub fn not_a_bool(dataset_name: &str, n: NotBool) -> DeviceError {
    argument(format!(
        "dataset {dataset_name} holds the byte {} at element {} of the selection, which is not a \
         bool (0 or 1)",
        n.value, n.element
    ))
}
