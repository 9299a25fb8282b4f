//! Where a read's stored chunks come from: the chunk index's record of each ([`StoredChunk`]),
//! their bytes read through the caller's HDF5 binding ([`RawChunks`]) or, where that is sound,
//! straight from the file at their addresses by the decoding threads themselves.

/// A chunk as the dataset's chunk index records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoredChunk {
    /// Its stored size.
    pub size: usize,
    /// Its filter mask (bit `i` set: filter `i` was skipped).
    pub mask: u32,
    /// The file offset of its stored bytes.
    pub address: u64,
}

/// Chunks a read touches from which the dataset's whole chunk index is listed once
/// (`H5Dchunk_iter`), rather than each chunk looked up (`H5Dget_chunk_info_by_coord`): HDF5
/// (1.14, 2.x) finds one chunk by iterating over the index until it meets it, so looking up k of
/// n chunks visits about k n / 2 entries (2048 chunks: 24 µs a lookup, 49 ms in all, against
/// 2.5 ms for one listing from h5py). Listing costs more per entry than a lookup's visit, so a
/// few chunks are still looked up.
pub const LIST_INDEX_FROM: usize = 16;

/// Where a dataset's stored chunks come from: the caller's HDF5 binding. Called on the calling
/// thread only.
pub trait RawChunks {
    /// The caller's error.
    type Error: Send;

    /// The chunk whose first element is `offset`; `None` when it was never written.
    fn stored(&mut self, offset: &[u64]) -> Result<Option<StoredChunk>, Self::Error>;

    /// Reads the chunk's stored bytes (`size`, as [`RawChunks::stored`] said) into `buf`, which
    /// then holds exactly them, and returns its filter mask. (A `Vec`, so that the implementation
    /// may read into its spare capacity instead of zero-filling first.)
    fn read(&mut self, offset: &[u64], size: usize, buf: &mut Vec<u8>) -> Result<u32, Self::Error>;

    /// The file holding the stored chunks at their addresses, when they may be read from it
    /// directly, from any thread, with no HDF5 call: the file open read-only (so HDF5 holds no
    /// newer bytes of them) through a driver whose addresses are the file's own offsets. `None`:
    /// every chunk is read through [`RawChunks::read`].
    fn direct_file(&mut self) -> Option<std::fs::File> {
        None
    }

    /// The error for the chunk at `offset`, which cannot be decoded for `reason`.
    fn corrupt(&self, offset: &[u64], reason: String) -> Self::Error;
}

/// The file behind descriptor `fd` (HDF5's own, through sec2 or gds), opened anew for the
/// decoding threads' reads: through `/proc/self/fd`, so it is the very file HDF5 has open even if
/// renamed since, with a file description of its own, without the driver's `O_DIRECT` (which
/// would refuse unaligned reads). `None` when it cannot be opened; the chunks are then read
/// through HDF5.
pub fn reopen(fd: i32) -> Option<std::fs::File> {
    std::fs::File::open(format!("/proc/self/fd/{fd}")).ok()
}

/// Reads a chunk's stored bytes from the file at its address.
pub(super) fn read_at(
    file: &std::fs::File,
    chunk: &StoredChunk,
    buf: &mut Vec<u8>,
) -> Result<(), String> {
    if buf.len() != chunk.size {
        buf.resize(chunk.size, 0);
    }
    read_stored_at(file, chunk.address, buf)
}

/// Reads the `buf.len()` stored bytes of a chunk at `address` of `file`; the error says what
/// could not be read, for the chunk's error.
pub fn read_stored_at(file: &std::fs::File, address: u64, buf: &mut [u8]) -> Result<(), String> {
    use std::os::unix::fs::FileExt;
    file.read_exact_at(buf, address).map_err(|e| {
        format!(
            "its {} stored bytes at byte {address} of the file could not be read: {e}",
            buf.len()
        )
    })
}
