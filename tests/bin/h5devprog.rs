//! The device-memory test program (see `h5gds_tests::devprog`).
fn main() {
    std::process::exit(h5gds_tests::devprog::main());
}
