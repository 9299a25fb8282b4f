//! The committed nvcomp-sys bindings are exactly what bindgen makes of the header today.
//! `scripts/setup.sh` installs the header (PyPI nvidia-libnvcomp-cu12 6.0) and libclang, so in
//! this project's test runs the header is always available; elsewhere set NVCOMP_HEADER.

#[test]
fn committed_bindings_match_the_header() {
    let header = nvcomp_bindgen::default_header();
    assert!(
        header.is_file(),
        "{} not found: run scripts/setup.sh, or set NVCOMP_HEADER to an nvcomp.h",
        header.display()
    );
    let fresh = nvcomp_bindgen::generate(&header)
        .expect("bindgen runs (LIBCLANG_PATH names libclang's directory)");
    let committed =
        std::fs::read_to_string(nvcomp_bindgen::bindings_path()).expect("bindings.rs is committed");
    assert!(
        fresh == committed,
        "nvcomp-sys/src/bindings.rs is out of date with {}: run `cargo run -p nvcomp-bindgen`",
        header.display()
    );
}
