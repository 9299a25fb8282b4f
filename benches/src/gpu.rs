//! Device memory for the device benchmarks and test programs, through the runtime crate's CUDA
//! wrapper (the driver's own): the primary context made current, and allocations freed on drop.
//! (On the emulator, device memory cannot be read by host code; every access goes through these
//! copies.) Failures name the CUDA result code, as the driver's do.

use cudarc::driver::{result, sys};
use h5gds_runtime::cuda::{self, call, CudaError};
use std::ffi::c_void;

type Check<T> = Result<T, String>;

fn text(err: CudaError) -> String {
    err.to_string()
}

/// A device allocation freed on drop.
pub struct DeviceBuffer {
    pub ptr: sys::CUdeviceptr,
    pub len: usize,
}

impl DeviceBuffer {
    pub fn new(len: usize) -> Check<DeviceBuffer> {
        // SAFETY: a context is current (see `init_cuda`); the memory is only used as bytes.
        let ptr =
            call("cuMemAlloc", || unsafe { result::malloc_sync(len.max(1)) }).map_err(text)?;
        Ok(DeviceBuffer { ptr, len })
    }
    fn check_range(&self, offset: usize, len: usize) -> Check<()> {
        if offset + len > self.len {
            return Err(format!(
                "{len} bytes at {offset} do not fit a device buffer of {}",
                self.len
            ));
        }
        Ok(())
    }
    pub fn upload(&self, offset: usize, data: &[u8]) -> Check<()> {
        self.check_range(offset, data.len())?;
        // SAFETY: the range lies inside this allocation; data is a live slice.
        call("cuMemcpyHtoD", || unsafe {
            result::memcpy_htod_sync(self.ptr + offset as u64, data)
        })
        .map_err(text)
    }
    pub fn download_into(&self, offset: usize, out: &mut [u8]) -> Check<()> {
        self.check_range(offset, out.len())?;
        // SAFETY: the range lies inside this allocation; out is a live, exclusive slice.
        call("cuMemcpyDtoH", || unsafe {
            result::memcpy_dtoh_sync(out, self.ptr + offset as u64)
        })
        .map_err(text)
    }
    pub fn download(&self, offset: usize, len: usize) -> Check<Vec<u8>> {
        let mut out = vec![0u8; len];
        self.download_into(offset, &mut out)?;
        Ok(out)
    }
    pub fn at(&self, offset: usize) -> *mut c_void {
        (self.ptr + offset as u64) as *mut c_void
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `new`, freed once; a failure cannot be reported from drop.
        let _ = call("cuMemFree", || unsafe { result::free_sync(self.ptr) });
    }
}

/// Loads CUDA and makes device 0's primary context current on this thread, for the rest of
/// the program (the context is pushed and never popped).
pub fn init_cuda() -> Check<()> {
    cuda::cuda().map_err(text)?;
    let current = cuda::enter(cuda::primary_context(0).map_err(text)?).map_err(text)?;
    std::mem::forget(current);
    Ok(())
}

/// Whether the libcuda in this process is h5gds's CPU emulator (it exports a counters function
/// the real driver does not have), so results can be labelled as emulated.
pub fn is_emulated() -> bool {
    unsafe extern "C" fn visit(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        found: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: `info` is valid during the callback and names a loaded object; `found` is the
        // bool passed below; the handle is opened without loading and closed here.
        unsafe {
            let name = (*info).dlpi_name;
            if name.is_null()
                || !std::ffi::CStr::from_ptr(name)
                    .to_string_lossy()
                    .contains("libcuda")
            {
                return 0;
            }
            let handle = libc::dlopen(name, libc::RTLD_LAZY | libc::RTLD_NOLOAD);
            if !handle.is_null() {
                if !libc::dlsym(handle, c"h5gds_emu_counters".as_ptr()).is_null() {
                    *(found as *mut bool) = true;
                }
                libc::dlclose(handle);
            }
        }
        0
    }
    let mut found = false;
    // SAFETY: the callback only inspects loaded objects and sets `found`.
    unsafe { libc::dl_iterate_phdr(Some(visit), (&mut found as *mut bool).cast()) };
    found
}
