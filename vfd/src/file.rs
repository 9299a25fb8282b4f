//! One open file: descriptors, end-of-address and end-of-file markers, locking, truncation, and
//! the dispatch of reads and writes to the I/O paths. Semantics follow HDF5's sec2 driver.

use crate::abi::{
    haddr_t, H5FD_mem_t, H5FD_MEM_DRAW, H5F_ACC_CREAT, H5F_ACC_EXCL, H5F_ACC_RDWR,
    H5F_ACC_SWMR_READ, H5F_ACC_TRUNC, HADDR_UNDEF, MAXADDR,
};
use crate::config::{DirectIo, Settings};
use crate::cuda::PointerKind;
use crate::error::{Error, Result};
use crate::io::device::{DeviceIo, DevicePath, DevicePlan};
use crate::io::host::HostIo;
use crate::io::readahead::ReadAhead;
use crate::io::vector::Piece;
use crate::memory;
use std::cmp::Ordering;
use std::ffi::{c_int, CStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd};
use std::os::unix::ffi::OsStrExt;

#[derive(Debug)]
pub struct OpenFile {
    pub path: String,
    file: File,
    /// The descriptor as a C int, whose address `get_handle` hands out.
    pub raw_fd: c_int,
    /// A second descriptor with `O_DIRECT`, when `direct_io` is in effect for this file.
    direct: Option<File>,
    pub eoa: haddr_t,
    pub eof: haddr_t,
    device: u64,
    inode: u64,
    ignore_disabled_locks: bool,
    pub settings: Settings,
    /// How device buffers reach this file.
    pub device_path: DevicePath,
    /// Small raw-data reads into host memory (HDF5's sieve buffer, kept by the driver); off for
    /// SWMR readers, whose file another process changes.
    readahead: Option<ReadAhead>,
}

/// sec2's `ADDR_OVERFLOW`: undefined, or beyond what `off_t` can address.
pub fn addr_overflows(addr: haddr_t) -> bool {
    addr == HADDR_UNDEF || addr & !MAXADDR != 0
}

/// sec2's `REGION_OVERFLOW`, as an error naming the range.
pub fn check_region(addr: haddr_t, size: u64, maxaddr: haddr_t) -> Result<()> {
    let end = addr.checked_add(size);
    let bad = addr_overflows(addr)
        || addr_overflows(size)
        || end.is_none_or(|e| e == HADDR_UNDEF || e > MAXADDR);
    if bad {
        return Err(Error::Overflow {
            addr,
            size,
            maxaddr,
        });
    }
    Ok(())
}

