//! Process-wide counters: what the exit report and `h5gds_emu_counters` show, plus the call
//! counters that fault injection uses. All are atomics, so they can be read at exit without a
//! lock even while other threads still run.

use std::sync::atomic::{AtomicU64, Ordering};

/// Device allocations made and not yet freed.
pub static LIVE_DEVICE_ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
/// Bytes (as requested) of those allocations.
pub static LIVE_DEVICE_BYTES: AtomicU64 = AtomicU64::new(0);
/// Pinned host allocations made and not yet freed.
pub static LIVE_PINNED_HOST_ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
/// Bytes of every pinned host allocation made (what pinning cost a program, freed or not).
pub static PINNED_HOST_BYTES: AtomicU64 = AtomicU64::new(0);
/// Frees of pointers that were not (or no longer) allocated.
pub static DOUBLE_FREES: AtomicU64 = AtomicU64::new(0);
/// Copies, memsets, cuFile transfers and registrations that reached outside device memory.
pub static BOUNDS_VIOLATIONS: AtomicU64 = AtomicU64::new(0);
/// cuFileRead calls that completed (returned a count, possibly 0).
pub static CUFILE_READS: AtomicU64 = AtomicU64::new(0);
/// cuFileWrite calls that completed.
pub static CUFILE_WRITES: AtomicU64 = AtomicU64::new(0);
/// cuFileDriverOpen calls, whatever their outcome.
pub static CUFILE_DRIVER_OPEN_CALLS: AtomicU64 = AtomicU64::new(0);
/// Driver opens, explicit (`cuFileDriverOpen`) or implied (the first call that needs the driver),
/// that have returned, whatever their outcome: an open under way has not.
pub static CUFILE_DRIVER_OPENS_COMPLETED: AtomicU64 = AtomicU64::new(0);
/// cuFileHandleRegister calls, whatever their outcome.
pub static CUFILE_HANDLE_REGISTER_CALLS: AtomicU64 = AtomicU64::new(0);
/// CUDA and cuFile calls from a process forked after `cuInit` (all refused; see `lifecycle`).
pub static FORKED_CHILD_CALLS: AtomicU64 = AtomicU64::new(0);
/// cuFileRead/cuFileWrite calls that returned an error (-1 or a negated cuFile code).
pub static CUFILE_FAILED_TRANSFERS: AtomicU64 = AtomicU64::new(0);
/// Host-to-device copies that completed.
pub static COPIES_HTOD: AtomicU64 = AtomicU64::new(0);
/// Device-to-host copies that completed.
pub static COPIES_DTOH: AtomicU64 = AtomicU64::new(0);
/// Copies within device memory that completed (a 2-D or 3-D copy counts once).
pub static COPIES_DTOD: AtomicU64 = AtomicU64::new(0);

/// Copies, memsets and stream calls on memory or a stream of another context than the current
/// one (see `context::note_use`).
pub static CROSS_CONTEXT_USES: AtomicU64 = AtomicU64::new(0);

/// Allocation calls that passed their argument checks (for `H5GDS_EMU_FAIL_ALLOC`).
pub static ALLOCATION_CALLS: AtomicU64 = AtomicU64::new(0);
/// cuFile read/write calls that passed their argument checks (for `H5GDS_EMU_FAIL_IO`).
pub static IO_CALLS: AtomicU64 = AtomicU64::new(0);
/// `cuPointerGetAttributes` calls (for `H5GDS_EMU_STICKY_ERROR`).
pub static POINTER_QUERY_CALLS: AtomicU64 = AtomicU64::new(0);
/// Copy calls that passed their argument checks (for `H5GDS_EMU_FAIL_COPY`).
pub static COPY_CALLS: AtomicU64 = AtomicU64::new(0);

/// Adds one to `counter`.
pub fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// Subtracts `n` from `counter`, saturating at 0.
pub fn drop_by(counter: &AtomicU64, n: u64) {
    let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
        Some(v.saturating_sub(n))
    });
}

/// Counts one more call on `calls` and says whether it is the `nth` (the one to fail).
pub fn is_nth_call(calls: &AtomicU64, nth: Option<u64>) -> bool {
    let this_call = calls.fetch_add(1, Ordering::Relaxed) + 1;
    nth == Some(this_call)
}

/// The counters as `h5gds_emu_counters` hands them out: nine `u64`, in this order.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct H5gdsEmuCounters {
    pub live_device_allocations: u64,
    pub live_device_bytes: u64,
    pub live_pinned_host_allocations: u64,
    pub double_frees: u64,
    pub bounds_violations: u64,
    pub cufile_reads: u64,
    pub cufile_writes: u64,
    pub copies_htod: u64,
    pub copies_dtoh: u64,
}

/// The current values.
pub fn snapshot() -> H5gdsEmuCounters {
    let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
    H5gdsEmuCounters {
        live_device_allocations: get(&LIVE_DEVICE_ALLOCATIONS),
        live_device_bytes: get(&LIVE_DEVICE_BYTES),
        live_pinned_host_allocations: get(&LIVE_PINNED_HOST_ALLOCATIONS),
        double_frees: get(&DOUBLE_FREES),
        bounds_violations: get(&BOUNDS_VIOLATIONS),
        cufile_reads: get(&CUFILE_READS),
        cufile_writes: get(&CUFILE_WRITES),
        copies_htod: get(&COPIES_HTOD),
        copies_dtoh: get(&COPIES_DTOH),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nth_call_fires_once() {
        let calls = AtomicU64::new(0);
        let fired: Vec<bool> = (0..5).map(|_| is_nth_call(&calls, Some(3))).collect();
        assert_eq!(fired, [false, false, true, false, false]);
        assert!(!is_nth_call(&calls, None));
    }

    #[test]
    fn drop_by_saturates() {
        let c = AtomicU64::new(2);
        drop_by(&c, 5);
        assert_eq!(c.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn counters_struct_is_nine_u64() {
        assert_eq!(std::mem::size_of::<H5gdsEmuCounters>(), 72);
    }
}
