//! How `cuFileRead` / `cuFileWrite` move bytes, modelled on what real cuFile 1.20 does.
//!
//! * **GDS** (nvidia-fs "present" and the file system accepts `O_DIRECT`): the transfer
//!   bypasses the page cache, as nvidia-fs DMA through `O_DIRECT` does. The emulator reads
//!   and writes through its own `O_DIRECT` descriptor and page-aligned bounce buffers of
//!   `per_buffer_cache_size` (cuFile bounces unaligned and unregistered I/O through
//!   preallocated buffers of that size too, `cufile.h` 1.20 on `cuFileRead`). Whole pages go
//!   `O_DIRECT`; the partial pages at either end of an unaligned write go through the buffered
//!   descriptor, so that two writers of neighbouring unaligned ranges never read-modify-write
//!   the same page. The registered descriptor need not have `O_DIRECT`: since GDS 1.7 /
//!   CUDA 12.2 "files can also be opened with non-O_DIRECT mode. Even in such a case, whenever
//!   the library software deems fit, it will follow the GDS enabled O_DIRECT path" (NVIDIA
//!   GPUDirect Storage Troubleshooting Guide, "Managing Coherency of Data in the Page Cache
//!   and on Disk").
//! * **Compatibility mode** (`H5GDS_EMU_GDS=0`, or a file system that refuses `O_DIRECT`): "the
//!   standard POSIX read/write path" (NVIDIA GPUDirect Storage configuration guide), through
//!   the page cache into host bounce buffers of `per_buffer_cache_size`, each then copied to or
//!   from device memory (libcufile 1.20 logs "compat mode will use posix bounce buffers"), so a
//!   compatibility-mode transfer costs a read plus a copy per buffer, as on a GPU.
//!
//! Host buffers (pageable or pinned) are accepted in both modes: `cufile.h` 1.20 documents
//! `bufPtr_base` as the "base address of buffer in device or host memory". In compatibility
//! mode host memory needs no bounce buffer and is read or written in place; with GDS it takes
//! the same `O_DIRECT` path as device memory.
//!
//! Every function returns the bytes moved (fewer at end of file, or when an error follows some
//! progress), or -1 with errno.

use crate::ffi::{errno, set_errno};
use std::alloc::{self, Layout};
use std::cell::RefCell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::AtomicU64;

/// `properties:per_buffer_cache_size_kb` of cufile.json (what `cuFileDriverGetProperties`
/// reports as `per_buffer_cache_size`, in KiB): 1024, the smallest size cufile.json's own
/// comments allow ("ranging from 1024kb to 16384kb") and max_device_cache_size_kb's default
/// 131072 divided by io_batchsize's default 128.
pub const PER_BUFFER_CACHE_KB: usize = 1024;
/// The bounce buffer size in bytes.
pub const BOUNCE_BYTES: usize = PER_BUFFER_CACHE_KB * 1024;
/// Alignment of `O_DIRECT` offsets, lengths and buffers: the page size, a multiple of every
/// logical block size the emulator meets.
pub const DIRECT_ALIGN: usize = 4096;

/// Bounce-buffer copies of compatibility-mode transfers (the report's "cufile posix bounce
/// copies").
pub static POSIX_BOUNCE_COPIES: AtomicU64 = AtomicU64::new(0);
/// `O_DIRECT` requests made for GDS transfers (the report's "cufile o_direct requests").
pub static DIRECT_REQUESTS: AtomicU64 = AtomicU64::new(0);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Read,
    Write,
}

/// Where a transfer's bytes live in this process.
#[derive(Debug, Clone, Copy)]
pub struct Buffer {
    /// Host-accessible address (for device memory, its shadow).
    pub ptr: *mut u8,
    /// Whether it is device memory (which compatibility mode must bounce).
    pub on_device: bool,
}

/// The descriptors a registered file moves bytes through.
#[derive(Debug, Clone, Copy)]
pub struct Descriptors {
    /// Buffered (page cache).
    pub buffered: c_int,
    /// `O_DIRECT`, for the GDS path; `None` in compatibility mode.
    pub direct: Option<c_int>,
}

