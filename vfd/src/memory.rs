//! Host or device? Classification of the buffers HDF5 hands the driver.
//!
//! Metadata buffers are always host memory (HDF5 allocates them). For raw data, the runtime's
//! cache of device ranges answers, asking the CUDA driver (`cuPointerGetAttributes`) for
//! addresses it has not seen (`h5gds_runtime::device_ranges`).

use crate::abi::{H5FD_mem_t, H5FD_MEM_DEFAULT, H5FD_MEM_DRAW};
use crate::cuda::{DeviceRange, PointerKind};
use crate::error::{Error, Result};
use crate::io::BufPtr;
use h5gds_runtime::device_ranges::{self, forget_device_range};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Counts driver callbacks other than `ctl` and the small host reads and writes of
/// `OpenFile::one_call`; see `classify_copy_base`.
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
/// So the answer for a base pointer is reused until another driver callback runs (any open,
/// close, query, or read or write other than a small host one marks `callback_boundary`). A
/// base answered "host" cannot turn into device memory meanwhile: with CUDA's unified
/// addressing, device and managed allocations come from address ranges CUDA reserves, never from
/// freed host memory; a stale "device" answer is harmless, as the copy then goes through CUDA,
/// which handles host pointers too.
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

/// Whether `ptr` is host memory for a transfer of memory type `mem_type` by what is already
/// known (metadata, CUDA not working, the caller's stack or the brk heap): no CUDA query, no
/// logging. False means "ask `classify`".
pub(crate) fn certainly_host(ptr: BufPtr, mem_type: H5FD_mem_t) -> bool {
    !may_be_device(mem_type) || device_ranges::certainly_host(ptr.addr())
}

/// What `ptr` is, for a transfer of memory type `mem_type`.
pub(crate) fn classify(ptr: BufPtr, mem_type: H5FD_mem_t) -> Result<PointerKind> {
    lookup(ptr, mem_type).map(|(kind, _)| kind)
}

/// What `ptr` is, and whether the answer came from the cache.
fn lookup(ptr: BufPtr, mem_type: H5FD_mem_t) -> Result<(PointerKind, bool)> {
    if !may_be_device(mem_type) {
        return Ok((PointerKind::Host, false));
    }
    device_ranges::lookup(ptr.addr()).map_err(Error::Device)
}

/// Runs `host` for the `len` bytes at `ptr`, or, for device memory, `device(range, offset, n)`
/// for each part of the request (`n` bytes from `offset`) that lies in one device range: a buffer
/// of VMM or pool memory may span several mappings, and each goes to cuFile and CUDA separately.
/// If a device transfer fails on a range that came from the cache, the range may have been freed
/// and its addresses reused: the driver is asked afresh, and if its answer differs the part runs
/// once more on the new answer. Otherwise the error stands.
pub(crate) fn dispatch(
    ptr: BufPtr,
    len: usize,
    mem_type: H5FD_mem_t,
    host: impl Fn() -> Result<()>,
    device: impl Fn(DeviceRange, usize, usize) -> Result<()>,
) -> Result<()> {
    let (kind, mut from_cache) = lookup(ptr, mem_type)?;
    let PointerKind::Device(mut range) = kind else {
        return host();
    };
    let mut done = 0;
    loop {
        let at = ptr.addr() + done;
        // Every range holds the address it was found for (`cuda::query_pointer`, `cached`).
        let n = (len - done).min(range.end().saturating_sub(at as u64) as usize);
        if n == 0 && len > 0 {
            return Err(Error::Device(format!(
                "device range {:#x}+{} does not hold {at:#x}",
                range.base, range.size
            )));
        }
        let result = device(range, done, n);
        if let Err(err) = result {
            if !from_cache {
                return Err(err);
            }
            forget_device_range(range.base);
            match device_ranges::query(at) {
                Err(_) => return Err(err),
                Ok(fresh) if fresh == PointerKind::Device(range) => return Err(err),
                Ok(PointerKind::Host) if done == 0 => {
                    tracing::debug!("memory at {ptr:?} is no longer device memory");
                    return host();
                }
                Ok(PointerKind::Host) => return Err(split_buffer(ptr, done, len)),
                Ok(PointerKind::Device(fresh)) => {
                    tracing::debug!(
                        "device memory at {at:#x} changed since it was cached; transferring again"
                    );
                    (range, from_cache) = (fresh, false);
                    continue;
                }
            }
        }
        done += n;
        if done >= len {
            return Ok(());
        }
        match lookup(ptr.add(done), mem_type)? {
            (PointerKind::Device(next), cached) => (range, from_cache) = (next, cached),
            (PointerKind::Host, _) => return Err(split_buffer(ptr, done, len)),
        }
    }
}

/// A buffer that starts in device memory and runs on into memory that is not.
fn split_buffer(ptr: BufPtr, done: usize, len: usize) -> Error {
    Error::Device(format!(
        "the buffer at {ptr:?} is device memory for its first {done} bytes but not for the rest \
         of its {len}"
    ))
}
