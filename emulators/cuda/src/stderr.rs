//! Lines on stderr, written straight with `write(2)` (no Rust stdio lock, which a forked child or
//! a signal-time caller may find held): a leaf every module may use.

use std::ffi::c_int;

/// The calling thread's errno.
pub fn errno() -> c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Writes `text` plus a newline to stderr in one `write(2)` (so lines from several threads do
/// not interleave), ignoring errors.
pub fn stderr_line(text: &str) {
    let mut bytes = Vec::with_capacity(text.len() + 1);
    bytes.extend_from_slice(text.as_bytes());
    bytes.push(b'\n');
    write_all(libc::STDERR_FILENO, &bytes);
}

/// Writes all of `bytes` to `fd`, retrying on EINTR and short writes; gives up on other errors.
pub fn write_all(fd: c_int, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: bytes is a valid slice for its whole length.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n < 0 {
            if errno() == libc::EINTR {
                continue;
            }
            return;
        }
        if n == 0 {
            return;
        }
        bytes = &bytes[n as usize..];
    }
}
