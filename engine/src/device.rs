//! One transfer of a dataset's selection between the file and device memory, written once for
//! both faces: where a compressed read's chunks are decoded (`gpu_decoded::decoder`), then the
//! route (`route::plan`, over the storage in route's terms, [`storage`]): straight through the
//! `gds` driver (H5Dread/H5Dwrite with the device pointer, through a [`Prepared`] transfer),
//! staged through pinned buffers (`staged`), decoded by h5gds on the host's threads into those
//! buffers (`decoded`), or decoded on the GPU (`h5gds_gpu_codec::decode`) with the chunks never
//! written filled through the staged path. The order a read takes among them is
//! `crate::policy::device_read`'s, which writes its verdict lines; a plain write's verdict is
//! [`write`]'s. The dataset's side of a transfer (HDF5's lock, the ring of streams, its chunks,
//! the words of errors) is an [`OnDevice`].

use crate::chunks::{ChunkFace, Hdf5Lock, StoredChunks};
use crate::decoded::{self, Decoded};
use crate::error::Kind;
use crate::facts::StoredLayout;
use crate::policy::settings::CallSettings;
use crate::staged::{self, hyperslab_piece, NotBool, ThreadLane};
use crate::transfer::Prepared;
use crate::{Error, Result};
use h5gds::VfdSettings;
use h5gds_chunk_codec::{ChunkIndex, Decoding, Hyperslab, LIST_INDEX_FROM};
use h5gds_gpu_codec::decode::{self, Decoding as GpuDecoding, HostReads};
use h5gds_route::route::{plan, GpuCodec, Route, Storage};
use h5gds_route::select::{chunks_touching, decoded_pieces, flat_range_blocks, Block, Runs};
use h5gds_route::select::{staged_piece_bytes, staging_pieces};
use h5gds_runtime::cuda::DeviceContext;
use h5gds_runtime::hdf5::{hid_t, Hdf5Api};
use h5gds_runtime::settings::{self, DevicePath};
use h5gds_runtime::staging_ring::StagingRing;
use h5gds_runtime::stream::{default_stream, CudaStream};
use std::collections::HashSet;
use std::marker::PhantomData;
use std::sync::{Arc, OnceLock};

/// Device memory a read fills or a write takes: `nbytes` at `address`, inside one allocation of
/// `context` (the face checks that), the work that made it finished.
#[derive(Clone, Copy)]
pub struct DeviceMemory<'a> {
    pub address: u64,
    pub nbytes: usize,
    pub context: DeviceContext,
    /// The face's stream of that context, which GPU decoding runs on (array-io: the array's);
    /// None: the device's default stream.
    pub stream: Option<&'a Arc<CudaStream>>,
    /// Its elements are bools: every byte read is checked to be 0 or 1 on its way.
    pub bools: bool,
    /// The device path (`H5GDS_USE_VFD_GDS`) and the staging buffers' size
    /// (`H5GDS_STAGING_BUFFER_SIZE`) the call chose; None: the environment's.
    pub path: Option<DevicePath>,
    pub staging_size: Option<usize>,
}

impl DeviceMemory<'_> {
    /// `nbytes` at `address` in `context`, on the device's default stream, with the environment's
    /// device path and staging size.
    pub fn in_context(address: u64, nbytes: usize, context: DeviceContext, bools: bool) -> Self {
        DeviceMemory {
            address,
            nbytes,
            context,
            stream: None,
            bools,
            path: None,
            staging_size: None,
        }
    }

    pub(crate) fn path(&self) -> crate::Result<DevicePath> {
        Ok(match self.path {
            Some(path) => path,
            None => settings::environment_device_path()?,
        })
    }

    pub(crate) fn staging_size(&self) -> crate::Result<usize> {
        Ok(match self.staging_size {
            Some(size) => settings::check_staging_buffer_size(size, &size.to_string())?,
            None => settings::environment_staging_buffer_size()?,
        })
    }
}

