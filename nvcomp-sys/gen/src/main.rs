//! Regenerates nvcomp-sys/src/bindings.rs: `cargo run -p nvcomp-bindgen [-- path/to/nvcomp.h]`.
//! Needs libclang (scripts/setup.sh installs one; set LIBCLANG_PATH to its directory).
#![forbid(unsafe_code)]

fn main() {
    let header = std::env::args()
        .nth(1)
        .map(Into::into)
        .unwrap_or_else(nvcomp_bindgen::default_header);
    match nvcomp_bindgen::generate(&header) {
        Ok(text) => {
            let out = nvcomp_bindgen::bindings_path();
            if let Err(e) = std::fs::write(&out, text) {
                eprintln!("cannot write {}: {e}", out.display());
                std::process::exit(1);
            }
            println!("wrote {}", out.display());
        }
        Err(err) => {
            eprintln!("{err}");
            std::process::exit(1);
        }
    }
}
