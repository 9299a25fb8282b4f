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

/// The report's lines after the first (which adds the bytes): name and value, in order.
fn lines() -> [(&'static str, u64); 18] {
    let c = counters::snapshot();
    let get = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed);
    [
        ("leaked device allocations", c.live_device_allocations),
        (
            "leaked pinned host allocations",
            c.live_pinned_host_allocations,
        ),
        ("double frees", c.double_frees),
        ("bounds violations", c.bounds_violations),
        ("cufile reads", c.cufile_reads),
        ("cufile writes", c.cufile_writes),
        ("copies htod", c.copies_htod),
        ("copies dtoh", c.copies_dtoh),
        (
            "cufile posix bounce copies",
            get(&crate::cufile_io::POSIX_BOUNCE_COPIES),
        ),
        (
            "cufile o_direct requests",
            get(&crate::cufile_io::DIRECT_REQUESTS),
        ),
        (
            "cufile driver open calls",
            get(&counters::CUFILE_DRIVER_OPEN_CALLS),
        ),
        (
            "cufile driver opens completed",
            get(&counters::CUFILE_DRIVER_OPENS_COMPLETED),
        ),
        (
            "cufile handle register calls",
            get(&counters::CUFILE_HANDLE_REGISTER_CALLS),
        ),
        ("cross-context uses", get(&counters::CROSS_CONTEXT_USES)),
        (
            "cufile failed transfers",
            get(&counters::CUFILE_FAILED_TRANSFERS),
        ),
        (
            "calls from a forked child",
            get(&counters::FORKED_CHILD_CALLS),
        ),
        ("pointer queries", get(&counters::POINTER_QUERY_CALLS)),
        ("copies dtod", get(&counters::COPIES_DTOD)),
    ]
}

/// The report text for the current counters.
fn render(text: &mut StackText) {
    let live_bytes = counters::LIVE_DEVICE_BYTES.load(Ordering::Relaxed);
    let pinned_bytes = counters::PINNED_HOST_BYTES.load(Ordering::Relaxed);
    for (i, (name, value)) in lines().iter().enumerate() {
        let _ = if i == 0 {
            writeln!(text, "{name}: {value} (bytes {live_bytes})")
        } else {
            writeln!(text, "{name}: {value}")
        };
    }
    let _ = writeln!(text, "pinned host bytes allocated: {pinned_bytes}");
}

/// The value of the report line `name` (without the colon), as the report would show it now.
fn counter_named(name: &[u8]) -> Option<u64> {
    if name == b"pinned host bytes allocated" {
        return Some(counters::PINNED_HOST_BYTES.load(Ordering::Relaxed));
    }
    lines()
        .iter()
        .find(|(n, _)| n.as_bytes() == name)
        .map(|(_, value)| *value)
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

/// Not part of CUDA: `int h5gds_emu_report_counter(const char *name, uint64_t *out)` puts the
/// value the exit report's line `name` (without the colon, e.g. "cufile driver opens completed")
/// would show now into `*out`, so a program can look at any counter while it runs. Returns 0, or
/// -1 for a null argument or an unknown name. Works before `cuInit` and in a forked child.
///
/// # Safety
/// `name` must be null or a NUL-terminated string; `out` null or valid for writing a `u64`.
#[no_mangle]
pub unsafe extern "C" fn h5gds_emu_report_counter(
    name: *const std::ffi::c_char,
    out: *mut u64,
) -> c_int {
    crate::ffi::call(
        "h5gds_emu_report_counter",
        format_args!("{name:?}, {out:?}"),
        || -1,
        || {
            if name.is_null() {
                return -1;
            }
            // SAFETY: checked non-null; the caller passes a NUL-terminated string.
            let name = unsafe { CStr::from_ptr(name) };
            let Some(value) = counter_named(name.to_bytes()) else {
                return -1;
            };
            // SAFETY: the caller passes null or a pointer valid for one u64.
            match unsafe { crate::ffi::put(out, value) } {
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
    fn report_has_the_nineteen_lines() {
        let mut text = StackText {
            bytes: [0; 1024],
            len: 0,
        };
        render(&mut text);
        let text = std::str::from_utf8(&text.bytes[..text.len]).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 19, "{text}");
        assert!(lines[0].starts_with("leaked device allocations: "));
        assert!(lines[0].contains(" (bytes "));
        assert!(lines[7].starts_with("copies dtoh: "));
        assert!(lines[8].starts_with("cufile posix bounce copies: "));
        assert!(lines[9].starts_with("cufile o_direct requests: "));
        assert!(lines[10].starts_with("cufile driver open calls: "));
        assert!(lines[11].starts_with("cufile driver opens completed: "));
        assert!(lines[12].starts_with("cufile handle register calls: "));
        assert!(lines[13].starts_with("cross-context uses: "));
        assert!(lines[14].starts_with("cufile failed transfers: "));
        assert!(lines[15].starts_with("calls from a forked child: "));
        assert!(lines[16].starts_with("pointer queries: "));
        assert!(lines[17].starts_with("copies dtod: "));
        assert!(lines[18].starts_with("pinned host bytes allocated: "));
    }

    #[test]
    fn every_report_line_can_be_asked_for_by_name() {
        let mut text = StackText {
            bytes: [0; 1024],
            len: 0,
        };
        render(&mut text);
        let text = std::str::from_utf8(&text.bytes[..text.len]).unwrap();
        for line in text.lines() {
            let (name, _) = line.split_once(": ").unwrap();
            assert!(counter_named(name.as_bytes()).is_some(), "{name}");
        }
        assert_eq!(counter_named(b"no such counter"), None);
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
