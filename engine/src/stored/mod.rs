//! Reads that need no HDF5 call, for both faces: a dataset's storage, resolved once while it
//! cannot change (its file open read-only and not for SWMR reading, through sec2 or `gds`, with no
//! user block: [`direct_file`]), serves selections from any number of threads at once. Contiguous
//! datasets are read run by run at their address ([`runs`]); chunked ones (unfiltered, or a
//! pipeline h5gds decodes) through `h5gds_chunk_codec::read` over the chunk index listed once, a
//! read inside one chunk from the chunk decoded and kept for the next ([`chunk_cache`]); a
//! gather's runs of rows share the chunks they touch ([`gather`]). A read touching a chunk never
//! written is left to HDF5 (which fills it), as is everything else (compact, external, virtual,
//! conversions, other filters).

mod chunk_cache;
mod gather;
mod runs;
mod source;

pub use source::{ByteSource, Source};

use crate::facts::StoredLayout;
use crate::policy::settings::filters_left_to_hdf5;
use crate::transfer::hyperslab_elements;
use chunk_cache::{Kept, LargeKept};
use h5gds_chunk_codec::place::{chunks_selected, ChunkPart};
use h5gds_chunk_codec::{ChunkIndex, HostRead, Hyperslab, Pipeline, RawChunks, StoredChunk};
use h5gds_runtime::hdf5::{hid_t, hsize_t, Hdf5Api, IdKind, Owned};
use std::collections::VecDeque;
use std::ffi::{c_int, c_uint, c_void};
use std::fs::File;
use std::sync::{Arc, Mutex};

/// How the dataset's elements are stored.
enum Storage {
    /// One run of bytes at `address`.
    Contiguous { address: u64 },
    /// Chunks of `chunk` elements, each where `index` says.
    Chunked {
        chunk: Vec<u64>,
        /// The pipeline's filter ids, for the choice of decoder of reads into device memory.
        filters: Vec<i32>,
        pipeline: Pipeline,
        index: Box<ChunkIndex>,
        /// The last chunks reads inside one chunk decoded, as HDF5's chunk cache keeps them.
        kept: Mutex<Kept>,
        /// The last large chunk a read inside one chunk decoded.
        large: Box<LargeKept>,
    },
}

/// Where a face writes the engine's debug lines (its own logger).
pub type Log = fn(std::fmt::Arguments<'_>);

/// Why a read failed: the caller's selection or buffer, or a setting (`Invalid`: Python's
/// ValueError), or the file's bytes (`Failed`, `Corrupt`: OSError).
#[derive(Debug)]
pub enum StoredError {
    Invalid(String),
    Failed(String),
    /// The chunk at `chunk` of dataset `dataset` cannot be decoded (array-io names both apart).
    Corrupt {
        dataset: String,
        chunk: Vec<u64>,
        reason: String,
    },
}

impl std::fmt::Display for StoredError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoredError::Invalid(m) | StoredError::Failed(m) => f.write_str(m),
            StoredError::Corrupt {
                dataset,
                chunk,
                reason,
            } => write!(
                f,
                "dataset {dataset}: the chunk at {chunk:?} cannot be decoded: {reason}"
            ),
        }
    }
}

/// The driver's I/O thread count, asked only where a read is large enough to use it.
pub type Threads<'a> = &'a dyn Fn() -> Result<usize, String>;

/// A dataset's storage, resolved once; it serves selections with no HDF5 call.
pub struct Stored {
    name: String,
    /// Where its bytes come from: the local file, or the remote object the driver opened.
    source: Box<dyn source::ByteSource>,
    shape: Vec<u64>,
    element: usize,
    storage: Storage,
    log: Log,
}

/// Reads below this many bytes stay on the calling thread.
const PARALLEL_BYTES: usize = 1 << 20;
/// Pieces contiguous reads are split into, for the pool.
const PIECE_BYTES: u64 = 4 << 20;

/// The pool's `threads` for work that gains from them (`parallel`); none (the calling thread
/// does it) otherwise, or where the pool is busy.
fn pool_for(parallel: bool, threads: usize) -> Option<Arc<rayon::ThreadPool>> {
    (parallel && threads > 1)
        .then(|| h5gds_runtime::pool::get(threads))
        .flatten()
}

