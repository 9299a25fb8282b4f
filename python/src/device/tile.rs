//! One rank's device tile of a collective `to_file`, written through the file's driver with the
//! engine's tile writes (`h5gds_engine::collective`).

use super::pointer::checked_pointer;
use super::{argument, env, file_side_floor};
use crate::call_settings::CallSettings;
use crate::error::DeviceError;
use h5gds_engine::collective::{write_runs, write_staged, ByteRun, DriverFile, DriverFileError};
use h5gds_engine::staged;
use h5gds_route::select::{staged_piece_bytes, staging_pieces};
use h5gds_runtime::cuda;
use h5gds_runtime::device_ranges::forget_device_range;
use h5gds_runtime::settings::{self, STAGING_BUFFER_SIZE_ENV, USE_VFD_GDS_ENV};

/// One rank's tile of a collective `to_file`, in device memory, and where its bytes go: `runs`
/// in the tile's memory order, inside its `nbytes`.
pub struct TileWrite<'a> {
    pub file: &'a DriverFile,
    pub runs: &'a [ByteRun],
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
pub fn write_tile(t: TileWrite) -> Result<(), DeviceError> {
    if t.nbytes == 0 {
        return Ok(());
    }
    if t.item == 0 || t.nbytes % t.item != 0 {
        return Err(argument(format!(
            "the tile's {} bytes are not a whole number of {}-byte elements",
            t.nbytes, t.item
        )));
    }
    let pointer = checked_pointer("array", t.address, t.nbytes, t.claimed_ordinal)?;
    let context = cuda::enter(pointer.context)?;
    if t.stream != 0 {
        cuda::synchronize_handle(t.stream)?;
    }
    let written = |e: DriverFileError| DeviceError::Failed(e.error.to_string());
    if t.direct {
        h5gds::with_logging(|| {
            tracing::info!(
                "collective to_file: {} bytes straight from device memory through the gds driver",
                t.nbytes
            )
        });
        // SAFETY: the runs lie inside the tile (the caller's contract), which lies inside one
        // device allocation (checked_pointer); the file's driver is gds, which takes device memory.
        let moved = unsafe { write_runs(t.file, t.runs, t.address) };
        // The array may be freed once this returns; the driver must not keep its range.
        forget_device_range(pointer.base);
        moved.map_err(written)?;
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
        let piece_bytes = staged_piece_bytes(
            t.nbytes as u64,
            staging_size as u64,
            file_side_floor(&CallSettings::default())? as u64,
        );
        let pieces = staging_pieces(t.nbytes as u64 / item, (piece_bytes / item).max(1), &[]);
        let mut ring = staged::thread_ring(pointer.context, &pieces, t.item)?;
        let ring = (&mut ring, &pieces[..]);
        write_staged(t.file, ring, (t.address, t.item), t.runs, written)?;
    }
    drop(context);
    Ok(())
}
