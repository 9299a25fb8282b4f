//! One open file: descriptors, end-of-address and end-of-file markers, locking, truncation, and
//! the dispatch of reads and writes to the I/O paths. Semantics follow HDF5's sec2 driver.

use crate::abi::{haddr_t, H5FD_mem_t, H5F_ACC_RDWR, H5F_ACC_TRUNC, HADDR_UNDEF, MAXADDR};
use crate::config::{DirectIo, VfdSettings};
use crate::cuda::PointerKind;
use crate::error::{Error, Result};
use crate::io::device::{DeviceIo, DevicePathPlan, FileDevicePath};
use crate::io::host::HostIo;
use crate::io::vector::Piece;
use crate::io::{BufPtr, Direction};
use crate::memory;
use crate::remote::RemoteFile;
use crate::url_name::is_url;
use std::cmp::Ordering;
use std::ffi::{c_int, CStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, IntoRawFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

mod path_open;
use path_open::{open_fd, open_untouched, remove_if_same};

/// The state of one open file. HDF5 hands callbacks `const` and non-`const` pointers to the same
/// file, and `cmp` may get one file twice, so every method takes `&self`: what changes (the
/// markers) is behind atomics, and no `&mut` to a file's state is ever made.
#[derive(Debug)]
pub(crate) struct OpenFile {
    pub(crate) path: String,
    /// The descriptor; `None` for a remote file.
    file: Option<File>,
    /// The descriptor as a C int, whose address `get_handle` hands out.
    pub(crate) raw_fd: c_int,
    /// A second descriptor with `O_DIRECT`, when `direct_io` is in effect for this file.
    direct: Option<File>,
    /// End of address space and end of file. HDF5 serialises its calls into a driver, so
    /// relaxed ordering suffices; atomics only make the markers changeable through `&self`.
    eoa: AtomicU64,
    eof: AtomicU64,
    device: u64,
    inode: u64,
    ignore_disabled_locks: bool,
    pub(crate) settings: VfdSettings,
    /// How device buffers reach this file.
    device_path: FileDevicePath,
    /// A remote file (a URL as file name), read-only: every read goes to it.
    pub(crate) remote: Option<std::sync::Arc<RemoteFile>>,
}

/// sec2's `ADDR_OVERFLOW`: undefined, or beyond what `off_t` can address.
fn addr_overflows(addr: haddr_t) -> bool {
    addr == HADDR_UNDEF || addr & !MAXADDR != 0
}

/// sec2's `REGION_OVERFLOW`.
#[inline]
fn region_overflows(addr: haddr_t, size: u64) -> bool {
    let end = addr.checked_add(size);
    addr_overflows(addr)
        || addr_overflows(size)
        || end.is_none_or(|e| e == HADDR_UNDEF || e > MAXADDR)
}

/// sec2's `REGION_OVERFLOW`, as an error naming the range.
pub(crate) fn check_region(addr: haddr_t, size: u64, maxaddr: haddr_t) -> Result<()> {
    if region_overflows(addr, size) {
        return Err(Error::Overflow {
            addr,
            size,
            maxaddr,
        });
    }
    Ok(())
}

/// The I/O path for host buffers under `settings`, for the open log line and `h5gds info`.
pub(crate) fn host_path_description(settings: &VfdSettings, direct: bool) -> String {
    format!(
        "POSIX pread/pwrite{}, {} threads for requests of {} or more",
        if direct {
            " with O_DIRECT for aligned transfers"
        } else {
            ""
        },
        settings.nthreads,
        crate::config::format_size(settings.task_size as u64),
    )
}

impl OpenFile {
    /// Opens `path` with HDF5 access `flags` (RDWR, CREAT, TRUNC, EXCL) as sec2 does.
    pub(crate) fn open(
        c_path: &CStr,
        flags: u32,
        maxaddr: haddr_t,
        settings: VfdSettings,
        ignore_disabled_locks: bool,
    ) -> Result<Self> {
        let path = &*c_path.to_string_lossy();
        if path.is_empty() {
            return Err(Error::InvalidArgument("invalid file name: empty".into()));
        }
        if maxaddr == 0 || addr_overflows(maxaddr) {
            return Err(Error::InvalidArgument(format!("bogus maxaddr {maxaddr}")));
        }
        if is_url(path) {
            return Self::open_remote(path, flags, settings);
        }
        let access = if flags & H5F_ACC_RDWR != 0 {
            libc::O_RDWR
        } else {
            libc::O_RDONLY
        };
        let open_error = |source| Error::Open {
            path: path.to_string(),
            flags,
            source,
        };
        // Every check that can refuse the open runs before the file system is changed: settings
        // and CUDA first, then (needing the file) O_DIRECT and cuFile on a file opened without
        // O_TRUNC, or created with O_EXCL so that it is known to be this open's own.
        let device_plan = DevicePathPlan::prepare(&settings, true)?;
        let (file, created) = open_untouched(c_path, access, flags).map_err(open_error)?;
        let refuse = |err: Error| {
            if let Some(created) = &created {
                remove_if_same(created, &file);
            }
            err
        };
        let direct = match settings.direct_io {
            DirectIo::Off => None,
            mode => {
                match open_fd(c_path, access | libc::O_DIRECT) {
                    Ok(f) => Some(f),
                    Err(source) if mode == DirectIo::On => {
                        return Err(refuse(Error::DirectIoRefused {
                            path: path.to_string(),
                            source,
                        }))
                    }
                    Err(err) => {
                        tracing::info!("direct_io=auto: O_DIRECT refused for {path:?} ({err}); using buffered I/O");
                        None
                    }
                }
            }
        };
        let device_path = device_plan
            .finish(&settings, c_path, flags & H5F_ACC_RDWR != 0)
            .map_err(refuse)?;
        let meta = file.metadata().map_err(|source| Error::File {
            op: "fstat",
            path: path.to_string(),
            source,
        })?;
        // Accepted: now the file may be emptied, as sec2's O_TRUNC would have (which leaves
        // devices and FIFOs as they are).
        let emptied = flags & H5F_ACC_TRUNC != 0 && created.is_none() && meta.is_file();
        if emptied {
            file.set_len(0).map_err(|source| Error::File {
                op: "truncate (open with H5F_ACC_TRUNC)",
                path: path.to_string(),
                source,
            })?;
        }
        use std::os::unix::fs::MetadataExt;
        Ok(OpenFile {
            path: path.to_string(),
            raw_fd: file.as_raw_fd(),
            file: Some(file),
            direct,
            eoa: AtomicU64::new(0),
            eof: AtomicU64::new(if emptied { 0 } else { meta.len() }),
            device: meta.dev(),
            inode: meta.ino(),
            ignore_disabled_locks,
            settings,
            device_path,
            remote: None,
        })
    }

    /// Opens a URL read-only (`remote`): nothing is sent for a write mode. Device buffers take
    /// the staged path (no descriptor for cuFile) where CUDA works.
    fn open_remote(url: &str, flags: u32, settings: VfdSettings) -> Result<Self> {
        let remote = RemoteFile::open_shared(url, flags, &settings.remote)?;
        let device_path = match crate::cuda::cuda() {
            Ok(_) => FileDevicePath::Staged(
                "a remote file: ranged GETs into pinned bounce buffers, then copied".into(),
            ),
            Err(e) => FileDevicePath::Unavailable(e.to_string()),
        };
        Ok(OpenFile {
            path: remote.url.clone(),
            file: None,
            raw_fd: -1,
            direct: None,
            eoa: AtomicU64::new(0),
            eof: AtomicU64::new(remote.size),
            device: 0,
            inode: 0,
            ignore_disabled_locks: true,
            settings,
            device_path,
            remote: Some(remote),
        })
    }

    /// Closes the descriptors, reporting a failed `close` as sec2 does; for a remote file, says
    /// at `H5GDS_LOG=info` how many requests it took.
    pub(crate) fn close(self) -> Result<()> {
        if let Some(remote) = &self.remote {
            tracing::info!("closed {}: {}", remote.url, remote.requests_summary());
        }
        drop(self.direct);
        let Some(file) = self.file else {
            return Ok(());
        };
        let fd = file.into_raw_fd();
        // SAFETY: fd was owned by `self.file`, which gave it up above.
        if unsafe { libc::close(fd) } < 0 {
            return Err(Error::File {
                op: "close",
                path: self.path,
                source: io::Error::last_os_error(),
            });
        }
        Ok(())
    }

    /// The I/O paths in effect for host and device buffers, for the open log line.
    pub(crate) fn path_descriptions(&self) -> (String, String) {
        (
            match &self.remote {
                Some(remote) => remote.describe(),
                None => host_path_description(&self.settings, self.direct.is_some()),
            },
            self.device_path.describe(&self.settings),
        )
    }

    pub(crate) fn eoa(&self) -> haddr_t {
        self.eoa.load(Relaxed)
    }

    pub(crate) fn eof(&self) -> haddr_t {
        self.eof.load(Relaxed)
    }

    pub(crate) fn host(&self) -> HostIo<'_> {
        HostIo {
            fd: self.raw_fd,
            direct_fd: self.direct.as_ref().map(|f| f.as_raw_fd()),
            path: &self.path,
            nthreads: self.settings.nthreads,
            task_size: self.settings.task_size,
            remote: self.remote.as_deref(),
        }
    }

    /// One transfer of `size` bytes at `addr`, to or from host or device memory at `buf`.
    ///
    /// # Safety
    /// `buf` must be valid for `size` bytes in direction `dir`.
    unsafe fn transfer_one(
        &self,
        dir: Direction,
        addr: haddr_t,
        size: usize,
        buf: BufPtr,
        mem_type: H5FD_mem_t,
    ) -> Result<()> {
        let device = DeviceIo {
            path: &self.device_path,
            fd: self.raw_fd,
            file_name: &self.path,
            settings: &self.settings,
            remote: self.remote.as_deref(),
        };
        memory::dispatch(
            buf,
            size,
            mem_type,
            // SAFETY: the caller's contract.
            || unsafe { self.host().transfer(dir, addr, buf, size) },
            // SAFETY: `buf + off .. + n` lies in the device range (the driver's answer) and in
            // the caller's buffer of `size` bytes.
            |range, off, n| unsafe {
                let buf_off = buf.addr() + off - range.base as usize;
                device.transfer(dir, range, buf_off, n, addr + off as u64)
            },
        )
    }

    /// Checks a request's range before anything moves; notes (at debug level) a read that
    /// reaches past end of file, which reads zeros.
    pub(crate) fn check(&self, dir: Direction, addr: haddr_t, size: usize) -> Result<()> {
        check_region(addr, size as u64, MAXADDR)?;
        if dir == Direction::Read && addr + size as u64 > self.eof() {
            // With the driver's logger made current here: the small-transfer paths that call
            // this run without it (`transfer`).
            crate::log::with_logging(|| {
                tracing::debug!(
                    "read of {size} bytes at {addr} in {:?} extends past EOF {}: zero-filled",
                    self.path,
                    self.eof()
                )
            });
        }
        Ok(())
    }

    /// Moves end of file up to `end` after a write that reached it.
    pub(crate) fn grow_eof(&self, end: haddr_t) {
        self.eof.fetch_max(end, Relaxed);
    }

    /// Moves `size` bytes between the file at `addr` and `buf`, host or device memory. Callable
    /// without the driver's logger current (the trampolines run it through `guard_quiet`): the
    /// short way logs nothing, and every other way makes the logger current itself.
    ///
    /// The short way, for a transfer of at most one task to memory known to be host memory
    /// (every metadata read and write, and small raw data in the caller's stack or the brk heap):
    /// one `pread`/`pwrite` loop on this thread, with no CUDA question, no logger set-up and no
    /// split, which is where the other way ends for such a transfer too (`memory::dispatch`,
    /// then `run_split`'s single task). What it saves was counted with callgrind per callback
    /// (docs/performance.md).
    ///
    /// # Safety
    /// `buf` must be valid for `size` bytes in direction `dir`.
    pub(crate) unsafe fn transfer(
        &self,
        dir: Direction,
        addr: haddr_t,
        size: usize,
        buf: BufPtr,
        mem_type: H5FD_mem_t,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        if unsafe { self.one_call(dir, addr, size, buf, mem_type) } {
            return Ok(());
        }
        // SAFETY: the caller's contract.
        unsafe { self.transfer_other_ways(dir, addr, size, buf, mem_type) }
    }

    /// `transfer` where `one_call` did not do it: apart, so that the one call's path sets up
    /// nothing the others need (registers saved, a frame: a fifth of its instructions).
    ///
    /// # Safety
    /// As `transfer`.
    #[inline(never)]
    unsafe fn transfer_other_ways(
        &self,
        dir: Direction,
        addr: haddr_t,
        size: usize,
        buf: BufPtr,
        mem_type: H5FD_mem_t,
    ) -> Result<()> {
        // Not for the one call: a small pread/pwrite into host memory changes no pointer's kind,
        // and the boundary's atomic add cost a tenth of sec2's whole call.
        crate::memory::callback_boundary();
        self.check(dir, addr, size)?;
        if size <= self.settings.task_size && memory::certainly_host(buf, mem_type) {
            // SAFETY: the caller's contract; host memory of `size` bytes.
            unsafe { self.host().one(dir, addr, buf, size) }?;
        } else {
            // SAFETY: the caller's contract.
            crate::log::with_logging(|| unsafe {
                self.transfer_one(dir, addr, size, buf, mem_type)
            })?;
        }
        if dir == Direction::Write && addr + size as u64 > self.eof() {
            self.grow_eof(addr + size as u64);
        }
        Ok(())
    }

    /// The shortest way, sec2's: a small transfer between a local file and memory known to be host
    /// memory, inside the address range and (for a read) inside end of file, as one `pread` or
    /// `pwrite` that moves every byte. True when it did; false where anything else applies (a
    /// remote file, `O_DIRECT`, a range to refuse, a read reaching end of file, which zero-fills)
    /// or the call moved fewer bytes, failed or was interrupted: then nothing is concluded and the
    /// transfer's other ways run it from the start, with their retries, zero-filling and errors (a
    /// write done again puts the same bytes at the same place). Every HDF5 metadata read and write
    /// comes here; per call it does what sec2's does (`docs/performance.md`, the per-call rows).
    ///
    /// # Safety
    /// `buf` must be valid for `size` bytes in direction `dir`.
    #[inline]
    unsafe fn one_call(
        &self,
        dir: Direction,
        addr: haddr_t,
        size: usize,
        buf: BufPtr,
        mem_type: H5FD_mem_t,
    ) -> bool {
        let end = addr.wrapping_add(size as u64);
        let plain = self.remote.is_none() && self.direct.is_none();
        if !plain
            || size == 0
            || size > self.settings.task_size
            || region_overflows(addr, size as u64)
            || (dir == Direction::Read && end > self.eof())
            || !memory::certainly_host(buf, mem_type)
        {
            return false;
        }
        // SAFETY: the caller's contract: `buf` is valid for `size` bytes in this direction; the
        // descriptor is this open file's. `addr` fits `off_t` (`check_region`).
        let moved = unsafe {
            match dir {
                Direction::Read => {
                    libc::pread(self.raw_fd, buf.as_ptr().cast(), size, addr as libc::off_t)
                }
                Direction::Write => libc::pwrite(
                    self.raw_fd,
                    buf.as_ptr().cast_const().cast(),
                    size,
                    addr as libc::off_t,
                ),
            }
        };
        if moved != size as isize {
            return false;
        }
        // Most metadata writes land inside end of file: a load, not a read-modify-write.
        if dir == Direction::Write && end > self.eof() {
            self.grow_eof(end);
        }
        true
    }

    /// A vector request. Host pieces are handled together (coalesced); device pieces one by one.
    ///
    /// # Safety
    /// Every piece's buffer must be valid for its length in direction `dir`; for reads, pieces'
    /// buffers must not overlap each other.
    pub(crate) unsafe fn transfer_vector(&self, dir: Direction, pieces: Vec<Piece>) -> Result<()> {
        // HDF5's selection I/O hands each small contiguous write over as a vector of one.
        if let [one] = pieces.as_slice() {
            // SAFETY: the caller's contract for the one piece.
            return unsafe { self.transfer(dir, one.addr, one.len, one.buf, one.mem_type) };
        }
        // SAFETY: the caller's contract.
        crate::log::with_logging(|| unsafe { self.transfer_pieces(dir, pieces) })
    }

    /// `transfer_vector` of several pieces, with the driver's logger current.
    ///
    /// # Safety
    /// As `transfer_vector`.
    unsafe fn transfer_pieces(&self, dir: Direction, pieces: Vec<Piece>) -> Result<()> {
        for p in &pieces {
            self.check(dir, p.addr, p.len)?;
        }
        let end = pieces.iter().map(|p| p.addr + p.len as u64).max();
        let mut host = Vec::with_capacity(pieces.len());
        let mut device = Vec::new();
        for p in pieces {
            match memory::classify(p.buf, p.mem_type)? {
                PointerKind::Host => host.push(p),
                PointerKind::Device { .. } => device.push(p),
            }
        }
        // SAFETY: the caller's contract, piece by piece.
        unsafe {
            match host.as_slice() {
                [] => {}
                [one] => self.host().transfer(dir, one.addr, one.buf, one.len)?,
                _ => crate::io::strided::transfer_pieces(&self.host(), host, dir)?,
            }
            // Through `dispatch` again (a cache hit), for its retry on stale ranges.
            for p in device {
                self.transfer_one(dir, p.addr, p.len, p.buf, p.mem_type)?;
            }
        }
        if let (Direction::Write, Some(end)) = (dir, end) {
            self.eof.fetch_max(end, Relaxed);
        }
        Ok(())
    }

    /// HDF5's `ctl(MEM_COPY)`: copies between buffers either of which may be device memory
    /// (compact datasets read into or written from a device buffer come through here).
    ///
    /// # Safety
    /// `src` must be valid for reads and `dst` for writes of `len` bytes.
    pub(crate) unsafe fn mem_copy(
        (dst_base, dst_off): (BufPtr, usize),
        (src_base, src_off): (BufPtr, usize),
        len: usize,
    ) -> Result<()> {
        let (dst_kind, src_kind) = (
            memory::classify_copy_base(0, dst_base)?,
            memory::classify_copy_base(1, src_base)?,
        );
        let (dst, src) = (dst_base.add(dst_off), src_base.add(src_off));
        // The copy runs in the device side's context (the destination's if both are device).
        let context = match (dst_kind, src_kind) {
            (PointerKind::Device(range), _) | (_, PointerKind::Device(range)) => range.context,
            (PointerKind::Host, PointerKind::Host) => {
                // SAFETY: the caller's contract; `copy` allows overlap.
                unsafe { std::ptr::copy(src.as_ptr(), dst.as_ptr(), len) };
                return Ok(());
            }
        };
        // SAFETY: the caller's contract; CUDA addresses host and device memory alike.
        unsafe { crate::cuda::copy_any(context, dst.addr(), src.addr(), len) }
            .map_err(|e| Error::Device(format!("memory copy of {len} bytes: {e}")))
    }

    pub(crate) fn set_eoa(&self, addr: haddr_t) -> Result<()> {
        if addr_overflows(addr) {
            return Err(Error::Overflow {
                addr,
                size: 0,
                maxaddr: MAXADDR,
            });
        }
        self.eoa.store(addr, Relaxed);
        Ok(())
    }

    /// Makes the file exactly EOA bytes long, as sec2 does (on flush and close).
    pub(crate) fn truncate(&self) -> Result<()> {
        let eoa = self.eoa();
        let Some(file) = &self.file else {
            // A remote file is read-only, and HDF5 truncates only files open for writing.
            if eoa == self.eof() {
                return Ok(());
            }
            return Err(Error::InvalidArgument(format!(
                "truncate of {}: a remote file is read-only",
                self.path
            )));
        };
        if eoa != self.eof() {
            file.set_len(eoa).map_err(|source| Error::File {
                op: "ftruncate",
                path: self.path.clone(),
                source,
            })?;
            self.eof.store(eoa, Relaxed);
        }
        Ok(())
    }

    /// `flock(op)`, without blocking; a file system without locks is no error where the user
    /// asked HDF5 to ignore that (nothing is locked then).
    fn flock(&self, op: c_int, what: &'static str) -> Result<()> {
        if self.file.is_none() {
            // A remote object: nothing here to lock; every request is pinned to its version.
            return Ok(());
        }
        // SAFETY: flock on a descriptor this struct owns.
        if unsafe { libc::flock(self.raw_fd, op | libc::LOCK_NB) } < 0 {
            let err = io::Error::last_os_error();
            if self.ignore_disabled_locks && err.raw_os_error() == Some(libc::ENOSYS) {
                return Ok(());
            }
            return Err(Error::File {
                op: what,
                path: self.path.clone(),
                source: err,
            });
        }
        Ok(())
    }

    /// An advisory lock: exclusive for read-write access, shared for read-only.
    pub(crate) fn lock(&self, rw: bool) -> Result<()> {
        self.flock(
            if rw { libc::LOCK_EX } else { libc::LOCK_SH },
            "unable to lock file (flock)",
        )
    }

    pub(crate) fn unlock(&self) -> Result<()> {
        self.flock(libc::LOCK_UN, "unable to unlock file (flock)")
    }

    /// Files are the same when device and inode match (sec2's order: device first).
    pub(crate) fn compare(&self, other: &OpenFile) -> Ordering {
        // Remote files (device and inode 0) are the same when their URLs are.
        let url = |f: &OpenFile| f.remote.as_ref().map(|r| r.url.clone());
        (self.device, self.inode)
            .cmp(&(other.device, other.inode))
            .then_with(|| url(self).cmp(&url(other)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{H5FD_MEM_DRAW, H5F_ACC_CREAT, H5F_ACC_EXCL};
    use std::ffi::CString;

    fn c(path: &std::path::Path) -> CString {
        CString::new(path.to_str().unwrap()).unwrap()
    }

    fn read(f: &OpenFile, addr: haddr_t, buf: &mut [u8]) -> Result<()> {
        let at = BufPtr::new(buf.as_mut_ptr());
        // SAFETY: `at` is a live, exclusively borrowed slice of buf.len() bytes.
        unsafe { f.transfer(Direction::Read, addr, buf.len(), at, H5FD_MEM_DRAW) }
    }

    fn write(f: &OpenFile, addr: haddr_t, data: &[u8]) -> Result<()> {
        let at = BufPtr::from_const(data.as_ptr());
        // SAFETY: `at` is a live slice of data.len() bytes, only read.
        unsafe { f.transfer(Direction::Write, addr, data.len(), at, H5FD_MEM_DRAW) }
    }

    fn create(path: &std::path::Path, settings: VfdSettings) -> Result<OpenFile> {
        let flags = H5F_ACC_RDWR | H5F_ACC_CREAT | H5F_ACC_TRUNC;
        OpenFile::open(&c(path), flags, MAXADDR, settings, true)
    }

    #[test]
    fn open_flags_follow_sec2() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.h5");
        let missing =
            OpenFile::open(&c(&path), 0, MAXADDR, VfdSettings::default(), true).unwrap_err();
        assert!(
            matches!(&missing, Error::Open { source, .. } if source.kind() == io::ErrorKind::NotFound)
        );
        assert!(missing.to_string().contains("f.h5"));
        create(&path, VfdSettings::default())
            .unwrap()
            .close()
            .unwrap();
        let excl = H5F_ACC_RDWR | H5F_ACC_CREAT | H5F_ACC_EXCL;
        let exists =
            OpenFile::open(&c(&path), excl, MAXADDR, VfdSettings::default(), true).unwrap_err();
        assert!(
            matches!(&exists, Error::Open { source, .. } if source.kind() == io::ErrorKind::AlreadyExists)
        );
        let read_only =
            OpenFile::open(&c(&path), 0, MAXADDR, VfdSettings::default(), true).unwrap();
        let err = OpenFile::open(&c(&path), 0, 0, VfdSettings::default(), true).unwrap_err();
        assert!(err.to_string().contains("bogus maxaddr"));
        // Writing through a read-only descriptor fails with EBADF, naming file and offset.
        let err = write(&read_only, 8, &[1u8, 2, 3, 4]).unwrap_err();
        assert!(err.to_string().contains("offset 8"), "{err}");
    }

    #[test]
    fn a_refused_open_removes_only_the_file_it_created() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mine.h5");
        let create = H5F_ACC_RDWR | H5F_ACC_CREAT | H5F_ACC_TRUNC;
        let (ours, created) = open_untouched(&c(&path), libc::O_RDWR, create).unwrap();
        assert!(created.is_some());
        // Another process replaces the name between this open and its refusal.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"another process's file").unwrap();
        remove_if_same(&c(&path), &ours);
        assert_eq!(std::fs::read(&path).unwrap(), b"another process's file");
        // An existing file is opened, not created, and not truncated yet.
        let (again, created) = open_untouched(&c(&path), libc::O_RDWR, create).unwrap();
        assert!(created.is_none());
        assert_eq!(again.metadata().unwrap().len(), 22);
        // The name still holding this open's own file: removed.
        std::fs::remove_file(&path).unwrap();
        let (ours, created) = open_untouched(&c(&path), libc::O_RDWR, create).unwrap();
        assert!(created.is_some());
        remove_if_same(&c(&path), &ours);
        assert!(!path.exists());
    }

    #[test]
    fn locks_conflict_between_open_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock.h5");
        let a = create(&path, VfdSettings::default()).unwrap();
        let b = OpenFile::open(&c(&path), 0, MAXADDR, VfdSettings::default(), true).unwrap();
        a.lock(true).unwrap();
        let err = b.lock(false).unwrap_err();
        assert!(err.to_string().contains("unable to lock file"), "{err}");
        a.unlock().unwrap();
        b.lock(false).unwrap();
        assert_eq!(a.compare(&b), Ordering::Equal);
        let other = create(&dir.path().join("other.h5"), VfdSettings::default()).unwrap();
        assert_ne!(a.compare(&other), Ordering::Equal);
    }

    #[test]
    fn addresses_are_checked_for_overflow() {
        assert!(check_region(0, 10, MAXADDR).is_ok());
        assert!(check_region(HADDR_UNDEF, 1, MAXADDR).is_err());
        assert!(check_region(MAXADDR, 1, MAXADDR).is_err());
        assert!(check_region(1, u64::MAX - 1, MAXADDR).is_err());
        let dir = tempfile::tempdir().unwrap();
        let f = create(&dir.path().join("o.h5"), VfdSettings::default()).unwrap();
        assert!(matches!(
            f.set_eoa(HADDR_UNDEF),
            Err(Error::Overflow { .. })
        ));
        let err = read(&f, MAXADDR - 1, &mut [0u8; 4]).unwrap_err();
        assert!(err.to_string().contains("overflows"), "{err}");
    }

    /// The one-call way and the ways behind it agree: small writes inside and past end of file
    /// (which moves it), reads inside it, a read reaching past it (zeros), a read of bytes the
    /// file lost behind the driver's back (short: zeros, as sec2 reads them), and metadata and
    /// raw data alike.
    #[test]
    fn small_transfers_keep_sec2s_bytes_and_end_of_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("small.h5");
        let f = create(&path, VfdSettings::default()).unwrap();
        let data: Vec<u8> = (0..600u32).map(|i| (i % 251) as u8).collect();
        write(&f, 0, &data[..512]).unwrap();
        assert_eq!(f.eof(), 512);
        write(&f, 100, &data[100..108]).unwrap();
        assert_eq!(f.eof(), 512);
        let at = BufPtr::from_const(data[512..].as_ptr());
        // SAFETY: `at` is a live slice of 88 bytes, only read.
        unsafe { f.transfer(Direction::Write, 512, 88, at, crate::abi::H5FD_MEM_SUPER) }.unwrap();
        assert_eq!(f.eof(), 600);
        assert_eq!(std::fs::read(&path).unwrap(), data);
        let mut buf = [0xeeu8; 40];
        read(&f, 300, &mut buf).unwrap();
        assert_eq!(buf[..], data[300..340]);
        read(&f, 580, &mut buf).unwrap();
        assert_eq!(buf[..20], data[580..]);
        assert_eq!(buf[20..], [0u8; 20]);
        // Shortened by another hand: the driver's end of file still says 600.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(550)
            .unwrap();
        let mut buf = [0xeeu8; 40];
        read(&f, 530, &mut buf).unwrap();
        assert_eq!(buf[..20], data[530..550]);
        assert_eq!(buf[20..], [0u8; 20]);
    }

    #[test]
    fn truncate_sets_the_length_to_eoa() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.h5");
        let f = create(&path, VfdSettings::default()).unwrap();
        f.set_eoa(10_000).unwrap();
        f.truncate().unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 10_000);
        assert_eq!(f.eof(), 10_000);
        f.set_eoa(100).unwrap();
        f.truncate().unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 100);
    }

    #[test]
    fn direct_io_on_opens_an_o_direct_descriptor() {
        let dir = tempfile::tempdir().unwrap();
        let settings = VfdSettings {
            direct_io: DirectIo::On,
            ..VfdSettings::default()
        };
        let f = create(&dir.path().join("d.h5"), settings).unwrap();
        assert!(f.direct.is_some());
        assert!(f.path_descriptions().0.contains("O_DIRECT"));
        // SAFETY: fcntl on a descriptor the file owns.
        let fl = unsafe { libc::fcntl(f.direct.as_ref().unwrap().as_raw_fd(), libc::F_GETFL) };
        assert_ne!(fl & libc::O_DIRECT, 0);
    }

    #[test]
    fn small_reads_see_every_write_and_truncate() {
        let dir = tempfile::tempdir().unwrap();
        let f = create(&dir.path().join("ra.h5"), VfdSettings::default()).unwrap();
        f.lock(true).unwrap();
        let mut buf = [0u8; 4];
        write(&f, 100, b"abcd").unwrap();
        read(&f, 100, &mut buf).unwrap();
        assert_eq!(&buf, b"abcd");
        // Past end of file: zeros, until a write puts bytes there.
        read(&f, 200, &mut buf).unwrap();
        assert_eq!(buf, [0; 4]);
        write(&f, 200, b"wxyz").unwrap();
        read(&f, 200, &mut buf).unwrap();
        assert_eq!(&buf, b"wxyz");
        f.set_eoa(202).unwrap();
        f.truncate().unwrap();
        read(&f, 200, &mut buf).unwrap();
        assert_eq!(&buf, b"wx\0\0");
    }

    #[test]
    fn the_short_way_and_the_long_way_move_the_same_bytes() {
        // A transfer of at most one task into memory known to be host memory (here a local,
        // or metadata) takes the short way; a larger one, or one into a mapping nobody vouches
        // for, the long way (dispatch, split). Both must read and write the same bytes, and
        // both zero-fill past end of file.
        let dir = tempfile::tempdir().unwrap();
        let settings = VfdSettings {
            task_size: 4096,
            ..VfdSettings::default()
        };
        let f = create(&dir.path().join("ways.h5"), settings).unwrap();
        let pattern: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        write(&f, 0, &pattern).unwrap(); // 10 000 bytes: the long way
        let mut local = [0u8; 64];
        assert!(memory::certainly_host(
            BufPtr::new(local.as_mut_ptr()),
            H5FD_MEM_DRAW
        ));
        read(&f, 5000, &mut local).unwrap();
        assert_eq!(&local[..], &pattern[5000..5064]);
        // A fresh anonymous mapping is host memory known as such only where CUDA does not work
        // (as in this test); a read of more than one task into it takes the long way anyway.
        // SAFETY: a new private read-write mapping, unmapped below.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                1 << 16,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED);
        let mapped = BufPtr::new(map.cast());
        assert!(memory::certainly_host(mapped, crate::abi::H5FD_MEM_SUPER));
        // SAFETY: the mapping holds 64 KiB, written by the reads only.
        unsafe {
            let got = std::slice::from_raw_parts(map.cast::<u8>(), 1 << 16);
            f.transfer(Direction::Read, 0, 1 << 16, mapped, H5FD_MEM_DRAW)
                .unwrap();
            assert_eq!(&got[..10_000], &pattern[..]);
            assert!(got[10_000..].iter().all(|&b| b == 0));
            // Metadata into the same mapping: the short way, past end of file zero-filled.
            f.transfer(
                Direction::Read,
                9990,
                64,
                mapped,
                crate::abi::H5FD_MEM_SUPER,
            )
            .unwrap();
            assert_eq!(&got[..10], &pattern[9990..]);
            assert!(got[10..64].iter().all(|&b| b == 0));
            assert_eq!(&got[64..10_000], &pattern[64..]);
            libc::munmap(map, 1 << 16);
        }
        // A short-way write, read back the long way.
        write(&f, 20_000, b"short way").unwrap();
        let mut back = vec![0u8; 20_009];
        read(&f, 0, &mut back).unwrap();
        assert_eq!(&back[20_000..], b"short way");
        assert_eq!(&back[..10_000], &pattern[..]);
        assert_eq!(f.eof(), 20_009);
    }

    #[test]
    fn small_reads_see_another_writer_locked_or_not() {
        // Another program writing the file (cp, rsync --inplace: no HDF5 lock keeps it out) is
        // seen at the next read, whether or not this process holds the file's lock: sec2 never
        // returns bytes the file no longer holds.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("locks.h5");
        std::fs::write(&path, [1u8; 8192]).unwrap();
        let other = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let f = OpenFile::open(&c(&path), 0, MAXADDR, VfdSettings::default(), true).unwrap();
        let mut buf = [0u8; 4];
        let changed = |byte: u8| {
            use std::os::unix::fs::FileExt;
            other.write_all_at(&[byte; 4], 4000).unwrap();
        };
        read(&f, 4000, &mut buf).unwrap();
        changed(2);
        read(&f, 4000, &mut buf).unwrap();
        assert_eq!(buf, [2; 4], "unlocked");
        f.lock(false).unwrap();
        read(&f, 4002, &mut buf[..2]).unwrap();
        changed(3);
        read(&f, 4000, &mut buf).unwrap();
        assert_eq!(buf, [3; 4], "locked");
        other.set_len(4001).unwrap();
        read(&f, 3999, &mut buf).unwrap();
        assert_eq!(buf, [1, 3, 0, 0], "locked, truncated by the other writer");
    }

    #[test]
    fn creating_through_a_dangling_link_creates_its_target_as_sec2_does() {
        let dir = tempfile::tempdir().unwrap();
        let (link, target) = (dir.path().join("link.h5"), dir.path().join("target.h5"));
        std::os::unix::fs::symlink("target.h5", &link).unwrap();
        let chained = dir.path().join("chained.h5");
        std::os::unix::fs::symlink(&link, &chained).unwrap();
        let flags = H5F_ACC_RDWR | H5F_ACC_CREAT | H5F_ACC_TRUNC;
        let (_, created) = open_untouched(&c(&chained), libc::O_RDWR, flags).unwrap();
        assert_eq!(created.as_deref(), Some(c(&target).as_c_str()));
        assert!(target.is_file() && std::fs::symlink_metadata(&link).unwrap().is_symlink());
        // Exclusive creation refuses a link, as O_EXCL does; a link into a missing directory
        // is not found.
        std::fs::remove_file(&target).unwrap();
        let err = open_untouched(&c(&link), libc::O_RDWR, flags | H5F_ACC_EXCL).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EEXIST));
        let lost = dir.path().join("lost.h5");
        std::os::unix::fs::symlink("missing/target.h5", &lost).unwrap();
        let err = open_untouched(&c(&lost), libc::O_RDWR, flags).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
        assert!(!target.exists());
    }

    #[test]
    fn truncating_leaves_devices_as_o_trunc_does() {
        let flags = H5F_ACC_RDWR | H5F_ACC_CREAT | H5F_ACC_TRUNC;
        let null = std::path::Path::new("/dev/null");
        let f = OpenFile::open(&c(null), flags, MAXADDR, VfdSettings::default(), true).unwrap();
        assert_eq!(f.eof(), 0);
    }
}
