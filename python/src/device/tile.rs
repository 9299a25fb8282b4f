//! One rank's device tile of a collective `to_file`, written through the file's driver with the
//! engine's tile writes (`h5gds_engine::collective`).

use super::pointer::checked_pointer;
use crate::error::DeviceError;
use h5gds_engine::collective::{staged_pieces, write_runs, write_staged};
use h5gds_engine::collective::{ByteRun, DriverFile};
use h5gds_engine::staged;
use h5gds_runtime::cuda;
use h5gds_runtime::device_ranges::forget_device_range;
use h5gds_runtime::settings::environment_staging_buffer_size;

/// Writes one rank's device tile of a collective `to_file` (`nbytes` at `address`, a whole number
/// of `item`-byte elements; on the device the array claims, if it does; `stream`: the producer's, 0
/// for none) as `runs` (in the tile's memory order, inside it) through `file`'s driver: the device
/// pointer straight to `gds` (`direct`), or, for a file opened with sec2 (`H5GDS_USE_VFD_GDS=0`),
/// copied to pinned host memory piece by piece first. The producer's stream is waited for first.
pub fn write_tile(
    (file, runs): (&DriverFile, &[ByteRun]),
    (address, nbytes, item): (u64, usize, usize),
    (claimed_ordinal, stream): (Option<i32>, u64),
    direct: bool,
) -> Result<(), DeviceError> {
    if nbytes == 0 {
        return Ok(());
    }
    let pointer = checked_pointer("array", address, nbytes, claimed_ordinal)?;
    let context = cuda::enter(pointer.context)?;
    if stream != 0 {
        cuda::synchronize_handle(stream)?;
    }
    if direct {
        // SAFETY: the runs lie inside the tile (the caller's contract), which lies inside one
        // device allocation (checked_pointer); the file's driver is gds, which takes device memory.
        let moved = unsafe { write_runs(file, runs, address) };
        // The array may be freed once this returns; the driver must not keep its range.
        forget_device_range(pointer.base);
        moved?;
    } else {
        let staging_size = environment_staging_buffer_size()?;
        let pieces = staged_pieces((nbytes / item) as u64, item, staging_size)?;
        let mut ring = staged::thread_ring(pointer.context, &pieces, item)?;
        let ring = (&mut ring, &pieces[..]);
        write_staged(file, ring, (address, item), runs)?;
    }
    drop(context);
    Ok(())
}
