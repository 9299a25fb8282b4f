//! Device arrays' memory checked with CUDA (device memory of a device this process sees, the
//! whole array inside one allocation), and copies between it and host memory.

use super::argument;
use crate::error::DeviceError;
use h5gds_runtime::cuda::{self, DeviceContext, DeviceRange, PointerKind};
use h5gds_runtime::device_ranges::{self, forget_device_range};

/// The CUDA allocation an array's memory belongs to, checked: CUDA works here, the address is
/// device memory of a device this process sees (the one the array claims, if it claims one), and
/// all `nbytes` lie inside that one allocation.
pub(super) fn checked_pointer(
    role: &str,
    address: u64,
    nbytes: usize,
    claimed_ordinal: Option<i32>,
) -> Result<DeviceRange, DeviceError> {
    let cuda_driver = cuda::cuda().map_err(|err| {
        argument(format!(
            "{role} is CUDA device memory, but CUDA does not work in this process ({err})"
        ))
    })?;
    let kind = device_ranges::query(address as usize).map_err(DeviceError::Failed)?;
    if let Some(claimed) = claimed_ordinal {
        if claimed < 0 || claimed >= cuda_driver.device_count {
            return Err(argument(format!(
                "{role} is on CUDA device {claimed}, and this process sees {} CUDA device(s)",
                cuda_driver.device_count
            )));
        }
    }
    let PointerKind::Device(range) = kind else {
        return Err(argument(format!(
            "{role}'s address {address:#x} is not CUDA device memory in this process (CUDA does \
             not know it as a device allocation)"
        )));
    };
    let ordinal = range.context.device;
    if let Some(claimed) = claimed_ordinal {
        if claimed != ordinal {
            return Err(argument(format!(
                "{role} says it is on CUDA device {claimed}, but its memory is on device {ordinal}"
            )));
        }
    }
    let (base, size) = range.allocation;
    let end = address.checked_add(nbytes as u64);
    if address < base || end.is_none_or(|e| e > base + size as u64) {
        return Err(argument(format!(
            "{role} claims {nbytes} bytes at {address:#x}, beyond its allocation ({size} bytes at \
             {base:#x})"
        )));
    }
    Ok(range)
}

/// The number of CUDA devices this process sees; an error naming the cause where CUDA does not
/// work (no driver, no device).
pub fn device_count() -> Result<i32, DeviceError> {
    let driver = cuda::cuda().map_err(|err| {
        DeviceError::Failed(format!("CUDA does not work in this process ({err})"))
    })?;
    if driver.device_count <= 0 {
        return Err(DeviceError::Failed(
            "CUDA sees no device in this process".into(),
        ));
    }
    Ok(driver.device_count)
}

/// Copies between the device array at `address` (`nbytes`; on device `claimed_ordinal` if it
/// says) and the host buffer at `host` (`nbytes` long): to the device with `to_device`, else to the
/// host. The producer's `stream` (0: none) finishes first; the copy is complete when this returns.
/// The array's way to and from the host cores (a gather into a device array reads into host memory
/// first). Errors as [`with_device_array`]'s. The caller keeps both alive.
pub fn copy_with_host(
    address: u64,
    nbytes: usize,
    claimed_ordinal: Option<i32>,
    stream: u64,
    host: usize,
    to_device: bool,
) -> Result<(), DeviceError> {
    if nbytes == 0 {
        return Ok(());
    }
    with_device_array((address, nbytes), claimed_ordinal, stream, |context| {
        let (to, from, way) = match to_device {
            true => (address as usize, host, "from"),
            false => (host, address as usize, "to"),
        };
        // SAFETY: the device range holds `nbytes` (checked_pointer); the caller passes a live
        // host buffer of `nbytes`.
        unsafe { cuda::copy_any(context, to, from, nbytes) }
            .map_err(|e| DeviceError::Failed(format!("copying the array {way} the host: {e}")))
    })
}

/// Runs `f` with the context of the device array at `address` (`nbytes`; on device
/// `claimed_ordinal` if it says) current, once the producer's `stream` (0: none) has finished:
/// the array's way to a copy with the host ([`copy_with_host`]) and to the engine's compressed
/// writes (`crate::encode`). `Argument` for memory that is not one CUDA allocation holding
/// `nbytes` on a device this process sees; `Failed` where CUDA fails. The caller keeps the array
/// alive.
pub fn with_device_array<R>(
    at: (u64, usize),
    claimed_ordinal: Option<i32>,
    stream: u64,
    f: impl FnOnce(DeviceContext) -> Result<R, DeviceError>,
) -> Result<R, DeviceError> {
    with_device_memory("array", at, claimed_ordinal, stream, f)
}

/// [`with_device_array`] for the array the caller's argument `role` names (`out`, `array`).
pub fn with_device_memory<R>(
    role: &str,
    (address, nbytes): (u64, usize),
    claimed_ordinal: Option<i32>,
    stream: u64,
    f: impl FnOnce(DeviceContext) -> Result<R, DeviceError>,
) -> Result<R, DeviceError> {
    let pointer = checked_pointer(role, address, nbytes, claimed_ordinal)?;
    let ran = (|| {
        let _context = cuda::enter(pointer.context)?;
        if stream != 0 {
            cuda::synchronize_handle(stream)?;
        }
        f(pointer.context)
    })();
    // The array may be freed once this returns: its range is not kept.
    forget_device_range(pointer.base);
    ran
}
