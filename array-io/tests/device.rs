//! Device arrays on the CUDA/cuFile emulator (device memory unreadable by host code, every
//! range bounds-checked): each test body runs in a child process that loads the emulator as
//! libcuda and libcufile, through cudarc's safe API as a user would. The parent checks the
//! child's log (which path each read took, and why) and the emulator's exit report (no leaks,
//! no out-of-bounds access, cuFile used or not).
//!
//! The parent runs h5py (to make test files) but never opens HDF5 files itself, so forking
//! children is safe here (see tests/settings.rs).

mod common;

use array_io::{
    from_file, from_file_batched, from_file_batched_to_device, from_file_to_device,
    from_file_to_device_with, to_file, to_file_compressed, Compression, DeviceArray, Error,
    ReadOptions,
};
use common::*;
use ndarray::{ArrayD, IxDyn, SliceInfoElem};
use std::path::{Path, PathBuf};

const DIR_VAR: &str = "ARRAY_IO_TEST_DIR";

fn test_dir() -> PathBuf {
    PathBuf::from(std::env::var(DIR_VAR).expect("the parent passes the test directory"))
}

/// Writes h5py's test files into a fresh directory (in the parent).
fn h5py_files() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    if !is_child_any() {
        run_h5py("write", dir.path());
    }
    dir
}

// ---- round trips of every element type and rank through device memory ----

fn device_round_trip<T: Sample>(dir: &Path, entries: &mut Vec<(String, Entry)>) {
    let stream = stream();
    for (rank, shape) in SHAPES.iter().chain(EMPTY_SHAPES.iter()).enumerate() {
        let host = sample_array::<T>(shape, rank as u64 + 5);
        let device = DeviceArray::from_host(&stream, &host).unwrap();
        let sub = format!("{}-{rank}", T::NAME);
        let path = dir.join(&sub).join("d.h5");
        let name = format!("/g/{}", T::NAME);
        to_file(&device, &path, &name).unwrap();
        // Read back into device memory, and on the host, byte for byte.
        let back: DeviceArray<T> = from_file_to_device(&path, &name, &stream).unwrap();
        assert_eq!(back.shape(), *shape);
        let back = back.to_host().unwrap();
        assert_eq!(bytes_of(&back), bytes_of(&host), "{} {shape:?}", T::NAME);
        assert_eq!(
            bytes_of(&from_file::<T>(&path, &name).unwrap()),
            bytes_of(&host)
        );
        entries.push((
            format!("{sub}/d.h5"),
            Entry {
                name,
                dtype: dtype_name::<T>().into(),
                shape: shape.to_vec(),
                bytes: bytes_of(&host),
            },
        ));
    }
}

fn round_trip_body() {
    let dir = test_dir();
    let mut entries = Vec::new();
    device_round_trip::<i8>(&dir, &mut entries);
    device_round_trip::<i16>(&dir, &mut entries);
    device_round_trip::<i32>(&dir, &mut entries);
    device_round_trip::<i64>(&dir, &mut entries);
    device_round_trip::<isize>(&dir, &mut entries);
    device_round_trip::<u8>(&dir, &mut entries);
    device_round_trip::<u16>(&dir, &mut entries);
    device_round_trip::<u32>(&dir, &mut entries);
    device_round_trip::<u64>(&dir, &mut entries);
    device_round_trip::<usize>(&dir, &mut entries);
    device_round_trip::<half::f16>(&dir, &mut entries);
    device_round_trip::<f32>(&dir, &mut entries);
    device_round_trip::<f64>(&dir, &mut entries);
    device_round_trip::<bool>(&dir, &mut entries);
    write_manifest(&dir, &entries);
}

fn round_trip_test(name: &str, flag: &str) -> Option<ChildRun> {
    let dir = tempfile::tempdir().unwrap();
    let dir_text = dir.path().to_str().unwrap().to_string();
    let env = [
        ("H5GDS_USE_VFD_GDS", flag),
        ("H5GDS_STAGING_BUFFER_SIZE", "4K"),
        // Copies run at synchronization, as a GPU may run them late: a staging buffer reused
        // before its copy has run shows as wrong bytes.
        ("H5GDS_EMU_DEFER_ASYNC", "1"),
        (DIR_VAR, dir_text.as_str()),
        ("H5GDS_LOG", "debug"),
    ];
    let run = in_child(name, true, &env, round_trip_body);
    if let Some(run) = &run {
        run.assert_clean();
        // h5py reads what array-io wrote from device memory.
        let out = run_h5py("check", dir.path());
        assert_eq!(out.trim(), format!("OK {}", 14 * 8));
    }
    run
}

