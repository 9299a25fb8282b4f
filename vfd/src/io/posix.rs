//! `pread`/`pwrite` loops with sec2's semantics: retry on `EINTR`, continue short transfers,
//! zero-fill a read that reaches end of file.

use std::io;
use std::os::fd::RawFd;

/// A transfer that failed after `done` bytes.
#[derive(Debug)]
pub struct Failure {
    pub source: io::Error,
    pub done: usize,
}

/// The largest count Linux moves in one call; larger requests are looped anyway.
const MAX_PER_CALL: usize = 0x7fff_f000;

/// Reads `len` bytes at `offset` into `buf`; bytes past end of file read as zero.
/// Returns how many bytes came from the file.
///
/// # Safety
/// `buf` must be valid for writes of `len` bytes, and no other code may access them meanwhile.
pub unsafe fn read_full(
    fd: RawFd,
    buf: *mut u8,
    len: usize,
    offset: u64,
) -> Result<usize, Failure> {
    let mut done = 0usize;
    while done < len {
        let want = (len - done).min(MAX_PER_CALL);
        // SAFETY: buf + done .. buf + done + want lies inside the caller's buffer.
        let n = libc::pread(
            fd,
            buf.add(done).cast(),
            want,
            (offset + done as u64) as libc::off_t,
        );
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(Failure { source: err, done });
        }
        if n == 0 {
            // End of file: the rest of the request reads as zeros, as in sec2.
            std::ptr::write_bytes(buf.add(done), 0, len - done);
            return Ok(done);
        }
        done += n as usize;
    }
    Ok(done)
}

/// Writes all `len` bytes of `buf` at `offset`.
///
/// # Safety
/// `buf` must be valid for reads of `len` bytes.
pub unsafe fn write_full(
    fd: RawFd,
    buf: *const u8,
    len: usize,
    offset: u64,
) -> Result<(), Failure> {
    let mut done = 0usize;
    while done < len {
        let want = (len - done).min(MAX_PER_CALL);
        // SAFETY: buf + done .. buf + done + want lies inside the caller's buffer.
        let n = libc::pwrite(
            fd,
            buf.add(done).cast(),
            want,
            (offset + done as u64) as libc::off_t,
        );
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(Failure { source: err, done });
        }
        if n == 0 {
            let source = io::Error::new(io::ErrorKind::WriteZero, "pwrite wrote nothing");
            return Err(Failure { source, done });
        }
        done += n as usize;
    }
    Ok(())
}

/// Reads on an `O_DIRECT` descriptor for as long as the transfer stays aligned; returns how many
/// bytes it read, which is less than `len` at end of file or when the file system refuses the
/// descriptor (`EINVAL`): the caller finishes the rest with buffered I/O.
///
/// # Safety
/// As for `read_full`.
pub unsafe fn read_once(
    fd: RawFd,
    buf: *mut u8,
    len: usize,
    offset: u64,
) -> Result<usize, Failure> {
    let mut done = 0usize;
    while done < len {
        let want = (len - done).min(MAX_PER_CALL & !0xfff);
        // SAFETY: buf + done .. buf + done + want lies inside the caller's buffer.
        let n = libc::pread(
            fd,
            buf.add(done).cast(),
            want,
            (offset + done as u64) as libc::off_t,
        );
        if n < 0 {
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EINVAL) => return Ok(done),
                _ => return Err(Failure { source: err, done }),
            }
        }
        done += n as usize;
        if n == 0 || n as usize % 4096 != 0 {
            break;
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    #[test]
    fn read_past_end_of_file_zero_fills() {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"abcdef").unwrap();
        let mut buf = [0xffu8; 10];
        // SAFETY: buf is a live local array of 10 bytes.
        let got = unsafe { read_full(file.as_raw_fd(), buf.as_mut_ptr(), 10, 2) }.unwrap();
        assert_eq!(got, 4);
        assert_eq!(&buf, b"cdef\0\0\0\0\0\0");
    }

    #[test]
    fn write_then_read_back() {
        let file = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        // SAFETY: data and out are live vectors of the given lengths.
        unsafe { write_full(file.as_raw_fd(), data.as_ptr(), data.len(), 4096) }.unwrap();
        let mut out = vec![0u8; data.len()];
        let got =
            unsafe { read_full(file.as_raw_fd(), out.as_mut_ptr(), out.len(), 4096) }.unwrap();
        assert_eq!(got, data.len());
        assert_eq!(out, data);
    }

    #[test]
    fn errors_carry_errno() {
        let mut buf = [0u8; 4];
        // SAFETY: buf is valid; fd -1 is invalid on purpose.
        let err = unsafe { read_full(-1, buf.as_mut_ptr(), 4, 0) }.unwrap_err();
        assert_eq!(err.source.raw_os_error(), Some(libc::EBADF));
        assert_eq!(err.done, 0);
    }
}
