//! CUDA driver API types and numeric values the emulator uses, as in CUDA 12's `cuda.h`
//! (checked against cudarc 0.19's generated `driver/sys` bindings). cuFile's values come from
//! `cufile-sys` instead, which is generated from `cufile.h` 1.20.

use std::ffi::{c_int, c_uint, c_void};

/// `CUresult`: a C enum, int-sized.
pub type CUresult = c_int;
/// `CUdevice`: a device ordinal.
pub type CUdevice = c_int;
/// `CUcontext`: an opaque context handle.
pub type CUcontext = *mut c_void;
/// `CUstream`: an opaque stream handle.
pub type CUstream = *mut c_void;
/// `CUdeviceptr`: a device address (unified with host addresses on 64-bit Linux).
pub type CUdeviceptr = u64;
/// `CUevent`: an opaque event handle.
pub type CUevent = *mut c_void;
/// `CUdevice_attribute`: a C enum, int-sized.
pub type CUdeviceAttribute = c_int;
/// `CUpointer_attribute`: a C enum, int-sized.
pub type CUpointerAttribute = c_uint;

pub const CUDA_SUCCESS: CUresult = 0;
pub const CUDA_ERROR_INVALID_VALUE: CUresult = 1;
pub const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
pub const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
pub const CUDA_ERROR_NO_DEVICE: CUresult = 100;
pub const CUDA_ERROR_INVALID_DEVICE: CUresult = 101;
pub const CUDA_ERROR_INVALID_CONTEXT: CUresult = 201;
pub const CUDA_ERROR_INVALID_HANDLE: CUresult = 400;
pub const CUDA_ERROR_NOT_FOUND: CUresult = 500;
pub const CUDA_ERROR_NOT_READY: CUresult = 600;
pub const CUDA_ERROR_NOT_SUPPORTED: CUresult = 801;
pub const CUDA_ERROR_UNKNOWN: CUresult = 999;

/// `CUmemorytype` values.
pub const CU_MEMORYTYPE_HOST: c_uint = 1;
pub const CU_MEMORYTYPE_DEVICE: c_uint = 2;
pub const CU_MEMORYTYPE_ARRAY: c_uint = 3;
pub const CU_MEMORYTYPE_UNIFIED: c_uint = 4;

/// `CU_DEVICE_ATTRIBUTE_MAX_PITCH` as GPUs report it (2^31 - 1, CUDA's deviceQuery sample's
/// "Maximum memory pitch"): the largest pitch a 2-D or 3-D copy takes.
pub const MAX_PITCH: usize = (1 << 31) - 1;

/// `CUDA_MEMCPY2D` (`CUDA_MEMCPY2D_v2` of `cuda.h`).
#[repr(C)]
#[derive(Debug)]
pub struct CudaMemcpy2D {
    pub src_x_in_bytes: usize,
    pub src_y: usize,
    pub src_memory_type: c_uint,
    pub src_host: *const c_void,
    pub src_device: CUdeviceptr,
    pub src_array: *mut c_void,
    pub src_pitch: usize,
    pub dst_x_in_bytes: usize,
    pub dst_y: usize,
    pub dst_memory_type: c_uint,
    pub dst_host: *mut c_void,
    pub dst_device: CUdeviceptr,
    pub dst_array: *mut c_void,
    pub dst_pitch: usize,
    pub width_in_bytes: usize,
    pub height: usize,
}

/// `CUDA_MEMCPY3D` (`CUDA_MEMCPY3D_v2` of `cuda.h`).
#[repr(C)]
#[derive(Debug)]
pub struct CudaMemcpy3D {
    pub src_x_in_bytes: usize,
    pub src_y: usize,
    pub src_z: usize,
    pub src_lod: usize,
    pub src_memory_type: c_uint,
    pub src_host: *const c_void,
    pub src_device: CUdeviceptr,
    pub src_array: *mut c_void,
    pub reserved0: *mut c_void,
    pub src_pitch: usize,
    pub src_height: usize,
    pub dst_x_in_bytes: usize,
    pub dst_y: usize,
    pub dst_z: usize,
    pub dst_lod: usize,
    pub dst_memory_type: c_uint,
    pub dst_host: *mut c_void,
    pub dst_device: CUdeviceptr,
    pub dst_array: *mut c_void,
    pub reserved1: *mut c_void,
    pub dst_pitch: usize,
    pub dst_height: usize,
    pub width_in_bytes: usize,
    pub height: usize,
    pub depth: usize,
}

