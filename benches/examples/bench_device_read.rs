//! Benchmark (not a test): reads a 1 GiB and a 4 GiB float32 dataset into device memory through
//! the `gds` driver (`H5GDS_USE_VFD_GDS=1`) and through the staged path (`=0`: sec2 into a host
//! staging buffer of `H5GDS_STAGING_BUFFER_SIZE`, default 128M, then copied), interleaved over a
//! few repetitions. Every read is verified (untimed). Prints medians and the ratio; the heading
//! says EMULATED when the libcuda in the process is h5gds's CPU emulator, whose figures compare
//! the paths' overheads and are not GPU results.
//!
//! `cargo run --release -p h5gds-bench --example bench_device_read [-- --sizes 1G,4G] [--reps 3]
//! [--dir DIR]`; on the emulator, put its library directory first on `LD_LIBRARY_PATH` and set
//! `H5GDS_EMU_POISON=off` (so allocations are not filled with a poison byte). Where
//! `H5GDS_BENCH_RECORDS` names a file, each median is also appended to it as a JSON line, as the
//! Python benchmarks do (scripts/gpu_report.py reads them).
//!
//! `bench_device_read --timed host|device` is array-io's side of `benches/from_file_pair.py`
//! (issue 42: array-io's `from_file` against `h5gds.from_file`), here so that the binary
//! scripts/gpu-pack.sh already carries serves it: see [`timed`].

use array_io::{
    from_file, from_file_to_device, from_file_to_device_with, to_file, DeviceArray, DevicePath,
    ReadOptions,
};
use cudarc::driver::CudaStream;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// The value of element `k`: exact in f32, and different for neighbours.
fn value(k: usize) -> f32 {
    (k % 16_777_213) as f32
}

