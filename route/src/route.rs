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
    if let Some(reason) = driver_blocker(transfer) {
        return Some(reason);
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
