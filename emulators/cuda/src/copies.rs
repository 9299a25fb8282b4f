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
use crate::timeline;
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

/// What a copy moves: `depth` slices of `height` rows of `width` bytes; row `y` of slice `z`
/// starts `(z * rows + y) * pitch` bytes after each end's address, with that end's pitch and
/// rows (CUDA's 2-D and 3-D copies). A plain copy is one row.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shape {
    pub width: usize,
    pub height: usize,
    pub depth: usize,
    pub src_pitch: usize,
    pub dst_pitch: usize,
    pub src_rows: usize,
    pub dst_rows: usize,
}

impl Shape {
    /// `len` contiguous bytes.
    pub fn line(len: usize) -> Shape {
        Shape {
            width: len,
            height: 1,
            depth: 1,
            src_pitch: len,
            dst_pitch: len,
            src_rows: 1,
            dst_rows: 1,
        }
    }

    /// The bytes the copy moves.
    pub fn bytes(&self) -> usize {
        self.width * self.height * self.depth
    }

    /// Whether the copy moves nothing.
    pub fn is_empty(&self) -> bool {
        self.width == 0 || self.height == 0 || self.depth == 0
    }

    /// The bytes from an end's first byte to one past its last, for that end's pitch and rows.
    pub fn extent(&self, pitch: usize, rows: usize) -> Option<usize> {
        if self.is_empty() {
            return Some(0);
        }
        let slices = (self.depth - 1).checked_mul(rows)?.checked_mul(pitch)?;
        let lines = (self.height - 1).checked_mul(pitch)?;
        slices.checked_add(lines)?.checked_add(self.width)
    }

