//! Shared pieces of the integration tests: where things are, and `program`, an HDF5 program
//! (hdf5-metno and array-io's raw HDF5 layer, HDF5 built from source) that the tests run as a
//! child process, since HDF5 reads `HDF5_DRIVER` only once per process.

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

/// Builds (once per test process) the LD_PRELOAD shim that makes `open` refuse `O_DIRECT`
/// with EINVAL, as file systems without direct I/O do; returns its path.
pub fn refuse_o_direct_shim() -> PathBuf {
    static SHIM: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    SHIM.get_or_init(|| {
        let source = workspace_root().join("tests/shims/refuse_o_direct.c");
        let dir = workspace_root().join("target/test-shims");
        std::fs::create_dir_all(&dir).expect("target/test-shims can be created");
        // Built under a name of this process, then renamed: concurrent test processes never
        // preload a half-written library.
        let partial = dir.join(format!("refuse_o_direct.{}.so", std::process::id()));
        let status =
            std::process::Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
                .args(["-shared", "-fPIC", "-O1", "-o"])
                .arg(&partial)
                .arg(&source)
                .arg("-ldl")
                .status()
                .expect("a C compiler (cc) to build the O_DIRECT shim");
        assert!(status.success(), "building {} failed", source.display());
        let out = dir.join("refuse_o_direct.so");
        std::fs::rename(&partial, &out).expect("the shim can be moved into place");
        out
    })
    .clone()
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
