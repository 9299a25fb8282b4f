//! Shared pieces of array-io's tests: sample data of every element type, raw bytes of arrays,
//! the h5py side's manifest, and child processes (for settings read from the environment, and
//! for device tests, which run on the CUDA/cuFile emulator loaded as libcuda).

#![allow(dead_code)]

use array_io::Element;
use h5gds_tests::emulator::{read_report, Report};
use h5gds_tests::process::{self, output_within, OutputText, TIME_LIMIT};
use ndarray::{ArrayD, IxDyn};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Element types with deterministic sample values covering negatives, extremes and fractions.
pub trait Sample: Element + PartialEq + std::fmt::Debug {
    fn sample(k: u64) -> Self;
}

macro_rules! sample_int {
    ($($t:ty),*) => {$(
        impl Sample for $t {
            fn sample(k: u64) -> Self {
                // Wrapping 64-bit products, truncated: every bit pattern can occur.
                k.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15) as $t
            }
        }
    )*};
}
sample_int!(i8, i16, i32, i64, isize, u8, u16, u32, u64, usize);

impl Sample for f32 {
    fn sample(k: u64) -> Self {
        ((k % 2001) as f32 - 1000.0) / 8.0 + if k % 7 == 0 { 1e30 } else { 0.0 }
    }
}
impl Sample for f64 {
    fn sample(k: u64) -> Self {
        ((k % 2001) as f64 - 1000.0) / 8.0 * if k % 5 == 0 { 1e200 } else { 1.0 }
    }
}
impl Sample for half::f16 {
    fn sample(k: u64) -> Self {
        half::f16::from_f32(((k % 2001) as f32 - 1000.0) / 8.0)
    }
}
impl Sample for bool {
    fn sample(k: u64) -> Self {
        k % 3 == 1
    }
}

/// An array of `shape` filled with samples starting at `seed`.
pub fn sample_array<T: Sample>(shape: &[usize], seed: u64) -> ArrayD<T> {
    let n: usize = shape.iter().product();
    let values = (0..n as u64).map(|k| T::sample(k * 31 + seed)).collect();
    ArrayD::from_shape_vec(IxDyn(shape), values).unwrap()
}

/// The shapes of ranks 0 to 4 the tests use.
pub const SHAPES: [&[usize]; 5] = [&[], &[7], &[3, 5], &[2, 3, 4], &[2, 3, 2, 3]];
/// Arrays with no elements.
pub const EMPTY_SHAPES: [&[usize]; 3] = [&[0], &[3, 0], &[0, 2, 5]];

/// The bytes of an array's elements in row-major order.
pub fn bytes_of<T: Element>(array: &ArrayD<T>) -> Vec<u8> {
    let standard = array.as_standard_layout();
    let elements = standard.as_slice().unwrap();
    // SAFETY: the element types are plain values without padding; reading them as bytes is
    // always defined.
    unsafe {
        std::slice::from_raw_parts(
            elements.as_ptr().cast::<u8>(),
            std::mem::size_of_val(elements),
        )
    }
    .to_vec()
}

/// Calls `$f::<T>($args)` for the element type named like numpy's dtype `$dtype`.
#[macro_export]
macro_rules! for_dtype {
    ($dtype:expr, $f:ident ( $($arg:expr),* )) => {
        match $dtype {
            "int8" => $f::<i8>($($arg),*),
            "int16" => $f::<i16>($($arg),*),
            "int32" => $f::<i32>($($arg),*),
            "int64" => $f::<i64>($($arg),*),
            "uint8" => $f::<u8>($($arg),*),
            "uint16" => $f::<u16>($($arg),*),
            "uint32" => $f::<u32>($($arg),*),
            "uint64" => $f::<u64>($($arg),*),
            "float16" => $f::<half::f16>($($arg),*),
            "float32" => $f::<f32>($($arg),*),
            "float64" => $f::<f64>($($arg),*),
            "bool" => $f::<bool>($($arg),*),
            other => panic!("unknown dtype {other}"),
        }
    };
}

