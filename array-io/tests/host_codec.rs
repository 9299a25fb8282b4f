//! Chunked datasets (compressed, and unfiltered) read into host arrays with their chunks read and
//! decoded by h5gds on the driver's I/O threads (issue 24): the files of the GPU codec tests
//! (`gpu_codec_files.py`: h5py's gzip, hdf5plugin's Zstd and LZ4, unfiltered chunks, ranks 1
//! to 3 with edge chunks, chunks never written, chunks stored
//! unfiltered, LZ4 chunks of several blocks, shuffle and fletcher32 chains), read whole and in
//! batches with `from_file` / `from_file_batched` and compared byte for byte with h5py; damaged
//! chunks fail naming the chunk; the debug log says who decoded. Each body runs in a child
//! (no GPU, no emulator) whose log the parent reads.

mod common;

use array_io::{from_file, from_file_batched, from_file_rows, Error};
use common::*;
use ndarray::{ArrayD, Slice};
use std::path::Path;

fn run(name: &str, dir: &Path, env: &[(&str, &str)], body: fn()) -> Option<ChildRun> {
    let dir_text = dir.to_str().unwrap().to_string();
    let plugins = hdf5plugin_dir();
    let mut all = vec![
        ("H5GDS_LOG", "debug"),
        ("HDF5_PLUGIN_PATH", plugins.as_str()),
        (DIR_VAR, dir_text.as_str()),
    ];
    all.extend_from_slice(env);
    in_child(name, false, &all, body)
}

fn read_and_compare<T: Sample>(path: &Path, entry: &Entry) {
    let array: ArrayD<T> =
        from_file(path, &entry.name).unwrap_or_else(|e| panic!("{}: {e}", entry.name));
    assert_eq!(
        bytes_of(&array),
        entry.bytes,
        "{} ({})",
        entry.name,
        entry.dtype
    );
}

/// Batches of 11 rows (never chunk-aligned, several chunks each): each matches h5py's bytes.
fn batched_and_compare<T: Sample>(path: &Path, entry: &Entry) {
    let want = expected::<T>(entry);
    let mut batch = entry.shape.clone();
    batch[0] = 11;
    let mut seen = 0;
    for item in from_file_batched::<T>(path, &entry.name, &batch).unwrap() {
        let (chunk, offsets) = item.unwrap_or_else(|e| panic!("{}: {e}", entry.name));
        let mut part = want.view();
        for (axis, (&start, &len)) in offsets.iter().zip(chunk.shape()).enumerate() {
            part.slice_axis_inplace(ndarray::Axis(axis), Slice::from(start..start + len));
        }
        assert_eq!(chunk, part, "{} at {offsets:?}", entry.name);
        seen += chunk.len();
    }
    assert_eq!(seen, want.len(), "{}", entry.name);
}

fn decode_body() {
    let dir = test_dir();
    let file = dir.join("h5py.h5");
    for entry in h5py_manifest(&dir) {
        for_dtype!(entry.dtype.as_str(), read_and_compare(&file, &entry));
        for_dtype!(entry.dtype.as_str(), batched_and_compare(&file, &entry));
    }
}

#[test]
fn every_codec_chain_rank_and_missing_chunk_reads_what_h5py_reads() {
    let name = "every_codec_chain_rank_and_missing_chunk_reads_what_h5py_reads";
    let dir = codec_files();
    for threads in ["1", "3"] {
        let Some(run) = run(
            name,
            dir.path(),
            &[("H5GDS_NTHREADS", threads)],
            decode_body,
        ) else {
            return;
        };
        let log = run.stderr();
        for dataset in [
            "/gzip/rank3",
            "/zstd/sparse",
            "/lz4/blocks",
            "/chain/shuffle_gzip",
            "/chain/fletcher_gzip",
            "/plain/cube",
        ] {
            // The engine's verdict: read with no HDF5 call (the file is read-only), or decoded
            // by h5gds where chunks were never written; never HDF5's filters.
            let by_h5gds = |l: &str| {
                ["stored", "host-decoded"]
                    .iter()
                    .any(|way| l.contains(&format!("host read: way={way}: {dataset}: ")))
            };
            assert!(
                log.lines().any(by_h5gds),
                "{dataset} with {threads} threads:\n{log}"
            );
        }
        // 40x30 in chunks of 10x10, three of them written.
        assert!(
            log.contains(&format!(
                "way=host-decoded: /zstd/sparse: 3 chunks decoded on {threads} threads (read from \
                 the file by those threads), 9 parts of chunks never written read through HDF5"
            )),
            "{log}"
        );
        // The same shape unfiltered: its chunks read from the file by the threads, not by HDF5
        // one after another.
        assert!(
            log.contains(&format!(
                "way=host-decoded: /plain/holes: 3 chunks decoded on {threads} threads (read from \
                 the file by those threads), 9 parts of chunks never written read through HDF5"
            )),
            "{log}"
        );
    }
}

