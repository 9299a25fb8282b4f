//! Host arrays: every element type at ranks 0 to 4 and empty, round trips byte for byte, every
//! error `to_file`, `from_file` and `from_file_batched` promise, and batched reads covering the
//! array exactly once.

mod common;

use array_io::{from_file, from_file_batched, from_file_with, to_file, Error, ReadOptions};
use common::*;
use ndarray::{arr1, s, Array2, ArrayD, IxDyn};
use std::path::Path;

fn round_trip<T: Sample>(dir: &Path) {
    for (rank, shape) in SHAPES.iter().chain(EMPTY_SHAPES.iter()).enumerate() {
        let array = sample_array::<T>(shape, rank as u64);
        let path = dir.join(format!("{}-{rank}.h5", T::NAME));
        to_file(&array, &path, "/data").unwrap();
        let back = from_file::<T>(&path, "/data").unwrap();
        assert_eq!(back.shape(), *shape, "{} rank {rank}", T::NAME);
        assert_eq!(
            bytes_of(&back),
            bytes_of(&array),
            "{} shape {shape:?}",
            T::NAME
        );
    }
}

#[test]
fn every_element_type_round_trips_at_every_rank_and_empty() {
    let dir = tempfile::tempdir().unwrap();
    round_trip::<i8>(dir.path());
    round_trip::<i16>(dir.path());
    round_trip::<i32>(dir.path());
    round_trip::<i64>(dir.path());
    round_trip::<isize>(dir.path());
    round_trip::<u8>(dir.path());
    round_trip::<u16>(dir.path());
    round_trip::<u32>(dir.path());
    round_trip::<u64>(dir.path());
    round_trip::<usize>(dir.path());
    round_trip::<half::f16>(dir.path());
    round_trip::<f32>(dir.path());
    round_trip::<f64>(dir.path());
    round_trip::<bool>(dir.path());
}

#[test]
fn arrays_in_any_memory_order_are_written_row_major() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.h5");
    let a = Array2::from_shape_fn((4, 6), |(i, j)| (i * 6 + j) as i32);
    let transposed = a.t();
    to_file(&transposed, &path, "/t").unwrap();
    assert_eq!(
        from_file::<i32>(&path, "/t").unwrap(),
        transposed.into_dyn()
    );
    let strided = a.slice(s![..;2, 1..;3]);
    to_file(&strided, &path, "/s").unwrap();
    assert_eq!(from_file::<i32>(&path, "/s").unwrap(), strided.into_dyn());
}

#[test]
fn to_file_replaces_the_file_and_creates_directories_and_groups() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new/nested/dirs/x.h5");
    to_file(&arr1(&[1u8, 2]), &path, "/a/b/c/data").unwrap();
    to_file(&arr1(&[3u8]), &path, "/other").unwrap();
    // The first dataset went with the replaced file.
    match from_file::<u8>(&path, "/a/b/c/data") {
        Err(Error::NoSuchDataset { existing, .. }) => assert_eq!(existing, ["/other"]),
        other => panic!("expected NoSuchDataset, got {other:?}"),
    }
    assert_eq!(
        from_file::<u8>(&path, "/other").unwrap(),
        arr1(&[3u8]).into_dyn()
    );
}

#[test]
fn to_file_errors_name_the_culprit() {
    let dir = tempfile::tempdir().unwrap();
    let a = arr1(&[1.0f32]);
    let err = to_file(&a, dir.path(), "/x").unwrap_err();
    assert!(matches!(err, Error::PathIsDirectory { .. }), "{err:?}");
    assert!(err.to_string().contains(&dir.path().display().to_string()));
    assert!(err.to_string().contains("is a directory"), "{err}");

    let path = dir.path().join("f.h5");
    for (name, why) in [
        ("", "it is empty"),
        ("x", "absolute"),
        ("data/x", "absolute"),
    ] {
        let err = to_file(&a, &path, name).unwrap_err();
        assert!(matches!(err, Error::InvalidDatasetName { .. }), "{err:?}");
        assert!(err.to_string().contains(why), "{err}");
        assert!(err.to_string().contains(&format!("{name:?}")), "{err}");
    }
    assert!(!path.exists(), "nothing is written for a bad name");

    let err = to_file(&arr1(&[1i128]), &path, "/x").unwrap_err();
    assert!(matches!(err, Error::UnsupportedType { .. }), "{err:?}");
    assert!(err.to_string().contains("element type i128"), "{err}");
    let err = to_file(&arr1(&[1u128]), &path, "/x").unwrap_err();
    assert!(err.to_string().contains("element type u128"), "{err}");
    assert!(!path.exists());

    // A parent "directory" that is a file.
    let blocker = dir.path().join("plain-file");
    std::fs::write(&blocker, b"x").unwrap();
    let err = to_file(&a, blocker.join("x.h5"), "/x").unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err:?}");
    assert!(err.to_string().contains("plain-file"), "{err}");
}

