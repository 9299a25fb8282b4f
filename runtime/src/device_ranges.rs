//! The device ranges seen so far: which addresses are device memory, in which context, without
//! asking CUDA the full set of questions for every request. A range (an allocation, or one
//! mapping of VMM or pool memory, with its context) is cached once found, so repeated transfers
//! on one device buffer pay one buffer-id query instead of the full set. Without working CUDA
//! every buffer is host memory and no query is made. A query that fails (a sticky CUDA error) is
//! an error, never a guess: taking such a buffer for host memory turned a device pointer into a
//! misleading `EFAULT` from `pread`. In a process forked after CUDA was initialised CUDA cannot
//! be asked: a buffer the host can read is host memory, an address the host cannot read is
//! refused with the reason.

use crate::cuda::{self, CUdeviceptr, DeviceRange, PointerKind};
use std::sync::RwLock;

/// Device ranges seen so far.
static DEVICE_RANGES: RwLock<Vec<DeviceRange>> = RwLock::new(Vec::new());

/// At most this many ranges are remembered; past that the oldest half is forgotten.
const MAX_CACHED: usize = 1024;

/// The cached range holding `ptr`, if the memory there is still the one cached: memory freed and
/// allocated or mapped again at the same address (pools and VMM allocators do this all the time)
/// has a new buffer id, and its stale range is forgotten.
fn cached(ptr: u64) -> Option<PointerKind> {
    let range = {
        let ranges = DEVICE_RANGES.read().ok()?;
        *ranges.iter().find(|r| ptr >= r.base && ptr < r.end())?
    };
    if cuda::buffer_id(ptr as usize) == Some(range.id) {
        return Some(PointerKind::Device(range));
    }
    forget_device_range(range.base);
    None
}

fn remember(range: DeviceRange) {
    if let Ok(mut ranges) = DEVICE_RANGES.write() {
        // A range overlapping the new one was freed and its addresses reused.
        ranges.retain(|r| r.end() <= range.base || r.base >= range.end());
        if ranges.len() >= MAX_CACHED {
            ranges.drain(..MAX_CACHED / 2);
        }
        ranges.push(range);
    }
}

/// Forgets a cached device range: the driver calls it when its answer no longer holds, and
/// programs that free device memory they handed to HDF5 may call it (array-io does).
pub fn forget_device_range(base: CUdeviceptr) {
    // (A forked child never reads the cache, nor waits on its lock: see `lookup`.)
    if cuda::forked_from().is_some() {
        return;
    }
    if let Ok(mut ranges) = DEVICE_RANGES.write() {
        ranges.retain(|r| r.base != base);
    }
}

/// Whether CUDA works in this process, once decided (see `cuda_works`).
static CUDA_WORKS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// Whether CUDA works in this process, decided once (`cuda::cuda` hands out a fresh copy of its
/// error on every failed call, too slow for a question asked per piece).
pub fn cuda_works() -> bool {
    *CUDA_WORKS.get_or_init(|| cuda::cuda().is_ok())
}

/// Whether the memory at `ptr` is host memory by what is already known, without asking CUDA,
/// loading it, or logging: CUDA was found not to work here, or `ptr` lies in the calling thread's
/// stack or the brk heap (`known_host`). False means "ask `lookup`". The driver's per-call fast
/// path for small host transfers rests on this.
pub fn certainly_host(ptr: usize) -> bool {
    CUDA_WORKS.get() == Some(&false) || crate::known_host::certainly_host(ptr)
}

/// Asks the CUDA driver, and remembers device ranges. A failed query is an error naming the
/// buffer and CUDA's answer. In a forked child, where CUDA cannot be asked, memory the host can
/// read is host memory, and anything else is refused with the reason.
pub fn query(ptr: usize) -> Result<PointerKind, String> {
    if let Some(parent) = cuda::forked_from() {
        if host_readable(ptr) {
            return Ok(PointerKind::Host);
        }
        return Err(format!(
            "the buffer at {ptr:#x} is not host memory, and this process ({}) is a fork of \
             process {parent}, which initialised CUDA: CUDA and cuFile state is undefined in a \
             forked child, so device memory cannot be used here (host buffers still work)",
            crate::process::id()
        ));
    }
    match cuda::query_pointer(ptr) {
        Ok(PointerKind::Device(range)) => {
            remember(range);
            Ok(PointerKind::Device(range))
        }
        Ok(PointerKind::Host) => Ok(PointerKind::Host),
        Err(err) => Err(format!(
            "cannot tell whether the buffer at {ptr:#x} is host or device memory: {err}"
        )),
    }
}

/// Whether the host can read the byte at `ptr`, asked of the kernel (`process_vm_readv` on this
/// process fails with EFAULT for an unmapped or `PROT_NONE` address, which is what device
/// memory's address range is to the host) instead of by touching it, which would crash.
fn host_readable(ptr: usize) -> bool {
    let mut byte = 0u8;
    let local = libc::iovec {
        iov_base: (&mut byte as *mut u8).cast(),
        iov_len: 1,
    };
    let remote = libc::iovec {
        iov_base: ptr as *mut libc::c_void,
        iov_len: 1,
    };
    // SAFETY: reads one byte of this process's memory into `byte` through the kernel, which
    // checks the remote address; nothing is dereferenced here.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    n == 1
}

/// What the memory at `ptr` is, and whether the answer came from the cache. The calling thread's
/// stack and the brk heap are host memory without a question (`known_host`).
pub fn lookup(ptr: usize) -> Result<(PointerKind, bool), String> {
    if !cuda_works() || crate::known_host::certainly_host(ptr) {
        return Ok((PointerKind::Host, false));
    }
    // A forked child asks the kernel (`query`), never the cache: its ranges are the parent's,
    // and a fork may have copied its lock held by a thread the child does not have.
    if cuda::forked_from().is_some() {
        return Ok((query(ptr)?, false));
    }
    match cached(ptr as u64) {
        Some(kind) => Ok((kind, true)),
        None => Ok((query(ptr)?, false)),
    }
}
