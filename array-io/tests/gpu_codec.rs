//! Compressed datasets read into device memory with nvCOMP on the emulators: the CUDA/cuFile
//! emulator as libcuda/libcufile and the nvCOMP emulator as libnvcomp (emulators/nvcomp,
//! reference codecs over emulated device memory). h5py with hdf5plugin writes the files
//! (`gpu_codec_files.py`); each body runs in a child process and compares every byte with what
//! h5py read; the parent checks the child's log (which path, and why) and the emulator's report.
//!
//! Build the emulators first: `cargo build -p h5gds-cuda-emulator -p h5gds-nvcomp-emulator`.

mod common;

use array_io::{from_file_batched_to_device, from_file_to_device, DeviceArray, Error};
use common::*;
use ndarray::Slice;
use std::path::{Path, PathBuf};

/// The damaged datasets: (name, chunk offset, how it was damaged).
fn damaged(dir: &Path) -> Vec<(String, String, String)> {
    std::fs::read_to_string(dir.join("corrupt.tsv"))
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f[0].into(), f[1].into(), f[2].into())
        })
        .collect()
}

/// Runs `body` in a child on the CUDA and nvCOMP emulators (or, with `nvcomp` false, the CUDA
/// emulator alone), with `env` and the test directory; a variable of `env` with an empty value
/// is left unset.
fn run(name: &str, nvcomp: bool, dir: &Path, env: &[(&str, &str)], body: fn()) -> Option<ChildRun> {
    let libs = (!is_child_any()).then(|| {
        if nvcomp {
            h5gds_tests::nvcomp_emulator::nvcomp_emulator_lib_dir()
        } else {
            h5gds_tests::emulator::emulator_lib_dir()
        }
    });
    let ld = libs
        .as_ref()
        .map(|l| l.ld_library_path().into_string().unwrap())
        .unwrap_or_default();
    let dir_text = dir.to_str().unwrap().to_string();
    let mut all = vec![
        ("H5GDS_USE_VFD_GDS", "1"),
        // The GPU wherever it can: unset, small reads may be decoded on the host's threads.
        ("H5GDS_GPU_CODEC", "1"),
        ("H5GDS_LOG", "debug"),
        // Device work (copies, nvCOMP's calls) runs when its stream is synchronized, as on a
        // GPU: a batch's results read, or its buffers reused, too early show as wrong bytes.
        ("H5GDS_EMU_DEFER_ASYNC", "1"),
        (DIR_VAR, dir_text.as_str()),
        ("LD_LIBRARY_PATH", ld.as_str()),
    ];
    for &(variable, value) in env {
        all.retain(|&(v, _)| v != variable);
        if !value.is_empty() {
            all.push((variable, value));
        }
    }
    in_child(name, true, &all, body)
}