/// The step of a transfer that failed, for its error's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// H5Dread/H5Dwrite with the device pointer.
    Direct,
    /// HDF5 moving a staged piece.
    Staged,
    /// HDF5 reading the fill value of chunks never written, after GPU decoding.
    NeverWritten,
    /// nvCOMP failing to load.
    Codec,
}

/// One device transfer of a dataset: HDF5 calls under the face's lock (`L`), staging buffers on
/// the runtime's streams of the memory's context, errors naming the dataset.
pub(crate) struct OnDevice<'h, L> {
    pub(crate) api: &'static Hdf5Api,
    pub(crate) id: hid_t,
    pub(crate) name: &'h str,
    pub(crate) memory: &'h DeviceMemory<'h>,
    pub(crate) settings: &'h CallSettings,
    pub(crate) write: bool,
    /// The handle's whole listing of written chunks, kept for its next reads.
    pub(crate) index: Option<&'h OnceLock<ChunkIndex>>,
    pub(crate) lock: PhantomData<fn() -> L>,
}

impl<'h, L: Hdf5Lock> OnDevice<'h, L> {
    /// Staging buffers of `bytes` each on the runtime's streams, for `pieces` pieces.
    pub(crate) fn ring(&self, bytes: usize, pieces: usize) -> Result<StagingRing<ThreadLane>> {
        Ok(staged::ring_of(self.memory.context, bytes, pieces)?)
    }

    /// The driver's settings, read at most once per call.
    pub(crate) fn driver(&self) -> Result<&VfdSettings> {
        Ok(self.settings.get()?)
    }

    /// The error of a failed `step`; `message`: HDF5's (or nvCOMP's) words.
    pub(crate) fn failed(&self, step: Step, message: String) -> Error {
        let (call, way) = match self.write {
            true => ("H5Dwrite", "from"),
            false => ("H5Dread", "into"),
        };
        let detail = match step {
            Step::Direct => format!("{call} {way} device memory failed: {message}"),
            Step::Staged => format!("{call} through pinned host memory failed: {message}"),
            Step::NeverWritten => format!("H5Dread of the chunks never written failed: {message}"),
            Step::Codec => return Error::new(Kind::Device, message).in_dataset(self.name),
        };
        Error::hdf5(detail).in_dataset(self.name)
    }

    /// The stored chunks (of `chunk` elements) for a read touching `touched` of them.
    pub(crate) fn stored_chunks(
        &self,
        chunk: &[u64],
        touched: usize,
    ) -> Result<StoredChunks<'static, ChunkFace<'h, L>>> {
        let face = ChunkFace::new(self.api, self.id, self.name);
        StoredChunks::new(self.api, self.id, chunk, touched, face)
    }

    /// Runs `read` over the stored chunks and an index holding the written ones among `touched`
    /// (the first elements of the chunks a GPU-decoded read touches). A listing of every written
    /// chunk is kept for the handle's next reads (array-io's batched reads read many regions); a
    /// few chunks are asked for one by one.
    fn with_index<R>(
        &self,
        chunk: &[u64],
        touched: Vec<Vec<u64>>,
        read: impl FnOnce(&StoredChunks<'static, ChunkFace<'h, L>>, &ChunkIndex) -> Result<R>,
    ) -> Result<R> {
        if let Some(index) = self.index.and_then(OnceLock::get) {
            return read(&self.stored_chunks(chunk, 0)?, index);
        }
        let whole = touched.len() >= LIST_INDEX_FROM;
        let mut source = self.stored_chunks(chunk, touched.len())?;
        let listed = source.index_of(chunk, touched)?;
        match self.index.filter(|_| whole) {
            Some(kept) => read(&source, kept.get_or_init(|| listed)),
            None => read(&source, &listed),
        }
    }

    /// The stream GPU decoding runs on, after the work that made the array.
    fn stream(&self) -> Result<Arc<CudaStream>> {
        match self.memory.stream {
            Some(stream) => Ok(stream.clone()),
            None => Ok(default_stream(self.memory.context.device)?),
        }
    }
}

