//! The tool links HDF5 statically; exporting its symbols lets the `gds` plugin it loads find
//! HDF5's API at run time (error stack, config strings, and the dataspace calls behind selection
//! I/O), as it does in h5py and in any program linking a shared libhdf5.
fn main() {
    println!("cargo::rustc-link-arg-bin=h5gds=-Wl,--export-dynamic");
}
