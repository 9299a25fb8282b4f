//! The process-wide I/O thread pool and the splitting of large requests into tasks.
//!
//! Pools start lazily, one per thread count in use. A forked child finds pools built by its parent
//! (whose threads do not exist in the child): it abandons them and builds its own. When the pool
//! lock cannot be taken at once (another thread holds it, or a fork copied it held) the request
//! runs on the calling thread instead, so the driver never waits on that lock.

use rayon::prelude::*;
use std::sync::{Arc, Mutex};

struct Pools {
    pid: u32,
    by_size: Vec<(usize, Arc<rayon::ThreadPool>)>,
}

static POOLS: Mutex<Option<Pools>> = Mutex::new(None);

/// A pool of `nthreads` threads for this process, or `None` when the request should stay on the
/// calling thread (pool busy or unbuildable; the reason is logged).
fn pool(nthreads: usize) -> Option<Arc<rayon::ThreadPool>> {
    let Ok(mut guard) = POOLS.try_lock() else {
        tracing::debug!("I/O pool lock busy; running this request on the calling thread");
        return None;
    };
    let pid = std::process::id();
    if guard.as_ref().is_some_and(|p| p.pid != pid) {
        // Built by the parent before a fork: its threads are gone. Never drop it here, since
        // dropping would signal threads that do not exist in this process.
        std::mem::forget(guard.take());
    }
    let pools = guard.get_or_insert_with(|| Pools {
        pid,
        by_size: Vec::new(),
    });
    if let Some((_, p)) = pools.by_size.iter().find(|(n, _)| *n == nthreads) {
        return Some(p.clone());
    }
    match rayon::ThreadPoolBuilder::new()
        .num_threads(nthreads)
        .thread_name(|i| format!("h5gds-io-{i}"))
        .build()
    {
        Ok(p) => {
            let p = Arc::new(p);
            pools.by_size.push((nthreads, p.clone()));
            Some(p)
        }
        Err(err) => {
            tracing::warn!("could not start {nthreads} I/O threads ({err}); running requests on the calling thread");
            None
        }
    }
}

/// Stops the pools' threads (they finish their current task and exit); called from `terminate`.
pub fn shutdown() {
    if let Ok(mut guard) = POOLS.try_lock() {
        if guard.as_ref().is_some_and(|p| p.pid == std::process::id()) {
            *guard = None;
        } else {
            std::mem::forget(guard.take());
        }
    }
}

/// Runs `task(0) .. task(count - 1)`, on the pool when `parallel` and there is more than one task,
/// else in order on the calling thread. Returns the first error seen; every task that started has
/// finished when this returns.
pub fn run_tasks<E, F>(nthreads: usize, count: usize, parallel: bool, task: F) -> Result<(), E>
where
    E: Send,
    F: Fn(usize) -> Result<(), E> + Sync,
{
    if parallel && count > 1 && nthreads > 1 {
        if let Some(pool) = pool(nthreads) {
            // Tasks log through the caller's dispatcher (the driver's logger), not the pool
            // threads' default, which has none.
            let dispatch = tracing::dispatcher::get_default(|d| d.clone());
            return pool.install(|| {
                (0..count)
                    .into_par_iter()
                    .try_for_each(|i| tracing::dispatcher::with_default(&dispatch, || task(i)))
            });
        }
    }
    (0..count).try_for_each(task)
}

/// Runs `task(offset, len)` over `task_size` pieces of `0..len`: on the pool when `parallel`
/// and the request is at least one task long, else in order on the calling thread.
pub fn run_split<E, F>(
    nthreads: usize,
    len: usize,
    task_size: usize,
    parallel: bool,
    task: F,
) -> Result<(), E>
where
    E: Send,
    F: Fn(usize, usize) -> Result<(), E> + Sync,
{
    let pieces: Vec<(usize, usize)> = split(len, task_size).collect();
    run_tasks(nthreads, pieces.len(), parallel && len >= task_size, |i| {
        let (off, n) = pieces[i];
        task(off, n)
    })
}

/// `(offset, len)` pieces of at most `task_size` bytes covering `0..len`.
pub fn split(len: usize, task_size: usize) -> impl Iterator<Item = (usize, usize)> {
    let task_size = task_size.max(1);
    (0..len.div_ceil(task_size)).map(move |i| {
        let start = i * task_size;
        (start, task_size.min(len - start))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn split_covers_exactly() {
        let pieces: Vec<_> = split(10, 4).collect();
        assert_eq!(pieces, vec![(0, 4), (4, 4), (8, 2)]);
        assert_eq!(split(0, 4).count(), 0);
        assert_eq!(split(8, 4).collect::<Vec<_>>(), vec![(0, 4), (4, 4)]);
    }

    #[test]
    fn run_split_covers_every_byte_once() {
        let seen: Vec<AtomicUsize> = (0..1000).map(|_| AtomicUsize::new(0)).collect();
        run_split::<(), _>(3, 1000, 64, true, |off, n| {
            assert!(n <= 64);
            (off..off + n).for_each(|b| {
                seen[b].fetch_add(1, Ordering::Relaxed);
            });
            Ok(())
        })
        .unwrap();
        assert!(seen.iter().all(|s| s.load(Ordering::Relaxed) == 1));
        assert_eq!(
            run_split(3, 1000, 64, false, |off, _| if off == 128 {
                Err(off)
            } else {
                Ok(())
            }),
            Err(128)
        );
    }

    #[test]
    fn every_task_runs_once_and_errors_surface() {
        let hits: Vec<AtomicUsize> = (0..100).map(|_| AtomicUsize::new(0)).collect();
        run_tasks::<(), _>(4, 100, true, |i| {
            hits[i].fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
        .unwrap();
        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        let err = run_tasks(4, 100, true, |i| if i == 37 { Err(i) } else { Ok(()) });
        assert_eq!(err, Err(37));
    }
}
