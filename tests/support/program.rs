//! An HDF5 program, run by the tests as a child process (HDF5 reads `HDF5_DRIVER` once per
//! process): hdf5-metno's API, with the file access list and the files opened through array-io's
//! raw HDF5 layer as a C program would (`H5Pset_driver_by_name`).
//!
//! `h5prog write FILE [--config CFG]` creates FILE with contiguous, 2-D, chunked (with partial
//! edge chunks), compact and nested datasets and an attribute; `h5prog verify FILE [--config CFG]`
//! reads everything back, including strided selections (one column, every 4th row), and checks
//! every value. With `--config`, the file access property list selects the `gds` driver through
//! `H5Pset_driver_by_name(fapl, "gds", CFG)`; otherwise the default (`HDF5_DRIVER`, else sec2).
//! Prints `WRITE OK` / `VERIFY OK` and exits 0, or prints what failed plus HDF5's error stack
//! and exits 1 (2 for a usage error).

use array_io::hdf5_raw::{self, named as h5, FileDriver};
use hdf5::dataset::Layout;
use hdf5::plist::FileAccess;
use hdf5::{Group, H5Type};
use ndarray::s;

/// Sizes of the test data.
pub const CONTIG_LEN: usize = 3_000_000;
pub const MATRIX: (usize, usize) = (256, 1024);
pub const CHUNKED: (usize, usize) = (300, 300);
pub const CHUNK: (usize, usize) = (64, 64);

type Check<T> = Result<T, String>;

pub fn contig_value(i: usize) -> f32 {
    i as f32 * 0.5
}
pub fn matrix_value(r: usize, c: usize) -> f32 {
    (r * MATRIX.1 + c) as f32
}
pub fn chunked_value(r: usize, c: usize) -> i32 {
    (r * CHUNKED.1 + c) as i32 - 1000
}

/// Creates dataset `name` of `dims` with `layout` (chunked with `chunk`) holding `data`.
fn write_dataset<T: H5Type>(
    loc: &Group,
    name: &str,
    dims: &[usize],
    layout: Layout,
    chunk: Option<&[usize]>,
    data: &[T],
) -> Check<()> {
    let mut builder = loc.new_dataset::<T>().shape(dims).layout(layout);
    if let Some(chunk) = chunk {
        builder = builder.chunk(chunk);
    }
    let dset = h5(&format!("H5Dcreate2({name})"), builder.create(name))?;
    h5("H5Dwrite", dset.write_raw(data))
}

fn write(path: &std::path::Path, fapl: &FileAccess) -> Check<()> {
    let file = h5("H5Fcreate", hdf5_raw::create_file(path, fapl))?;
    let contig: Vec<f32> = (0..CONTIG_LEN).map(contig_value).collect();
    write_dataset(
        &file,
        "contig",
        &[CONTIG_LEN],
        Layout::Contiguous,
        None,
        &contig,
    )?;

    let (rows, cols) = MATRIX;
    let matrix: Vec<f32> = (0..rows * cols)
        .map(|i| matrix_value(i / cols, i % cols))
        .collect();
    write_dataset(
        &file,
        "matrix",
        &[rows, cols],
        Layout::Contiguous,
        None,
        &matrix,
    )?;

    let (rows, cols) = CHUNKED;
    let chunked: Vec<i32> = (0..rows * cols)
        .map(|i| chunked_value(i / cols, i % cols))
        .collect();
    let chunk = [CHUNK.0, CHUNK.1];
    let dims = [rows, cols];
    write_dataset(
        &file,
        "chunked",
        &dims,
        Layout::Chunked,
        Some(&chunk),
        &chunked,
    )?;

    let compact: Vec<i32> = (0..10).map(|i| i * i).collect();
    write_dataset(&file, "compact", &[10], Layout::Compact, None, &compact)?;

    let g = h5("H5Gcreate2(g)", file.create_group("g"))?;
    let h = h5("H5Gcreate2(h)", g.create_group("h"))?;
    let small: Vec<u8> = (0..100u8).collect();
    write_dataset(&h, "small", &[100], Layout::Contiguous, None, &small)?;
    drop((h, g));

    let attr = h5(
        "H5Acreate2(answer)",
        file.new_attr::<i64>().create("answer"),
    )?;
    h5("H5Awrite", attr.write_scalar(&42i64))?;
    drop(attr);
    h5("H5Fclose", file.close())
}

