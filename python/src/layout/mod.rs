//! Reads that need no HDF5 call (issue 26): a dataset's storage, resolved once under h5py's lock
//! and kept while it cannot change, serves `h5gds.read` into host memory from any number of
//! threads at once, with neither h5py's lock nor the GIL held while bytes move. Kept only where
//! nothing can change the storage under it: the file open read-only and not for SWMR reading
//! (the Python side checks that), through sec2 or `gds` with no user block
//! (`hdf5::direct_file`, which also opens the file anew for reading). Contiguous datasets are
//! read run by run at their address; chunked ones (unfiltered, or a pipeline h5gds decodes)
//! through `h5gds_chunk_codec::read` over the chunk index listed once, a read inside one chunk
//! from the chunk decoded and kept for the next (as HDF5's chunk cache does; one chunk above its
//! 1 MiB per dataset, within a budget for the process); a gather's runs of compressed rows share
//! the chunks they touch, each decoded once per call. A read that touches a
//! chunk never written is left to HDF5 (which fills it), as is everything else (compact,
//! external, virtual, conversions, other filters).

mod chunk_cache;
mod gather;
mod runs;

use chunk_cache::{Kept, LargeKept};

use crate::call_settings::CallSettings;
use crate::device;
use crate::device_error;
use crate::gather::{GatherPlan, HostBuffer, Rest};
use crate::hdf5::{self, Hid, StoredLayout};
use h5gds_chunk_codec::place::{chunks_selected, ChunkPart};
use h5gds_chunk_codec::{
    ChunkIndex, Filter, HostRead, Hyperslab, Pipeline, RawChunks, StoredChunk,
};
use h5gds_route::route::{choose_decoder, Decoder};
use h5gds_runtime::pinned;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use std::fs::File;
use std::sync::Mutex;

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
        /// The last chunk above [`KEPT_CHUNK_MAX`] a read inside one chunk decoded.
        large: Box<LargeKept>,
    },
}

/// A dataset's storage, resolved once; `read` serves selections of it with no HDF5 call.
#[pyclass(frozen, module = "h5gds._native")]
pub struct Layout {
    name: String,
    file: File,
    /// The file is open with sec2 (else `gds`): the driver would stage device reads.
    sec2: bool,
    shape: Vec<u64>,
    element: usize,
    storage: Storage,
}

/// Reads below this many bytes stay on the calling thread.
const PARALLEL_BYTES: usize = 1 << 20;
/// Pieces contiguous reads are split into, for the pool.
const PIECE_BYTES: u64 = 4 << 20;

/// The chunk index as `h5gds_chunk_codec::read` asks for it; the bytes come from the file.
struct Indexed<'a> {
    layout: &'a Layout,
    index: &'a ChunkIndex,
}

impl RawChunks for Indexed<'_> {
    type Error = String;

    fn stored(&mut self, offset: &[u64]) -> Result<Option<StoredChunk>, String> {
        Ok(self.index.get(offset))
    }

    fn read(&mut self, offset: &[u64], _size: usize, _buf: &mut Vec<u8>) -> Result<u32, String> {
        Err(format!(
            "the chunk at {offset:?} has no copy of the file to be read from"
        ))
    }

    fn direct_file(&mut self) -> Option<File> {
        self.layout.file.try_clone().ok()
    }

    fn corrupt(&self, offset: &[u64], reason: String) -> String {
        format!(
            "dataset {}: the chunk at {offset:?} cannot be decoded: {reason}",
            self.layout.name
        )
    }
}

/// Whether the file holding `dataset` is open with sec2 (`hdf5::direct_file` serves sec2 and
/// `gds` only). The caller holds h5py's lock.
fn sec2(dataset: Hid) -> bool {
    matches!(hdf5::other_driver(dataset), Ok(Some(_)))
}

/// The bytes of one row of a gather's buffer of `nbytes` holding `rows` rows (`what`: the rows
/// counted, for the message); ValueError where they do not divide it.
fn row_bytes(nbytes: usize, rows: u64, what: &str) -> PyResult<u64> {
    let row_bytes = nbytes as u64 / rows;
    if row_bytes * rows != nbytes as u64 {
        return Err(PyValueError::new_err(format!(
            "the buffer has {nbytes} bytes, not a whole number of rows for the {rows} {what} of \
             the gather"
        )));
    }
    Ok(row_bytes)
}

