//! Modelled time of the link between host and device memory (`H5GDS_EMU_LINK_GBPS`), so that
//! whether a program overlaps its copies with its own work shows in its wall-clock time here as
//! it would on a GPU. Off by default: then copies cost only what copying the bytes costs.
//!
//! The model is a timeline beside the bytes, which move as they always do (at the call, or at
//! synchronization under `H5GDS_EMU_DEFER_ASYNC`). Each device has one copy engine per
//! direction (PCIe is full duplex; GPUs have a copy engine for each direction at least, CUDA C++
//! Programming Guide, "Overlap of Data Transfer and Kernel Execution"), and a copy between host
//! and device memory of `n` bytes occupies its direction's engine for `n / rate` seconds, after
//! the work queued before it on its stream ("operations within a stream are executed in order",
//! same guide, "Streams"). Two streams copying the same way share the engine, and so the link's
//! rate; copies within device memory, memsets and the nvCOMP emulator's work cost nothing extra.
//!
//! What waits, and for what (CUDA Driver API, "API synchronization behavior", and the functions'
//! reference pages):
//! * an async copy between device and pinned memory returns at once; its stream's work ends when
//!   the copy would;
//! * a copy from or to pageable memory, and a synchronous copy (on the legacy stream), returns
//!   when the modelled copy ends, pageable memory at its own rate;
//! * `cuStreamSynchronize` returns when its stream's work ends, `cuCtxSynchronize` and frees
//!   (which synchronize in practice) when every stream's has;
//! * `cuEventRecord` completes the event when its stream's work queued so far ends:
//!   `cuEventQuery` says CUDA_ERROR_NOT_READY until then, `cuEventSynchronize` waits for it, and
//!   `cuStreamWaitEvent` makes the stream's later work start after it;
//! * `cuFileRead`/`cuFileWrite` of device memory are synchronous and take the link for their
//!   bytes (with or without GDS the bytes cross it).

