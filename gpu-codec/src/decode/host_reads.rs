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
    super::first_failure(&mut parts, reads.threads, read)
}