/// Checks device memory against `value`, 64 MiB at a time.
fn verify(array: &DeviceArray<f32>, stream: &Arc<CudaStream>) {
    let data = array.as_slice().expect("not empty");
    let piece = 16 << 20; // elements
    let mut host = vec![0f32; piece];
    let mut start = 0;
    while start < data.len() {
        let end = data.len().min(start + piece);
        let view = data.slice(start..end);
        stream
            .memcpy_dtoh(&view, &mut host[..end - start])
            .expect("download");
        stream.synchronize().expect("synchronize");
        for (i, v) in host[..end - start].iter().enumerate() {
            assert_eq!(*v, value(start + i), "element {} differs", start + i);
        }
        start = end;
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

/// Appends one median to the JSON-lines file `H5GDS_BENCH_RECORDS` names, if any.
fn record(path: &str, bytes: usize, seconds: f64, emulated: bool) {
    let Some(target) = std::env::var_os("H5GDS_BENCH_RECORDS") else {
        return;
    };
    let line = serde_json::json!({
        "bench": "bench_device_read",
        "alternative": format!("array-io from_file_to_device, {path}"),
        "role": path,
        "case": format!("{} MiB", bytes >> 20),
        "seconds": seconds,
        "gbps": bytes as f64 / seconds / 1e9,
        "bytes": bytes,
        "emulated": emulated,
    });
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&target)
        .unwrap_or_else(|e| panic!("cannot open H5GDS_BENCH_RECORDS {target:?}: {e}"));
    std::io::Write::write_all(&mut file, format!("{line}\n").as_bytes())
        .unwrap_or_else(|e| panic!("cannot append to {target:?}: {e}"));
}

fn parse_size(text: &str) -> usize {
    h5gds_runtime::size::parse_size(text).unwrap_or_else(|| panic!("bad size {text:?}")) as usize
}

fn bench(path: &Path, bytes: usize, reps: usize, stream: &Arc<CudaStream>) -> (f64, f64) {
    let n = bytes / 4;
    let data = ndarray::Array1::from_shape_fn(n, value);
    to_file(&data, path, "/data").expect("write the dataset");
    drop(data);
    let mut times = [Vec::new(), Vec::new()];
    for rep in 0..reps {
        // Alternate which path goes first, so neither always meets a warmer cache.
        let order = if rep % 2 == 0 { [0, 1] } else { [1, 0] };
        for which in order {
            let mode = [DevicePath::Gds, DevicePath::Staged][which];
            let options = ReadOptions::new().device_path(mode);
            let start = Instant::now();
            let array = from_file_to_device_with::<f32>(path, "/data", stream, &options)
                .expect("read into device memory");
            let seconds = start.elapsed().as_secs_f64();
            verify(&array, stream);
            times[which].push(seconds);
            println!(
                "    rep {rep}: {:<6} {:8.1} ms",
                ["gds", "staged"][which],
                seconds * 1e3
            );
        }
    }
    std::fs::remove_file(path).ok();
    (median(times[0].clone()), median(times[1].clone()))
}

/// `--timed host|device`: array-io's reads for `benches/from_file_pair.py`, which times
/// `h5gds.from_file` on the same datasets in its own process, in turns with this one, and reports
/// the ratio. One process serves the whole run, as one Python process does (neither pays its start,
/// nor CUDA's or cuFile's set-up, more than once). Requests come on standard input, one a line:
/// `PATH<TAB>DATASET<TAB>REPS`. For each, the float32 dataset is read whole once untimed (the
/// file's first read, as the Python side's), then `REPS` times, each timed from the call to the
/// array's release (the Python side's time, too, includes freeing its array), device reads up to
/// the stream's synchronize; the seconds come back as one line, separated by spaces. Every timed
/// read is checked against the untimed one's element count. Device reads go to device 0's default
/// stream; host reads never touch CUDA.
fn timed(target: &str) -> Result<(), String> {
    let stream = match target {
        "host" => None,
        "device" => Some(
            cudarc::driver::CudaContext::new(0)
                .map_err(|e| format!("no CUDA device: {e}"))?
                .default_stream(),
        ),
        other => return Err(format!("the target is host or device, not {other:?}")),
    };
    // One read, the array released before returning: its element count.
    let read = |path: &str, dataset: &str| -> Result<usize, String> {
        let failed = |e: array_io::Error| format!("reading {dataset} of {path}: {e}");
        match &stream {
            None => Ok(from_file::<f32>(path, dataset).map_err(failed)?.len()),
            Some(stream) => {
                let array =
                    from_file_to_device::<f32>(path, dataset, stream.clone()).map_err(failed)?;
                stream
                    .synchronize()
                    .map_err(|e| format!("synchronize: {e}"))?;
                Ok(array.len())
            }
        }
    };
    let mut out = std::io::stdout().lock();
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| format!("reading a request: {e}"))?;
        let fields: Vec<&str> = line.split('\t').collect();
        let [path, dataset, reps] = fields[..] else {
            return Err(format!(
                "a request is PATH<TAB>DATASET<TAB>REPS, not {line:?}"
            ));
        };
        let reps: usize = reps
            .parse()
            .map_err(|_| format!("REPS is a whole number, not {reps:?}"))?;
        let expected = read(path, dataset)?;
        let mut seconds = Vec::with_capacity(reps);
        for _ in 0..reps {
            let start = Instant::now();
            let elements = read(path, dataset)?;
            seconds.push(start.elapsed().as_secs_f64().to_string());
            if elements != expected {
                return Err(format!(
                    "read {elements} elements of {dataset}, not {expected}"
                ));
            }
        }
        writeln!(out, "{}", seconds.join(" ")).map_err(|e| format!("answering: {e}"))?;
        out.flush().map_err(|e| format!("answering: {e}"))?;
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().is_some_and(|a| a == "--timed") {
        let [_, target] = args.as_slice() else {
            eprintln!("usage: bench_device_read --timed host|device (requests on standard input)");
            std::process::exit(2);
        };
        if let Err(message) = timed(target) {
            eprintln!("bench_device_read --timed: {message}");
            std::process::exit(1);
        }
        return;
    }
    let mut sizes = vec![1usize << 30, 4 << 30];
    let mut reps = 3;
    let mut dir = std::env::temp_dir();
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--sizes" => sizes = it.next().unwrap().split(',').map(parse_size).collect(),
            "--reps" => reps = it.next().unwrap().parse().expect("--reps N"),
            "--dir" => dir = PathBuf::from(it.next().unwrap()),
            other => panic!("unknown argument {other:?}"),
        }
    }
    let ctx = cudarc::driver::CudaContext::new(0).expect("CUDA (a GPU, or the emulator)");
    let stream = ctx.default_stream();
    let staging = array_io::Settings::default()
        .staging_buffer_size()
        .expect("valid H5GDS_STAGING_BUFFER_SIZE");
    let emulated = h5gds_bench::gpu::is_emulated();
    if emulated {
        println!(
            "device read benchmark -- EMULATED: the CPU emulator stands in for the GPU; these \
             figures compare the two paths' overheads and are not GPU results"
        );
    } else {
        println!(
            "device read benchmark -- GPU: {}",
            ctx.name().unwrap_or_default()
        );
    }
    println!(
        "float32 datasets, {reps} interleaved repetitions, staged path through a {} MiB buffer",
        staging >> 20
    );
    let mut rows = Vec::new();
    for &bytes in &sizes {
        println!("  {} MiB:", bytes >> 20);
        let path = dir.join(format!(
            "array-io-bench-{}-{}.h5",
            std::process::id(),
            bytes
        ));
        let (gds, staged) = bench(&path, bytes, reps, &stream);
        rows.push((bytes, gds, staged));
    }
    println!("\n| size | gds (H5GDS_USE_VFD_GDS=1) | staged (=0) | gds vs staged |");
    println!("|---|---|---|---|");
    for (bytes, gds, staged) in rows {
        record("gds", bytes, gds, emulated);
        record("staged", bytes, staged, emulated);
        let mib = (bytes >> 20) as f64;
        println!(
            "| {} MiB | {:.0} ms, {:.0} MiB/s | {:.0} ms, {:.0} MiB/s | {:.2}x |",
            bytes >> 20,
            gds * 1e3,
            mib / gds,
            staged * 1e3,
            mib / staged,
            staged / gds
        );
    }
}
