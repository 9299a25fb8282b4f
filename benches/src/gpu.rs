//! Device memory for the device benchmarks and test programs, through cudarc's driver API:
//! the primary context made current, and allocations freed on drop. (On the emulator, device
//! memory cannot be read by host code; every access goes through these copies.)

use cudarc::driver::sys;
use std::ffi::c_void;

type Check<T> = Result<T, String>;

pub fn cu(what: &str, result: sys::CUresult) -> Check<()> {
    match result {
        sys::CUresult::CUDA_SUCCESS => Ok(()),
        code => Err(format!("{what} failed: {code:?}")),
    }
}

/// A device allocation freed on drop.
pub struct DeviceBuffer {
    pub ptr: sys::CUdeviceptr,
    pub len: usize,
}

impl DeviceBuffer {
    pub fn new(len: usize) -> Check<DeviceBuffer> {
        let mut ptr = 0;
        // SAFETY: a valid out-pointer; a context is current (see `init_cuda`).
        cu("cuMemAlloc", unsafe {
            sys::cuMemAlloc_v2(&mut ptr, len.max(1))
        })?;
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
        cu("cuMemcpyHtoD", unsafe {
            sys::cuMemcpyHtoD_v2(self.ptr + offset as u64, data.as_ptr().cast(), data.len())
        })
    }
    pub fn download(&self, offset: usize, len: usize) -> Check<Vec<u8>> {
        self.check_range(offset, len)?;
        let mut out = vec![0u8; len];
        // SAFETY: the range lies inside this allocation; out has len bytes.
        cu("cuMemcpyDtoH", unsafe {
            sys::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), self.ptr + offset as u64, len)
        })?;
        Ok(out)
    }
    pub fn at(&self, offset: usize) -> *mut c_void {
        (self.ptr + offset as u64) as *mut c_void
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `new`, freed once.
        unsafe { sys::cuMemFree_v2(self.ptr) };
    }
}

/// Loads CUDA and makes device 0's primary context current on this thread.
pub fn init_cuda() -> Check<()> {
    // SAFETY: only tries to dlopen libcuda; cudarc would panic on the calls below without it.
    if !unsafe { sys::is_culib_present() } {
        return Err("no CUDA driver library (libcuda.so.1) on the library path".into());
    }
    // SAFETY: plain driver API calls with valid out-pointers.
    unsafe {
        cu("cuInit", sys::cuInit(0))?;
        let mut device = 0;
        cu("cuDeviceGet", sys::cuDeviceGet(&mut device, 0))?;
        let mut context = std::ptr::null_mut();
        cu(
            "cuDevicePrimaryCtxRetain",
            sys::cuDevicePrimaryCtxRetain(&mut context, device),
        )?;
        cu("cuCtxSetCurrent", sys::cuCtxSetCurrent(context))
    }
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
