//! Host buffers for moving bytes between files and device memory, pinned where CUDA can pin them,
//! kept in a process-wide pool for reuse: pinning is slow (a first read through 16 threads would
//! otherwise pin 32 bounce buffers), and every user of staging (the driver's bounce buffers, the
//! Python extension's staged reads and writes) takes from here.
//!
//! The pool is a static, so idle buffers are deliberately never freed at exit, where freeing pinned
//! memory can race the CUDA driver's own teardown. When pinned memory cannot be had, ordinary host
//! memory serves, with a warning.

use crate::cuda::PinnedBuffer;
use std::sync::Mutex;

/// A staging buffer: pinned, or pageable where pinning failed.
pub enum Staging {
    Pinned(PinnedBuffer),
    Pageable(Vec<u8>),
}

impl Staging {
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        match self {
            Staging::Pinned(p) => p.as_mut_ptr(),
            Staging::Pageable(v) => v.as_mut_ptr(),
        }
    }
    pub fn len(&self) -> usize {
        match self {
            Staging::Pinned(p) => p.len(),
            Staging::Pageable(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Idle buffers, kept for reuse.
static POOL: Mutex<Vec<Staging>> = Mutex::new(Vec::new());
/// The most idle buffers kept; more are freed when given back.
const MAX_IDLE: usize = 32;

/// The idle buffers; None in a child forked from a process that used CUDA, which must not touch
/// the parent's pinned buffers (CUDA state is undefined after fork, `cuda::forked_from`) nor
/// wait on a lock a fork may have copied held by a thread the child does not have.
fn idle() -> Option<std::sync::MutexGuard<'static, Vec<Staging>>> {
    if crate::cuda::forked_from().is_some() {
        return None;
    }
    // A poisoned pool only means a panic elsewhere while it was held; its buffers are intact.
    Some(POOL.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
}

/// A buffer of at least `size` bytes: the smallest idle one that is large enough, else a new one
/// of `size`.
pub fn take(size: usize) -> Staging {
    if let Some(mut pool) = idle() {
        let fitting = (0..pool.len())
            .filter(|&i| pool[i].len() >= size)
            .min_by_key(|&i| pool[i].len());
        if let Some(i) = fitting {
            return pool.swap_remove(i);
        }
    }
    match PinnedBuffer::new(size) {
        Ok(p) => Staging::Pinned(p),
        Err(err) => {
            tracing::warn!(
                "no pinned host buffer of {size} bytes ({err}); staging through pageable memory"
            );
            Staging::Pageable(vec![0; size])
        }
    }
}

/// Returns a buffer to the pool, once nothing (no copy in flight) uses it any more.
pub fn give_back(buffer: Staging) {
    if let Some(mut pool) = idle() {
        if pool.len() < MAX_IDLE {
            pool.push(buffer);
        }
    }
    // Otherwise the buffer is dropped here, which frees it.
}

/// Frees the idle buffers (pinned memory is the host's; a later transfer pins what it needs
/// again). Returns how many.
pub fn release_idle() -> usize {
    let released = idle()
        .map(|mut pool| std::mem::take(&mut *pool))
        .unwrap_or_default();
    // Freed here, outside the pool's lock.
    released.len()
}

/// A buffer taken from the pool, given back when dropped.
pub struct Taken(Option<Staging>);

/// The smallest buffer [`Taken::new`] pins, so that small transfers share buffers.
const MIN_TAKEN: usize = 64 << 10;

impl Taken {
    /// A buffer of at least `size` bytes ([`take`]), rounded up to a power of two of at least
    /// 64 KiB, so that buffers of a few sizes serve transfers of every size.
    pub fn new(size: usize) -> Taken {
        let rounded = size.checked_next_power_of_two().unwrap_or(size);
        Taken(Some(take(rounded.max(MIN_TAKEN))))
    }
    /// A buffer of at least `size` bytes ([`take`]) as it is, for callers that size their
    /// buffers themselves (the driver's bounce buffers).
    pub fn exact(size: usize) -> Taken {
        Taken(Some(take(size)))
    }
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.0
            .as_mut()
            .map_or(std::ptr::null_mut(), Staging::as_mut_ptr)
    }
    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, Staging::len)
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        if let Some(buffer) = self.0.take() {
            give_back(buffer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_given_back_are_reused_smallest_fitting_first() {
        release_idle();
        give_back(Staging::Pageable(vec![0; 100]));
        give_back(Staging::Pageable(vec![0; 10]));
        give_back(Staging::Pageable(vec![0; 50]));
        let got = take(40);
        assert_eq!(got.len(), 50);
        give_back(got);
        // Taken rounds up to a power of two of at least MIN_TAKEN and gives its buffer back.
        give_back(Staging::Pageable(vec![0; MIN_TAKEN]));
        give_back(Staging::Pageable(vec![0; 2 * MIN_TAKEN]));
        let first = {
            let mut small = Taken::new(20);
            assert_eq!(small.len(), MIN_TAKEN);
            small.as_mut_ptr()
        };
        let mut again = Taken::new(MIN_TAKEN);
        assert_eq!((again.len(), again.as_mut_ptr()), (MIN_TAKEN, first));
        let rounded = Taken::new(MIN_TAKEN + 1);
        assert_eq!(rounded.len(), 2 * MIN_TAKEN);
        drop((again, rounded));
        assert_eq!(release_idle(), 5);
        assert_eq!(release_idle(), 0);
    }
}
