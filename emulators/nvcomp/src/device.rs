//! Device memory as the emulated GPU sees it: through the CUDA emulator's shadow mapping
//! (`h5gds_emu_device_shadow`), found in the libcuda the process already loaded. Host pointers,
//! out-of-bounds ranges and a process without the CUDA emulator give `None`, never a crash.

use std::sync::OnceLock;

type ShadowFn = unsafe extern "C" fn(u64, usize) -> *mut u8;

/// The CUDA emulator's shadow lookup, if libcuda is the emulator.
fn shadow_fn() -> Option<ShadowFn> {
    static SHADOW: OnceLock<Option<ShadowFn>> = OnceLock::new();
    *SHADOW.get_or_init(|| {
        use libloading::os::unix::{Library, RTLD_NOW};
        // The copy the program loaded (RTLD_NOLOAD), else load it: both name the one emulator.
        // SAFETY: opening libcuda.so.1, the CUDA emulator in every process this library runs in;
        // its initialisers do nothing.
        let library = unsafe { Library::open(Some("libcuda.so.1"), RTLD_NOW | libc::RTLD_NOLOAD) }
            .or_else(|_| unsafe { Library::open(Some("libcuda.so.1"), RTLD_NOW) })
            .ok()?;
        // SAFETY: the symbol has this signature in the CUDA emulator (emulators/cuda).
        let symbol = unsafe { library.get::<ShadowFn>(b"h5gds_emu_device_shadow\0") }.ok()?;
        let f = *symbol;
        // The library stays loaded for the life of the process, so the pointer stays valid.
        std::mem::forget(library);
        Some(f)
    })
}

type EnqueueFn = unsafe extern "C" fn(
    *mut std::ffi::c_void,
    Option<unsafe extern "C" fn(*mut std::ffi::c_void)>,
    *mut std::ffi::c_void,
) -> i32;

/// The CUDA emulator's `h5gds_emu_enqueue`, if libcuda is the emulator.
fn enqueue_fn() -> Option<EnqueueFn> {
    static ENQUEUE: OnceLock<Option<EnqueueFn>> = OnceLock::new();
    *ENQUEUE.get_or_init(|| {
        use libloading::os::unix::{Library, RTLD_NOW};
        // SAFETY: as in `shadow_fn`.
        let library = unsafe { Library::open(Some("libcuda.so.1"), RTLD_NOW | libc::RTLD_NOLOAD) }
            .or_else(|_| unsafe { Library::open(Some("libcuda.so.1"), RTLD_NOW) })
            .ok()?;
        // SAFETY: the symbol has this signature in the CUDA emulator (emulators/cuda).
        let symbol = unsafe { library.get::<EnqueueFn>(b"h5gds_emu_enqueue\0") }.ok()?;
        let f = *symbol;
        std::mem::forget(library);
        Some(f)
    })
}

/// Work "launched" on a stream: a boxed closure behind a thin pointer.
type Work = Box<dyn FnOnce() + Send>;

/// Runs a [`Work`] the CUDA emulator hands back; a panic stops here (it would otherwise
/// unwind into C).
unsafe extern "C" fn run_work(data: *mut std::ffi::c_void) {
    // SAFETY: `data` came from `Box::into_raw` in `launch`, and the emulator calls this once.
    let work = unsafe { Box::from_raw(data.cast::<Work>()) };
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).is_err() {
        eprintln!("h5gds-emu-nvcomp: internal error (panic) in a batched call's device work");
    }
}

/// Launches `work` on `stream` as a kernel would run: the CUDA emulator runs it after the
/// stream's earlier work, at once or (`H5GDS_EMU_DEFER_ASYNC=1`) only when the stream is
/// synchronized, so a caller that reads results or reuses buffers before synchronizing sees
/// what it would on a GPU. Without the CUDA emulator `work` runs at once. False, with nothing
/// run, where the CUDA emulator refuses the launch (no current context, an unknown stream).
pub fn launch(stream: *mut std::ffi::c_void, work: impl FnOnce() + Send + 'static) -> bool {
    let Some(enqueue) = enqueue_fn() else {
        work();
        return true;
    };
    let data = Box::into_raw(Box::new(Box::new(work) as Work));
    // SAFETY: `run_work` takes `data` back once; on a refusal it is never called, and the box
    // is taken back here.
    if unsafe { enqueue(stream, Some(run_work), data.cast()) } != 0 {
        // SAFETY: refused, so the emulator did not keep `data`.
        drop(unsafe { Box::from_raw(data) });
        return false;
    }
    true
}
/// Device bytes `[addr, addr + len)` (inside one allocation), readable and writable.
///
/// # Safety
/// The caller must not hold two overlapping views mutably at once, and must not keep the slice
/// past the allocation's free (as a kernel must not).
pub unsafe fn bytes<'a>(addr: u64, len: usize) -> Option<&'a mut [u8]> {
    if addr == 0 {
        return None;
    }
    let f = shadow_fn()?;
    // SAFETY: the lookup checks the range against the emulator's allocation table.
    let ptr = unsafe { f(addr, len) };
    if ptr.is_null() {
        return None;
    }
    // SAFETY: the range lies inside one live device allocation's read-write shadow mapping.
    Some(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
}

/// `n` values of `T` at device address `addr` (a device array of pointers, sizes, statuses).
///
/// # Safety
/// As [`bytes`]; `T` must be a plain integer type.
pub unsafe fn array<'a, T: Copy>(addr: u64, n: usize) -> Option<&'a mut [T]> {
    if addr as usize % std::mem::align_of::<T>() != 0 {
        return None;
    }
    // SAFETY: the caller's contract (as for `bytes`).
    let raw = unsafe { bytes(addr, n.checked_mul(std::mem::size_of::<T>())?) }?;
    // SAFETY: aligned (checked above; the shadow keeps the device address's page offset) and
    // exactly n values long.
    Some(unsafe { std::slice::from_raw_parts_mut(raw.as_mut_ptr().cast::<T>(), n) })
}
