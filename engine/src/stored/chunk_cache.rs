//! Decoded chunks kept for reads inside one chunk (as HDF5's chunk cache keeps them), and the
//! reads of one chunk's part from them or from the file.

use super::{Storage, Stored, StoredError};
use h5gds_chunk_codec::pipeline::Scratch;
use h5gds_chunk_codec::place::{copy_box, whole_chunk_run, ChunkPart, Source};
use h5gds_chunk_codec::{Hyperslab, Pipeline, StoredChunk};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

/// A chunk larger than [`KEPT_CHUNK_MAX`], decoded (its first `valid` bytes), kept for the next
/// read of the same chunk: rows read one call at a time, or batches of neighbouring rows, then
/// decode it once rather than once a call. One per dataset, and at most [`LARGE_KEPT_BYTES`] for
/// all datasets of the process; dropped with the storage (whose file cannot change meanwhile).
pub(super) struct Large {
    offset: Vec<u64>,
    bytes: Arc<Vec<u8>>,
    valid: usize,
}

/// A dataset's [`Large`] chunk, if any; its bytes counted in [`LARGE_KEPT_HELD`].
#[derive(Default)]
pub(super) struct LargeKept(Mutex<Option<Large>>);

/// Bytes of large decoded chunks kept by all datasets together, at most [`LARGE_KEPT_BYTES`].
static LARGE_KEPT_HELD: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
const LARGE_KEPT_BYTES: usize = 256 << 20;