/// A dataset stored as `layout` in `route`'s terms, for elements of `item` bytes in the file
/// (with the chunk cache's size, whether HDF5 caches a chunk). Of a chunked dataset's chunks,
/// `allocated(chunk)` gives the written ones a transfer may touch (the only ones `route::plan`
/// asks about), asked only where its route could be direct (unfiltered chunks the cache would
/// not take).
pub fn storage<E>(
    layout: &StoredLayout,
    item: usize,
    allocated: impl FnOnce(&[u64]) -> Result<HashSet<Vec<u64>>, E>,
) -> Result<Storage, E> {
    Ok(match layout {
        StoredLayout::Contiguous { external: true, .. } => Storage::External,
        StoredLayout::Contiguous { address, .. } => Storage::Contiguous {
            allocated: address.is_some(),
        },
        StoredLayout::Compact => Storage::Compact,
        StoredLayout::Virtual => Storage::Virtual,
        StoredLayout::Chunked {
            chunk,
            filters,
            cache_bytes,
        } => {
            let chunk_bytes = chunk.iter().product::<u64>() as u128 * item as u128;
            let cached = chunk_bytes <= *cache_bytes as u128;
            let filtered = !filters.is_empty();
            Storage::Chunked {
                chunk: chunk.clone(),
                filtered,
                allocated: match filtered || cached {
                    true => HashSet::new(),
                    false => allocated(chunk)?,
                },
                cached,
            }
        }
    })
}

/// The box the selection spans, in file coordinates (what `route::plan` is asked about).
pub fn spanned(selection: &Hyperslab) -> Block {
    let spans = selection.count.iter().zip(selection.step);
    Block {
        start: selection.start.to_vec(),
        count: spans
            .map(|(&c, &s)| c.saturating_sub(1) * s + c.min(1))
            .collect(),
    }
}

/// Why a transfer of `region` of a dataset stored as `storage` is staged, if any part of it is
/// (the first staged block's reason); `blocker` stages all of it.
pub fn staged_reason(storage: &Storage, region: &Block, blocker: Option<String>) -> Option<String> {
    first_staged(&plan(storage, region, blocker))
}

pub(crate) fn first_staged(routes: &[(Block, Route)]) -> Option<String> {
    routes.iter().find_map(|(_, route)| match route {
        Route::Staged(reason) => Some(reason.clone()),
        Route::Direct => None,
    })
}

/// One transfer: the selection of a dataset and the device array holding its elements.
pub struct Selected<'a> {
    /// The checked transfer of the whole selection, its buffer the device array.
    pub prepared: &'a Prepared,
    /// The selection, in file coordinates; the array holds its elements in row-major order.
    pub selection: Hyperslab<'a>,
    /// Bytes per element.
    pub item: usize,
    /// The device array's address.
    pub address: u64,
    /// The most bytes a staging buffer holds (`H5GDS_STAGING_BUFFER_SIZE`).
    pub staging_size: usize,
}

/// The pieces of `elements` elements of `item` bytes staged through buffers of `piece_bytes`,
/// and the bytes a buffer needs.
pub(crate) fn pieces(
    elements: u64,
    piece_bytes: u64,
    item: usize,
    cuts: &[u64],
) -> (Vec<(u64, u64)>, usize) {
    let per = (piece_bytes / item as u64).max(1);
    (
        staging_pieces(elements, per, cuts),
        per.min(elements) as usize * item,
    )
}

/// The bytes of the pieces of the selection moved through HDF5: an eighth of it, at least a task
/// for each of the driver's I/O threads, at most a staging buffer
/// (`route::select::staged_piece_bytes`).
pub(crate) fn through_hdf5<L: Hdf5Lock>(face: &OnDevice<L>, io: &Selected) -> Result<u64> {
    let floor = face.driver()?.task_round_bytes() as u64;
    let total = io.selection.count.iter().product::<u64>() * io.item as u64;
    Ok(staged_piece_bytes(total, io.staging_size as u64, floor))
}

