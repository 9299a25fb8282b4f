//! The staged device path: file data moves through pinned host bounce buffers, two per task with
//! a stream each, so a task's `pread` of one piece overlaps the host-to-device copy of the
//! previous piece (and the reverse for writes); several pool threads add more overlap. Used where GDS is not available, and for what remains of a transfer after
//! a cuFile error.
//!
//! Bounce buffers come from a process-wide pool and are kept for reuse (the pool is a static, so
//! idle buffers are deliberately never freed at exit, where freeing pinned memory can race the
//! CUDA driver's own teardown). When pinned memory cannot be had, ordinary host memory serves,
//! with a warning.

use super::posix;
use crate::cuda::{self, CUdeviceptr, PinnedBuffer};
use crate::error::{Error, Result};
use std::os::fd::RawFd;
use std::sync::Mutex;

enum Bounce {
    Pinned(PinnedBuffer),
    Pageable(Vec<u8>),
}

impl Bounce {
    fn ptr(&mut self) -> *mut u8 {
        match self {
            Bounce::Pinned(p) => p.as_mut_ptr(),
            Bounce::Pageable(v) => v.as_mut_ptr(),
        }
    }
    fn len(&self) -> usize {
        match self {
            Bounce::Pinned(p) => p.len(),
            Bounce::Pageable(v) => v.len(),
        }
    }
}

/// Idle bounce buffers, kept for reuse.
static POOL: Mutex<Vec<Bounce>> = Mutex::new(Vec::new());
const MAX_IDLE: usize = 32;

fn idle() -> std::sync::MutexGuard<'static, Vec<Bounce>> {
    // A poisoned pool only means a panic elsewhere while it was held; its buffers are intact.
    POOL.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn take(size: usize) -> Bounce {
    {
        let mut pool = idle();
        if let Some(i) = pool.iter().position(|b| b.len() == size) {
            return pool.swap_remove(i);
        }
    }
    match PinnedBuffer::new(size) {
        Ok(p) => Bounce::Pinned(p),
        Err(err) => {
            tracing::warn!(
                "no pinned bounce buffer of {size} bytes ({err}); staging through pageable memory"
            );
            Bounce::Pageable(vec![0; size])
        }
    }
}

fn give_back(buffer: Bounce) {
    let mut pool = idle();
    if pool.len() < MAX_IDLE {
        pool.push(buffer);
    }
    // Otherwise the buffer is dropped here, which frees it.
}

/// A failed step: what failed, the error, and how many of the step's bytes were done.
type Failure = (&'static str, std::io::Error, usize);

fn cuda_failure(op: &'static str, err: cuda::CudaError) -> Failure {
    (op, std::io::Error::other(err.to_string()), 0)
}

/// The pieces of a staged transfer: `(offset in the transfer, length)`, one bounce buffer each.
fn pieces(len: usize, bounce: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..len.div_ceil(bounce.max(1))).map(move |k| (k * bounce, bounce.min(len - k * bounce)))
}

/// Runs a staged transfer through two bounce buffers and this thread's two streams, so that the
/// file I/O of one piece overlaps the copy of the other. `start` begins piece `k` in buffer
/// `k % 2` (queueing its copy on that buffer's stream where the copy comes second); `finish`
/// completes it after that stream is synchronized. Before a buffer is reused, or returned to
/// the pool, its stream is drained; an error stops the transfer after draining both.
unsafe fn pipelined(
    path: &str,
    len: usize,
    offset: u64,
    bounce_size: usize,
    start: &dyn Fn(*mut u8, usize, usize, cuda::Stream) -> std::result::Result<(), Failure>,
    finish: &dyn Fn(*mut u8, usize, usize) -> std::result::Result<(), Failure>,
) -> Result<()> {
    let streams = cuda::thread_streams().map_err(|e| Error::Device(e.to_string()))?;
    let mut bufs = [take(bounce_size), take(bounce_size)];
    let mut pending: [Option<(usize, usize)>; 2] = [None, None];
    let mut result: std::result::Result<(), (Failure, usize)> = Ok(());
    // Completes the piece pending on buffer `b`, if any.
    let settle = |b: usize, bufs: &mut [Bounce; 2], pending: &mut [Option<(usize, usize)>; 2]| {
        let Some((off, n)) = pending[b].take() else {
            return Ok(());
        };
        cuda::synchronize(streams[b])
            .map_err(|e| (cuda_failure("staged copy (stream)", e), off))?;
        finish(bufs[b].ptr(), off, n).map_err(|f| (f, off))
    };
    for (k, (off, n)) in pieces(len, bounce_size).enumerate() {
        let b = k % 2;
        if let Err(e) = settle(b, &mut bufs, &mut pending) {
            result = Err(e);
            break;
        }
        if let Err(f) = start(bufs[b].ptr(), off, n, streams[b]) {
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
        give_back(buffer);
    }
    result.map_err(|((op, source, partial), off)| Error::Io {
        op,
        path: path.to_string(),
        offset: offset + off as u64,
        size: len.saturating_sub(off).min(bounce_size) as u64,
        done: (off + partial) as u64,
        source,
    })
}

/// Reads `len` bytes at file offset `offset` into device memory at `dst`, through bounce
/// buffers of `bounce_size`: the `pread` of one piece overlaps the copy of the previous one.
/// Past end of file the device memory is zero-filled (the read zero-fills the bounce buffer).
///
/// # Safety
/// `dst .. dst + len` must be device memory.
pub unsafe fn read(
    fd: RawFd,
    path: &str,
    dst: CUdeviceptr,
    len: usize,
    offset: u64,
    bounce_size: usize,
) -> Result<()> {
    pipelined(
        path,
        len,
        offset,
        bounce_size,
        &|bounce, off, n, stream| {
            // SAFETY: the bounce buffer holds at least n bytes and no copy from it is in flight;
            // dst + off .. + n is device memory.
            unsafe {
                posix::read_full(fd, bounce, n, offset + off as u64)
                    .map_err(|f| ("read (staged)", f.source, f.done))?;
                cuda::copy_to_device_async(dst + off as u64, bounce, n, stream)
                    .map_err(|e| cuda_failure("read (staged copy to device)", e))
            }
        },
        &|_, _, _| Ok(()),
    )
}

/// Writes `len` bytes of device memory at `src` to file offset `offset` through bounce buffers:
/// the copy of one piece overlaps the `pwrite` of the previous one.
///
/// # Safety
/// `src .. src + len` must be device memory.
pub unsafe fn write(
    fd: RawFd,
    path: &str,
    src: CUdeviceptr,
    len: usize,
    offset: u64,
    bounce_size: usize,
) -> Result<()> {
    pipelined(
        path,
        len,
        offset,
        bounce_size,
        &|bounce, off, n, stream| {
            // SAFETY: the bounce buffer holds at least n bytes and is not being written out.
            unsafe {
                cuda::copy_from_device_async(bounce, src + off as u64, n, stream)
                    .map_err(|e| cuda_failure("write (staged copy from device)", e))
            }
        },
        &|bounce, off, n| {
            // SAFETY: the copy into the bounce buffer has completed (its stream was synchronized).
            unsafe {
                posix::write_full(fd, bounce, n, offset + off as u64)
                    .map_err(|f| ("write (staged)", f.source, f.done))
            }
        },
    )
}
