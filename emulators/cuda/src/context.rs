//! Driver state: whether `cuInit` succeeded, the devices, their primary contexts (reference
//! counted), each thread's context stack, the streams and the events.
//!
//! The context stack follows the CUDA Driver API reference (Context Management): "The context
//! stack is per-thread"; `cuCtxPushCurrent` "pushes the given context onto the CPU thread's stack
//! of current contexts"; `cuCtxPopCurrent` "pops the current CUDA context from the CPU thread"
//! and makes the previous one current again, CUDA_ERROR_INVALID_CONTEXT on an empty stack;
//! `cuCtxSetCurrent` "binds the specified CUDA context to the calling CPU thread. If there exists
//! a CUDA context stack on the calling CPU thread, this will replace the top of that stack with
//! ctx. If ctx is NULL then this will be equivalent to popping the top of the calling CPU
//! thread's CUDA context stack"; `cuCtxGetCurrent` returns the top, or NULL.
//!
//! Context and stream handles are opaque integers dressed as pointers; callers never
//! dereference them, and the emulator only compares them.
//!
//! Streams and memory belong to a context (several-device mode, `H5GDS_EMU_DEVICES` > 1, is where
//! that matters): `cuStreamCreate` makes a stream in the current context and `cuStreamGetCtx`
//! "returns the CUDA context that the stream is associated with"; `cuMemAlloc` allocates for the
//! current context and CU_POINTER_ATTRIBUTE_CONTEXT names "the CUcontext in which ptr was
//! allocated or registered" (CUDA Driver API, Stream Management, Memory Management, Unified
//! Addressing). A copy on another device's stream still succeeds ("A memory copy will succeed even
//! if it is issued to a stream that is not associated to the current device", CUDA C++
//! Programming Guide, Multi-Device System, Stream and Event Behavior), as does a copy of another
//! context's memory under unified addressing, but on a GPU both run through another device or
//! context than the caller meant: the emulator lets them succeed and counts them (`note_use`, the
//! report's "cross-context uses"), and cuFile refuses them (see `cufile_api`).

use crate::consts::*;
use crate::switches;
use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

static INITIALIZED: AtomicBool = AtomicBool::new(false);

/// Where primary context handles start, and their spacing: device d's is
/// `CONTEXT_BASE + d * CONTEXT_STRIDE`.
const CONTEXT_BASE: usize = 0x0000_0c7c_0000_0000;
const CONTEXT_STRIDE: usize = 0x1000;
/// Where stream handles start.
const STREAM_BASE: usize = 0x0000_05e1_0000_0000;
/// Where event handles start.
const EVENT_BASE: usize = 0x0000_0e7e_0000_0000;

/// Primary context reference counts, by device ordinal.
static PRIMARY_REFS: Mutex<Vec<u32>> = Mutex::new(Vec::new());
/// Live streams, and the context each was created in.
static STREAMS: Mutex<BTreeMap<usize, usize>> = Mutex::new(BTreeMap::new());
static NEXT_STREAM: AtomicUsize = AtomicUsize::new(1);
/// Live events.
static EVENTS: Mutex<BTreeSet<usize>> = Mutex::new(BTreeSet::new());
static NEXT_EVENT: AtomicUsize = AtomicUsize::new(1);

/// How deep a thread's context stack may grow; deeper pushes fail with CUDA_ERROR_OUT_OF_MEMORY
/// (the real driver's limit is undocumented; no program of the tests comes near this).
const MAX_STACK: usize = 64;

thread_local! {
    /// The calling thread's context stack: `STACK[..DEPTH]`, the current context on top. Plain
    /// `Cell`s without destructors, so they are usable while the thread exits.
    static STACK: Cell<[usize; MAX_STACK]> = const { Cell::new([0; MAX_STACK]) };
    static DEPTH: Cell<usize> = const { Cell::new(0) };
}