/// The driver's I/O thread count, as the call's settings say.
fn threads(settings: &CallSettings) -> PyResult<usize> {
    settings.nthreads().map_err(PyValueError::new_err)
}

/// A device array a read fills: `nbytes` at `address`, on device `claimed_ordinal` if the array
/// says, its producer's `stream` (0: none) waited for first.
pub(crate) struct DeviceOut {
    pub address: u64,
    pub nbytes: usize,
    pub claimed_ordinal: Option<i32>,
    pub stream: u64,
}

/// The threads a read of `nbytes` over `parts` may use: one where its work is below
/// [`PARALLEL_BYTES`] (so the settings are not read: a row read costs a few microseconds, and
/// reading them cost one; and a pool's hand-off cost a small read spanning two chunks 20 µs, 3x
/// h5py's), else the driver's I/O threads. The work is the bytes read, or for compressed chunks
/// the bytes decoded.
fn threads_for(
    nbytes: usize,
    parts: &[ChunkPart],
    decoded_chunk: Option<usize>,
    settings: &CallSettings,
) -> PyResult<usize> {
    let work = match decoded_chunk {
        // (A read inside one chunk stays on the calling thread whatever its size.)
        Some(chunk_bytes) if parts.len() > 1 => parts.len().saturating_mul(chunk_bytes),
        _ => nbytes,
    };
    if work < PARALLEL_BYTES {
        return Ok(1);
    }
    threads(settings)
}

/// The storage of a chunked dataset of `shape` with chunks of `chunk` and the pipeline
/// `filters` (`(id, client values)`), its chunk index listed now; None where h5gds does not
/// decode the pipeline or the chunk shape is not the dataset's. The caller holds h5py's lock.
fn chunked_storage(
    dataset: Hid,
    shape: &[u64],
    element: usize,
    chunk: Vec<u64>,
    filters: Vec<(i32, Vec<u32>)>,
) -> PyResult<Option<Storage>> {
    let ids = filters.iter().map(|(id, _)| *id).collect();
    let filters: Vec<Filter> = filters
        .into_iter()
        .map(|(id, values)| Filter { id, values })
        .collect();
    let pipeline = if filters.is_empty() {
        Pipeline::unfiltered()
    } else {
        match Pipeline::for_filters(&filters, element) {
            Ok(p) => p,
            Err(_) => return Ok(None),
        }
    };
    if chunk.len() != shape.len() || chunk.contains(&0) {
        return Ok(None);
    }
    let index = hdf5::chunk_index(dataset, &chunk).map_err(PyOSError::new_err)?;
    Ok(Some(Storage::Chunked {
        chunk,
        filters: ids,
        pipeline,
        index: Box::new(index),
        kept: Mutex::default(),
        large: Box::default(),
    }))
}

#[pymethods]
impl Layout {
    /// The layout of `dataset` for reads into elements of `element` bytes of the memory type
    /// `mem_type` (an object dtype's never), or None where HDF5 is to read it: its file is
    /// writable or read for SWMR, it is a scalar, HDF5 would convert its elements, or its storage
    /// is neither the file's own bytes (contiguous, allocated, not external; or chunked through a
    /// pipeline h5gds decodes) nor read through sec2 or `gds` with no user block. The caller
    /// holds h5py's lock.
    #[staticmethod]
    pub(crate) fn resolve(dataset: Hid, mem_type: Hid, element: usize) -> PyResult<Option<Layout>> {
        if !hdf5::read_only_file(dataset).map_err(PyOSError::new_err)? {
            return Ok(None);
        }
        let shape = hdf5::dataset_dims(dataset).map_err(PyOSError::new_err)?;
        if shape.is_empty() {
            return Ok(None);
        }
        let facts = hdf5::dataset_facts(dataset, mem_type).map_err(PyOSError::new_err)?;
        if !facts.same_type {
            return Ok(None);
        }
        // The file's own bytes, at addresses that cannot change: then the file is opened anew.
        let own_bytes = matches!(
            facts.layout,
            StoredLayout::Contiguous {
                address: Some(_),
                external: false
            } | StoredLayout::Chunked { .. }
        );
        let Some(file) = own_bytes.then(|| hdf5::direct_file(dataset)).flatten() else {
            return Ok(None);
        };
        let storage = match facts.layout {
            StoredLayout::Chunked { chunk, filters, .. } => {
                match chunked_storage(dataset, &shape, element, chunk, filters)? {
                    Some(storage) => storage,
                    None => return Ok(None),
                }
            }
            StoredLayout::Contiguous {
                address: Some(address),
                ..
            } => Storage::Contiguous { address },
            _ => return Ok(None),
        };
        Ok(Some(Layout {
            name: hdf5::object_name(dataset),
            file,
            sec2: sec2(dataset),
            shape,
            element,
            storage,
        }))
    }