fn expect_eq<T: PartialEq + std::fmt::Debug>(
    what: &str,
    got: &[T],
    want: impl Fn(usize) -> T,
) -> Check<()> {
    match got.iter().enumerate().find(|(i, v)| **v != want(*i)) {
        None => Ok(()),
        Some((i, v)) => Err(format!(
            "{what}: element {i} is {v:?}, expected {:?}",
            want(i)
        )),
    }
}

/// Reads a whole dataset as `T`.
fn read_all<T: H5Type>(file: &hdf5::File, name: &str) -> Check<Vec<T>> {
    let dset = h5(&format!("H5Dopen2({name})"), file.dataset(name))?;
    h5("H5Dread", dset.read_raw::<T>())
}

fn verify(path: &std::path::Path, fapl: &FileAccess) -> Check<()> {
    let file = h5("H5Fopen", hdf5_raw::open_file(path, fapl))?;
    expect_eq("contig", &read_all::<f32>(&file, "contig")?, contig_value)?;

    let (rows, cols) = MATRIX;
    let matrix = h5("H5Dopen2(matrix)", file.dataset("matrix"))?;
    let column = h5("H5Dread", matrix.read_slice_1d::<f32, _>(s![.., 7]))?;
    expect_eq("matrix column 7", column.as_slice().unwrap(), |r| {
        matrix_value(r, 7)
    })?;

    let strided = h5("H5Dread", matrix.read_slice_2d::<f32, _>(s![..;4, ..]))?;
    if strided.shape() != [rows / 4, cols] {
        return Err(format!("every 4th row: shape {:?}", strided.shape()));
    }
    expect_eq("matrix every 4th row", strided.as_slice().unwrap(), |i| {
        matrix_value((i / cols) * 4, i % cols)
    })?;

    let (_, cols) = CHUNKED;
    expect_eq("chunked", &read_all::<i32>(&file, "chunked")?, |i| {
        chunked_value(i / cols, i % cols)
    })?;
    expect_eq("compact", &read_all::<i32>(&file, "compact")?, |i| {
        (i * i) as i32
    })?;
    expect_eq("g/h/small", &read_all::<u8>(&file, "g/h/small")?, |i| {
        i as u8
    })?;

    let attr = h5("H5Aopen(answer)", file.attr("answer"))?;
    let answer = h5("H5Aread", attr.read_scalar::<i64>())?;
    if answer != 42 {
        return Err(format!("attribute answer is {answer}, expected 42"));
    }
    drop((attr, matrix));
    h5("H5Fclose", file.close())
}

/// Entry point of `h5prog`; returns the exit code.
pub fn main() -> i32 {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let config = args
        .iter()
        .position(|a| a == "--config")
        .and_then(|i| args.get(i + 1));
    let (Some(command), Some(path)) = (args.first(), args.get(1)) else {
        eprintln!("usage: h5prog write|verify FILE [--config CFG]");
        return 2;
    };
    let driver = config.map_or(FileDriver::Default, |c| FileDriver::ByName {
        name: "gds".into(),
        config: c.clone(),
    });
    let path = std::path::Path::new(path);
    // A failure prints the failed call with HDF5's error stack.
    let result = h5("H5Pset_driver", hdf5_raw::file_access(&driver)).and_then(|fapl| match command
        .as_str()
    {
        "write" => write(path, &fapl).map(|_| "WRITE OK"),
        "verify" => verify(path, &fapl).map(|_| "VERIFY OK"),
        other => Err(format!("unknown command {other:?}")),
    });
    match result {
        Ok(message) => {
            println!("{message}");
            0
        }
        Err(what) => {
            eprintln!("FAILED: {what}");
            1
        }
    }
}