#[test]
fn every_type_and_rank_round_trips_through_device_memory_with_gds() {
    let Some(run) = round_trip_test(
        "every_type_and_rank_round_trips_through_device_memory_with_gds",
        "1",
    ) else {
        return;
    };
    assert!(run.counter("cufile writes") > 0, "{:?}", run.report);
    assert!(run.counter("cufile reads") > 0, "{:?}", run.report);
    let log = run.stderr();
    assert!(
        log.contains("straight from device memory through the gds driver"),
        "{log}"
    );
    assert!(
        log.contains("straight into device memory through the gds driver"),
        "{log}"
    );
    assert!(log.contains("bool values are checked on the host"), "{log}");
}

#[test]
fn every_type_and_rank_round_trips_through_device_memory_staged() {
    let Some(run) = round_trip_test(
        "every_type_and_rank_round_trips_through_device_memory_staged",
        "0",
    ) else {
        return;
    };
    assert_eq!(run.counter("cufile writes"), 0, "{:?}", run.report);
    assert_eq!(run.counter("cufile reads"), 0, "{:?}", run.report);
    let log = run.stderr();
    assert!(log.contains("H5GDS_USE_VFD_GDS=0"), "{log}");
    assert!(!log.contains("straight into device memory"), "{log}");
}

// ---- h5py's files into device memory ----

fn device_read_and_compare<T: Sample>(path: &Path, entry: &Entry) {
    let array: DeviceArray<T> = from_file_to_device(path, &entry.name, stream())
        .unwrap_or_else(|e| panic!("{}: {e}", entry.name));
    assert_eq!(array.shape(), entry.shape.as_slice(), "{}", entry.name);
    let host = array.to_host().unwrap();
    assert_eq!(
        bytes_of(&host),
        entry.bytes,
        "{} ({})",
        entry.name,
        entry.dtype
    );
}

fn h5py_device_body() {
    let dir = test_dir();
    let file = dir.join("h5py.h5");
    for entry in h5py_manifest(&dir) {
        for_dtype!(entry.dtype.as_str(), device_read_and_compare(&file, &entry));
    }
}

#[test]
fn h5py_files_are_read_into_device_memory_with_gds() {
    let name = "h5py_files_are_read_into_device_memory_with_gds";
    let dir = h5py_files();
    let dir_text = dir.path().to_str().unwrap().to_string();
    let env = [
        ("H5GDS_USE_VFD_GDS", "1"),
        ("H5GDS_STAGING_BUFFER_SIZE", "64K"),
        ("H5GDS_LOG", "debug"),
        (DIR_VAR, dir_text.as_str()),
    ];
    let Some(run) = in_child(name, true, &env, h5py_device_body) else {
        return;
    };
    run.assert_clean();
    assert!(run.counter("cufile reads") > 0, "{:?}", run.report);
    let log = run.stderr();
    // Each unsafe layout went through host memory, saying why; safe ones went direct.
    for (dataset, why) in [
        ("/gzip", "filtered (compressed)"),
        ("/sparse", "was never written, so HDF5 fills it"),
        ("/unwritten", "storage was never written"),
        ("/compact", "compact"),
        ("/external", "external files"),
        ("/big_endian", "HDF5 converts"),
        ("/contiguous/bool/rank2", "bool values are checked"),
    ] {
        let line = log
            .lines()
            .find(|l| l.contains(&format!("{dataset:?}")) && l.contains("through pinned host"))
            .unwrap_or_else(|| panic!("no staging line for {dataset} in:\n{log}"));
        assert!(line.contains(why), "{dataset}: {line}");
    }
    for dataset in [
        "/chunked",
        "/big",
        "/contiguous/float32/rank3",
        "/big_chunked",
    ] {
        assert!(
            log.lines().any(|l| l.contains(&format!("{dataset:?}"))
                && l.contains("straight into device memory")),
            "{dataset} did not go direct:\n{log}"
        );
    }
    // The sparse chunked dataset mixes: allocated chunks direct, missing ones staged.
    assert!(log
        .lines()
        .any(|l| l.contains("\"/sparse\"") && l.contains("straight into")));
}

