//! The staged device path: file data moves through pinned host bounce buffers, one per task, so
//! with several pool threads one task's `pread` overlaps another's host-to-device copy (and the
//! reverse for writes). Used where GDS is not available, and for what remains of a transfer after
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

/// One step of a staged transfer: `n` bytes between the bounce buffer and the file at `pos`
/// and between the bounce buffer and device memory at `dev`, in the direction's order.
type Step<'a> = &'a dyn Fn(
    *mut u8,
    usize,
    u64,
    CUdeviceptr,
) -> std::result::Result<(), (&'static str, std::io::Error, usize)>;

/// Moves `len` bytes through one bounce buffer of `bounce_size`, a piece at a time.
unsafe fn staged(
    path: &str,
    dev: CUdeviceptr,
    len: usize,
    offset: u64,
    bounce_size: usize,
    step: Step,
) -> Result<()> {
    let mut bounce = take(bounce_size);
    let mut done = 0usize;
    let mut result = Ok(());
    while done < len {
        let n = (len - done).min(bounce.len());
        let pos = offset + done as u64;
        if let Err((op, source, partial)) = step(bounce.ptr(), n, pos, dev + done as u64) {
            result = Err(Error::Io {
                op,
                path: path.to_string(),
                offset: pos,
                size: n as u64,
                done: (done + partial) as u64,
                source,
            });
            break;
        }
        done += n;
    }
    give_back(bounce);
    result
}

fn cuda_failure(op: &'static str, err: cuda::CudaError) -> (&'static str, std::io::Error, usize) {
    (op, std::io::Error::other(err.to_string()), 0)
}

/// Reads `len` bytes at file offset `offset` into device memory at `dst`, through bounce
/// buffers of `bounce_size`; past end of file the device memory is zero-filled.
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
    staged(
        path,
        dst,
        len,
        offset,
        bounce_size,
        &|bounce, n, pos, dev| {
            // SAFETY: the bounce buffer holds at least n bytes; dev .. dev + n is device memory.
            unsafe {
                posix::read_full(fd, bounce, n, pos)
                    .map_err(|f| ("read (staged)", f.source, f.done))?;
                cuda::copy_to_device(dev, bounce, n)
                    .map_err(|e| cuda_failure("read (staged copy to device)", e))
            }
        },
    )
}

/// Writes `len` bytes of device memory at `src` to file offset `offset` through bounce buffers.
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
    staged(
        path,
        src,
        len,
        offset,
        bounce_size,
        &|bounce, n, pos, dev| {
            // SAFETY: the bounce buffer holds at least n bytes; dev .. dev + n is device memory.
            unsafe {
                cuda::copy_from_device(bounce, dev, n)
                    .map_err(|e| cuda_failure("write (staged copy from device)", e))?;
                posix::write_full(fd, bounce, n, pos)
                    .map_err(|f| ("write (staged)", f.source, f.done))
            }
        },
    )
}
