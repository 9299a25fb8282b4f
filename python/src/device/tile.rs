//! One rank's device tile of a collective `to_file`, written through the file's driver.

use super::pointer::checked_pointer;
use super::{argument, env, file_side_floor};
use crate::call_settings::CallSettings;
use crate::error::DeviceError;
use crate::hdf5;
use h5gds_engine::staged;
use h5gds_route::select::{staged_piece_bytes, staging_pieces};
use h5gds_runtime::cuda;
use h5gds_runtime::device_ranges::forget_device_range;
use h5gds_runtime::settings::{self, STAGING_BUFFER_SIZE_ENV, USE_VFD_GDS_ENV};
use std::ffi::c_void;

/// One rank's tile of a collective `to_file`, in device memory, and where its bytes go: `runs`,
/// each `(file address, byte offset in the tile, byte length)`, in the tile's memory order.
pub struct TileWrite<'a> {
    /// The open file (`H5FD_t *` from `H5FDopen` in h5py's HDF5).
    pub file: usize,
    pub runs: &'a [(u64, u64, u64)],
    pub address: u64,
    pub nbytes: usize,
    /// The element size: pieces of the staged path hold whole elements.
    pub item: usize,
    /// The device the array says it is on (DLPack), if it says.
    pub claimed_ordinal: Option<i32>,
    /// The stream to synchronise before bytes move (0: none named).
    pub stream: u64,
    /// The file's driver is `gds`, which takes device pointers (else sec2: staged here).
    pub direct: bool,
}

/// Writes a device tile's runs through the file's driver: the device pointer straight to the
/// `gds` driver, or, for a file opened with sec2 (`H5GDS_USE_VFD_GDS=0`), copied to pinned host
/// memory piece by piece first. The producer's stream is waited for first in both cases.
/// Returns the route taken ("gds" or "staged").
pub fn write_tile(t: TileWrite) -> Result<String, DeviceError> {
    if t.nbytes == 0 {
        return Ok("nothing to move".into());
    }
    if t.item == 0 || t.nbytes % t.item != 0 {
        return Err(argument(format!(
            "the tile's {} bytes are not a whole number of {}-byte elements",
            t.nbytes, t.item
        )));
    }
    let mut end = 0u64;
    for &(_, at, len) in t.runs {
        if at < end || at.checked_add(len).is_none_or(|e| e > t.nbytes as u64) {
            return Err(argument(format!(
                "the tile's byte runs must be in memory order inside its {} bytes; a run of {len} \
                 bytes at offset {at} is not",
                t.nbytes
            )));
        }
        end = at + len;
    }
    let pointer = checked_pointer("array", t.address, t.nbytes, t.claimed_ordinal)?;
    let context = cuda::enter(pointer.context)?;
    if t.stream != 0 {
        cuda::synchronize_handle(t.stream)?;
    }
    let written = |m: String| DeviceError::Failed(format!("H5FDwrite failed: {m}"));
    let route = if t.direct {
        h5gds::with_logging(|| {
            tracing::info!(
                "collective to_file: {} bytes straight from device memory through the gds driver",
                t.nbytes
            )
        });
        let mut moved = Ok(());
        for &(file_at, at, len) in t.runs {
            // SAFETY: the run lies inside the tile (checked above), which lies inside one device
            // allocation (checked_pointer); the file's driver is gds, which takes device memory.
            moved = unsafe {
                hdf5::driver_write(
                    t.file,
                    file_at,
                    len as usize,
                    (t.address + at) as *const c_void,
                )
            };
            if moved.is_err() {
                break;
            }
        }
        // The array may be freed once this returns; the driver must not keep its range.
        forget_device_range(pointer.base);
        moved.map_err(written)?;
        "gds"
    } else {
        let staging_size = settings::staging_buffer_size(env(STAGING_BUFFER_SIZE_ENV).as_deref())
            .map_err(|e| argument(e.to_string()))?;
        h5gds::with_logging(|| {
            tracing::info!(
                "collective to_file: {} bytes from device memory through pinned host memory \
                 (pieces of up to {staging_size} bytes): {USE_VFD_GDS_ENV}=0",
                t.nbytes
            )
        });
        let item = t.item as u64;
        let mut next = 0usize; // the first run not yet written to its end
        let piece_bytes = staged_piece_bytes(
            t.nbytes as u64,
            staging_size as u64,
            file_side_floor(&CallSettings::default())? as u64,
        );
        let pieces = staging_pieces(t.nbytes as u64 / item, (piece_bytes / item).max(1), &[]);
        let mut ring = staged::thread_ring(pointer.context, &pieces, t.item)?;
        staged::write(&mut ring, &pieces, t.item, t.address, |a, b, host| {
            let (lo, hi) = (a * item, b * item);
            while let Some(&(file_at, at, len)) = t.runs.get(next) {
                let (from, to) = (at.max(lo), (at + len).min(hi));
                if from < to {
                    let bytes = &host[(from - lo) as usize..(to - lo) as usize];
                    // SAFETY: `bytes` hold the run's part in this piece; the file's driver is sec2.
                    unsafe {
                        hdf5::driver_write(
                            t.file,
                            file_at + (from - at),
                            bytes.len(),
                            bytes.as_ptr().cast::<c_void>(),
                        )
                    }
                    .map_err(written)?;
                }
                if at + len > hi {
                    break; // the run goes on in the next piece
                }
                next += 1;
            }
            Ok::<(), DeviceError>(())
        })?;
        "staged"
    };
    drop(context);
    Ok(route.into())
}