fn read_and_compare<T: Sample>(path: &Path, entry: &Entry) {
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

/// Batches of 7 along every axis (never chunk-aligned): each batch matches h5py's bytes there.
fn batched_and_compare<T: Sample>(path: &Path, entry: &Entry) {
    let expected = expected::<T>(entry);
    let batch = vec![7usize; entry.shape.len()];
    let mut seen = 0;
    for item in from_file_batched_to_device::<T>(path, &entry.name, &batch, stream()).unwrap() {
        let (chunk, offsets) = item.unwrap_or_else(|e| panic!("{}: {e}", entry.name));
        let host = chunk.to_host().unwrap();
        let mut want = expected.view();
        for (axis, (&start, &len)) in offsets.iter().zip(host.shape()).enumerate() {
            want.slice_axis_inplace(ndarray::Axis(axis), Slice::from(start..start + len));
        }
        assert_eq!(host, want, "{} at {offsets:?}", entry.name);
        seen += host.len();
    }
    assert_eq!(seen, expected.len(), "{}", entry.name);
}

fn decode_body() {
    let dir = test_dir();
    let file = dir.join("h5py.h5");
    for entry in h5py_manifest(&dir) {
        for_dtype!(entry.dtype.as_str(), read_and_compare(&file, &entry));
        if entry.name.contains("rank") || entry.name.contains("sparse") {
            for_dtype!(entry.dtype.as_str(), batched_and_compare(&file, &entry));
        }
    }
}

#[test]
fn every_codec_rank_edge_missing_and_unfiltered_chunk_decodes_on_the_gpu() {
    let name = "every_codec_rank_edge_missing_and_unfiltered_chunk_decodes_on_the_gpu";
    let dir = codec_files();
    let Some(run) = run(name, true, dir.path(), &[], decode_body) else {
        return;
    };
    run.assert_clean();
    assert!(run.counter("cufile reads") > 0, "{:?}", run.report);
    let log = run.stderr();
    for codec in ["gzip", "zstd", "lz4"] {
        for kind in ["rank1", "rank2", "rank3", "sparse", "raw"] {
            let dataset = format!("\"/{codec}/{kind}\"");
            assert!(
                log.lines()
                    .any(|l| l.contains(&dataset) && l.contains("decoded on the GPU with nvCOMP")),
                "{dataset} was not decoded on the GPU:\n{log}"
            );
        }
    }
    assert!(log.contains("\"/lz4/blocks\""), "{log}");
    // The sparse datasets' missing chunks were filled by HDF5 through the staged path.
    assert!(
        log.lines().any(|l| l.contains("\"/zstd/sparse\"")
            && l.contains("3 chunks move compressed")
            && l.contains("9 chunks were never written")),
        "{log}"
    );
    // Chains stay on HDF5's CPU filters, saying why.
    for (dataset, why) in [
        (
            "/chain/shuffle_gzip",
            "chain of filters (shuffle (2), deflate (1))",
        ),
        ("/chain/fletcher_gzip", "fletcher32"),
    ] {
        let line = log
            .lines()
            .find(|l| l.contains(&format!("{dataset:?}")) && l.contains("not on the GPU"))
            .unwrap_or_else(|| panic!("no reason for {dataset} in:\n{log}"));
        assert!(line.contains(why), "{line}");
    }
}

fn corrupt_body() {
    let dir = test_dir();
    let file = dir.join("h5py.h5");
    // Checked unless opted out (H5GDS_VERIFY_CHECKSUMS=0).
    let verify = std::env::var(array_io::VERIFY_CHECKSUMS_ENV).as_deref() != Ok("0");
    for (dataset, chunk, how) in damaged(&dir) {
        let result = from_file_to_device::<f32>(&file, &dataset, stream());
        if (how == "adler32" || how == "zstd checksum") && !verify {
            // Intact data behind a wrong checksum decodes on the GPU (nvCOMP checks neither);
            // only the host's check catches it, and opting out skips it.
            let host = result.unwrap().to_host().unwrap();
            assert_eq!(host.len(), 200, "{dataset}");
            println!("read unchecked: {dataset:?}");
            continue;
        }
        let err = result
            .err()
            .unwrap_or_else(|| panic!("{dataset}: a damaged chunk read"));
        assert!(
            matches!(err, Error::ChunkDecode { .. }),
            "{dataset}: {err:?}"
        );
        let text = err.to_string();
        assert!(text.contains(&format!("dataset {dataset:?}")), "{text}");
        assert!(text.contains(&format!("chunk at [{chunk}]")), "{text}");
        let why = match how.as_str() {
            "adler32" => "its decoded bytes have Adler-32",
            "zstd checksum" => "its decoded bytes have the Zstandard content checksum",
            "fletcher32" => "its Fletcher-32 checksum does not match",
            _ => "",
        };
        assert!(text.contains(why), "{text}");
        println!("{text}");
    }
}

/// Where the driver would stage device reads anyway (here: no GDS kernel path, as on the first
/// real-GPU machine; or `compat_mode=on`), the stored chunks of a file open read-only are read by
/// the host's threads into pinned memory and copied up a batch at a time, not one driver read per
/// chunk: the same bytes, no cuFile read, and damaged chunks still named.
#[test]
fn chunks_the_driver_would_stage_are_read_by_host_threads_and_decoded_on_the_gpu() {
    let name = "chunks_the_driver_would_stage_are_read_by_host_threads_and_decoded_on_the_gpu";
    let dir = codec_files();
    for (setting, why) in [
        (("H5GDS_EMU_GDS", "0"), "no nvidia-fs and P2PDMA off"),
        (("H5GDS_COMPAT_MODE", "on"), "compat_mode=on"),
    ] {
        let env = [("H5GDS_USE_VFD_GDS", ""), setting];
        for body in [decode_body as fn(), corrupt_body] {
            let Some(run) = run(name, true, dir.path(), &env, body) else {
                return;
            };
            run.assert_clean();
            assert_eq!(run.counter("cufile reads"), 0, "{:?}", run.report);
            let log = run.stderr();
            let lines: Vec<&str> = log
                .lines()
                .filter(|l| l.contains("chunks move compressed"))
                .collect();
            assert!(!lines.is_empty(), "{log}");
            for line in lines {
                assert!(
                    line.contains("into pinned host memory on 2 threads")
                        && line.contains(why)
                        && line.contains("decoded on the GPU with nvCOMP"),
                    "{line}"
                );
            }
        }
    }
}

/// Reads every dataset of the h5py file whose name ends with `suffix` and compares it with
/// h5py's bytes.
fn read_datasets_ending(suffix: &str) {
    let dir = test_dir();
    let file = dir.join("h5py.h5");
    for entry in h5py_manifest(&dir) {
        if entry.name.ends_with(suffix) {
            for_dtype!(entry.dtype.as_str(), read_and_compare(&file, &entry));
        }
    }
}

fn rank3_body() {
    read_datasets_ending("/rank3");
}

/// Chunks not decoded in place are copied into the output one CUDA call each (a 3-D copy), not
/// one call per row; where CUDA refuses such a copy within device memory (its documentation
/// says it may, for pitches not from cuMemAllocPitch), row by row, with the same bytes.
#[test]
fn chunks_are_placed_one_copy_each_or_row_by_row_where_cuda_refuses() {
    let name = "chunks_are_placed_one_copy_each_or_row_by_row_where_cuda_refuses";
    let dir = codec_files();
    // Three codecs' (9, 10, 11) datasets in chunks of (4, 4, 4): 27 chunks each, 9 x 10 rows of
    // a chunk's width in each of the 3 chunk columns: 270 rows. Stored chunks come up through
    // host memory (no GDS), so the only copies within the device place decoded chunks.
    for (refuse, copies) in [("0", 3 * 27), ("1", 3 * 270)] {
        let env = [
            ("H5GDS_USE_VFD_GDS", ""),
            ("H5GDS_EMU_GDS", "0"),
            ("H5GDS_EMU_REFUSE_STRIDED_DTOD", refuse),
        ];
        let Some(run) = run(name, true, dir.path(), &env, rank3_body) else {
            return;
        };
        run.assert_clean();
        assert_eq!(run.counter("copies dtod"), copies, "{:?}", run.report);
    }
}

#[test]
fn corrupted_chunks_fail_the_read_naming_dataset_and_chunk() {
    let name = "corrupted_chunks_fail_the_read_naming_dataset_and_chunk";
    let dir = codec_files();
    let Some(run) = run(name, true, dir.path(), &[], corrupt_body) else {
        return;
    };
    run.assert_clean();
    assert_eq!(
        run.stdout().matches("chunk at [25]").count(),
        3,
        "{}",
        run.stdout()
    );
    let out = run.stdout();
    for (dataset, why) in [
        ("/gzip/corrupt", "nvcompErrorCannotDecompress"),
        ("/zstd/corrupt", "nvcompErrorCannotDecompress"),
        ("/lz4/corrupt", "its LZ4 block at byte 12 claims"),
    ] {
        let line = out
            .lines()
            .find(|l| l.contains(&format!("{dataset:?}")))
            .unwrap_or_else(|| panic!("no error for {dataset}: {out}"));
        assert!(line.contains(why), "{line}");
    }
}

fn zstd_corrupt_body() {
    let dir = test_dir();
    let err = from_file_to_device::<f32>(dir.join("h5py.h5"), "/zstd/corrupt", stream())
        .expect_err("a damaged chunk fails the read");
    let text = err.to_string();
    match &err {
        Error::ChunkDecode { chunk, .. } => assert_eq!(chunk, &[25], "{text}"),
        other => panic!("not a chunk error: {other:?}"),
    }
    // Only [25]: neither the batch's intact chunks nor a list of them.
    for intact in ["[0]", "[50]", "[75]"] {
        assert!(!text.contains(intact), "{text}");
    }
    println!("{text}");
}

/// /zstd/corrupt's 4 chunks are one batch, its chunk at [25] a truncated frame. Real nvCOMP
/// (6.0, H200; issue 20) does not report such a batch per chunk: under each of the nvCOMP
/// emulator's Zstandard modes (the bad chunk's status alone with no sizes written, every
/// status failed, the call failed, or per chunk) the read names [25] and only [25].
#[test]
fn a_damaged_zstd_chunk_is_named_whatever_nvcomp_reports_for_its_batch() {
    let name = "a_damaged_zstd_chunk_is_named_whatever_nvcomp_reports_for_its_batch";
    let dir = codec_files();
    for (mode, why) in [
        ("", "nvcompErrorCannotDecompress"),
        ("sizes", "nvcompErrorCannotDecompress"),
        ("statuses", "nvcompErrorCannotDecompress"),
        ("call", "nvcompErrorCudaError"),
        ("chunk", "nvcompErrorCannotDecompress"),
    ] {
        let env = [("H5GDS_EMU_NVCOMP_ZSTD_CORRUPT", mode)];
        let Some(run) = run(name, true, dir.path(), &env, zstd_corrupt_body) else {
            return;
        };
        run.assert_clean();
        let out = run.stdout();
        let line = out
            .lines()
            .find(|l| l.contains("\"/zstd/corrupt\""))
            .unwrap_or_else(|| panic!("mode {mode:?}: no error in {out}"));
        assert!(line.contains("chunk at [25]: "), "mode {mode:?}: {line}");
        assert!(line.contains(why), "mode {mode:?}: {line}");
    }
}

/// Checksums are checked by default (`H5GDS_VERIFY_CHECKSUMS` unset or 1): a deflate chunk
/// whose Adler-32 is wrong behind intact Deflate data, and a Zstandard frame whose content
/// checksum is wrong behind intact data, decode on the GPU (nvCOMP checks neither) and are
/// refused by the host's check naming the chunk; with 0 they read unchecked. A wrong
/// Fletcher-32 (a chain the host decodes) is refused either way.
#[test]
fn wrong_checksums_fail_the_read_unless_opted_out() {
    let name = "wrong_checksums_fail_the_read_unless_opted_out";
    let dir = codec_files();
    for value in ["", "1", "0"] {
        let env = [(array_io::VERIFY_CHECKSUMS_ENV, value)];
        let Some(run) = run(name, true, dir.path(), &env, corrupt_body) else {
            return;
        };
        run.assert_clean();
        let out = run.stdout();
        let checked = value != "0";
        for dataset in ["/checksum/deflate", "/checksum/zstd_wrong"] {
            let refused = format!("dataset {dataset:?}, chunk at [50]");
            let unchecked = format!("read unchecked: {dataset:?}");
            assert_eq!(out.contains(&refused), checked, "{value:?}: {out}");
            assert_eq!(out.contains(&unchecked), !checked, "{value:?}: {out}");
        }
        assert!(
            out.contains("\"/checksum/fletcher\", chunk at [50]"),
            "{value:?}: {out}"
        );
    }
}

fn fault_body() {
    let dir = test_dir();
    let err = from_file_to_device::<f32>(dir.join("h5py.h5"), "/zstd/rank1", stream())
        .expect_err("a failed decode fails the read");
    println!("{err}");
}

#[test]
fn a_chunk_the_gpu_fails_to_decode_fails_the_read() {
    let name = "a_chunk_the_gpu_fails_to_decode_fails_the_read";
    let dir = codec_files();
    let env = [("H5GDS_EMU_NVCOMP_FAIL_CHUNK", "3")];
    let Some(run) = run(name, true, dir.path(), &env, fault_body) else {
        return;
    };
    run.assert_clean();
    let out = run.stdout();
    // The third chunk of /zstd/rank1 (chunks of 128) starts at element 256.
    assert!(out.contains("\"/zstd/rank1\", chunk at [256]"), "{out}");
    assert!(out.contains("nvcompErrorCannotDecompress"), "{out}");
}

#[test]
fn a_failed_nvcomp_call_fails_the_read() {
    let name = "a_failed_nvcomp_call_fails_the_read";
    let dir = codec_files();
    let env = [("H5GDS_EMU_NVCOMP_FAIL_CALL", "1")];
    let Some(run) = run(name, true, dir.path(), &env, fault_body) else {
        return;
    };
    run.assert_clean();
    let out = run.stdout();
    assert!(out.contains("\"/zstd/rank1\""), "{out}");
    assert!(out.contains("nvcompErrorCudaError"), "{out}");
    // Each chunk, decoded again in a call of its own, decodes: no chunk is blamed as corrupt.
    assert!(
        out.contains("decodes in a call of its own, so the device rather than the file"),
        "{out}"
    );
}

fn without_nvcomp_body() {
    let dir = test_dir();
    let file = dir.join("h5py.h5");
    // Without nvCOMP, HDF5's own filters decode: deflate built in, Zstandard and LZ4 from
    // hdf5plugin's plugin directory (HDF5_PLUGIN_PATH).
    for entry in h5py_manifest(&dir) {
        for_dtype!(entry.dtype.as_str(), read_and_compare(&file, &entry));
    }
}

#[test]
fn without_nvcomp_hdf5_decodes_on_the_host_and_the_log_says_why() {
    let name = "without_nvcomp_hdf5_decodes_on_the_host_and_the_log_says_why";
    let dir = codec_files();
    let plugins = hdf5plugin_dir();
    let env = [("HDF5_PLUGIN_PATH", plugins.as_str())];
    let Some(run) = run(name, false, dir.path(), &env, without_nvcomp_body) else {
        return;
    };
    run.assert_clean();
    let log = run.stderr();
    for dataset in ["/gzip/rank2", "/zstd/rank2", "/lz4/rank2"] {
        assert!(
            log.lines().any(|l| l.contains(&format!("{dataset:?}"))
                && l.contains("nvCOMP is not available: libnvcomp.so.6 cannot be loaded")),
            "{dataset}:\n{log}"
        );
    }
    assert!(!log.contains("decoded on the GPU"), "{log}");
}

#[test]
fn h5gds_gpu_codec_0_keeps_decoding_on_the_host() {
    let name = "h5gds_gpu_codec_0_keeps_decoding_on_the_host";
    let dir = codec_files();
    let plugins = hdf5plugin_dir();
    let env = [
        ("HDF5_PLUGIN_PATH", plugins.as_str()),
        (array_io::GPU_CODEC_ENV, "0"),
        ("H5GDS_NTHREADS", "2"),
    ];
    let Some(run) = run(name, true, dir.path(), &env, without_nvcomp_body) else {
        return;
    };
    run.assert_clean();
    let log = run.stderr();
    // h5gds's host threads decode what they can, HDF5's filters the rest; every byte is h5py's.
    assert!(
        log.contains(
            "\"/lz4/rank3\": its chunks are decoded by h5gds on 2 host threads, then copied to \
             device memory, not on the GPU with nvCOMP: H5GDS_GPU_CODEC=0 keeps decoding on the host"
        ),
        "{log}"
    );
    assert!(!log.contains("decoded on the GPU with nvCOMP"), "{log}");
}

fn many_rows_body() {
    read_datasets_ending("/many_rows");
}

/// Decoded on the host's threads, a read moves through the staging buffers in pieces that end
/// where it enters a new layer of chunks, so no chunk is decoded for two pieces: (66, 1280) int16
/// in chunks of (2, 40), layers of 5 KiB, through 8 KiB buffers: 33 pieces of a layer each, not 21
/// of 8 KiB; for each of the three codecs.
#[test]
fn host_decoded_reads_are_staged_in_whole_layers_of_chunks() {
    let name = "host_decoded_reads_are_staged_in_whole_layers_of_chunks";
    let dir = codec_files();
    let env = [
        (array_io::GPU_CODEC_ENV, "0"),
        ("H5GDS_NTHREADS", "2"),
        ("H5GDS_STAGING_BUFFER_SIZE", "8K"),
    ];
    let Some(run) = run(name, true, dir.path(), &env, many_rows_body) else {
        return;
    };
    run.assert_clean();
    assert!(
        run.stderr().contains("decoded by h5gds on 2 host threads"),
        "{}",
        run.stderr()
    );
    assert_eq!(run.counter("copies htod"), 3 * 33, "{:?}", run.report);
}

// ---- writes: encoded on the GPU, read by h5py with hdf5plugin ----

use array_io::{to_file_compressed, Compression};

fn write_codec<T: Sample>(
    dir: &Path,
    compression: Compression,
    filter: &str,
    lines: &mut Vec<String>,
) {
    let stream = stream();
    for (rank, (shape, chunk)) in [
        (&[1000usize][..], &[128usize][..]),
        (&[37, 50][..], &[8, 16][..]),
        (&[9, 10, 11][..], &[4, 4, 4][..]),
    ]
    .into_iter()
    .enumerate()
    {
        let host = sample_array::<T>(shape, rank as u64 + 3);
        let device = DeviceArray::from_host(&stream, &host).unwrap();
        let file = format!("{compression:?}-{}-{rank}.h5", T::NAME);
        let path = dir.join(&file);
        to_file_compressed(&device, &path, "/g/x", chunk, compression)
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        // Read back through the GPU decoder.
        let back: DeviceArray<T> = from_file_to_device(&path, "/g/x", &stream).unwrap();
        assert_eq!(
            bytes_of(&back.to_host().unwrap()),
            bytes_of(&host),
            "{file}"
        );
        let n = lines.len();
        std::fs::write(dir.join(format!("{n}.bin")), bytes_of(&host)).unwrap();
        let shape_text: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        lines.push(format!(
            "{file}\t/g/x\t{}\t{}\t{filter}\n",
            dtype_name::<T>(),
            shape_text.join(",")
        ));
    }
}

fn write_body() {
    let dir = test_dir();
    let mut lines = Vec::new();
    for (compression, filter) in [
        (Compression::Deflate, "1"),
        (Compression::Zstd, "32015"),
        (Compression::Lz4, "32004"),
    ] {
        write_codec::<f32>(&dir, compression, filter, &mut lines);
        write_codec::<i16>(&dir, compression, filter, &mut lines);
        write_codec::<u8>(&dir, compression, filter, &mut lines);
    }
    std::fs::write(dir.join("manifest.tsv"), lines.concat()).unwrap();
}

#[test]
fn arrays_encoded_on_the_gpu_are_read_by_h5py_with_hdf5plugin() {
    let name = "arrays_encoded_on_the_gpu_are_read_by_h5py_with_hdf5plugin";
    let dir = tempfile::tempdir().unwrap();
    let Some(run) = run(name, true, dir.path(), &[], write_body) else {
        return;
    };
    run.assert_clean();
    assert!(run.counter("cufile writes") > 0, "{:?}", run.report);
    let log = run.stderr();
    for codec in ["Deflate", "Zstd", "Lz4"] {
        assert!(
            log.contains(&format!(
                "way=gpu-encoded: 8 chunks encoded ({codec}) on the GPU with nvCOMP and written \
                 straight"
            )),
            "{codec}:\n{log}"
        );
    }
    assert!(!log.contains("way=host-encoded"), "{log}");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/gpu_codec_files.py");
    let out = std::process::Command::new(python())
        .arg(&script)
        .arg("check")
        .arg(dir.path())
        .env_remove("HDF5_DRIVER")
        .env_remove("HDF5_PLUGIN_PATH")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.trim() == "OK 27",
        "h5py check failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn host_encode_body() {
    write_body();
    let stream = stream();
    let device = DeviceArray::from_host(stream, &sample_array::<f32>(&[50, 20], 9)).unwrap();
    let err = to_file_compressed(
        &device,
        test_dir().join("c.h5"),
        "/x",
        &[16, 0],
        Compression::Lz4,
    )
    .expect_err("a zero chunk entry is refused");
    println!("{err}");
}

#[test]
fn without_nvcomp_chunks_are_encoded_on_the_host_cores_without_hdf5_plugins_and_h5py_reads_them() {
    let name = "without_nvcomp_chunks_are_encoded_on_the_host_cores_without_hdf5_plugins_and_h5py_reads_them";
    let dir = tempfile::tempdir().unwrap();
    // No HDF5_PLUGIN_PATH: HDF5 itself has no Zstandard or LZ4 filter here, and none is needed.
    let Some(run) = run(
        name,
        false,
        dir.path(),
        &[("H5GDS_NTHREADS", "3")],
        host_encode_body,
    ) else {
        return;
    };
    run.assert_clean();
    let log = run.stderr();
    // The engine's verdict (`h5gds_engine::policy::write`), the same line Python's writes get.
    for filter in ["deflate (1)", "Zstandard (32015)", "LZ4 (32004)"] {
        assert!(
            log.contains(&format!(
                "way=host-encoded: 8 chunks encoded ({filter}) by h5gds on 3 host threads and \
                 written raw, not on the GPU with nvCOMP: nvCOMP is not available"
            )),
            "{filter}:\n{log}"
        );
    }
    assert!(!log.contains("way=gpu-encoded"), "{log}");
    assert!(
        run.stdout().contains("entry 1 must be between 1 and"),
        "{}",
        run.stdout()
    );
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/gpu_codec_files.py");
    let check = std::process::Command::new(python())
        .arg(&script)
        .arg("check")
        .arg(dir.path())
        .env_remove("HDF5_PLUGIN_PATH")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&check.stdout).trim(),
        "OK 27",
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
}

