//! The soname vfd-gds's library has (`libhdf5_vfd_gds.so.1`), so programs linked with
//! `-lhdf5_vfd_gds` against this library, and programs linked against vfd-gds, load either; and
//! `-z nodelete`, as the plugin: HDF5 may dlclose it at exit while the driver's I/O threads finish.
fn main() {
    println!("cargo::rustc-cdylib-link-arg=-Wl,-soname,libhdf5_vfd_gds.so.1");
    println!("cargo::rustc-cdylib-link-arg=-Wl,-z,nodelete");
}
