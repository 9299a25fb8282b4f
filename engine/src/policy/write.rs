//! Compressed writes, for both faces (array-io's `to_file_compressed`, the Python package's
//! `to_file(compression=...)`): where the chunks of a new chunked dataset are encoded, decided
//! here once ([`encoder`]) and run ([`write`]). A device array whose pipeline nvCOMP encodes (one
//! deflate, Zstandard or LZ4 filter) is encoded on the GPU and written from device memory
//! through the `gds` driver (`crate::gpu_encoded`); anything else by h5gds on the host's cores
//! (`crate::encoded`), a device array copied to the host first. The verdict is logged here:
//! `way=gpu-encoded` or `way=host-encoded`.

use crate::chunks::Face;
use crate::encoded::{cannot_encode, on_the_gpu, HostEncoder, Target};
use crate::gpu_encoded::{self, DeviceArray};
use crate::ErrorKind;
use h5gds_chunk_codec::Filter;
use h5gds_gpu_codec::nvcomp;
use h5gds_route::route::{filter_name, gpu_encode, GpuCodec};
use h5gds_route::route::{FILTER_DEFLATE, FILTER_LZ4, FILTER_ZSTD};
use h5gds_runtime::stream::{copy_from_device, synchronize};

/// Where the elements to write are: host memory, or a device array of this many bytes.
pub enum Memory<'a> {
    Host(&'a [u8]),
    Device(DeviceArray<'a>, usize),
}

/// What a face knows of a compressed write into a new chunked dataset.
pub struct CompressedWrite<'a> {
    /// The dataset's shape and chunk shape, in elements.
    pub shape: &'a [u64],
    pub chunk: &'a [u64],
    /// Bytes per element.
    pub element_size: usize,
    /// The dataset's filter pipeline in order, with the client values HDF5 holds.
    pub filters: &'a [Filter],
    /// Why the file's driver cannot take device memory (`route::driver_blocker`), if so.
    pub driver_blocker: Option<String>,
}

/// Where a compressed write's chunks are encoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Encoder {
    /// On the GPU with nvCOMP, written straight from device memory.
    Gpu(GpuCodec),
    /// By h5gds on the host's cores, for this reason.
    Host(String),
}