/// numpy's name of each element type (`isize`/`usize` are stored as 64-bit integers).
pub fn dtype_name<T: Element>() -> &'static str {
    match T::NAME {
        "i8" => "int8",
        "i16" => "int16",
        "i32" => "int32",
        "i64" | "isize" => "int64",
        "u8" => "uint8",
        "u16" => "uint16",
        "u32" => "uint32",
        "u64" | "usize" => "uint64",
        "f16" => "float16",
        "f32" => "float32",
        "f64" => "float64",
        "bool" => "bool",
        other => panic!("no dtype for {other}"),
    }
}

/// One line of a manifest: a dataset, its dtype and shape, and the bytes expected of it.
#[derive(Clone, Debug)]
pub struct Entry {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<usize>,
    pub bytes: Vec<u8>,
}

/// The array a manifest entry's bytes hold, as `T`.
pub fn expected<T: Sample>(entry: &Entry) -> ArrayD<T> {
    ArrayD::<T>::from_shape_vec(
        IxDyn(&entry.shape),
        entry
            .bytes
            .chunks_exact(std::mem::size_of::<T>())
            // SAFETY: the bytes are h5py's native-endian values of T.
            .map(|b| unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<T>()) })
            .collect(),
    )
    .unwrap()
}

/// The project's Python with h5py.
pub fn python() -> PathBuf {
    h5gds_tests::python::python()
}

pub fn workspace() -> PathBuf {
    h5gds_tests::workspace_root()
}

