//! An HDF5 program written against the C API, run by the tests as a child process.
//!
//! `h5prog write FILE [--config CFG]` creates FILE with contiguous, 2-D, chunked (with partial
//! edge chunks), compact and nested datasets and an attribute; `h5prog verify FILE [--config CFG]`
//! reads everything back, including strided selections (one column, every 4th row), and checks
//! every value. With `--config`, the file access property list selects the `gds` driver through
//! `H5Pset_driver_by_name(fapl, "gds", CFG)`; otherwise the default (`HDF5_DRIVER`, else sec2).
//! Prints `WRITE OK` / `VERIFY OK` and exits 0, or prints what failed plus HDF5's error stack
//! and exits 1 (2 for a usage error).

use hdf5_metno_sys as hdf5_sys;
use hdf5_sys::h5::{herr_t, hsize_t};
use hdf5_sys::h5d::*;
use hdf5_sys::h5e::{H5Eprint2, H5E_DEFAULT};
use hdf5_sys::h5f::*;
use hdf5_sys::h5i::hid_t;
use hdf5_sys::h5p::*;
use hdf5_sys::h5s::*;
use hdf5_sys::h5t::*;
use hdf5_sys::{h5a::*, h5g::*};
use std::ffi::{c_void, CString};

/// Sizes of the test data.
pub const CONTIG_LEN: usize = 3_000_000;
pub const MATRIX: (usize, usize) = (256, 1024);
pub const CHUNKED: (usize, usize) = (300, 300);
pub const CHUNK: (usize, usize) = (64, 64);

type Check<T> = Result<T, String>;

fn ok(status: i64, what: &str) -> Check<i64> {
    if status < 0 {
        Err(format!("{what} failed"))
    } else {
        Ok(status)
    }
}

fn cstr(s: &str) -> CString {
    CString::new(s).expect("no NUL in names")
}

pub fn contig_value(i: usize) -> f32 {
    i as f32 * 0.5
}
pub fn matrix_value(r: usize, c: usize) -> f32 {
    (r * MATRIX.1 + c) as f32
}
pub fn chunked_value(r: usize, c: usize) -> i32 {
    (r * CHUNKED.1 + c) as i32 - 1000
}

/// Creates a dataset, writes `data` to all of it, and closes it.
///
/// # Safety
/// `data` must point at the number of elements the dims describe, of type `mem_type`.
unsafe fn write_dataset(
    loc: hid_t,
    name: &str,
    file_type: hid_t,
    mem_type: hid_t,
    dims: &[hsize_t],
    dcpl: hid_t,
    data: *const c_void,
) -> Check<()> {
    let space = ok(
        H5Screate_simple(dims.len() as i32, dims.as_ptr(), std::ptr::null()),
        "H5Screate_simple",
    )?;
    let dset = ok(
        H5Dcreate2(
            loc,
            cstr(name).as_ptr(),
            file_type,
            space,
            H5P_DEFAULT,
            dcpl,
            H5P_DEFAULT,
        ),
        &format!("H5Dcreate2({name})"),
    )?;
    ok(
        H5Dwrite(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) as i64,
        &format!("H5Dwrite({name})"),
    )?;
    H5Dclose(dset);
    H5Sclose(space);
    Ok(())
}

/// Reads a hyperslab (start, stride, count per dimension) of a dataset into `out`.
///
/// # Safety
/// `out` must have room for the product of `count` elements of `mem_type`.
unsafe fn read_slab(
    file: hid_t,
    name: &str,
    mem_type: hid_t,
    slab: Option<(&[hsize_t], &[hsize_t], &[hsize_t])>,
    out: *mut c_void,
) -> Check<()> {
    let dset = ok(
        H5Dopen2(file, cstr(name).as_ptr(), H5P_DEFAULT),
        &format!("H5Dopen2({name})"),
    )?;
    let (mem_space, file_space) = match slab {
        None => (H5S_ALL, H5S_ALL),
        Some((start, stride, count)) => {
            let fs = ok(H5Dget_space(dset), "H5Dget_space")?;
            ok(
                H5Sselect_hyperslab(
                    fs,
                    H5S_SELECT_SET,
                    start.as_ptr(),
                    stride.as_ptr(),
                    count.as_ptr(),
                    std::ptr::null(),
                ) as i64,
                "H5Sselect_hyperslab",
            )?;
            let ms = ok(
                H5Screate_simple(count.len() as i32, count.as_ptr(), std::ptr::null()),
                "H5Screate_simple",
            )?;
            (ms, fs)
        }
    };
    let status: herr_t = H5Dread(dset, mem_type, mem_space, file_space, H5P_DEFAULT, out);
    if slab.is_some() {
        H5Sclose(mem_space);
        H5Sclose(file_space);
    }
    H5Dclose(dset);
    ok(status as i64, &format!("H5Dread({name})"))?;
    Ok(())
}

