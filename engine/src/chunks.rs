//! The HDF5 side of stored chunks, written once for both faces over a table of HDF5's functions
//! (`Hdf5Api`: h5py's HDF5 for the extension, the linked one for array-io) and a dataset id: a
//! chunk's location, its stored (still filtered) bytes read and written, the whole chunk index,
//! and [`StoredChunks`], the one source of stored chunks the host decoder (`RawChunks`) and the
//! GPU decoder (`ChunkSource`) read from. What differs between the faces (the words of an error,
//! HDF5's lock, which file may be read directly) is a [`Face`]. The caller holds the lock of the
//! HDF5 copy for the plain functions; [`StoredChunks`] takes it through its face.

use crate::error::Kind;
use crate::{facts, stored, Error, Result};
use h5gds_chunk_codec::{ChunkIndex, ChunkListing, RawChunks, StoredChunk};
use h5gds_gpu_codec::decode::ChunkSource;
use h5gds_gpu_codec::DeviceFailure;
use h5gds_runtime::cuda::CudaError;
use h5gds_runtime::hdf5::{haddr_t, hid_t, hsize_t, stack, Hdf5Api, HADDR_UNDEF};
use std::ffi::{c_int, c_uint, c_void};
use std::marker::PhantomData;

const H5P_DEFAULT: hid_t = 0;

/// Which chunk call failed, with the chunk it was about (its first element).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChunkCall {
    Location(Vec<u64>),
    Read(Vec<u64>),
    Write(Vec<u64>),
    Index,
}

impl ChunkCall {
    /// The call as the Python package's errors name it: `H5Dread_chunk for the chunk at [0, 4]`.
    pub fn named(&self) -> String {
        match self {
            ChunkCall::Location(at) => {
                format!("H5Dget_chunk_info_by_coord for the chunk at {at:?}")
            }
            ChunkCall::Read(at) => format!("H5Dread_chunk for the chunk at {at:?}"),
            ChunkCall::Write(at) => format!("H5Dwrite_chunk for the chunk at {at:?}"),
            ChunkCall::Index => "H5Dchunk_iter".into(),
        }
    }
}

/// A chunk call that failed; each face words it (with its HDF5's error stack, still waiting on
/// that HDF5's stack when `missing` is `None`).
#[derive(Debug)]
pub struct CallFailed {
    pub call: ChunkCall,
    /// The HDF5 copy lacks the function (as `MissingSymbol` says it); `None`: HDF5 refused.
    pub missing: Option<String>,
}

impl CallFailed {
    /// The failure as the engine's error: the call, and the HDF5 copy's error stack, read now
    /// (call it holding the lock, right after the call).
    pub(crate) fn error(self, api: &Hdf5Api) -> Error {
        let call = self.call.named();
        match self.missing {
            Some(missing) => Error::hdf5(format!("{call}: {missing}")),
            None => Error::hdf5(format!("{call} failed: {}", stack(api))),
        }
    }

    fn refused(call: ChunkCall) -> CallFailed {
        CallFailed {
            call,
            missing: None,
        }
    }

    fn missing(call: ChunkCall, missing: String) -> CallFailed {
        CallFailed {
            call,
            missing: Some(missing),
        }
    }
}

/// The stored size, filter mask and file address of the chunk of `dataset` whose first element
/// is `offset` (`H5Dget_chunk_info_by_coord`), or `None` when it was never written.
pub fn location(
    api: &Hdf5Api,
    dataset: hid_t,
    offset: &[u64],
) -> Result<Option<StoredChunk>, CallFailed> {
    let call = || ChunkCall::Location(offset.to_vec());
    let info_by_coord = api
        .H5Dget_chunk_info_by_coord
        .map_err(|m| CallFailed::missing(call(), m.to_string()))?;
    let (mut mask, mut addr, mut size): (c_uint, haddr_t, hsize_t) = (0, HADDR_UNDEF, 0);
    // SAFETY: `offset` has one entry per dimension of the dataset (the caller's chunk grid); the
    // out-pointers are valid.
    let status =
        unsafe { info_by_coord(dataset, offset.as_ptr(), &mut mask, &mut addr, &mut size) };
    if status < 0 {
        return Err(CallFailed::refused(call()));
    }
    Ok((addr != HADDR_UNDEF && size > 0).then_some(StoredChunk {
        size: size as usize,
        mask,
        address: addr,
    }))
}

