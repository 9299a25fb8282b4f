//! Compressed writes encoded on the host's cores, written once for both faces (the policy's
//! host side, `crate::policy::write`): the chunks of a host array encoded by h5gds through the
//! dataset's filters (`h5gds_chunk_codec::encode`, on the driver's I/O threads) and written raw in
//! chunk order on the calling thread ([`crate::chunks::write_stored`]) over the face's HDF5 table.
//! HDF5's own filter would encode on one core, and needs hdf5plugin's plugins for Zstandard and
//! LZ4. Also the target and the one error of every compressed write ([`Target`], [`WriteError`]),
//! GPU-encoded ones included (`crate::gpu_encoded`).

use crate::chunks::{write_stored, Face};
use h5gds_chunk_codec::encode::{self, ChunkWriter, Encoding, HostWrite};
use h5gds_chunk_codec::Filter;
use h5gds_runtime::hdf5::{hid_t, Hdf5Api};
use std::fmt;

/// How the chunks of a dataset with a given filter pipeline are encoded.
pub struct HostEncoder {
    encoding: Encoding,
    element_size: usize,
}

/// What kind of failure a compressed write met: the faces map the kind to their own error
/// (array-io's `Error`, Python's ValueError or OSError); the words are [`WriteError`]'s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteErrorKind {
    /// The caller's request does not fit the dataset (its chunk shape, its buffer's size).
    Argument,
    /// h5gds cannot encode through the dataset's filter pipeline.
    Unsupported,
    /// One chunk could not be encoded.
    Encoding,
    /// CUDA or nvCOMP failed while the chunks were encoded on the GPU.
    Device,
}

/// Why a compressed write failed, with the facts it names: the dataset, the chunk (its first
/// element) where one chunk is at fault, and the detail. HDF5's refusals of a chunk write are
/// the face's (`Face::failed`, with its HDF5's error stack).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteError {
    pub kind: WriteErrorKind,
    pub dataset: String,
    pub chunk: Option<Vec<u64>>,
    pub detail: String,
}

impl WriteError {
    pub fn new(kind: WriteErrorKind, dataset: &str, detail: impl Into<String>) -> WriteError {
        WriteError {
            kind,
            dataset: dataset.to_string(),
            chunk: None,
            detail: detail.into(),
        }
    }

    /// The same error about the chunk whose first element is `offset`.
    pub fn at(mut self, offset: &[u64]) -> WriteError {
        self.chunk = Some(offset.to_vec());
        self
    }
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (dataset, detail) = (&self.dataset, &self.detail);
        let chunk = match &self.chunk {
            Some(at) => format!("the chunk at {at:?}"),
            None => "its chunks".to_string(),
        };
        match self.kind {
            WriteErrorKind::Argument => write!(f, "dataset {dataset}: {detail}"),
            WriteErrorKind::Unsupported => write!(
                f,
                "dataset {dataset}: h5gds cannot encode {chunk}: {detail}; choose gzip, \
                 Zstandard or LZ4 with shuffle and fletcher32 at most"
            ),
            WriteErrorKind::Encoding => {
                write!(
                    f,
                    "dataset {dataset}: {chunk} could not be encoded: {detail}"
                )
            }
            WriteErrorKind::Device => write!(
                f,
                "dataset {dataset}: encoding {chunk} on the GPU failed: {detail} (H5GDS_LOG=debug \
                 says more; without nvCOMP the chunks are encoded on the host)"
            ),
        }
    }
}

impl std::error::Error for WriteError {}

/// The dataset encoded chunks are written into: its HDF5 copy's table, its id and name, the face
/// that words a failed write (and holds that copy's lock around each), and the face's error for
/// a [`WriteError`] (`refused`, which maps its kind).
pub struct Target<'a, F: Face> {
    pub api: &'a Hdf5Api,
    pub dataset: hid_t,
    pub name: &'a str,
    pub face: &'a F,
    pub refused: &'a dyn Fn(WriteError) -> F::Error,
}

impl<F: Face> Target<'_, F> {
    /// Writes `size` stored bytes at `at` (host memory, or device memory the driver takes) as the
    /// chunk at `offset`, filter mask 0, under the face's lock.
    ///
    /// # Safety
    /// `at` must be valid for reads of `size` bytes.
    pub unsafe fn write_chunk(
        &self,
        offset: &[u64],
        at: *const std::ffi::c_void,
        size: usize,
    ) -> Result<(), F::Error> {
        let (api, dataset, face) = (self.api, self.dataset, self.face);
        face.locked(|| {
            // SAFETY: as the caller guarantees.
            unsafe { write_stored(api, dataset, offset, 0, at, size) }.map_err(|f| face.failed(f))
        })
    }

    /// The face's error for `kind` and `detail` about this dataset.
    pub fn refuse(&self, kind: WriteErrorKind, detail: impl Into<String>) -> F::Error {
        (self.refused)(WriteError::new(kind, self.name, detail))
    }
}

impl<F: Face> ChunkWriter for Target<'_, F> {
    type Error = F::Error;

    fn write(&mut self, offset: &[u64], stored: &[u8]) -> Result<(), F::Error> {
        // SAFETY: `stored` is a live host buffer of that many bytes.
        unsafe { self.write_chunk(offset, stored.as_ptr().cast(), stored.len()) }
    }

    fn failed(&self, offset: &[u64], reason: String) -> F::Error {
        (self.refused)(WriteError::new(WriteErrorKind::Encoding, self.name, reason).at(offset))
    }
}

