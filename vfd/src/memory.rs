//! Host or device? Classification of the buffers HDF5 hands the driver.
//!
//! Metadata buffers are always host memory (HDF5 allocates them). For raw data, the CUDA driver
//! is asked (`cuPointerGetAttributes`) unless the pointer falls in a device allocation seen
//! before: those ranges are cached, so repeated raw-data calls on one device buffer pay one
//! query. Without working CUDA every buffer is host memory and no query is made. A query that
//! fails (a sticky CUDA error) is an error, never a guess: taking such a buffer for host memory
//! turned a device pointer into a misleading `EFAULT` from `pread`. In a process forked after
//! CUDA was initialised CUDA cannot be asked: a buffer the host can read is host memory, a known
//! device range or an address the host cannot read is refused with the reason.

use crate::abi::{H5FD_mem_t, H5FD_MEM_DEFAULT, H5FD_MEM_DRAW};
use crate::cuda::{self, CUdeviceptr, PointerKind};
use crate::error::{Error, Result};
use crate::io::BufPtr;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::RwLock;

/// Device allocations seen so far, as (base, size).
static DEVICE_RANGES: RwLock<Vec<(u64, usize)>> = RwLock::new(Vec::new());

/// At most this many ranges are remembered; past that the oldest half is forgotten.
const MAX_CACHED: usize = 1024;

fn cached(ptr: u64) -> Option<PointerKind> {
    let ranges = DEVICE_RANGES.read().ok()?;
    ranges
        .iter()
        .find(|(base, size)| ptr >= *base && ptr < base + *size as u64)
        .map(|&(base, size)| PointerKind::Device { base, size })
}

fn remember(base: CUdeviceptr, size: usize) {
    if let Ok(mut ranges) = DEVICE_RANGES.write() {
        if ranges.len() >= MAX_CACHED {
            ranges.drain(..MAX_CACHED / 2);
        }
        ranges.push((base, size));
    }
}

/// Forgets a cached device range: the driver calls it when its answer no longer holds, and
/// programs that free device memory they handed to HDF5 may call it (array-io does).
pub fn forget_device_range(base: CUdeviceptr) {
    if let Ok(mut ranges) = DEVICE_RANGES.write() {
        ranges.retain(|(b, _)| *b != base);
    }
}

/// Whether CUDA works in this process, decided once (`cuda::cuda` hands out a fresh copy of its
/// error on every failed call, too slow for a question asked per piece).
pub(crate) fn cuda_works() -> bool {
    static WORKS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WORKS.get_or_init(|| cuda::cuda().is_ok())
}

/// Counts driver callbacks other than `ctl`; see `classify_copy_base`.
static CALLBACKS: AtomicU64 = AtomicU64::new(0);

/// Marks a driver callback other than `ctl(MEM_COPY)`: memoised MEM_COPY answers end here.
pub(crate) fn callback_boundary() {
    CALLBACKS.fetch_add(1, Relaxed);
}

thread_local! {
    /// This thread's last MEM_COPY answer per side (destination, source): (callback count, base,
    /// kind).
    static COPY_BASES: Cell<[Option<(u64, usize, PointerKind)>; 2]> = const { Cell::new([None, None]) };
}

/// `classify` for the base pointers of HDF5's `ctl(MEM_COPY)` requests (`side` 0: destination,
/// 1: source). HDF5 copies between a cached chunk and the caller's buffer one element run at a
/// time, every request naming the same two base pointers with growing offsets: asking CUDA twice
/// per element made `chunked[::3]` 4.4x slower than sec2 (measured with the emulator as libcuda).
/// So the answer for a base pointer is reused until another driver callback runs (any read,
/// write, open, close or query marks `callback_boundary`). A base answered "host" cannot turn into
/// device memory meanwhile: with CUDA's unified addressing, device and managed allocations come
/// from address ranges CUDA reserves, never from freed host memory; a stale "device" answer is
/// harmless, as the copy then goes through CUDA, which handles host pointers too.
pub(crate) fn classify_copy_base(side: usize, base: BufPtr) -> Result<PointerKind> {
    if let Some(kind) = memoised_copy_base(side, base) {
        return Ok(kind);
    }
    let kind = classify(base, H5FD_MEM_DRAW)?;
    COPY_BASES.with(|memo| {
        let mut entries = memo.get();
        entries[side] = Some((CALLBACKS.load(Relaxed), base.addr(), kind));
        memo.set(entries);
    });
    Ok(kind)
}