/// Pieces of a transfer and the ring they move through.
pub(crate) type Staging = (Vec<(u64, u64)>, StagingRing<ThreadLane>);

/// The pieces of the whole selection staged through HDF5, and their ring.
pub(crate) fn staged_whole<L: Hdf5Lock>(face: &OnDevice<L>, io: &Selected) -> Result<Staging> {
    let elements: u64 = io.selection.count.iter().product();
    let (pieces, bytes) = pieces(elements, through_hdf5(face, io)?, io.item, &[]);
    let ring = face.ring(bytes, pieces.len())?;
    Ok((pieces, ring))
}

/// The selection, or a box of it, as file coordinates: element `first` of the selection on.
fn file_start(selection: &Hyperslab, first: &[u64]) -> Vec<u64> {
    let axes = selection.start.iter().zip(selection.step).zip(first);
    axes.map(|((&s, &step), &f)| s + f * step).collect()
}

/// Writes the selection of `dataset` from device memory: straight through the driver, or through
/// pinned buffers for the reason `staged`; the way taken is the verdict line (`way=direct` or
/// `way=staged`), logged before. Every copy has finished when this returns.
///
/// # Safety
/// `io.address` must hold the selection's elements in the prepared memory type, in device memory
/// the driver takes (one allocation of a device this process sees), alive for the call.
pub unsafe fn write<L: Hdf5Lock>(
    face: &OnDevice<L>,
    io: &Selected,
    dataset: &str,
    staged: Option<&str>,
) -> Result<()> {
    let (sel, item) = (&io.selection, io.item);
    let region = spanned(sel);
    let bytes = sel.count.iter().product::<u64>() * item as u64;
    let Some(reason) = staged else {
        crate::policy::say(format_args!(
            "h5gds.write {dataset:?}: {bytes} bytes straight from device memory through the gds \
             driver (way=direct)"
        ));
        // SAFETY: as the caller guarantees.
        return unsafe { direct(face, io, &region, None) };
    };
    let size = io.staging_size;
    crate::policy::say(format_args!(
        "h5gds.write {dataset:?}: {bytes} bytes from device memory through pinned host memory \
         (pieces of up to {size} bytes): {reason} (way=staged)"
    ));
    let (pieces, mut ring) = staged_whole(face, io)?;
    L::call(|| {
        // The next piece comes from the device while this one is written.
        staged::write(&mut ring, &pieces, item, io.address, |a, b, buf| {
            let (selection, buf) = ((sel.start, sel.step, sel.count), buf.as_ptr().cast_mut());
            // SAFETY: the buffer holds the piece's b - a elements just copied; a write only
            // reads it.
            unsafe { hyperslab_piece(io.prepared, selection, (a, b), item, buf) }
                .map_err(|m| face.failed(Step::Staged, m))
        })
    })
}

/// Moves `block` (file coordinates, a box of the selection; `None`: all of it) straight between
/// the file and the device array, the driver taking the device pointer.
///
/// # Safety
/// As [`write`], the array writable for a read.
pub(crate) unsafe fn direct<L: Hdf5Lock>(
    face: &OnDevice<L>,
    io: &Selected,
    region: &Block,
    block: Option<&Block>,
) -> Result<()> {
    L::call(|| match block {
        // SAFETY: the array holds the selection (checked by `prepare`), as the caller
        // guarantees; the route says HDF5 hands the pointer to the driver untouched.
        None => unsafe { io.prepared.run() },
        Some(block) => {
            let at = block.relative_to(&region.start).start;
            // SAFETY: as above; the block is a box of the region, a selection of steps 1.
            unsafe { (io.prepared).run_block((&block.start, &block.count), &region.count, &at) }
        }
    })
    .map_err(|m| face.failed(Step::Direct, m))
}

