//! Copies and memsets of the emulated CUDA driver, between checked ends: done at once, or with
//! `H5GDS_EMU_DEFER_ASYNC=1` queued on their stream (what the real driver may leave running
//! when a call returns) and run when something synchronizes with that stream (`run_deferred`).
//! Device ranges must lie inside one allocation (interior pointers allowed): anything else is
//! CUDA_ERROR_INVALID_VALUE and counts as a bounds violation, as does passing device memory
//! where host memory is expected. Host pointers are taken on trust (a bad one crashes, as it
//! may with the real driver). The allocators (`cuda_memory`, `cuda_vmm`) use this module; it
//! uses neither.

use crate::consts::*;
use crate::context;
use crate::counters::{self, bump};
use crate::memory::{self, DeviceBlock};
use crate::switches;
use std::sync::Arc;

/// One end of a copy.
pub(crate) enum End {
    /// Device memory: the allocation and the device address.
    Device(Arc<DeviceBlock>, usize),
    /// Host memory (pinned or pageable) at this address.
    Host(usize),
}

impl End {
    fn ptr(&self) -> *mut u8 {
        match self {
            End::Device(block, addr) => block.shadow_of(*addr),
            End::Host(addr) => *addr as *mut u8,
        }
    }

    fn is_device(&self) -> bool {
        matches!(self, End::Device(..))
    }

    /// Counts device memory of another context than the current one (`context::note_use`).
    fn note_owner(&self) {
        if let End::Device(block, addr) = self {
            context::note_use(block.context, block.owner_device(*addr));
        }
    }
}

pub(crate) fn violation() -> CUresult {
    bump(&counters::BOUNDS_VIOLATIONS);
    CUDA_ERROR_INVALID_VALUE
}

/// `[addr, addr + len)` as device memory, inside one allocation.
pub(crate) fn device_end(addr: u64, len: usize) -> Result<End, CUresult> {
    let addr = usize::try_from(addr).map_err(|_| violation())?;
    match memory::device_range(addr, len) {
        Some(block) => Ok(End::Device(block, addr)),
        None => Err(violation()),
    }
}

/// `[addr, addr + len)` as host memory: not null, not touching device memory.
pub(crate) fn host_end(addr: usize, len: usize) -> Result<End, CUresult> {
    if addr == 0 || addr.checked_add(len).is_none() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if memory::overlaps_device(addr, len) {
        return Err(violation());
    }
    Ok(End::Host(addr))
}

/// Either kind, as unified addressing classifies it: device if `addr` is in an allocation.
pub(crate) fn unified_end(addr: u64, len: usize) -> Result<End, CUresult> {
    let start = usize::try_from(addr).map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
    match memory::find(start) {
        memory::Region::Device(_) => device_end(addr, len),
        _ => host_end(start, len),
    }
}

/// Checks init and context, runs the (nonzero-length) copy `dst <- src`, counts it.
pub(crate) fn copy(
    len: usize,
    dst: impl FnOnce() -> Result<End, CUresult>,
    src: impl FnOnce() -> Result<End, CUresult>,
) -> Result<(), CUresult> {
    context::require_init()?;
    context::require_current()?;
    if len == 0 {
        return Ok(());
    }
    let dst = dst()?;
    let src = src()?;
    dst.note_owner();
    src.note_owner();
    let switches = switches::get();
    if counters::is_nth_call(&counters::COPY_CALLS, switches.fail_copy) {
        return Err(switches.fail_copy_error);
    }
    if switches.defer_async {
        return legacy_copy(dst, src, len);
    }
    // SAFETY: device ends were checked to lie inside live allocations, whose shadow mappings
    // the Arcs keep mapped; host ends are the caller's buffers of at least len bytes, as the
    // API requires. ptr::copy allows overlap.
    unsafe { perform(&dst, &src, len) };
    Ok(())
}

/// Whether `end` is pinned host memory.
pub(crate) fn is_pinned(end: &End) -> bool {
    matches!(end, End::Host(addr) if matches!(memory::find(*addr), memory::Region::PinnedHost(_)))
}