/// Runs `each` for `0..n`: on `pool`, at least `group` a task, or in order on the calling thread.
fn each_on<E: Send>(
    pool: Option<&rayon::ThreadPool>,
    n: usize,
    group: usize,
    each: impl Fn(usize) -> Result<(), E> + Send + Sync,
) -> Result<(), E> {
    use rayon::prelude::*;
    match pool {
        Some(pool) => pool.install(|| {
            (0..n)
                .into_par_iter()
                .with_min_len(group)
                .try_for_each(each)
        }),
        None => (0..n).try_for_each(each),
    }
}

/// The chunk index as `h5gds_chunk_codec::read` asks for it. The bytes come from the file,
/// read by the decoding threads themselves where it has a descriptor (`direct_file`); else from
/// the source's reader of the chunks' ranges in the order the decoder asks for them (chunk
/// order), fetched ahead of it (a remote object: concurrent GETs, neighbours coalesced).
struct Indexed<'a> {
    stored: &'a Stored,
    index: &'a ChunkIndex,
    /// The chunks the read will ask for, in chunk order, not yet asked for.
    wanted: VecDeque<(Vec<u64>, StoredChunk)>,
    /// Their reader, started at the first chunk asked for; `None` after an unforeseen one
    /// (then each chunk is read when asked for).
    ahead: Option<Box<dyn source::InOrder + 'a>>,
    started: bool,
}

impl<'a> Indexed<'a> {
    /// The index of `stored`, for a read of the chunks holding `parts` (any order, repeats).
    fn new<'p>(
        stored: &'a Stored,
        index: &'a ChunkIndex,
        parts: impl IntoIterator<Item = &'p ChunkPart>,
    ) -> Indexed<'a> {
        let offsets: std::collections::BTreeSet<&Vec<u64>> =
            parts.into_iter().map(|p| &p.offset).collect();
        let wanted = offsets
            .into_iter()
            .filter_map(|o| Some((o.clone(), index.get(o)?)))
            .collect();
        Indexed {
            stored,
            index,
            wanted,
            ahead: None,
            started: false,
        }
    }
}

impl RawChunks for Indexed<'_> {
    type Error = StoredError;

    fn stored(&mut self, offset: &[u64]) -> Result<Option<StoredChunk>, StoredError> {
        Ok(self.index.get(offset))
    }

    fn read(&mut self, offset: &[u64], size: usize, buf: &mut Vec<u8>) -> Result<u32, StoredError> {
        let stored = self.stored;
        if !self.started {
            self.started = true;
            let ranges = self
                .wanted
                .iter()
                .map(|(_, c)| c.address..c.address + c.size as u64)
                .collect();
            self.ahead = Some(stored.source.in_order(ranges).map_err(|e| {
                StoredError::Failed(format!(
                    "dataset {} of {}: {e}",
                    stored.name,
                    stored.source.name()
                ))
            })?);
        }
        let next = self.wanted.pop_front();
        let chunk = match (&mut self.ahead, next) {
            (Some(ahead), Some((o, chunk))) if o == offset && chunk.size == size => {
                ahead.next_into(buf).map_err(|e| {
                    StoredError::Failed(format!(
                        "dataset {} of {}: reading the chunk at {offset:?} ({} bytes at byte \
                         {}) failed: {e}",
                        stored.name,
                        stored.source.name(),
                        chunk.size,
                        chunk.address
                    ))
                })?;
                return Ok(chunk.mask);
            }
            // Not the chunk foreseen: each is read when asked for from now on.
            _ => {
                self.ahead = None;
                self.wanted.clear();
                self.index.get(offset).ok_or_else(|| {
                    StoredError::Failed(format!(
                        "dataset {}: the chunk at {offset:?} is not in its chunk index",
                        stored.name
                    ))
                })?
            }
        };
        stored.read_stored(offset, &chunk, buf)?;
        Ok(chunk.mask)
    }

    fn direct_file(&mut self) -> Option<File> {
        self.stored.source.direct_file()
    }

    fn corrupt(&self, offset: &[u64], reason: String) -> StoredError {
        self.stored.undecodable(offset, reason)
    }
}