    /// Reads the hyperslab (`start`, `step`, `count`) into the host buffer at `buffer`
    /// (`nbytes`: the selection's elements, row-major), with no HDF5 call and neither h5py's lock
    /// nor the GIL held. False when HDF5 is to read it (it touches chunks never written, or
    /// `H5GDS_HOST_CODEC=0` and the chunks are filtered); nothing was read then. The caller keeps
    /// the buffer alive.
    fn read(
        &self,
        py: Python<'_>,
        start: Vec<u64>,
        step: Vec<u64>,
        count: Vec<u64>,
        buffer: usize,
        nbytes: usize,
    ) -> PyResult<bool> {
        let sel = Hyperslab {
            start: &start,
            step: &step,
            count: &count,
        };
        // SAFETY: the Python caller passes the address and size of a live, writable host buffer
        // it keeps referenced for the call.
        unsafe { self.read_host(py, &sel, buffer, nbytes, &CallSettings::default()) }
    }

    /// Reads the hyperslab (`start`, `step`, `count`) into the device array at `address`
    /// (`nbytes`; on device `claimed_ordinal` if it says; its producer's `stream`, 0 for none,
    /// waited for first) where the layout serves it ([`Layout::read_into_device`]); False when
    /// the driver or HDF5 is to read it, nothing read then. The caller keeps the array alive.
    #[allow(clippy::too_many_arguments)]
    fn read_to_device(
        &self,
        py: Python<'_>,
        start: Vec<u64>,
        step: Vec<u64>,
        count: Vec<u64>,
        address: u64,
        nbytes: usize,
        claimed_ordinal: Option<i32>,
        stream: u64,
    ) -> PyResult<bool> {
        let sel = Hyperslab {
            start: &start,
            step: &step,
            count: &count,
        };
        let out = DeviceOut {
            address,
            nbytes,
            claimed_ordinal,
            stream,
        };
        self.read_into_device(py, &sel, &out, &CallSettings::default())
    }

    /// Reads a gather's rows straight into the caller's order (the buffer at `buffer`,
    /// `nbytes`: one row per index, repeats included), each run of rows that are neighbours both
    /// in the file and in the caller's order read as one piece, on the pool's threads, with no
    /// HDF5 call, no buffer of distinct rows to copy from, and neither h5py's lock nor the GIL
    /// held. For contiguous datasets and whole rows only (`rest_*` selects all of the other
    /// axes); False otherwise, with nothing read. The caller keeps the buffer alive.
    #[allow(clippy::too_many_arguments)]
    fn gather_in_place(
        &self,
        py: Python<'_>,
        plan: &Bound<'_, GatherPlan>,
        rest_start: Vec<u64>,
        rest_step: Vec<u64>,
        rest_count: Vec<u64>,
        buffer: usize,
        nbytes: usize,
    ) -> PyResult<bool> {
        let rest = Rest {
            start: &rest_start,
            step: &rest_step,
            count: &rest_count,
        };
        self.gather_rows_in_place(
            py,
            plan.get(),
            &rest,
            HostBuffer {
                address: buffer,
                nbytes,
            },
            &CallSettings::default(),
        )
    }

    /// Reads the distinct rows of a gather's `plan` (each row: the hyperslab `rest_*` of the
    /// other axes) into the host buffer at `buffer` (`nbytes`: the rows in increasing order),
    /// its runs of rows on the pool's threads at once (compressed chunks: each chunk the runs
    /// touch decoded once on the pool, the runs' rows copied from it), with no HDF5 call and
    /// neither h5py's lock nor the GIL held. False when HDF5 is to read them; nothing was read
    /// then. The caller keeps the buffer alive.
    #[allow(clippy::too_many_arguments)]
    fn gather(
        &self,
        py: Python<'_>,
        plan: &Bound<'_, GatherPlan>,
        rest_start: Vec<u64>,
        rest_step: Vec<u64>,
        rest_count: Vec<u64>,
        buffer: usize,
        nbytes: usize,
    ) -> PyResult<bool> {
        let rest = Rest {
            start: &rest_start,
            step: &rest_step,
            count: &rest_count,
        };
        self.gather_rows(
            py,
            plan.get(),
            &rest,
            HostBuffer {
                address: buffer,
                nbytes,
            },
            &CallSettings::default(),
        )
    }
}

