//! What every transfer is parameterised by: its [`Direction`] and the caller's buffer ([`BufPtr`]),
//! and how a transfer that stops part way reports it ([`PartialTransfer`]). A leaf module: both
//! the I/O paths and the CUDA copies use it.

/// Which way bytes move (defined with the CUDA copies, which take it too).
pub(crate) use h5gds_runtime::cuda::Direction;

/// A caller's buffer, written by reads and only read by writes: an address pool threads may
/// carry. Functions that dereference it are `unsafe` and state the caller's guarantee.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(transparent)]
pub(crate) struct BufPtr(*mut u8);

// SAFETY: a plain address; access through it is governed by the unsafe functions that take it.
unsafe impl Send for BufPtr {}
// SAFETY: as above.
unsafe impl Sync for BufPtr {}

impl BufPtr {
    pub(crate) fn new(ptr: *mut u8) -> Self {
        BufPtr(ptr)
    }
    /// The source of a write, which is only read.
    pub(crate) fn from_const(ptr: *const u8) -> Self {
        BufPtr(ptr.cast_mut())
    }
    /// The buffer `offset` bytes further on (no access, so no validity requirement).
    pub(crate) fn add(self, offset: usize) -> Self {
        BufPtr(self.0.wrapping_add(offset))
    }
    pub(crate) fn as_ptr(self) -> *mut u8 {
        self.0
    }
    /// The address, for alignment checks and CUDA pointer queries.
    pub(crate) fn addr(self) -> usize {
        self.0 as usize
    }
}

/// A transfer that failed after `done` of its bytes had moved.
#[derive(Debug)]
pub(crate) struct PartialTransfer {
    pub(crate) source: std::io::Error,
    pub(crate) done: usize,
}
