//! Stored chunks read by the host's threads (for files the driver would stage anyway), into
//! the pinned buffer of a batch's lane of the staging ring.

use super::Stored;

/// Stored chunks read from the file by the host's threads, at their addresses, into pinned
/// memory, and copied up a batch at a time. For files the driver would stage anyway (no
/// GPUDirect path): the bytes take the same way, without one HDF5 call and one driver transfer
/// per chunk.
pub struct HostReads {
    /// The file, open read-only by HDF5 (so it holds no newer bytes of the chunks), whose
    /// offsets are HDF5's addresses.
    pub file: std::fs::File,
    /// Reading threads.
    pub threads: usize,
    /// Why the driver would stage the chunks, for the log.
    pub why: String,
}

impl HostReads {
    /// How the stored chunks travel, in words for a log line ("chunks move compressed ...").
    pub fn route(reads: &Option<HostReads>) -> String {
        match reads {
            Some(r) => format!(
                "from the file into pinned host memory on {} threads and up to device memory a \
                 batch at a time ({})",
                r.threads, r.why
            ),
            None => "from the file straight into device memory through the gds driver".into(),
        }
    }
}

/// Reads the stored bytes of every chunk of `batch` from the file into `bytes` at the chunk's
/// slot, on the host's threads. On failure, the first chunk (in batch order) that could not be
/// read, and why.
pub(super) fn read_stored(
    reads: &HostReads,
    batch: &[Stored],
    bytes: &mut [u8],
) -> Result<(), (usize, String)> {
    // Each chunk's bytes, apart: the slots do not overlap.
    let mut parts: Vec<(usize, &Stored, &mut [u8])> = Vec::with_capacity(batch.len());
    let mut rest = bytes;
    let mut at = 0usize;
    for (i, c) in batch.iter().enumerate() {
        let (_, tail) = std::mem::take(&mut rest).split_at_mut(c.slot - at);
        let (mine, tail) = tail.split_at_mut(c.size);
        parts.push((i, c, mine));
        rest = tail;
        at = c.slot + c.size;
    }
    let read = |(i, c, buf): &mut (usize, &Stored, &mut [u8])| {
        h5gds_chunk_codec::read_stored_at(&reads.file, c.address, buf).map_err(|why| (*i, why))
    };
    let pool = (reads.threads > 1 && parts.len() > 1)
        .then(|| h5gds_runtime::pool::for_waiting_caller(reads.threads))
        .flatten();
    let Some(pool) = pool else {
        return parts.iter_mut().try_for_each(read);
    };
    // A few chunks per task, so that small chunks do not cost a task each.
    let per_task = parts.len().div_ceil(4 * reads.threads).max(1);
    let failures: std::sync::Mutex<Vec<(usize, String)>> = std::sync::Mutex::new(Vec::new());
    pool.in_place_scope(|scope| {
        for group in parts.chunks_mut(per_task) {
            let failures = &failures;
            scope.spawn(move |_| {
                if let Err(failure) = group.iter_mut().try_for_each(read) {
                    failures
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(failure);
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap_or_else(|e| e.into_inner());
    match failures.into_iter().min_by_key(|f| f.0) {
        Some(first) => Err(first),
        None => Ok(()),
    }
}