/// Whether `layout` keeps the dataset as the file's own bytes at addresses that cannot change
/// (contiguous, allocated, not external; or chunked): only then is the file opened anew.
pub fn own_bytes(layout: &StoredLayout) -> bool {
    matches!(
        layout,
        StoredLayout::Contiguous {
            address: Some(_),
            external: false
        } | StoredLayout::Chunked { .. }
    )
}

/// The handle the driver of the file holding `dataset` hands out, when its bytes may be read at
/// the addresses HDF5 reports: the file open read-only (HDF5 then holds no newer bytes than the
/// file's), with no user block. The face has checked the driver is sec2 or `gds` (whose
/// addresses are the file's offsets, and whose handle points to the descriptor, an int: -1 for
/// `gds`'s remote files). `None` otherwise, or when HDF5 cannot tell. The caller holds the lock
/// of `api`'s HDF5.
fn read_only_handle(api: &Hdf5Api, dataset: hid_t) -> Option<*mut c_void> {
    let (file_of, intent_of, create_of, userblock_of, handle_of) = (
        api.H5Iget_file_id.ok()?,
        api.H5Fget_intent.ok()?,
        api.H5Fget_create_plist.ok()?,
        api.H5Pget_userblock.ok()?,
        api.H5Fget_vfd_handle.ok()?,
    );
    const READ_WRITE: c_uint = 0x0001;
    const H5P_DEFAULT: hid_t = 0;
    // SAFETY: plain queries on ids HDF5 checks, each id opened here owned by an `Owned`.
    unsafe {
        let file = Owned::new(api, IdKind::File, file_of(dataset), "H5Iget_file_id").ok()?;
        let mut intent: c_uint = READ_WRITE;
        let mut userblock: hsize_t = 1;
        let fcpl = Owned::new(
            api,
            IdKind::PropertyList,
            create_of(file.id()),
            "H5Fget_create_plist",
        );
        if let Ok(fcpl) = fcpl {
            userblock_of(fcpl.id(), &mut userblock);
        }
        let mut handle: *mut c_void = std::ptr::null_mut();
        let ok = intent_of(file.id(), &mut intent) >= 0
            && intent & READ_WRITE == 0
            && userblock == 0
            && handle_of(file.id(), H5P_DEFAULT, &mut handle) >= 0
            && !handle.is_null();
        drop(file);
        h5gds_runtime::hdf5::stack(api);
        ok.then_some(handle)
    }
}

/// The descriptor a handle of sec2 or `gds` points to (-1: none, a remote file).
fn descriptor(handle: *mut c_void) -> c_int {
    // SAFETY: the handle sec2 and gds hand out points to an int (`read_only_handle`), read at
    // once while the file is open (the caller holds HDF5's lock, and the dataset is open).
    unsafe { *handle.cast::<c_int>() }
}

/// The file holding `dataset`, opened anew for reading, when its bytes may be read at the
/// addresses HDF5 reports (see `read_only_handle`). `None` otherwise, for a remote file (no
/// descriptor), or when HDF5 cannot tell. The caller holds the lock of `api`'s HDF5.
pub fn direct_file(api: &Hdf5Api, dataset: hid_t) -> Option<File> {
    let fd = descriptor(read_only_handle(api, dataset)?);
    (fd >= 0).then(|| h5gds_chunk_codec::reopen(fd)).flatten()
}

/// Where the bytes of `dataset` may be read from with no HDF5 call, as [`direct_file`] says:
/// the local file opened anew, or the remote object the `gds` driver opened (this copy of it:
/// `h5gds::remote_file_at`), every request pinned to the version it saw. The caller holds the
/// lock of `api`'s HDF5.
pub fn byte_source(api: &Hdf5Api, dataset: hid_t) -> Option<Source> {
    let handle = read_only_handle(api, dataset)?;
    match descriptor(handle) {
        fd if fd >= 0 => h5gds_chunk_codec::reopen(fd).map(Source::from),
        _ => h5gds::remote_file_at(handle).map(Source::from),
    }
}

