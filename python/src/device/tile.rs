//! One rank's device tile of a collective `to_file`, written through the file's driver with the
//! engine's tile writes (`h5gds_engine::collective::TileFile`).

use super::pointer::checked_pointer;
use crate::error::DeviceError;
use h5gds_engine::collective::TileFile;
use h5gds_engine::staged;
use h5gds_runtime::cuda;
use h5gds_runtime::device_ranges::forget_device_range;
use h5gds_runtime::hdf5::{hid_t, Hdf5Api};
use h5gds_runtime::settings::environment_staging_buffer_size;

/// Writes one rank's device tile of a collective `to_file` (`nbytes` at `address`; on the device
/// the array claims, if it does; `stream`: the producer's, 0 for none) into `to` through `api`'s
/// HDF5 with the access list `fapl`: the device pointer straight to `gds` (`direct`), or, for a
/// file opened with sec2 (`H5GDS_USE_VFD_GDS=0`), staged through pinned host memory by the engine.
/// The producer's stream is waited for first.
pub fn write_tile(
    to: &TileFile,
    (api, fapl): (&'static Hdf5Api, hid_t),
    (address, nbytes): (u64, usize),
    (claimed_ordinal, stream): (Option<i32>, u64),
    direct: bool,
) -> Result<(), DeviceError> {
    let held = (fapl, nbytes as u64);
    if nbytes == 0 {
        // SAFETY: no byte to read (the engine checks the tile has none).
        return Ok(unsafe { to.write_direct(api, held, address) }?);
    }
    let pointer = checked_pointer("array", address, nbytes, claimed_ordinal)?;
    let context = cuda::enter(pointer.context)?;
    if stream != 0 {
        cuda::synchronize_handle(stream)?;
    }
    if direct {
        // SAFETY: `nbytes` inside one device allocation (checked_pointer); the file's driver is
        // gds, which takes device memory.
        let moved = unsafe { to.write_direct(api, held, address) };
        // The array may be freed once this returns; the driver must not keep its range.
        forget_device_range(pointer.base);
        moved?;
    } else {
        let staging_size = environment_staging_buffer_size()?;
        let ring =
            |pieces: &[(u64, u64)]| Ok(staged::thread_ring(pointer.context, pieces, to.item)?);
        // SAFETY: `nbytes` of device memory inside one allocation (checked_pointer).
        unsafe { to.write_staged(api, held, (address, staging_size), ring) }?;
    }
    drop(context);
    Ok(())
}
