//! The `pread`/`pwrite` loop with sec2's semantics: retry on `EINTR`, continue short transfers,
//! zero-fill a read that reaches end of file.

use super::{BufPtr, Direction, PartialTransfer};
use std::io;
use std::os::fd::RawFd;

/// The largest count Linux moves in one call (a multiple of `DIRECT_ALIGN`); larger requests are
/// looped anyway.
const MAX_PER_CALL: usize = 0x7fff_f000;

/// `O_DIRECT` needs file offset, length and memory address aligned to the logical block size;
/// 4 KiB covers every common device.
pub(crate) const DIRECT_ALIGN: usize = 4096;

/// Moves `len` bytes between `buf` and the file at `offset`, continuing short transfers and
/// retrying `EINTR`; returns how many bytes came from or went to the file. A read that reaches
/// end of file zero-fills the rest of `buf`, as sec2 does; except a read on an `O_DIRECT`
/// descriptor (`direct`), which stops at end of file, where the transfer stops being aligned, or
/// where the file system refuses (`EINVAL`): the caller finishes that with buffered I/O.
///
/// # Safety
/// `buf` must be valid for `len` bytes (writes for a read, reads for a write), and no other code
/// may write them meanwhile.
pub(crate) unsafe fn transfer(
    dir: Direction,
    fd: RawFd,
    buf: BufPtr,
    len: usize,
    offset: u64,
    direct: bool,
) -> Result<usize, PartialTransfer> {
    let direct = direct && dir == Direction::Read;
    let mut done = 0usize;
    while done < len {
        let want = (len - done).min(MAX_PER_CALL);
        let (at, pos) = (
            buf.add(done).as_ptr(),
            (offset + done as u64) as libc::off_t,
        );
        // SAFETY: at .. at + want lies inside the caller's buffer, valid for this direction.
        let n = unsafe {
            match dir {
                Direction::Read => libc::pread(fd, at.cast(), want, pos),
                Direction::Write => libc::pwrite(fd, at.cast_const().cast(), want, pos),
            }
        };
        if n < 0 {
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EINVAL) if direct => return Ok(done),
                _ => return Err(PartialTransfer { source: err, done }),
            }
        }
        if n == 0 {
            return match dir {
                Direction::Write => Err(PartialTransfer {
                    source: io::Error::new(io::ErrorKind::WriteZero, "pwrite wrote nothing"),
                    done,
                }),
                Direction::Read if direct => Ok(done),
                Direction::Read => {
                    // End of file: the rest of the request reads as zeros, as in sec2.
                    // SAFETY: buf + done .. buf + len lies inside the caller's writable buffer.
                    unsafe { std::ptr::write_bytes(buf.add(done).as_ptr(), 0, len - done) };
                    Ok(done)
                }
            };
        }
        done += n as usize;
        if direct && n as usize % DIRECT_ALIGN != 0 {
            break;
        }
    }
    Ok(done)
}

/// Whether the `len` bytes at `offset` are in the page cache: read into `buf` only if no disk
/// would be waited on (`preadv2` with `RWF_NOWAIT`). False where they are not, where the read
/// stops short, or where the file system cannot tell (`EOPNOTSUPP`, `EINVAL`): the caller then
/// takes the way that suits storage that is not cached.
///
/// # Safety
/// `buf` must be valid for writes of `len` bytes.
pub(crate) unsafe fn cached_read(fd: RawFd, buf: BufPtr, len: usize, offset: u64) -> bool {
    let iov = libc::iovec {
        iov_base: buf.as_ptr().cast(),
        iov_len: len,
    };
    // SAFETY: one iovec over the caller's buffer, valid for writes of `len` bytes.
    let n = unsafe { libc::preadv2(fd, &iov, 1, offset as libc::off_t, libc::RWF_NOWAIT) };
    n == len as isize
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_cached_read_reads_only_whole_ranges_inside_the_file() {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"abcdef").unwrap();
        let mut buf = [0u8; 4];
        let at = BufPtr::new(buf.as_mut_ptr());
        // SAFETY: buf is a live local array of 4 bytes.
        assert!(unsafe { cached_read(file.as_raw_fd(), at, 4, 1) });
        assert_eq!(&buf, b"bcde");
        // Reaching end of file: short, so false (the caller's usual read zero-fills).
        // SAFETY: as above.
        assert!(!unsafe { cached_read(file.as_raw_fd(), at, 4, 4) });
    }

    #[test]
    fn read_past_end_of_file_zero_fills() {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"abcdef").unwrap();
        let mut buf = [0xffu8; 10];
        let at = BufPtr::new(buf.as_mut_ptr());
        // SAFETY: buf is a live local array of 10 bytes.
        let got = unsafe { transfer(Direction::Read, file.as_raw_fd(), at, 10, 2, false) }.unwrap();
        assert_eq!(got, 4);
        assert_eq!(&buf, b"cdef\0\0\0\0\0\0");
    }

    #[test]
    fn write_then_read_back() {
        let file = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let fd = file.as_raw_fd();
        // SAFETY: data and out are live vectors of the given lengths.
        unsafe {
            let src = BufPtr::from_const(data.as_ptr());
            transfer(Direction::Write, fd, src, data.len(), 4096, false).unwrap();
        }
        let mut out = vec![0u8; data.len()];
        let dst = BufPtr::new(out.as_mut_ptr());
        // SAFETY: as above.
        let got = unsafe { transfer(Direction::Read, fd, dst, out.len(), 4096, false) }.unwrap();
        assert_eq!(got, data.len());
        assert_eq!(out, data);
    }

    #[test]
    fn errors_carry_errno() {
        let mut buf = [0u8; 4];
        let at = BufPtr::new(buf.as_mut_ptr());
        // SAFETY: buf is valid; fd -1 is invalid on purpose.
        let err = unsafe { transfer(Direction::Read, -1, at, 4, 0, false) }.unwrap_err();
        assert_eq!(err.source.raw_os_error(), Some(libc::EBADF));
        assert_eq!(err.done, 0);
    }
}
