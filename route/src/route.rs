//! How a dataset's bytes may reach device memory: straight through the `gds` driver, or staged
//! through pinned host memory, and why. The one place this is decided, as pure functions over
//! plain facts that any HDF5 binding can gather (array-io gathers them with hdf5-metno in
//! `layout`; code running inside h5py's HDF5 gathers the same facts with its own calls).
//!
//! HDF5 hands the driver the caller's buffer untouched only when it has nothing to do to the
//! data itself (docs/driver.md, "When device buffers are safe"; ARCHITECTURE.md). It touches the buffer — fatal for a
//! device pointer — for type conversion, fill values of unallocated storage, filtered chunks,
//! chunks that fit the chunk cache, external and virtual storage, and compact data. So:
//!
//! * **direct**: contiguous datasets whose storage is allocated, and unfiltered chunked datasets
//!   chunk by chunk (allocated chunks whose size exceeds the dataset's chunk cache, so HDF5 never
//!   caches them: array-io opens datasets with the cache disabled; an h5py dataset keeps the
//!   cache it was opened with), in files opened with the `gds` driver;
//! * **staged**: everything else — filtered (compressed) chunks, chunks never written (HDF5
//!   fills them), unallocated contiguous storage, compact, external and virtual storage, type
//!   conversion, files opened with another driver (an h5py file opened with sec2, say), chunks
//!   the chunk cache can hold, and `bool` (every byte is checked to be 0 or 1 on the host).
//!   The array's device is no reason to stage: the driver takes each buffer's device and
//!   context from the pointer.
//!
//! Filtered chunks have a third way: where the only filter is deflate, Zstandard or LZ4 and
//! nvCOMP loads, their stored bytes go to the GPU compressed and nvCOMP decodes them there
//! ([`gpu_decode`]); device writes can be encoded there too ([`gpu_encode`]).

use crate::select::chunks_touching;
pub use crate::select::Block;
use std::collections::HashSet;

/// How a dataset's elements are stored.
#[derive(Clone, Debug)]
pub enum Storage {
    /// One block in the file; `allocated` is false until the data is written.
    Contiguous { allocated: bool },
    /// Raw data in external files, read by HDF5's own I/O.
    External,
    /// Data inside the object header.
    Compact,
    /// A virtual dataset mapping other datasets.
    Virtual,
    /// Chunks of `chunk` elements; the offsets of the allocated ones; `cached`: HDF5 keeps
    /// chunks in its chunk cache (a chunk fits the dataset's cache), copying them itself.
    Chunked {
        chunk: Vec<u64>,
        filtered: bool,
        allocated: HashSet<Vec<u64>>,
        cached: bool,
    },
}

/// Facts about one transfer that can stage all of it, whatever the storage.
#[derive(Clone, Debug, Default)]
pub struct Transfer {
    /// The settings select the staged path (`H5GDS_USE_VFD_GDS=0`, or unset without CUDA).
    pub staged_by_settings: bool,
    /// A read whose stored bytes must be checked on the host (`bool`: 0 or 1).
    pub checked_bytes: bool,
    /// Why HDF5 converts the element type in the buffer, if it does.
    pub conversion: Option<String>,
    /// The driver the file is open with when it is not `gds` (array-io opens files itself, so
    /// never; an h5py file may be opened with any driver).
    pub other_driver: Option<String>,
}

/// Why the driver cannot be used at all for this transfer (it opens the file with sec2), if so.
pub fn driver_blocker(transfer: &Transfer) -> Option<String> {
    if transfer.staged_by_settings {
        return Some(
            "H5GDS_USE_VFD_GDS=0 (or unset without working CUDA) selects the staged path".into(),
        );
    }
    if let Some(driver) = &transfer.other_driver {
        return Some(format!(
            "the file is open with the {driver} driver, which reads only into host memory \
             (open it with driver=\"gds\" for direct transfers)"
        ));
    }
    None
}

/// Why the whole transfer is staged, whatever the storage, if so.
pub fn blocker(transfer: &Transfer) -> Option<String> {
    driver_blocker(transfer).or_else(|| data_blocker(transfer))
}

