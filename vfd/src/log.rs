//! Logging to stderr through `tracing`, filtered by `H5GDS_LOG` (default `warn`).
//!
//! The driver runs inside other people's processes, so it never installs a global subscriber: its
//! own dispatcher is made current only while driver code runs (`with_logging`).
//!
//! Each line goes to file descriptor 2 in `write` calls of its own ([`Stderr`]), not through std's
//! `stderr()`, whose lock a fork copies: a child forked while another thread wrote a line found
//! that lock held by a thread it does not have, and hung at its first log line.

use crate::config::LOG_ENV;
use std::io;
use std::sync::OnceLock;
use tracing::Dispatch;
use tracing_subscriber::EnvFilter;

fn dispatch() -> &'static Dispatch {
    static DISPATCH: OnceLock<Dispatch> = OnceLock::new();
    DISPATCH.get_or_init(|| {
        let requested = std::env::var(LOG_ENV).ok();
        let (filter, rejected) = match requested.as_deref().map(EnvFilter::try_new) {
            None => (EnvFilter::new("warn"), None),
            Some(Ok(filter)) => (filter, None),
            Some(Err(err)) => (EnvFilter::new("warn"), Some(err)),
        };
        let subscriber = tracing_subscriber::fmt()
            .with_writer(|| Stderr)
            .with_ansi(false)
            .with_env_filter(filter)
            .finish();
        let dispatch = Dispatch::new(subscriber);
        if let Some(err) = rejected {
            tracing::dispatcher::with_default(&dispatch, || {
                tracing::warn!(
                    "ignoring {LOG_ENV}={:?} ({err}); logging at warn",
                    requested.unwrap_or_default()
                )
            });
        }
        dispatch
    })
}

/// Standard error with no lock: each `write` is one `write(2)` on descriptor 2. The formatter hands
/// over each event as one finished line, so a line is one call (whole, on a pipe, up to `PIPE_BUF`
/// bytes) and lines of two threads never share a call; there is nothing for a fork to copy held.
struct Stderr;

impl io::Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for reads of `buf.len()` bytes for the call; descriptor 2 is only
        // written to, never closed or owned here.
        let written = unsafe { libc::write(libc::STDERR_FILENO, buf.as_ptr().cast(), buf.len()) };
        if let Ok(written) = usize::try_from(written) {
            return Ok(written);
        }
        let err = io::Error::last_os_error();
        // As std's stderr does: a closed descriptor 2 swallows the line.
        if err.raw_os_error() == Some(libc::EBADF) {
            Ok(buf.len())
        } else {
            Err(err)
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Runs `f` with the driver's logger as the current dispatcher.
pub fn with_logging<R>(f: impl FnOnce() -> R) -> R {
    tracing::dispatcher::with_default(dispatch(), f)
}

#[cfg(test)]
mod tests {
    use super::with_logging;
    use std::os::fd::AsRawFd;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    /// A child forked while another thread of its parent holds std's stderr lock (as a thread
    /// writing a log line does) logs its own line and exits: the line is in the file the child's
    /// descriptor 2 points to. With std's `stderr()` as the writer, the child waited forever on
    /// the lock's copy (killed here after 20 s).
    #[test]
    fn a_child_forked_while_another_thread_holds_stderr_logs_and_exits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("child.log");
        let log = std::fs::File::create(&path).unwrap();
        with_logging(|| ()); // the logger is made before the fork, as in a process that has logged
        let (held_tx, held_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let holder = std::thread::spawn(move || {
            let _stderr = std::io::stderr().lock();
            held_tx.send(()).unwrap();
            release_rx.recv().unwrap();
        });
        held_rx.recv().unwrap();
        // SAFETY: the child runs only the logger, `dup2` and `_exit`, and never returns into the
        // test harness.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            // SAFETY: both descriptors are open (the file is owned by this frame); `_exit` ends
            // the child without running the parent's copied destructors or atexit handlers.
            unsafe {
                libc::dup2(log.as_raw_fd(), libc::STDERR_FILENO);
                with_logging(|| tracing::error!("the forked child's line"));
                libc::_exit(0);
            }
        }
        release_tx.send(()).unwrap();
        holder.join().unwrap();
        let start = Instant::now();
        let mut status = 0;
        loop {
            // SAFETY: `pid` is this process's child; `status` is a valid out pointer.
            let done = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            assert!(done >= 0, "waitpid: {}", std::io::Error::last_os_error());
            if done == pid {
                break;
            }
            if start.elapsed() > Duration::from_secs(20) {
                // SAFETY: as above; the child is killed and reaped.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                panic!("the forked child hung at its log line");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "child status {status}"
        );
        let written = std::fs::read_to_string(&path).unwrap();
        assert!(
            written.contains("ERROR") && written.ends_with("the forked child's line\n"),
            "{written:?}"
        );
    }
}