#[test]
fn h5py_files_are_read_into_device_memory_staged_in_small_pieces() {
    let name = "h5py_files_are_read_into_device_memory_staged_in_small_pieces";
    let dir = h5py_files();
    let dir_text = dir.path().to_str().unwrap().to_string();
    let env = [
        ("H5GDS_USE_VFD_GDS", "0"),
        ("H5GDS_STAGING_BUFFER_SIZE", "4K"),
        ("H5GDS_EMU_DEFER_ASYNC", "1"),
        ("H5GDS_LOG", "debug"),
        (DIR_VAR, dir_text.as_str()),
    ];
    let Some(run) = in_child(name, true, &env, h5py_device_body) else {
        return;
    };
    run.assert_clean();
    assert_eq!(run.counter("cufile reads"), 0, "{:?}", run.report);
    // The read-only file's own bytes take the stored way (read with no HDF5 call, one copy up);
    // what it does not serve (a conversion, chunks never written) is staged through 4 KiB pieces.
    let log = run.stderr();
    for (dataset, way) in [
        ("/big", "stored"),
        ("/gzip", "stored"),
        ("/big_endian", "staged"),
        ("/sparse", "staged"),
    ] {
        assert!(
            log.lines()
                .any(|l| l.contains(&format!("{dataset:?}")) && l.contains(&format!("way={way}"))),
            "{dataset} did not take the {way} way:\n{log}"
        );
    }
}

/// Reads of a read-only file into device memory take the engine's stored way (no HDF5 call)
/// where the driver would stage them anyway, as Python's do: contiguous, chunked and compressed
/// datasets, whole and in batches, byte for byte; and never where the driver takes the pointer.
fn stored_way_body() {
    let dir = test_dir();
    let stream = stream();
    let host = sample_array::<f32>(&[96, 40], 11);
    let (plain, packed) = (dir.join("plain.h5"), dir.join("packed.h5"));
    to_file(&host, &plain, "/x").unwrap();
    let device = DeviceArray::from_host(&stream, &host).unwrap();
    to_file_compressed(&device, &packed, "/x", &[16, 8], Compression::Deflate).unwrap();
    for path in [&plain, &packed] {
        let back = from_file_to_device::<f32>(path, "/x", &stream).unwrap();
        assert_eq!(back.to_host().unwrap(), host, "{path:?}");
        let mut whole = ArrayD::<f32>::zeros(IxDyn(&[96, 40]));
        for batch in from_file_batched_to_device::<f32>(path, "/x", &[32, 40], &stream).unwrap() {
            let (batch, at) = batch.unwrap();
            let rows = at[0]..at[0] + batch.shape()[0];
            let rows: [SliceInfoElem; 2] = [rows.into(), (..).into()];
            whole
                .slice_mut(rows.as_slice())
                .assign(&batch.to_host().unwrap());
        }
        assert_eq!(whole, host, "{path:?} in batches");
    }
}

#[test]
fn read_only_files_are_read_into_device_memory_with_no_hdf5_call_where_the_driver_would_stage() {
    let name =
        "read_only_files_are_read_into_device_memory_with_no_hdf5_call_where_the_driver_would_stage";
    for (setting, value, stored) in [
        ("H5GDS_USE_VFD_GDS", "0", true),
        ("H5GDS_COMPAT_MODE", "on", true),
        ("H5GDS_USE_VFD_GDS", "1", false),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let dir_text = dir.path().to_str().unwrap().to_string();
        let env = [
            (setting, value),
            ("H5GDS_GPU_CODEC", "0"),
            ("H5GDS_LOG", "debug"),
            (DIR_VAR, dir_text.as_str()),
        ];
        let Some(run) = in_child(name, true, &env, stored_way_body) else {
            return;
        };
        run.assert_clean();
        let log = run.stderr();
        // The reads' verdicts (the compressed file's write has its own, `way=host-encoded`).
        let ways: Vec<&str> = (log.lines())
            .filter(|l| l.contains("way=") && l.contains("h5gds.read"))
            .collect();
        // Per file: the whole read and its three batches.
        let stored_lines = ways.iter().filter(|l| l.contains("way=stored")).count();
        if stored {
            assert_eq!(
                (stored_lines, ways.len()),
                (8, 8),
                "{setting}={value}:\n{log}"
            );
            assert!(
                ways.iter().all(|l| l.contains("read with no HDF5 call")),
                "{log}"
            );
            assert_eq!(run.counter("cufile reads"), 0, "{:?}", run.report);
        } else {
            assert_eq!(stored_lines, 0, "{setting}={value}:\n{log}");
            assert!(ways.iter().any(|l| l.contains("way=direct")), "{log}");
            assert!(ways.iter().any(|l| l.contains("way=host-decoded")), "{log}");
        }
    }
}

