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
