//! `h5gds.read`/`h5gds.write` for device arrays: the address checked with CUDA (device memory of
//! a device this process sees, the whole array inside one allocation), the route decided by
//! `h5gds_route` (the decision array-io makes, over facts h5py gathered), the producer's stream
//! synchronised, then the bytes moved: straight through the `gds` driver (H5Dread/H5Dwrite with
//! the device pointer), or through a pinned host buffer of `H5GDS_STAGING_BUFFER_SIZE` bytes,
//! piece by piece, so any size works with any buffer. Reads of compressed chunks that
//! `route::gpu_decode` allows go to the GPU compressed and are decoded there (`compressed`).

use crate::compressed::{self, CompressedRead};
use crate::cuda::{self, Context, Pinned};
use crate::hdf5::{Hid, Prepared};
use h5gds_route::route::{blocker, gpu_decode, plan, Block, GpuCodec, Route, Storage, Transfer};
use h5gds_route::select::flat_range_blocks;
use h5gds_route::settings::{self, DevicePath, STAGING_BUFFER_SIZE_ENV, USE_VFD_GDS_ENV};
use std::collections::HashSet;
use std::ffi::c_void;

/// Why a device transfer was refused or failed.
#[derive(Debug)]
pub enum DeviceError {
    /// The array or a setting is wrong (ValueError).
    Argument(String),
    /// CUDA or HDF5 failed (OSError).
    Failed(String),
}

/// The storage facts h5py gathered (see python/h5gds/_device.py).
pub struct StorageFacts {
    pub kind: String,
    pub allocated: bool,
    pub chunk: Vec<u64>,
    pub filtered: bool,
    pub chunks: Vec<Vec<u64>>,
    pub cached: bool,
    /// The filter pipeline's ids, in order (chunked datasets).
    pub filters: Vec<i32>,
}