/// Rows in any order with a repeat (several runs sharing chunks): h5py's rows.
fn rows_and_compare<T: Sample>(path: &Path, entry: &Entry) {
    let n = entry.shape[0] as i64;
    let rows: Vec<i64> = [n - 1, 0, 2, 2, n / 2 + 1, 5]
        .into_iter()
        .filter(|&r| r < n)
        .collect();
    let got: ArrayD<T> =
        from_file_rows(path, &entry.name, &rows).unwrap_or_else(|e| panic!("{}: {e}", entry.name));
    let picks: Vec<usize> = rows.iter().map(|&r| r as usize).collect();
    let want = expected::<T>(entry).select(ndarray::Axis(0), &picks);
    assert_eq!(got, want, "{} rows {rows:?}", entry.name);
}

fn rows_body() {
    let dir = test_dir();
    let file = dir.join("h5py.h5");
    for entry in h5py_manifest(&dir) {
        for_dtype!(entry.dtype.as_str(), rows_and_compare(&file, &entry));
    }
}

#[test]
fn row_gathers_decode_each_chunk_once_and_read_what_h5py_reads() {
    let name = "row_gathers_decode_each_chunk_once_and_read_what_h5py_reads";
    let dir = codec_files();
    for threads in ["1", "3"] {
        let Some(run) = run(name, dir.path(), &[("H5GDS_NTHREADS", threads)], rows_body) else {
            return;
        };
        // 40x30 in chunks of 10x10, three written: rows 39, 0, 2, 21, 5 are 5 runs over 9
        // chunks, the 3 written each decoded once; 10 parts of the others filled by HDF5.
        let log = run.stderr();
        assert!(
            log.contains(&format!(
                "gather of \"/zstd/sparse\": way=host-decoded: 5 runs of rows, 3 chunks each \
                 decoded once on {threads} threads, 10 parts of chunks never written read through \
                 HDF5"
            )),
            "{log}"
        );
    }
}

#[test]
fn row_gathers_left_to_hdf5_read_what_h5py_reads() {
    // With H5GDS_HOST_CODEC=0 no filtered chunk is read by h5gds: the distinct rows come from one
    // H5Dread of the union of their runs, then are copied into the caller's order. A gather of
    // unfiltered chunks goes to HDF5 whatever the setting (`policy::gather`), and says why.
    let name = "row_gathers_left_to_hdf5_read_what_h5py_reads";
    let dir = codec_files();
    let Some(run) = run(name, dir.path(), &[("H5GDS_HOST_CODEC", "0")], rows_body) else {
        return;
    };
    let log = run.stderr();
    let decoded = |l: &&str| l.contains("runs of rows,") && !l.contains("\"/plain/");
    assert!(!log.lines().any(|l| decoded(&l)), "{log}");
    assert!(
        log.contains(
            "gather of \"/plain/holes\": way=gather-hdf5: 5 runs of rows in 1 H5Dread calls (its \
             chunks are not filtered)"
        ),
        "{log}"
    );
}