// ---- the example that checks the path on a GPU, here on the emulators ----

#[test]
fn the_compressed_gpu_example_passes_on_the_emulators_and_refuses_without_nvcomp() {
    let exe = std::env::current_exe().unwrap();
    let example = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples/compressed_gpu");
    assert!(
        example.is_file(),
        "{} is missing: `cargo test -p array-io` builds the examples",
        example.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.txt");
    for nvcomp in [true, false] {
        let libs = if nvcomp {
            h5gds_tests::nvcomp_emulator::nvcomp_emulator_lib_dir()
        } else {
            h5gds_tests::emulator::emulator_lib_dir()
        };
        let mut cmd = std::process::Command::new(&example);
        cmd.arg("--dir").arg(dir.path().join("data"));
        h5gds_tests::process::clean_env(&mut cmd);
        libs.configure(&mut cmd);
        cmd.env("H5GDS_EMU_REPORT", &report).current_dir(dir.path());
        let out = h5gds_tests::process::output_within(&mut cmd, h5gds_tests::process::TIME_LIMIT);
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        if nvcomp {
            assert!(out.status.success(), "{stdout}\n{stderr}");
            assert!(
                stdout.starts_with(
                    "HDF5 COMPRESSED GPU OK (27 h5py datasets read, 9 damaged chunks refused, \
                     3 written"
                ),
                "{stdout}"
            );
            h5gds_tests::emulator::read_report(&report).assert_zero(&[
                "leaked device allocations",
                "bounds violations",
                "double frees",
            ]);
        } else {
            assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
            assert!(
                stderr.contains("nvCOMP is needed for this check"),
                "{stderr}"
            );
        }
    }
}
