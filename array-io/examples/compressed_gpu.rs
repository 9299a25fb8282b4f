//! Checks the GPU codec path end to end (README, "Verifying on a GPU"): h5py + hdf5plugin
//! write compressed datasets (deflate, Zstandard, LZ4; ranks 1-3, edge, missing, unfiltered and
//! damaged chunks: `tests/gpu_codec_files.py`); each is read into device memory, decoded by
//! nvCOMP, and compared byte for byte with h5py's read; damaged chunks must fail naming the
//! chunk. Then device arrays are written with `to_file_compressed` (encoded by nvCOMP) and h5py
//! checks them. Prints `HDF5 COMPRESSED GPU OK` when every check passes; refuses to run without
//! nvCOMP (the CPU fallback would pass without testing the GPU path).
//!
//! `cargo run --release -p array-io --example compressed_gpu [-- --dir DIR]`, with
//! libnvcomp.so.6 on `LD_LIBRARY_PATH`.

use array_io::{from_file_to_device, to_file_compressed, Compression, DeviceArray, Element, Error};
use cudarc::driver::CudaStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn python() -> PathBuf {
    std::env::var_os("H5GDS_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python"))
}

fn script(args: &[&str], dir: &Path) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/gpu_codec_files.py");
    let out = std::process::Command::new(python())
        .arg(path)
        .args(args)
        .arg(dir)
        .env_remove("HDF5_DRIVER")
        .env_remove("HDF5_PLUGIN_PATH")
        .output()
        .expect("run python with h5py and hdf5plugin");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "gpu_codec_files.py {args:?}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn bytes<T: Element>(array: &DeviceArray<T>) -> Vec<u8> {
    let host = array.to_host().expect("download");
    let values = host.as_slice().expect("row-major");
    // SAFETY: plain element types without padding.
    unsafe {
        std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
    }
    .to_vec()
}

fn read_bytes<T: Element>(path: &Path, name: &str, stream: &Arc<CudaStream>) -> Vec<u8> {
    let array: DeviceArray<T> =
        from_file_to_device(path, name, stream).unwrap_or_else(|e| panic!("{name}: {e}"));
    bytes(&array)
}

fn main() {
    if let Err(why) = array_io::gpu_codec_status() {
        eprintln!("nvCOMP is needed for this check: {why}");
        std::process::exit(2);
    }
    let mut dir =
        std::env::temp_dir().join(format!("array-io-compressed-gpu-{}", std::process::id()));
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--dir" => dir = PathBuf::from(it.next().expect("--dir takes a directory")),
            other => panic!("unknown argument {other:?}; usage: compressed_gpu [--dir DIR]"),
        }
    }
    std::fs::create_dir_all(&dir).unwrap();
    let stream = cudarc::driver::CudaContext::new(0)
        .expect("CUDA (device 0)")
        .default_stream();
    script(&[], &dir);
    let file = dir.join("h5py.h5");
    let manifest = std::fs::read_to_string(dir.join("manifest.tsv")).unwrap();
    let mut read = 0;
    for (n, line) in manifest.lines().enumerate() {
        let fields: Vec<&str> = line.split('\t').collect();
        let (name, dtype) = (fields[0], fields[1]);
        let got = match dtype {
            "float32" => read_bytes::<f32>(&file, name, &stream),
            "float64" => read_bytes::<f64>(&file, name, &stream),
            "int16" => read_bytes::<i16>(&file, name, &stream),
            "int32" => read_bytes::<i32>(&file, name, &stream),
            "uint8" => read_bytes::<u8>(&file, name, &stream),
            other => panic!("{name}: unexpected dtype {other}"),
        };
        let want = std::fs::read(dir.join(format!("{n}.bin"))).unwrap();
        assert!(got == want, "{name}: bytes differ from h5py's read");
        read += 1;
    }
    let damaged = std::fs::read_to_string(dir.join("corrupt.tsv")).unwrap();
    for line in damaged.lines().filter(|l| l.ends_with("truncated")) {
        let name = line.split('\t').next().unwrap();
        match from_file_to_device::<f32>(&file, name, &stream) {
            Err(Error::ChunkDecode { chunk, .. }) => assert_eq!(chunk, [25], "{name}"),
            other => panic!("{name}: a damaged chunk gave {other:?}"),
        }
    }
    let host =
        ndarray::Array2::from_shape_fn((300, 70), |(i, j)| ((i * 70 + j) % 997) as f32 / 4.0);
    let device = DeviceArray::from_host(&stream, &host).unwrap();
    let mut lines = String::new();
    for (n, (compression, filter)) in [
        (Compression::Deflate, "1"),
        (Compression::Zstd, "32015"),
        (Compression::Lz4, "32004"),
    ]
    .into_iter()
    .enumerate()
    {
        let name = format!("written-{compression:?}.h5");
        to_file_compressed(&device, dir.join(&name), "/x", &[64, 32], compression).unwrap();
        let back = read_bytes::<f32>(&dir.join(&name), "/x", &stream);
        assert!(back == bytes(&device), "{name}: read back differs");
        std::fs::write(dir.join(format!("{n}.bin")), &back).unwrap();
        lines.push_str(&format!("{name}\t/x\tfloat32\t300,70\t{filter}\n"));
    }
    std::fs::write(dir.join("manifest.tsv"), lines).unwrap();
    let checked = script(&["check"], &dir);
    assert_eq!(checked.trim(), "OK 3", "h5py's check");
    println!(
        "HDF5 COMPRESSED GPU OK ({read} h5py datasets read, 3 damaged chunks refused, 3 written)"
    );
}