/// Moves `len` bytes between `buf` and the file at `offset`.
///
/// # Safety
/// `buf.ptr` must be valid for reads and writes of `len` bytes; the descriptors open.
pub unsafe fn transfer(
    direction: Direction,
    fds: Descriptors,
    buf: Buffer,
    len: usize,
    offset: u64,
) -> isize {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        match fds.direct {
            Some(direct) => gds(direction, direct, fds.buffered, buf.ptr, len, offset),
            None if buf.on_device => bounced(direction, fds.buffered, buf.ptr, len, offset),
            None => posix(direction, fds.buffered, buf.ptr, len, offset),
        }
    }
}

/// A page-aligned bounce buffer of `BOUNCE_BYTES`, one per thread (kept for its next
/// transfer, freed when the thread ends).
struct Bounce(*mut u8);

impl Bounce {
    fn layout() -> Layout {
        Layout::from_size_align(BOUNCE_BYTES, DIRECT_ALIGN).expect("a valid constant layout")
    }

    fn new() -> Option<Bounce> {
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc::alloc(Self::layout()) };
        (!ptr.is_null()).then_some(Bounce(ptr))
    }
}

impl Drop for Bounce {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { alloc::dealloc(self.0, Self::layout()) };
    }
}

thread_local! {
    static BOUNCE: RefCell<Option<Bounce>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's bounce buffer (a fresh one if the thread's is busy or gone, as
/// in a thread-exit destructor); -1/ENOMEM if none can be allocated.
fn with_bounce(f: impl FnOnce(*mut u8) -> isize) -> isize {
    let mut f = Some(f);
    let run = |slot: &RefCell<Option<Bounce>>| -> Option<isize> {
        let mut slot = slot.try_borrow_mut().ok()?;
        if slot.is_none() {
            *slot = Bounce::new();
        }
        let ptr = slot.as_ref()?.0;
        Some((f.take()?)(ptr))
    };
    if let Ok(Some(n)) = BOUNCE.try_with(run) {
        return n;
    }
    match (f.take(), Bounce::new()) {
        (Some(f), Some(bounce)) => f(bounce.0),
        _ => {
            set_errno(libc::ENOMEM);
            -1
        }
    }
}

/// The outcome of a loop that moved `done` bytes and then met `error` (an errno) or not.
fn outcome(done: usize, error: Option<c_int>) -> isize {
    match error {
        Some(e) if done == 0 => {
            set_errno(e);
            -1
        }
        _ => done as isize,
    }
}

/// pread/pwrite until `len` bytes moved, end of file, or an error; retries EINTR. Returns the
/// bytes moved and the error that stopped it, if any.
///
/// # Safety
/// `buf` must be valid for `len` bytes.
unsafe fn posix_loop(
    direction: Direction,
    fd: c_int,
    buf: *mut u8,
    len: usize,
    offset: u64,
) -> (usize, Option<c_int>) {
    let mut done = 0usize;
    while done < len {
        let at = (offset + done as u64) as libc::off_t;
        // SAFETY: buf + done .. buf + len lies inside the caller's buffer.
        let n = unsafe {
            let p = buf.add(done);
            match direction {
                Direction::Read => libc::pread(fd, p.cast(), len - done, at),
                Direction::Write => libc::pwrite(fd, p.cast::<c_void>(), len - done, at),
            }
        };
        if n < 0 {
            match errno() {
                libc::EINTR => continue,
                e => return (done, Some(e)),
            }
        }
        if n == 0 {
            break;
        }
        done += n as usize;
    }
    (done, None)
}

/// Compatibility mode, host memory: POSIX I/O in place.
///
/// # Safety
/// As `transfer`.
unsafe fn posix(direction: Direction, fd: c_int, buf: *mut u8, len: usize, offset: u64) -> isize {
    // SAFETY: the caller's contract.
    let (done, error) = unsafe { posix_loop(direction, fd, buf, len, offset) };
    outcome(done, error)
}

/// Compatibility mode, device memory: POSIX I/O through a host bounce buffer, one
/// `per_buffer_cache_size` piece at a time, each copied to or from the device.
///
/// # Safety
/// As `transfer`.
unsafe fn bounced(direction: Direction, fd: c_int, buf: *mut u8, len: usize, offset: u64) -> isize {
    with_bounce(|bounce| {
        let mut done = 0usize;
        while done < len {
            let piece = (len - done).min(BOUNCE_BYTES);
            let at = offset + done as u64;
            // SAFETY: bounce holds BOUNCE_BYTES >= piece bytes; buf + done .. + piece lies in
            // the caller's buffer; the two never overlap.
            let (moved, error) = unsafe {
                match direction {
                    Direction::Read => {
                        let r = posix_loop(direction, fd, bounce, piece, at);
                        std::ptr::copy_nonoverlapping(bounce, buf.add(done), r.0);
                        r
                    }
                    Direction::Write => {
                        std::ptr::copy_nonoverlapping(buf.add(done), bounce, piece);
                        posix_loop(direction, fd, bounce, piece, at)
                    }
                }
            };
            crate::counters::bump(&POSIX_BOUNCE_COPIES);
            done += moved;
            if error.is_some() || moved < piece {
                return outcome(done, error);
            }
        }
        done as isize
    })
}

fn align_down(x: u64) -> u64 {
    x & !(DIRECT_ALIGN as u64 - 1)
}

fn align_up(x: u64) -> u64 {
    align_down(x + DIRECT_ALIGN as u64 - 1)
}

/// GDS: around the page cache through `direct`, with page-aligned bounce buffers; the partial
/// pages of an unaligned write through `buffered`.
///
/// # Safety
/// As `transfer`.
unsafe fn gds(
    direction: Direction,
    direct: c_int,
    buffered: c_int,
    buf: *mut u8,
    len: usize,
    offset: u64,
) -> isize {
    match direction {
        // SAFETY: the caller's contract.
        Direction::Read => unsafe { gds_read(direct, buffered, buf, len, offset) },
        // SAFETY: the caller's contract.
        Direction::Write => unsafe { gds_write(direct, buffered, buf, len, offset) },
    }
}

/// One `O_DIRECT` request of `len` (aligned) bytes at aligned `offset`, with a buffered retry
/// if the file system refuses this one (EINVAL).
///
/// # Safety
/// `bounce` must be valid for `len` bytes and aligned.
unsafe fn direct_request(
    direction: Direction,
    direct: c_int,
    buffered: c_int,
    bounce: *mut u8,
    len: usize,
    offset: u64,
) -> (usize, Option<c_int>) {
    crate::counters::bump(&DIRECT_REQUESTS);
    // SAFETY: the caller's contract.
    let result = unsafe { posix_loop(direction, direct, bounce, len, offset) };
    match result {
        // SAFETY: as above.
        (0, Some(libc::EINVAL)) => unsafe { posix_loop(direction, buffered, bounce, len, offset) },
        other => other,
    }
}

/// # Safety
/// As `transfer`.
unsafe fn gds_read(direct: c_int, buffered: c_int, buf: *mut u8, len: usize, offset: u64) -> isize {
    with_bounce(|bounce| {
        let end = offset + len as u64;
        let mut pos = offset;
        while pos < end {
            let start = align_down(pos);
            let want_end = end.min(start + BOUNCE_BYTES as u64);
            let span = (align_up(want_end) - start) as usize;
            // SAFETY: span <= BOUNCE_BYTES; bounce is aligned.
            let (got, error) =
                unsafe { direct_request(Direction::Read, direct, buffered, bounce, span, start) };
            let skip = (pos - start) as usize;
            let take = got.saturating_sub(skip).min((want_end - pos) as usize);
            // SAFETY: bounce[skip .. skip + take] was read; buf has room for everything from
            // pos - offset to len.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    bounce.add(skip),
                    buf.add((pos - offset) as usize),
                    take,
                )
            };
            pos += take as u64;
            if error.is_some() || pos < want_end {
                return outcome((pos - offset) as usize, error);
            }
        }
        len as isize
    })
}

