//! `h5gds.read`/`h5gds.write` for device arrays: the address checked with CUDA (`pointer`: device
//! memory of a device this process sees, the whole array inside one allocation), the route decided
//! by `h5gds_route` (the decision array-io makes, over the facts HDF5 gave `io_call`), the producer's stream
//! synchronised, then the bytes moved: straight through the `gds` driver (H5Dread/H5Dwrite with
//! the device pointer), or through a pinned host buffer of `H5GDS_STAGING_BUFFER_SIZE` bytes,
//! piece by piece (`staging`), so any size works with any buffer. Reads of compressed chunks are decoded on
//! the GPU (`compressed`: they move compressed) or by h5gds on the host's threads
//! (`host_codec`, into the pinned buffer of the staged path), whichever
//! `route::choose_decoder` picks.

mod host_reads;
mod pointer;
mod tile;

pub use host_reads::staged_anyway;
use pointer::checked_pointer;
pub use pointer::{copy_with_host, device_count};
pub use tile::write_tile;

use crate::call_settings::CallSettings;
use crate::compressed::{self, CompressedRead};
pub use crate::error::DeviceError;
use crate::hdf5::{self, Hid, Prepared, StoredLayout};
use h5gds_chunk_codec::{Decoding, Filter, Hyperslab, Pipeline};
use h5gds_engine::staged::{self, hyperslab_piece, NotBool};
use h5gds_engine::{decoded, gpu_decoded};
use h5gds_route::route::{blocker, data_blocker, plan, Block, Decoder, Route, Storage, Transfer};
use h5gds_route::select::{
    chunks_touching, decoded_pieces, flat_range_blocks, staged_piece_bytes, staging_pieces, Runs,
};
use h5gds_runtime::cuda::{self, DeviceContext};
use h5gds_runtime::device_ranges::forget_device_range;
use h5gds_runtime::settings::{self, DevicePath, STAGING_BUFFER_SIZE_ENV, USE_VFD_GDS_ENV};
use std::collections::HashSet;

/// How the dataset is stored, as the one native call asked HDF5 (`hdf5::dataset_facts`).
pub struct StorageFacts {
    pub layout: StoredLayout,
    /// The stored element's size: HDF5 copies a chunk through its chunk cache whenever the chunk
    /// fits the cache.
    pub stored_size: usize,
    /// The chunk shape and the pipeline's filter ids (chunked datasets; no chunk otherwise).
    pub chunk: Vec<u64>,
    pub filters: Vec<i32>,
}

impl StorageFacts {
    pub fn new(layout: StoredLayout, stored_size: usize) -> StorageFacts {
        let (chunk, filters) = match &layout {
            StoredLayout::Chunked { chunk, filters, .. } => {
                (chunk.clone(), filters.iter().map(|f| f.id).collect())
            }
            _ => (Vec::new(), Vec::new()),
        };
        StorageFacts {
            layout,
            stored_size,
            chunk,
            filters,
        }
    }

    /// Chunked through a pipeline of filters.
    fn compressed(&self) -> bool {
        matches!(self.layout, StoredLayout::Chunked { .. }) && !self.filters.is_empty()
    }

    /// The storage in `route`'s terms, for a transfer of `region` of `dataset`: of a chunked
    /// dataset's chunks, those the region touches that were written (the only ones `route::plan`
    /// asks about), listed where the route could be direct (unfiltered chunks the cache would not
    /// take). The caller holds h5py's lock.
    fn storage(&self, dataset: Hid, region: &Block) -> Result<Storage, DeviceError> {
        Ok(match &self.layout {
            StoredLayout::Contiguous { external: true, .. } => Storage::External,
            StoredLayout::Contiguous { address, .. } => Storage::Contiguous {
                allocated: address.is_some(),
            },
            StoredLayout::Compact => Storage::Compact,
            StoredLayout::Virtual => Storage::Virtual,
            StoredLayout::Chunked {
                chunk, cache_bytes, ..
            } => {
                let chunk_bytes = chunk.iter().product::<u64>() as u128 * self.stored_size as u128;
                let cached = chunk_bytes <= *cache_bytes as u128;
                let filtered = !self.filters.is_empty();
                let mut allocated = HashSet::new();
                if !filtered && !cached && region.count.len() == chunk.len() {
                    let index = hdf5::chunk_index(dataset, chunk).map_err(DeviceError::Failed)?;
                    allocated = chunks_touching(region, chunk)
                        .into_iter()
                        .map(|(offset, _)| offset)
                        .filter(|offset| index.contains(offset))
                        .collect();
                }
                Storage::Chunked {
                    chunk: chunk.clone(),
                    filtered,
                    allocated,
                    cached,
                }
            }
        })
    }
}

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