// ---- batched reads into device memory ----

fn device_batched<T: Sample>(path: &Path, entry: &Entry, chunk_shape: &[usize]) {
    let stream = stream();
    let shape = &entry.shape;
    let mut whole = ArrayD::<T>::from_elem(IxDyn(shape), T::sample(0));
    let mut seen = ArrayD::<u32>::zeros(IxDyn(shape));
    let batches =
        from_file_batched_to_device::<T>(path, &entry.name, chunk_shape, &stream).unwrap();
    for item in batches {
        let (chunk, offsets) = item.unwrap();
        let chunk = chunk.to_host().unwrap();
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
        "{} in {chunk_shape:?}",
        entry.name
    );
}

fn batched_body() {
    let dir = test_dir();
    let file = dir.join("h5py.h5");
    let entries = h5py_manifest(&dir);
    let cases: [(&str, &[usize]); 8] = [
        ("/big_chunked", &[100, 128]),
        ("/big_chunked", &[64, 100]),
        ("/sparse", &[3, 4]),
        ("/gzip", &[16, 40]),
        ("/chunked", &[7, 30]),
        ("/contiguous/int16/rank3", &[1, 2, 3]),
        ("/contiguous/float64/rank0", &[]),
        ("/empty2", &[2, 2]),
    ];
    for (name, chunk_shape) in cases {
        let entry = entries.iter().find(|e| e.name == name).unwrap();
        for_dtype!(
            entry.dtype.as_str(),
            device_batched(&file, entry, chunk_shape)
        );
    }
}

#[test]
fn batched_device_reads_cover_everything_once_with_gds() {
    let name = "batched_device_reads_cover_everything_once_with_gds";
    let dir = h5py_files();
    let dir_text = dir.path().to_str().unwrap().to_string();
    let env = [("H5GDS_USE_VFD_GDS", "1"), (DIR_VAR, dir_text.as_str())];
    if let Some(run) = in_child(name, true, &env, batched_body) {
        run.assert_clean();
        assert!(run.counter("cufile reads") > 0, "{:?}", run.report);
    }
}

#[test]
fn batched_device_reads_cover_everything_once_staged() {
    let name = "batched_device_reads_cover_everything_once_staged";
    let dir = h5py_files();
    let dir_text = dir.path().to_str().unwrap().to_string();
    let env = [
        ("H5GDS_USE_VFD_GDS", "0"),
        ("H5GDS_STAGING_BUFFER_SIZE", "8K"),
        (DIR_VAR, dir_text.as_str()),
    ];
    if let Some(run) = in_child(name, true, &env, batched_body) {
        run.assert_clean();
        assert_eq!(run.counter("cufile reads"), 0, "{:?}", run.report);
    }
}

// ---- streams, contexts, errors and faults ----

