//! Compressed writes encoded on the host's cores, written once for both faces (the policy's
//! host side, `crate::policy::write`): the chunks of a host array encoded by h5gds through the
//! dataset's filters (`h5gds_chunk_codec::encode`, on the driver's I/O threads) and written raw in
//! chunk order on the calling thread ([`crate::chunks::write_stored`]) over the face's HDF5 table.
//! HDF5's own filter would encode on one core, and needs hdf5plugin's plugins for Zstandard and
//! LZ4. Also the target of every compressed write ([`Target`]), GPU-encoded ones included
//! (`crate::gpu_encoded`).

use crate::chunks::{write_stored, Face};
use crate::{Error, ErrorKind};
use h5gds_chunk_codec::encode::{self, ChunkWriter, Encoding, HostWrite};
use h5gds_chunk_codec::Filter;
use h5gds_runtime::hdf5::{hid_t, Hdf5Api};
use std::fmt;

/// How the chunks of a dataset with a given filter pipeline are encoded.
pub struct HostEncoder {
    encoding: Encoding,
    element_size: usize,
}

/// The words of a refusal of filters h5gds cannot encode through (`Kind::Unsupported`).
pub(crate) fn cannot_encode(reason: impl fmt::Display) -> String {
    format!(
        "h5gds cannot encode its chunks: {reason}; choose gzip, Zstandard or LZ4 with shuffle \
         and fletcher32 at most"
    )
}

/// The words of a failure of CUDA or nvCOMP while chunks were encoded on the GPU
/// (`Kind::Device`; the chunk, where one is at fault, among the facts).
pub(crate) fn on_the_gpu(detail: impl fmt::Display) -> String {
    format!(
        "encoding its chunks on the GPU failed: {detail} (H5GDS_LOG=debug says more; without nvCOMP the \
         chunks are encoded on the host)"
    )
}

/// The dataset encoded chunks are written into: its HDF5 copy's table, its id and name, the face
/// that words a failed write (and holds that copy's lock around each), and the face's error for
/// an engine [`Error`] (`refused`, which maps its kind).
pub struct Target<'a, F: Face> {
    pub api: &'a Hdf5Api,
    pub dataset: hid_t,
    pub name: &'a str,
    pub face: &'a F,
    pub refused: &'a dyn Fn(Error) -> F::Error,
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
            unsafe { write_stored(api, dataset, offset, 0, at, size) }
                .map_err(|f| face.failed(f.error(api)))
        })
    }

    /// The face's error for `kind` and `detail` about this dataset.
    pub fn refuse(&self, kind: ErrorKind, detail: impl Into<String>) -> F::Error {
        (self.refused)(Error::new(kind, detail).in_dataset(self.name))
    }
}

impl<F: Face> ChunkWriter for Target<'_, F> {
    type Error = F::Error;

    fn write(&mut self, offset: &[u64], stored: &[u8]) -> Result<(), F::Error> {
        // SAFETY: `stored` is a live host buffer of that many bytes.
        unsafe { self.write_chunk(offset, stored.as_ptr().cast(), stored.len()) }
    }

    fn failed(&self, offset: &[u64], reason: String) -> F::Error {
        let failed = Error::new(
            ErrorKind::Encoding,
            format!("could not be encoded: {reason}"),
        );
        (self.refused)(failed.in_dataset(self.name).at_chunk(offset))
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

        fn failed(&self, failed: Error) -> String {
            let text = failed.to_string();
            text[..text.find(" failed").unwrap_or(text.len())].to_string()
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

    fn refused(error: Error) -> String {
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
        assert_eq!(refused.unwrap_err(), "H5Dwrite_chunk for the chunk at [0]");
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