/// # Safety
/// As `transfer`.
unsafe fn gds_write(
    direct: c_int,
    buffered: c_int,
    buf: *mut u8,
    len: usize,
    offset: u64,
) -> isize {
    let end = offset + len as u64;
    let head_end = end.min(align_up(offset));
    let tail_start = head_end.max(align_down(end));
    let at = |pos: u64| (pos - offset) as usize;
    // The leading partial page, buffered.
    // SAFETY: [offset, head_end) lies inside the caller's buffer.
    let (moved, error) = unsafe {
        posix_loop(
            Direction::Write,
            buffered,
            buf,
            (head_end - offset) as usize,
            offset,
        )
    };
    if error.is_some() || moved < at(head_end) {
        return outcome(moved, error);
    }
    // Whole pages, O_DIRECT through the bounce buffer.
    let middle = with_bounce(|bounce| {
        let mut pos = head_end;
        while pos < tail_start {
            let piece = ((tail_start - pos) as usize).min(BOUNCE_BYTES);
            // SAFETY: buf holds the piece at pos - offset; bounce holds BOUNCE_BYTES.
            unsafe { std::ptr::copy_nonoverlapping(buf.add(at(pos)), bounce, piece) };
            // SAFETY: piece is a multiple of DIRECT_ALIGN at an aligned offset.
            let (moved, error) =
                unsafe { direct_request(Direction::Write, direct, buffered, bounce, piece, pos) };
            pos += moved as u64;
            if error.is_some() || moved < piece {
                return outcome(at(pos), error);
            }
        }
        at(pos) as isize
    });
    if middle < 0 || (middle as usize) < at(tail_start) {
        return middle;
    }
    // The trailing partial page, buffered.
    // SAFETY: [tail_start, end) lies inside the caller's buffer.
    let (moved, error) = unsafe {
        posix_loop(
            Direction::Write,
            buffered,
            buf.add(at(tail_start)),
            (end - tail_start) as usize,
            tail_start,
        )
    };
    outcome(at(tail_start) + moved, error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 4096) as u8).collect()
    }

    /// A file with `contents` and its buffered and O_DIRECT descriptors.
    fn files(contents: &[u8]) -> (tempfile::TempDir, std::fs::File, std::fs::File) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.bin");
        std::fs::File::create(&path)
            .unwrap()
            .write_all(contents)
            .unwrap();
        let options = || {
            let mut o = std::fs::OpenOptions::new();
            o.read(true).write(true);
            o
        };
        let buffered = options().open(&path).unwrap();
        let direct = options()
            .custom_flags(libc::O_DIRECT)
            .open(&path)
            .expect("the temporary directory's file system accepts O_DIRECT");
        (dir, buffered, direct)
    }

    #[test]
    fn unaligned_reads_and_writes_through_every_path_agree_with_the_file() {
        let size = 3 * BOUNCE_BYTES + 12_345;
        let contents = pattern(size);
        for (name, direct, on_device) in [
            ("gds", true, true),
            ("bounced", false, true),
            ("posix", false, false),
        ] {
            let (dir, buffered, odirect) = files(&contents);
            let fds = Descriptors {
                buffered: buffered.as_raw_fd(),
                direct: direct.then(|| odirect.as_raw_fd()),
            };
            let (off, len) = (4_000u64, 2 * BOUNCE_BYTES + 9_999);
            let mut out = vec![0u8; len];
            let buf = Buffer {
                ptr: out.as_mut_ptr(),
                on_device,
            };
            // SAFETY: out holds len bytes; the descriptors are open.
            let n = unsafe { transfer(Direction::Read, fds, buf, len, off) };
            assert_eq!(n, len as isize, "{name}");
            assert_eq!(
                out[..],
                contents[off as usize..off as usize + len],
                "{name}"
            );
            // Past the end: short, then 0.
            let mut tail = vec![0u8; 10_000];
            let buf = Buffer {
                ptr: tail.as_mut_ptr(),
                on_device,
            };
            // SAFETY: as above.
            let n = unsafe { transfer(Direction::Read, fds, buf, 10_000, size as u64 - 100) };
            assert_eq!(n, 100, "{name}");
            assert_eq!(tail[..100], contents[size - 100..], "{name}");
            // SAFETY: as above.
            let n = unsafe { transfer(Direction::Read, fds, buf, 10, size as u64 + 5) };
            assert_eq!(n, 0, "{name}");
            // An unaligned write in the middle and one extending the file.
            let mut data = pattern(BOUNCE_BYTES + 7_777);
            data.reverse();
            let buf = Buffer {
                ptr: data.as_mut_ptr(),
                on_device,
            };
            // SAFETY: as above.
            let n = unsafe { transfer(Direction::Write, fds, buf, data.len(), 1_234) };
            assert_eq!(n, data.len() as isize, "{name}");
            // SAFETY: as above.
            let n = unsafe { transfer(Direction::Write, fds, buf, data.len(), size as u64 + 99) };
            assert_eq!(n, data.len() as isize, "{name}");
            let mut want = contents.clone();
            want[1_234..1_234 + data.len()].copy_from_slice(&data);
            want.resize(size + 99, 0);
            want.extend_from_slice(&data);
            assert!(
                std::fs::read(dir.path().join("f.bin")).unwrap() == want,
                "{name}: file contents differ"
            );
        }
    }
}
