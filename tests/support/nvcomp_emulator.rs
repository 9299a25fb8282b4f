//! The nvCOMP emulator (`emulators/nvcomp`, built as `libh5gds_emu_nvcomp.so`) next to
//! the CUDA/cuFile emulator: a directory where `libnvcomp.so.6` is the nvCOMP emulator and
//! libcuda/libcufile are the CUDA emulator, for a child's `LD_LIBRARY_PATH`.
//!
//! Build both first: `cargo build -p h5gds-cuda-emulator -p h5gds-nvcomp-emulator`.

use crate::emulator::{emulator_lib_dir, emulator_library, EmulatorLibDir};
use std::path::PathBuf;

/// The file name cargo gives the nvCOMP emulator library.
pub const NVCOMP_EMULATOR_FILE_NAME: &str = "libh5gds_emu_nvcomp.so";

/// The name nvcomp-sys loads (nvCOMP 6's soname).
pub const NVCOMP_ALIAS: &str = "libnvcomp.so.6";

/// The built nvCOMP emulator: next to the CUDA emulator [`emulator_library`] found, else in
/// the workspace's other profile (the two libraries meet only through exported symbols).
/// Panics, saying how to build it, if there is none.
pub fn nvcomp_emulator_library() -> PathBuf {
    let beside = emulator_library().with_file_name(NVCOMP_EMULATOR_FILE_NAME);
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::workspace_root().join("target"));
    let candidates = [
        beside,
        target.join("debug").join(NVCOMP_EMULATOR_FILE_NAME),
        target.join("release").join(NVCOMP_EMULATOR_FILE_NAME),
    ];
    match candidates.iter().find(|path| path.is_file()) {
        Some(path) => path.clone(),
        None => panic!(
            "the nvCOMP emulator library is missing (looked for {}): run `cargo build -p \
             h5gds-nvcomp-emulator` first",
            candidates[0].display()
        ),
    }
}

/// A fresh [`EmulatorLibDir`] standing in for libcuda, libcufile and libnvcomp.
pub fn nvcomp_emulator_lib_dir() -> EmulatorLibDir {
    let dir = emulator_lib_dir();
    let library = nvcomp_emulator_library();
    let library = library.canonicalize().unwrap_or(library);
    let link = dir.path().join(NVCOMP_ALIAS);
    std::os::unix::fs::symlink(&library, &link)
        .unwrap_or_else(|e| panic!("link {} -> {}: {e}", link.display(), library.display()));
    dir
}
