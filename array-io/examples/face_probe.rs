//! One scenario of the face-parity test (`python/tests/test_face_parity.py`) run through array-io:
//! `face_probe OP PATH DATASET [ARG]`, `f64` elements, printing one JSON line on stdout: the bytes
//! read (hex) or `{"ok": false, "kind": <array_io::Error's variant>, "message": ...}`. The
//! engine's verdict lines go to stderr (`H5GDS_LOG=debug`), where the test reads them.
//!
//! OP: `read` (`from_file`), `slab` (the first block of `from_file_batched`, ARG its shape: `4,6`),
//! `gather` (`from_file_rows`, ARG the rows, comma-separated), `device-read`, `device-slab` (the
//! same into device memory), `write` (`to_file` of 0..ARG), `device-write` (the same from device
//! memory), `device-write-deflate` (`to_file_compressed`, deflate, chunks of ARG/4 elements).
//!
//! Built with array-io's feature `mpi`, under `mpirun` (each rank prints its line, with its
//! `rank`): `collective-write` (`collective::to_file` of rank r's tile, r+1 rows of ARG columns of
//! the row-major count, stacked in rank order), `collective-write-element` (the last rank's tile
//! of f32), `collective-write-shape` (the last rank's tile one column wider).

use array_io::{
    from_file, from_file_batched, from_file_batched_to_device, from_file_rows, from_file_to_device,
    to_file, to_file_compressed, Compression, DeviceArray, Error,
};
use cudarc::driver::{CudaContext, CudaStream};
use ndarray::{Array1, ArrayD};
use std::sync::Arc;

fn stream() -> Result<Arc<CudaStream>, Error> {
    CudaContext::new(0)
        .map(|context| context.default_stream())
        .map_err(|e| Error::Cuda {
            op: "creating a context".into(),
            message: e.to_string(),
        })
}

fn hex(array: &ArrayD<f64>) -> String {
    let values: Vec<f64> = array.iter().copied().collect();
    values
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn shape_of(array: &ArrayD<f64>) -> String {
    let axes: Vec<String> = array.shape().iter().map(|n| n.to_string()).collect();
    format!("[{}]", axes.join(", "))
}

/// ARG as a list of numbers, comma-separated.
fn numbers<N: std::str::FromStr>(arg: &str) -> Vec<N> {
    let parsed = arg.split(',').map(|x| x.trim().parse::<N>().ok());
    parsed
        .collect::<Option<Vec<N>>>()
        .expect("ARG: numbers separated by commas")
}

fn run(op: &str, path: &str, dataset: &str, arg: &str) -> Result<Option<ArrayD<f64>>, Error> {
    let n = || arg.parse::<usize>().unwrap_or(0);
    let values = || Array1::from_iter((0..n()).map(|i| i as f64));
    Ok(match op {
        "read" => Some(from_file::<f64>(path, dataset)?),
        "slab" => {
            let mut blocks = from_file_batched::<f64>(path, dataset, &numbers(arg))?;
            Some(blocks.next().expect("a first block")?.0)
        }
        "gather" => Some(from_file_rows::<f64>(path, dataset, &numbers(arg))?),
        "device-read" => Some(from_file_to_device::<f64>(path, dataset, stream()?)?.to_host()?),
        "device-slab" => {
            let shape = numbers(arg);
            let mut blocks = from_file_batched_to_device::<f64>(path, dataset, &shape, stream()?)?;
            Some(blocks.next().expect("a first block")?.0.to_host()?)
        }
        "write" => {
            to_file(&values(), path, dataset)?;
            None
        }
        "device-write" => {
            to_file(
                &DeviceArray::from_host(stream()?, &values())?,
                path,
                dataset,
            )?;
            None
        }
        "device-write-deflate" => {
            let device = DeviceArray::from_host(stream()?, &values())?;
            to_file_compressed(&device, path, dataset, &[n() / 4], Compression::Deflate)?;
            None
        }
        other => panic!("face_probe: unknown operation {other:?}"),
    })
}

fn json_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The collective operations, under mpirun: this rank and its outcome.
#[cfg(feature = "mpi")]
fn collective(op: &str, path: &str, dataset: &str, arg: &str) -> (usize, Result<(), Error>) {
    use array_io::collective::{self, mpi::traits::*};
    use ndarray::Array2;
    let universe = collective::mpi::initialize().expect("MPI initialises");
    let world = universe.world();
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    let cols: usize = arg.parse().expect("ARG: the number of columns");
    let first = rank * (rank + 1) / 2;
    let count = |wide: usize| {
        Array2::from_shape_fn((rank + 1, wide), |(i, j)| ((first + i) * cols + j) as f64)
    };
    let last = size > 1 && rank == size - 1;
    let wrote = match op {
        "collective-write-element" if last => {
            collective::to_file(&world, &count(cols).mapv(|v| v as f32), path, dataset)
        }
        "collective-write-shape" if last => {
            collective::to_file(&world, &count(cols + 1), path, dataset)
        }
        "collective-write" | "collective-write-element" | "collective-write-shape" => {
            collective::to_file(&world, &count(cols), path, dataset)
        }
        other => panic!("face_probe: unknown operation {other:?}"),
    };
    (rank, wrote)
}

#[cfg(not(feature = "mpi"))]
fn collective(op: &str, _: &str, _: &str, _: &str) -> (usize, Result<(), Error>) {
    panic!("face_probe: {op} needs array-io's feature mpi (cargo build -p array-io --features mpi --example face_probe)")
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [op, path, dataset, rest @ ..] = &args[..] else {
        panic!("usage: face_probe OP PATH DATASET [ARG]");
    };
    let arg = rest.first().map(String::as_str).unwrap_or("");
    let (rank, outcome) = match op.starts_with("collective-") {
        true => {
            let (rank, outcome) = collective(op, path, dataset, arg);
            (format!("\"rank\": {rank}, "), outcome.map(|()| None))
        }
        false => (String::new(), run(op, path, dataset, arg)),
    };
    let line = match outcome {
        Ok(Some(array)) => format!(
            "{{\"ok\": true, \"shape\": {}, \"bytes\": \"{}\"}}",
            shape_of(&array),
            hex(&array)
        ),
        Ok(None) => format!("{{{rank}\"ok\": true}}"),
        Err(e) => {
            let debug = format!("{e:?}");
            let kind = debug.split([' ', '{', '(']).next().unwrap_or("");
            format!(
                "{{{rank}\"ok\": false, \"kind\": {}, \"message\": {}}}",
                json_string(kind),
                json_string(&e.to_string())
            )
        }
    };
    println!("{line}");
}
