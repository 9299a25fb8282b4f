//! Where a stored dataset's bytes come from ([`ByteSource`]): a local file read with `pread` at
//! its offsets ([`LocalFile`]: sec2's or `gds`'s descriptor, opened anew), or a remote object
//! read with ranged GETs pinned to the version the driver opened ([`RemoteObject`]: the `gds`
//! driver's own remote file, found from its handle). The engine asks both the same things: one
//! range, many ranges at once (a contiguous read's pieces, a gather's rows), and chunks' ranges
//! in the order a decoder takes them; each answers its own way (the pool's threads reading a
//! file's pieces side by side; concurrent GETs, neighbours coalesced, fetched ahead of the
//! decoder).

use super::{pool_for, PIECE_BYTES};
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

/// The bytes of a stored dataset's file at the addresses HDF5 reports, from any thread. Errors
/// are the cause only; the caller names the dataset and the range.
pub trait ByteSource: Send + Sync {
    /// The file or object, for messages (`'/data/x.h5'`, `s3://bucket/x.h5`).
    fn name(&self) -> &str;

    /// Reads `buf.len()` bytes at `addr`, all of them.
    fn read_at(&self, addr: u64, buf: &mut [u8]) -> Result<(), String>;

    /// Reads every piece (address, destination, disjoint) whole; `threads` of the pool may
    /// share the work.
    fn read_pieces(&self, pieces: Vec<(u64, &mut [u8])>, threads: usize) -> Result<(), String>;

    /// Whether many small reads are better handed over together ([`ByteSource::read_pieces`])
    /// than made one by one on the calling thread (each costs a round trip).
    fn batches(&self) -> bool;

    /// The bytes of `ranges`, handed back in this order by the reader, which may fetch ahead.
    fn in_order(&self, ranges: Vec<Range<u64>>) -> Result<Box<dyn InOrder + '_>, String>;

    /// The file's descriptor, where the decoding threads may read chunks from it themselves
    /// (`RawChunks::direct_file`): a local file's, opened anew.
    fn direct_file(&self) -> Option<File>;

    /// Runs `list` (a listing of a dataset's chunk index through HDF5), the source fetching the
    /// index's bytes ahead of HDF5's reads where it gains by it (a remote object: each level of
    /// the tree at once, instead of a round trip per node).
    fn listing_index(&self, list: &mut dyn FnMut()) {
        list()
    }
}

/// Ranges handed back one by one ([`ByteSource::in_order`]).
pub trait InOrder {
    /// Puts the next range's bytes in `buf`, which then holds exactly them.
    fn next_into(&mut self, buf: &mut Vec<u8>) -> Result<(), String>;
}

/// A stored dataset's source of bytes, as [`super::Stored::resolve`] takes it: a local `File`
/// or the driver's remote file converts into one.
pub struct Source(pub(super) Box<dyn ByteSource>);

impl From<File> for Source {
    fn from(file: File) -> Source {
        Source(Box::new(LocalFile {
            name: path_of(&file),
            file,
        }))
    }
}

impl From<Arc<h5gds::RemoteFile>> for Source {
    fn from(remote: Arc<h5gds::RemoteFile>) -> Source {
        Source(Box::new(RemoteObject(remote)))
    }
}

/// The path of the open `file`, as the kernel names it (`/proc/self/fd`).
fn path_of(file: &File) -> String {
    use std::os::fd::AsRawFd;
    std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .map(|p| format!("'{}'", p.display()))
        .unwrap_or_else(|_| "its file".into())
}

/// A local file: `pread` at its offsets.
pub struct LocalFile {
    file: File,
    name: String,
}

impl ByteSource for LocalFile {
    fn name(&self) -> &str {
        &self.name
    }

    fn read_at(&self, addr: u64, buf: &mut [u8]) -> Result<(), String> {
        self.file
            .read_exact_at(buf, addr)
            .map_err(|e| e.to_string())
    }

    /// The pieces side by side on the pool's threads (small ones a few a task: one task per
    /// 4 KiB row costs more than its read), or in order on the calling thread.
    fn read_pieces(&self, mut pieces: Vec<(u64, &mut [u8])>, threads: usize) -> Result<(), String> {
        use rayon::prelude::*;
        let total: usize = pieces.iter().map(|(_, b)| b.len()).sum();
        let read = |(addr, buf): &mut (u64, &mut [u8])| {
            self.file
                .read_exact_at(buf, *addr)
                .map_err(|e| format!("reading {} bytes at byte {addr} failed: {e}", buf.len()))
        };
        let pool = pool_for(total >= super::PARALLEL_BYTES && pieces.len() > 1, threads);
        match pool {
            Some(pool) => {
                let group = (PIECE_BYTES / (total as u64 / pieces.len().max(1) as u64).max(1))
                    .clamp(1, 64) as usize;
                pool.install(|| pieces.par_iter_mut().with_min_len(group).try_for_each(read))
            }
            None => pieces.iter_mut().try_for_each(read),
        }
    }

    fn batches(&self) -> bool {
        false
    }

    fn in_order(&self, ranges: Vec<Range<u64>>) -> Result<Box<dyn InOrder + '_>, String> {
        Ok(Box::new(LocalInOrder {
            file: self,
            ranges: ranges.into_iter(),
        }))
    }

    fn direct_file(&self) -> Option<File> {
        self.file.try_clone().ok()
    }
}

/// A local file's ranges in order: each read when asked for (the page cache reads ahead).
struct LocalInOrder<'a> {
    file: &'a LocalFile,
    ranges: std::vec::IntoIter<Range<u64>>,
}

impl InOrder for LocalInOrder<'_> {
    fn next_into(&mut self, buf: &mut Vec<u8>) -> Result<(), String> {
        let range = self
            .ranges
            .next()
            .ok_or("more ranges were asked for than were given")?;
        buf.resize((range.end - range.start) as usize, 0);
        self.file.read_at(range.start, buf)
    }
}

/// The `gds` driver's remote file: ranged GETs, each conditional on the ETag seen when the
/// driver opened it (an object replaced since fails the read, never mixes versions).
pub struct RemoteObject(Arc<h5gds::RemoteFile>);

impl ByteSource for RemoteObject {
    fn name(&self) -> &str {
        self.0.url()
    }

    fn read_at(&self, addr: u64, buf: &mut [u8]) -> Result<(), String> {
        self.0.read_at(addr, buf).map_err(|e| e.to_string())
    }

    /// Concurrent GETs (`H5GDS_REMOTE_IN_FLIGHT`), neighbours coalesced, large pieces split
    /// (`H5GDS_REMOTE_REQUEST_SIZE`): the pool's threads have nothing to add.
    fn read_pieces(&self, pieces: Vec<(u64, &mut [u8])>, _threads: usize) -> Result<(), String> {
        self.0.read_pieces(pieces).map_err(|e| e.to_string())
    }

    fn batches(&self) -> bool {
        true
    }

    fn in_order(&self, ranges: Vec<Range<u64>>) -> Result<Box<dyn InOrder + '_>, String> {
        let reader = self.0.in_order(ranges).map_err(|e| e.to_string())?;
        Ok(Box::new(RemoteInOrder(reader)))
    }

    fn direct_file(&self) -> Option<File> {
        None
    }

    fn listing_index(&self, list: &mut dyn FnMut()) {
        self.0.walking_index(list)
    }
}

struct RemoteInOrder(h5gds::InOrder);

impl InOrder for RemoteInOrder {
    fn next_into(&mut self, buf: &mut Vec<u8>) -> Result<(), String> {
        self.0.next_into(buf).map_err(|e| e.to_string())
    }
}
