//! Checks the hand-written HDF5 ABI in `vfd/src/abi.rs` against a C probe compiled with the real
//! HDF5 headers (those hdf5-metno-src builds): every struct size, field offset and constant.

use h5gds::abi::*;
use h5gds_tests::c_abi_layout;
use std::mem::{offset_of, size_of};

fn rust_layout() -> Vec<(&'static str, usize)> {
    vec![
        ("H5FD_class_t.size", size_of::<H5FD_class_t>()),
        ("H5FD_class_t.version", offset_of!(H5FD_class_t, version)),
        ("H5FD_class_t.value", offset_of!(H5FD_class_t, value)),
        ("H5FD_class_t.name", offset_of!(H5FD_class_t, name)),
        ("H5FD_class_t.maxaddr", offset_of!(H5FD_class_t, maxaddr)),
        (
            "H5FD_class_t.fc_degree",
            offset_of!(H5FD_class_t, fc_degree),
        ),
        (
            "H5FD_class_t.terminate",
            offset_of!(H5FD_class_t, terminate),
        ),
        ("H5FD_class_t.sb_size", offset_of!(H5FD_class_t, sb_size)),
        (
            "H5FD_class_t.sb_encode",
            offset_of!(H5FD_class_t, sb_encode),
        ),
        (
            "H5FD_class_t.sb_decode",
            offset_of!(H5FD_class_t, sb_decode),
        ),
        (
            "H5FD_class_t.fapl_size",
            offset_of!(H5FD_class_t, fapl_size),
        ),
        ("H5FD_class_t.fapl_get", offset_of!(H5FD_class_t, fapl_get)),
        (
            "H5FD_class_t.fapl_copy",
            offset_of!(H5FD_class_t, fapl_copy),
        ),
        (
            "H5FD_class_t.fapl_free",
            offset_of!(H5FD_class_t, fapl_free),
        ),
        (
            "H5FD_class_t.dxpl_size",
            offset_of!(H5FD_class_t, dxpl_size),
        ),
        (
            "H5FD_class_t.dxpl_copy",
            offset_of!(H5FD_class_t, dxpl_copy),
        ),
        (
            "H5FD_class_t.dxpl_free",
            offset_of!(H5FD_class_t, dxpl_free),
        ),
        ("H5FD_class_t.open", offset_of!(H5FD_class_t, open)),
        ("H5FD_class_t.close", offset_of!(H5FD_class_t, close)),
        ("H5FD_class_t.cmp", offset_of!(H5FD_class_t, cmp)),
        ("H5FD_class_t.query", offset_of!(H5FD_class_t, query)),
        (
            "H5FD_class_t.get_type_map",
            offset_of!(H5FD_class_t, get_type_map),
        ),
        ("H5FD_class_t.alloc", offset_of!(H5FD_class_t, alloc)),
        ("H5FD_class_t.free", offset_of!(H5FD_class_t, free)),
        ("H5FD_class_t.get_eoa", offset_of!(H5FD_class_t, get_eoa)),
        ("H5FD_class_t.set_eoa", offset_of!(H5FD_class_t, set_eoa)),
        ("H5FD_class_t.get_eof", offset_of!(H5FD_class_t, get_eof)),
        (
            "H5FD_class_t.get_handle",
            offset_of!(H5FD_class_t, get_handle),
        ),
        ("H5FD_class_t.read", offset_of!(H5FD_class_t, read)),
        ("H5FD_class_t.write", offset_of!(H5FD_class_t, write)),
        (
            "H5FD_class_t.read_vector",
            offset_of!(H5FD_class_t, read_vector),
        ),
        (
            "H5FD_class_t.write_vector",
            offset_of!(H5FD_class_t, write_vector),
        ),
        (
            "H5FD_class_t.read_selection",
            offset_of!(H5FD_class_t, read_selection),
        ),
        (
            "H5FD_class_t.write_selection",
            offset_of!(H5FD_class_t, write_selection),
        ),
        ("H5FD_class_t.flush", offset_of!(H5FD_class_t, flush)),
        ("H5FD_class_t.truncate", offset_of!(H5FD_class_t, truncate)),
        ("H5FD_class_t.lock", offset_of!(H5FD_class_t, lock)),
        ("H5FD_class_t.unlock", offset_of!(H5FD_class_t, unlock)),
        ("H5FD_class_t.del", offset_of!(H5FD_class_t, del)),
        ("H5FD_class_t.ctl", offset_of!(H5FD_class_t, ctl)),
        ("H5FD_class_t.fl_map", offset_of!(H5FD_class_t, fl_map)),
        ("H5FD_t.size", size_of::<H5FD_t>()),
        ("H5FD_t.driver_id", offset_of!(H5FD_t, driver_id)),
        ("H5FD_t.cls", offset_of!(H5FD_t, cls)),
        ("H5FD_t.fileno", offset_of!(H5FD_t, fileno)),
        ("H5FD_t.access_flags", offset_of!(H5FD_t, access_flags)),
        ("H5FD_t.feature_flags", offset_of!(H5FD_t, feature_flags)),
        ("H5FD_t.maxaddr", offset_of!(H5FD_t, maxaddr)),
        ("H5FD_t.base_addr", offset_of!(H5FD_t, base_addr)),
        ("H5FD_t.threshold", offset_of!(H5FD_t, threshold)),
        ("H5FD_t.alignment", offset_of!(H5FD_t, alignment)),
        ("H5FD_t.paged_aggr", offset_of!(H5FD_t, paged_aggr)),
        ("sizeof(hid_t)", size_of::<hid_t>()),
        ("sizeof(haddr_t)", size_of::<haddr_t>()),
        ("sizeof(H5FD_mem_t)", size_of::<H5FD_mem_t>()),
        ("H5FD_MEM_NOLIST+1", (H5FD_MEM_NOLIST + 1) as usize),
        ("H5FD_CLASS_VERSION", H5FD_CLASS_VERSION as usize),
        ("H5PL_TYPE_VFD", H5PL_TYPE_VFD as usize),
        ("H5F_CLOSE_WEAK", H5F_CLOSE_WEAK as usize),
        ("H5F_ACC_RDWR", H5F_ACC_RDWR as usize),
        ("H5F_ACC_TRUNC", H5F_ACC_TRUNC as usize),
        ("H5F_ACC_EXCL", H5F_ACC_EXCL as usize),
        ("H5F_ACC_CREAT", H5F_ACC_CREAT as usize),
        ("H5FD_MEM_DEFAULT", H5FD_MEM_DEFAULT as usize),
        ("H5FD_MEM_SUPER", H5FD_MEM_SUPER as usize),
        ("H5FD_MEM_DRAW", H5FD_MEM_DRAW as usize),
        ("H5FD_MEM_NTYPES", H5FD_MEM_NTYPES),
        (
            "H5FD_FEAT_AGGREGATE_METADATA",
            H5FD_FEAT_AGGREGATE_METADATA as usize,
        ),
        (
            "H5FD_FEAT_ACCUMULATE_METADATA",
            H5FD_FEAT_ACCUMULATE_METADATA as usize,
        ),
        ("H5FD_FEAT_DATA_SIEVE", H5FD_FEAT_DATA_SIEVE as usize),
        (
            "H5FD_FEAT_AGGREGATE_SMALLDATA",
            H5FD_FEAT_AGGREGATE_SMALLDATA as usize,
        ),
        (
            "H5FD_FEAT_POSIX_COMPAT_HANDLE",
            H5FD_FEAT_POSIX_COMPAT_HANDLE as usize,
        ),
        (
            "H5FD_FEAT_SUPPORTS_SWMR_IO",
            H5FD_FEAT_SUPPORTS_SWMR_IO as usize,
        ),
        (
            "H5FD_FEAT_DEFAULT_VFD_COMPATIBLE",
            H5FD_FEAT_DEFAULT_VFD_COMPATIBLE as usize,
        ),
        ("H5FD_FEAT_MEMMANAGE", H5FD_FEAT_MEMMANAGE as usize),
        ("H5FD_CTL_TEST_OPCODE", H5FD_CTL_TEST_OPCODE as usize),
        ("H5FD_CTL_MEM_ALLOC", H5FD_CTL_MEM_ALLOC as usize),
        ("H5FD_CTL_MEM_FREE", H5FD_CTL_MEM_FREE as usize),
        ("H5FD_CTL_MEM_COPY", H5FD_CTL_MEM_COPY as usize),
        (
            "H5FD_CTL_FAIL_IF_UNKNOWN_FLAG",
            H5FD_CTL_FAIL_IF_UNKNOWN_FLAG as usize,
        ),
        (
            "H5FD_CTL_ROUTE_TO_TERMINAL_VFD_FLAG",
            H5FD_CTL_ROUTE_TO_TERMINAL_VFD_FLAG as usize,
        ),
        ("H5S_MAX_RANK", H5S_MAX_RANK),
        ("H5S_SEL_NONE", H5S_SEL_NONE as usize),
        ("H5S_SEL_HYPERSLABS", H5S_SEL_HYPERSLABS as usize),
        ("H5S_SEL_ALL", H5S_SEL_ALL as usize),
    ]
}

#[test]
fn every_size_offset_and_constant_matches_the_c_headers() {
    let c = c_abi_layout();
    let rust = rust_layout();
    assert_eq!(c.len(), rust.len(), "probe and Rust list different entries");
    let mismatches: Vec<String> = rust
        .iter()
        .filter_map(|(name, value)| match c.get(*name) {
            Some(expected) if expected == value => None,
            Some(expected) => Some(format!("{name}: C says {expected}, Rust has {value}")),
            None => Some(format!("{name}: missing from the C probe")),
        })
        .collect();
    assert!(
        mismatches.is_empty(),
        "ABI mismatches:\n{}",
        mismatches.join("\n")
    );
}

#[test]
fn documented_sizes_on_x86_64() {
    // docs/driver.md ("Inside the driver", `abi`): 336 and 80 bytes on x86-64, HDF5 1.14.4+, 2.x.
    if cfg!(target_arch = "x86_64") {
        assert_eq!(size_of::<H5FD_class_t>(), 336);
        assert_eq!(size_of::<H5FD_t>(), 80);
    }
}