/// Reads the stored bytes of the chunk of `dataset` at `offset` (no filter applied) into `buf`,
/// device memory when the file is open with the `gds` driver; returns the chunk's filter mask
/// (bit k set: filter k was skipped). HDF5 2.x has `H5Dread_chunk2`, which also takes the
/// buffer's size; 1.14 only `H5Dread_chunk`.
///
/// # Safety
/// `buf` must be valid for writes of `size` bytes, the chunk's stored size.
pub unsafe fn read_stored(
    api: &Hdf5Api,
    dataset: hid_t,
    offset: &[u64],
    buf: *mut c_void,
    size: usize,
) -> Result<u32, CallFailed> {
    let (mut mask, mut len) = (0u32, size);
    // SAFETY: `offset` has one entry per dimension; `buf` as the caller guarantees (HDF5 2.x
    // also refuses a chunk larger than `len`).
    let status = unsafe {
        match (api.H5Dread_chunk2, api.H5Dread_chunk) {
            (Ok(read), _) => read(
                dataset,
                H5P_DEFAULT,
                offset.as_ptr(),
                &mut mask,
                buf,
                &mut len,
            ),
            (Err(_), Ok(read)) => read(dataset, H5P_DEFAULT, offset.as_ptr(), &mut mask, buf),
            (Err(missing), Err(_)) => {
                let call = ChunkCall::Read(offset.to_vec());
                return Err(CallFailed::missing(
                    call,
                    format!("{missing} (nor H5Dread_chunk)"),
                ));
            }
        }
    };
    if status < 0 {
        return Err(CallFailed::refused(ChunkCall::Read(offset.to_vec())));
    }
    Ok(mask)
}

/// Writes `size` stored (already filtered) bytes at `buf` (device memory when the driver takes
/// it) as the chunk of `dataset` at `offset`, with `filter_mask` (0: every filter applied).
///
/// # Safety
/// `buf` must be valid for reads of `size` bytes.
pub unsafe fn write_stored(
    api: &Hdf5Api,
    dataset: hid_t,
    offset: &[u64],
    filter_mask: u32,
    buf: *const c_void,
    size: usize,
) -> Result<(), CallFailed> {
    let call = || ChunkCall::Write(offset.to_vec());
    let write = api
        .H5Dwrite_chunk
        .map_err(|m| CallFailed::missing(call(), m.to_string()))?;
    // SAFETY: `offset` has one entry per dimension of the dataset (the caller's chunk grid);
    // `buf` as the caller guarantees.
    let status = unsafe {
        write(
            dataset,
            H5P_DEFAULT,
            filter_mask,
            offset.as_ptr(),
            size,
            buf,
        )
    };
    if status < 0 {
        return Err(CallFailed::refused(call()));
    }
    Ok(())
}

/// Every allocated chunk of `dataset` (chunks of `chunk` elements): its stored size, filter mask
/// and address by first element, in one call for the whole index (`H5Dchunk_iter`; a lookup by
/// coordinate walks the index each time, `h5gds_chunk_codec::LIST_INDEX_FROM`).
pub fn index(api: &Hdf5Api, dataset: hid_t, chunk: &[u64]) -> crate::Result<ChunkIndex> {
    index_call(api, dataset, chunk).map_err(|f| f.error(api))
}

