//! Regenerates cufile-sys/src/bindings.rs: `cargo run -p cufile-bindgen [-- path/to/cufile.h]`.
//! Needs libclang (scripts/setup.sh installs one; set LIBCLANG_PATH to its directory).
#![forbid(unsafe_code)]

fn main() {
    let header = std::env::args()
        .nth(1)
        .map(Into::into)
        .unwrap_or_else(cufile_bindgen::default_header);
    match cufile_bindgen::generate(&header) {
        Ok(text) => {
            let out = cufile_bindgen::bindings_path();
            std::fs::write(&out, text)
                .unwrap_or_else(|e| panic!("cannot write {}: {e}", out.display()));
            println!("wrote {}", out.display());
        }
        Err(err) => {
            eprintln!("{err}");
            std::process::exit(1);
        }
    }
}