    /// Each row's (source offset, destination offset).
    fn rows(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        (0..self.depth).flat_map(move |z| {
            (0..self.height).map(move |y| {
                (
                    (z * self.src_rows + y) * self.src_pitch,
                    (z * self.dst_rows + y) * self.dst_pitch,
                )
            })
        })
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
    copy_shaped(Shape::line(len), dst, src)
}

/// [`copy`] of any shape.
pub(crate) fn copy_shaped(
    shape: Shape,
    dst: impl FnOnce() -> Result<End, CUresult>,
    src: impl FnOnce() -> Result<End, CUresult>,
) -> Result<(), CUresult> {
    copy_now(None, shape, dst, src)
}

/// [`copy_shaped`], timed on the link's timeline as a copy on stream queue key `stream` (`None`:
/// a synchronous copy).
fn copy_now(
    stream: Option<usize>,
    shape: Shape,
    dst: impl FnOnce() -> Result<End, CUresult>,
    src: impl FnOnce() -> Result<End, CUresult>,
) -> Result<(), CUresult> {
    let called = std::time::Instant::now();
    context::require_init()?;
    let (_, device) = context::require_current()?;
    if shape.is_empty() {
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
    let way = timeline::Way::of(src.is_device(), dst.is_device());
    // Two lookups in the allocation map, for the link's model only.
    let pinned = timeline::modelled() && (is_pinned(&src) || is_pinned(&dst));
    if switches.defer_async {
        legacy_copy(dst, src, shape)?;
    } else {
        // SAFETY: device ends were checked to lie inside live allocations, whose shadow
        // mappings the Arcs keep mapped; host ends are the caller's buffers of the shape's
        // extent, as the API requires. ptr::copy allows overlap.
        unsafe { perform(&dst, &src, &shape) };
    }
    let (key, synchronous) = (stream.unwrap_or(LEGACY), stream.is_none());
    timeline::copy(key, synchronous, called, device, way, shape.bytes(), pinned);
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
pub(crate) fn legacy_copy(dst: End, src: End, shape: Shape) -> Result<(), CUresult> {
    match (src.is_device(), dst.is_device()) {
        (true, true) => queue(LEGACY, Op::Copy { dst, src, shape }),
        (false, true) if !is_pinned(&src) => {
            run_deferred(Some(LEGACY));
            let len = shape.extent(shape.src_pitch, shape.src_rows).unwrap_or(0);
            // SAFETY: a host end holds the shape's extent (the API's contract, checked to touch
            // no device memory).
            let bytes = unsafe { std::slice::from_raw_parts(src.ptr(), len) }.to_vec();
            queue(LEGACY, Op::Staged { dst, bytes, shape })
        }
        _ => {
            run_deferred(Some(LEGACY));
            // SAFETY: as in `copy`.
            unsafe { perform(&dst, &src, &shape) };
        }
    }
    Ok(())
}

/// One end of a 2-D or 3-D copy as `CUDA_MEMCPY2D`/`CUDA_MEMCPY3D` describe it.
pub(crate) struct Side {
    pub memory_type: std::ffi::c_uint,
    pub host: usize,
    pub device: CUdeviceptr,
    /// The CUDA array, and the 3-D descriptor's LOD and reserved pointer (all must be 0 here).
    pub array: usize,
    pub lod: usize,
    pub reserved: usize,
    pub x: usize,
    pub y: usize,
    pub z: usize,
    pub pitch: usize,
    /// Rows per slice of the whole array (`srcHeight`; a 2-D copy's own height).
    pub rows: usize,
}

impl Side {
    /// The checked end holding the copy's bytes of `shape` at this side.
    fn end(&self, shape: &Shape) -> Result<End, CUresult> {
        let lines = shape.height > 1 || shape.depth > 1;
        if self.pitch > MAX_PITCH || (lines && self.x.saturating_add(shape.width) > self.pitch) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        if shape.depth > 1 && self.y.saturating_add(shape.height) > self.rows {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let start = (|| {
            let rows = self.z.checked_mul(self.rows)?.checked_add(self.y)?;
            rows.checked_mul(self.pitch)?.checked_add(self.x)
        })()
        .ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let extent = shape
            .extent(self.pitch, self.rows)
            .ok_or(CUDA_ERROR_INVALID_VALUE)?;
        match self.memory_type {
            CU_MEMORYTYPE_HOST => host_end(
                self.host
                    .checked_add(start)
                    .ok_or(CUDA_ERROR_INVALID_VALUE)?,
                extent,
            ),
            CU_MEMORYTYPE_DEVICE => device_end(self.device.saturating_add(start as u64), extent),
            CU_MEMORYTYPE_UNIFIED => unified_end(self.device.saturating_add(start as u64), extent),
            // No CUDA array is ever created here, so none can be named.
            _ => Err(CUDA_ERROR_INVALID_VALUE),
        }
    }

    fn is_device(&self) -> bool {
        self.memory_type == CU_MEMORYTYPE_DEVICE
            || (self.memory_type == CU_MEMORYTYPE_UNIFIED
                && matches!(
                    memory::find(self.device as usize),
                    memory::Region::Device(_)
                ))
    }
}

/// `cuMemcpy2DAsync`/`cuMemcpy3DAsync` of linear memory: `depth` slices of `height` rows of
/// `width` bytes from `src` to `dst` on `stream`, as [`copy_async`] runs a plain copy. The
/// arguments are refused with CUDA_ERROR_INVALID_VALUE as the CUDA Driver API documents
/// (cuMemcpy2D, cuMemcpy3D): a row wider than its pitch, a pitch above
/// `CU_DEVICE_ATTRIBUTE_MAX_PITCH`, slices whose rows overrun the array's height, nonzero LOD or
/// reserved fields, a CUDA array; with `H5GDS_EMU_REFUSE_STRIDED_DTOD=1` any copy of several
/// rows within device memory, which CUDA "may" refuse for pitches not from cuMemAllocPitch.
pub(crate) fn strided_copy(
    stream: CUstream,
    (width, height, depth): (usize, usize, usize),
    src: Side,
    dst: Side,
) -> Result<(), CUresult> {
    context::require_init()?;
    for side in [&src, &dst] {
        if side.array != 0 || side.lod != 0 || side.reserved != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        if side.memory_type == CU_MEMORYTYPE_ARRAY {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
    }
    let shape = Shape {
        width,
        height,
        depth,
        src_pitch: src.pitch,
        dst_pitch: dst.pitch,
        src_rows: src.rows,
        dst_rows: dst.rows,
    };
    if switches::get().refuse_strided_dtod
        && (height > 1 || depth > 1)
        && src.is_device()
        && dst.is_device()
    {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    copy_async_shaped(stream, shape, || dst.end(&shape), || src.end(&shape))
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
    copy_async_shaped(stream, Shape::line(len), dst, src)
}

/// [`copy_async`] of any shape.
pub(crate) fn copy_async_shaped(
    stream: CUstream,
    shape: Shape,
    dst: impl FnOnce() -> Result<End, CUresult>,
    src: impl FnOnce() -> Result<End, CUresult>,
) -> Result<(), CUresult> {
    let called = std::time::Instant::now();
    context::require_init()?;
    let (current, device) = context::require_current()?;
    context::check_stream(stream as usize)?;
    context::note_stream_use(stream as usize);
    let key = queue_key(stream as usize);
    if !switches::get().defer_async || stream.is_null() || shape.is_empty() {
        return copy_now(Some(key), shape, dst, src);
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
    let (way, bytes) = (
        timeline::Way::of(src.is_device(), dst.is_device()),
        shape.bytes(),
    );
    if !pinned && !both_device {
        // Pageable memory: "If pageable memory must first be staged to pinned memory, the
        // driver may synchronize with the stream and stage the copy into pinned memory" (CUDA
        // Driver API, "API synchronization behavior", Memcpy, asynchronous): the stream's
        // earlier work runs, then the copy, before the call returns.
        run_deferred(Some(stream as usize));
        // SAFETY: as in `copy`: ends checked above.
        unsafe { perform(&dst, &src, &shape) };
    } else {
        queue(stream as usize, Op::Copy { dst, src, shape });
    }
    timeline::copy(key, false, called, device, way, bytes, pinned);
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
        queue(stream as usize, Op::Work { run, data });
    } else {
        // SAFETY: the caller's contract for `data`.
        unsafe { run(data as *mut std::ffi::c_void) };
    }
    Ok(())
}

/// Work a companion library runs "on the device" (`h5gds_emu_enqueue`).
pub(crate) type DeviceWork = unsafe extern "C" fn(*mut std::ffi::c_void);

/// Copies `shape` between two checked ends and counts the direction.
///
/// # Safety
/// As in `copy`: device ends lie in live allocations; host ends hold the shape's extent.
pub(crate) unsafe fn perform(dst: &End, src: &End, shape: &Shape) {
    // SAFETY: the caller's contract.
    unsafe { copy_rows(dst.ptr(), src.ptr(), shape) };
    match (src.is_device(), dst.is_device()) {
        (false, true) => bump(&counters::COPIES_HTOD),
        (true, false) => bump(&counters::COPIES_DTOH),
        (true, true) => bump(&counters::COPIES_DTOD),
        (false, false) => {}
    }
}

/// Copies each row of `shape` from `src` to `dst`.
///
/// # Safety
/// Both pointers hold the shape's extent at their end; ptr::copy allows overlap.
unsafe fn copy_rows(dst: *mut u8, src: *const u8, shape: &Shape) {
    for (from, to) in shape.rows() {
        // SAFETY: the caller's contract: each row lies inside the extent.
        unsafe { std::ptr::copy(src.add(from), dst.add(to), shape.width) };
    }
}

/// The queue key of the legacy default stream (the null stream and CU_STREAM_LEGACY).
pub(crate) const LEGACY: usize = 0;

/// What a queued operation does.
pub(crate) enum Op {
    /// A copy between two checked ends.
    Copy { dst: End, src: End, shape: Shape },
    /// A host-to-device copy of bytes taken from pageable memory when the call was made.
    Staged {
        dst: End,
        bytes: Vec<u8>,
        shape: Shape,
    },
    /// A memset of `len` bytes of device memory.
    Fill { dst: End, value: u8, len: usize },
    /// A companion library's device work (`on_stream`): `run(data)`.
    Work { run: DeviceWork, data: usize },
}

/// An operation queued on a stream (`H5GDS_EMU_DEFER_ASYNC`).
struct Deferred {
    stream: usize,
    op: Op,
}

/// The queue a stream handle's work goes to.
pub(crate) fn queue_key(stream: usize) -> usize {
    if stream == CU_STREAM_LEGACY {
        LEGACY
    } else {
        stream
    }
}

pub(crate) fn queue(stream: usize, op: Op) {
    deferred().push(Deferred {
        stream: queue_key(stream),
        op,
    });
}

/// Runs one queued operation.
///
/// # Safety
/// As `perform`.
unsafe fn run_op(op: &Op) {
    // SAFETY: the caller's contract.
    unsafe {
        match op {
            Op::Copy { dst, src, shape } => perform(dst, src, shape),
            Op::Staged { dst, bytes, shape } => {
                copy_rows(dst.ptr(), bytes.as_ptr(), shape);
                bump(&counters::COPIES_HTOD);
            }
            Op::Fill { dst, value, len } => std::ptr::write_bytes(dst.ptr(), *value, *len),
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
        unsafe { run_op(&d.op) };
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
        queue(
            stream,
            Op::Fill {
                dst: end,
                value,
                len: n,
            },
        );
        return Ok(());
    }
    // SAFETY: the range lies inside a live allocation whose shadow mapping the Arc in `end`
    // keeps mapped.
    unsafe { std::ptr::write_bytes(end.ptr(), value, n) };
    Ok(())
}
