//! The driver's verdicts without opening a file, for `h5gds info`, the Python layouts and the GPU
//! codec's host reads: the paths a file opened now would take, whether every device transfer is
//! staged whatever the file, and the process's cuFile driver and library file. Each is decided by
//! the code a file open runs (`io::device`, `io::gds`, `file`), so the answer is the driver's own.

use crate::config::{CompatMode, DirectIo, VfdSettings};
use crate::cuda::cuda;
use crate::file;
use crate::io::{self, gds::gds_kernel_path_possible, gds::CuFileDriver};

/// The paths a file opened now would take, in the words of the driver's open log line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathVerdicts {
    pub host: String,
    pub device: String,
}

/// Decides the paths for `settings` with the driver's own code (for `h5gds info`). Opening cuFile
/// is part of deciding, so this touches libcufile only where a device transfer would (a file
/// open under `compat_mode=auto` leaves it to the first device transfer).
pub fn path_verdicts(settings: &VfdSettings) -> PathVerdicts {
    let device = match io::device::DevicePathPlan::prepare(settings, false) {
        Ok(plan) => plan.describe(settings),
        Err(err) => format!("files will not open: {err}"),
    };
    let direct = settings.direct_io != DirectIo::Off;
    PathVerdicts {
        host: file::host_path_description(settings, direct),
        device,
    }
}

/// Why the driver stages every device transfer through its bounce buffers, whatever the file:
/// `compat_mode=on`, or `compat_mode=auto` where no GDS kernel path can exist (no nvidia-fs and
/// P2PDMA off, as on the first real-GPU machine). `None` where transfers may move GPU-direct
/// (`compat_mode=off`, or a GDS kernel path possible); per file, cuFile may still stage them.
/// Call only where CUDA works.
pub fn device_transfers_staged(settings: &VfdSettings) -> Option<String> {
    match settings.compat_mode {
        CompatMode::On => Some("compat_mode=on: the driver stages device transfers".into()),
        CompatMode::Off => None,
        CompatMode::Auto => gds_kernel_path_possible()
            .err()
            .map(|why| format!("the driver stages device transfers ({why})")),
    }
}

/// The process's cuFile driver, if an open under `settings` would use one; else why not. Like the
/// driver, it never touches libcufile before CUDA is known to work (cuFile would hang without it),
/// and under `compat_mode=auto` opens it only where it could give GDS.
pub fn cufile_driver(settings: Option<&VfdSettings>) -> Result<&'static CuFileDriver, String> {
    if settings.is_some_and(|s| s.compat_mode == CompatMode::On) {
        return Err("not opened: compat_mode=on never touches libcufile".into());
    }
    if cuda().is_err() {
        return Err("not opened: CUDA does not work here, and cuFile would hang without it".into());
    }
    match settings.map(|s| s.compat_mode) {
        // Exactly what a device transfer under auto opens.
        Some(CompatMode::Auto) => io::gds::driver_for_auto(),
        _ => io::gds::driver(),
    }
}

/// The file libcufile is loaded from (loading calls nothing in it, so this is safe without CUDA:
/// only opening cuFile's driver can hang there); else why it does not load.
pub fn cufile_library_file() -> Result<String, String> {
    let lib = io::gds::library()?;
    let function = lib
        .cuFileDriverOpen
        .as_ref()
        .ok()
        .map(|f| *f as *const std::ffi::c_void);
    function
        .and_then(h5gds_runtime::hdf5::loaded_file_of)
        .ok_or_else(|| "libcufile loaded from an unknown file".into())
}
