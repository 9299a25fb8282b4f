//! The HDF5 virtual-file-driver ABI, written by hand from `H5FDdevelop.h` / `H5FDpublic.h`.
//!
//! The layout is the same in HDF5 1.14.4–1.14.6 and 2.0–2.2 (class struct version 1). The test
//! `tests/abi_layout.rs` compiles a C probe against real HDF5 headers and checks the size and every
//! field offset of these structs. hdf5-metno-sys's versions of these two structs are older and do
//! not match, which is why they are not used.
#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void};

/// HDF5's integer types and selection constants, from the runtime crate's run-time HDF5 layer
/// (re-exported here so tests/abi_layout.rs checks them with the rest).
pub use h5gds_runtime::hdf5::space::{H5S_SEL_ALL, H5S_SEL_HYPERSLABS, H5S_SEL_NONE};
pub use h5gds_runtime::hdf5::{herr_t, hid_t, hsize_t, htri_t, H5S_MAX_RANK};
pub type haddr_t = u64;
/// `H5FD_mem_t` is a C enum (int-sized).
pub type H5FD_mem_t = c_int;
pub type H5FD_class_value_t = c_int;
pub type H5F_close_degree_t = c_int;

/// This driver's registered name and value (the GPUDirect Storage VFD's, so h5gds is a drop-in).
pub const DRIVER_NAME: &std::ffi::CStr = c"gds";
pub const DRIVER_VALUE: H5FD_class_value_t = 512;

pub const HADDR_UNDEF: haddr_t = u64::MAX;
/// The largest address a POSIX `off_t` can hold (what sec2 calls `H5FD_MAXADDR`).
pub const MAXADDR: haddr_t = i64::MAX as u64;

pub const H5FD_CLASS_VERSION: c_uint = 1;
pub const H5PL_TYPE_VFD: c_int = 2;
pub const H5F_CLOSE_WEAK: H5F_close_degree_t = 1;

// File access flags passed to `open`.
pub const H5F_ACC_RDWR: c_uint = 0x0001;
pub const H5F_ACC_TRUNC: c_uint = 0x0002;
pub const H5F_ACC_EXCL: c_uint = 0x0004;
pub const H5F_ACC_CREAT: c_uint = 0x0010;

// Memory types.
pub const H5FD_MEM_NOLIST: H5FD_mem_t = -1;
pub const H5FD_MEM_DEFAULT: H5FD_mem_t = 0;
pub const H5FD_MEM_SUPER: H5FD_mem_t = 1;
pub const H5FD_MEM_DRAW: H5FD_mem_t = 3;
pub const H5FD_MEM_NTYPES: usize = 7;

// Feature flags reported by `query`.
pub const H5FD_FEAT_AGGREGATE_METADATA: c_ulong = 0x0000_0001;
pub const H5FD_FEAT_ACCUMULATE_METADATA: c_ulong = 0x0000_0006;
pub const H5FD_FEAT_DATA_SIEVE: c_ulong = 0x0000_0008;
pub const H5FD_FEAT_AGGREGATE_SMALLDATA: c_ulong = 0x0000_0010;
pub const H5FD_FEAT_POSIX_COMPAT_HANDLE: c_ulong = 0x0000_0080;
pub const H5FD_FEAT_SUPPORTS_SWMR_IO: c_ulong = 0x0000_1000;
pub const H5FD_FEAT_DEFAULT_VFD_COMPATIBLE: c_ulong = 0x0000_8000;
pub const H5FD_FEAT_MEMMANAGE: c_ulong = 0x0001_0000;

// `ctl` op codes and flags.
pub const H5FD_CTL_TEST_OPCODE: u64 = 1;
pub const H5FD_CTL_MEM_ALLOC: u64 = 5;
pub const H5FD_CTL_MEM_FREE: u64 = 6;
pub const H5FD_CTL_MEM_COPY: u64 = 7;
pub const H5FD_CTL_FAIL_IF_UNKNOWN_FLAG: u64 = 0x0001;
pub const H5FD_CTL_ROUTE_TO_TERMINAL_VFD_FLAG: u64 = 0x0002;

/// The public part of every open file; the driver's own state follows it in memory.
#[repr(C)]
#[derive(Debug)]
pub struct H5FD_t {
    pub driver_id: hid_t,
    pub cls: *const H5FD_class_t,
    pub fileno: c_ulong,
    pub access_flags: c_uint,
    pub feature_flags: c_ulong,
    pub maxaddr: haddr_t,
    pub base_addr: haddr_t,
    pub threshold: hsize_t,
    pub alignment: hsize_t,
    pub paged_aggr: bool,
}

impl H5FD_t {
    /// The zeroed public header a driver hands back from `open`; HDF5 fills it in afterwards.
    pub const fn empty() -> Self {
        H5FD_t {
            driver_id: 0,
            cls: std::ptr::null(),
            fileno: 0,
            access_flags: 0,
            feature_flags: 0,
            maxaddr: 0,
            base_addr: 0,
            threshold: 0,
            alignment: 0,
            paged_aggr: false,
        }
    }
}

