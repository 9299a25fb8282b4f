//! Large requests split into tasks and run on the process-wide thread pool
//! (`h5gds_runtime::pool`, which the host decoding of compressed chunks shares); without a pool
//! (busy, or not buildable) a request runs on the calling thread.

use h5gds_runtime::pool;
use rayon::prelude::*;

/// Runs `task(0) .. task(count - 1)`, on the pool when `parallel` and there is more than one task,
/// else in order on the calling thread. Returns the first error seen; every task that started has
/// finished when this returns.
pub fn run_tasks<E, F>(nthreads: usize, count: usize, parallel: bool, task: F) -> Result<(), E>
where
    E: Send,
    F: Fn(usize) -> Result<(), E> + Sync,
{
    if parallel && count > 1 && nthreads > 1 {
        if let Some(pool) = pool::get(nthreads) {
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
    if (1..=task_size).contains(&len) {
        return task(0, len);
    }
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