/// A synchronous copy (`cuMemcpy`, `cuMemcpyHtoD`, ...), which runs on the legacy default
/// stream, with the timing NVIDIA documents for it (CUDA Driver API, "API synchronization
/// behavior", Memcpy, synchronous): "For transfers from pageable host memory to device memory,
/// a stream sync is performed before the copy is initiated. The function will return once the
/// pageable buffer has been copied to the staging memory for DMA transfer to device memory, but
/// the DMA to final destination may not have completed" (queued, with the bytes taken now);
/// "For transfers from device memory to device memory, no host-side synchronization is
/// performed" (queued); pinned host to device is "synchronous with respect to the host", and
/// device to host "returns only once the copy has completed" (both run now, after the stream's
/// earlier work).
pub(crate) fn legacy_copy(dst: End, src: End, len: usize) -> Result<(), CUresult> {
    match (src.is_device(), dst.is_device()) {
        (true, true) => queue(LEGACY, Op::Copy { dst, src }, len),
        (false, true) if !is_pinned(&src) => {
            run_deferred(Some(LEGACY));
            // SAFETY: a host end holds len bytes (the API's contract, checked to touch no
            // device memory).
            let bytes = unsafe { std::slice::from_raw_parts(src.ptr(), len) }.to_vec();
            queue(LEGACY, Op::Staged { dst, bytes }, len)
        }
        _ => {
            run_deferred(Some(LEGACY));
            // SAFETY: as in `copy`.
            unsafe { perform(&dst, &src, len) };
        }
    }
    Ok(())
}

/// Checks an async call's stream, then copies, or (`H5GDS_EMU_DEFER_ASYNC=1`, a non-default
/// stream, pinned host memory: what a GPU runs asynchronously) queues the copy until its stream
/// is synchronized. Bounds and injected failures are decided when the call is made.
pub(crate) fn copy_async(
    stream: CUstream,
    len: usize,
    dst: impl FnOnce() -> Result<End, CUresult>,
    src: impl FnOnce() -> Result<End, CUresult>,
) -> Result<(), CUresult> {
    context::require_init()?;
    let (current, _) = context::require_current()?;
    context::check_stream(stream as usize)?;
    context::note_stream_use(stream as usize);
    if !switches::get().defer_async || stream.is_null() || len == 0 {
        return copy(len, dst, src);
    }
    let (dst, src) = (dst()?, src()?);
    dst.note_owner();
    src.note_owner();
    let host = if dst.is_device() { &src } else { &dst };
    // Pinned memory is pinned for the context that allocated it, and for every context only if
    // allocated CU_MEMHOSTALLOC_PORTABLE ("considered as pinned memory by all CUDA contexts, not
    // just the one that performed the allocation", CUDA Driver API, cuMemHostAlloc): elsewhere
    // it is pageable memory, copied before the call returns, and counted.
    let pinned = match host {
        End::Host(addr) => match memory::find(*addr) {
            memory::Region::PinnedHost(block) if block.portable || block.context == current => true,
            memory::Region::PinnedHost(block) => {
                context::note_use(block.context, block.device);
                false
            }
            _ => false,
        },
        End::Device(..) => false,
    };
    let switches = switches::get();
    if counters::is_nth_call(&counters::COPY_CALLS, switches.fail_copy) {
        return Err(switches.fail_copy_error);
    }
    // Device to device is asynchronous with respect to the host ("For transfers from device
    // memory to device memory, no host-side synchronization is performed", CUDA Driver API,
    // "API synchronization behavior"): queued like a pinned copy.
    let both_device = dst.is_device() && src.is_device();
    if !pinned && !both_device {
        // Pageable memory: "If pageable memory must first be staged to pinned memory, the
        // driver may synchronize with the stream and stage the copy into pinned memory" (CUDA
        // Driver API, "API synchronization behavior", Memcpy, asynchronous): the stream's
        // earlier work runs, then the copy, before the call returns.
        run_deferred(Some(stream as usize));
        // SAFETY: as in `copy`: ends checked above.
        unsafe { perform(&dst, &src, len) };
        return Ok(());
    }
    queue(stream as usize, Op::Copy { dst, src }, len);
    Ok(())
}

/// Runs `run(data)` where work on `stream` runs: at once, or (`H5GDS_EMU_DEFER_ASYNC=1`)
/// queued on the stream, the null stream's work on the legacy stream's queue, as a kernel
/// launched there would run: after the stream's earlier work, before what synchronizes with it.
pub(crate) fn on_stream(stream: CUstream, run: DeviceWork, data: usize) -> Result<(), CUresult> {
    context::require_init()?;
    context::require_current()?;
    context::check_stream(stream as usize)?;
    context::note_stream_use(stream as usize);
    if switches::get().defer_async {
        queue(stream as usize, Op::Work { run, data }, 0);
    } else {
        // SAFETY: the caller's contract for `data`.
        unsafe { run(data as *mut std::ffi::c_void) };
    }
    Ok(())
}

/// Work a companion library runs "on the device" (`h5gds_emu_enqueue`).
pub(crate) type DeviceWork = unsafe extern "C" fn(*mut std::ffi::c_void);

