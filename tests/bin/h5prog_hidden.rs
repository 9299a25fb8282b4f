//! The same C-API test program, with HDF5 linked statically and its symbols not exported: the
//! plugin cannot reach HDF5 and must fall back to reading `HDF5_DRIVER_CONFIG` itself.
fn main() {
    std::process::exit(h5gds_tests::program::main());
}
