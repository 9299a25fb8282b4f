//! The bounce-buffer device path ("staged" in the log lines): file data moves through pinned host bounce buffers, two per task with
//! a stream each, so a task's `pread` of one piece overlaps the host-to-device copy of the
//! previous piece (and the reverse for writes); several pool threads add more overlap. Used where GDS is not available, and for what remains of a transfer after
//! a cuFile error.
//!
//! Bounce buffers come from the process-wide pool of pinned host buffers
//! (`h5gds_runtime::pinned`), kept for reuse and never freed at exit.

use super::{posix, BufPtr, Direction, PartialTransfer};
use crate::cuda::{self, CUdeviceptr, DeviceContext};
use crate::error::{Error, Result};
use h5gds_runtime::pinned::{self, Staging};
use std::os::fd::RawFd;

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

/// Moves `len` bytes between device memory at `dev` and file offset `offset` through pinned
/// bounce buffers of `bounce_size`, two at a time with a stream each, so that the file I/O of one
/// piece overlaps the copy of the other. A read `pread`s a piece into its buffer and queues the
/// copy to the device (past end of file the bounce buffer, and so the device memory, is
/// zero-filled); a write queues the copy from the device and `pwrite`s the piece once its stream
/// is synchronized. Before a buffer is reused, or returned to the pool, its stream is drained; an
/// error stops the transfer after draining both. The streams are this thread's for `context`, the
/// memory's (bounce buffers are portable pinned memory, usable from every context).
///
/// # Safety
/// `dev .. dev + len` must be device memory of `context`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn transfer(
    dir: Direction,
    fd: RawFd,
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
    // The file side of piece `(off, n)` in bounce buffer `buf`.
    let file_io = |buf: *mut u8, off: usize, n: usize| -> std::result::Result<(), FailedStep> {
        // SAFETY: the bounce buffer holds at least n bytes and no copy into or out of it is in
        // flight (its stream is idle).
        unsafe { posix::transfer(dir, fd, BufPtr::new(buf), n, offset + off as u64, false) }
            .map(drop)
            .map_err(|f| (op, f))
    };
    // Starts piece `(off, n)` in buffer `b`: the file I/O comes first for a read.
    let start = |buf: *mut u8, off: usize, n: usize, b: usize| {
        if dir == Direction::Read {
            file_io(buf, off, n)?;
        }
        // SAFETY: the bounce buffer holds n bytes and is left alone until the stream is
        // synchronized; dev + off .. + n is device memory (caller's contract).
        unsafe { cuda::copy_async(dir, buf, dev + off as u64, n, streams[b]) }
            .map_err(|e| copy_failed(copy_op, e))
    };
    // Completes the piece pending on buffer `b`, if any: the file I/O comes last for a write.
    let settle = |b: usize, bufs: &mut [Staging; 2], pending: &mut [Option<(usize, usize)>; 2]| {
        let Some((off, n)) = pending[b].take() else {
            return Ok(());
        };
        cuda::synchronize(streams[b]).map_err(|e| (copy_failed("staged copy (stream)", e), off))?;
        if dir == Direction::Write {
            file_io(bufs[b].as_mut_ptr(), off, n).map_err(|f| (f, off))?;
        }
        Ok(())
    };
    let size = bounce_buffer_for(len, bounce_size);
    let mut bufs = [pinned::take(size), pinned::take(size)];
    let mut pending: [Option<(usize, usize)>; 2] = [None, None];
    let mut result: std::result::Result<(), (FailedStep, usize)> = Ok(());
    for (k, (off, n)) in pieces(len, bounce_size).enumerate() {
        let b = k % 2;
        if let Err(e) = settle(b, &mut bufs, &mut pending) {
            result = Err(e);
            break;
        }
        if let Err(f) = start(bufs[b].as_mut_ptr(), off, n, b) {
            result = Err((f, off));
            break;
        }
        pending[b] = Some((off, n));
    }
    for b in [0, 1] {
        // Drain both streams whatever happened, before the buffers go back to the pool.
        let settled = settle(b, &mut bufs, &mut pending);
        if result.is_ok() {
            result = settled;
        }
    }
    for buffer in bufs {
        pinned::give_back(buffer);
    }
    result.map_err(|((op, partial), off)| Error::Io {
        op,
        path: path.to_string(),
        offset: offset + off as u64,
        size: len.saturating_sub(off).min(bounce_size) as u64,
        done: (off + partial.done) as u64,
        source: partial.source,
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
