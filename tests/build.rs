//! Compiles the C layout probe against the HDF5 headers that hdf5-metno-src built, and exports the
//! HDF5 symbols of the test binaries so the plugin can resolve HDF5 calls at run time, as it does
//! inside any program that links HDF5 dynamically.

fn main() {
    let include =
        std::env::var("DEP_HDF5SRC_INCLUDE").expect("hdf5-metno-src exports its include dir");
    cc::Build::new()
        .file("probe/layout_probe.c")
        .include(&include)
        .warnings(true)
        .compile("h5gds_layout_probe");
    println!("cargo::rerun-if-changed=probe/layout_probe.c");
    println!("cargo::rustc-link-arg-bin=h5prog=-Wl,--export-dynamic");
    println!("cargo::rustc-link-arg-bin=h5devprog=-Wl,--export-dynamic");
}