/// Copies `len` bytes between two checked ends and counts the direction.
///
/// # Safety
/// As in `copy`: device ends lie in live allocations; host ends hold `len` bytes.
pub(crate) unsafe fn perform(dst: &End, src: &End, len: usize) {
    // SAFETY: the caller's contract; ptr::copy allows overlap.
    unsafe { std::ptr::copy(src.ptr(), dst.ptr(), len) };
    match (src.is_device(), dst.is_device()) {
        (false, true) => bump(&counters::COPIES_HTOD),
        (true, false) => bump(&counters::COPIES_DTOH),
        _ => {}
    }
}

/// The queue key of the legacy default stream (the null stream and CU_STREAM_LEGACY).
pub(crate) const LEGACY: usize = 0;

/// What a queued operation does.
pub(crate) enum Op {
    /// A copy between two checked ends.
    Copy { dst: End, src: End },
    /// A host-to-device copy of bytes taken from pageable memory when the call was made.
    Staged { dst: End, bytes: Vec<u8> },
    /// A memset of device memory.
    Fill { dst: End, value: u8 },
    /// A companion library's device work (`on_stream`): `run(data)`.
    Work { run: DeviceWork, data: usize },
}

/// An operation queued on a stream (`H5GDS_EMU_DEFER_ASYNC`).
struct Deferred {
    stream: usize,
    op: Op,
    len: usize,
}

/// The queue a stream handle's work goes to.
fn queue_key(stream: usize) -> usize {
    if stream == CU_STREAM_LEGACY {
        LEGACY
    } else {
        stream
    }
}

pub(crate) fn queue(stream: usize, op: Op, len: usize) {
    deferred().push(Deferred {
        stream: queue_key(stream),
        op,
        len,
    });
}

/// Runs one queued operation.
///
/// # Safety
/// As `perform`.
unsafe fn run_op(op: &Op, len: usize) {
    // SAFETY: the caller's contract.
    unsafe {
        match op {
            Op::Copy { dst, src } => perform(dst, src, len),
            Op::Staged { dst, bytes } => {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst.ptr(), len);
                bump(&counters::COPIES_HTOD);
            }
            Op::Fill { dst, value } => std::ptr::write_bytes(dst.ptr(), *value, len),
            Op::Work { run, data } => run(*data as *mut std::ffi::c_void),
        }
    }
}

// SAFETY: the ends are addresses checked when queued; the Arcs keep device shadows mapped.
unsafe impl Send for Deferred {}

fn deferred() -> std::sync::MutexGuard<'static, Vec<Deferred>> {
    static QUEUE: std::sync::Mutex<Vec<Deferred>> = std::sync::Mutex::new(Vec::new());
    QUEUE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs the operations queued on `stream` (every stream for `None`), in the order they were
/// made: called where CUDA would have finished them (stream or context synchronization, stream
/// destruction, a synchronous copy on the legacy stream, and before memory is freed). cuFile
/// transfers are not stream operations and run nothing.
pub fn run_deferred(stream: Option<usize>) {
    let stream = stream.map(queue_key);
    let ready: Vec<Deferred> = {
        let mut queue = deferred();
        let (ready, rest): (Vec<_>, Vec<_>) = queue
            .drain(..)
            .partition(|d| stream.is_none_or(|s| s == d.stream));
        *queue = rest;
        ready
    };
    for d in ready {
        // SAFETY: checked when queued; freeing memory runs the queue first.
        unsafe { run_op(&d.op, d.len) };
    }
}

/// Checks init and context, then sets `n` bytes of device memory at `dst` to `value`, or with
/// `H5GDS_EMU_DEFER_ASYNC=1` queues that on `stream`: "The synchronous memset functions are
/// asynchronous with respect to the host except when the target is pinned host memory or a
/// Unified Memory region ... The Async versions are always asynchronous with respect to the
/// host" (CUDA Driver API, "API synchronization behavior", Memset); the target here is always
/// device memory.
pub(crate) fn memset(dst: CUdeviceptr, value: u8, n: usize, stream: usize) -> Result<(), CUresult> {
    context::require_init()?;
    context::require_current()?;
    if n == 0 {
        return Ok(());
    }
    let end = device_end(dst, n)?;
    end.note_owner();
    if switches::get().defer_async {
        queue(stream, Op::Fill { dst: end, value }, n);
        return Ok(());
    }
    // SAFETY: the range lies inside a live allocation whose shadow mapping the Arc in `end`
    // keeps mapped.
    unsafe { std::ptr::write_bytes(end.ptr(), value, n) };
    Ok(())
}
