//! The project's Python environment (h5py, nvidia-cufile), found from the interpreter rather
//! than from hard-coded `python3.X` or `cuNN` paths.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The project's interpreter: `H5GDS_PYTHON`, else `.venv/bin/python` of the workspace.
pub fn python() -> PathBuf {
    std::env::var_os("H5GDS_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::workspace_root().join(".venv/bin/python"))
}

/// The site-packages directory of `python` (sysconfig's `purelib`), asked of the interpreter.
pub fn site_packages(python: &Path) -> PathBuf {
    let out = Command::new(python)
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ])
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {} (scripts/setup.sh creates it): {e}",
                python.display()
            )
        });
    assert!(
        out.status.success(),
        "{} failed: {}",
        python.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// The directory of the installed nvidia-cufile package's `libcufile.so.0`:
/// `<site-packages>/nvidia/<package>/lib`, whatever the CUDA major (`cu13`, `cufile`, ...).
/// Panics, saying how to install it, if there is none.
pub fn cufile_lib_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let nvidia = site_packages(&python()).join("nvidia");
        find_cufile_lib(&nvidia).unwrap_or_else(|| {
            panic!(
                "no libcufile.so.0 under {}/*/lib: scripts/setup.sh installs nvidia-cufile",
                nvidia.display()
            )
        })
    })
    .clone()
}

/// The `*/lib` directory under `nvidia` that holds `libcufile.so.0`, if any.
pub fn find_cufile_lib(nvidia: &Path) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(nvidia)
        .ok()?
        .filter_map(|entry| Some(entry.ok()?.path().join("lib")))
        .filter(|lib| lib.join("libcufile.so.0").is_file())
        .collect();
    dirs.sort();
    dirs.pop()
}
