//! The bounce-buffer device path ("staged" in the log lines): file data moves through pinned host bounce buffers, two per task with
//! a stream each, so a task's `pread` of one piece overlaps the host-to-device copy of the
//! previous piece (and the reverse for writes); several pool threads add more overlap. Used where GDS is not available, and for what remains of a transfer after
//! a cuFile error.
//!
//! Bounce buffers come from the process-wide pool of pinned host buffers
//! (`h5gds_runtime::pinned`), kept for reuse and never freed at exit, and take turns in the
//! staging ring (`h5gds_runtime::staging_ring`).

use super::{posix, BufPtr, Direction, PartialTransfer};
use crate::cuda::{self, CUdeviceptr, DeviceContext};
use crate::error::{Error, Result};
use h5gds_runtime::pinned::Taken;
use h5gds_runtime::staging_ring::{LaneCopies, StagingRing, Stop};
use std::os::fd::RawFd;

/// Where the file side of a staged transfer goes: a descriptor (`pread`/`pwrite`), or a remote
/// file's ranged GETs (reads only).
#[derive(Clone, Copy)]
pub(crate) enum FileSide<'a> {
    Fd(RawFd),
    Remote(&'a crate::remote::RemoteFile),
}

/// The smallest bounce buffers worth pinning, so that small transfers share them.
const MIN_BOUNCE: usize = 64 << 10;

/// The bounce buffer a transfer of `len` bytes needs: the setting's size, or, for a transfer
/// shorter than that (a small read, or one task of `task_size`, 4M by default against 16M bounce
/// buffers), the transfer rounded up to a power of two (at least `MIN_BOUNCE`), so a process
/// pins what its requests need (pinning is slow: a first read through 16 threads would otherwise
/// pin 32 x 16M) and buffers of a few sizes serve every request.
fn bounce_buffer_for(len: usize, bounce_size: usize) -> usize {
    let need = len.max(1).min(bounce_size);
    need.next_power_of_two().max(MIN_BOUNCE).min(bounce_size)
}

/// A failed step: what failed, and the error with how many of the step's bytes were done.
type FailedStep = (&'static str, PartialTransfer);

/// The pieces of a staged transfer: `(offset in the transfer, length)`, one bounce buffer each.
fn pieces(len: usize, bounce: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..len.div_ceil(bounce.max(1))).map(move |k| (k * bounce, bounce.min(len - k * bounce)))
}

