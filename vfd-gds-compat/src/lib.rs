//! `libhdf5_vfd_gds.so.1`: the public API of vfd-gds, the HDF Group's GPUDirect Storage driver
//! (`H5FDgds.h`, shipped beside this crate in `include/`), on h5gds's driver, which this library
//! carries. A program built against vfd-gds (`-lhdf5_vfd_gds`), or Legate's `liblegate.so`, which
//! links the copy of vfd-gds its wheel bundles, runs on h5gds with this library in that one's
//! place (`LD_PRELOAD`, or the file replaced): see docs/legate-and-vfd-gds.md.
//!
//! It links no libhdf5: each call works on the HDF5 copy its caller uses (`h5gds::vfd_gds_api`).
//! It is also an HDF5 plugin (`H5PLget_plugin_type`, `H5PLget_plugin_info`, from the driver), as
//! vfd-gds's library is. Where vfd-gds fails (no cuFile, no GPU, no GDS) this works as h5gds
//! does: host I/O, device transfers staged, never an abort.
#![deny(unsafe_op_in_unsafe_fn)]

use h5gds::abi::{herr_t, hid_t};
use h5gds::vfd_gds_api;

/// `hid_t H5FD_gds_init(void)`: the `gds` driver's id in the caller's HDF5 (h5gds's class,
/// registered there on first use); -1 on failure.
#[no_mangle]
pub extern "C" fn H5FD_gds_init() -> hid_t {
    vfd_gds_api::gds_init()
}

/// `herr_t H5Pset_fapl_gds(hid_t fapl_id, size_t alignment, size_t block_size, size_t
/// cbuf_size)`: the `gds` driver on the file access list. A 0 takes vfd-gds's default; the copy
/// buffer size, a multiple of the block size, becomes h5gds's `bounce_buffer_size`.
#[no_mangle]
pub extern "C" fn H5Pset_fapl_gds(
    fapl_id: hid_t,
    alignment: usize,
    block_size: usize,
    cbuf_size: usize,
) -> herr_t {
    vfd_gds_api::set_fapl_gds(fapl_id, alignment, block_size, cbuf_size)
}

/// `herr_t H5Pget_fapl_gds(hid_t fapl_id, size_t *boundary, size_t *block_size, size_t
/// *cbuf_size)`: the sizes the list carries (vfd-gds's defaults where none were given); a null
/// out-pointer is skipped, as in vfd-gds.
///
/// # Safety
/// Each out-pointer must be null or point to a writable `size_t`.
#[no_mangle]
pub unsafe extern "C" fn H5Pget_fapl_gds(
    fapl_id: hid_t,
    boundary: *mut usize,
    block_size: *mut usize,
    cbuf_size: *mut usize,
) -> herr_t {
    let Some(sizes) = vfd_gds_api::get_fapl_gds(fapl_id) else {
        return -1;
    };
    for (out, size) in [boundary, block_size, cbuf_size].into_iter().zip(sizes) {
        if !out.is_null() {
            // SAFETY: the caller's contract: a non-null out-pointer is a writable size_t.
            unsafe { *out = size };
        }
    }
    0
}