/// Reads `block` (of the selection's elements: a box of its `count`) into its place in the
/// device array through `ring`, HDF5 filling the buffers piece by piece (its failure the
/// `step`'s).
pub(crate) fn staged_read<L: Hdf5Lock>(
    face: &OnDevice<L>,
    io: &Selected,
    ring: &mut StagingRing<ThreadLane>,
    (block, pieces, step): (&Block, &[(u64, u64)], Step),
    bools: Option<&dyn Fn(NotBool) -> Error>,
) -> Result<()> {
    let (sel, item) = (&io.selection, io.item);
    let start = file_start(sel, &block.start);
    let runs = Runs::new(block, sel.count);
    L::call(|| {
        staged::read(
            ring,
            pieces,
            (io.address, item, &runs),
            bools,
            |a, b, buf| {
                let selection = (&start[..], sel.step, &block.count[..]);
                // SAFETY: the buffer holds the piece's b - a elements of the memory type.
                unsafe { hyperslab_piece(io.prepared, selection, (a, b), item, buf.as_mut_ptr()) }
                    .map_err(|m| face.failed(step, m))
            },
        )
    })
}

/// Reads the selection through pinned buffers that h5gds decodes its chunks into on the host's
/// threads (`decoded::read_hyperslab`), in pieces that end where the selection enters a new layer
/// of chunks (`route::select::decoded_pieces`), so no chunk is decoded twice.
/// `tell` hears what each piece's decoding did.
pub(crate) fn decoded_on_host<L: Hdf5Lock>(
    face: &OnDevice<L>,
    io: &Selected,
    how: &Decoding,
    bools: Option<&dyn Fn(NotBool) -> Error>,
    tell: &dyn Fn(&Decoded),
) -> Result<()> {
    let (sel, item) = (&io.selection, io.item);
    let staging = io.staging_size as u64;
    let (threads, es) = (how.threads as u64, item as u64);
    let split = decoded_pieces(
        sel.start, sel.step, sel.count, how.chunk, es, threads, staging,
    );
    let elements: u64 = sel.count.iter().product();
    let (pieces, bytes) = pieces(elements, split.piece_bytes, item, &split.cuts);
    let mut ring = face.ring(bytes, pieces.len())?;
    let runs = Runs::new(&Block::whole(sel.count), sel.count);
    let mem_type = io.prepared.mem_type();
    staged::read(
        &mut ring,
        &pieces,
        (io.address, item, &runs),
        bools,
        |a, b, buf| {
            let mut at = 0usize;
            for block in flat_range_blocks(sel.count, a, b) {
                let start = file_start(sel, &block.start);
                let (step, count) = (sel.step, &block.count[..]);
                let selection = Hyperslab {
                    start: &start,
                    step,
                    count,
                };
                let out = &mut buf[at..at + block.len() as usize * item];
                let open = |touched| face.stored_chunks(how.chunk, touched);
                let done = decoded::read_hyperslab(how, mem_type, selection, open, out)?;
                tell(&done);
                at += out.len();
            }
            Ok(())
        },
    )
}

/// Reads the written chunks of `region` (the selection, of steps 1 where a step counts),
/// decoding them on the GPU with nvCOMP (`h5gds_gpu_codec::decode`); returns the parts in chunks
/// never written (for [`fill_never_written`]) and what was done, in words.
///
/// # Safety
/// As `policy::device_read::read`.
pub(crate) unsafe fn decoded_on_gpu<L: Hdf5Lock>(
    face: &OnDevice<L>,
    io: &Selected,
    (chunk, codec, host_reads): (&[u64], GpuCodec, Option<HostReads>),
    region: &Block,
) -> Result<(Vec<Block>, String)> {
    let lib = h5gds_gpu_codec::nvcomp::library().map_err(|m| face.failed(Step::Codec, m))?;
    let how = GpuDecoding {
        lib,
        codec,
        chunk,
        element_size: io.item,
        verify: settings::verify_checksums()?,
        threads: face.driver()?.nthreads,
        host_reads,
    };
    let touched = chunks_touching(region, chunk).into_iter().map(|(at, _)| at);
    let stream = face.stream()?;
    let dest = io.address;
    // The chunks written (as the index lists them) decoded into place; those never written
    // left for HDF5 to fill.
    face.with_index(chunk, touched.collect(), |source, index| {
        let (mut present, missing) = decode::split(index, region, chunk);
        decode::read(source, &how, &mut present, region, dest, &stream)?;
        let words = format!(
            "{} chunks move compressed ({codec:?}) {} and are decoded on the GPU with nvCOMP; {} \
             chunks were never written",
            present.len(),
            HostReads::route(&how.host_reads),
            missing.len()
        );
        Ok((missing, words))
    })
}