/// The codec nvCOMP encodes `filters` with, or why it cannot.
fn gpu_codec(filters: &[Filter]) -> Result<GpuCodec, String> {
    let ids: Vec<i32> = filters.iter().map(|f| f.id).collect();
    match ids[..] {
        [FILTER_DEFLATE] => Ok(GpuCodec::Deflate),
        [FILTER_ZSTD] => Ok(GpuCodec::Zstd),
        [FILTER_LZ4] => Ok(GpuCodec::Lz4),
        _ => Err(format!(
            "its pipeline ({}) is not one filter nvCOMP encodes (deflate, Zstandard 32015 or LZ4 \
             32004 alone)",
            ids.iter()
                .map(|&id| filter_name(id))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// Where the chunks of a device array's write `w` are encoded: on the GPU where its pipeline is
/// one filter nvCOMP encodes and `route::gpu_encode` agrees (the driver takes device memory,
/// nvCOMP is loaded, the chunk fits its codec), else on the host (a host array's always are).
/// libnvcomp is loaded only for a write it could serve.
pub fn encoder(w: &CompressedWrite) -> Encoder {
    let chunk_bytes = w.chunk.iter().product::<u64>() as usize * w.element_size;
    let blocker = w.driver_blocker.as_deref();
    let verdict = gpu_codec(w.filters).and_then(|codec| {
        gpu_encode(codec, chunk_bytes, None, blocker)?;
        let missing = nvcomp::library().err();
        gpu_encode(codec, chunk_bytes, missing.as_deref(), blocker).map(|()| codec)
    });
    match verdict {
        Ok(codec) => Encoder::Gpu(codec),
        Err(why) => Encoder::Host(why),
    }
}

/// Writes every chunk of the dataset `target` from `memory` (its elements, row-major), encoded
/// where [`encoder`] says (a host array on the host); returns the number of chunks written. The dataset is new, chunked as
/// `w` says, with the filters `w` names. Errors are the face's: HDF5's refusals through its
/// `Face`, the rest as an engine `Error` through `target.refused`. On an error nothing more is
/// written. Chunks encoded on the host are encoded on `threads` (the driver's I/O threads).
pub fn write<F: Face>(
    target: Target<'_, F>,
    w: &CompressedWrite,
    memory: Memory,
    threads: usize,
) -> Result<usize, F::Error> {
    let (shape, chunk) = (w.shape, w.chunk);
    let elements = shape.iter().product::<u64>() as usize;
    let nbytes = match &memory {
        Memory::Host(bytes) => bytes.len(),
        Memory::Device(_, nbytes) => *nbytes,
    };
    if nbytes != elements * w.element_size {
        return Err(target.refuse(
            ErrorKind::InvalidArgument,
            format!(
                "the array holds {nbytes} bytes, not the {elements} elements of {} bytes of its \
                 shape {shape:?}",
                w.element_size
            ),
        ));
    }
    if elements == 0 {
        return Ok(0);
    }
    let fits =
        chunk.len() == shape.len() && chunk.iter().zip(shape).all(|(&c, &n)| c > 0 && c <= n);
    if !fits {
        return Err(target.refuse(
            ErrorKind::InvalidArgument,
            format!(
                "chunk shape {chunk:?} does not fit its shape {shape:?}: one entry per axis, each \
                 between 1 and the length there"
            ),
        ));
    }
    let name = target.name;
    let why = match &memory {
        Memory::Host(_) => "the array is in host memory".to_string(),
        Memory::Device(array, _) => match encoder(w) {
            Encoder::Gpu(codec) => {
                let lib = nvcomp::library()
                    .map_err(|e| target.refuse(ErrorKind::Device, on_the_gpu(e)))?;
                let layout = (shape, chunk);
                let written =
                    gpu_encoded::write(&target, lib, codec, array, layout, w.element_size)?;
                super::say(format_args!(
                    "{name}: way=gpu-encoded: {written} chunks encoded ({codec:?}) on the GPU \
                     with nvCOMP and written straight from device memory through the gds driver"
                ));
                return Ok(written);
            }
            Encoder::Host(why) => why,
        },
    };
    let encoder = HostEncoder::for_filters(w.filters, w.element_size)
        .map_err(|reason| target.refuse(ErrorKind::Unsupported, cannot_encode(reason)))?;
    let copy;
    let bytes = match memory {
        Memory::Host(bytes) => bytes,
        Memory::Device(array, _) => {
            copy = host_copy(&target, &array, nbytes)?;
            &copy[..]
        }
    };
    let written = encoder.write(target, bytes, shape, chunk, threads)?;
    let pipeline: Vec<String> = w.filters.iter().map(|f| filter_name(f.id)).collect();
    super::say(format_args!(
        "{name}: way=host-encoded: {written} chunks encoded ({}) by h5gds on {} host threads and \
         written raw, not on the GPU with nvCOMP: {why}",
        pipeline.join(", "),
        threads
    ));
    Ok(written)
}

/// A host copy of the device array's `nbytes`.
fn host_copy<F: Face>(
    target: &Target<'_, F>,
    array: &DeviceArray,
    nbytes: usize,
) -> Result<Vec<u8>, F::Error> {
    let mut bytes = vec![0u8; nbytes];
    // SAFETY: `bytes` holds `nbytes` and outlives the synchronisation; the array holds them.
    unsafe { copy_from_device(array.stream, bytes.as_mut_ptr(), array.address, nbytes) }
        .and_then(|()| synchronize(array.stream))
        .map_err(|e| {
            target.refuse(
                ErrorKind::Device,
                format!("copying the array to the host failed: {e}"),
            )
        })?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;
    use h5gds_runtime::hdf5::Hdf5Api;

    fn filters(ids: &[i32]) -> Vec<Filter> {
        let filter = |&id| Filter { id, values: vec![] };
        ids.iter().map(filter).collect()
    }

    fn encoder_of(ids: &[i32], chunk: u64, blocker: Option<&str>) -> Encoder {
        encoder(&CompressedWrite {
            shape: &[1 << 26],
            chunk: &[chunk],
            element_size: 1,
            filters: &filters(ids),
            driver_blocker: blocker.map(str::to_string),
        })
    }

    fn host_reason(encoder: Encoder) -> String {
        match encoder {
            Encoder::Host(why) => why,
            Encoder::Gpu(codec) => panic!("encoded on the GPU ({codec:?})"),
        }
    }

    #[test]
    fn a_device_array_goes_to_the_host_where_nvcomp_or_the_driver_cannot_take_it() {
        let chain = host_reason(encoder_of(&[2, FILTER_ZSTD], 1024, None));
        assert!(
            chain.contains("(shuffle (2), Zstandard (32015)) is not one filter"),
            "{chain}"
        );
        let blocked = host_reason(encoder_of(&[FILTER_ZSTD], 1024, Some("sec2 here")));
        assert_eq!(blocked, "sec2 here");
        let big = host_reason(encoder_of(&[FILTER_LZ4], (1 << 24) + 1, None));
        assert!(big.contains("exceed nvCOMP's LZ4 limit"), "{big}");
        // Without libnvcomp (these tests load none), every codec goes to the host, saying why.
        if nvcomp::library().is_err() {
            let missing = host_reason(encoder_of(&[FILTER_DEFLATE], 1024, None));
            assert!(missing.starts_with("nvCOMP is not available"), "{missing}");
        }
    }

    /// A face whose errors are their words; no HDF5 call is made before the refusals tested.
    struct Words;

    impl Face for Words {
        type Error = String;

        fn locked<T>(&self, call: impl FnOnce() -> T) -> T {
            call()
        }

        fn failed(&self, failed: crate::Error) -> String {
            failed.to_string()
        }

        fn corrupt(&self, _: &[u64], reason: String) -> String {
            reason
        }

        fn never_written(&self, _: &[u64], message: String) -> String {
            message
        }

        fn direct_file(&self) -> Option<std::fs::File> {
            None
        }
    }

    #[test]
    fn a_buffer_or_chunk_that_does_not_fit_the_shape_is_refused_naming_the_dataset() {
        let api = Hdf5Api::from_symbols(|_| None);
        let kinds = std::cell::RefCell::new(Vec::new());
        let refused = |e: Error| {
            kinds.borrow_mut().push(e.kind());
            e.to_string()
        };
        let target = || Target {
            api: &api,
            dataset: 1,
            name: "/g/x",
            face: &Words,
            refused: &refused,
        };
        let zstd = filters(&[FILTER_ZSTD]);
        let write_of = |chunk| CompressedWrite {
            shape: &[4, 6],
            chunk,
            element_size: 2,
            filters: &zstd,
            driver_blocker: None,
        };
        let short = write(target(), &write_of(&[2, 3]), Memory::Host(&[0; 47]), 1).unwrap_err();
        assert_eq!(
            short,
            "dataset /g/x: the array holds 47 bytes, not the 24 elements of 2 bytes of its shape \
             [4, 6]"
        );
        let wide = write(target(), &write_of(&[2, 7]), Memory::Host(&[0; 48]), 1).unwrap_err();
        assert!(
            wide.starts_with("dataset /g/x: chunk shape [2, 7] does not fit its shape [4, 6]"),
            "{wide}"
        );
        assert_eq!(*kinds.borrow(), [ErrorKind::InvalidArgument; 2]);
        // An empty array writes nothing, whatever its chunks.
        let empty = CompressedWrite {
            shape: &[0, 6],
            ..write_of(&[5, 6])
        };
        assert_eq!(write(target(), &empty, Memory::Host(&[]), 1), Ok(0));
    }
}