impl Layout {
    /// Reads the hyperslab `sel` into the device array `out` where the read would be staged
    /// through pinned memory anyway (`device::staged_anyway`), and compressed chunks are decoded
    /// faster on the host than on the GPU (`route::choose_decoder`): read with no HDF5 call into
    /// pinned host memory, then copied up, with neither h5py's lock nor the GIL held. False when
    /// the driver or HDF5 is to read it; nothing was read then. The caller keeps the array alive.
    pub(crate) fn read_into_device(
        &self,
        py: Python<'_>,
        sel: &Hyperslab,
        out: &DeviceOut,
        settings: &CallSettings,
    ) -> PyResult<bool> {
        let nbytes = out.nbytes;
        self.check(sel, nbytes).map_err(PyValueError::new_err)?;
        if nbytes == 0 {
            return Ok(false);
        }
        let staged = device::staged_anyway(nbytes, self.sec2, settings).map_err(device_error)?;
        let Some(staged) = staged else {
            return Ok(false);
        };
        let why = &staged.why;
        if let Storage::Chunked { chunk, filters, .. } = &self.storage {
            if !filters.is_empty() {
                // A layout's file is open read-only, so with sec2 the stored chunks can still
                // reach the GPU, read by the host's threads (`device::host_reads`).
                let blocker = (staged.past_the_driver && !self.sec2).then(|| why.clone());
                let storage = (filters.as_slice(), chunk.as_slice());
                let facts = device::decoder_facts(
                    storage,
                    sel,
                    self.element,
                    None,
                    blocker,
                    true,
                    settings,
                )
                .map_err(device_error)?;
                if choose_decoder(&facts).0 != Some(Decoder::Host) {
                    return Ok(false);
                }
            }
        }
        let Some(parts) = self.serves(sel)? else {
            return Ok(false);
        };
        let threads = threads_for(nbytes, &parts, self.decoded_chunk_bytes(), settings)?;
        h5gds::with_logging(|| {
            tracing::info!(
                "h5gds.read {:?}: {nbytes} bytes into device memory through pinned host memory, \
                 read with no HDF5 call: {why}",
                self.name
            )
        });
        let (address, claimed_ordinal, stream) = (out.address, out.claimed_ordinal, out.stream);
        py.detach(|| {
            let mut host = pinned::Taken::new(nbytes);
            // SAFETY: the buffer holds at least `nbytes` bytes and is this call's alone.
            let out = unsafe { std::slice::from_raw_parts_mut(host.as_mut_ptr(), nbytes) };
            self.read_served(sel, &parts, out, threads)
                .map_err(device::DeviceError::Failed)?;
            device::copy_with_host(
                address,
                nbytes,
                claimed_ordinal,
                stream,
                host.as_mut_ptr() as usize,
                true,
            )
        })
        .map_err(device_error)?;
        Ok(true)
    }

    /// Reads the hyperslab `sel` into the host buffer at `buffer` (`nbytes`), with the GIL
    /// released while bytes move; false where the layout does not serve it (nothing was read).
    ///
    /// # Safety
    /// `buffer` must be writable for `nbytes` bytes, and stay so until this returns.
    pub(crate) unsafe fn read_host(
        &self,
        py: Python<'_>,
        sel: &Hyperslab,
        buffer: usize,
        nbytes: usize,
        settings: &CallSettings,
    ) -> PyResult<bool> {
        self.check(sel, nbytes).map_err(PyValueError::new_err)?;
        if nbytes == 0 {
            return Ok(true);
        }
        // Everything past the checks runs without the GIL: threads reading small rows hold it
        // for as little as they can.
        py.detach(|| {
            let Some(parts) = self.serves(sel)? else {
                return Ok(false);
            };
            let threads = threads_for(nbytes, &parts, self.decoded_chunk_bytes(), settings)?;
            // SAFETY: the caller's contract (the size was checked against the selection above).
            let out = unsafe { std::slice::from_raw_parts_mut(buffer as *mut u8, nbytes) };
            self.read_served(sel, &parts, out, threads)
                .map_err(PyOSError::new_err)?;
            Ok(true)
        })
    }

