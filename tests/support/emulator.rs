//! The CPU-backed CUDA / cuFile emulator (`emulators/cuda`, built as `libh5gds_emu.so`): where
//! it is, and a directory that makes a child process load it in place of libcuda and
//! libcufile.
//!
//! ```no_run
//! use h5gds_tests::emulator::emulator_lib_dir;
//! use std::process::Command;
//!
//! let libs = emulator_lib_dir();
//! let mut cmd = Command::new("some-gpu-program");
//! libs.configure(&mut cmd); // LD_LIBRARY_PATH=<dir>:$LD_LIBRARY_PATH
//! cmd.env("H5GDS_EMU_GDS", "0"); // switches: see the emulator crate's documentation
//! let status = cmd.status().unwrap();
//! # let _ = status;
//! ```
//!
//! The emulator is not a dependency of this package, so build it first:
//! `cargo build -p h5gds-cuda-emulator`.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

/// The file name cargo gives the emulator library.
pub const EMULATOR_FILE_NAME: &str = "libh5gds_emu.so";

/// The names the emulator stands in for, linked to it in [`emulator_lib_dir`].
pub const LIBRARY_ALIASES: [&str; 4] = [
    "libcuda.so.1",
    "libcuda.so",
    "libcufile.so.0",
    "libcufile.so",
];

/// The CUDA driver's names only, linked in [`emulator_cuda_lib_dir`].
pub const CUDA_ALIASES: [&str; 2] = ["libcuda.so.1", "libcuda.so"];

/// The emulator's switch for a CUDA driver without devices: `cuInit` fails with
/// CUDA_ERROR_NO_DEVICE, as the real driver does on a machine without a GPU. Tests fake "no
/// usable CUDA" with it: an empty `LD_LIBRARY_PATH` does not, on a machine whose NVIDIA
/// driver is found through the system's library cache.
pub const NO_DEVICE: (&str, &str) = ("H5GDS_EMU_DEVICES", "0");

/// The built emulator library: `H5GDS_EMULATOR_LIB` if set, else the newest of
/// `<target>/debug/libh5gds_emu.so` and `<target>/release/libh5gds_emu.so`, where `<target>`
/// is `CARGO_TARGET_DIR` or the workspace's `target`. Panics, saying how to build it, if
/// there is none.
pub fn emulator_library() -> PathBuf {
    if let Some(explicit) = std::env::var_os("H5GDS_EMULATOR_LIB") {
        let path = PathBuf::from(explicit);
        assert!(
            path.is_file(),
            "H5GDS_EMULATOR_LIB={} is not a file",
            path.display()
        );
        return path;
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::workspace_root().join("target"));
    let candidates: Vec<PathBuf> = ["debug", "release"]
        .iter()
        .map(|profile| target.join(profile).join(EMULATOR_FILE_NAME))
        .collect();
    let newest = candidates
        .iter()
        .filter_map(|path| {
            let modified = path.metadata().ok()?.modified().ok()?;
            Some((modified, path))
        })
        .max_by_key(|(modified, _)| *modified)
        .map(|(_, path): (SystemTime, &PathBuf)| path.clone());
    match newest {
        Some(path) => path,
        None => panic!(
            "the CUDA/cuFile emulator library is missing (looked for {}): \
             run `cargo build -p h5gds-cuda-emulator` first",
            candidates
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(" and ")
        ),
    }
}

/// A temporary directory of symlinks named like the real libraries (`libcuda.so.1`,
/// `libcuda.so`, `libcufile.so.0`, `libcufile.so`), all pointing at the emulator. Put it
/// first on a child's `LD_LIBRARY_PATH` (see [`EmulatorLibDir::configure`]). Deleted on drop.
#[derive(Debug)]
pub struct EmulatorLibDir {
    dir: tempfile::TempDir,
    library: PathBuf,
}

impl EmulatorLibDir {
    /// The directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The emulator library the links point at.
    pub fn library(&self) -> &Path {
        &self.library
    }

    /// The directory followed by the current `LD_LIBRARY_PATH`, if any.
    pub fn ld_library_path(&self) -> OsString {
        let mut value = OsString::from(self.path());
        if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|v| !v.is_empty()) {
            value.push(":");
            value.push(old);
        }
        value
    }

    /// Sets `LD_LIBRARY_PATH` of `cmd` so that it loads the emulator as libcuda and libcufile.
    pub fn configure<'a>(&self, cmd: &'a mut Command) -> &'a mut Command {
        cmd.env("LD_LIBRARY_PATH", self.ld_library_path())
    }
}

