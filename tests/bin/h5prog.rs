//! The C-API test program, linked with its HDF5 symbols exported (as a program using a shared
//! libhdf5 would have them), so the plugin resolves HDF5 calls at run time.
fn main() {
    std::process::exit(h5gds_tests::program::main());
}