/// Runs the h5py side: `h5py_interop.py <command> <dir>`; panics with its output on failure.
pub fn run_h5py(command: &str, dir: &Path) -> String {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/h5py_interop.py");
    let mut cmd = Command::new(python());
    cmd.arg(&script)
        .arg(command)
        .arg(dir)
        .env_remove("HDF5_DRIVER")
        .env_remove("HDF5_PLUGIN_PATH");
    let out = output_within(&mut cmd, TIME_LIMIT);
    let stdout = out.stdout_text();
    assert!(
        out.status.success() && stdout.starts_with("OK"),
        "h5py {command} failed: {:?}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The datasets h5py wrote into `dir` (with `h5py_interop.py write`).
pub fn h5py_manifest(dir: &Path) -> Vec<Entry> {
    let text = std::fs::read_to_string(dir.join("manifest.tsv")).unwrap();
    text.lines()
        .enumerate()
        .map(|(n, line)| {
            let fields: Vec<&str> = line.split('\t').collect();
            Entry {
                name: fields[0].into(),
                dtype: fields[1].into(),
                shape: parse_shape(fields[2]),
                bytes: std::fs::read(dir.join(format!("{n}.bin"))).unwrap(),
            }
        })
        .collect()
}

fn parse_shape(text: &str) -> Vec<usize> {
    if text == "scalar" {
        return Vec::new();
    }
    text.split(',').map(|d| d.parse().unwrap()).collect()
}

/// Writes a manifest for `h5py_interop.py check`: (file name in `dir`, entry) per line.
pub fn write_manifest(dir: &Path, entries: &[(String, Entry)]) {
    let mut text = String::new();
    for (n, (file, e)) in entries.iter().enumerate() {
        let shape = if e.shape.is_empty() {
            "scalar".to_string()
        } else {
            e.shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        text.push_str(&format!("{file}\t{}\t{}\t{shape}\n", e.name, e.dtype));
        std::fs::write(dir.join(format!("{n}.bin")), &e.bytes).unwrap();
    }
    std::fs::write(dir.join("manifest.tsv"), text).unwrap();
}

// ---- child processes ----

/// What a child run produced.
pub struct ChildRun {
    pub out: Output,
    /// The emulator's exit report (empty when not emulated).
    pub report: Report,
}

impl ChildRun {
    pub fn stderr(&self) -> String {
        self.out.stderr_text()
    }
    pub fn stdout(&self) -> String {
        self.out.stdout_text()
    }
    pub fn counter(&self, name: &str) -> u64 {
        self.report.counter(name)
    }
    /// The emulator saw no leak, no out-of-bounds access and no double free.
    #[track_caller]
    pub fn assert_clean(&self) {
        self.report.assert_zero(&[
            "leaked device allocations",
            "leaked pinned host allocations",
            "bounds violations",
            "double frees",
        ]);
    }
}

/// Whether this process is a child running any test.
pub fn is_child_any() -> bool {
    process::is_any_child()
}

/// Runs test `name` of this test binary again in a child process whose environment has no
/// `H5GDS_*`/`HDF5_*` variables but `env`; with `emulated`, the CUDA/cuFile emulator stands in
/// for libcuda and libcufile and its exit report is collected. In the child, runs `body` and
/// returns `None`; in the parent, checks that the child passed and returns what it printed.
pub fn in_child(
    name: &str,
    emulated: bool,
    env: &[(&str, &str)],
    body: impl FnOnce(),
) -> Option<ChildRun> {
    if process::is_child(name) {
        process::in_child(
            name,
            |_| {},
            || {
                open_cufile_first();
                body();
                // Staging buffers idle in the process-wide pool are kept for reuse, never freed
                // at exit; freed here, so that the emulator's leak count names only buffers never
                // given back.
                array_io::release_pinned_buffers();
            },
        );
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("emulator-report.txt");
    let libs = h5gds_tests::emulator::emulator_lib_dir();
    let configure = |cmd: &mut Command| {
        process::clean_env(cmd);
        if emulated {
            libs.configure(cmd);
            cmd.env("H5GDS_EMU_REPORT", &report);
        }
        cmd.current_dir(dir.path()).envs(env.iter().copied());
    };
    let out = process::in_child(name, configure, body)?;
    Some(ChildRun {
        out,
        report: read_report(&report),
    })
}

/// On the emulator (its report requested), opens cuFile before the test's transfers, as
/// `h5gds info` does: the driver opens it in the background at a process's first device transfer
/// and stages transfers until it has opened, so the counters would otherwise tell how far that
/// open had got rather than which path the test's transfers take (the background open has tests
/// of its own in tests/device_paths.rs).
fn open_cufile_first() {
    if std::env::var_os("H5GDS_EMU_REPORT").is_none() {
        return;
    }
    if let Ok(settings) = h5gds::VfdSettings::load(None) {
        let _ = h5gds::cufile_driver(Some(&settings));
    }
}

/// A stream on device 0 (in a child running on the emulator, or on a real GPU).
pub fn stream() -> std::sync::Arc<cudarc::driver::CudaStream> {
    cudarc::driver::CudaContext::new(0)
        .expect("CUDA (the emulator in tests) works")
        .default_stream()
}

// ---- the compressed files of the codec tests (gpu_codec.rs, host_codec.rs) ----

/// The variable through which the parent hands its test directory to the child.
pub const DIR_VAR: &str = "ARRAY_IO_TEST_DIR";

/// The test directory, in a child.
pub fn test_dir() -> PathBuf {
    PathBuf::from(std::env::var(DIR_VAR).expect("the parent passes the test directory"))
}

/// h5py's compressed files (`gpu_codec_files.py`) in a fresh directory (written in the parent
/// only).
pub fn codec_files() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    if !is_child_any() {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/gpu_codec_files.py");
        let out = Command::new(python())
            .arg(&script)
            .arg(dir.path())
            .env_remove("HDF5_DRIVER")
            .env_remove("HDF5_PLUGIN_PATH")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "gpu_codec_files.py failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    dir
}

/// hdf5plugin's directory of filter plugins (they link no libhdf5, so this HDF5 loads them);
/// empty in a child, which gets it from its parent.
pub fn hdf5plugin_dir() -> String {
    if is_child_any() {
        return String::new();
    }
    let out = Command::new(python())
        .args(["-c", "import hdf5plugin; print(hdf5plugin.PLUGIN_PATH)"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "hdf5plugin is installed (scripts/setup.sh)"
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