fn index_call(api: &Hdf5Api, dataset: hid_t, chunk: &[u64]) -> Result<ChunkIndex, CallFailed> {
    struct Found {
        rank: usize,
        chunks: ChunkListing,
    }
    unsafe extern "C" fn visit(
        offset: *const hsize_t,
        mask: c_uint,
        addr: haddr_t,
        size: hsize_t,
        data: *mut c_void,
    ) -> c_int {
        // Never unwind into HDF5: a panic stops the iteration as a failure.
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: `data` is the `Found` the caller passed, alive for the call.
            let found = unsafe { &mut *data.cast::<Found>() };
            // SAFETY: HDF5 passes one offset per axis of the dataset.
            let offset = unsafe { std::slice::from_raw_parts(offset, found.rank) };
            if addr != HADDR_UNDEF && size > 0 {
                let stored = StoredChunk {
                    size: size as usize,
                    mask,
                    address: addr,
                };
                found.chunks.add(offset, stored);
            }
            0
        }))
        .unwrap_or(-1)
    }
    let iterate = api
        .H5Dchunk_iter
        .map_err(|m| CallFailed::missing(ChunkCall::Index, m.to_string()))?;
    let mut found = Found {
        rank: chunk.len(),
        chunks: ChunkListing::new(chunk),
    };
    let data = (&raw mut found).cast::<c_void>();
    // SAFETY: a dataset id; the callback and its data as declared above.
    let status = unsafe { iterate(dataset, H5P_DEFAULT, visit, data) };
    if status < 0 {
        return Err(CallFailed::refused(ChunkCall::Index));
    }
    Ok(found.chunks.finish())
}

/// What [`StoredChunks`] leaves to its face.
pub trait Face {
    /// The face's error.
    type Error: Send;

    /// Runs `call` (HDF5 calls, then the wording of their failure) holding the HDF5 copy's lock,
    /// where the face does not hold it around the whole read.
    fn locked<T>(&self, call: impl FnOnce() -> T) -> T {
        call()
    }

    /// The error for a failed chunk call (the engine's, naming the call and HDF5's error stack).
    fn failed(&self, failed: Error) -> Self::Error;

    /// The error for the chunk at `offset`, which cannot be decoded for `reason`.
    fn corrupt(&self, offset: &[u64], reason: String) -> Self::Error;

    /// The error for a part of the chunk at `offset`, never written, that HDF5 failed to read
    /// (`message`: its words and error stack).
    fn never_written(&self, offset: &[u64], message: String) -> Self::Error;

    /// The file the stored chunks may be read from directly ([`RawChunks::direct_file`]).
    fn direct_file(&self) -> Option<std::fs::File>;
}

/// The stored chunks of one dataset, for the host decoder ([`RawChunks`]) and the GPU decoder
/// ([`ChunkSource`]): looked up one by one, or from the index listed once for reads of many
/// chunks.
pub struct StoredChunks<'a, F> {
    api: &'a Hdf5Api,
    dataset: hid_t,
    listed: Option<ChunkIndex>,
    face: F,
}

impl<'a, F: Face> StoredChunks<'a, F> {
    /// The chunks of `dataset` (of `chunk` elements) for a read touching `touched` of them: the
    /// index listed at once when that is many (`h5gds_chunk_codec::LIST_INDEX_FROM`), else each
    /// chunk looked up when it is needed.
    pub fn new(
        api: &'a Hdf5Api,
        dataset: hid_t,
        chunk: &[u64],
        touched: usize,
        face: F,
    ) -> Result<Self, F::Error> {
        let listed = (touched >= h5gds_chunk_codec::LIST_INDEX_FROM)
            .then(|| face.locked(|| index(api, dataset, chunk).map_err(|e| face.failed(e))))
            .transpose()?;
        Ok(StoredChunks {
            api,
            dataset,
            listed,
            face,
        })
    }

    /// The stored chunks among `touched` (the first elements of chunks of `chunk` elements), as
    /// an index.
    pub fn index_of(
        &mut self,
        chunk: &[u64],
        touched: impl IntoIterator<Item = Vec<u64>>,
    ) -> Result<ChunkIndex, F::Error> {
        if let Some(listed) = self.listed.take() {
            return Ok(listed);
        }
        let mut listing = ChunkListing::new(chunk);
        for offset in touched {
            if let Some(stored) = self.stored(&offset)? {
                listing.add(&offset, stored);
            }
        }
        Ok(listing.finish())
    }

