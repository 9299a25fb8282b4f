//! How a parallel read or write of chunks uses the process's thread pool: whether it does at
//! all, and how many chunks it keeps in flight so that every thread stays busy while the calling
//! thread (which holds the caller's HDF5 lock) reads or writes the next, within a memory bound.

use std::sync::Arc;

/// Chunk bytes that may be in flight at once, across all chunks.
const IN_FLIGHT_BYTES: usize = 512 << 20;

/// The pool that works on `chunks` chunks of `chunk_bytes` with `threads` threads, and how many
/// chunks may be in flight at once (each holding three buffers of a chunk; at least `fewest`, at
/// most every chunk). `None`: the calling thread does the work itself (one thread, one chunk, or
/// a caller that is a pool thread, which must not wait on its own pool).
pub(crate) fn pool_and_slots(
    threads: usize,
    chunks: usize,
    chunk_bytes: usize,
    fewest: usize,
) -> Option<(Arc<rayon::ThreadPool>, usize)> {
    if threads <= 1 || chunks <= 1 {
        return None;
    }
    let pool = h5gds_runtime::pool::for_waiting_caller(threads)?;
    let slots = (2 * threads)
        .min(IN_FLIGHT_BYTES / (3 * chunk_bytes.max(1)))
        .clamp(fewest, chunks);
    Some((pool, slots))
}