#[test]
fn contexts_and_extra_streams_work_and_errors_match_the_host() {
    let name = "contexts_and_extra_streams_work_and_errors_match_the_host";
    let run = in_child(name, true, &[("H5GDS_USE_VFD_GDS", "1")], || {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.h5");
        let ctx = cudarc::driver::CudaContext::new(0).unwrap();
        // A second stream puts cudarc into multi-stream mode (events recorded and waited on).
        let stream = ctx.new_stream().unwrap();
        let host = sample_array::<f32>(&[33, 17], 1);
        let device = DeviceArray::from_host(&stream, &host).unwrap();
        to_file(&device, &path, "/x").unwrap();
        let back = from_file_to_device::<f32>(&path, "/x", &ctx).unwrap();
        assert_eq!(back.to_host().unwrap(), host);
        let zeros = DeviceArray::<u16>::zeros(&ctx, &[5, 4]).unwrap();
        assert_eq!(
            zeros.to_host().unwrap(),
            ArrayD::<u16>::zeros(IxDyn(&[5, 4]))
        );

        let err = from_file_to_device::<f64>(&path, "/x", &stream).unwrap_err();
        assert!(err.to_string().contains("holds f32, not f64"), "{err}");
        let err = from_file_to_device::<f32>(&path, "/y", &stream).unwrap_err();
        assert!(matches!(err, Error::NoSuchDataset { .. }), "{err:?}");
        let err =
            from_file_to_device::<f32>(dir.path().join("nope.h5"), "/x", &stream).unwrap_err();
        assert!(matches!(err, Error::FileNotFound { .. }), "{err:?}");
        let err = to_file(&device, dir.path(), "/x").unwrap_err();
        assert!(matches!(err, Error::PathIsDirectory { .. }), "{err:?}");
        let err = to_file(&device, &path, "relative").unwrap_err();
        assert!(matches!(err, Error::InvalidDatasetName { .. }), "{err:?}");
        let err = from_file_batched_to_device::<f32>(&path, "/x", &[4], &stream)
            .err()
            .unwrap();
        assert!(matches!(err, Error::InvalidChunkShape { .. }), "{err:?}");
        let slice = stream.alloc_zeros::<i32>(6).unwrap();
        let err = DeviceArray::from_slice(slice, &[4, 2]).unwrap_err();
        assert!(err.to_string().contains("[4, 2] holds 8 elements"), "{err}");

        // Allowed conversion into device memory goes through host memory.
        let options = ReadOptions::new().allow_conversion(true);
        let wide = from_file_to_device_with::<f64>(&path, "/x", &stream, &options).unwrap();
        assert_eq!(wide.to_host().unwrap(), host.mapv(f64::from));
    });
    if let Some(run) = run {
        run.assert_clean();
    }
}

#[test]
fn a_failed_device_copy_fails_the_read() {
    let name = "a_failed_device_copy_fails_the_read";
    let dir = tempfile::tempdir().unwrap();
    let dir_text = dir.path().to_str().unwrap().to_string();
    // Copy 1 uploads the array; copy 2 is the read's (the stored way: the file is read-only and
    // H5GDS_USE_VFD_GDS=0 stages, so its bytes are read with no HDF5 call and copied up once).
    let env = [
        ("H5GDS_USE_VFD_GDS", "0"),
        ("H5GDS_STAGING_BUFFER_SIZE", "4K"),
        ("H5GDS_EMU_FAIL_COPY", "2"),
        (DIR_VAR, dir_text.as_str()),
    ];
    let run = in_child(name, true, &env, || {
        let path = test_dir().join("x.h5");
        let stream = stream();
        let host = sample_array::<u32>(&[10_000], 3);
        to_file(&host, &path, "/x").unwrap();
        let _uploaded = DeviceArray::from_host(&stream, &host).unwrap();
        let err = from_file_to_device::<u32>(&path, "/x", &stream).unwrap_err();
        // The engine's copy up failed: a device failure naming CUDA's call and the dataset.
        let Error::Engine { source, .. } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(source.kind(), h5gds_engine::ErrorKind::Device, "{err:?}");
        assert!(err.to_string().contains("cuMemcpy"), "{err}");
        assert_eq!(source.facts().dataset.as_deref(), Some("/x"), "{err:?}");
    });
    if let Some(run) = run {
        run.assert_clean();
    }
}

#[test]
fn arrays_on_another_device_go_direct() {
    let name = "arrays_on_another_device_go_direct";
    let env = [
        ("H5GDS_EMU_DEVICES", "2"),
        ("H5GDS_USE_VFD_GDS", "1"),
        ("H5GDS_LOG", "debug"),
    ];
    let run = in_child(name, true, &env, || {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d1.h5");
        let ctx = cudarc::driver::CudaContext::new(1).unwrap();
        let host = sample_array::<i64>(&[40, 30], 9);
        let device = DeviceArray::from_host(&ctx, &host).unwrap();
        to_file(&device, &path, "/x").unwrap();
        let back = from_file_to_device::<i64>(&path, "/x", &ctx).unwrap();
        assert_eq!(back.to_host().unwrap(), host);
        assert_eq!(from_file::<i64>(&path, "/x").unwrap(), host);
    });
    if let Some(run) = run {
        run.assert_clean();
        // Through cuFile in device 1's context: no refusal, no staging, nothing of device 1
        // moved in device 0's context or on its streams.
        assert!(run.counter("cufile reads") > 0, "{:?}", run.report);
        assert!(run.counter("cufile writes") > 0, "{:?}", run.report);
        assert_eq!(run.counter("cross-context uses"), 0, "{:?}", run.report);
        let log = run.stderr();
        assert!(log.contains("straight from device memory"), "{log}");
        assert!(log.contains("straight into device memory"), "{log}");
        assert!(!log.contains("through a host staging buffer"), "{log}");
        assert!(!log.contains("through pinned host memory"), "{log}");
        assert!(!log.contains("go through the staged path"), "{log}");
    }
}