fn env(variable: &str) -> Option<String> {
    std::env::var_os(variable).map(|v| v.to_string_lossy().into_owned())
}

/// Whether `H5GDS_USE_VFD_GDS` asks for the staged path (`0`), read by the one parser of the
/// setting (`h5gds_runtime::settings`).
pub fn staged_by_settings() -> Result<bool, settings::InvalidSetting> {
    settings::device_path(env(USE_VFD_GDS_ENV).as_deref()).map(|path| path == DevicePath::Staged)
}

fn argument(message: String) -> DeviceError {
    DeviceError::Argument(message)
}

/// Checks the array's memory with CUDA, decides the route, and moves the bytes. Returns the
/// route taken, in words ("gds", or "staged: <reason>").
/// `storage`: how the dataset is stored, as h5py reported it.
pub fn run(t: DeviceTransfer, storage: StorageFacts) -> Result<String, DeviceError> {
    let role = t.role;
    if t.prepared.is_none() {
        return Ok("nothing to move".into());
    }
    let pointer = checked_pointer(role, t.address, t.nbytes, t.claimed_ordinal)?;
    let invalid = |e: settings::InvalidSetting| argument(e.to_string());
    let path = settings::device_path(env(USE_VFD_GDS_ENV).as_deref()).map_err(invalid)?;
    let staging_size =
        settings::staging_buffer_size(env(STAGING_BUFFER_SIZE_ENV).as_deref()).map_err(invalid)?;
    let facts = Transfer {
        // CUDA works here (checked above), so only an explicit 0 stages.
        staged_by_settings: path == DevicePath::Staged,
        checked_bytes: t.checked_bytes,
        conversion: t.conversion.clone(),
        other_driver: t.other_driver.clone(),
    };
    let region = Block {
        start: t.start.to_vec(),
        count: t
            .count
            .iter()
            .zip(t.step)
            .map(|(&c, &s)| if c == 0 { 0 } else { (c - 1) * s + 1 })
            .collect(),
    };
    let storage_facts = storage;
    let storage = storage_facts.storage(t.dataset, &region)?;
    // The Python API moves one selection in one go: where the plan mixes routes (a chunked
    // dataset with unwritten chunks), all of it is staged, for the first staged part's reason.
    let staged_reason = plan(&storage, &region, blocker(&facts))
        .into_iter()
        .find_map(|(_, route)| match route {
            Route::Staged(reason) => Some(reason),
            Route::Direct => None,
        });
    let Some(prepared) = t.prepared.as_ref() else {
        return Ok("nothing to move".into());
    };
    let op = if t.write { "write" } else { "read" };
    let context = cuda::enter(pointer.context)?;
    if t.stream != 0 {
        cuda::synchronize_handle(t.stream)?;
    }
    let compressed = !t.write && storage_facts.compressed();
    // Stored chunks the host's threads read reach the GPU without the driver: a file open
    // with sec2 blocks the driver's path, not decoding on the GPU.
    let (mut reads, mut decoder) = (None, None);
    if compressed {
        let vfd = t.settings.get().map_err(argument)?;
        let direct_file = || hdf5::direct_file(t.dataset);
        reads = gpu_decoded::host_reads(path, facts.other_driver.as_deref(), vfd, direct_file);
        let blocker = match reads {
            Some(_) => data_blocker(&facts),
            None => blocker(&facts),
        };
        let selection = Hyperslab {
            start: t.start,
            step: t.step,
            count: t.count,
        };
        let item = t.nbytes / t.count.iter().product::<u64>().max(1) as usize;
        let stored = (&storage_facts.filters[..], &storage_facts.chunk[..]);
        let conversion = t.conversion.as_deref();
        let (choice, words) =
            where_decoded(stored, &selection, item, conversion, blocker, t.settings)?;
        h5gds::with_logging(|| tracing::info!("h5gds.read {:?}: {words}", t.dataset_name));
        decoder = choice;
    }
    if let Some(Decoder::Gpu(codec)) = decoder {
        let item = t.nbytes / t.count.iter().product::<u64>() as usize;
        let read = CompressedRead {
            dataset: t.dataset,
            name: t.dataset_name,
            codec,
            chunk: &storage_facts.chunk,
            element_size: item,
            region: &region,
            dest: t.address,
            context: pointer.context,
            staging_size,
        };
        let done = compressed::read(&read, reads, prepared);
        // The array may be freed once this returns; the driver must not keep its range.
        forget_device_range(pointer.base);
        let words = done?;
        h5gds::with_logging(|| {
            tracing::info!(
                "h5gds.read {:?}: {} bytes into device memory: {words} (filled through pinned \
                 host memory)",
                t.dataset_name,
                t.nbytes,
            )
        });
        drop(context);
        return Ok(format!("gds: decoded on the GPU with nvCOMP ({codec:?})"));
    }
    if let Some(Decoder::Host) = decoder {
        h5gds::with_logging(|| {
            tracing::info!(
                "h5gds.read {:?}: {} bytes into device memory through pinned host memory \
                 (pieces of up to {staging_size} bytes), its chunks decoded by h5gds on the host's \
                 threads: {}",
                t.dataset_name,
                t.nbytes,
                staged_reason
                    .as_deref()
                    .unwrap_or("its chunks are compressed")
            )
        });
        let item = t.nbytes / t.count.iter().product::<u64>() as usize;
        let filters = host_filters(&storage_facts.filters);
        let decode = HostDecode {
            pipeline: Pipeline::for_filters(&filters, item).map_err(DeviceError::Failed)?,
            chunk: &storage_facts.chunk,
            threads: host_threads(t.settings)?,
        };
        staged(&t, pointer.context, prepared, staging_size, Some(&decode))?;
        drop(context);
        return Ok("staged: decoded by h5gds on the host".into());
    }
    let route = match &staged_reason {
        None => {
            h5gds::with_logging(|| {
                tracing::info!(
                    "h5gds.{op} {:?}: {} bytes straight {} device memory through the gds driver",
                    t.dataset_name,
                    t.nbytes,
                    if t.write { "from" } else { "into" }
                )
            });
            // SAFETY: the address range lies inside one device allocation (checked above) and
            // holds the selection in the memory type (checked by `prepare`); the route says HDF5
            // hands it to the gds driver untouched.
            let moved = unsafe { prepared.run() };
            // The array may be freed once this returns; the driver must not keep its range.
            forget_device_range(pointer.base);
            moved.map_err(|m| {
                DeviceError::Failed(format!("H5D{op} into device memory failed: {m}"))
            })?;
            "gds".to_string()
        }
        Some(reason) => {
            h5gds::with_logging(|| {
                tracing::info!(
                    "h5gds.{op} {:?}: {} bytes {} device memory through pinned host memory \
                     (pieces of up to {staging_size} bytes): {reason}",
                    t.dataset_name,
                    t.nbytes,
                    if t.write { "from" } else { "into" }
                )
            });
            staged(&t, pointer.context, prepared, staging_size, None)?;
            format!("staged: {reason}")
        }
    };
    drop(context);
    Ok(route)
}