/// 300 runs of one row of a chunked dataset (every other row, last first) and a repeat: their
/// bytes as h5py reads them.
fn grouped_body() {
    let dir = test_dir();
    let name = "/gzip/many";
    let entry = h5py_manifest(&dir).into_iter().find(|e| e.name == name);
    let want = expected::<f32>(&entry.expect("the manifest lists /gzip/many"));
    let rows: Vec<i64> = (0..300).rev().map(|k| 2 * k).chain([10]).collect();
    let got: ArrayD<f32> = from_file_rows(dir.join("h5py.h5"), name, &rows).unwrap();
    let picks: Vec<usize> = rows.iter().map(|&r| r as usize).collect();
    assert_eq!(got, want.select(ndarray::Axis(0), &picks));
}

#[test]
fn row_gathers_left_to_hdf5_read_a_chunked_datasets_runs_in_groups() {
    // HDF5 maps one selection onto a chunked dataset's chunks in time that grows faster than
    // their number: the 300 runs are read 128 at a time, as the Python package reads them.
    let name = "row_gathers_left_to_hdf5_read_a_chunked_datasets_runs_in_groups";
    let dir = codec_files();
    let env = [("H5GDS_HOST_CODEC", "0")];
    let Some(run) = run(name, dir.path(), &env, grouped_body) else {
        return;
    };
    let log = run.stderr();
    assert!(
        log.contains(
            "gather of \"/gzip/many\": way=gather-hdf5: 300 runs of rows in 3 H5Dread calls"
        ),
        "{log}"
    );
}

fn corrupt_body() {
    let dir = test_dir();
    let file = dir.join("h5py.h5");
    let lines = std::fs::read_to_string(dir.join("corrupt.tsv")).unwrap();
    for line in lines.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let (dataset, chunk) = (f[0], f[1]);
        let err = from_file::<f32>(&file, dataset)
            .err()
            .unwrap_or_else(|| panic!("{dataset}: a damaged chunk read"));
        assert!(
            matches!(err, Error::ChunkDecode { .. }),
            "{dataset}: {err:?}"
        );
        let text = err.to_string();
        assert!(text.contains(&format!("dataset {dataset:?}")), "{text}");
        assert!(text.contains(&format!("chunk at [{chunk}]")), "{text}");
        println!("{text}");
    }
}

#[test]
fn damaged_chunks_fail_the_read_naming_dataset_and_chunk() {
    let name = "damaged_chunks_fail_the_read_naming_dataset_and_chunk";
    let dir = codec_files();
    let Some(run) = run(name, dir.path(), &[], corrupt_body) else {
        return;
    };
    // Wrong checksums behind intact data are caught too: the Adler-32 by libdeflate, the
    // Zstandard content checksum by zstd, the Fletcher-32 by h5gds.
    let out = run.stdout();
    for (dataset, why) in [
        (
            "/checksum/deflate",
            "its deflate (zlib) data does not decode",
        ),
        (
            "/checksum/zstd_wrong",
            "its Zstandard frame does not decode",
        ),
        (
            "/checksum/fletcher",
            "its Fletcher-32 checksum does not match",
        ),
    ] {
        let line = out
            .lines()
            .find(|l| l.contains(&format!("{dataset:?}")))
            .unwrap_or_else(|| panic!("no error for {dataset}: {out}"));
        assert!(
            line.contains(why) && line.contains("chunk at [50]"),
            "{line}"
        );
    }
}

#[test]
fn h5gds_host_codec_0_leaves_decoding_to_hdf5() {
    let name = "h5gds_host_codec_0_leaves_decoding_to_hdf5";
    let dir = codec_files();
    let Some(run) = run(name, dir.path(), &[("H5GDS_HOST_CODEC", "0")], decode_body) else {
        return;
    };
    let log = run.stderr();
    assert!(
        log.contains("way=hdf5: /zstd/rank2: one H5Dread: H5GDS_HOST_CODEC=0 leaves decoding to HDF5's filters"),
        "{log}"
    );
    // Filtered chunks all go to HDF5's filters; unfiltered ones stay h5gds's (`/plain/...`).
    let decoded = |l: &&str| l.contains("chunks decoded on") && !l.contains("/plain/");
    assert!(!log.lines().any(|l| decoded(&l)), "{log}");
    assert!(log.contains("way=stored: /plain/cube: "), "{log}");
}