impl Stored {
    /// The storage of dataset `name` of `shape` (elements of `element` bytes, read with no
    /// conversion) as `layout` says, read from `source` (a `File` from [`direct_file`], or
    /// [`byte_source`]); `index` lists the chunk
    /// index of chunks of the shape it is given. None where the engine does not serve it: a
    /// scalar, storage not the file's own bytes ([`own_bytes`]), a pipeline h5gds does not
    /// decode, a chunk shape not the dataset's.
    pub fn resolve<E>(
        name: String,
        source: impl Into<Source>,
        shape: Vec<u64>,
        element: usize,
        layout: StoredLayout,
        index: impl FnOnce(&[u64]) -> Result<ChunkIndex, E>,
        log: Log,
    ) -> Result<Option<Stored>, E> {
        let source = source.into().0;
        let storage = match layout {
            _ if shape.is_empty() => return Ok(None),
            StoredLayout::Contiguous {
                address: Some(address),
                external: false,
            } => Storage::Contiguous { address },
            StoredLayout::Chunked { chunk, filters, .. } => {
                let ids = filters.iter().map(|f| f.id).collect();
                let pipeline = match filters.is_empty() {
                    true => Pipeline::unfiltered(),
                    false => match Pipeline::for_filters(&filters, element) {
                        Ok(p) => p,
                        Err(_) => return Ok(None),
                    },
                };
                if chunk.len() != shape.len() || chunk.contains(&0) {
                    return Ok(None);
                }
                // Listed through HDF5, the source fetching ahead of its reads.
                let (mut index, mut listed) = (Some(index), None);
                source.listing_index(&mut || listed = index.take().map(|list| list(&chunk)));
                // (A source that did not run it: listed here.)
                let Some(listed) = listed.or_else(|| index.take().map(|list| list(&chunk))) else {
                    return Ok(None);
                };
                let listed = listed?;
                Storage::Chunked {
                    index: Box::new(listed),
                    chunk,
                    filters: ids,
                    pipeline,
                    kept: Mutex::default(),
                    large: Box::default(),
                }
            }
            _ => return Ok(None),
        };
        Ok(Some(Stored {
            name,
            source,
            shape,
            element,
            storage,
            log,
        }))
    }

    /// The dataset's shape.
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    /// The bytes of one element.
    pub fn element(&self) -> usize {
        self.element
    }

    /// The dataset's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// For compressed chunks, the filter ids and the chunk shape (for the choice of decoder).
    pub fn filtered_chunks(&self) -> Option<(&[i32], &[u64])> {
        match &self.storage {
            Storage::Chunked { chunk, filters, .. } if !filters.is_empty() => {
                Some((filters, chunk))
            }
            _ => None,
        }
    }

    /// The bytes of one decoded chunk, for a dataset whose chunks are compressed (None otherwise).
    fn decoded_chunk_bytes(&self) -> Option<usize> {
        match &self.storage {
            Storage::Chunked {
                chunk, pipeline, ..
            } if !pipeline.stages().is_empty() => {
                Some(chunk.iter().product::<u64>() as usize * self.element)
            }
            _ => None,
        }
    }

    fn undecodable(&self, offset: &[u64], reason: String) -> StoredError {
        StoredError::Corrupt {
            dataset: self.name.clone(),
            chunk: offset.to_vec(),
            reason,
        }
    }

    /// Checks a selection against the dataset's shape and a buffer of `nbytes` against it.
    pub fn check(&self, sel: &Hyperslab, nbytes: usize) -> Result<(), String> {
        let rank = self.shape.len();
        if [sel.start.len(), sel.step.len(), sel.count.len()] != [rank; 3] {
            return Err(format!(
                "the selection has {} axes, dataset {} has {rank}",
                sel.count.len(),
                self.name
            ));
        }
        hyperslab_elements(&self.shape, (sel.start, sel.step, sel.count), 0)?;
        let elements = sel.count.iter().try_fold(1u64, |n, &c| n.checked_mul(c));
        if elements.and_then(|n| n.checked_mul(self.element as u64)) != Some(nbytes as u64) {
            return Err(format!(
                "the buffer has {nbytes} bytes, the selection of dataset {} needs {:?} elements of \
                 {} bytes",
                self.name, elements, self.element
            ));
        }
        Ok(())
    }

