//! Device memory for the emulator's companion libraries (the nvCOMP emulator,
//! `emulators/nvcomp`): they run "on the device", so they reach device memory through the
//! shadow mapping, as a GPU kernel would reach it, without a host copy being counted.

use crate::counters;
use crate::ffi::call;
use std::ffi::c_int;

/// `uint8_t *h5gds_emu_device_shadow(CUdeviceptr addr, size_t len)`: the host-accessible
/// address of device bytes `[addr, addr + len)`, which must lie inside one device allocation;
/// else NULL, counted as a bounds violation (a kernel reading out of bounds on a GPU).
///
/// # Safety
/// None beyond the C contract: any values may be passed.
#[no_mangle]
pub unsafe extern "C" fn h5gds_emu_device_shadow(addr: u64, len: usize) -> *mut u8 {
    let mut shadow: *mut u8 = std::ptr::null_mut();
    let outcome: c_int = call(
        "h5gds_emu_device_shadow",
        format_args!("{addr:#x}, {len}"),
        || 999,
        || match crate::memory::device_range(addr as usize, len) {
            Some(block) => {
                shadow = block.shadow_of(addr as usize);
                0
            }
            None => {
                counters::bump(&counters::BOUNDS_VIOLATIONS);
                1
            }
        },
    );
    if outcome == 0 {
        shadow
    } else {
        std::ptr::null_mut()
    }
}

/// `int h5gds_emu_enqueue(CUstream stream, void (*run)(void *), void *data)`: runs `run(data)`
/// as device work on `stream` would run: at once, or with `H5GDS_EMU_DEFER_ASYNC=1` when the
/// stream is synchronized (a kernel "launched" by the nvCOMP emulator, whose results a caller
/// sees only after synchronizing, as on a GPU). Returns 0 once `run` has run or is queued (it
/// then owns `data`); otherwise the `CUresult` why not (no context, an unknown stream), and
/// `run` is never called.
///
/// # Safety
/// `run` must be safe to call once with `data`, on any thread.
#[no_mangle]
pub unsafe extern "C" fn h5gds_emu_enqueue(
    stream: crate::consts::CUstream,
    run: Option<crate::copies::DeviceWork>,
    data: *mut std::ffi::c_void,
) -> c_int {
    call(
        "h5gds_emu_enqueue",
        format_args!("{stream:?}, {data:?}"),
        || 999,
        || match run {
            None => crate::consts::CUDA_ERROR_INVALID_VALUE as c_int,
            Some(run) => match crate::copies::on_stream(stream, run, data as usize) {
                Ok(()) => 0,
                Err(code) => code as c_int,
            },
        },
    )
}