fn open_fd(path: &CStr, flags: c_int) -> io::Result<File> {
    // SAFETY: path is a valid C string; the mode is sec2's (0666 less the umask).
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            flags | libc::O_CLOEXEC,
            0o666 as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just opened and is owned by nothing else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Opens `path` as sec2 would for HDF5 access `flags`, but without changing the file system
/// beyond creating a file that did not exist: no O_TRUNC (the caller truncates once the open is
/// accepted), and creation only through O_EXCL, so the returned flag says for certain whether
/// this open created the file.
fn open_untouched(path: &CStr, access: c_int, flags: u32) -> io::Result<(File, bool)> {
    let create = libc::O_CREAT | libc::O_EXCL;
    if flags & H5F_ACC_CREAT == 0 {
        return open_fd(path, access).map(|f| (f, false));
    }
    if flags & H5F_ACC_EXCL != 0 {
        return open_fd(path, access | create).map(|f| (f, true));
    }
    // Open if it exists, else create: retried while another process creates or removes the
    // same name between the two calls (a few times suffice; each round makes progress unless
    // the other process keeps flipping the name).
    let mut last = io::Error::from_raw_os_error(libc::EEXIST);
    for _ in 0..16 {
        match open_fd(path, access) {
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            other => return other.map(|f| (f, false)),
        }
        match open_fd(path, access | create) {
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => last = err,
            other => return other.map(|f| (f, true)),
        }
    }
    Err(last)
}

/// Removes the file this open created, after a refusal: only if `path` still names that very
/// file (same device and inode), so a file another process put there meanwhile stays.
fn remove_if_same(path: &CStr, file: &File) {
    use std::os::unix::fs::MetadataExt;
    let Ok(ours) = file.metadata() else { return };
    let name = std::path::Path::new(std::ffi::OsStr::from_bytes(path.to_bytes()));
    match std::fs::symlink_metadata(name) {
        Ok(now) if now.dev() == ours.dev() && now.ino() == ours.ino() => {
            if let Err(err) = std::fs::remove_file(name) {
                tracing::warn!("could not remove {name:?}, created by a refused open: {err}");
            }
        }
        _ => tracing::debug!("{name:?} is no longer the file a refused open created; left alone"),
    }
}

impl OpenFile {
    /// Opens `path` with HDF5 access `flags` (RDWR, CREAT, TRUNC, EXCL) as sec2 does.
    pub fn open(
        c_path: &CStr,
        flags: u32,
        maxaddr: haddr_t,
        settings: Settings,
        ignore_disabled_locks: bool,
    ) -> Result<Self> {
        let path = &*c_path.to_string_lossy();
        if path.is_empty() {
            return Err(Error::InvalidArgument("invalid file name: empty".into()));
        }
        if maxaddr == 0 || addr_overflows(maxaddr) {
            return Err(Error::InvalidArgument(format!("bogus maxaddr {maxaddr}")));
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
        let device_plan = DevicePlan::prepare(&settings)?;
        let (file, created) = open_untouched(c_path, access, flags).map_err(open_error)?;
        let refuse = |err: Error| {
            if created {
                remove_if_same(c_path, &file);
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
        // Accepted: now the file may be emptied, as sec2's O_TRUNC would have.
        if flags & H5F_ACC_TRUNC != 0 && !created {
            file.set_len(0).map_err(|source| Error::File {
                op: "truncate (open with H5F_ACC_TRUNC)",
                path: path.to_string(),
                source,
            })?;
        }
        let meta = file.metadata().map_err(|source| Error::File {
            op: "fstat",
            path: path.to_string(),
            source,
        })?;
        use std::os::unix::fs::MetadataExt;
        Ok(OpenFile {
            path: path.to_string(),
            raw_fd: file.as_raw_fd(),
            file,
            direct,
            eoa: 0,
            eof: meta.len(),
            device: meta.dev(),
            inode: meta.ino(),
            ignore_disabled_locks,
            settings,
            device_path,
            readahead: (flags & H5F_ACC_SWMR_READ == 0).then(ReadAhead::default),
        })
    }

    /// Closes the descriptors, reporting a failed `close` as sec2 does.
    pub fn close(self) -> Result<()> {
        drop(self.direct);
        let fd = self.file.into_raw_fd();
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

    /// The I/O path actually in effect for host buffers, for the open log line.
    pub fn host_path_description(&self) -> String {
        format!(
            "POSIX pread/pwrite{}, {} threads for requests of {} or more",
            if self.direct.is_some() {
                " with O_DIRECT for aligned transfers"
            } else {
                ""
            },
            self.settings.nthreads,
            crate::config::format_size(self.settings.task_size as u64),
        )
    }

    /// The I/O path in effect for device buffers, for the open log line.
    pub fn device_path_description(&self) -> String {
        self.device_path.describe(&self.settings)
    }

    fn device_io(&self) -> DeviceIo<'_> {
        DeviceIo {
            path: &self.device_path,
            fd: self.raw_fd,
            file_name: &self.path,
            settings: &self.settings,
        }
    }

    /// A host read: small raw-data reads through the read-ahead window, the rest directly.
    ///
    /// # Safety
    /// `buf` must be valid for writes of `size` bytes.
    unsafe fn host_read(
        &self,
        addr: haddr_t,
        size: usize,
        buf: *mut u8,
        mem_type: H5FD_mem_t,
    ) -> Result<()> {
        if let Some(window) = self
            .readahead
            .as_ref()
            .filter(|_| mem_type == H5FD_MEM_DRAW)
        {
            match window.read(self.raw_fd, addr, size, buf) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(f) => {
                    return Err(Error::Io {
                        op: "read (read-ahead)",
                        path: self.path.clone(),
                        offset: addr,
                        size: size as u64,
                        done: f.done as u64,
                        source: f.source,
                    })
                }
            }
        }
        self.host().read(addr, buf, size)
    }

    /// Empties the read-ahead window before anything changes the file.
    pub(crate) fn file_changes(&self) {
        if let Some(window) = &self.readahead {
            window.invalidate();
        }
    }

    pub(crate) fn host(&self) -> HostIo<'_> {
        HostIo {
            fd: self.raw_fd,
            direct_fd: self.direct.as_ref().map(|f| f.as_raw_fd()),
            path: &self.path,
            nthreads: self.settings.nthreads,
            task_size: self.settings.task_size,
        }
    }

    /// Checks a read's range; notes (at debug level) a read that reaches past end of file.
    pub(crate) fn check_read(&self, addr: haddr_t, size: usize) -> Result<()> {
        check_region(addr, size as u64, MAXADDR)?;
        if addr + size as u64 > self.eof {
            tracing::debug!(
                "read of {size} bytes at {addr} in {:?} extends past EOF {}: zero-filled",
                self.path,
                self.eof
            );
        }
        Ok(())
    }

    /// Reads `size` bytes at `addr` into `buf`, host or device memory.
    ///
    /// # Safety
    /// `buf` must be valid for writes of `size` bytes.
    pub unsafe fn read(
        &self,
        addr: haddr_t,
        size: usize,
        buf: *mut u8,
        mem_type: H5FD_mem_t,
    ) -> Result<()> {
        self.check_read(addr, size)?;
        memory::dispatch(
            buf as usize,
            mem_type,
            || self.host_read(addr, size, buf, mem_type),
            |base| {
                self.device_io()
                    .read(base, buf as usize - base as usize, size, addr)
            },
        )
    }

    /// Writes `size` bytes from `buf`, host or device memory, at `addr`.
    ///
    /// # Safety
    /// `buf` must be valid for reads of `size` bytes.
    pub unsafe fn write(
        &mut self,
        addr: haddr_t,
        size: usize,
        buf: *const u8,
        mem_type: H5FD_mem_t,
    ) -> Result<()> {
        check_region(addr, size as u64, MAXADDR)?;
        self.file_changes();
        memory::dispatch(
            buf as usize,
            mem_type,
            || self.host().write(addr, buf, size),
            |base| {
                self.device_io()
                    .write(base, buf as usize - base as usize, size, addr)
            },
        )?;
        self.eof = self.eof.max(addr + size as u64);
        Ok(())
    }

    /// Splits pieces into host pieces (handled together, coalesced) and device pieces.
    fn partition(pieces: Vec<Piece>) -> (Vec<Piece>, Vec<Piece>) {
        pieces
            .into_iter()
            .partition(|p| memory::classify(p.buf, p.mem_type) == PointerKind::Host)
    }

    /// # Safety
    /// Every piece's buffer must be valid for writes of its length.
    pub unsafe fn read_vector(&self, pieces: Vec<Piece>) -> Result<()> {
        for p in &pieces {
            self.check_read(p.addr, p.len)?;
        }
        let (host, device) = Self::partition(pieces);
        match host.as_slice() {
            [] => {}
            [one] => self.host_read(one.addr, one.len, one.buf as *mut u8, one.mem_type)?,
            _ => crate::io::selection::host_pieces(&self.host(), host, false)?,
        }
        for p in device {
            // Through `dispatch` again (a cache hit), for its retry on stale ranges.
            memory::dispatch(
                p.buf,
                p.mem_type,
                || self.host_read(p.addr, p.len, p.buf as *mut u8, p.mem_type),
                |base| {
                    self.device_io()
                        .read(base, p.buf - base as usize, p.len, p.addr)
                },
            )?;
        }
        Ok(())
    }

    /// # Safety
    /// Every piece's buffer must be valid for reads of its length.
    pub unsafe fn write_vector(&mut self, pieces: Vec<Piece>) -> Result<()> {
        for p in &pieces {
            check_region(p.addr, p.len as u64, MAXADDR)?;
        }
        self.file_changes();
        let end = pieces
            .iter()
            .map(|p| p.addr + p.len as u64)
            .max()
            .unwrap_or(0);
        let (host, device) = Self::partition(pieces);
        if !host.is_empty() {
            crate::io::selection::host_pieces(&self.host(), host, true)?;
        }
        for p in device {
            memory::dispatch(
                p.buf,
                p.mem_type,
                || self.host().write(p.addr, p.buf as *const u8, p.len),
                |base| {
                    self.device_io()
                        .write(base, p.buf - base as usize, p.len, p.addr)
                },
            )?;
        }
        self.eof = self.eof.max(end);
        Ok(())
    }

    /// HDF5's `ctl(MEM_COPY)`: copies between buffers either of which may be device memory
    /// (compact datasets read into or written from a device buffer come through here).
    ///
    /// # Safety
    /// Both ranges must be valid for `len` bytes.
    pub unsafe fn mem_copy(dst: usize, src: usize, len: usize) -> Result<()> {
        let dst_kind = memory::classify(dst, crate::abi::H5FD_MEM_DRAW);
        let src_kind = memory::classify(src, crate::abi::H5FD_MEM_DRAW);
        if dst_kind == PointerKind::Host && src_kind == PointerKind::Host {
            std::ptr::copy(src as *const u8, dst as *mut u8, len);
            return Ok(());
        }
        crate::cuda::copy_any(dst, src, len)
            .map_err(|e| Error::Device(format!("memory copy of {len} bytes: {e}")))
    }

    pub fn set_eoa(&mut self, addr: haddr_t) -> Result<()> {
        if addr_overflows(addr) {
            return Err(Error::Overflow {
                addr,
                size: 0,
                maxaddr: MAXADDR,
            });
        }
        self.eoa = addr;
        Ok(())
    }

    /// Makes the file exactly EOA bytes long, as sec2 does (on flush and close).
    pub fn truncate(&mut self) -> Result<()> {
        self.file_changes();
        if self.eoa != self.eof {
            self.file.set_len(self.eoa).map_err(|source| Error::File {
                op: "ftruncate",
                path: self.path.clone(),
                source,
            })?;
            self.eof = self.eoa;
        }
        Ok(())
    }

    fn flock(&self, op: c_int, what: &'static str) -> Result<()> {
        // SAFETY: flock on a descriptor this struct owns.
        if unsafe { libc::flock(self.raw_fd, op | libc::LOCK_NB) } < 0 {
            let err = io::Error::last_os_error();
            // Locking disabled on this file system, and the user asked HDF5 to ignore that.
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
    pub fn lock(&self, rw: bool) -> Result<()> {
        self.flock(
            if rw { libc::LOCK_EX } else { libc::LOCK_SH },
            "unable to lock file (flock)",
        )
    }

    pub fn unlock(&self) -> Result<()> {
        self.flock(libc::LOCK_UN, "unable to unlock file (flock)")
    }

    /// Files are the same when device and inode match (sec2's order: device first).
    pub fn compare(&self, other: &OpenFile) -> Ordering {
        (self.device, self.inode).cmp(&(other.device, other.inode))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    fn c(path: &std::path::Path) -> CString {
        CString::new(path.to_str().unwrap()).unwrap()
    }

    fn create(path: &std::path::Path, settings: Settings) -> Result<OpenFile> {
        let flags = H5F_ACC_RDWR | H5F_ACC_CREAT | H5F_ACC_TRUNC;
        OpenFile::open(&c(path), flags, MAXADDR, settings, true)
    }

    #[test]
    fn open_flags_follow_sec2() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.h5");
        let missing = OpenFile::open(&c(&path), 0, MAXADDR, Settings::default(), true).unwrap_err();
        assert!(
            matches!(&missing, Error::Open { source, .. } if source.kind() == io::ErrorKind::NotFound)
        );
        assert!(missing.to_string().contains("f.h5"));
        create(&path, Settings::default()).unwrap().close().unwrap();
        let excl = H5F_ACC_RDWR | H5F_ACC_CREAT | H5F_ACC_EXCL;
        let exists =
            OpenFile::open(&c(&path), excl, MAXADDR, Settings::default(), true).unwrap_err();
        assert!(
            matches!(&exists, Error::Open { source, .. } if source.kind() == io::ErrorKind::AlreadyExists)
        );
        let read_only = OpenFile::open(&c(&path), 0, MAXADDR, Settings::default(), true).unwrap();
        let err = OpenFile::open(&c(&path), 0, 0, Settings::default(), true).unwrap_err();
        assert!(err.to_string().contains("bogus maxaddr"));
        let mut read_only = read_only;
        // Writing through a read-only descriptor fails with EBADF, naming file and offset.
        // SAFETY: the buffer is a live 4-byte array.
        let err =
            unsafe { read_only.write(8, 4, [1u8, 2, 3, 4].as_ptr(), H5FD_MEM_DRAW) }.unwrap_err();
        assert!(err.to_string().contains("offset 8"), "{err}");
    }

    #[test]
    fn a_refused_open_removes_only_the_file_it_created() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mine.h5");
        let create = H5F_ACC_RDWR | H5F_ACC_CREAT | H5F_ACC_TRUNC;
        let (ours, created) = open_untouched(&c(&path), libc::O_RDWR, create).unwrap();
        assert!(created);
        // Another process replaces the name between this open and its refusal.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"another process's file").unwrap();
        remove_if_same(&c(&path), &ours);
        assert_eq!(std::fs::read(&path).unwrap(), b"another process's file");
        // An existing file is opened, not created, and not truncated yet.
        let (again, created) = open_untouched(&c(&path), libc::O_RDWR, create).unwrap();
        assert!(!created);
        assert_eq!(again.metadata().unwrap().len(), 22);
        // The name still holding this open's own file: removed.
        std::fs::remove_file(&path).unwrap();
        let (ours, created) = open_untouched(&c(&path), libc::O_RDWR, create).unwrap();
        assert!(created);
        remove_if_same(&c(&path), &ours);
        assert!(!path.exists());
    }

    #[test]
    fn locks_conflict_between_open_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock.h5");
        let a = create(&path, Settings::default()).unwrap();
        let b = OpenFile::open(&c(&path), 0, MAXADDR, Settings::default(), true).unwrap();
        a.lock(true).unwrap();
        let err = b.lock(false).unwrap_err();
        assert!(err.to_string().contains("unable to lock file"), "{err}");
        a.unlock().unwrap();
        b.lock(false).unwrap();
        assert_eq!(a.compare(&b), Ordering::Equal);
        let other = create(&dir.path().join("other.h5"), Settings::default()).unwrap();
        assert_ne!(a.compare(&other), Ordering::Equal);
    }

    #[test]
    fn addresses_are_checked_for_overflow() {
        assert!(check_region(0, 10, MAXADDR).is_ok());
        assert!(check_region(HADDR_UNDEF, 1, MAXADDR).is_err());
        assert!(check_region(MAXADDR, 1, MAXADDR).is_err());
        assert!(check_region(1, u64::MAX - 1, MAXADDR).is_err());
        let dir = tempfile::tempdir().unwrap();
        let mut f = create(&dir.path().join("o.h5"), Settings::default()).unwrap();
        assert!(matches!(
            f.set_eoa(HADDR_UNDEF),
            Err(Error::Overflow { .. })
        ));
        let mut buf = [0u8; 4];
        // SAFETY: buf is a live 4-byte array.
        let err = unsafe { f.read(MAXADDR - 1, 4, buf.as_mut_ptr(), H5FD_MEM_DRAW) }.unwrap_err();
        assert!(err.to_string().contains("overflows"), "{err}");
    }

    #[test]
    fn truncate_sets_the_length_to_eoa() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.h5");
        let mut f = create(&path, Settings::default()).unwrap();
        f.set_eoa(10_000).unwrap();
        f.truncate().unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 10_000);
        assert_eq!(f.eof, 10_000);
        f.set_eoa(100).unwrap();
        f.truncate().unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 100);
    }

    #[test]
    fn direct_io_on_opens_an_o_direct_descriptor() {
        let dir = tempfile::tempdir().unwrap();
        let settings = Settings {
            direct_io: DirectIo::On,
            ..Settings::default()
        };
        let f = create(&dir.path().join("d.h5"), settings).unwrap();
        assert!(f.direct.is_some());
        assert!(f.host_path_description().contains("O_DIRECT"));
        // SAFETY: fcntl on a descriptor the file owns.
        let fl = unsafe { libc::fcntl(f.direct.as_ref().unwrap().as_raw_fd(), libc::F_GETFL) };
        assert_ne!(fl & libc::O_DIRECT, 0);
    }

    #[test]
    fn small_reads_see_every_write_and_truncate() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = create(&dir.path().join("ra.h5"), Settings::default()).unwrap();
        let mut buf = [0u8; 4];
        // SAFETY: every buffer below is a live local array of the length given.
        unsafe {
            f.write(100, 4, b"abcd".as_ptr(), H5FD_MEM_DRAW).unwrap();
            f.read(100, 4, buf.as_mut_ptr(), H5FD_MEM_DRAW).unwrap();
            assert_eq!(&buf, b"abcd");
            // Past end of file, inside the window: zeros, until a write puts bytes there.
            f.read(200, 4, buf.as_mut_ptr(), H5FD_MEM_DRAW).unwrap();
            assert_eq!(buf, [0; 4]);
            f.write(200, 4, b"wxyz".as_ptr(), H5FD_MEM_DRAW).unwrap();
            f.read(200, 4, buf.as_mut_ptr(), H5FD_MEM_DRAW).unwrap();
            assert_eq!(&buf, b"wxyz");
            f.set_eoa(202).unwrap();
            f.truncate().unwrap();
            f.read(200, 4, buf.as_mut_ptr(), H5FD_MEM_DRAW).unwrap();
            assert_eq!(&buf, b"wx\0\0");
        }
    }
}