fn file_access(config: Option<&str>) -> Check<hid_t> {
    let Some(config) = config else {
        return Ok(H5P_DEFAULT);
    };
    // SAFETY: plain HDF5 calls with valid arguments.
    unsafe {
        let fapl = ok(H5Pcreate(*H5P_CLS_FILE_ACCESS), "H5Pcreate")?;
        ok(
            H5Pset_driver_by_name(fapl, cstr("gds").as_ptr(), cstr(config).as_ptr()) as i64,
            "H5Pset_driver_by_name(gds)",
        )?;
        Ok(fapl)
    }
}

fn write(path: &str, fapl: hid_t) -> Check<()> {
    // SAFETY: HDF5 calls on ids created here, with buffers sized for their dataspaces.
    unsafe {
        let file = ok(
            H5Fcreate(cstr(path).as_ptr(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl),
            "H5Fcreate",
        )?;
        let contig: Vec<f32> = (0..CONTIG_LEN).map(contig_value).collect();
        let f32_le = *H5T_IEEE_F32LE;
        write_dataset(
            file,
            "contig",
            f32_le,
            *H5T_NATIVE_FLOAT,
            &[CONTIG_LEN as hsize_t],
            H5P_DEFAULT,
            contig.as_ptr().cast(),
        )?;

        let (rows, cols) = MATRIX;
        let matrix: Vec<f32> = (0..rows * cols)
            .map(|i| matrix_value(i / cols, i % cols))
            .collect();
        let dims = [rows as hsize_t, cols as hsize_t];
        write_dataset(
            file,
            "matrix",
            f32_le,
            *H5T_NATIVE_FLOAT,
            &dims,
            H5P_DEFAULT,
            matrix.as_ptr().cast(),
        )?;

        let (rows, cols) = CHUNKED;
        let chunked: Vec<i32> = (0..rows * cols)
            .map(|i| chunked_value(i / cols, i % cols))
            .collect();
        let dcpl = ok(H5Pcreate(*H5P_CLS_DATASET_CREATE), "H5Pcreate(dcpl)")?;
        ok(
            H5Pset_chunk(dcpl, 2, [CHUNK.0 as hsize_t, CHUNK.1 as hsize_t].as_ptr()) as i64,
            "H5Pset_chunk",
        )?;
        let dims = [rows as hsize_t, cols as hsize_t];
        write_dataset(
            file,
            "chunked",
            *H5T_STD_I32LE,
            *H5T_NATIVE_INT,
            &dims,
            dcpl,
            chunked.as_ptr().cast(),
        )?;
        H5Pclose(dcpl);

        let compact: Vec<i32> = (0..10).map(|i| i * i).collect();
        let dcpl = ok(H5Pcreate(*H5P_CLS_DATASET_CREATE), "H5Pcreate(dcpl)")?;
        ok(
            H5Pset_layout(dcpl, H5D_layout_t::H5D_COMPACT) as i64,
            "H5Pset_layout",
        )?;
        write_dataset(
            file,
            "compact",
            *H5T_STD_I32LE,
            *H5T_NATIVE_INT,
            &[10],
            dcpl,
            compact.as_ptr().cast(),
        )?;
        H5Pclose(dcpl);

        let g = ok(
            H5Gcreate2(
                file,
                cstr("g").as_ptr(),
                H5P_DEFAULT,
                H5P_DEFAULT,
                H5P_DEFAULT,
            ),
            "H5Gcreate2(g)",
        )?;
        let h = ok(
            H5Gcreate2(g, cstr("h").as_ptr(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
            "H5Gcreate2(h)",
        )?;
        let small: Vec<u8> = (0..100u8).collect();
        write_dataset(
            h,
            "small",
            *H5T_STD_U8LE,
            *H5T_NATIVE_UCHAR,
            &[100],
            H5P_DEFAULT,
            small.as_ptr().cast(),
        )?;
        H5Gclose(h);
        H5Gclose(g);

        let space = ok(H5Screate(H5S_class_t::H5S_SCALAR), "H5Screate")?;
        let attr = ok(
            H5Acreate2(
                file,
                cstr("answer").as_ptr(),
                *H5T_STD_I64LE,
                space,
                H5P_DEFAULT,
                H5P_DEFAULT,
            ),
            "H5Acreate2",
        )?;
        let answer: i64 = 42;
        ok(
            H5Awrite(attr, *H5T_NATIVE_LLONG, (&answer as *const i64).cast()) as i64,
            "H5Awrite",
        )?;
        H5Aclose(attr);
        H5Sclose(space);
        ok(H5Fclose(file) as i64, "H5Fclose")?;
    }
    Ok(())
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

fn verify(path: &str, fapl: hid_t) -> Check<()> {
    // SAFETY: HDF5 calls on ids opened here, with buffers sized for the selections.
    unsafe {
        let file = ok(
            H5Fopen(cstr(path).as_ptr(), H5F_ACC_RDONLY, fapl),
            "H5Fopen",
        )?;
        let float = *H5T_NATIVE_FLOAT;
        let mut contig = vec![0f32; CONTIG_LEN];
        read_slab(file, "contig", float, None, contig.as_mut_ptr().cast())?;
        expect_eq("contig", &contig, contig_value)?;

        let (rows, cols) = MATRIX;
        let mut column = vec![0f32; rows];
        let slab = ([0, 7], [1, 1], [rows as hsize_t, 1]);
        read_slab(
            file,
            "matrix",
            float,
            Some((&slab.0, &slab.1, &slab.2)),
            column.as_mut_ptr().cast(),
        )?;
        expect_eq("matrix column 7", &column, |r| matrix_value(r, 7))?;

        let every4 = rows / 4;
        let mut strided = vec![0f32; every4 * cols];
        let slab = ([0, 0], [4, 1], [every4 as hsize_t, cols as hsize_t]);
        read_slab(
            file,
            "matrix",
            float,
            Some((&slab.0, &slab.1, &slab.2)),
            strided.as_mut_ptr().cast(),
        )?;
        expect_eq("matrix every 4th row", &strided, |i| {
            matrix_value((i / cols) * 4, i % cols)
        })?;

        let (rows, cols) = CHUNKED;
        let mut chunked = vec![0i32; rows * cols];
        read_slab(
            file,
            "chunked",
            *H5T_NATIVE_INT,
            None,
            chunked.as_mut_ptr().cast(),
        )?;
        expect_eq("chunked", &chunked, |i| chunked_value(i / cols, i % cols))?;

        let mut compact = vec![0i32; 10];
        read_slab(
            file,
            "compact",
            *H5T_NATIVE_INT,
            None,
            compact.as_mut_ptr().cast(),
        )?;
        expect_eq("compact", &compact, |i| (i * i) as i32)?;

        let mut small = vec![0u8; 100];
        read_slab(
            file,
            "g/h/small",
            *H5T_NATIVE_UCHAR,
            None,
            small.as_mut_ptr().cast(),
        )?;
        expect_eq("g/h/small", &small, |i| i as u8)?;

        let attr = ok(
            H5Aopen(file, cstr("answer").as_ptr(), H5P_DEFAULT),
            "H5Aopen",
        )?;
        let mut answer: i64 = 0;
        ok(
            H5Aread(attr, *H5T_NATIVE_LLONG, (&mut answer as *mut i64).cast()) as i64,
            "H5Aread",
        )?;
        H5Aclose(attr);
        if answer != 42 {
            return Err(format!("attribute answer is {answer}, expected 42"));
        }
        ok(H5Fclose(file) as i64, "H5Fclose")?;
    }
    Ok(())
}

/// Entry point of `h5prog`; returns the exit code.
pub fn main() -> i32 {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let config = args
        .iter()
        .position(|a| a == "--config")
        .and_then(|i| args.get(i + 1))
        .map(String::as_str);
    let (Some(command), Some(path)) = (args.first(), args.get(1)) else {
        eprintln!("usage: h5prog write|verify FILE [--config CFG]");
        return 2;
    };
    // SAFETY: initialises the library; no other HDF5 call has happened yet.
    if unsafe { hdf5_sys::h5::H5open() } < 0 {
        eprintln!("H5open failed");
        return 1;
    }
    let result = file_access(config).and_then(|fapl| match command.as_str() {
        "write" => write(path, fapl).map(|_| "WRITE OK"),
        "verify" => verify(path, fapl).map(|_| "VERIFY OK"),
        other => Err(format!("unknown command {other:?}")),
    });
    match result {
        Ok(message) => {
            println!("{message}");
            0
        }
        Err(what) => {
            eprintln!("FAILED: {what}");
            // SAFETY: prints HDF5's default error stack to stderr.
            unsafe { H5Eprint2(H5E_DEFAULT, std::ptr::null_mut()) };
            1
        }
    }
}
