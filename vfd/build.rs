//! Links the plugin with `-z nodelete`: HDF5 dlcloses plugins at exit, and I/O pool threads may
//! still be finishing then; keeping the code mapped means they never run unmapped instructions.
fn main() {
    println!("cargo::rustc-cdylib-link-arg=-Wl,-z,nodelete");
}