/// Moves `len` bytes between device memory at `dev` and file offset `offset` through the
/// staging ring (`h5gds_runtime::staging_ring`): two pinned bounce buffers of `bounce_size` with
/// a stream each, so that the file I/O of one piece overlaps the copy of the other. A read
/// `pread`s a piece into its buffer and queues the copy to the device (past end of file the
/// bounce buffer, and so the device memory, is zero-filled); a write queues the copy from the
/// device and `pwrite`s the piece once it has landed. An error stops the transfer once the
/// queued copies have finished. The streams are this thread's for `context`, the memory's
/// (bounce buffers are portable pinned memory, usable from every context).
///
/// # Safety
/// `dev .. dev + len` must be device memory of `context`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn transfer(
    dir: Direction,
    file: FileSide<'_>,
    path: &str,
    context: DeviceContext,
    dev: CUdeviceptr,
    len: usize,
    offset: u64,
    bounce_size: usize,
) -> Result<()> {
    let streams = cuda::thread_streams(context).map_err(|e| Error::Device(e.to_string()))?;
    let (op, copy_op) = match dir {
        Direction::Read => ("read (staged)", "read (staged copy to device)"),
        Direction::Write => ("write (staged)", "write (staged copy from device)"),
    };
    let copy_failed = |op, e: cuda::CudaError| {
        let source = std::io::Error::other(e.to_string());
        (op, PartialTransfer { source, done: 0 })
    };
    let pieces: Vec<(usize, usize)> = pieces(len, bounce_size).collect();
    // The file side of piece `k` in its bounce buffer `buf`, which no copy uses now (the ring
    // hands it out only then): a read writes it, a write only reads it.
    let file_io = |k: usize, buf: *mut u8| -> std::result::Result<(), (usize, FailedStep)> {
        let (off, n) = pieces[k];
        // SAFETY: the bounce buffer holds at least n bytes (`bounce_buffer_for`) and is borrowed
        // from the ring for the call.
        let at = offset + off as u64;
        match file {
            // SAFETY: as above.
            FileSide::Fd(fd) => unsafe { posix::transfer(dir, fd, BufPtr::new(buf), n, at, false) }
                .map(drop)
                .map_err(|f| (k, (op, f))),
            FileSide::Remote(remote) if dir == Direction::Read => {
                // SAFETY: as above; the ring lends the buffer to this step alone.
                let piece = unsafe { std::slice::from_raw_parts_mut(buf, n) };
                remote.read(at, piece).map_err(|e| {
                    let source = std::io::Error::other(e.to_string());
                    (k, (op, PartialTransfer { source, done: 0 }))
                })
            }
            FileSide::Remote(_) => {
                let source = std::io::Error::other("a remote file is read-only");
                Err((k, (op, PartialTransfer { source, done: 0 })))
            }
        }
    };
    // The device side of piece `k`: one copy between its bounce buffer and `dev + off`.
    let copy = |k: usize, copies: &LaneCopies<cuda::Stream>| {
        let (off, n) = pieces[k];
        // SAFETY: dev + off .. + n is device memory of `context` (the caller's contract), which
        // outlives the transfer and so the ring's wait for the copy.
        let queued = unsafe {
            match dir {
                Direction::Read => copies.upload(0, dev + off as u64, n),
                Direction::Write => copies.download(0, dev + off as u64, n),
            }
        };
        queued.map_err(|e| (k, copy_failed(copy_op, e)))
    };
    let size = bounce_buffer_for(len, bounce_size);
    let mut ring = StagingRing::new(
        vec![Taken::exact(size), Taken::exact(size)],
        streams.to_vec(),
    );
    let moved = match dir {
        Direction::Read => {
            ring.to_device(pieces.len(), |k, buf| file_io(k, buf.as_mut_ptr()), copy)
        }
        Direction::Write => ring.from_device(pieces.len(), copy, |k, buf| {
            file_io(k, buf.as_ptr().cast_mut())
        }),
    };
    moved.map_err(|stop| {
        let (piece, (op, partial)) = match stop {
            Stop::Step(failed) => failed,
            Stop::Cuda { piece, error } => (piece, copy_failed("staged copy (stream)", error)),
        };
        let off = pieces[piece].0;
        Error::Io {
            op,
            path: path.to_string(),
            offset: offset + off as u64,
            size: len.saturating_sub(off).min(bounce_size) as u64,
            done: (off + partial.done) as u64,
            source: partial.source,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounce_buffers_fit_the_transfer_and_every_piece() {
        assert_eq!(bounce_buffer_for(4096, 16 << 20), MIN_BOUNCE);
        assert_eq!(bounce_buffer_for(0, 16 << 20), MIN_BOUNCE);
        assert_eq!(bounce_buffer_for(4 << 20, 16 << 20), 4 << 20);
        assert_eq!(bounce_buffer_for((5 << 20) + 5, 16 << 20), 8 << 20);
        assert_eq!(bounce_buffer_for(1 << 30, 16 << 20), 16 << 20);
        // A setting below the minimum, and one that is no power of two, are kept.
        assert_eq!(bounce_buffer_for(100, 4096), 4096);
        assert_eq!(bounce_buffer_for(10 << 20, 3 << 20), 3 << 20);
        for len in [1, 4095, 65_537, 3 << 20, (17 << 20) + 1] {
            for bounce in [4096, 65_536, 3 << 20, 16 << 20] {
                let size = bounce_buffer_for(len, bounce);
                assert!(size <= bounce.max(MIN_BOUNCE.min(bounce)));
                assert!(
                    pieces(len, bounce).all(|(_, n)| n <= size),
                    "{len} {bounce}"
                );
                assert_eq!(pieces(len, bounce).map(|(_, n)| n).sum::<usize>(), len);
            }
        }
    }
}