fn lock<T>(m: &'static Mutex<T>) -> MutexGuard<'static, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `cuInit`: fails with the injected code, NO_DEVICE when there are no devices, else succeeds.
pub fn init(flags: u32) -> Result<(), CUresult> {
    if flags != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let switches = switches::get();
    if let Some(code) = switches.init_error {
        return Err(code);
    }
    if switches.devices == 0 {
        return Err(CUDA_ERROR_NO_DEVICE);
    }
    let mut refs = lock(&PRIMARY_REFS);
    if refs.is_empty() {
        refs.resize(switches.devices as usize, 0);
    }
    INITIALIZED.store(true, Ordering::Release);
    crate::lifecycle::initialised_here();
    Ok(())
}

/// NOT_INITIALIZED unless `cuInit` has succeeded.
pub fn require_init() -> Result<(), CUresult> {
    if INITIALIZED.load(Ordering::Acquire) {
        Ok(())
    } else {
        Err(CUDA_ERROR_NOT_INITIALIZED)
    }
}

/// The number of devices.
pub fn device_count() -> c_int {
    switches::get().devices
}

/// INVALID_DEVICE unless `dev` is a device ordinal.
pub fn check_device(dev: CUdevice) -> Result<(), CUresult> {
    if (0..device_count()).contains(&dev) {
        Ok(())
    } else {
        Err(CUDA_ERROR_INVALID_DEVICE)
    }
}

/// The primary context handle of `dev`.
pub fn primary_context(dev: CUdevice) -> usize {
    CONTEXT_BASE + dev as usize * CONTEXT_STRIDE
}

/// The device whose primary context `handle` is, if it is one.
fn device_of(handle: usize) -> Option<CUdevice> {
    let offset = handle.checked_sub(CONTEXT_BASE)?;
    if offset % CONTEXT_STRIDE != 0 {
        return None;
    }
    let dev = c_int::try_from(offset / CONTEXT_STRIDE).ok()?;
    check_device(dev).ok().map(|()| dev)
}

fn is_retained(dev: CUdevice) -> bool {
    lock(&PRIMARY_REFS)
        .get(dev as usize)
        .is_some_and(|&refs| refs > 0)
}

/// `cuDevicePrimaryCtxRetain`.
pub fn retain_primary(dev: CUdevice) -> Result<usize, CUresult> {
    check_device(dev)?;
    let mut refs = lock(&PRIMARY_REFS);
    let slot = refs
        .get_mut(dev as usize)
        .ok_or(CUDA_ERROR_INVALID_DEVICE)?;
    *slot = slot.saturating_add(1);
    Ok(primary_context(dev))
}

/// `cuDevicePrimaryCtxRelease_v2`: INVALID_CONTEXT if it is not retained. Memory allocated in
/// the context is not freed when the count reaches 0 (it shows up as leaked instead).
pub fn release_primary(dev: CUdevice) -> Result<(), CUresult> {
    check_device(dev)?;
    let mut refs = lock(&PRIMARY_REFS);
    match refs.get_mut(dev as usize) {
        Some(slot) if *slot > 0 => {
            *slot -= 1;
            Ok(())
        }
        _ => Err(CUDA_ERROR_INVALID_CONTEXT),
    }
}

/// INVALID_CONTEXT unless `handle` is a retained primary context.
fn check_context(handle: usize) -> Result<(), CUresult> {
    let dev = device_of(handle).ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
    if !is_retained(dev) {
        return Err(CUDA_ERROR_INVALID_CONTEXT);
    }
    Ok(())
}

/// `cuCtxSetCurrent`: replaces the top of the stack (pushes onto an empty one); null pops.
pub fn set_current(handle: usize) -> Result<(), CUresult> {
    let depth = DEPTH.with(Cell::get);
    if handle == 0 {
        DEPTH.with(|d| d.set(depth.saturating_sub(1)));
        return Ok(());
    }
    check_context(handle)?;
    let top = depth.max(1) - 1;
    STACK.with(|s| {
        let mut stack = s.get();
        stack[top] = handle;
        s.set(stack);
    });
    DEPTH.with(|d| d.set(top + 1));
    Ok(())
}

/// `cuCtxPushCurrent`: a retained primary context onto the stack.
pub fn push_current(handle: usize) -> Result<(), CUresult> {
    check_context(handle)?;
    let depth = DEPTH.with(Cell::get);
    if depth == MAX_STACK {
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    }
    STACK.with(|s| {
        let mut stack = s.get();
        stack[depth] = handle;
        s.set(stack);
    });
    DEPTH.with(|d| d.set(depth + 1));
    Ok(())
}

/// `cuCtxPopCurrent`: the top of the stack, removed; INVALID_CONTEXT on an empty stack.
pub fn pop_current() -> Result<usize, CUresult> {
    let depth = DEPTH.with(Cell::get);
    if depth == 0 {
        return Err(CUDA_ERROR_INVALID_CONTEXT);
    }
    DEPTH.with(|d| d.set(depth - 1));
    Ok(STACK.with(|s| s.get()[depth - 1]))
}

/// `cuCtxGetCurrent`: the top of the calling thread's stack, 0 if it is empty.
pub fn current_handle() -> usize {
    match DEPTH.with(Cell::get) {
        0 => 0,
        depth => STACK.with(|s| s.get()[depth - 1]),
    }
}

/// The calling thread's current context and its device; INVALID_CONTEXT if there is none or
/// it has been released.
pub fn require_current() -> Result<(usize, CUdevice), CUresult> {
    let handle = current_handle();
    let dev = device_of(handle).ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
    if !is_retained(dev) {
        return Err(CUDA_ERROR_INVALID_CONTEXT);
    }
    Ok((handle, dev))
}

/// `cuStreamCreate`: a new stream handle, of `context`.
pub fn create_stream(context: usize) -> usize {
    let id = NEXT_STREAM.fetch_add(1, Ordering::Relaxed);
    let handle = STREAM_BASE + id * 0x10;
    lock(&STREAMS).insert(handle, context);
    handle
}

/// `cuStreamDestroy_v2`: INVALID_HANDLE for anything but a live stream.
pub fn destroy_stream(handle: usize) -> Result<(), CUresult> {
    if lock(&STREAMS).remove(&handle).is_some() {
        Ok(())
    } else {
        Err(CUDA_ERROR_INVALID_HANDLE)
    }
}

/// INVALID_HANDLE unless `handle` is a live stream or a default stream (null, legacy,
/// per-thread).
pub fn check_stream(handle: usize) -> Result<(), CUresult> {
    if handle == 0
        || handle == CU_STREAM_LEGACY
        || handle == CU_STREAM_PER_THREAD
        || lock(&STREAMS).contains_key(&handle)
    {
        Ok(())
    } else {
        Err(CUDA_ERROR_INVALID_HANDLE)
    }
}

/// Counts the use of a live stream made in another context than the current one (default
/// streams belong to whichever context is current).
pub fn note_stream_use(handle: usize) {
    let owner = lock(&STREAMS).get(&handle).copied();
    if let Some(owner) = owner {
        note_use(owner, device_of(owner).unwrap_or(-1));
    }
}

/// Counts the use of memory or a stream of context `owner` (0: memory that belongs to device
/// `owner_device` and no context, as pool and VMM memory) while another context, or another
/// device's, is current.
pub fn note_use(owner: usize, owner_device: CUdevice) {
    let current = current_handle();
    let foreign = if owner == 0 {
        device_of(current) != Some(owner_device)
    } else {
        owner != current
    };
    if foreign {
        crate::counters::bump(&crate::counters::CROSS_CONTEXT_USES);
    }
}

/// `cuEventCreate`: a new event handle.
pub fn create_event() -> usize {
    let id = NEXT_EVENT.fetch_add(1, Ordering::Relaxed);
    let handle = EVENT_BASE + id * 0x10;
    lock(&EVENTS).insert(handle);
    handle
}

/// `cuEventDestroy_v2`: INVALID_HANDLE for anything but a live event.
pub fn destroy_event(handle: usize) -> Result<(), CUresult> {
    if lock(&EVENTS).remove(&handle) {
        Ok(())
    } else {
        Err(CUDA_ERROR_INVALID_HANDLE)
    }
}

/// INVALID_HANDLE unless `handle` is a live event.
pub fn check_event(handle: usize) -> Result<(), CUresult> {
    if lock(&EVENTS).contains(&handle) {
        Ok(())
    } else {
        Err(CUDA_ERROR_INVALID_HANDLE)
    }
}
