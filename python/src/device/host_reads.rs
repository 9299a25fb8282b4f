//! Reads into device memory that the host serves where the driver would stage them anyway: a
//! read-only file's layout read with no HDF5 call (`staged_anyway`). A GPU-decoded read's stored
//! chunks read by the host's threads are the engine's verdict (`gpu_decoded::host_reads`).

use crate::error::DeviceError;
use h5gds_engine::policy::settings::CallSettings;
use h5gds_runtime::settings::{environment_device_path, DevicePath};

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
    match environment_device_path()? {
        DevicePath::Staged => return Ok(past("H5GDS_USE_VFD_GDS=0 stages device reads")),
        DevicePath::Gds => return Ok(None),
        DevicePath::Auto => {}
    }
    let vfd = settings.get()?;
    Ok(h5gds::device_transfers_staged(vfd).map(|why| StagedAnyway {
        why,
        past_the_driver: false,
    }))
}