    /// The HDF5 copy's table, the dataset and the face, for the reads of chunks never written
    /// (`crate::decoded`).
    pub(crate) fn parts(&self) -> (&'a Hdf5Api, hid_t, &F) {
        (self.api, self.dataset, &self.face)
    }
}

impl<F: Face> RawChunks for StoredChunks<'_, F> {
    type Error = F::Error;

    fn stored(&mut self, offset: &[u64]) -> Result<Option<StoredChunk>, F::Error> {
        if let Some(listed) = &self.listed {
            return Ok(listed.get(offset));
        }
        let face = &self.face;
        let (api, dataset) = (self.api, self.dataset);
        face.locked(|| location(api, dataset, offset).map_err(|f| face.failed(f.error(api))))
    }

    fn direct_file(&mut self) -> Option<std::fs::File> {
        self.face.direct_file()
    }

    fn read(&mut self, offset: &[u64], size: usize, buf: &mut Vec<u8>) -> Result<u32, F::Error> {
        buf.clear();
        buf.reserve(size);
        let (api, face, at) = (self.api, &self.face, buf.as_mut_ptr().cast());
        let mask = face.locked(|| {
            // SAFETY: `buf` has room for `size` bytes, the chunk's stored size as `stored`
            // reported it (HDF5 2.x also checks the size it is given).
            unsafe { read_stored(api, self.dataset, offset, at, size) }
                .map_err(|f| face.failed(f.error(api)))
        })?;
        // SAFETY: H5Dread_chunk succeeded, so it wrote the chunk's `size` stored bytes.
        unsafe { buf.set_len(size) };
        Ok(mask)
    }

    fn corrupt(&self, offset: &[u64], reason: String) -> F::Error {
        self.face.corrupt(offset, reason)
    }
}

impl<F: Face> ChunkSource for StoredChunks<'_, F>
where
    F::Error: From<DeviceFailure> + From<CudaError>,
{
    type Error = F::Error;

    unsafe fn read_chunk(&self, offset: &[u64], dest: u64, size: usize) -> Result<u32, F::Error> {
        let face = &self.face;
        face.locked(|| {
            // SAFETY: as the caller guarantees; the gds driver moves the bytes into device
            // memory.
            unsafe { read_stored(self.api, self.dataset, offset, dest as *mut c_void, size) }
                .map_err(|f| face.failed(f.error(self.api)))
        })
    }

    fn corrupt(&self, offset: &[u64], reason: String) -> F::Error {
        self.face.corrupt(offset, reason)
    }
}

/// How a face serialises its calls into the HDF5 copy that holds the dataset (the dataset
/// handle's, `crate::Dataset`).
pub trait Hdf5Lock {
    /// Takes the lock for the rest of the request, where the face holds it around a whole
    /// request (Python: h5py's `phil`); called before the first HDF5 call of a request.
    fn enter(&self) -> Result<()> {
        Ok(())
    }

    /// Runs one HDF5 call (or several, and the wording of their failure) under the lock, where
    /// the face takes it per call (array-io: hdf5-metno's); called from the decoding threads too.
    fn call<T>(call: impl FnOnce() -> T) -> T {
        call()
    }

    /// Runs `work`, long and with no HDF5 call but through [`Hdf5Lock::call`], as the face runs
    /// long work (Python: the GIL released).
    fn unlocked<R: Send>(&self, work: impl FnOnce() -> R + Send) -> R {
        work()
    }
}

/// Whether the bytes of `dataset` lie at the addresses HDF5 reports: its file is open with
/// `gds` or sec2 (`facts::other_driver`). The caller holds the lock of `api`'s HDF5.
pub(crate) fn bytes_at_addresses(api: &Hdf5Api, dataset: hid_t) -> Result<bool> {
    Ok(matches!(
        facts::other_driver(api, dataset)?.as_deref(),
        None | Some("sec2")
    ))
}