    /// The dataset's shape.
    pub(crate) fn shape(&self) -> &[u64] {
        &self.shape
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

    /// Checks a selection against the dataset's shape and a buffer of `nbytes` against it.
    fn check(&self, sel: &Hyperslab, nbytes: usize) -> Result<(), String> {
        let rank = self.shape.len();
        if [sel.start.len(), sel.step.len(), sel.count.len()] != [rank; 3] {
            return Err(format!(
                "the selection has {} axes, dataset {} has {rank}",
                sel.count.len(),
                self.name
            ));
        }
        for a in 0..rank {
            let last = (sel.count[a].max(1) - 1)
                .checked_mul(sel.step[a])
                .and_then(|d| d.checked_add(sel.start[a]));
            if sel.step[a] == 0 || (sel.count[a] > 0 && last.is_none_or(|l| l >= self.shape[a])) {
                return Err(format!(
                    "selection out of range on axis {a}: start {}, step {}, count {} for a size \
                     of {}",
                    sel.start[a], sel.step[a], sel.count[a], self.shape[a]
                ));
            }
        }
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

    /// For a contiguous dataset whose gather takes whole rows (`rest_*` selects every element
    /// of the other axes), the runs of rows `runs` (first row, rows; in output order) as pieces
    /// of the file (file byte, output byte, bytes), with no per-run selection to map: a gather of
    /// thousands of small rows is then one `pread` per run. None otherwise, or where `row_bytes`
    /// is not the dataset's row or a run lies outside it.
    fn whole_row_pieces(
        &self,
        runs: impl IntoIterator<Item = (u64, u64)>,
        rest_start: &[u64],
        rest_step: &[u64],
        rest_count: &[u64],
        row_bytes: u64,
    ) -> Option<Vec<(u64, u64, u64)>> {
        let Storage::Contiguous { address } = self.storage else {
            return None;
        };
        let rest = self.shape.get(1..)?;
        let whole = rest_count == rest
            && rest_start.iter().all(|&s| s == 0)
            && rest_step.len() == rest.len()
            && rest_step.iter().zip(rest).all(|(&t, &n)| t == 1 || n <= 1);
        if !whole || rest.iter().product::<u64>() * self.element as u64 != row_bytes {
            return None;
        }
        let mut at = 0u64;
        let mut pieces = Vec::new();
        for (first, rows) in runs {
            if first
                .checked_add(rows)
                .is_none_or(|end| end > self.shape[0])
            {
                return None;
            }
            pieces.push((address + first * row_bytes, at, rows * row_bytes));
            at += rows * row_bytes;
        }
        Some(pieces)
    }

    /// Whether this layout serves `sel` (a checked selection), with the chunks it touches;
    /// `None`: HDF5 is to read it (chunks never written; filtered chunks with
    /// `H5GDS_HOST_CODEC=0`).
    fn serves(&self, sel: &Hyperslab) -> PyResult<Option<Vec<ChunkPart>>> {
        let Storage::Chunked {
            chunk,
            index,
            pipeline,
            ..
        } = &self.storage
        else {
            return Ok(Some(Vec::new()));
        };
        if !pipeline.stages().is_empty()
            && h5gds_runtime::settings::host_codec_turned_off()
                .map_err(|e| PyValueError::new_err(e.to_string()))?
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

    /// Reads a selection [`Layout::serves`] (`parts`: the chunks it touches) into `out`, on
    /// `threads` of the pool.
    fn read_served(
        &self,
        sel: &Hyperslab,
        parts: &[ChunkPart],
        out: &mut [u8],
        threads: usize,
    ) -> Result<(), String> {
        match &self.storage {
            Storage::Contiguous { address } => {
                self.read_runs(*address, &self.shape, sel, out, threads)
            }
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
                let mut source = Indexed {
                    layout: self,
                    index,
                };
                h5gds_chunk_codec::read(&mut source, &r, out)?;
                h5gds::with_logging(|| {
                    tracing::debug!(
                        "h5gds.read of {}: {} chunks decoded on {} threads (read from the file by \
                         those threads), with no HDF5 call",
                        self.name,
                        parts.len(),
                        threads
                    )
                });
                Ok(())
            }
        }
    }
}