#[test]
fn pool_allocated_arrays_go_direct() {
    // With stream-ordered pools (as on real GPUs) cudarc allocates with cuMemAllocAsync: memory
    // of no context, whose range attributes describe the pool's whole reservation.
    let name = "pool_allocated_arrays_go_direct";
    let env = [
        ("H5GDS_EMU_POOLS", "1"),
        ("H5GDS_USE_VFD_GDS", "1"),
        ("H5GDS_LOG", "debug"),
    ];
    let run = in_child(name, true, &env, || {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pool.h5");
        let ctx = cudarc::driver::CudaContext::new(0).unwrap();
        assert!(ctx.has_async_alloc());
        // Another allocation first, so the arrays do not start the pool's range.
        let _other = ctx.default_stream().alloc_zeros::<u8>(3 << 20).unwrap();
        let host = sample_array::<f32>(&[300, 70], 4);
        let device = DeviceArray::from_host(&ctx, &host).unwrap();
        to_file(&device, &path, "/x").unwrap();
        let back = from_file_to_device::<f32>(&path, "/x", &ctx).unwrap();
        assert_eq!(back.to_host().unwrap(), host);
    });
    if let Some(run) = run {
        run.assert_clean();
        assert!(run.counter("cufile reads") > 0, "{:?}", run.report);
        assert!(run.counter("cufile writes") > 0, "{:?}", run.report);
        let log = run.stderr();
        assert!(!log.contains("go through the staged path"), "{log}");
        assert!(!log.contains("through pinned host memory"), "{log}");
    }
}

// ---- the driver's settings, parsed once per read ----

/// Loads of the driver's settings (`VfdSettings::load`) while `read` runs.
fn settings_loads(read: impl FnOnce()) -> usize {
    let before = h5gds::VfdSettings::loads_so_far();
    read();
    h5gds::VfdSettings::loads_so_far() - before
}

#[test]
fn a_read_parses_the_driver_settings_at_most_once() {
    // Compressed chunks decoded on the host's threads (the GPU codec off) asked for the thread
    // count at every step: choosing the decoder, sizing the pieces, decoding each piece, and
    // again for every block of a batched read.
    let name = "a_read_parses_the_driver_settings_at_most_once";
    let env = [("H5GDS_USE_VFD_GDS", "1"), ("H5GDS_GPU_CODEC", "0")];
    let run = in_child(name, true, &env, || {
        let dir = tempfile::tempdir().unwrap();
        let host = sample_array::<f32>(&[64, 48], 5);
        let plain = dir.path().join("plain.h5");
        to_file(&host, &plain, "/x").unwrap();
        let packed = dir.path().join("packed.h5");
        let device = DeviceArray::from_host(stream(), &host).unwrap();
        to_file_compressed(&device, &packed, "/x", &[8, 16], Compression::Deflate).unwrap();
        for path in [&plain, &packed] {
            let loads = settings_loads(|| {
                let back = from_file_to_device::<f32>(path, "/x", stream()).unwrap();
                assert_eq!(back.to_host().unwrap(), host);
            });
            assert!(
                loads <= 1,
                "{path:?}: read loaded the settings {loads} times"
            );
            let loads = settings_loads(|| {
                let batches = from_file_batched_to_device::<f32>(path, "/x", &[16, 48], stream());
                assert_eq!(batches.unwrap().map(Result::unwrap).count(), 4);
            });
            assert!(
                loads <= 1,
                "{path:?}: batches loaded the settings {loads} times"
            );
            let loads = settings_loads(|| assert_eq!(from_file::<f32>(path, "/x").unwrap(), host));
            assert!(
                loads <= 1,
                "{path:?}: host read loaded the settings {loads} times"
            );
            let loads = settings_loads(|| {
                let batches = from_file_batched::<f32>(path, "/x", &[16, 48]);
                assert_eq!(batches.unwrap().map(Result::unwrap).count(), 4);
            });
            assert!(
                loads <= 1,
                "{path:?}: host batches loaded the settings {loads} times"
            );
        }
    });
    if let Some(run) = run {
        run.assert_clean();
    }
}
