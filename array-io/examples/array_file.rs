//! One dataset written or read by array-io's `to_file` / `from_file`, for the Python package's
//! tests of files going both ways between array-io and `h5gds.to_file` / `h5gds.from_file`
//! (python/tests/test_files.py).
//!
//! ```text
//! array_file write PATH DATASET TYPE SHAPE   element k = value(k) of TYPE (see `value`)
//! array_file read PATH DATASET TYPE          prints "shape=3,4" (or "shape=scalar") and
//!                                            "bytes=<hex>": the elements in native byte order
//! ```
//!
//! TYPE: i8 i16 i32 i64 u8 u16 u32 u64 f16 f32 f64 bool. SHAPE: `3,4`, `0,5`, or `scalar`.

use array_io::{from_file, to_file, Element};
use ndarray::{ArrayD, IxDyn};
use std::process::ExitCode;

/// Element k: integers `k * 7919 - 5000` wrapped to the type, floats `k * 0.25 - 100`, bools
/// `k % 3 == 0` (NumPy's `astype` from int64 / float64 gives the same).
trait Value: Element {
    fn value(k: i64) -> Self;
}

macro_rules! integer_value {
    ($($t:ty),*) => {$(
        impl Value for $t {
            fn value(k: i64) -> $t {
                k.wrapping_mul(7919).wrapping_sub(5000) as $t
            }
        }
    )*};
}
integer_value!(i8, i16, i32, i64, u8, u16, u32, u64);

impl Value for f32 {
    fn value(k: i64) -> f32 {
        (k as f64 * 0.25 - 100.0) as f32
    }
}

impl Value for f64 {
    fn value(k: i64) -> f64 {
        k as f64 * 0.25 - 100.0
    }
}

impl Value for half::f16 {
    fn value(k: i64) -> half::f16 {
        half::f16::from_f64(k as f64 * 0.25 - 100.0)
    }
}

impl Value for bool {
    fn value(k: i64) -> bool {
        k % 3 == 0
    }
}

fn parse_shape(text: &str) -> Result<Vec<usize>, String> {
    if text == "scalar" {
        return Ok(Vec::new());
    }
    text.split(',')
        .map(|d| d.parse().map_err(|_| format!("bad SHAPE {text:?}")))
        .collect()
}

fn write<T: Value>(path: &str, dataset: &str, shape: &[usize]) -> Result<(), String> {
    let n: usize = shape.iter().product();
    let values: Vec<T> = (0..n as i64).map(T::value).collect();
    let array = ArrayD::from_shape_vec(IxDyn(shape), values).map_err(|e| e.to_string())?;
    to_file(&array, path, dataset).map_err(|e| e.to_string())
}

fn read<T: Value>(path: &str, dataset: &str) -> Result<(), String> {
    let array = from_file::<T>(path, dataset).map_err(|e| e.to_string())?;
    let shape = if array.ndim() == 0 {
        "scalar".to_string()
    } else {
        let dims: Vec<String> = array.shape().iter().map(usize::to_string).collect();
        dims.join(",")
    };
    let standard = array.as_standard_layout();
    let elements = standard.as_slice().expect("standard layout is contiguous");
    // SAFETY: the elements are plain numbers or bools, initialised; read as bytes only.
    let bytes = unsafe {
        std::slice::from_raw_parts(
            elements.as_ptr().cast::<u8>(),
            std::mem::size_of_val(elements),
        )
    };
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    println!("shape={shape}\nbytes={hex}");
    Ok(())
}

macro_rules! by_type {
    ($name:expr, $f:ident, $($arg:expr),*) => {
        match $name {
            "i8" => $f::<i8>($($arg),*),
            "i16" => $f::<i16>($($arg),*),
            "i32" => $f::<i32>($($arg),*),
            "i64" => $f::<i64>($($arg),*),
            "u8" => $f::<u8>($($arg),*),
            "u16" => $f::<u16>($($arg),*),
            "u32" => $f::<u32>($($arg),*),
            "u64" => $f::<u64>($($arg),*),
            "f16" => $f::<half::f16>($($arg),*),
            "f32" => $f::<f32>($($arg),*),
            "f64" => $f::<f64>($($arg),*),
            "bool" => $f::<bool>($($arg),*),
            other => Err(format!("unknown TYPE {other:?}")),
        }
    };
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["write", path, dataset, ty, shape] => {
            parse_shape(shape).and_then(|shape| by_type!(*ty, write, path, dataset, &shape))
        }
        ["read", path, dataset, ty] => by_type!(*ty, read, path, dataset),
        _ => Err("usage: array_file write PATH DATASET TYPE SHAPE | read PATH DATASET TYPE".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("array_file: {message}");
            ExitCode::FAILURE
        }
    }
}
