//! An HDF5 program written against the C API, run by the tests as a child process.
//!
//! `h5prog write FILE [--config CFG]` creates FILE with contiguous, 2-D, chunked (with partial
//! edge chunks), compact and nested datasets and an attribute; `h5prog verify FILE [--config CFG]`
//! reads everything back, including strided selections (one column, every 4th row), and checks
//! every value. With `--config`, the file access property list selects the `gds` driver through
//! `H5Pset_driver_by_name(fapl, "gds", CFG)`; otherwise the default (`HDF5_DRIVER`, else sec2).
//! Prints `WRITE OK` / `VERIFY OK` and exits 0, or prints what failed plus HDF5's error stack
//! and exits 1 (2 for a usage error).

use h5gds_bench::h5::{self, h5t::*, Driver, Layout};

/// Sizes of the test data.
pub const CONTIG_LEN: usize = 3_000_000;
pub const MATRIX: (usize, usize) = (256, 1024);
pub const CHUNKED: (usize, usize) = (300, 300);
pub const CHUNK: (u64, u64) = (64, 64);

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

/// Creates a dataset of `dims` and writes all of `data` (of `mem_type`) to it.
fn write_dataset<T>(
    loc: &h5::Id,
    name: &str,
    types: (i64, i64),
    dims: &[u64],
    layout: Layout,
    data: &[T],
) -> Check<()> {
    let dset = h5::create_dataset(loc, name, types.0, dims, layout)?;
    h5::write_all(&dset, types.1, data)
}

fn write(path: &std::path::Path, fapl: &h5::Id) -> Check<()> {
    let file = h5::create_file(path, fapl)?;
    let contig: Vec<f32> = (0..CONTIG_LEN).map(contig_value).collect();
    let float = (*H5T_IEEE_F32LE, *H5T_NATIVE_FLOAT);
    write_dataset(
        &file,
        "contig",
        float,
        &[CONTIG_LEN as u64],
        Layout::Contiguous,
        &contig,
    )?;

    let (rows, cols) = MATRIX;
    let matrix: Vec<f32> = (0..rows * cols)
        .map(|i| matrix_value(i / cols, i % cols))
        .collect();
    write_dataset(
        &file,
        "matrix",
        float,
        &[rows as u64, cols as u64],
        Layout::Contiguous,
        &matrix,
    )?;

    let (rows, cols) = CHUNKED;
    let chunked: Vec<i32> = (0..rows * cols)
        .map(|i| chunked_value(i / cols, i % cols))
        .collect();
    let int = (*H5T_STD_I32LE, *H5T_NATIVE_INT);
    let chunk = [CHUNK.0, CHUNK.1];
    write_dataset(
        &file,
        "chunked",
        int,
        &[rows as u64, cols as u64],
        Layout::Chunked(&chunk),
        &chunked,
    )?;

    let compact: Vec<i32> = (0..10).map(|i| i * i).collect();
    write_dataset(&file, "compact", int, &[10], Layout::Compact, &compact)?;

    let g = h5::create_group(&file, "g")?;
    let h = h5::create_group(&g, "h")?;
    let small: Vec<u8> = (0..100u8).collect();
    write_dataset(
        &h,
        "small",
        (*H5T_STD_U8LE, *H5T_NATIVE_UCHAR),
        &[100],
        Layout::Contiguous,
        &small,
    )?;
    drop((h, g));

    h5::write_scalar_attribute(&file, "answer", *H5T_STD_I64LE, *H5T_NATIVE_LLONG, &42i64)?;
    file.close()
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

fn verify(path: &std::path::Path, fapl: &h5::Id) -> Check<()> {
    let file = h5::open_file(path, fapl)?;
    let float = *H5T_NATIVE_FLOAT;
    let mut contig = vec![0f32; CONTIG_LEN];
    h5::read_all(&h5::open_dataset(&file, "contig")?, float, &mut contig)?;
    expect_eq("contig", &contig, contig_value)?;

    let (rows, cols) = MATRIX;
    let matrix = h5::open_dataset(&file, "matrix")?;
    let mut column = vec![0f32; rows];
    h5::read_slab(
        &matrix,
        float,
        &[0, 7],
        &[1, 1],
        &[rows as u64, 1],
        &mut column,
    )?;
    expect_eq("matrix column 7", &column, |r| matrix_value(r, 7))?;

    let every4 = rows / 4;
    let mut strided = vec![0f32; every4 * cols];
    h5::read_slab(
        &matrix,
        float,
        &[0, 0],
        &[4, 1],
        &[every4 as u64, cols as u64],
        &mut strided,
    )?;
    expect_eq("matrix every 4th row", &strided, |i| {
        matrix_value((i / cols) * 4, i % cols)
    })?;

    let (rows, cols) = CHUNKED;
    let mut chunked = vec![0i32; rows * cols];
    h5::read_all(
        &h5::open_dataset(&file, "chunked")?,
        *H5T_NATIVE_INT,
        &mut chunked,
    )?;
    expect_eq("chunked", &chunked, |i| chunked_value(i / cols, i % cols))?;

    let mut compact = vec![0i32; 10];
    h5::read_all(
        &h5::open_dataset(&file, "compact")?,
        *H5T_NATIVE_INT,
        &mut compact,
    )?;
    expect_eq("compact", &compact, |i| (i * i) as i32)?;

    let mut small = vec![0u8; 100];
    h5::read_all(
        &h5::open_dataset(&file, "g/h/small")?,
        *H5T_NATIVE_UCHAR,
        &mut small,
    )?;
    expect_eq("g/h/small", &small, |i| i as u8)?;

    let mut answer = 0i64;
    h5::read_scalar_attribute(&file, "answer", *H5T_NATIVE_LLONG, &mut answer)?;
    if answer != 42 {
        return Err(format!("attribute answer is {answer}, expected 42"));
    }
    drop(matrix);
    file.close()
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
    let driver = config.map_or(Driver::Default, |c| Driver::Gds(c.clone()));
    let path = std::path::Path::new(path);
    // HDF5's error stack is printed where a call fails (h5::check).
    let result = h5::init(None)
        .and_then(|()| h5::file_access(&driver))
        .and_then(|fapl| match command.as_str() {
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
