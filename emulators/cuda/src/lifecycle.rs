//! Process-level failures that every call sees: use from a forked child, and a sticky error.
//!
//! Fork: "CUDA does not duplicate any of its internal data structures or threads to other
//! processes upon a call to fork. Any use of CUDA after a call to fork and before a subsequent
//! call to exec has undefined behavior" (the CUDA C++ guidelines' rule on fork, CUDA-1.6; the
//! CUDA C++ Programming Guide likewise leaves CUDA state in a forked child undefined). The
//! emulator makes that undefined behaviour observable: once a process has called `cuInit`
//! successfully, any CUDA or cuFile call from another process (a fork of it) fails with
//! CUDA_ERROR_NOT_INITIALIZED (3) (what forked data-loader workers report as "initialization
//! error") or the cuFile form of it, writes a line on stderr and is counted ("calls from a
//! forked child" in that child's report, see `report`).
//!
//! Sticky errors: "This leaves the process in an inconsistent state and any further CUDA work
//! will return the same error. To continue using CUDA, the process must be terminated and
//! relaunched" (CUDA Driver API, CUDA_ERROR_ILLEGAL_ADDRESS). `H5GDS_EMU_STICKY_ERROR=N` makes
//! the Nth `cuPointerGetAttributes` call fail with CUDA_ERROR_ILLEGAL_ADDRESS (700), and every
//! CUDA or cuFile call after it too.

use crate::consts::{CUresult, CUDA_ERROR_NOT_INITIALIZED};
use crate::counters::{self, bump};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// The process whose `cuInit` succeeded first (0: none yet).
static INITIALISED_BY: AtomicI32 = AtomicI32::new(0);
/// Set once the sticky error has happened.
static STICKY: AtomicBool = AtomicBool::new(false);

/// CUDA_ERROR_ILLEGAL_ADDRESS, the sticky error injected.
pub const CUDA_ERROR_ILLEGAL_ADDRESS: CUresult = 700;

/// This process's id, read once and again in a forked child (a `pthread_atfork` child
/// handler): every emulated call checks it, and a `getpid` system call per call would charge the
/// driver's emulated runs for work libcuda's calls do not do.
fn current_pid() -> i32 {
    static PID: AtomicI32 = AtomicI32::new(0);
    static REGISTER: std::sync::Once = std::sync::Once::new();
    extern "C" fn in_child() {
        // SAFETY: getpid cannot fail (and is async-signal-safe).
        PID.store(unsafe { libc::getpid() }, Ordering::Release);
    }
    REGISTER.call_once(|| {
        in_child();
        // SAFETY: the handler only stores the child's id; the emulator, loaded as libcuda,
        // stays loaded for the life of the process. Were registration to fail, the id read now
        // would go stale in a child, so it is then asked every time.
        if unsafe { libc::pthread_atfork(None, None, Some(in_child)) } != 0 {
            PID.store(0, Ordering::Release);
        }
    });
    match PID.load(Ordering::Acquire) {
        // SAFETY: getpid cannot fail.
        0 => unsafe { libc::getpid() },
        pid => pid,
    }
}

/// Records that this process initialised CUDA (called on a successful `cuInit`).
pub fn initialised_here() {
    let pid = current_pid();
    let _ = INITIALISED_BY.compare_exchange(0, pid, Ordering::AcqRel, Ordering::Acquire);
}

/// Calls that work whatever state CUDA is in: they touch no device or driver state.
fn always_works(name: &str) -> bool {
    matches!(
        name,
        "h5gds_emu_counters" | "h5gds_emu_report_counter" | "cuGetErrorName" | "cuGetErrorString"
    )
}

/// The code a call must fail with before it runs, if any: CUDA_ERROR_NOT_INITIALIZED in a
/// process forked after `cuInit` (counted, with a line on stderr), the sticky error once it has
/// happened.
pub fn refuse(name: &str) -> Option<CUresult> {
    if always_works(name) {
        return None;
    }
    let initialised_by = INITIALISED_BY.load(Ordering::Acquire);
    let pid = current_pid();
    if initialised_by != 0 && initialised_by != pid {
        bump(&counters::FORKED_CHILD_CALLS);
        crate::stderr::stderr_line(&format!(
            "h5gds-emu: {name} called in process {pid}, a fork of process {initialised_by}, \
             which initialised CUDA: CUDA and cuFile state is undefined in a forked child; \
             failing the call"
        ));
        return Some(CUDA_ERROR_NOT_INITIALIZED);
    }
    STICKY
        .load(Ordering::Acquire)
        .then_some(CUDA_ERROR_ILLEGAL_ADDRESS)
}

/// Counts a pointer query for `H5GDS_EMU_STICKY_ERROR`; true if it is the one that fails (and
/// from now on every call does).
pub fn pointer_query_turns_sticky() -> bool {
    let nth = crate::switches::get().sticky_error;
    if counters::is_nth_call(&counters::POINTER_QUERY_CALLS, nth) {
        STICKY.store(true, Ordering::Release);
        return true;
    }
    false
}
