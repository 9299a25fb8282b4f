//! Shared pieces of the integration tests of every crate: where things are (`workspace_root`,
//! `plugin_dir`), child processes (`process`), the CUDA/cuFile emulator and its report
//! (`emulator`), test data (`pattern`), the project's Python environment (`python`), whether
//! the run targets a real GPU (`real_cuda`), and the HDF5 programs (hdf5-metno and array-io's raw
//! layer) the tests run as child processes (`program`, `devprog`), since HDF5 reads `HDF5_DRIVER` only once per process.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod devprog;
pub mod emulator;
pub mod nvcomp_emulator;
pub mod pattern;
pub mod process;
pub mod program;
pub mod python;

use std::collections::BTreeMap;
use std::ffi::{c_char, CStr};
use std::path::PathBuf;

/// Whether the device tests run on the machine's real CUDA and cuFile instead of the emulator:
/// `H5GDS_TEST_REAL_CUDA=1` when the tests were compiled. build.rs turns that into the
/// `real_cuda` cfg, under which tests that need the emulator are compiled with
/// `#[ignore = ...]`, so the harness reports them as ignored, never as passed.
pub const REAL_CUDA: bool = cfg!(real_cuda);

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

/// The vfd-gds compatibility library (`libhdf5_vfd_gds.so`, soname `libhdf5_vfd_gds.so.1`):
/// `H5GDS_VFD_GDS_COMPAT_LIB`, else the newest of `target/debug` and `target/release`. The test
/// command builds it (`cargo build --release -p h5gds-vfd-gds-compat`) before the tests run.
pub fn vfd_gds_compat_library() -> PathBuf {
    if let Some(explicit) = std::env::var_os("H5GDS_VFD_GDS_COMPAT_LIB") {
        return PathBuf::from(explicit);
    }
    let target = workspace_root().join("target");
    ["debug", "release"]
        .iter()
        .map(|profile| target.join(profile).join("libhdf5_vfd_gds.so"))
        .filter_map(|path| Some((path.metadata().ok()?.modified().ok()?, path)))
        .max_by_key(|(modified, _)| *modified)
        .map(|(_, path)| path)
        .expect(
            "target/{debug,release}/libhdf5_vfd_gds.so is missing: run \
             `cargo build --release -p h5gds-vfd-gds-compat` first",
        )
}

/// Builds (once per test process) the LD_PRELOAD shim that makes `open` refuse `O_DIRECT`
/// with EINVAL, as file systems without direct I/O do; returns its path.
pub fn refuse_o_direct_shim() -> PathBuf {
    static SHIM: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    SHIM.get_or_init(|| build_shim("refuse_o_direct")).clone()
}

/// Builds (once per test process) the LD_PRELOAD shim that makes `fstatfs` report every
/// regular file and directory as living on NFS; returns its path.
pub fn nfs_statfs_shim() -> PathBuf {
    static SHIM: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    SHIM.get_or_init(|| build_shim("nfs_statfs")).clone()
}

/// Builds (once per test process) the LD_PRELOAD shim of failing storage
/// (`tests/shims/failing_io.c`: the N-th `pread`, `pwrite`, `fsync` or `rename` fails as its
/// `H5GDS_FAULT_*` variables say); returns its path.
pub fn failing_io_shim() -> PathBuf {
    static SHIM: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    SHIM.get_or_init(|| build_shim("failing_io")).clone()
}

/// Compiles `tests/shims/NAME.c` into `target/test-shims/NAME.so`.
fn build_shim(name: &str) -> PathBuf {
    let source = workspace_root().join(format!("tests/shims/{name}.c"));
    let dir = workspace_root().join("target/test-shims");
    std::fs::create_dir_all(&dir).expect("target/test-shims can be created");
    // Built under a name of this process, then renamed: concurrent test processes never
    // preload a half-written library.
    let partial = dir.join(format!("{name}.{}.so", std::process::id()));
    let status = std::process::Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&partial)
        .arg(&source)
        .arg("-ldl")
        .status()
        .expect("a C compiler (cc) to build the test shims");
    assert!(status.success(), "building {} failed", source.display());
    let out = dir.join(format!("{name}.so"));
    std::fs::rename(&partial, &out).expect("the shim can be moved into place");
    out
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
