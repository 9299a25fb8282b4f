//! Reads into device memory that the host serves where the driver would stage them anyway: a
//! read-only file's layout read with no HDF5 call (`staged_anyway`), and a GPU-decoded read's
//! stored chunks read by the host's threads (`host_reads`).

use super::{argument, env};
use crate::call_settings::CallSettings;
use crate::error::DeviceError;
use crate::hdf5::{self, Hid};
use h5gds_engine::gpu_decoded;
use h5gds_gpu_codec::decode::HostReads;
use h5gds_route::route::Transfer;
use h5gds_runtime::settings::{self, DevicePath, USE_VFD_GDS_ENV};

/// The largest read into device memory that a dataset's layout may serve
/// (`Layout::read_to_device`): read whole into pinned host memory, then copied up. Larger reads
/// go through the driver, which overlaps the file reads with the copies.
pub const LAYOUT_DEVICE_READ_MAX: usize = 16 << 20;

/// Why a read into device memory would be staged through pinned memory anyway
/// ([`staged_anyway`]).
pub struct StagedAnyway {
    pub why: String,
    /// The gds driver would not see the device pointer at all (the file is open with sec2, or
    /// `H5GDS_USE_VFD_GDS=0`), so compressed chunks cannot reach nvCOMP either.
    pub past_the_driver: bool,
}

/// Why a read of `nbytes` into device memory may be served by the dataset's layout, with no HDF5
/// call, through pinned host memory: it would be staged through pinned memory anyway (the file is
/// open with sec2, `sec2`; or the driver would stage it). None where the driver is to take it: the
/// read is larger than [`LAYOUT_DEVICE_READ_MAX`], the settings ask for the gds driver
/// (`H5GDS_USE_VFD_GDS=1`, `compat_mode=off`), or cuFile could give GPUDirect Storage here
/// (nvidia-fs, or P2PDMA in cuFile's configuration). `settings`: the call's.
pub fn staged_anyway(
    nbytes: usize,
    sec2: bool,
    settings: &CallSettings,
) -> Result<Option<StagedAnyway>, DeviceError> {
    if nbytes > LAYOUT_DEVICE_READ_MAX {
        return Ok(None);
    }
    let past = |why: &str| {
        Some(StagedAnyway {
            why: why.into(),
            past_the_driver: true,
        })
    };
    if sec2 {
        return Ok(past(
            "the file is open with the sec2 driver, which reads only into host memory",
        ));
    }
    let invalid = |e: settings::InvalidSetting| argument(e.to_string());
    match settings::device_path(env(USE_VFD_GDS_ENV).as_deref()).map_err(invalid)? {
        DevicePath::Staged => return Ok(past("H5GDS_USE_VFD_GDS=0 stages device reads")),
        DevicePath::Gds => return Ok(None),
        DevicePath::Auto => {}
    }
    let vfd = settings.get().map_err(argument)?;
    Ok(h5gds::device_transfers_staged(vfd).map(|why| StagedAnyway {
        why,
        past_the_driver: false,
    }))
}

/// Where the stored chunks of a GPU-decoded read are read by the host's threads ([`HostReads`]):
/// the engine's verdict (`gpu_decoded::host_reads`) for h5py's file of `dataset`, read under
/// `path` (`H5GDS_USE_VFD_GDS`). `settings`: the call's.
pub(super) fn host_reads(
    dataset: Hid,
    path: DevicePath,
    facts: &Transfer,
    settings: &CallSettings,
) -> Result<Option<HostReads>, DeviceError> {
    let vfd = settings.get().map_err(argument)?;
    let driver = facts.other_driver.as_deref();
    let direct_file = || hdf5::direct_file(dataset);
    Ok(gpu_decoded::host_reads(path, driver, vfd, direct_file))
}
