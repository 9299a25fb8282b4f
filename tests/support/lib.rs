//! Shared pieces of the integration tests: where things are, and `program`, an HDF5 program
//! written against the C API (through hdf5-metno-sys, HDF5 built from source) that the tests run
//! as a child process, since HDF5 reads `HDF5_DRIVER` only once per process.

pub mod devprog;
pub mod emulator;
pub mod program;

use std::collections::BTreeMap;
use std::ffi::{c_char, CStr};
use std::path::PathBuf;

/// The workspace root (the directory holding the top-level Cargo.toml).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The directory holding `libh5gds.so`: `H5GDS_PLUGIN_DIR`, else `target/release`.
/// The test command builds it (`cargo build --release -p h5gds-vfd`) before the tests run.
pub fn plugin_dir() -> PathBuf {
    let dir = std::env::var_os("H5GDS_PLUGIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target/release"));
    assert!(
        dir.join("libh5gds.so").is_file(),
        "{}/libh5gds.so is missing: run `cargo build --release -p h5gds-vfd` first",
        dir.display()
    );
    dir
}

#[repr(C)]
struct ProbeEntry {
    name: *const c_char,
    value: usize,
}

extern "C" {
    /// From probe/layout_probe.c, compiled against the HDF5 headers by build.rs.
    static h5gds_probe_table: [ProbeEntry; 0];
}

/// Sizes, field offsets and constants of the HDF5 VFD ABI as the C compiler sees them.
pub fn c_abi_layout() -> BTreeMap<String, usize> {
    let mut map = BTreeMap::new();
    // SAFETY: the table is a static array terminated by an entry with a null name.
    unsafe {
        let mut entry = h5gds_probe_table.as_ptr();
        while !(*entry).name.is_null() {
            let name = CStr::from_ptr((*entry).name).to_string_lossy().into_owned();
            map.insert(name, (*entry).value);
            entry = entry.add(1);
        }
    }
    map
}