/// The memoised answer of `classify_copy_base`, if it still holds; asks nobody and logs nothing,
/// so the per-element MEM_COPY between two known host buffers needs no driver logger (whose
/// set-up was half the time of each such copy, measured).
pub(crate) fn memoised_copy_base(side: usize, base: BufPtr) -> Option<PointerKind> {
    let now = CALLBACKS.load(Relaxed);
    COPY_BASES.with(|memo| match memo.get()[side] {
        Some((at, b, kind)) if at == now && b == base.addr() => Some(kind),
        _ => None,
    })
}

/// Whether HDF5 may hand this memory type a device buffer (raw data only).
fn may_be_device(mem_type: H5FD_mem_t) -> bool {
    mem_type == H5FD_MEM_DRAW || mem_type == H5FD_MEM_DEFAULT
}

/// What `ptr` is, for a transfer of memory type `mem_type`.
pub(crate) fn classify(ptr: BufPtr, mem_type: H5FD_mem_t) -> Result<PointerKind> {
    lookup(ptr, mem_type).map(|(kind, _)| kind)
}

/// What `ptr` is, and whether the answer came from the cache.
fn lookup(ptr: BufPtr, mem_type: H5FD_mem_t) -> Result<(PointerKind, bool)> {
    if !may_be_device(mem_type) || !cuda_works() {
        return Ok((PointerKind::Host, false));
    }
    match cached(ptr.addr() as u64) {
        Some(kind) => Ok((kind, true)),
        None => Ok((query(ptr.addr())?, false)),
    }
}

/// Runs `host` or `device` (with the allocation base) for the memory at `ptr`. If a device
/// transfer fails on a range that came from the cache, the range may have been freed and its
/// addresses reused: the driver is asked afresh, and if its answer differs the transfer runs
/// once more on the new answer. Otherwise the error stands.
pub(crate) fn dispatch<T>(
    ptr: BufPtr,
    mem_type: H5FD_mem_t,
    host: impl Fn() -> Result<T>,
    device: impl Fn(CUdeviceptr) -> Result<T>,
) -> Result<T> {
    let (kind, from_cache) = lookup(ptr, mem_type)?;
    let PointerKind::Device { base, .. } = kind else {
        return host();
    };
    let result = device(base);
    if result.is_ok() || !from_cache {
        return result;
    }
    forget_device_range(base);
    let fresh = query(ptr.addr())?;
    if fresh == kind {
        return result;
    }
    tracing::debug!("device memory at {ptr:?} changed since it was cached; transferring again");
    match fresh {
        PointerKind::Host => host(),
        PointerKind::Device { base, .. } => device(base),
    }
}

/// Asks the CUDA driver, and remembers device ranges. A failed query is an error naming the
/// buffer and CUDA's answer. In a forked child, where CUDA cannot be asked, memory the host can
/// read is host memory, and anything else is refused with the reason.
fn query(ptr: usize) -> Result<PointerKind> {
    if let Some(parent) = cuda::forked_from() {
        if host_readable(ptr) {
            return Ok(PointerKind::Host);
        }
        return Err(Error::Device(format!(
            "the buffer at {ptr:#x} is not host memory, and this process ({}) is a fork of \
             process {parent}, which initialised CUDA: CUDA and cuFile state is undefined in a \
             forked child, so device memory cannot be used here (host buffers still work)",
            std::process::id()
        )));
    }
    match cuda::query_pointer(ptr) {
        Ok(PointerKind::Device { base, size }) => {
            remember(base, size);
            Ok(PointerKind::Device { base, size })
        }
        Ok(PointerKind::Host) => Ok(PointerKind::Host),
        Err(err) => Err(Error::Device(format!(
            "cannot tell whether the buffer at {ptr:#x} is host or device memory: {err}"
        ))),
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
