//! Writes arrays of several element types and ranks to HDF5 and reads them back, checking every
//! element (the counterpart of Legate's HDF5 round-trip verification script). Prints
//! `HDF5 ROUND TRIP OK` when all checks pass.
//!
//! `cargo run --release -p array-io --example roundtrip [-- --device] [--dir DIR]`
//!
//! With `--device` the arrays live in GPU memory (device 0): they are written straight from it
//! and read back into it (`H5GDS_USE_VFD_GDS` chooses the gds driver or the staged path).

use array_io::{from_file, from_file_to_device, to_file, DeviceArray, Element};
use ndarray::{ArrayD, IxDyn};
use std::path::{Path, PathBuf};

struct Args {
    device: bool,
    dir: PathBuf,
}

fn args() -> Args {
    let mut device = false;
    let mut dir = std::env::temp_dir().join(format!("array-io-roundtrip-{}", std::process::id()));
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--device" => device = true,
            "--dir" => dir = PathBuf::from(it.next().expect("--dir takes a directory")),
            other => panic!("unknown argument {other:?}; usage: roundtrip [--device] [--dir DIR]"),
        }
    }
    Args { device, dir }
}

/// An array of `shape` with values derived from `f(k)` for the k-th element.
fn make<T: Element>(shape: &[usize], f: impl Fn(usize) -> T) -> ArrayD<T> {
    let n = shape.iter().product();
    ArrayD::from_shape_vec(IxDyn(shape), (0..n).map(f).collect()).unwrap()
}

fn check<T: Element + PartialEq + std::fmt::Debug>(
    name: &str,
    array: ArrayD<T>,
    dir: &Path,
    stream: Option<&std::sync::Arc<cudarc::driver::CudaStream>>,
) {
    let path = dir.join(format!("{name}.h5"));
    let dataset = format!("/roundtrip/{name}");
    match stream {
        None => {
            to_file(&array, &path, &dataset).unwrap();
            let back = from_file::<T>(&path, &dataset).unwrap();
            assert_eq!(back, array, "{name}: host round trip");
        }
        Some(stream) => {
            let device = DeviceArray::from_host(stream, &array).unwrap();
            to_file(&device, &path, &dataset).unwrap();
            let back: DeviceArray<T> = from_file_to_device(&path, &dataset, stream).unwrap();
            assert_eq!(back.shape(), array.shape(), "{name}: shape");
            assert_eq!(back.to_host().unwrap(), array, "{name}: device round trip");
            // The file is an ordinary HDF5 file: a host read agrees.
            assert_eq!(
                from_file::<T>(&path, &dataset).unwrap(),
                array,
                "{name}: host read"
            );
        }
    }
    println!(
        "  {name}: {:?} {} ok",
        array.shape(),
        std::any::type_name::<T>()
    );
}

fn main() {
    let args = args();
    std::fs::create_dir_all(&args.dir).unwrap();
    let stream = args.device.then(|| {
        cudarc::driver::CudaContext::new(0)
            .expect("--device needs CUDA (a GPU, or the emulator in tests)")
            .default_stream()
    });
    let s = stream.as_ref();
    println!(
        "round trips in {} ({} memory)",
        args.dir.display(),
        if args.device { "device" } else { "host" }
    );
    check(
        "f32_2d",
        make(&[300, 257], |k| k as f32 * 0.25 - 1000.0),
        &args.dir,
        s,
    );
    check(
        "f64_1d",
        make(&[100_003], |k| (k as f64).sqrt()),
        &args.dir,
        s,
    );
    check(
        "i64_3d",
        make(&[7, 11, 13], |k| k as i64 * -7_919),
        &args.dir,
        s,
    );
    check(
        "u8_4d",
        make(&[2, 3, 4, 5], |k| (k * 37) as u8),
        &args.dir,
        s,
    );
    check("i16_0d", make(&[], |_| -12_345i16), &args.dir, s);
    check("bool_2d", make(&[17, 9], |k| k % 3 == 0), &args.dir, s);
    check(
        "f16_1d",
        make(&[1000], |k| half::f16::from_f32(k as f32 / 16.0)),
        &args.dir,
        s,
    );
    check(
        "u32_empty",
        make::<u32>(&[4, 0], |k| k as u32),
        &args.dir,
        s,
    );
    std::fs::remove_dir_all(&args.dir).ok();
    // Staged transfers keep their pinned buffers for reuse; hand them back before exiting.
    array_io::release_pinned_buffers();
    println!("HDF5 ROUND TRIP OK");
}