impl Drop for LargeKept {
    fn drop(&mut self) {
        let large = match self.0.get_mut() {
            Ok(large) => large.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        if let Some(large) = large {
            LARGE_KEPT_HELD.fetch_sub(large.bytes.len(), std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Decoded chunks kept for reads inside one chunk (rows read one at a time decode each chunk
/// once, as with HDF5's chunk cache), the oldest dropped first.
#[derive(Default)]
pub(super) struct Kept {
    order: VecDeque<Vec<u64>>,
    chunks: HashMap<Vec<u64>, Arc<Vec<u8>>>,
}

/// Decoded bytes kept per dataset.
const KEPT_BYTES: usize = 8 << 20;
/// The largest chunk kept decoded (HDF5's chunk cache keeps chunks of up to its 1 MiB).
pub(super) const KEPT_CHUNK_MAX: usize = 1 << 20;

/// A thread's buffers for decoding chunks it does not keep: the stored bytes and the decoders'
/// scratch, reused from read to read.
#[derive(Default)]
struct Work {
    stored: Vec<u8>,
    scratch: Scratch,
}

thread_local! {
    static WORK: std::cell::RefCell<Work> = std::cell::RefCell::default();
}

/// Chunks above this size leave no buffers with the thread that decoded them.
const WORK_KEPT_MAX: usize = 8 << 20;

/// Runs `decode` over a chunk's stored bytes, read by `read_stored` into this thread's buffers,
/// with its scratch; buffers grown for a chunk over [`WORK_KEPT_MAX`] are let go afterwards.
pub(super) fn with_stored<R>(
    read_stored: impl FnOnce(&mut Vec<u8>) -> Result<(), StoredError>,
    chunk_bytes: usize,
    decode: impl FnOnce(&[u8], &mut Scratch) -> Result<R, StoredError>,
) -> Result<R, StoredError> {
    WORK.with(|work| {
        let mut work = work.borrow_mut();
        let Work { stored, scratch } = &mut *work;
        read_stored(stored)?;
        let done = decode(stored, scratch);
        if chunk_bytes > WORK_KEPT_MAX {
            *work = Work::default();
        }
        done
    })
}

/// The bytes of a chunk of shape `chunk` up to the last element of the box `start` (in the
/// chunk), `step`, `count` (its furthest element in row-major order); `count` has no zeros.
pub(super) fn last_byte(
    start: &[u64],
    step: &[u64],
    count: &[u64],
    chunk: &[u64],
    element: usize,
) -> usize {
    let mut flat = 0u64;
    let mut stride = 1u64;
    for a in (0..chunk.len()).rev() {
        flat += (start[a] + (count[a] - 1) * step[a]) * stride;
        stride *= chunk[a];
    }
    (flat as usize + 1) * element
}

/// The lock of a kept chunk, never waited for (see `read_in_one_chunk`); a poisoned one taken
/// as it is.
fn try_lock<T>(kept: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match kept.try_lock() {
        Ok(guard) => Some(guard),
        Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

impl Stored {
    /// Reads the stored bytes of the chunk at `offset` into `bytes`.
    pub(super) fn read_stored(
        &self,
        offset: &[u64],
        stored: &StoredChunk,
        bytes: &mut Vec<u8>,
    ) -> Result<(), StoredError> {
        bytes.resize(stored.size, 0);
        self.source.read_at(stored.address, bytes).map_err(|e| {
            StoredError::Failed(format!(
                "dataset {} of {}: reading the chunk at {offset:?} ({} bytes at byte {}) \
                 failed: {e}",
                self.name,
                self.source.name(),
                stored.size,
                stored.address
            ))
        })
    }

    /// The decoded bytes of the large chunk at `offset` (`stored`, of `chunk_bytes`), valid at
    /// least up to byte `needed`: the dataset's kept large chunk where it is this one and long
    /// enough; else decoded now and kept in its place (within [`LARGE_KEPT_BYTES`]): only its
    /// first `needed` bytes where that pays and the kept chunk is another (a first read of
    /// this one), all of it where the kept chunk is this one (a reader walking through it).
    /// Never waits for the lock (a forked child may hold a copy locked by a thread it lacks).
    pub(super) fn large_chunk(
        &self,
        offset: &[u64],
        stored: &StoredChunk,
        pipeline: &Pipeline,
        chunk_bytes: usize,
        needed: usize,
        large: &LargeKept,
    ) -> Result<Arc<Vec<u8>>, StoredError> {
        use std::sync::atomic::Ordering::Relaxed;
        let lock = || try_lock(&large.0);
        let mut walking = false;
        let mut reused = None;
        if let Some(mut kept) = lock() {
            if let Some(k) = kept.as_ref().filter(|k| k.offset == offset) {
                if k.valid >= needed {
                    return Ok(k.bytes.clone());
                }
                walking = true;
            }
            if let Some(old) = kept.take() {
                LARGE_KEPT_HELD.fetch_sub(old.bytes.len(), Relaxed);
                reused = Arc::try_unwrap(old.bytes).ok();
            }
        }
        let upto = if !walking && pipeline.prefix_pays(stored.mask, needed, chunk_bytes) {
            needed
        } else {
            chunk_bytes
        };
        let mut decoded = reused
            .filter(|b| b.len() == chunk_bytes)
            .unwrap_or_else(|| vec![0u8; chunk_bytes]);
        with_stored(
            |bytes| self.read_stored(offset, stored, bytes),
            chunk_bytes,
            |bytes, scratch| {
                if upto < chunk_bytes {
                    pipeline.decode_prefix_into(
                        bytes,
                        stored.mask,
                        chunk_bytes,
                        scratch,
                        &mut decoded[..upto],
                    )
                } else {
                    pipeline.decode_into(bytes, stored.mask, scratch, &mut decoded)
                }
                .map_err(|reason| self.undecodable(offset, reason))
            },
        )?;
        let decoded = Arc::new(decoded);
        if let Some(mut kept) = lock() {
            let room = LARGE_KEPT_HELD
                .fetch_update(Relaxed, Relaxed, |held| {
                    (held + chunk_bytes <= LARGE_KEPT_BYTES).then_some(held + chunk_bytes)
                })
                .is_ok();
            if room {
                if let Some(old) = kept.replace(Large {
                    offset: offset.to_vec(),
                    bytes: decoded.clone(),
                    valid: upto,
                }) {
                    LARGE_KEPT_HELD.fetch_sub(old.bytes.len(), Relaxed);
                }
            }
        }
        Ok(decoded)
    }

    /// Reads a selection inside one chunk: an unfiltered chunk's runs straight from the file;
    /// a small compressed chunk from its decoded bytes, kept for the next reads as HDF5's chunk
    /// cache keeps them; a larger one decoded into this thread's buffers (or straight into `out`
    /// where the selection is the whole chunk).
    pub(super) fn read_in_one_chunk(
        &self,
        part: &ChunkPart,
        sel: &Hyperslab,
        out: &mut [u8],
    ) -> Result<(), StoredError> {
        let Storage::Chunked {
            chunk,
            pipeline,
            index,
            kept,
            large,
            ..
        } = &self.storage
        else {
            return Err(StoredError::Failed(format!(
                "dataset {} is not chunked",
                self.name
            )));
        };
        let stored = index.get(&part.offset).ok_or_else(|| {
            StoredError::Failed(format!(
                "dataset {}: the chunk at {:?} is not in its chunk index",
                self.name, part.offset
            ))
        })?;
        let start: Vec<u64> = part
            .file_start(sel)
            .iter()
            .zip(&part.offset)
            .map(|(s, o)| s - o)
            .collect();
        let inside = Hyperslab {
            start: &start,
            step: sel.step,
            count: sel.count,
        };
        if pipeline.stages().is_empty() {
            return self
                .read_runs(stored.address, chunk, &inside, out, 1)
                .map_err(StoredError::Failed);
        }
        let chunk_bytes = chunk.iter().product::<u64>() as usize * self.element;
        let read_stored = |bytes: &mut Vec<u8>| self.read_stored(&part.offset, &stored, bytes);
        let undecodable = |reason: String| self.undecodable(&part.offset, reason);
        let place = |decoded: &[u8], out: &mut [u8]| {
            let src = Source {
                bytes: decoded,
                shape: chunk,
                start: &start,
                step: sel.step,
            };
            // SAFETY: `out` is borrowed exclusively and holds the selection, which is the part.
            unsafe {
                copy_box(
                    &src,
                    out.as_mut_ptr(),
                    sel.count,
                    &part.first,
                    &part.count,
                    self.element,
                )
            };
        };
        if chunk_bytes > KEPT_CHUNK_MAX {
            if part.count == *chunk && whole_chunk_run(part, sel, chunk) == Some(0) {
                return with_stored(read_stored, chunk_bytes, |bytes, scratch| {
                    pipeline
                        .decode_into(bytes, stored.mask, scratch, out)
                        .map_err(undecodable)
                });
            }
            let needed = last_byte(&start, sel.step, sel.count, chunk, self.element);
            let decoded =
                self.large_chunk(&part.offset, &stored, pipeline, chunk_bytes, needed, large)?;
            place(&decoded, out);
            return Ok(());
        }
        // Never waited for: a fork may copy the lock into a child held by a thread the child
        // does not have (a DataLoader worker forked while another thread reads), and a busy
        // cache is only a chunk decoded again, or not kept.
        let lock = || try_lock(kept);
        let found = lock().and_then(|kept| kept.chunks.get(&part.offset).cloned());
        let decoded = match found {
            Some(decoded) => decoded,
            None => {
                let mut decoded = vec![0u8; chunk_bytes];
                with_stored(read_stored, chunk_bytes, |bytes, scratch| {
                    pipeline
                        .decode_into(bytes, stored.mask, scratch, &mut decoded)
                        .map_err(undecodable)
                })?;
                let decoded = Arc::new(decoded);
                let Some(mut kept) = lock() else {
                    place(&decoded, out);
                    return Ok(());
                };
                (self.log)(format_args!(
                    "{}: the chunk at {:?} decoded and kept for the next reads, \
                     with no HDF5 call",
                    self.name, part.offset
                ));
                while kept.order.len() >= KEPT_BYTES / chunk_bytes.max(1) {
                    if let Some(oldest) = kept.order.pop_front() {
                        kept.chunks.remove(&oldest);
                    }
                }
                if kept
                    .chunks
                    .insert(part.offset.clone(), decoded.clone())
                    .is_none()
                {
                    kept.order.push_back(part.offset.clone());
                }
                decoded
            }
        };
        place(&decoded, out);
        Ok(())
    }
}
