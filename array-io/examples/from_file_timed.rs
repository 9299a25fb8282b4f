//! Benchmark helper (not a test): reads one float32 dataset whole with array-io's `from_file`
//! (host) or `from_file_to_device` (device) `--reps` times and prints each read's seconds, one
//! per line, for `benches/from_file_pair.py`, which times `h5gds.from_file` on the same dataset
//! in the same run and reports the ratio (issue 42: array-io against the Python path).
//!
//! `from_file_timed PATH DATASET host|device REPS`: the first read (library and driver set-up)
//! is made and not printed; each printed read is checked against the first one's element count.

use array_io::{from_file, from_file_to_device};
use cudarc::driver::CudaContext;
use std::process::ExitCode;
use std::time::Instant;

fn run(path: &str, dataset: &str, target: &str, reps: usize) -> Result<(), String> {
    let err = |e: array_io::Error| e.to_string();
    match target {
        "host" => {
            let expected = from_file::<f32>(path, dataset).map_err(err)?.len();
            for _ in 0..reps {
                let start = Instant::now();
                let array = from_file::<f32>(path, dataset).map_err(err)?;
                let seconds = start.elapsed().as_secs_f64();
                if array.len() != expected {
                    return Err(format!("read {} elements, not {expected}", array.len()));
                }
                println!("{seconds}");
            }
        }
        "device" => {
            let stream = CudaContext::new(0)
                .map_err(|e| format!("no CUDA device: {e}"))?
                .default_stream();
            let expected = from_file_to_device::<f32>(path, dataset, stream.clone())
                .map_err(err)?
                .len();
            for _ in 0..reps {
                let start = Instant::now();
                let array =
                    from_file_to_device::<f32>(path, dataset, stream.clone()).map_err(err)?;
                stream.synchronize().map_err(|e| e.to_string())?;
                let seconds = start.elapsed().as_secs_f64();
                if array.len() != expected {
                    return Err(format!("read {} elements, not {expected}", array.len()));
                }
                println!("{seconds}");
            }
        }
        other => return Err(format!("target must be host or device, not {other:?}")),
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [path, dataset, target, reps] = args.as_slice() else {
        eprintln!("usage: from_file_timed PATH DATASET host|device REPS");
        return ExitCode::from(2);
    };
    let Ok(reps) = reps.parse::<usize>() else {
        eprintln!("REPS must be a whole number, not {reps:?}");
        return ExitCode::from(2);
    };
    match run(path, dataset, target, reps) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("from_file_timed: {message}");
            ExitCode::FAILURE
        }
    }
}