#[test]
fn from_file_errors_name_the_culprit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.h5");
    let missing = dir.path().join("missing.h5");
    let err = from_file::<f32>(&missing, "/x").unwrap_err();
    assert!(matches!(err, Error::FileNotFound { .. }), "{err:?}");
    assert!(err.to_string().contains("missing.h5"), "{err}");
    let err = from_file::<f32>(dir.path(), "/x").unwrap_err();
    assert!(matches!(err, Error::PathIsDirectory { .. }), "{err:?}");

    to_file(&arr1(&[1.5f32, 2.5]), &path, "/group/x").unwrap();
    let err = from_file::<f32>(&path, "/group/y").unwrap_err();
    assert!(matches!(err, Error::NoSuchDataset { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("no dataset \"/group/y\"") && text.contains("\"/group/x\""),
        "{text}"
    );
    let err = from_file::<f32>(&path, "/nowhere/deep/y").unwrap_err();
    assert!(matches!(err, Error::NoSuchDataset { .. }), "{err:?}");

    let err = from_file::<f32>(&path, "/group").unwrap_err();
    assert!(
        matches!(err, Error::NotADataset { kind: "group", .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("\"/group\" is a group"), "{err}");

    let err = from_file::<f32>(&path, "group/x").unwrap_err();
    assert!(matches!(err, Error::InvalidDatasetName { .. }), "{err:?}");
    let err = from_file::<f32>(&path, "").unwrap_err();
    assert!(matches!(err, Error::InvalidDatasetName { .. }), "{err:?}");

    let err = from_file::<f64>(&path, "/group/x").unwrap_err();
    assert!(matches!(err, Error::TypeMismatch { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("holds f32, not f64"), "{text}");
    let err = from_file::<i128>(&path, "/group/x").unwrap_err();
    assert!(matches!(err, Error::UnsupportedType { .. }), "{err:?}");

    // Not an HDF5 file at all.
    let junk = dir.path().join("junk.h5");
    std::fs::write(&junk, vec![7u8; 4096]).unwrap();
    let err = from_file::<f32>(&junk, "/x").unwrap_err();
    assert!(matches!(err, Error::Hdf5 { .. }), "{err:?}");
    assert!(err.to_string().contains("junk.h5"), "{err}");
}

#[test]
fn conversion_happens_only_when_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.h5");
    to_file(&arr1(&[-3i16, 0, 7]), &path, "/x").unwrap();
    let err = from_file::<f64>(&path, "/x").unwrap_err();
    assert!(err.to_string().contains("holds i16, not f64"), "{err}");
    let options = ReadOptions::new().allow_conversion(true);
    let converted = from_file_with::<f64>(&path, "/x", &options).unwrap();
    assert_eq!(converted, arr1(&[-3.0, 0.0, 7.0]).into_dyn());

    // A conversion HDF5 does not know is refused even when asked for.
    let file = hdf5::File::create(dir.path().join("s.h5")).unwrap();
    let strings: Vec<hdf5::types::VarLenUnicode> = vec!["a".parse().unwrap()];
    file.new_dataset_builder()
        .with_data(&strings)
        .create("text")
        .unwrap();
    drop(file);
    let err = from_file_with::<f32>(dir.path().join("s.h5"), "/text", &options).unwrap_err();
    assert!(matches!(err, Error::NoConversion { .. }), "{err:?}");
    assert!(err.to_string().contains("variable-length strings"), "{err}");
    let err = from_file::<f32>(dir.path().join("s.h5"), "/text").unwrap_err();
    assert!(
        err.to_string()
            .contains("holds variable-length strings, not f32"),
        "{err}"
    );
}

#[test]
fn bool_datasets_holding_other_bytes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.h5");
    to_file(&arr1(&[false, true, false, true]), &path, "/b").unwrap();
    {
        // Overwrite element 2 with the byte 2, through the enum type itself (no conversion,
        // so HDF5 stores the byte as it is).
        let file = hdf5::File::open_rw(&path).unwrap();
        let ds = file.dataset("b").unwrap();
        let dtype = ds.dtype().unwrap();
        // Four one-byte elements of the dataset's own type.
        let bytes = [0u8, 1, 2, 1];
        // SAFETY: `bytes` holds the dataset's four bytes.
        unsafe { array_io::transfer::write(&ds, &dtype, None, bytes.as_ptr().cast(), 4) }.unwrap();
    }
    let err = from_file::<bool>(&path, "/b").unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidBool {
                index: 2,
                value: 2,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("not a bool"), "{err}");
}

#[test]
fn batched_reads_cover_the_array_exactly_once_in_row_major_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.h5");
    let shape = [7usize, 5, 6];
    let array = sample_array::<i32>(&shape, 3);
    to_file(&array, &path, "/x").unwrap();
    for chunk_shape in [[2, 2, 4], [7, 5, 6], [1, 1, 1], [3, 10, 100]] {
        let mut seen = ArrayD::<u8>::zeros(IxDyn(&shape));
        let mut previous: Option<Vec<usize>> = None;
        let batches = from_file_batched::<i32>(&path, "/x", &chunk_shape).unwrap();
        let expected_count: usize = shape
            .iter()
            .zip(&chunk_shape)
            .map(|(n, c)| n.div_ceil(*c))
            .product();
        assert_eq!(batches.total(), expected_count);
        let mut count = 0;
        for item in batches {
            let (chunk, offsets) = item.unwrap();
            if let Some(prev) = &previous {
                assert!(
                    prev < &offsets,
                    "row-major order: {prev:?} then {offsets:?}"
                );
            }
            previous = Some(offsets.clone());
            for d in 0..3 {
                let want = chunk_shape[d].min(shape[d] - offsets[d]);
                assert_eq!(chunk.shape()[d], want, "clipped at the boundary");
            }
            let slice = s![
                offsets[0]..offsets[0] + chunk.shape()[0],
                offsets[1]..offsets[1] + chunk.shape()[1],
                offsets[2]..offsets[2] + chunk.shape()[2]
            ];
            assert_eq!(chunk, array.slice(slice).into_dyn());
            seen.slice_mut(slice).mapv_inplace(|n| n + 1);
            count += 1;
        }
        assert_eq!(count, expected_count);
        assert!(seen.iter().all(|&n| n == 1), "every element exactly once");
    }
}

#[test]
fn batched_reads_clip_like_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.h5");
    to_file(&arr1(&[1u16, 2, 3, 4, 5]), &path, "/x").unwrap();
    let chunks: Vec<(Vec<u16>, Vec<usize>)> = from_file_batched::<u16>(&path, "/x", &[2])
        .unwrap()
        .map(|r| {
            let (c, o) = r.unwrap();
            (c.iter().copied().collect(), o)
        })
        .collect();
    assert_eq!(
        chunks,
        [
            (vec![1, 2], vec![0]),
            (vec![3, 4], vec![2]),
            (vec![5], vec![4])
        ]
    );
}

#[test]
fn batched_reads_of_scalars_and_empty_arrays() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.h5");
    to_file(&ndarray::arr0(2.5f64), &path, "/scalar").unwrap();
    let all: Vec<_> = from_file_batched::<f64>(&path, "/scalar", &[])
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].0, ndarray::arr0(2.5).into_dyn());
    assert!(all[0].1.is_empty());
    to_file(&ArrayD::<f64>::zeros(IxDyn(&[4, 0])), &path, "/empty").unwrap();
    assert_eq!(
        from_file_batched::<f64>(&path, "/empty", &[2, 2])
            .unwrap()
            .count(),
        0
    );
}