/// The emulator's switches for the real machine `H5GDS_TEST_EMULATED_MACHINE` names, for the
/// real-GPU build of the device tests (`H5GDS_TEST_REAL_CUDA=1`) run on the emulator; None when
/// unset (on a real GPU). Panics on an unknown name, rather than testing something else.
/// `h200-vm`: the first real-GPU machine, an NVIDIA H200 VM without nvidia-fs, where cuFile
/// opened its driver (in about 0.47 s) but registered no file handle (5027, its virtio disk's
/// attributes unread). Under `compat_mode=auto` the driver does not open cuFile there at all (no
/// nvidia-fs, P2PDMA off), so the open's cost shows only where cuFile is opened anyway
/// (`compat_mode=off`, `h5gds info`).
pub fn emulated_machine() -> Option<Vec<(&'static str, &'static str)>> {
    let name = std::env::var("H5GDS_TEST_EMULATED_MACHINE").ok()?;
    match name.as_str() {
        "h200-vm" => Some(vec![
            ("H5GDS_EMU_GDS", "0"),
            ("H5GDS_EMU_CUFILE_REGISTER_ERROR", "5027"),
            ("H5GDS_EMU_CUFILE_OPEN_MS", "470"),
        ]),
        other => panic!("H5GDS_TEST_EMULATED_MACHINE={other:?}: the emulator models h200-vm"),
    }
}

/// A fresh [`EmulatorLibDir`] for [`emulator_library`], standing in for libcuda and libcufile.
pub fn emulator_lib_dir() -> EmulatorLibDir {
    lib_dir_with(&LIBRARY_ALIASES)
}

/// A fresh [`EmulatorLibDir`] standing in for libcuda only, so that a libcufile later on
/// `LD_LIBRARY_PATH` (the real one) is the one loaded.
pub fn emulator_cuda_lib_dir() -> EmulatorLibDir {
    lib_dir_with(&CUDA_ALIASES)
}

fn lib_dir_with(aliases: &[&str]) -> EmulatorLibDir {
    let library = emulator_library();
    let library = library.canonicalize().unwrap_or(library);
    let dir = tempfile::Builder::new()
        .prefix("h5gds-emu-libs-")
        .tempdir()
        .expect("create a temporary directory for the emulator links");
    for alias in aliases {
        let link = dir.path().join(alias);
        std::os::unix::fs::symlink(&library, &link)
            .unwrap_or_else(|e| panic!("link {} -> {}: {e}", link.display(), library.display()));
    }
    EmulatorLibDir { dir, library }
}

/// The emulator's exit report (`H5GDS_EMU_REPORT=PATH`): each line's name and first number.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report(pub HashMap<String, u64>);

impl Report {
    /// Parses report text: `name: N ...` per line (anything after N ignored).
    pub fn parse(text: &str) -> Report {
        Report(
            text.lines()
                .filter_map(|line| {
                    let (name, rest) = line.split_once(':')?;
                    let value = rest.split_whitespace().next()?.parse().ok()?;
                    Some((name.trim().to_string(), value))
                })
                .collect(),
        )
    }

    /// Whether the report has no counters (no report was written).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The counter `name`; panics, showing the report, if there is none.
    #[track_caller]
    pub fn counter(&self, name: &str) -> u64 {
        *self
            .0
            .get(name)
            .unwrap_or_else(|| panic!("no {name:?} in the emulator report {:?}", self.0))
    }

    /// Asserts that each counter of `names` is 0.
    #[track_caller]
    pub fn assert_zero(&self, names: &[&str]) {
        for name in names {
            assert_eq!(self.counter(name), 0, "{name}: {:?}", self.0);
        }
    }
}

impl std::ops::Index<&str> for Report {
    type Output = u64;
    #[track_caller]
    fn index(&self, name: &str) -> &u64 {
        self.0
            .get(name)
            .unwrap_or_else(|| panic!("no {name:?} in the emulator report {:?}", self.0))
    }
}

/// The report at `path`; empty if the file is missing (the child never wrote one).
pub fn read_report(path: &Path) -> Report {
    Report::parse(&std::fs::read_to_string(path).unwrap_or_default())
}

impl EmulatorLibDir {
    /// As [`EmulatorLibDir::configure`], with [`NO_DEVICE`]: CUDA loads but has no device.
    pub fn configure_without_gpu<'a>(&self, cmd: &'a mut Command) -> &'a mut Command {
        self.configure(cmd).env(NO_DEVICE.0, NO_DEVICE.1)
    }
}

/// The emulator's function `name` where the emulator is the libcuda already loaded in this
/// process (a program run under `emulator_lib_dir`); None where libcuda is not loaded or is not
/// the emulator. Never loads anything.
pub fn loaded_emulator_symbol(name: &std::ffi::CStr) -> Option<*mut std::ffi::c_void> {
    // SAFETY: RTLD_NOLOAD only returns a handle to an already loaded libcuda; a lookup has no side
    // effects; dlclose balances the dlopen, and libcuda stays loaded by whoever loaded it.
    unsafe {
        let handle = libc::dlopen(
            c"libcuda.so.1".as_ptr(),
            libc::RTLD_LAZY | libc::RTLD_NOLOAD,
        );
        if handle.is_null() {
            return None;
        }
        let f = libc::dlsym(handle, name.as_ptr());
        libc::dlclose(handle);
        (!f.is_null()).then_some(f)
    }
}

#[cfg(test)]
mod tests {
    use super::Report;

    #[test]
    fn reports_parse_names_and_first_numbers() {
        let r = Report::parse("leaked device allocations: 2 (bytes 30)\ncopies htod: 5\njunk\n");
        assert_eq!(r.counter("leaked device allocations"), 2);
        assert_eq!(r["copies htod"], 5);
        assert_eq!(r.0.len(), 2);
        r.assert_zero(&[]);
    }
}
