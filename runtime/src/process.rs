//! This process's id without a system call per question: the driver asks on every device check
//! whether it runs in a fork of the process that initialised CUDA, and `getpid` is a real system
//! call (glibc keeps no cached value since 2.25), about a microsecond on a VM, per raw-data read.
//! The id is read once, and again in every child right after `fork` (a `pthread_atfork` child
//! handler, registered with the first question).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Once;

/// This process's id; 0 until first asked.
static PID: AtomicU32 = AtomicU32::new(0);
static REGISTER: Once = Once::new();

extern "C" fn after_fork_in_child() {
    // Async-signal-safe: one system call and an atomic store.
    PID.store(std::process::id(), Ordering::Release);
}

/// This process's id (what `getpid` returns), kept current across `fork`.
pub fn id() -> u32 {
    REGISTER.call_once(|| {
        PID.store(std::process::id(), Ordering::Release);
        // SAFETY: registers a handler that only stores the child's id; the library holding it
        // stays loaded for the life of the process (the driver is linked `-z nodelete`, Python
        // extension modules are never unloaded). A failed registration leaves the value read
        // once, so `getpid` is asked every time instead (below).
        if unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) } != 0 {
            PID.store(0, Ordering::Release);
        }
    });
    match PID.load(Ordering::Acquire) {
        0 => std::process::id(),
        pid => pid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_this_processs_and_a_forked_childs_own() {
        assert_eq!(id(), std::process::id());
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the pipe's two descriptors.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: the child only reads an atomic, writes to a pipe and exits (no allocation, no
        // lock another thread may hold).
        let child = unsafe { libc::fork() };
        if child == 0 {
            let ok = u8::from(id() == std::process::id() && id() != 0);
            // SAFETY: writes one byte to the pipe and leaves at once, running no destructors.
            unsafe {
                libc::write(fds[1], (&raw const ok).cast(), 1);
                libc::_exit(0);
            }
        }
        let mut ok = 0u8;
        // SAFETY: reads the child's byte, then reaps it.
        unsafe {
            assert_eq!(libc::read(fds[0], (&raw mut ok).cast(), 1), 1);
            libc::waitpid(child, std::ptr::null_mut(), 0);
        }
        assert_eq!(ok, 1, "the child saw its own id");
        assert_eq!(id(), std::process::id());
    }
}