impl StorageFacts {
    fn storage(&self) -> Result<Storage, DeviceError> {
        Ok(match self.kind.as_str() {
            "contiguous" => Storage::Contiguous {
                allocated: self.allocated,
            },
            "external" => Storage::External,
            "compact" => Storage::Compact,
            "virtual" => Storage::Virtual,
            "chunked" => Storage::Chunked {
                chunk: self.chunk.clone(),
                filtered: self.filtered,
                allocated: self.chunks.iter().cloned().collect::<HashSet<_>>(),
                cached: self.cached,
            },
            other => {
                return Err(DeviceError::Argument(format!(
                    "unknown storage kind {other:?}"
                )))
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
}

fn env(variable: &str) -> Option<String> {
    std::env::var_os(variable).map(|v| v.to_string_lossy().into_owned())
}

/// Whether `H5GDS_USE_VFD_GDS` asks for the staged path (`0`), read by the one parser of the
/// setting (`h5gds_route::settings`).
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
    let cuda_driver = h5gds::cuda().map_err(|err| {
        argument(format!(
            "{role} is CUDA device memory, but CUDA does not work in this process ({err})"
        ))
    })?;
    let pointer = cuda::pointer(t.address).map_err(DeviceError::Failed)?;
    if let Some(claimed) = t.claimed_ordinal {
        if claimed < 0 || claimed >= cuda_driver.device_count {
            return Err(argument(format!(
                "{role} is on CUDA device {claimed}, and this process sees {} CUDA device(s)",
                cuda_driver.device_count
            )));
        }
    }
    if !pointer.device {
        return Err(argument(format!(
            "{role}'s address {:#x} is not CUDA device memory in this process (CUDA does not \
             know it as a device allocation)",
            t.address
        )));
    }
    if let Some(claimed) = t.claimed_ordinal {
        if claimed != pointer.ordinal {
            return Err(argument(format!(
                "{role} says it is on CUDA device {claimed}, but its memory is on device {}",
                pointer.ordinal
            )));
        }
    }
    let end = t.address.checked_add(t.nbytes as u64);
    if t.address < pointer.base || end.is_none_or(|e| e > pointer.base + pointer.size as u64) {
        return Err(argument(format!(
            "{role} claims {} bytes at {:#x}, beyond its allocation ({} bytes at {:#x})",
            t.nbytes, t.address, pointer.size, pointer.base
        )));
    }
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
    let storage = storage_facts.storage()?;
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
    let context = Context::enter(pointer.ordinal).map_err(DeviceError::Failed)?;
    if t.stream != 0 {
        context.synchronize(t.stream).map_err(DeviceError::Failed)?;
    }
    if let Some(codec) = gpu_codec(&t, &storage_facts, &region, blocker(&facts))? {
        let item = t.nbytes / t.count.iter().product::<u64>() as usize;
        let read = CompressedRead {
            dataset: t.dataset,
            name: t.dataset_name,
            codec,
            chunk: &storage_facts.chunk,
            element_size: item,
            region: &region,
            dest: t.address,
            ordinal: pointer.ordinal,
            staging_size,
        };
        let done = compressed::read(&read, prepared);
        // The array may be freed once this returns; the driver must not keep its range.
        h5gds::forget_device_range(pointer.base);
        let (decoded, missing) = done?;
        h5gds::with_logging(|| {
            tracing::info!(
                "h5gds.read {:?}: {} bytes into device memory: {decoded} chunks move compressed \
                 ({codec:?}) from the file straight into device memory through the gds driver \
                 and are decoded on the GPU with nvCOMP; {missing} chunks were never written \
                 (filled through pinned host memory)",
                t.dataset_name,
                t.nbytes,
            )
        });
        drop(context);
        return Ok(format!("gds: decoded on the GPU with nvCOMP ({codec:?})"));
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
            h5gds::forget_device_range(pointer.base);
            moved.map_err(|m| {
                DeviceError::Failed(format!("H5D{op} into device memory failed: {m}"))
            })?;
            "gds".to_string()
        }
        Some(reason) => {
            h5gds::with_logging(|| {
                tracing::info!(
                    "h5gds.{op} {:?}: {} bytes {} device memory through pinned host memory \
                     ({staging_size} bytes at a time): {reason}",
                    t.dataset_name,
                    t.nbytes,
                    if t.write { "from" } else { "into" }
                )
            });
            staged(&t, prepared, staging_size)?;
            format!("staged: {reason}")
        }
    };
    drop(context);
    Ok(route)
}

/// The codec nvCOMP decodes a read's chunks with on the GPU, as `route::gpu_decode` decides
/// (the decision array-io makes), or `None` with the reason in the log: the transfer's
/// blocker, `H5GDS_GPU_CODEC=0`, a filter nvCOMP does not decode, nvCOMP missing, or a
/// selection with steps.
fn gpu_codec(
    t: &DeviceTransfer,
    storage: &StorageFacts,
    region: &Block,
    blocker: Option<String>,
) -> Result<Option<GpuCodec>, DeviceError> {
    if t.write || storage.kind != "chunked" || !storage.filtered {
        return Ok(None);
    }
    let strided = t.step.iter().zip(t.count).any(|(&s, &c)| s > 1 && c > 1);
    let stop = match blocker {
        Some(reason) => Some(reason),
        None => h5gds_gpu_codec::settings::turned_off().map_err(|e| argument(e.to_string()))?,
    }
    .or_else(|| {
        strided.then(|| {
            "the selection has steps greater than 1, which the GPU decoding path does not place"
                .to_string()
        })
    });
    // libnvcomp is loaded only for a read it could serve.
    let decision = gpu_decode(&storage.filters, None, stop.as_deref()).and_then(|_| {
        let missing = h5gds_gpu_codec::nvcomp::library().err();
        gpu_decode(&storage.filters, missing.as_deref(), stop.as_deref())
    });
    match decision {
        Ok(codec) if region.count.len() == storage.chunk.len() => Ok(Some(codec)),
        Ok(_) => Ok(None),
        Err(reason) => {
            h5gds::with_logging(|| {
                tracing::info!(
                    "h5gds.read {:?}: its chunks are decoded by HDF5 on the host, not on the GPU \
                     with nvCOMP: {reason}",
                    t.dataset_name
                )
            });
            Ok(None)
        }
    }
}

/// Moves the selection through a pinned buffer of at most `staging_size` bytes: for reads,
/// HDF5 fills the buffer with a run of the selection's elements (in row-major order), which
/// is then copied to the device; for writes the other way round.
fn staged(t: &DeviceTransfer, prepared: &Prepared, staging_size: usize) -> Result<(), DeviceError> {
    let failed = DeviceError::Failed;
    let elements: u64 = t.count.iter().product();
    let item = t.nbytes / elements as usize;
    let per = (staging_size / item).max(1) as u64;
    let mut pinned = Pinned::new((per.min(elements) as usize) * item).map_err(failed)?;
    let mut a = 0u64;
    while a < elements {
        let b = (a + per).min(elements);
        let host = pinned.as_mut_ptr();
        let device = t.address + a * item as u64;
        let len = (b - a) as usize * item;
        debug_assert!(len <= pinned.len());
        if t.write {
            // SAFETY: the pinned buffer holds `len` bytes; the device range lies inside the
            // checked allocation.
            unsafe { cuda::copy_from_device(host, device, len) }.map_err(failed)?;
        }
        let blocks = if prepared.rank() == 0 {
            vec![Block::whole(&[])]
        } else {
            flat_range_blocks(t.count, a, b)
        };
        let mut offset = 0usize;
        for block in blocks {
            let start: Vec<u64> = (0..block.start.len())
                .map(|i| t.start[i] + block.start[i] * t.step[i])
                .collect();
            // SAFETY: the block is part of the checked selection; its elements fit the pinned
            // buffer from `offset` (the blocks of [a, b) hold b - a elements in order).
            unsafe {
                prepared.run_hyperslab(
                    &start,
                    t.step,
                    &block.count,
                    host.add(offset).cast::<c_void>(),
                )
            }
            .map_err(|m| {
                failed(format!(
                    "H5D{} failed: {m}",
                    if t.write { "write" } else { "read" }
                ))
            })?;
            offset += block.len() as usize * item;
        }
        if !t.write {
            if t.checked_bytes {
                // SAFETY: HDF5 filled `len` bytes of the buffer above.
                let bytes = unsafe { std::slice::from_raw_parts(host, len) };
                if let Some(at) = bytes.iter().position(|&v| v > 1) {
                    return Err(argument(format!(
                        "dataset {} holds the byte {} at element {} of the selection, which is \
                         not a bool (0 or 1)",
                        t.dataset_name,
                        bytes[at],
                        a + at as u64
                    )));
                }
            }
            // SAFETY: as for the copy from the device above.
            unsafe { cuda::copy_to_device(device, host, len) }.map_err(failed)?;
        }
        a = b;
    }
    Ok(())
}