/// `CUpointer_attribute` values the emulator answers.
pub const CU_POINTER_ATTRIBUTE_CONTEXT: CUpointerAttribute = 1;
pub const CU_POINTER_ATTRIBUTE_MEMORY_TYPE: CUpointerAttribute = 2;
pub const CU_POINTER_ATTRIBUTE_DEVICE_POINTER: CUpointerAttribute = 3;
pub const CU_POINTER_ATTRIBUTE_HOST_POINTER: CUpointerAttribute = 4;
pub const CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: CUpointerAttribute = 6;
pub const CU_POINTER_ATTRIBUTE_BUFFER_ID: CUpointerAttribute = 7;
pub const CU_POINTER_ATTRIBUTE_IS_MANAGED: CUpointerAttribute = 8;
pub const CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: CUpointerAttribute = 9;
pub const CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: CUpointerAttribute = 11;
pub const CU_POINTER_ATTRIBUTE_RANGE_SIZE: CUpointerAttribute = 12;
pub const CU_POINTER_ATTRIBUTE_MAPPED: CUpointerAttribute = 13;
pub const CU_POINTER_ATTRIBUTE_MAPPING_SIZE: CUpointerAttribute = 18;
pub const CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: CUpointerAttribute = 19;

/// `cuMemHostAlloc` flag: pinned for every context.
pub const CU_MEMHOSTALLOC_PORTABLE: c_uint = 1;

/// `CUdevice_attribute` values the emulator answers (see `cuda_events::attribute`).
pub const CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: CUdeviceAttribute = 19;
pub const CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: CUdeviceAttribute = 41;
pub const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: CUdeviceAttribute = 75;
pub const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: CUdeviceAttribute = 76;
pub const CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: CUdeviceAttribute = 83;
pub const CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: CUdeviceAttribute = 89;
pub const CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: CUdeviceAttribute = 115;
pub const CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED: CUdeviceAttribute = 116;

/// `CUevent_flags`: DEFAULT 0, BLOCKING_SYNC 1, DISABLE_TIMING 2, INTERPROCESS 4 (which requires
/// DISABLE_TIMING).
pub const CU_EVENT_BLOCKING_SYNC: c_uint = 0x1;
pub const CU_EVENT_DISABLE_TIMING: c_uint = 0x2;
pub const CU_EVENT_INTERPROCESS: c_uint = 0x4;
/// `CUevent_wait_flags`: DEFAULT 0, EXTERNAL 1.
pub const CU_EVENT_WAIT_EXTERNAL: c_uint = 0x1;

/// The special stream handles `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD`.
pub const CU_STREAM_LEGACY: usize = 0x1;
pub const CU_STREAM_PER_THREAD: usize = 0x2;

/// The device ordinal the runtime reports for memory CUDA does not know (`cudaInvalidDeviceId`).
pub const INVALID_DEVICE_ORDINAL: c_int = -2;

/// What `cuDriverGetVersion` reports: a CUDA 12.9 driver (1000 * major + 10 * minor).
pub const DRIVER_VERSION: c_int = 12090;
/// What `cuFileGetVersion` reports: cuFile 1.20.0 (1000 * major + 10 * minor, per `cufile.h`).
pub const CUFILE_VERSION: c_int = 1200;
/// The nvidia-fs version `cuFileDriverGetProperties` reports when GDS is "present".
pub const NVFS_VERSION: (c_uint, c_uint) = (2, 20);

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn copy_descriptors_have_cuda_h_layouts() {
        // Every field is 8 bytes on x86-64, the memory types padded to 8.
        assert_eq!(size_of::<CudaMemcpy2D>(), 128);
        assert_eq!(offset_of!(CudaMemcpy2D, src_host), 24);
        assert_eq!(offset_of!(CudaMemcpy2D, dst_x_in_bytes), 56);
        assert_eq!(offset_of!(CudaMemcpy2D, height), 120);
        assert_eq!(size_of::<CudaMemcpy3D>(), 200);
        assert_eq!(offset_of!(CudaMemcpy3D, src_host), 40);
        assert_eq!(offset_of!(CudaMemcpy3D, dst_x_in_bytes), 88);
        assert_eq!(offset_of!(CudaMemcpy3D, depth), 192);
    }
}