/// Where the chunks of a read of `selection` (elements of `item` bytes) from chunks of `chunk`
/// through the pipeline `filters` are decoded, and why in words (`gpu_decoded::decoder`): h5gds
/// decodes the pipeline on the host unless HDF5 must convert the elements (`conversion`, why).
/// `blocker`: why the driver cannot take the device pointer, if it cannot; `settings`: the
/// call's (the host's decoding threads).
pub fn where_decoded(
    (filters, chunk): (&[i32], &[u64]),
    selection: &Hyperslab,
    item: usize,
    conversion: Option<&str>,
    blocker: Option<String>,
    settings: &CallSettings,
) -> Result<(Option<Decoder>, String), DeviceError> {
    let host = match conversion {
        Some(conversion) => Err(conversion.to_string()),
        None => Pipeline::for_filters(&host_filters(filters), item).map(drop),
    };
    let read = gpu_decoded::CompressedRead {
        filters,
        chunk,
        selection,
        item,
        blocker,
        host,
        host_threads: host_threads(settings)?,
    };
    gpu_decoded::decoder(read).map_err(|e| argument(e.to_string()))
}

/// The driver's I/O thread count, which decodes on the host.
fn host_threads(settings: &CallSettings) -> Result<usize, DeviceError> {
    settings.nthreads().map_err(argument)
}