pub type OpenFn = unsafe extern "C" fn(
    name: *const c_char,
    flags: c_uint,
    fapl: hid_t,
    maxaddr: haddr_t,
) -> *mut H5FD_t;
pub type ReadFn = unsafe extern "C" fn(
    file: *mut H5FD_t,
    type_: H5FD_mem_t,
    dxpl: hid_t,
    addr: haddr_t,
    size: usize,
    buf: *mut c_void,
) -> herr_t;
pub type WriteFn = unsafe extern "C" fn(
    file: *mut H5FD_t,
    type_: H5FD_mem_t,
    dxpl: hid_t,
    addr: haddr_t,
    size: usize,
    buf: *const c_void,
) -> herr_t;
/// `read_vector` (`B` = `*mut c_void`) and `write_vector` (`*const c_void`).
pub type VectorFn<B> = unsafe extern "C" fn(
    file: *mut H5FD_t,
    dxpl: hid_t,
    count: u32,
    types: *mut H5FD_mem_t,
    addrs: *mut haddr_t,
    sizes: *mut usize,
    bufs: *mut B,
) -> herr_t;
pub type ReadVectorFn = VectorFn<*mut c_void>;
pub type WriteVectorFn = VectorFn<*const c_void>;
pub type SelectionFn = unsafe extern "C" fn(
    file: *mut H5FD_t,
    type_: H5FD_mem_t,
    dxpl: hid_t,
    count: usize,
    mem_spaces: *mut hid_t,
    file_spaces: *mut hid_t,
    offsets: *mut haddr_t,
    element_sizes: *mut usize,
    bufs: *mut *mut c_void,
) -> herr_t;
pub type CtlFn = unsafe extern "C" fn(
    file: *mut H5FD_t,
    op_code: u64,
    flags: u64,
    input: *const c_void,
    output: *mut *mut c_void,
) -> herr_t;

/// A driver's class: its name, value, limits and callbacks.
#[repr(C)]
pub struct H5FD_class_t {
    pub version: c_uint,
    pub value: H5FD_class_value_t,
    pub name: *const c_char,
    pub maxaddr: haddr_t,
    pub fc_degree: H5F_close_degree_t,
    pub terminate: Option<unsafe extern "C" fn() -> herr_t>,
    pub sb_size: Option<unsafe extern "C" fn(*mut H5FD_t) -> hsize_t>,
    pub sb_encode: Option<unsafe extern "C" fn(*mut H5FD_t, *mut c_char, *mut u8) -> herr_t>,
    pub sb_decode: Option<unsafe extern "C" fn(*mut H5FD_t, *const c_char, *const u8) -> herr_t>,
    pub fapl_size: usize,
    pub fapl_get: Option<unsafe extern "C" fn(*mut H5FD_t) -> *mut c_void>,
    pub fapl_copy: Option<unsafe extern "C" fn(*const c_void) -> *mut c_void>,
    pub fapl_free: Option<unsafe extern "C" fn(*mut c_void) -> herr_t>,
    pub dxpl_size: usize,
    pub dxpl_copy: Option<unsafe extern "C" fn(*const c_void) -> *mut c_void>,
    pub dxpl_free: Option<unsafe extern "C" fn(*mut c_void) -> herr_t>,
    pub open: Option<OpenFn>,
    pub close: Option<unsafe extern "C" fn(*mut H5FD_t) -> herr_t>,
    pub cmp: Option<unsafe extern "C" fn(*const H5FD_t, *const H5FD_t) -> c_int>,
    pub query: Option<unsafe extern "C" fn(*const H5FD_t, *mut c_ulong) -> herr_t>,
    pub get_type_map: Option<unsafe extern "C" fn(*const H5FD_t, *mut H5FD_mem_t) -> herr_t>,
    pub alloc: Option<unsafe extern "C" fn(*mut H5FD_t, H5FD_mem_t, hid_t, hsize_t) -> haddr_t>,
    pub free:
        Option<unsafe extern "C" fn(*mut H5FD_t, H5FD_mem_t, hid_t, haddr_t, hsize_t) -> herr_t>,
    pub get_eoa: Option<unsafe extern "C" fn(*const H5FD_t, H5FD_mem_t) -> haddr_t>,
    pub set_eoa: Option<unsafe extern "C" fn(*mut H5FD_t, H5FD_mem_t, haddr_t) -> herr_t>,
    pub get_eof: Option<unsafe extern "C" fn(*const H5FD_t, H5FD_mem_t) -> haddr_t>,
    pub get_handle: Option<unsafe extern "C" fn(*mut H5FD_t, hid_t, *mut *mut c_void) -> herr_t>,
    pub read: Option<ReadFn>,
    pub write: Option<WriteFn>,
    pub read_vector: Option<ReadVectorFn>,
    pub write_vector: Option<WriteVectorFn>,
    pub read_selection: Option<SelectionFn>,
    pub write_selection: Option<SelectionFn>,
    pub flush: Option<unsafe extern "C" fn(*mut H5FD_t, hid_t, bool) -> herr_t>,
    pub truncate: Option<unsafe extern "C" fn(*mut H5FD_t, hid_t, bool) -> herr_t>,
    pub lock: Option<unsafe extern "C" fn(*mut H5FD_t, bool) -> herr_t>,
    pub unlock: Option<unsafe extern "C" fn(*mut H5FD_t) -> herr_t>,
    pub del: Option<unsafe extern "C" fn(*const c_char, hid_t) -> herr_t>,
    pub ctl: Option<CtlFn>,
    pub fl_map: [H5FD_mem_t; H5FD_MEM_NTYPES],
}

/// `H5FD_FLMAP_DICHOTOMY`: raw data and global heaps share one free list, metadata another.
pub const FLMAP_DICHOTOMY: [H5FD_mem_t; H5FD_MEM_NTYPES] = [
    H5FD_MEM_SUPER,
    H5FD_MEM_SUPER,
    H5FD_MEM_SUPER,
    H5FD_MEM_DRAW,
    H5FD_MEM_DRAW,
    H5FD_MEM_SUPER,
    H5FD_MEM_SUPER,
];
