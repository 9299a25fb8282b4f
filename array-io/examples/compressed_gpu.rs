//! Checks the GPU codec path end to end (docs/verifying-on-a-gpu.md): h5py + hdf5plugin
//! write compressed datasets (deflate, Zstandard, LZ4; ranks 1-3, edge, missing, unfiltered and
//! damaged chunks: `tests/gpu_codec_files.py`); each is read into device memory, decoded by
//! nvCOMP, and compared byte for byte with h5py's read; damaged chunks must fail naming the
//! chunk. Then device arrays are written with `to_file_compressed` (encoded by nvCOMP) and h5py
//! checks them. Every check runs whatever the others give (a surprise on one damaged chunk must
//! not hide the writes), each reported on stderr (`ok:` or `FAILED:`); prints
//! `HDF5 COMPRESSED GPU OK` when every check passes, else exits 1 after listing the failures.
//! Refuses to run without nvCOMP (exit 2: the CPU fallback would pass without testing the GPU
//! path).
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

/// Runs `gpu_codec_files.py` with `args` and `dir`; its stdout, or why it failed.
fn script(args: &[&str], dir: &Path) -> Result<String, String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/gpu_codec_files.py");
    let out = std::process::Command::new(python())
        .arg(path)
        .args(args)
        .arg(dir)
        .env_remove("HDF5_DRIVER")
        .env_remove("HDF5_PLUGIN_PATH")
        .output()
        .map_err(|e| format!("running python with h5py and hdf5plugin: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    if !out.status.success() {
        return Err(format!(
            "gpu_codec_files.py {args:?}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(stdout)
}

fn bytes<T: Element>(array: &DeviceArray<T>) -> Result<Vec<u8>, String> {
    let host = array.to_host().map_err(|e| format!("download: {e}"))?;
    let values = host.as_slice().ok_or("the download is not row-major")?;
    // SAFETY: plain element types without padding.
    Ok(unsafe {
        std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
    }
    .to_vec())
}

fn read_bytes<T: Element>(
    path: &Path,
    name: &str,
    stream: &Arc<CudaStream>,
) -> Result<Vec<u8>, String> {
    let array: DeviceArray<T> =
        from_file_to_device(path, name, stream).map_err(|e| e.to_string())?;
    bytes(&array)
}

/// The checks' outcomes, reported as they run.
#[derive(Default)]
struct Checks {
    passed: usize,
    failed: Vec<String>,
}

impl Checks {
    /// Runs one check (a panic in it is a failure too) and reports it on stderr; true if it
    /// passed.
    fn run(&mut self, what: &str, check: impl FnOnce() -> Result<String, String>) -> bool {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(check)).unwrap_or_else(
            |payload| {
                let text = payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "it panicked".into());
                Err(format!("panicked: {text}"))
            },
        );
        match outcome {
            Ok(detail) if detail.is_empty() => eprintln!("ok: {what}"),
            Ok(detail) => eprintln!("ok: {what}: {detail}"),
            Err(why) => {
                eprintln!("FAILED: {what}: {why}");
                self.failed.push(format!("{what}: {why}"));
                return false;
            }
        }
        self.passed += 1;
        true
    }
}

/// A damaged chunk at `chunk` must fail the read of `name` naming that chunk, and only it.
fn refused(
    file: &Path,
    name: &str,
    chunk: &str,
    stream: &Arc<CudaStream>,
) -> Result<String, String> {
    let want: Vec<u64> = chunk
        .split(',')
        .map(|c| {
            c.trim()
                .parse()
                .map_err(|e| format!("chunk {chunk:?}: {e}"))
        })
        .collect::<Result<_, _>>()?;
    let Err(err) = from_file_to_device::<f32>(file, name, stream) else {
        return Err("a damaged chunk read as if intact".into());
    };
    match &err {
        Error::ChunkDecode { chunk: got, .. } if *got == want => Ok(err.to_string()),
        Error::ChunkDecode { chunk: got, .. } => {
            Err(format!("named the chunk at {got:?}, not {want:?}: {err}"))
        }
        _ => Err(format!("failed, but not naming a chunk: {err}")),
    }
}

fn main() {
    if let Err(why) = array_io::gpu_codec_status() {
        eprintln!("nvCOMP is needed for this check: {why}");
        std::process::exit(2);
    }
    // The GPU path is what this checks: decoded on the GPU wherever it can (unset, small reads
    // may be decoded on the host's threads instead). One thread so far, so setting is sound.
    std::env::set_var(array_io::GPU_CODEC_ENV, "1");
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
    // The files every check reads: without them nothing can be checked.
    if let Err(why) = script(&[], &dir) {
        eprintln!("{why}");
        std::process::exit(1);
    }
    let file = dir.join("h5py.h5");
    let mut checks = Checks::default();
    let manifest = std::fs::read_to_string(dir.join("manifest.tsv")).unwrap();
    let mut read = 0;
    for (n, line) in manifest.lines().enumerate() {
        let fields: Vec<&str> = line.split('\t').collect();
        let (name, dtype) = (fields[0], fields[1]);
        let ok = checks.run(&format!("{name} ({dtype}) reads as h5py reads it"), || {
            let got = match dtype {
                "float32" => read_bytes::<f32>(&file, name, &stream),
                "float64" => read_bytes::<f64>(&file, name, &stream),
                "int16" => read_bytes::<i16>(&file, name, &stream),
                "int32" => read_bytes::<i32>(&file, name, &stream),
                "uint8" => read_bytes::<u8>(&file, name, &stream),
                other => Err(format!("unexpected dtype {other}")),
            }?;
            let want = std::fs::read(dir.join(format!("{n}.bin"))).map_err(|e| e.to_string())?;
            if got == want {
                Ok(String::new())
            } else {
                Err("bytes differ from h5py's read".into())
            }
        });
        read += usize::from(ok);
    }
    // Every damaged chunk: each codec's cut-short chunk, and a wrong Fletcher-32, is refused
    // naming it; a wrong deflate Adler-32 or Zstandard content checksum behind intact data is
    // refused by default (the host's check of what nvCOMP does not check), and reads unchecked
    // when opted out (H5GDS_VERIFY_CHECKSUMS=0).
    let damaged = std::fs::read_to_string(dir.join("corrupt.tsv")).unwrap();
    let mut refusals = 0;
    for line in damaged.lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        let (name, chunk, how) = (fields[0], fields[1], fields[2]);
        if how == "adler32" || how == "zstd checksum" {
            let previous = std::env::var_os(array_io::VERIFY_CHECKSUMS_ENV);
            std::env::remove_var(array_io::VERIFY_CHECKSUMS_ENV);
            let ok = checks.run(
                &format!("{name}: by default its wrong {how} is refused naming [{chunk}]"),
                || refused(&file, name, chunk, &stream),
            );
            refusals += usize::from(ok);
            std::env::set_var(array_io::VERIFY_CHECKSUMS_ENV, "0");
            checks.run(
                &format!(
                    "{name}: with {}=0 its wrong {how} at [{chunk}] reads unchecked",
                    array_io::VERIFY_CHECKSUMS_ENV
                ),
                || read_bytes::<f32>(&file, name, &stream).map(|b| format!("{} bytes", b.len())),
            );
            match previous {
                Some(value) => std::env::set_var(array_io::VERIFY_CHECKSUMS_ENV, value),
                None => std::env::remove_var(array_io::VERIFY_CHECKSUMS_ENV),
            }
            continue;
        }
        let ok = checks.run(
            &format!("{name}: its {how} chunk is refused naming [{chunk}]"),
            || refused(&file, name, chunk, &stream),
        );
        refusals += usize::from(ok);
    }
    let host =
        ndarray::Array2::from_shape_fn((300, 70), |(i, j)| ((i * 70 + j) % 997) as f32 / 4.0);
    let device = DeviceArray::from_host(&stream, &host).unwrap();
    let mut lines = String::new();
    let mut written = 0;
    for (compression, filter) in [
        (Compression::Deflate, "1"),
        (Compression::Zstd, "32015"),
        (Compression::Lz4, "32004"),
    ] {
        let name = format!("written-{compression:?}.h5");
        checks.run(
            &format!("{name}: encoded on the GPU, written and read back"),
            || {
                to_file_compressed(&device, dir.join(&name), "/x", &[64, 32], compression)
                    .map_err(|e| format!("writing: {e}"))?;
                let back = read_bytes::<f32>(&dir.join(&name), "/x", &stream)?;
                if back != bytes(&device)? {
                    return Err("read back differs".into());
                }
                // h5py reads the files written (numbered as the manifest lists them).
                std::fs::write(dir.join(format!("{written}.bin")), &back)
                    .map_err(|e| e.to_string())?;
                lines.push_str(&format!("{name}\t/x\tfloat32\t300,70\t{filter}\n"));
                written += 1;
                Ok(String::new())
            },
        );
    }
    std::fs::write(dir.join("manifest.tsv"), lines).unwrap();
    checks.run(&format!("h5py reads the {written} files written"), || {
        let checked = script(&["check"], &dir)?;
        if checked.trim() == format!("OK {written}") {
            Ok(String::new())
        } else {
            Err(format!("h5py's check: {}", checked.trim()))
        }
    });
    if !checks.failed.is_empty() {
        println!(
            "HDF5 COMPRESSED GPU FAILED ({} of {} checks):",
            checks.failed.len(),
            checks.failed.len() + checks.passed
        );
        for failure in &checks.failed {
            println!("  {failure}");
        }
        std::process::exit(1);
    }
    println!(
        "HDF5 COMPRESSED GPU OK ({read} h5py datasets read, {refusals} damaged chunks refused, \
         {written} written; {} checks)",
        checks.passed
    );
}