/// The smallest staged piece that keeps the driver's I/O threads busy: a task each.
fn file_side_floor(settings: &CallSettings) -> Result<usize, DeviceError> {
    Ok(settings.get().map_err(argument)?.task_round_bytes())
}

/// How h5gds decodes a read's chunks on the host (`host_codec`), for [`staged`].
struct HostDecode<'a> {
    pipeline: Pipeline,
    chunk: &'a [u64],
    threads: usize,
}

/// Moves the selection through pinned buffers of at most `staging_size` bytes: for reads,
/// HDF5 fills the buffer with a run of the selection's elements (in row-major order), or with
/// `decoded` h5gds decodes their chunks into it on the driver's I/O threads, and the run is then
/// copied to the device; for writes the other way round.
fn staged(
    t: &DeviceTransfer,
    context: DeviceContext,
    prepared: &Prepared,
    staging_size: usize,
    decoded: Option<&HostDecode>,
) -> Result<(), DeviceError> {
    let failed = DeviceError::Failed;
    let elements: u64 = t.count.iter().product();
    let item = t.nbytes / elements as usize;
    let (piece_bytes, cuts) = match decoded {
        Some(d) => {
            let (threads, staging) = (d.threads as u64, staging_size as u64);
            let p = decoded_pieces(
                t.start,
                t.step,
                t.count,
                d.chunk,
                item as u64,
                threads,
                staging,
            );
            (p.piece_bytes, p.cuts)
        }
        None => {
            let total = elements * item as u64;
            let floor = file_side_floor(t.settings)? as u64;
            (
                staged_piece_bytes(total, staging_size as u64, floor),
                Vec::new(),
            )
        }
    };
    let pieces = staging_pieces(elements, (piece_bytes / item as u64).max(1), &cuts);
    let mut ring = staged::thread_ring(context, &pieces, item)?;
    let selection = (t.start, t.step, t.count);
    if t.write {
        return staged::write(&mut ring, &pieces, item, t.address, |a, b, host| {
            // SAFETY: the buffer holds the piece's b - a elements; a write only reads it.
            unsafe { hyperslab_piece(prepared, selection, (a, b), item, host.as_ptr().cast_mut()) }
                .map_err(|m| failed(format!("H5Dwrite failed: {m}")))
        });
    }
    let refuse = |n| not_a_bool(t.dataset_name, n);
    let bools = t
        .checked_bytes
        .then_some(&refuse as &dyn Fn(NotBool) -> DeviceError);
    let runs = Runs::new(&Block::whole(t.count), t.count);
    staged::read(
        &mut ring,
        &pieces,
        (t.address, item, &runs),
        bools,
        |a, b, host| {
            let Some(d) = decoded else {
                // SAFETY: the buffer holds the piece's b - a elements.
                return unsafe {
                    hyperslab_piece(prepared, selection, (a, b), item, host.as_mut_ptr())
                }
                .map_err(|m| failed(format!("H5Dread failed: {m}")));
            };
            let mut offset = 0usize;
            for block in flat_range_blocks(t.count, a, b) {
                let start: Vec<u64> = (0..block.start.len())
                    .map(|i| t.start[i] + block.start[i] * t.step[i])
                    .collect();
                let len = block.len() as usize * item;
                let how = Decoding {
                    pipeline: &d.pipeline,
                    chunk: d.chunk,
                    element_size: item,
                    threads: d.threads,
                };
                let selection = Hyperslab {
                    start: &start,
                    step: t.step,
                    count: &block.count,
                };
                let (dataset, name) = (t.dataset, t.dataset_name);
                let open = |n| hdf5::stored_chunks(dataset, name, d.chunk, n, failed);
                let out = &mut host[offset..offset + len];
                decoded::read_hyperslab(&how, prepared.mem_type(), selection, open, out)?;
                offset += len;
            }
            Ok(())
        },
    )
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

/// The pipeline's filter ids as the host decoder takes them (shuffle's element size is the
/// element's).
fn host_filters(filters: &[i32]) -> Vec<Filter> {
    filters
        .iter()
        .map(|&id| Filter { id, values: vec![] })
        .collect()
}