    /// Whether this storage serves `sel` (a checked selection), with the chunks it touches;
    /// `None`: HDF5 is to read it (chunks never written; filtered chunks with
    /// `H5GDS_HOST_CODEC=0`).
    pub fn serves(&self, sel: &Hyperslab) -> Result<Option<Vec<ChunkPart>>, String> {
        let Storage::Chunked {
            chunk,
            index,
            pipeline,
            ..
        } = &self.storage
        else {
            return Ok(Some(Vec::new()));
        };
        let filtered = !pipeline.stages().is_empty();
        if filters_left_to_hdf5(filtered)
            .map_err(|e| e.to_string())?
            .is_some()
        {
            return Ok(None);
        }
        let parts = chunks_selected(sel, chunk);
        if parts.iter().any(|part| !index.contains(&part.offset)) {
            return Ok(None);
        }
        Ok(Some(parts))
    }

    /// The threads a read of `nbytes` over `parts` (what [`Stored::serves`] said) may use: one
    /// where its work is below [`PARALLEL_BYTES`] (so the settings are not read: a row read costs
    /// a few microseconds, and a pool's hand-off cost a small read spanning two chunks 20 µs, 3x
    /// h5py's), else the driver's I/O threads. The work is the bytes read, or for compressed
    /// chunks the bytes decoded.
    pub fn threads_for(
        &self,
        nbytes: usize,
        parts: &[ChunkPart],
        threads: Threads,
    ) -> Result<usize, StoredError> {
        let work = match self.decoded_chunk_bytes() {
            // (A read inside one chunk stays on the calling thread whatever its size.)
            Some(chunk_bytes) if parts.len() > 1 => parts.len().saturating_mul(chunk_bytes),
            _ => nbytes,
        };
        if work < PARALLEL_BYTES {
            return Ok(1);
        }
        threads().map_err(StoredError::Invalid)
    }

    /// Reads the checked selection `sel` into `out` where this storage serves it; false
    /// (nothing read) where HDF5 is to read it.
    pub fn read(
        &self,
        sel: &Hyperslab,
        out: &mut [u8],
        threads: Threads,
    ) -> Result<bool, StoredError> {
        let Some(parts) = self.serves(sel).map_err(StoredError::Invalid)? else {
            return Ok(false);
        };
        let threads = self.threads_for(out.len(), &parts, threads)?;
        self.read_served(sel, &parts, out, threads)?;
        Ok(true)
    }

