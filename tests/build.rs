//! Compiles the C layout probe against the HDF5 headers that hdf5-metno-src built, exports the
//! HDF5 symbols of the test binaries so the plugin can resolve HDF5 calls at run time, as it does
//! inside any program that links HDF5 dynamically, and sets the `real_cuda` cfg from
//! `H5GDS_TEST_REAL_CUDA`.

fn main() {
    let include =
        std::env::var("DEP_HDF5SRC_INCLUDE").expect("hdf5-metno-src exports its include dir");
    cc::Build::new()
        .file("probe/layout_probe.c")
        .include(&include)
        .warnings(true)
        .compile("h5gds_layout_probe");
    println!("cargo::rerun-if-changed=probe/layout_probe.c");
    // The vfd-gds C program (vfd_gds_compat.rs) links HDF5's static library and the zlib it needs
    // (built from source by libz-sys where the system has none: then in DEP_Z_ROOT/lib).
    let root = std::env::var("DEP_HDF5SRC_ROOT").expect("hdf5-metno-src exports its root");
    println!("cargo::rustc-env=H5GDS_TEST_HDF5_ROOT={root}");
    let zlib_dir = std::env::var("DEP_Z_ROOT")
        .map(|root| format!("{root}/lib"))
        .unwrap_or_default();
    println!("cargo::rustc-env=H5GDS_TEST_ZLIB_DIR={zlib_dir}");
    // H5GDS_TEST_REAL_CUDA=1: device tests against the real libcuda/libcufile; the tests that
    // need the emulator are then compiled as ignored (see `REAL_CUDA` in support/lib.rs).
    println!("cargo::rustc-check-cfg=cfg(real_cuda)");
    println!("cargo::rerun-if-env-changed=H5GDS_TEST_REAL_CUDA");
    if std::env::var("H5GDS_TEST_REAL_CUDA").is_ok_and(|v| v == "1") {
        println!("cargo::rustc-cfg=real_cuda");
    }
    println!("cargo::rustc-link-arg-bin=h5prog=-Wl,--export-dynamic");
    println!("cargo::rustc-link-arg-bin=h5devprog=-Wl,--export-dynamic");
    if std::env::var_os("CARGO_FEATURE_MPI").is_some() {
        println!("cargo::rustc-link-arg-bin=h5mpiprog=-Wl,--export-dynamic");
    }
}
