//! Benchmark (not a test): reads a float32 dataset (1 GiB by default) compressed with deflate,
//! Zstandard and LZ4 (written by h5py + hdf5plugin) into device memory two ways, interleaved:
//! chunks moved compressed file -> GPU through the `gds` driver and decoded there by nvCOMP,
//! against HDF5's CPU filters plus a copy (`H5GDS_GPU_CODEC=0`). Every read is compared byte
//! for byte with the other path's (untimed). Also prints the bytes each path moves across the
//! host-device link: the stored chunks (from the file's chunk index) for nvCOMP, the decoded
//! array for the CPU path.
//!
//! On the emulator (heading EMULATED), the "GPU" is the CPU: the nvCOMP emulator decodes with
//! the same reference codecs HDF5's filters use, so the times compare data movement and
//! per-path overheads on this machine, not GPU codec speed.
//!
//! `cargo run --release -p array-io --example bench_compressed_read [-- --size 1G] [--reps 2]
//! [--codecs gzip,zstd,lz4] [--dir DIR]`; needs `HDF5_PLUGIN_PATH` naming hdf5plugin's plugin
//! directory for the CPU path of Zstandard and LZ4, libnvcomp.so.6 (or the emulators' library
//! directory) on `LD_LIBRARY_PATH`, and on the emulator `H5GDS_EMU_POISON=off`.

use array_io::{from_file_to_device, DeviceArray, GPU_CODEC_ENV};
use cudarc::driver::CudaStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    xs[xs.len() / 2]
}

/// Writes `path` with h5py (+ hdf5plugin): `n` float32 in chunks of 1 Mi elements, values a
/// smooth signal quantised to 1/64 (compressible, as measured fields are). Returns the sum of
/// the stored chunk sizes.
fn write_file(path: &Path, codec: &str, n: usize) -> u64 {
    let script = format!(
        r#"
import h5py, hdf5plugin, numpy as np, sys
n = {n}
opts = {{"gzip": dict(compression="gzip", compression_opts=1), "zstd": dict(hdf5plugin.Zstd()),
        "lz4": dict(hdf5plugin.LZ4())}}["{codec}"]
with h5py.File(sys.argv[1], "w") as f:
    d = f.create_dataset("data", shape=(n,), dtype="f4", chunks=(min(n, 1 << 20),), **opts)
    step = 1 << 24
    for a in range(0, n, step):
        k = np.arange(a, min(n, a + step), dtype=np.float64)
        d[a:a + len(k)] = np.round((np.sin(k / 5000.0) * 100 + (k % 7)) * 64) / 64
    print(sum(d.id.get_chunk_info(i).size for i in range(d.id.get_num_chunks())))
"#
    );
    let python = std::env::var_os("H5GDS_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python"));
    let out = std::process::Command::new(python)
        .args(["-c", &script])
        .arg(path)
        .env_remove("HDF5_PLUGIN_PATH")
        .env_remove("HDF5_DRIVER")
        .output()
        .expect("run python with h5py and hdf5plugin");
    assert!(
        out.status.success(),
        "writing {codec}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

fn download(array: &DeviceArray<f32>) -> Vec<f32> {
    array
        .to_host()
        .expect("download")
        .into_raw_vec_and_offset()
        .0
}

fn read(path: &Path, stream: &Arc<CudaStream>, gpu: bool) -> (f64, DeviceArray<f32>) {
    // SAFETY: single-threaded here; the setting is read when the dataset is opened.
    unsafe { std::env::set_var(GPU_CODEC_ENV, if gpu { "1" } else { "0" }) };
    let start = Instant::now();
    let array = from_file_to_device::<f32>(path, "/data", stream).expect("read");
    (start.elapsed().as_secs_f64(), array)
}

fn main() {
    let (mut size, mut reps) = (1usize << 30, 2usize);
    let mut codecs = vec!["gzip".to_string(), "zstd".into(), "lz4".into()];
    let mut dir = std::env::temp_dir().join(format!("array-io-compressed-{}", std::process::id()));
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{arg} takes a value"));
        match arg.as_str() {
            "--size" => size = h5gds_runtime::size::parse_size(&value()).expect("a size") as usize,
            "--reps" => reps = value().parse().expect("a count"),
            "--codecs" => codecs = value().split(',').map(str::to_string).collect(),
            "--dir" => dir = PathBuf::from(value()),
            other => panic!("unknown argument {other:?}"),
        }
    }
    std::fs::create_dir_all(&dir).unwrap();
    let stream = cudarc::driver::CudaContext::new(0)
        .expect("CUDA (a GPU, or the emulator)")
        .default_stream();
    let label = if h5gds_bench::gpu::is_emulated() {
        "EMULATED (CPU emulator of CUDA, cuFile and nvCOMP; compares data movement, not GPU codec speed)"
    } else {
        "GPU"
    };
    let n = size / 4;
    println!(
        "compressed float32 reads into device memory, {} MiB, {label}",
        size >> 20
    );
    println!("| codec | stored MiB | nvCOMP path | CPU filter + copy | nvCOMP vs CPU | link bytes nvCOMP | link bytes CPU | link ratio |");
    println!("|---|---|---|---|---|---|---|---|");
    for codec in &codecs {
        let path = dir.join(format!("{codec}.h5"));
        let stored = write_file(&path, codec, n);
        let mut times = [Vec::new(), Vec::new()];
        for rep in 0..reps {
            let order = if rep % 2 == 0 {
                [true, false]
            } else {
                [false, true]
            };
            let mut results = Vec::new();
            for gpu in order {
                let (seconds, array) = read(&path, &stream, gpu);
                times[usize::from(!gpu)].push(seconds);
                results.push(download(&array));
            }
            assert!(
                results[0] == results[1],
                "{codec}: the two paths read different data"
            );
        }
        let (g, c) = (median(times[0].clone()), median(times[1].clone()));
        let decoded = (n * 4) as f64;
        println!(
            "| {codec} | {:.1} | {:.0} ms ({:.0} MiB/s) | {:.0} ms ({:.0} MiB/s) | {:.2}x | {:.1} MiB | {:.1} MiB | {:.2}x less |",
            stored as f64 / 1048576.0,
            g * 1e3,
            decoded / g / 1048576.0,
            c * 1e3,
            decoded / c / 1048576.0,
            c / g,
            stored as f64 / 1048576.0,
            decoded / 1048576.0,
            decoded / stored as f64
        );
        std::fs::remove_file(&path).ok();
    }
}