/// A dataset's chunk calls, errors naming it and the chunk, each call under the face's lock.
pub(crate) struct ChunkFace<'n, L> {
    api: &'static Hdf5Api,
    id: hid_t,
    name: &'n str,
    lock: PhantomData<fn() -> L>,
}

impl<'n, L> ChunkFace<'n, L> {
    pub(crate) fn new(api: &'static Hdf5Api, id: hid_t, name: &'n str) -> Self {
        ChunkFace {
            api,
            id,
            name,
            lock: PhantomData,
        }
    }
}

impl<L> Clone for ChunkFace<'_, L> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<L> Copy for ChunkFace<'_, L> {}

impl<L: Hdf5Lock> Face for ChunkFace<'_, L> {
    type Error = Error;

    fn locked<T>(&self, call: impl FnOnce() -> T) -> T {
        L::call(call)
    }

    fn failed(&self, e: Error) -> Error {
        e.in_dataset(self.name)
    }

    fn corrupt(&self, offset: &[u64], reason: String) -> Error {
        Error::new(Kind::Damaged, format!("cannot be decoded: {reason}"))
            .in_dataset(self.name)
            .at_chunk(offset)
    }

    fn never_written(&self, offset: &[u64], message: String) -> Error {
        let detail = format!("H5Dread of the chunk never written at {offset:?} failed: {message}");
        Error::hdf5(detail).in_dataset(self.name)
    }

    fn direct_file(&self) -> Option<std::fs::File> {
        L::call(|| {
            let at_addresses = bytes_at_addresses(self.api, self.id).unwrap_or(false);
            at_addresses.then(|| stored::direct_file(self.api, self.id))?
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// The one dataset the fake HDF5 knows: 1-D, chunks of 4 elements, chunks at 0 and 8 stored
    /// (`STORED`), the one at 4 never written; every other id is refused.
    const DATASET: hid_t = 7;
    const STORED: [(u64, &[u8], u32, u64); 2] = [(0, b"abc", 0, 100), (8, b"defgh", 1, 200)];

    thread_local! {
        /// How often the fake `H5Dget_chunk_info_by_coord` ran on this thread.
        static LOOKUPS: Cell<usize> = const { Cell::new(0) };
    }

    fn stored_at(dataset: hid_t, offset: *const hsize_t) -> Option<(&'static [u8], u32, u64)> {
        // SAFETY: the code under test passes one offset per axis (one axis).
        let at = unsafe { *offset };
        (dataset == DATASET)
            .then(|| STORED.iter().find(|s| s.0 == at))
            .flatten()
            .map(|&(_, bytes, mask, address)| (bytes, mask, address))
    }

    unsafe extern "C" fn info_by_coord(
        dataset: hid_t,
        offset: *const hsize_t,
        mask: *mut c_uint,
        addr: *mut haddr_t,
        size: *mut hsize_t,
    ) -> c_int {
        LOOKUPS.with(|n| n.set(n.get() + 1));
        if dataset != DATASET {
            return -1;
        }
        let found = stored_at(dataset, offset);
        // SAFETY: valid out-pointers from the code under test.
        unsafe {
            *mask = found.map_or(0, |f| f.1);
            *addr = found.map_or(HADDR_UNDEF, |f| f.2);
            *size = found.map_or(0, |f| f.0.len() as hsize_t);
        }
        0
    }

    /// HDF5 1.14's `H5Dread_chunk`: no buffer size.
    unsafe extern "C" fn read_chunk(
        dataset: hid_t,
        _dxpl: hid_t,
        offset: *const hsize_t,
        mask: *mut u32,
        buf: *mut c_void,
    ) -> c_int {
        let Some((bytes, filters, _)) = stored_at(dataset, offset) else {
            return -1;
        };
        // SAFETY: the caller's buffer holds the chunk's stored size.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), bytes.len());
            *mask = filters;
        }
        0
    }

    /// HDF5 2.x's `H5Dread_chunk2`, which refuses a buffer too small.
    unsafe extern "C" fn read_chunk2(
        dataset: hid_t,
        dxpl: hid_t,
        offset: *const hsize_t,
        mask: *mut u32,
        buf: *mut c_void,
        size: *mut usize,
    ) -> c_int {
        match stored_at(dataset, offset) {
            // SAFETY: a valid size pointer from the code under test.
            Some((bytes, _, _)) if bytes.len() <= unsafe { *size } => {
                // SAFETY: as the caller of this fake guarantees.
                unsafe { read_chunk(dataset, dxpl, offset, mask, buf) }
            }
            _ => -1,
        }
    }

    unsafe extern "C" fn chunk_iter(
        dataset: hid_t,
        _dxpl: hid_t,
        visit: h5gds_runtime::hdf5::H5D_chunk_iter_op_t,
        data: *mut c_void,
    ) -> c_int {
        if dataset != DATASET {
            return -1;
        }
        for (at, bytes, mask, address) in STORED {
            // SAFETY: the callback and its data as the code under test passed them.
            if unsafe { visit(&at, mask, address, bytes.len() as hsize_t, data) } != 0 {
                return -1;
            }
        }
        0
    }

    /// The fake HDF5's table, with `H5Dread_chunk2` (2.x) or without it (1.14), or with neither
    /// chunk read; every other function missing.
    fn fake_api(chunk2: bool, chunk: bool) -> Hdf5Api {
        let mut api = Hdf5Api::from_symbols(|_| None);
        api.H5Dget_chunk_info_by_coord = Ok(info_by_coord);
        api.H5Dchunk_iter = Ok(chunk_iter);
        if chunk2 {
            api.H5Dread_chunk2 = Ok(read_chunk2);
        }
        if chunk {
            api.H5Dread_chunk = Ok(read_chunk);
        }
        api
    }

    #[test]
    fn a_chunk_is_located_or_never_written_or_its_lookup_refused() {
        let api = fake_api(true, true);
        let at0 = location(&api, DATASET, &[0]).unwrap().unwrap();
        assert_eq!((at0.size, at0.mask, at0.address), (3, 0, 100));
        assert!(location(&api, DATASET, &[4]).unwrap().is_none());
        let refused = location(&api, DATASET + 1, &[8]).unwrap_err();
        assert_eq!(refused.call, ChunkCall::Location(vec![8]));
        assert_eq!(refused.missing, None);
        assert_eq!(
            refused.call.named(),
            "H5Dget_chunk_info_by_coord for the chunk at [8]"
        );
    }

    #[test]
    fn stored_bytes_are_read_with_h5dread_chunk2_or_else_h5dread_chunk() {
        for (chunk2, chunk) in [(true, false), (false, true)] {
            let api = fake_api(chunk2, chunk);
            let mut buf = [0u8; 5];
            // SAFETY: `buf` holds the chunk's 5 stored bytes.
            let mask = unsafe { read_stored(&api, DATASET, &[8], buf.as_mut_ptr().cast(), 5) };
            assert_eq!((mask.unwrap(), &buf), (1, b"defgh"), "{chunk2} {chunk}");
        }
        let api = fake_api(false, false);
        let mut buf = [0u8; 3];
        // SAFETY: as above, 3 bytes.
        let failed = unsafe { read_stored(&api, DATASET, &[0], buf.as_mut_ptr().cast(), 3) };
        let failed = failed.unwrap_err();
        assert_eq!(failed.call, ChunkCall::Read(vec![0]));
        assert_eq!(
            failed.missing.as_deref(),
            Some("this HDF5 library has no H5Dread_chunk2 (nor H5Dread_chunk)")
        );
        // Writing needs H5Dwrite_chunk, which the fake lacks: named, not called.
        // SAFETY: `buf` holds 3 bytes.
        let failed = unsafe { write_stored(&api, DATASET, &[0], 0, buf.as_ptr().cast(), 3) };
        assert_eq!(
            failed.unwrap_err().missing.as_deref(),
            Some("this HDF5 library has no H5Dwrite_chunk")
        );
    }

    #[test]
    fn the_index_lists_every_stored_chunk_in_one_call() {
        let api = fake_api(true, false);
        let listed = index(&api, DATASET, &[4]).unwrap();
        assert_eq!(
            listed.get(&[8]).map(|s| (s.size, s.address)),
            Some((5, 200))
        );
        assert!(listed.get(&[4]).is_none());
        let refused = index_call(&api, DATASET + 1, &[4]).unwrap_err();
        assert_eq!((refused.call, refused.missing), (ChunkCall::Index, None));
        let refused = index(&api, DATASET + 1, &[4]).unwrap_err();
        assert_eq!(refused.kind(), crate::ErrorKind::Hdf5);
        assert!(refused.to_string().starts_with("H5Dchunk_iter failed: "));
    }

    /// A face that words errors as their call's name and counts the calls made under its lock.
    struct Words {
        locked: Cell<usize>,
    }

    /// The test face's error: its words (device failures in theirs).
    #[derive(Debug, PartialEq)]
    struct Said(String);

    impl From<DeviceFailure> for Said {
        fn from(failure: DeviceFailure) -> Said {
            Said(failure.to_string())
        }
    }

    impl From<CudaError> for Said {
        fn from(err: CudaError) -> Said {
            Said(err.to_string())
        }
    }

    impl Face for Words {
        type Error = Said;

        fn locked<T>(&self, call: impl FnOnce() -> T) -> T {
            self.locked.set(self.locked.get() + 1);
            call()
        }

        fn failed(&self, failed: Error) -> Said {
            let text = failed.to_string();
            Said(text[..text.find(" failed").unwrap_or(text.len())].to_string())
        }

        fn corrupt(&self, offset: &[u64], reason: String) -> Said {
            Said(format!("{offset:?}: {reason}"))
        }

        fn never_written(&self, offset: &[u64], message: String) -> Said {
            Said(format!("{offset:?} never written: {message}"))
        }

        fn direct_file(&self) -> Option<std::fs::File> {
            None
        }
    }

    #[test]
    fn the_source_lists_the_index_for_many_chunks_and_looks_up_few() {
        let api = fake_api(true, false);
        let words = || Words {
            locked: Cell::new(0),
        };
        let many = h5gds_chunk_codec::LIST_INDEX_FROM;
        let lookups = || LOOKUPS.with(Cell::get);
        let before = lookups();
        let mut listed = StoredChunks::new(&api, DATASET, &[4], many, words()).unwrap();
        assert_eq!(listed.stored(&[0]).unwrap().map(|s| s.size), Some(3));
        assert!(listed.stored(&[4]).unwrap().is_none());
        assert_eq!(lookups(), before, "a listed index needs no lookup");
        let mut few = StoredChunks::new(&api, DATASET, &[4], 2, words()).unwrap();
        let index = few.index_of(&[4], [vec![0], vec![4]]).unwrap();
        assert_eq!(lookups(), before + 2);
        assert_eq!(index.get(&[0]).map(|s| s.address), Some(100));
        let mut buf = Vec::new();
        assert_eq!(few.read(&[8], 5, &mut buf), Ok(1));
        assert_eq!(buf, b"defgh");
        // SAFETY: `buf` holds the chunk's 5 stored bytes.
        let mask = unsafe { few.read_chunk(&[8], buf.as_mut_ptr() as u64, 5) };
        assert_eq!(mask, Ok(1));
        assert_eq!(
            few.face.locked.get(),
            4,
            "every HDF5 call under the face's lock"
        );
        assert_eq!(
            few.read(&[0], 2, &mut buf),
            Err(Said("H5Dread_chunk for the chunk at [0]".into())),
            "H5Dread_chunk2 refuses a buffer smaller than the chunk"
        );
        let corrupt = RawChunks::corrupt(&few, &[0], "bad".into());
        assert_eq!(corrupt, Said("[0]: bad".into()));
        let refused = StoredChunks::new(&api, DATASET + 1, &[4], many, words()).err();
        assert_eq!(refused, Some(Said("H5Dchunk_iter".into())));
    }
}