/// Reads the `missing` parts of `region` (in chunks never written) through the staged path,
/// where HDF5 fills them with the fill value.
pub(crate) fn fill_never_written<L: Hdf5Lock>(
    face: &OnDevice<L>,
    io: &Selected,
    region: &Block,
    missing: &[Block],
    bools: Option<&dyn Fn(NotBool) -> Error>,
) -> Result<()> {
    let staging = |part: &Block| pieces(part.len(), io.staging_size as u64, io.item, &[]);
    let Some(largest) = missing.iter().max_by_key(|part| part.len()) else {
        return Ok(());
    };
    let (largest, bytes) = staging(largest);
    let mut ring = face.ring(bytes, largest.len())?;
    for part in missing {
        let (inside, never) = (part.relative_to(&region.start), Step::NeverWritten);
        staged_read(
            face,
            io,
            &mut ring,
            (&inside, &staging(part).0, never),
            bools,
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use h5gds_chunk_codec::Filter;
    use std::cell::Cell;

    #[test]
    fn the_written_chunks_are_asked_for_only_where_the_route_could_be_direct() {
        let chunked = |filters: Vec<Filter>, cache_bytes| StoredLayout::Chunked {
            chunk: vec![4],
            filters,
            cache_bytes,
        };
        let asked = Cell::new(0);
        let allocated = |chunk: &[u64]| {
            asked.set(asked.get() + 1);
            Ok::<_, ()>(HashSet::from([chunk.to_vec()]))
        };
        // Chunks of 4 elements of 8 bytes: 32 bytes, more than a cache of 16.
        let direct = storage(&chunked(vec![], 16), 8, allocated).unwrap();
        assert!(
            matches!(direct, Storage::Chunked { cached: false, filtered: false, allocated, .. } if allocated.len() == 1)
        );
        let cached = storage(&chunked(vec![], 32), 8, allocated).unwrap();
        assert!(
            matches!(cached, Storage::Chunked { cached: true, allocated, .. } if allocated.is_empty())
        );
        let deflate = vec![Filter {
            id: 1,
            values: vec![],
        }];
        let filtered = storage(&chunked(deflate, 0), 8, allocated).unwrap();
        assert!(
            matches!(filtered, Storage::Chunked { filtered: true, allocated, .. } if allocated.is_empty())
        );
        assert_eq!(asked.get(), 1);
        let unwritten = StoredLayout::Contiguous {
            address: None,
            external: false,
        };
        let unwritten = storage(&unwritten, 8, allocated).unwrap();
        assert!(matches!(
            unwritten,
            Storage::Contiguous { allocated: false }
        ));
    }

    #[test]
    fn a_strided_selection_spans_its_first_to_its_last_element() {
        let selection = Hyperslab {
            start: &[2, 5],
            step: &[3, 1],
            count: &[4, 0],
        };
        let region = spanned(&selection);
        assert_eq!((region.start, region.count), (vec![2, 5], vec![10, 0]));
    }

    #[test]
    fn pieces_fill_a_buffer_each_and_the_buffer_holds_the_largest() {
        assert_eq!(pieces(10, 16, 4, &[]), (vec![(0, 4), (4, 8), (8, 10)], 16));
        assert_eq!(pieces(3, 16, 4, &[]), (vec![(0, 3)], 12));
        // A buffer smaller than an element still holds one.
        assert_eq!(pieces(2, 2, 4, &[]), (vec![(0, 1), (1, 2)], 4));
    }
}