/// Why the data must pass through host memory whoever reads it (checked bools, a conversion), if
/// so.
pub fn data_blocker(transfer: &Transfer) -> Option<String> {
    if transfer.checked_bytes {
        return Some(
            "bool values are checked on the host to be 0 or 1 before they reach the device".into(),
        );
    }
    transfer.conversion.clone()
}

/// How one block of a device transfer travels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// Straight between the file and device memory.
    Direct,
    /// Through pinned host memory, for this reason.
    Staged(String),
}

/// Plans the device read of `region` (file coordinates) of a dataset stored as `storage`.
/// `blocker` (see [`blocker`]), if any, stages the whole read. Returns blocks covering `region`
/// exactly once, each with its route.
pub fn plan(storage: &Storage, region: &Block, blocker: Option<String>) -> Vec<(Block, Route)> {
    let whole = |route: Route| vec![(region.clone(), route)];
    if let Some(reason) = blocker {
        return whole(Route::Staged(reason));
    }
    match storage {
        Storage::Contiguous { allocated: true } => whole(Route::Direct),
        Storage::Contiguous { allocated: false } => whole(Route::Staged(
            "its storage was never written, so HDF5 fills the buffer with the fill value itself"
                .into(),
        )),
        Storage::External => whole(Route::Staged(
            "its data lives in external files, which HDF5 reads itself".into(),
        )),
        Storage::Compact => whole(Route::Staged(
            "it is compact (its data lives in the object header)".into(),
        )),
        Storage::Virtual => whole(Route::Staged(
            "it is a virtual dataset, assembled by HDF5 from other datasets".into(),
        )),
        Storage::Chunked { filtered: true, .. } => whole(Route::Staged(
            "its chunks are filtered (compressed), and HDF5 decodes them in host memory".into(),
        )),
        Storage::Chunked { cached: true, .. } => whole(Route::Staged(
            "its chunks fit the dataset's chunk cache, through which HDF5 copies them itself \
             (open the file with rdcc_nbytes=0 for direct transfers)"
                .into(),
        )),
        Storage::Chunked {
            chunk, allocated, ..
        } => {
            let parts = chunks_touching(region, chunk);
            if parts.iter().all(|(offset, _)| allocated.contains(offset)) {
                return whole(Route::Direct);
            }
            parts
                .into_iter()
                .map(|(offset, part)| {
                    let route = if allocated.contains(&offset) {
                        Route::Direct
                    } else {
                        Route::Staged(format!(
                            "its chunk at {offset:?} was never written, so HDF5 fills it with \
                             the fill value itself"
                        ))
                    };
                    (part, route)
                })
                .collect()
        }
    }
}

/// HDF5's identifier of the deflate filter (h5py's `compression="gzip"`).
pub const FILTER_DEFLATE: i32 = 1;
/// HDF5's byte-shuffle filter (h5py's `shuffle=True`).
pub const FILTER_SHUFFLE: i32 = 2;
/// HDF5's Fletcher-32 checksum filter (h5py's `fletcher32=True`).
pub const FILTER_FLETCHER32: i32 = 3;
/// The Zstandard filter's registered identifier (hdf5plugin's `Zstd`).
pub const FILTER_ZSTD: i32 = 32015;
/// The LZ4 filter's registered identifier (hdf5plugin's `LZ4`).
pub const FILTER_LZ4: i32 = 32004;

/// A codec nvCOMP decodes on the GPU, as an HDF5 filter stores it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuCodec {
    /// A zlib stream (2-byte header, raw Deflate, Adler-32); nvCOMP decodes the raw Deflate.
    Deflate,
    /// One Zstandard frame per chunk.
    Zstd,
    /// hdf5plugin's LZ4 framing (sizes, then LZ4 blocks); nvCOMP decodes the blocks.
    Lz4,
}

