//! The exit report of `H5GDS_EMU_REPORT=PATH`, written by a destructor of the library (an
//! `.fini_array` entry: it runs at `exit` and if the library is unloaded).
//!
//! The destructor must never crash or hang, even while other threads still call into the
//! emulator: it reads only atomics (no lock), tears nothing down (other threads may still use
//! device memory), formats into a stack buffer, writes with plain `open`/`write`, and catches
//! any panic. A forked child that exits normally does not overwrite its parent's report: it
//! writes its own, to `PATH.forked-PID`.

use crate::counters;
use std::ffi::{c_int, CStr};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI32, Ordering};

/// The process that loaded the library (set by the constructor below).
static LOADED_BY: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_load() {
    // SAFETY: getpid cannot fail.
    LOADED_BY.store(unsafe { libc::getpid() }, Ordering::Relaxed);
}

extern "C" fn on_unload() {
    let _ = std::panic::catch_unwind(write_report);
}

#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;

#[used]
#[link_section = ".fini_array"]
static ON_UNLOAD: extern "C" fn() = on_unload;

/// A fixed-size text buffer; text beyond its capacity is dropped.
struct StackText {
    bytes: [u8; 1024],
    len: usize,
}

impl std::fmt::Write for StackText {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let room = self.bytes.len() - self.len;
        let n = s.len().min(room);
        self.bytes[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        if n < s.len() {
            Err(std::fmt::Error)
        } else {
            Ok(())
        }
    }
}

/// The report text for the current counters.
fn render(text: &mut StackText) {
    let c = counters::snapshot();
    let _ = write!(
        text,
        "leaked device allocations: {} (bytes {})\n\
         leaked pinned host allocations: {}\n\
         double frees: {}\n\
         bounds violations: {}\n\
         cufile reads: {}\n\
         cufile writes: {}\n\
         copies htod: {}\n\
         copies dtoh: {}\n\
         cufile posix bounce copies: {}\n\
         cufile o_direct requests: {}\n\
         cufile driver open calls: {}\n\
         cufile handle register calls: {}\n\
         cross-context uses: {}\n\
         cufile failed transfers: {}\n\
         calls from a forked child: {}\n\
         pointer queries: {}\n\
         pinned host bytes allocated: {}\n",
        c.live_device_allocations,
        c.live_device_bytes,
        c.live_pinned_host_allocations,
        c.double_frees,
        c.bounds_violations,
        c.cufile_reads,
        c.cufile_writes,
        c.copies_htod,
        c.copies_dtoh,
        crate::cufile_io::POSIX_BOUNCE_COPIES.load(Ordering::Relaxed),
        crate::cufile_io::DIRECT_REQUESTS.load(Ordering::Relaxed),
        counters::CUFILE_DRIVER_OPEN_CALLS.load(Ordering::Relaxed),
        counters::CUFILE_HANDLE_REGISTER_CALLS.load(Ordering::Relaxed),
        counters::CROSS_CONTEXT_USES.load(Ordering::Relaxed),
        counters::CUFILE_FAILED_TRANSFERS.load(Ordering::Relaxed),
        counters::FORKED_CHILD_CALLS.load(Ordering::Relaxed),
        counters::POINTER_QUERY_CALLS.load(Ordering::Relaxed),
        counters::PINNED_HOST_BYTES.load(Ordering::Relaxed),
    );
}

fn write_report() {
    // SAFETY: getenv with a valid C string; the result is null or a C string we only read.
    let path = unsafe { libc::getenv(c"H5GDS_EMU_REPORT".as_ptr()) };
    if path.is_null() {
        return;
    }
    // SAFETY: getpid cannot fail.
    let pid = unsafe { libc::getpid() };
    // SAFETY: non-null getenv results are NUL-terminated strings.
    let path = unsafe { CStr::from_ptr(path) };
    if path.is_empty() {
        return;
    }
    // A forked child writes its own report next to its parent's: `PATH.forked-PID`.
    let loaded_by = LOADED_BY.load(Ordering::Relaxed);
    let mut child_path = [0u8; 4096];
    let path = if loaded_by != 0 && loaded_by != pid {
        let mut name = StackText {
            bytes: [0; 1024],
            len: 0,
        };
        let Ok(parent) = std::str::from_utf8(path.to_bytes()) else {
            return;
        };
        if write!(name, "{parent}.forked-{pid}").is_err() {
            return;
        }
        child_path[..name.len].copy_from_slice(&name.bytes[..name.len]);
        child_path.as_ptr().cast()
    } else {
        path.as_ptr()
    };
    let mut text = StackText {
        bytes: [0; 1024],
        len: 0,
    };
    render(&mut text);
    // SAFETY: path is a C string; the flags and mode are plain integers.
    let fd = unsafe {
        libc::open(
            path,
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
            0o644 as libc::c_uint,
        )
    };
    if fd < 0 {
        let msg = b"h5gds-emu: cannot write the H5GDS_EMU_REPORT file\n";
        crate::stderr::write_all(libc::STDERR_FILENO, msg);
        return;
    }
    crate::stderr::write_all(fd, &text.bytes[..text.len]);
    // SAFETY: fd was opened above.
    unsafe { libc::close(fd) };
}

/// Not part of CUDA: copies the counters into `*out` (a `struct` of nine `uint64_t`:
/// live device allocations, their bytes, live pinned host allocations, double frees, bounds
/// violations, cuFile reads, cuFile writes, host-to-device copies, device-to-host copies).
/// Returns 0, or -1 if `out` is null. Works before `cuInit`.
///
/// # Safety
/// `out` must be null or valid for writing one `H5gdsEmuCounters`.
#[no_mangle]
pub unsafe extern "C" fn h5gds_emu_counters(out: *mut counters::H5gdsEmuCounters) -> c_int {
    crate::ffi::call(
        "h5gds_emu_counters",
        format_args!("{out:?}"),
        || -1,
        || {
            // SAFETY: the caller passes null or a pointer valid for one H5gdsEmuCounters.
            match unsafe { crate::ffi::put(out, counters::snapshot()) } {
                Ok(()) => 0,
                Err(_) => -1,
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_has_the_seventeen_lines() {
        let mut text = StackText {
            bytes: [0; 1024],
            len: 0,
        };
        render(&mut text);
        let text = std::str::from_utf8(&text.bytes[..text.len]).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 17, "{text}");
        assert!(lines[0].starts_with("leaked device allocations: "));
        assert!(lines[0].contains(" (bytes "));
        assert!(lines[7].starts_with("copies dtoh: "));
        assert!(lines[8].starts_with("cufile posix bounce copies: "));
        assert!(lines[9].starts_with("cufile o_direct requests: "));
        assert!(lines[10].starts_with("cufile driver open calls: "));
        assert!(lines[11].starts_with("cufile handle register calls: "));
        assert!(lines[12].starts_with("cross-context uses: "));
        assert!(lines[13].starts_with("cufile failed transfers: "));
        assert!(lines[14].starts_with("calls from a forked child: "));
        assert!(lines[15].starts_with("pointer queries: "));
        assert!(lines[16].starts_with("pinned host bytes allocated: "));
    }

    #[test]
    fn stack_text_truncates_instead_of_panicking() {
        let mut text = StackText {
            bytes: [0; 1024],
            len: 0,
        };
        let long = "x".repeat(2000);
        assert!(text.write_str(&long).is_err());
        assert_eq!(text.len, 1024);
    }
}