#[test]
fn batched_reads_refuse_bad_chunk_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.h5");
    to_file(&Array2::<f32>::zeros((4, 4)), &path, "/x").unwrap();
    for bad in [&[2usize][..], &[2, 2, 2], &[2, 0], &[]] {
        let err = from_file_batched::<f32>(&path, "/x", bad)
            .err()
            .expect("refused");
        assert!(matches!(err, Error::InvalidChunkShape { .. }), "{err:?}");
        let text = err.to_string();
        assert!(
            text.contains(&format!("{bad:?}")) && text.contains("\"/x\""),
            "{text}"
        );
    }
}

#[test]
fn from_file_rows_gathers_rows_in_any_order_with_repeats_and_negative_indices() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rows.h5");
    let data = sample_array::<i32>(&[40, 3, 4], 7);
    to_file(&data, &path, "/x").unwrap();
    let rows: [i64; 7] = [5, 0, 39, 5, -1, 6, 7];
    let got: ArrayD<i32> = array_io::from_file_rows(&path, "/x", &rows).unwrap();
    assert_eq!(got.shape(), &[7, 3, 4]);
    for (k, &r) in rows.iter().enumerate() {
        let row = if r < 0 { 40 + r } else { r } as usize;
        assert_eq!(
            got.index_axis(ndarray::Axis(0), k),
            data.index_axis(ndarray::Axis(0), row),
            "index {r}"
        );
    }
    let none: ArrayD<i32> = array_io::from_file_rows(&path, "/x", &[]).unwrap();
    assert_eq!(none.shape(), &[0, 3, 4]);
    for bad in [40, -41] {
        let err = array_io::from_file_rows::<i32>(&path, "/x", &[1, bad]).unwrap_err();
        assert!(
            matches!(err, Error::RowOutOfRange { index, rows: 40, .. } if index == bad),
            "{err:?}"
        );
        assert!(
            err.to_string().ends_with(&format!(
                "index {bad} is out of range for axis 0 with size 40"
            )),
            "{err}"
        );
    }
    // to_file replaces the file: the scalar goes into one of its own.
    let scalar_path = dir.path().join("scalar.h5");
    let one = arr1(&[1.5f32])
        .into_dyn()
        .index_axis(ndarray::Axis(0), 0)
        .to_owned();
    to_file(&one, &scalar_path, "/s").unwrap();
    let scalar = array_io::from_file_rows::<f32>(&scalar_path, "/s", &[0]).unwrap_err();
    assert!(scalar.to_string().contains("is a scalar"), "{scalar}");
}