    /// Reads a selection [`Stored::serves`] (`parts`: the chunks it touches) into `out`, on
    /// `threads` of the pool.
    pub fn read_served(
        &self,
        sel: &Hyperslab,
        parts: &[ChunkPart],
        out: &mut [u8],
        threads: usize,
    ) -> Result<(), StoredError> {
        match &self.storage {
            Storage::Contiguous { address } => self
                .read_runs(*address, &self.shape, sel, out, threads)
                .map_err(StoredError::Failed),
            Storage::Chunked {
                chunk,
                pipeline,
                index,
                ..
            } => {
                if let [part] = parts {
                    return self.read_in_one_chunk(part, sel, out);
                }
                let r = HostRead {
                    pipeline,
                    chunk,
                    element_size: self.element,
                    selection: *sel,
                    threads,
                };
                let mut source = Indexed::new(self, index, parts);
                let outcome = h5gds_chunk_codec::read(&mut source, &r, out)?;
                let read_by = match outcome.direct {
                    true => "read from the file by those threads",
                    false => "fetched ahead of them from the source",
                };
                (self.log)(format_args!(
                    "{}: {} chunks decoded on {} threads ({read_by}: {}), with no HDF5 call",
                    self.name,
                    parts.len(),
                    threads,
                    self.source.name()
                ));
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A contiguous dataset of 5 x 6 u16 elements (element k holds k) at byte 16 of a file.
    fn contiguous() -> Stored {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&[0xee; 16]).unwrap();
        let elements: Vec<u8> = (0u16..30).flat_map(u16::to_ne_bytes).collect();
        file.write_all(&elements).unwrap();
        let layout = StoredLayout::Contiguous {
            address: Some(16),
            external: false,
        };
        let never = |_: &[u64]| -> Result<ChunkIndex, ()> { unreachable!("not chunked") };
        let stored = Stored::resolve("/x".into(), file, vec![5, 6], 2, layout, never, |_| {});
        stored.unwrap().unwrap()
    }

    #[test]
    fn a_failed_read_names_the_dataset_and_the_file() {
        // The file ends 10 bytes into the dataset's storage: reading past them fails.
        let named = tempfile::NamedTempFile::new().unwrap();
        named.as_file().write_all(&[0u8; 26]).unwrap();
        let layout = StoredLayout::Contiguous {
            address: Some(16),
            external: false,
        };
        let never = |_: &[u64]| -> Result<ChunkIndex, ()> { unreachable!("not chunked") };
        let file = named.reopen().unwrap();
        let stored = Stored::resolve("/x".into(), file, vec![5, 6], 2, layout, never, |_| {})
            .unwrap()
            .unwrap();
        let sel = Hyperslab {
            start: &[0, 0],
            step: &[1, 1],
            count: &[5, 6],
        };
        let mut out = vec![0u8; 60];
        let e = stored
            .read(&sel, &mut out, &|| Ok(1))
            .unwrap_err()
            .to_string();
        let path = named.path().display().to_string();
        assert!(
            e.starts_with(&format!(
                "dataset /x of '{path}': reading 60 bytes at byte 16 failed"
            )),
            "{e}"
        );
    }

    fn values(bytes: &[u8]) -> Vec<u16> {
        bytes
            .chunks_exact(2)
            .map(|b| u16::from_ne_bytes([b[0], b[1]]))
            .collect()
    }

    #[test]
    fn hyperslabs_and_gathers_of_a_contiguous_dataset_read_its_bytes() {
        let stored = contiguous();
        let one = || Ok(1);
        // Rows 1 and 3, every other column from 1.
        let sel = Hyperslab {
            start: &[1, 1],
            step: &[2, 2],
            count: &[2, 3],
        };
        let mut out = vec![0u8; 12];
        stored.check(&sel, out.len()).unwrap();
        assert!(stored.read(&sel, &mut out, &one).unwrap());
        assert_eq!(values(&out), [7, 9, 11, 19, 21, 23]);
        // Rows 4, 0, 1 whole, in the caller's order.
        let rest = Hyperslab {
            start: &[0],
            step: &[1],
            count: &[6],
        };
        let mut out = vec![0u8; 36];
        let runs = [(4, 1), (0, 2)];
        assert!(stored
            .gather_in_place(runs, 3, &rest, &mut out, &one)
            .unwrap());
        let want: Vec<u16> = (24..30).chain(0..12).collect();
        assert_eq!(values(&out), want);
        // Part of each row is no whole row: the distinct rows' parts, through `gather`.
        let part = Hyperslab {
            start: &[2],
            step: &[1],
            count: &[2],
        };
        assert!(!stored
            .gather_in_place(runs, 3, &part, &mut out[..12], &one)
            .unwrap());
        let mut out = vec![0u8; 12];
        assert!(stored
            .gather(&[(0, 2), (4, 1)], 3, &part, &mut out, &one)
            .unwrap());
        assert_eq!(values(&out), [2, 3, 8, 9, 26, 27]);
    }

    #[test]
    fn selections_and_buffers_that_do_not_fit_are_refused() {
        let stored = contiguous();
        let sel = |start: &'static [u64], count: &'static [u64]| Hyperslab {
            start,
            step: &[1, 1],
            count,
        };
        let err = stored.check(&sel(&[0, 4], &[1, 3]), 6).unwrap_err();
        assert!(err.starts_with("selection out of range on axis 1"), "{err}");
        let err = stored.check(&sel(&[0, 0], &[1, 3]), 8).unwrap_err();
        assert!(err.contains("needs Some(3) elements of 2 bytes"), "{err}");
        let err = stored
            .gather(&[(0, 1)], 1, &sel(&[0], &[6]), &mut [0u8; 5], &|| Ok(1))
            .unwrap_err();
        assert!(matches!(err, StoredError::Invalid(_)), "{err}");
        // Storage that is not the file's own bytes is not the engine's to read.
        let file = tempfile::tempfile().unwrap();
        let never = |_: &[u64]| -> Result<ChunkIndex, ()> { unreachable!() };
        let compact = Stored::resolve(
            "/c".into(),
            file,
            vec![4],
            1,
            StoredLayout::Compact,
            never,
            |_| {},
        );
        assert!(compact.unwrap().is_none());
    }
}
