//! Files travel both ways between array-io and h5py (3.16, with its own HDF5 2.0), host side:
//! h5py's contiguous, chunked, gzip-compressed, fill-valued, sparse, compact, external and
//! big-endian datasets read by array-io, whole and batched; array-io's files of every element
//! type and rank read by h5py. Every comparison is of bytes. (Device reads of the same files:
//! tests/device.rs.)

mod common;

use array_io::{from_file, from_file_batched, to_file};
use common::*;
use ndarray::{ArrayD, IxDyn, SliceInfoElem};
use std::path::Path;
use std::sync::Mutex;

/// The tests here run Python while HDF5 files are open in this process; one at a time, so that
/// no child is forked while this process holds a file lock (see tests/settings.rs).
static SERIAL: Mutex<()> = Mutex::new(());

fn read_and_compare<T: Sample>(path: &Path, entry: &Entry) {
    let array = from_file::<T>(path, &entry.name).unwrap_or_else(|e| panic!("{}: {e}", entry.name));
    assert_eq!(array.shape(), entry.shape.as_slice(), "{}", entry.name);
    assert_eq!(
        bytes_of(&array),
        entry.bytes,
        "{} ({})",
        entry.name,
        entry.dtype
    );
}

#[test]
fn h5py_files_are_read_by_array_io_byte_for_byte() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    run_h5py("write", dir.path());
    let file = dir.path().join("h5py.h5");
    let entries = h5py_manifest(dir.path());
    assert!(entries.len() > 70, "{} datasets", entries.len());
    for entry in &entries {
        for_dtype!(entry.dtype.as_str(), read_and_compare(&file, entry));
    }
}

/// Reads `entry` in chunks of `chunk_shape`, placing each chunk where its offsets say, and
/// checks the reassembled bytes and that every element came exactly once.
fn batched_and_compare<T: Sample>(path: &Path, entry: &Entry, chunk_shape: &[usize]) {
    let shape = &entry.shape;
    let mut whole = ArrayD::<T>::from_elem(IxDyn(shape), T::sample(0));
    let mut seen = ArrayD::<u32>::zeros(IxDyn(shape));
    for item in from_file_batched::<T>(path, &entry.name, chunk_shape).unwrap() {
        let (chunk, offsets) = item.unwrap();
        let slice: Vec<SliceInfoElem> = offsets
            .iter()
            .zip(chunk.shape())
            .map(|(&o, &n)| (o..o + n).into())
            .collect();
        whole.slice_mut(slice.as_slice()).assign(&chunk);
        seen.slice_mut(slice.as_slice()).mapv_inplace(|n| n + 1);
    }
    assert!(seen.iter().all(|&n| n == 1), "{}: coverage", entry.name);
    assert_eq!(
        bytes_of(&whole),
        entry.bytes,
        "{} in chunks of {chunk_shape:?}",
        entry.name
    );
}

#[test]
fn h5py_files_are_read_in_batches_covering_everything_once() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    run_h5py("write", dir.path());
    let file = dir.path().join("h5py.h5");
    let entries = h5py_manifest(dir.path());
    let cases: [(&str, &[usize]); 7] = [
        ("/gzip", &[7, 9]),
        ("/gzip_bool", &[10, 17]),
        ("/sparse", &[3, 4]),
        ("/big_chunked", &[100, 128]),
        ("/chunked", &[20, 1]),
        ("/contiguous/float16/rank4", &[1, 2, 2, 2]),
        ("/big_endian", &[3, 5]),
    ];
    for (name, chunk_shape) in cases {
        let entry = entries.iter().find(|e| e.name == name).unwrap();
        for_dtype!(
            entry.dtype.as_str(),
            batched_and_compare(&file, entry, chunk_shape)
        );
    }
}

fn write_all_types<T: Sample>(dir: &Path, entries: &mut Vec<(String, Entry)>) {
    for (rank, shape) in SHAPES.iter().chain(EMPTY_SHAPES.iter()).enumerate() {
        let array = sample_array::<T>(shape, rank as u64 + 11);
        let file = format!("{}.h5", T::NAME);
        let name = format!("/rank{rank}/{}", T::NAME);
        // One file per type: each to_file replaces it, so write and check one at a time.
        let sub = dir.join(format!("{}-{rank}", T::NAME));
        std::fs::create_dir_all(&sub).unwrap();
        to_file(&array, sub.join(&file), &name).unwrap();
        entries.push((
            format!("{}-{rank}/{file}", T::NAME),
            Entry {
                name,
                dtype: dtype_name::<T>().into(),
                shape: shape.to_vec(),
                bytes: bytes_of(&array),
            },
        ));
    }
}

#[test]
fn array_io_files_are_read_by_h5py_byte_for_byte() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let mut entries = Vec::new();
    write_all_types::<i8>(dir.path(), &mut entries);
    write_all_types::<i16>(dir.path(), &mut entries);
    write_all_types::<i32>(dir.path(), &mut entries);
    write_all_types::<i64>(dir.path(), &mut entries);
    write_all_types::<isize>(dir.path(), &mut entries);
    write_all_types::<u8>(dir.path(), &mut entries);
    write_all_types::<u16>(dir.path(), &mut entries);
    write_all_types::<u32>(dir.path(), &mut entries);
    write_all_types::<u64>(dir.path(), &mut entries);
    write_all_types::<usize>(dir.path(), &mut entries);
    write_all_types::<half::f16>(dir.path(), &mut entries);
    write_all_types::<f32>(dir.path(), &mut entries);
    write_all_types::<f64>(dir.path(), &mut entries);
    write_all_types::<bool>(dir.path(), &mut entries);
    write_manifest(dir.path(), &entries);
    let out = run_h5py("check", dir.path());
    assert_eq!(out.trim(), format!("OK {}", entries.len()));
}
