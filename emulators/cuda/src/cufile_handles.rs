//! Registered cuFile file handles and the driver's open count.
//!
//! Each handle keeps its own descriptors of the file, opened through `/proc/self/fd/N`: a
//! buffered one (compatibility mode, and the partial pages of unaligned GDS writes) and, with
//! GDS present, an `O_DIRECT` one (see `cufile_io`), whatever flags the caller's descriptor
//! has. The handle values given out are opaque integers dressed as pointers.

use std::collections::BTreeMap;
use std::ffi::{c_int, CString};
use std::sync::{Arc, Mutex, MutexGuard};

/// Where handle values start and their spacing.
const HANDLE_BASE: usize = 0x0000_cf11_0000_0000;
const HANDLE_STRIDE: usize = 0x40;

/// One registered file.
#[derive(Debug)]
pub struct FileHandle {
    /// The descriptor the caller registered.
    pub user_fd: c_int,
    /// The emulator's own buffered descriptor of the same file.
    pub io_fd: c_int,
    /// Its `O_DIRECT` descriptor: with GDS present where the file system accepts `O_DIRECT`.
    pub direct_fd: Option<c_int>,
}

impl FileHandle {
    /// The descriptors transfers use.
    pub fn descriptors(&self) -> crate::cufile_io::Descriptors {
        crate::cufile_io::Descriptors {
            buffered: self.io_fd,
            direct: self.direct_fd,
        }
    }
}

impl Drop for FileHandle {
    fn drop(&mut self) {
        // SAFETY: the descriptors were opened by `reopen` and are closed only here.
        unsafe {
            libc::close(self.io_fd);
            if let Some(fd) = self.direct_fd {
                libc::close(fd);
            }
        }
    }
}

struct Handles {
    by_value: BTreeMap<usize, Arc<FileHandle>>,
    next: usize,
    /// cuFileDriverOpen calls (explicit or implied) minus cuFileDriverClose calls.
    driver_users: u64,
}

static HANDLES: Mutex<Handles> = Mutex::new(Handles {
    by_value: BTreeMap::new(),
    next: 1,
    driver_users: 0,
});

fn handles() -> MutexGuard<'static, Handles> {
    HANDLES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Whether the driver is open.
pub fn driver_is_open() -> bool {
    handles().driver_users > 0
}

/// Counts one more user of the driver.
/// Counts one more user; true if the driver was closed until now.
pub fn driver_opened() -> bool {
    let mut h = handles();
    h.driver_users = h.driver_users.saturating_add(1);
    h.driver_users == 1
}

/// Counts one user less; false if the driver was not open.
pub fn driver_closed() -> bool {
    let mut h = handles();
    if h.driver_users == 0 {
        return false;
    }
    h.driver_users -= 1;
    true
}

/// Opens another descriptor of the file behind `fd` with `fd`'s access mode, plus `O_DIRECT`
/// if `direct` (None if the file system refuses it, or on any other failure).
pub fn reopen(fd: c_int, status_flags: c_int, direct: bool) -> Option<c_int> {
    let path = CString::new(format!("/proc/self/fd/{fd}")).ok()?;
    let mut flags = (status_flags & libc::O_ACCMODE) | libc::O_CLOEXEC;
    if direct {
        flags |= libc::O_DIRECT;
    }
    // SAFETY: path is a valid C string.
    let io_fd = unsafe { libc::open(path.as_ptr(), flags) };
    (io_fd >= 0).then_some(io_fd)
}

/// Whether `user_fd` is registered already.
pub fn is_registered_fd(user_fd: c_int) -> bool {
    handles().by_value.values().any(|h| h.user_fd == user_fd)
}

/// Records a handle; returns its value.
pub fn insert(handle: FileHandle) -> usize {
    let mut h = handles();
    let value = HANDLE_BASE + h.next * HANDLE_STRIDE;
    h.next += 1;
    h.by_value.insert(value, Arc::new(handle));
    value
}

/// The handle with this value, if registered.
pub fn get(value: usize) -> Option<Arc<FileHandle>> {
    handles().by_value.get(&value).cloned()
}

/// Forgets a handle (its descriptor closes once no transfer uses it); false if unknown.
pub fn remove(value: usize) -> bool {
    handles().by_value.remove(&value).is_some()
}