use crate::consts::CUresult;
use crate::switches::{self, LinkRates};
use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::{LazyLock, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Which way a copy crosses the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Way {
    ToDevice,
    ToHost,
}

impl Way {
    /// The way from host to device (`Some(ToDevice)`), device to host, or `None` for copies that
    /// do not cross the link.
    pub fn of(src_on_device: bool, dst_on_device: bool) -> Option<Way> {
        match (src_on_device, dst_on_device) {
            (false, true) => Some(Way::ToDevice),
            (true, false) => Some(Way::ToHost),
            _ => None,
        }
    }
}

/// When queued work ends, by stream queue key and event, and when each engine is free.
#[derive(Default)]
struct State {
    streams: HashMap<usize, Instant>,
    events: HashMap<usize, Instant>,
    engines: HashMap<(c_int, Way), Instant>,
}

fn state() -> MutexGuard<'static, State> {
    static STATE: LazyLock<Mutex<State>> = LazyLock::new(Mutex::default);
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

fn rates() -> Option<LinkRates> {
    switches::get().link
}

/// Whether the link's time is modelled (`H5GDS_EMU_LINK_GBPS`), so callers look up what
/// [`copy`] needs only then.
pub(crate) fn modelled() -> bool {
    rates().is_some()
}

/// Sleeps until `end`, without holding the state's lock.
fn sleep_until(end: Instant) {
    let now = Instant::now();
    if end > now {
        std::thread::sleep(end - now);
    }
}

/// Puts a copy of `bytes`, called at `called`, on the engine for `way` of `device`, after the work
/// queued on `key` (if any), and returns when it ends: no earlier than now, when the emulator has
/// moved its bytes. The stream's work then ends there too.
fn schedule(
    key: Option<usize>,
    called: Instant,
    device: c_int,
    way: Way,
    bytes: usize,
    rate: u64,
) -> Instant {
    let mut s = state();
    let after_stream = key.and_then(|k| s.streams.get(&k).copied());
    let engine = s.engines.get(&(device, way)).copied();
    let start = [Some(called), after_stream, engine]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(called);
    let end = (start + Duration::from_secs_f64(bytes as f64 / rate as f64)).max(Instant::now());
    s.engines.insert((device, way), end);
    if let Some(k) = key {
        s.streams.insert(k, end);
    }
    end
}

/// A copy of `bytes` crossing the link `way` for `device`, called at `called`: on stream queue key
/// `key` (a synchronous copy on the legacy stream's), from or to pinned memory or not.
/// Returns when the call would: at once for an async pinned copy, else when the modelled copy
/// ends.
pub(crate) fn copy(
    key: usize,
    synchronous: bool,
    called: Instant,
    device: c_int,
    way: Option<Way>,
    bytes: usize,
    pinned: bool,
) {
    let (Some(rates), Some(way)) = (rates(), way) else {
        return;
    };
    let rate = if pinned { rates.pinned } else { rates.pageable };
    let end = schedule(Some(key), called, device, way, bytes, rate);
    if synchronous || !pinned {
        sleep_until(end);
    }
}

/// A synchronous cuFile transfer of `bytes` of device memory of `device`, called at `called`,
/// which is on no stream.
pub(crate) fn file_transfer(called: Instant, device: c_int, way: Way, bytes: usize) {
    if let Some(rates) = rates() {
        sleep_until(schedule(None, called, device, way, bytes, rates.pinned));
    }
}

/// `cuStreamSynchronize`: returns when the work queued on `stream` (a queue key) ends.
pub(crate) fn wait_stream(stream: usize) {
    if rates().is_some() {
        // Bound first: the state's lock must not be held while sleeping.
        let end = state().streams.get(&stream).copied();
        if let Some(end) = end {
            sleep_until(end);
        }
    }
}

/// `cuCtxSynchronize` and frees: returns when the work on every stream ends.
pub(crate) fn wait_all() {
    if rates().is_some() {
        // Bound first: the state's lock must not be held while sleeping.
        let end = state().streams.values().max().copied();
        if let Some(end) = end {
            sleep_until(end);
        }
    }
}

/// `cuEventRecord`: the event completes when the work queued on `stream` so far ends.
pub(crate) fn record(event: usize, stream: usize) {
    if rates().is_some() {
        let mut s = state();
        let end = s.streams.get(&stream).copied().unwrap_or_else(Instant::now);
        s.events.insert(event, end);
    }
}

/// `cuEventQuery`: CUDA_ERROR_NOT_READY while the work the event was recorded after runs.
pub(crate) fn query(event: usize) -> Result<(), CUresult> {
    let end = state().events.get(&event).copied();
    match end {
        Some(end) if Instant::now() < end => Err(crate::consts::CUDA_ERROR_NOT_READY),
        _ => Ok(()),
    }
}

/// `cuEventSynchronize`: returns when the event completes.
pub(crate) fn wait_event(event: usize) {
    // Bound first: the state's lock must not be held while sleeping.
    let end = state().events.get(&event).copied();
    if let Some(end) = end {
        sleep_until(end);
    }
}

/// `cuStreamWaitEvent`: the stream's later work starts no earlier than the event completes.
pub(crate) fn stream_waits(stream: usize, event: usize) {
    let mut s = state();
    if let Some(end) = s.events.get(&event).copied() {
        let at = s.streams.entry(stream).or_insert(end);
        *at = (*at).max(end);
    }
}

/// A destroyed stream or event: its entry goes (events recorded on a stream keep their time).
pub(crate) fn forget(handle: usize) {
    let mut s = state();
    s.streams.remove(&handle);
    s.events.remove(&handle);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_copies_between_host_and_device_cross_the_link() {
        assert_eq!(Way::of(false, true), Some(Way::ToDevice));
        assert_eq!(Way::of(true, false), Some(Way::ToHost));
        assert_eq!(Way::of(true, true), None);
        assert_eq!(Way::of(false, false), None);
    }
}