/// The name of a filter in messages.
pub fn filter_name(id: i32) -> String {
    let known = match id {
        FILTER_DEFLATE => "deflate",
        FILTER_SHUFFLE => "shuffle",
        FILTER_FLETCHER32 => "fletcher32 (checksum)",
        4 => "szip",
        5 => "nbit",
        6 => "scaleoffset",
        32000 => "LZF",
        32001 => "Blosc",
        FILTER_LZ4 => "LZ4",
        32008 => "bitshuffle",
        FILTER_ZSTD => "Zstandard",
        32026 => "Blosc2",
        _ => return format!("filter {id}"),
    };
    format!("{known} ({id})")
}

/// Whether a filtered chunked dataset's chunks can move file -> GPU compressed and be decoded
/// there with nvCOMP, or why not. `filters` is the pipeline's filter ids in order;
/// `nvcomp_missing` says why nvCOMP cannot be used in this process, if so; `blocker` (see
/// [`blocker`]) stages the whole read.
pub fn gpu_decode(
    filters: &[i32],
    nvcomp_missing: Option<&str>,
    blocker: Option<&str>,
) -> std::result::Result<GpuCodec, String> {
    if let Some(reason) = blocker {
        return Err(reason.to_string());
    }
    let codec = match filters {
        [] => return Err("its chunks are not filtered".into()),
        [FILTER_DEFLATE] => GpuCodec::Deflate,
        [FILTER_ZSTD] => GpuCodec::Zstd,
        [FILTER_LZ4] => GpuCodec::Lz4,
        [only] => {
            return Err(format!(
                "its filter {} has no nvCOMP decoder (deflate, Zstandard 32015 and LZ4 32004 do)",
                filter_name(*only)
            ))
        }
        chain => {
            return Err(format!(
                "its chunks pass a chain of filters ({}), which nvCOMP does not decode; only a \
                 single deflate, Zstandard or LZ4 filter is",
                chain
                    .iter()
                    .map(|&id| filter_name(id))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        }
    };
    match nvcomp_missing {
        Some(why) => Err(format!("nvCOMP is not available: {why}")),
        None => Ok(codec),
    }
}

/// nvCOMP's largest LZ4 input (`nvcompLZ4CompressionMaxAllowedChunkSize`, 16 MiB): the GPU
/// path writes one LZ4 block per chunk.
pub const NVCOMP_LZ4_MAX_CHUNK: usize = 1 << 24;

/// Whether a device array's chunks of `chunk_bytes` can be encoded with `codec` on the GPU and
/// written straight from device memory, or why not. `nvcomp_missing` and `driver_blocker` (see
/// [`driver_blocker`]) as for [`gpu_decode`].
pub fn gpu_encode(
    codec: GpuCodec,
    chunk_bytes: usize,
    nvcomp_missing: Option<&str>,
    driver_blocker: Option<&str>,
) -> std::result::Result<(), String> {
    if let Some(reason) = driver_blocker {
        return Err(reason.to_string());
    }
    if let Some(why) = nvcomp_missing {
        return Err(format!("nvCOMP is not available: {why}"));
    }
    if codec == GpuCodec::Lz4 && chunk_bytes > NVCOMP_LZ4_MAX_CHUNK {
        return Err(format!(
            "chunks of {chunk_bytes} bytes exceed nvCOMP's LZ4 limit of {NVCOMP_LZ4_MAX_CHUNK}"
        ));
    }
    Ok(())
}

/// Where the compressed chunks of a read into device memory are decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoder {
    /// Read compressed into device memory and decoded there with nvCOMP.
    Gpu(GpuCodec),
    /// Read raw and decoded by h5gds on the host's threads, then copied to the device.
    Host,
}

/// What the choice of a [`Decoder`] rests on.
pub struct DecoderFacts {
    /// [`gpu_decode`]'s verdict: the codec nvCOMP decodes, or why the GPU cannot.
    pub gpu: std::result::Result<GpuCodec, String>,
    /// Whether h5gds decodes the pipeline on the host, or why not.
    pub host: std::result::Result<(), String>,
    /// Decoded bytes per chunk.
    pub chunk_bytes: usize,
    /// Allocated chunks the read touches.
    pub chunks: usize,
    /// The host threads that would decode (the driver's I/O threads).
    pub host_threads: usize,
    /// `H5GDS_GPU_CODEC`: `Some(true)` = 1 (the GPU wherever it can), `Some(false)` = 0 (never
    /// the GPU), `None` = unset (the faster by the estimates below).
    pub forced: Option<bool>,
    /// `H5GDS_VERIFY_CHECKSUMS`: whether the GPU path checks decoded chunks against their
    /// checksums on the host (its cost is counted, [`verified_gpu_rate`]).
    pub verify: bool,
}

/// Decoded GB/s of nvCOMP 6.0 on an H200 for chunks of 4 MiB, as h5gds's batched path ran it
/// (issue 24's measurements: deflate 5.6, Zstandard 6.7 and 8.2 in two runs, LZ4 4.6).
fn gpu_rate_at_4m(codec: GpuCodec) -> f64 {
    match codec {
        GpuCodec::Deflate => 5.6,
        GpuCodec::Zstd => 7.5,
        GpuCodec::Lz4 => 4.6,
    }
}

/// Decoded GB/s of one host thread (libdeflate, zstd, LZ4's C decoder), measured with
/// `benches/compressed_read.py` on one thread of this project's 2-core VM and rounded down.
fn host_rate_per_thread(codec: GpuCodec) -> f64 {
    match codec {
        GpuCodec::Deflate => 0.7,
        GpuCodec::Zstd => 3.0,
        GpuCodec::Lz4 => 4.0,
    }
}

/// What host decoding plus the copy to the device can sustain at most, GB/s: the pinned copy
/// ran at 55 GB/s on the H200, and decoding shares the memory bus with it.
const HOST_TO_DEVICE_CAP: f64 = 20.0;

/// The estimated decoded GB/s of nvCOMP for `chunks` chunks of `chunk_bytes`: on the H200,
/// Zstandard ran 13.2 / 8.2 / 2.5 GB/s with chunks of 1 / 4 / 16 MiB (per batch the GPU decodes
/// each chunk with few threads, so large chunks are slow), taken for every codec, log-linear in
/// between; fewer than 32 chunks leave the GPU partly idle.
pub fn gpu_rate(codec: GpuCodec, chunk_bytes: usize, chunks: usize) -> f64 {
    let mib = (chunk_bytes as f64 / (1u64 << 20) as f64).max(1.0 / 64.0);
    let log = mib.log2();
    let factor = if log <= 0.0 {
        1.6
    } else if log <= 2.0 {
        1.6 * (1.0_f64 / 1.6).powf(log / 2.0)
    } else if log <= 4.0 {
        0.3_f64.powf((log - 2.0) / 2.0)
    } else {
        0.3
    };
    gpu_rate_at_4m(codec) * factor * (chunks as f64 / 32.0).min(1.0)
}

/// What the copy of decoded chunks from the device into pinned host memory sustains, GB/s, for
/// their checksums (an estimate: the pinned copy up ran at 55 GB/s on the H200; the copy down
/// shares the link with the stored chunks coming up).
const CHECK_COPY_GBPS: f64 = 25.0;

/// Decoded GB/s one host thread checks (simd-adler32's Adler-32, XXH64): an estimate, kept
/// below what SIMD Adler-32 and XXH64 reach on one core; `benches/compressed_read.py` measures
/// the checked GPU decode against the unchecked one.
const CHECK_GBPS_PER_THREAD: f64 = 8.0;

/// Whether every chunk of `codec` carries a checksum the GPU path checks on the host: deflate's
/// Adler-32. (A Zstandard frame carries one only where its writer asked, hdf5plugin never does,
/// and which frames do is known only once their first bytes are read: not counted.)
pub fn checked_on_host(codec: GpuCodec) -> bool {
    codec == GpuCodec::Deflate
}

/// [`gpu_rate`] with the decoded chunks checked on `threads` host threads: each chunk's copy
/// down follows its decoding on its slot's stream, and the host checks one slot's batch while
/// the other's decodes, so the slower of decoding plus the copy and the check sets the rate.
pub fn verified_gpu_rate(
    codec: GpuCodec,
    chunk_bytes: usize,
    chunks: usize,
    threads: usize,
) -> f64 {
    let decode_and_copy =
        1.0 / (1.0 / gpu_rate(codec, chunk_bytes, chunks) + 1.0 / CHECK_COPY_GBPS);
    decode_and_copy.min(threads.max(1) as f64 * CHECK_GBPS_PER_THREAD)
}

/// The estimated decoded GB/s of h5gds's host decoding plus the copy to the device: one chunk
/// per thread at a time, 85% parallel efficiency, capped by [`HOST_TO_DEVICE_CAP`].
pub fn host_rate(codec: GpuCodec, chunks: usize, threads: usize) -> f64 {
    let busy = threads.min(chunks).max(1) as f64;
    (busy * host_rate_per_thread(codec) * 0.85).min(HOST_TO_DEVICE_CAP)
}

/// The fixed cost of one GPU decoding call, seconds: the argument arrays copied up, nvCOMP's
/// temporary space, a synchronisation (an estimate; small reads are all overhead).
const GPU_CALL_SECONDS: f64 = 1e-3;
/// The fixed cost of handing a read to the host's threads, seconds (an estimate).
const HOST_CALL_SECONDS: f64 = 5e-5;

/// The estimated seconds to decode `chunks` chunks of `chunk_bytes` on the GPU and on `threads`
/// host threads (plus the copy to the device): a fixed cost per call and the bytes at
/// [`gpu_rate`] (with `verify`, [`verified_gpu_rate`] where [`checked_on_host`]) or
/// [`host_rate`]. The host decoders check the checksums as they decode, at the rates measured.
pub fn decode_seconds(
    codec: GpuCodec,
    chunk_bytes: usize,
    chunks: usize,
    threads: usize,
    verify: bool,
) -> (f64, f64) {
    let bytes = (chunk_bytes * chunks) as f64;
    let rate = if verify && checked_on_host(codec) {
        verified_gpu_rate(codec, chunk_bytes, chunks, threads)
    } else {
        gpu_rate(codec, chunk_bytes, chunks)
    };
    let gpu = GPU_CALL_SECONDS + bytes / (rate * 1e9);
    let host = HOST_CALL_SECONDS + bytes / (host_rate(codec, chunks, threads) * 1e9);
    (gpu, host)
}

/// Where the compressed chunks of a read into device memory are decoded, and why: `None` when
/// neither h5gds path can (HDF5's filters decode on the host, staged). `H5GDS_GPU_CODEC` forces
/// a side where that side can; otherwise the faster by [`decode_seconds`].
pub fn choose_decoder(f: &DecoderFacts) -> (Option<Decoder>, String) {
    match (&f.gpu, &f.host, f.forced) {
        (_, Ok(()), Some(false)) => (
            Some(Decoder::Host),
            "H5GDS_GPU_CODEC=0 keeps decoding on the host".into(),
        ),
        (_, Err(host), Some(false)) => (
            None,
            format!("H5GDS_GPU_CODEC=0 keeps decoding on the host, and h5gds does not decode it there ({host})"),
        ),
        (Err(gpu), Err(host), _) => (
            None,
            format!("not on the GPU ({gpu}), and h5gds does not decode it on the host ({host})"),
        ),
        (Err(gpu), Ok(()), _) => (Some(Decoder::Host), format!("not on the GPU: {gpu}")),
        (Ok(codec), Err(host), _) => (
            Some(Decoder::Gpu(*codec)),
            format!("h5gds does not decode it on the host: {host}"),
        ),
        (Ok(codec), Ok(()), Some(true)) => (
            Some(Decoder::Gpu(*codec)),
            "H5GDS_GPU_CODEC=1 decodes on the GPU wherever it can".into(),
        ),
        (Ok(codec), Ok(()), None) => {
            let (gpu, host) =
                decode_seconds(*codec, f.chunk_bytes, f.chunks, f.host_threads, f.verify);
            let checked = if f.verify && checked_on_host(*codec) {
                "; the GPU's estimate counts the check of their Adler-32 on the host"
            } else {
                ""
            };
            let why = format!(
                "estimated {:.2} ms on the GPU against {:.2} ms on {} host threads ({} chunks of \
                 {} bytes){checked}",
                gpu * 1e3,
                host * 1e3,
                f.host_threads,
                f.chunks,
                f.chunk_bytes
            );
            if host < gpu {
                (Some(Decoder::Host), why)
            } else {
                (Some(Decoder::Gpu(*codec)), why)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(gpu: std::result::Result<GpuCodec, String>, host: bool) -> DecoderFacts {
        DecoderFacts {
            gpu,
            host: if host { Ok(()) } else { Err("szip".into()) },
            chunk_bytes: 4 << 20,
            chunks: 256,
            host_threads: 16,
            forced: None,
            verify: false,
        }
    }

    #[test]
    fn the_decoder_is_the_one_that_can_or_the_faster_or_the_forced() {
        use GpuCodec::*;
        // Sixteen threads outrun nvCOMP's measured rates; two do for LZ4 only.
        let (d, why) = choose_decoder(&facts(Ok(Zstd), true));
        assert_eq!(d, Some(Decoder::Host), "{why}");
        // 1 GiB: 1 ms + 1.07 GB at 7.5 GB/s on the GPU, at 20 GB/s on the host.
        assert!(
            why.contains("estimated 144.17 ms on the GPU against 53.74 ms on 16 host threads"),
            "{why}"
        );
        // A small read is mostly the GPU call's fixed cost.
        let small = DecoderFacts {
            chunks: 4,
            chunk_bytes: 4096,
            host_threads: 1,
            ..facts(Ok(Deflate), true)
        };
        assert_eq!(choose_decoder(&small).0, Some(Decoder::Host));
        let two = DecoderFacts {
            host_threads: 2,
            ..facts(Ok(Deflate), true)
        };
        assert_eq!(choose_decoder(&two).0, Some(Decoder::Gpu(Deflate)));
        let two_lz4 = DecoderFacts {
            host_threads: 2,
            ..facts(Ok(Lz4), true)
        };
        assert_eq!(choose_decoder(&two_lz4).0, Some(Decoder::Host));
        // Small chunks favour the GPU, large ones the host.
        assert!(gpu_rate(Zstd, 1 << 20, 256) > gpu_rate(Zstd, 4 << 20, 256));
        assert!((gpu_rate(Zstd, 16 << 20, 256) - 7.5 * 0.3).abs() < 1e-9);
        assert!(gpu_rate(Zstd, 4 << 20, 8) < gpu_rate(Zstd, 4 << 20, 32));
        // What cannot run on one side runs on the other, or on neither.
        let (d, why) = choose_decoder(&facts(Err("nvCOMP is missing".into()), true));
        assert_eq!(
            (d, why.as_str()),
            (Some(Decoder::Host), "not on the GPU: nvCOMP is missing")
        );
        assert_eq!(
            choose_decoder(&facts(Ok(Lz4), false)).0,
            Some(Decoder::Gpu(Lz4))
        );
        // Checking deflate's Adler-32 on the host costs the GPU side the copy down: counted.
        let (gpu, _) = decode_seconds(Deflate, 4 << 20, 256, 16, false);
        let (checked, _) = decode_seconds(Deflate, 4 << 20, 256, 16, true);
        assert!((gpu - 1e-3 - (1 << 30) as f64 / 5.6e9).abs() < 1e-9);
        let both = 1.0 / (1.0 / 5.6 + 1.0 / CHECK_COPY_GBPS);
        assert!((checked - 1e-3 - (1 << 30) as f64 / (both * 1e9)).abs() < 1e-9);
        // ... or the host's check, where few threads check.
        // (Zstandard's 1 MiB chunks, 12 GB/s, 8.1 with the copy, on one thread checking 8)
        assert!((verified_gpu_rate(Zstd, 1 << 20, 256, 1) - CHECK_GBPS_PER_THREAD).abs() < 1e-9);
        // Zstandard's frames carry a checksum only where written with one: not counted.
        assert_eq!(
            decode_seconds(Zstd, 4 << 20, 256, 16, true),
            decode_seconds(Zstd, 4 << 20, 256, 16, false)
        );
        let verified = DecoderFacts {
            host_threads: 2,
            verify: true,
            ..facts(Ok(Deflate), true)
        };
        let (d, why) = choose_decoder(&verified);
        assert_eq!(d, Some(Decoder::Gpu(Deflate)), "{why}");
        assert!(
            why.ends_with(
                "bytes); the GPU's estimate counts the check of their Adler-32 on the host"
            ),
            "{why}"
        );
        let (d, why) = choose_decoder(&facts(Err("two filters".into()), false));
        assert_eq!(d, None);
        assert!(why.contains("two filters") && why.contains("szip"), "{why}");
        // H5GDS_GPU_CODEC forces a side where it can.
        let on = DecoderFacts {
            forced: Some(true),
            ..facts(Ok(Zstd), true)
        };
        assert_eq!(choose_decoder(&on).0, Some(Decoder::Gpu(Zstd)));
        let off = DecoderFacts {
            forced: Some(false),
            ..facts(Ok(Zstd), false)
        };
        assert_eq!(choose_decoder(&off).0, None);
    }

    fn block(start: &[u64], count: &[u64]) -> Block {
        Block {
            start: start.to_vec(),
            count: count.to_vec(),
        }
    }

    #[test]
    fn only_allocated_contiguous_and_unfiltered_allocated_chunks_go_direct() {
        let region = block(&[0, 0], &[4, 4]);
        let direct = vec![(region.clone(), Route::Direct)];
        assert_eq!(
            plan(&Storage::Contiguous { allocated: true }, &region, None),
            direct
        );
        for storage in [
            Storage::Contiguous { allocated: false },
            Storage::External,
            Storage::Compact,
            Storage::Virtual,
            Storage::Chunked {
                chunk: vec![2, 2],
                filtered: true,
                allocated: HashSet::new(),
                cached: false,
            },
            Storage::Chunked {
                chunk: vec![4, 4],
                filtered: false,
                allocated: [vec![0, 0]].into_iter().collect(),
                cached: true,
            },
        ] {
            let p = plan(&storage, &region, None);
            assert_eq!(p.len(), 1);
            assert!(matches!(p[0].1, Route::Staged(_)), "{storage:?}");
        }
        let staged = plan(
            &Storage::Contiguous { allocated: true },
            &region,
            Some("type conversion".into()),
        );
        assert_eq!(staged[0].1, Route::Staged("type conversion".into()));
    }

    #[test]
    fn missing_chunks_are_staged_one_by_one() {
        let all: HashSet<Vec<u64>> = [[0, 0], [0, 2], [2, 0], [2, 2]]
            .iter()
            .map(|a| a.to_vec())
            .collect();
        let region = block(&[1, 1], &[3, 3]);
        let full = Storage::Chunked {
            chunk: vec![2, 2],
            filtered: false,
            allocated: all.clone(),
            cached: false,
        };
        assert_eq!(
            plan(&full, &region, None),
            vec![(region.clone(), Route::Direct)]
        );
        let mut some = all;
        some.remove(&vec![2, 2]);
        let sparse = Storage::Chunked {
            chunk: vec![2, 2],
            filtered: false,
            allocated: some,
            cached: false,
        };
        let p = plan(&sparse, &region, None);
        assert_eq!(p.len(), 4);
        assert_eq!(p.iter().map(|(b, _)| b.len()).sum::<u64>(), 9);
        let staged: Vec<&Block> = p
            .iter()
            .filter(|(_, r)| matches!(r, Route::Staged(_)))
            .map(|(b, _)| b)
            .collect();
        assert_eq!(staged, [&block(&[2, 2], &[2, 2])]);
    }

    #[test]
    fn settings_bool_and_conversion_stage_the_whole_transfer_in_that_order() {
        let direct = Transfer::default();
        assert_eq!(driver_blocker(&direct), None);
        assert_eq!(blocker(&direct), None);
        let all = Transfer {
            staged_by_settings: true,
            checked_bytes: true,
            conversion: Some("HDF5 converts i16 to f64".into()),
            other_driver: None,
        };
        let first = blocker(&all).unwrap();
        assert!(first.contains("H5GDS_USE_VFD_GDS=0"), "{first}");
        assert!(driver_blocker(&all)
            .unwrap()
            .contains("H5GDS_USE_VFD_GDS=0"));
        let bools = Transfer {
            staged_by_settings: false,
            ..all
        };
        // bool and conversion stage the data but still open the file with the gds driver.
        assert_eq!(driver_blocker(&bools), None);
        assert!(blocker(&bools).unwrap().contains("bool values"));
        let converted = Transfer {
            checked_bytes: false,
            ..bools
        };
        assert_eq!(
            blocker(&converted).as_deref(),
            Some("HDF5 converts i16 to f64")
        );
        // A file open with another driver never sees device memory, whatever else holds.
        let sec2 = Transfer {
            other_driver: Some("sec2".into()),
            ..Transfer::default()
        };
        assert!(driver_blocker(&sec2).unwrap().contains("the sec2 driver"));
    }

    #[test]
    fn only_a_lone_deflate_zstd_or_lz4_filter_with_nvcomp_decodes_on_the_gpu() {
        assert_eq!(gpu_decode(&[1], None, None), Ok(GpuCodec::Deflate));
        assert_eq!(gpu_decode(&[32015], None, None), Ok(GpuCodec::Zstd));
        assert_eq!(gpu_decode(&[32004], None, None), Ok(GpuCodec::Lz4));
        let shuffled = gpu_decode(&[2, 1], None, None).unwrap_err();
        assert!(
            shuffled.contains("chain of filters (shuffle (2), deflate (1))"),
            "{shuffled}"
        );
        let checked = gpu_decode(&[1, 3], None, None).unwrap_err();
        assert!(checked.contains("fletcher32"), "{checked}");
        let blosc = gpu_decode(&[32001], None, None).unwrap_err();
        assert!(
            blosc.contains("Blosc (32001) has no nvCOMP decoder"),
            "{blosc}"
        );
        assert!(gpu_decode(&[], None, None)
            .unwrap_err()
            .contains("not filtered"));
        let missing = gpu_decode(&[1], Some("libnvcomp.so.6: not found"), None).unwrap_err();
        assert_eq!(
            missing,
            "nvCOMP is not available: libnvcomp.so.6: not found"
        );
        // The transfer's own blocker (settings, conversion) comes first.
        let staged = gpu_decode(&[1], Some("x"), Some("HDF5 converts i16 to f64")).unwrap_err();
        assert_eq!(staged, "HDF5 converts i16 to f64");
    }

    #[test]
    fn encoding_on_the_gpu_needs_the_driver_nvcomp_and_lz4_sized_chunks() {
        assert_eq!(gpu_encode(GpuCodec::Zstd, 1 << 30, None, None), Ok(()));
        assert_eq!(gpu_encode(GpuCodec::Lz4, 1 << 24, None, None), Ok(()));
        let big = gpu_encode(GpuCodec::Lz4, (1 << 24) + 1, None, None).unwrap_err();
        assert!(big.contains("LZ4 limit"), "{big}");
        let missing = gpu_encode(GpuCodec::Deflate, 64, Some("gone"), None).unwrap_err();
        assert_eq!(missing, "nvCOMP is not available: gone");
        let staged = gpu_encode(
            GpuCodec::Deflate,
            64,
            Some("gone"),
            Some("H5GDS_USE_VFD_GDS=0"),
        );
        assert_eq!(staged.unwrap_err(), "H5GDS_USE_VFD_GDS=0");
    }
}
