//! The committed cufile-sys bindings are exactly what bindgen makes of the header today.
//! `scripts/setup.sh` installs the header (PyPI nvidia-cufile 1.20) and libclang, so in this
//! project's test runs the header is always available; elsewhere set CUFILE_HEADER.

#[test]
fn committed_bindings_match_the_header() {
    let header = cufile_bindgen::default_header();
    assert!(
        header.is_file(),
        "{} not found: run scripts/setup.sh, or set CUFILE_HEADER to a cufile.h",
        header.display()
    );
    let fresh = cufile_bindgen::generate(&header)
        .expect("bindgen runs (LIBCLANG_PATH names libclang's directory)");
    let committed =
        std::fs::read_to_string(cufile_bindgen::bindings_path()).expect("bindings.rs is committed");
    assert!(
        fresh == committed,
        "cufile-sys/src/bindings.rs is out of date with {}: run `cargo run -p cufile-bindgen`",
        header.display()
    );
}
