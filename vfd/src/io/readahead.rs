//! A read-ahead window for small raw-data reads into host memory.
//!
//! HDF5 keeps a 64 KiB "sieve buffer" for drivers that advertise data sieving, so many tiny
//! datasets next to each other cost one `pread`. This driver must not advertise it (HDF5 would
//! then copy through its own buffer, fatal for device pointers), so it keeps the equivalent
//! itself, for host buffers only: a small read outside the window refills it from the file.
//! Every write and truncate empties the window. Other processes' writes cannot be seen, so the
//! window serves only while this process holds the file's lock (which keeps HDF5 writers out);
//! without one (`HDF5_USE_FILE_LOCKING=FALSE`, SWMR), every read goes to the file, as sec2's
//! reads of a dataset opened anew do.

use super::{posix, BufPtr, Direction, PartialTransfer};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Mutex;

/// Reads up to this size go through the window.
pub const SMALL_READ: usize = 4 << 10;
/// Bytes read when the window is refilled (HDF5's default sieve buffer size).
pub const WINDOW: usize = 64 << 10;

/// The window: file offset and the bytes from there (zeros past end of file, as a read gives).
#[derive(Debug, Default)]
pub struct ReadAhead {
    window: Mutex<Option<(u64, Vec<u8>)>>,
    /// Whether the window serves reads: while the file is locked by this process.
    serving: AtomicBool,
}

impl ReadAhead {
    /// Serves a read of `len` bytes at `addr` from the window, refilling it when needed.
    /// Returns `Ok(false)` when the read is not small, or the window is not serving (the caller
    /// reads directly).
    ///
    /// # Safety
    /// `buf` must be valid for writes of `len` bytes.
    pub unsafe fn read(
        &self,
        fd: RawFd,
        addr: u64,
        len: usize,
        buf: *mut u8,
    ) -> Result<bool, PartialTransfer> {
        if len == 0
            || len > SMALL_READ
            || addr.saturating_add(WINDOW as u64) > crate::abi::MAXADDR
            || !self.serving.load(Relaxed)
        {
            return Ok(false);
        }
        let mut guard = self
            .window
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let covers = |(start, data): &(u64, Vec<u8>)| {
            addr >= *start && addr + len as u64 <= start + data.len() as u64
        };
        if !guard.as_ref().is_some_and(covers) {
            *guard = None;
            let mut data = Vec::<u8>::with_capacity(WINDOW);
            // SAFETY: the read fills every byte of the capacity (zeros past end of file) before
            // the length is set.
            unsafe {
                let at = BufPtr::new(data.as_mut_ptr());
                posix::transfer(Direction::Read, fd, at, WINDOW, addr, false)?;
                data.set_len(WINDOW);
            }
            *guard = Some((addr, data));
        }
        if let Some((start, data)) = guard.as_ref() {
            let from = (addr - start) as usize;
            // SAFETY: from + len lies in the window (`covers`); `buf` holds len bytes (caller).
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr().add(from), buf, len) };
        }
        Ok(true)
    }

    /// Starts serving reads (the file was locked) or stops and forgets the window (unlocked).
    pub fn serve(&self, locked: bool) {
        self.serving.store(locked, Relaxed);
        if !locked {
            self.invalidate();
        }
    }

    /// Forgets the window (after any write or truncate).
    pub fn invalidate(&self) {
        *self
            .window
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
    }
}