impl HostEncoder {
    /// The encoder of `filters` (the dataset's pipeline in order, with their client values) for
    /// elements of `element_size` bytes, or why h5gds cannot encode through them.
    pub fn for_filters(filters: &[Filter], element_size: usize) -> Result<HostEncoder, String> {
        Ok(HostEncoder {
            encoding: Encoding::for_filters(filters, element_size)?,
            element_size,
        })
    }

    /// Writes every chunk (of `chunk` elements) of `array` (the dataset's elements, row-major,
    /// `shape` the dataset's) into `target`, encoded on `threads` of the driver's I/O threads;
    /// returns the number of chunks written. On an error nothing more is written.
    pub fn write<F: Face>(
        &self,
        mut target: Target<'_, F>,
        array: &[u8],
        shape: &[u64],
        chunk: &[u64],
        threads: usize,
    ) -> Result<usize, F::Error> {
        let w = HostWrite {
            encoding: &self.encoding,
            array,
            shape,
            chunk,
            element_size: self.element_size,
            threads,
        };
        encode::write(&mut target, &w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunks::CallFailed;
    use std::cell::{Cell, RefCell};
    use std::ffi::{c_int, c_void};

    /// The one dataset the fake HDF5 writes; every other id is refused.
    const DATASET: hid_t = 7;

    thread_local! {
        /// The chunks the fake `H5Dwrite_chunk` wrote on this thread: first element, bytes.
        static WRITTEN: RefCell<Vec<(u64, Vec<u8>)>> = const { RefCell::new(Vec::new()) };
    }

    unsafe extern "C" fn write_chunk(
        dataset: hid_t,
        _dxpl: hid_t,
        mask: u32,
        offset: *const u64,
        size: usize,
        buf: *const c_void,
    ) -> c_int {
        if dataset != DATASET || mask != 0 {
            return -1;
        }
        // SAFETY: one offset (one axis) and `size` bytes at `buf`, from the code under test.
        let (at, bytes) = unsafe {
            let bytes = std::slice::from_raw_parts(buf.cast::<u8>(), size);
            (*offset, bytes.to_vec())
        };
        WRITTEN.with(|w| w.borrow_mut().push((at, bytes)));
        0
    }

    /// A face that words errors as their call's name and counts the calls under its lock.
    struct Words {
        locked: Cell<usize>,
    }

    impl Face for Words {
        type Error = String;

        fn locked<T>(&self, call: impl FnOnce() -> T) -> T {
            self.locked.set(self.locked.get() + 1);
            call()
        }

        fn failed(&self, failed: CallFailed) -> String {
            format!("{} ({:?})", failed.call.named(), failed.missing)
        }

        fn corrupt(&self, offset: &[u64], reason: String) -> String {
            format!("{offset:?} corrupt: {reason}")
        }

        fn never_written(&self, offset: &[u64], message: String) -> String {
            format!("{offset:?} never written: {message}")
        }

        fn direct_file(&self) -> Option<std::fs::File> {
            None
        }
    }

    fn refused(error: WriteError) -> String {
        error.to_string()
    }

    #[test]
    fn every_chunk_is_encoded_and_written_raw_in_order_under_the_faces_lock() {
        let mut api = Hdf5Api::from_symbols(|_| None);
        api.H5Dwrite_chunk = Ok(write_chunk);
        let face = Words {
            locked: Cell::new(0),
        };
        let target = |dataset| Target {
            api: &api,
            dataset,
            name: "/x",
            face: &face,
            refused: &refused,
        };
        // Deflate, level 1: 10 bytes in chunks of 4 (the last padded with zeros).
        let deflate = [Filter {
            id: 1,
            values: vec![1],
        }];
        let encoder = HostEncoder::for_filters(&deflate, 1).unwrap();
        let array: Vec<u8> = (0..10).collect();
        let written = encoder.write(target(DATASET), &array, &[10], &[4], 1);
        assert_eq!(written, Ok(3));
        assert_eq!(
            face.locked.get(),
            3,
            "each chunk written under the face's lock"
        );
        let chunks = WRITTEN.with(|w| w.take());
        let offsets: Vec<u64> = chunks.iter().map(|c| c.0).collect();
        assert_eq!(offsets, [0, 4, 8]);
        // Each stored chunk decodes to the chunk's bytes (edges zero-padded).
        let pipeline = h5gds_chunk_codec::Pipeline::for_filters(&deflate, 1).unwrap();
        let mut scratch = h5gds_chunk_codec::pipeline::Scratch::default();
        let mut decode = |stored: &[u8]| {
            pipeline
                .decode(stored, 0, 4, &mut scratch)
                .map(<[u8]>::to_vec)
        };
        let decoded: Vec<Vec<u8>> = chunks
            .iter()
            .map(|(_, stored)| decode(stored).unwrap())
            .collect();
        assert_eq!(
            decoded,
            [vec![0, 1, 2, 3], vec![4, 5, 6, 7], vec![8, 9, 0, 0]]
        );
        // A refused write stops the write, worded by the face.
        let refused = encoder.write(target(DATASET + 1), &array, &[10], &[4], 1);
        assert_eq!(
            refused.unwrap_err(),
            "H5Dwrite_chunk for the chunk at [0] (None)"
        );
        assert!(WRITTEN.with(|w| w.take()).is_empty());
    }

    #[test]
    fn a_pipeline_h5gds_cannot_encode_is_refused_with_the_reason() {
        let unknown = [Filter {
            id: 30000,
            values: vec![],
        }];
        let reason = HostEncoder::for_filters(&unknown, 4).err().unwrap();
        assert!(reason.contains("30000"), "{reason}");
    }
}
