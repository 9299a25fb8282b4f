//! The process-wide thread pools: the driver's I/O tasks and the host decoding of compressed
//! chunks run on the same threads.
//!
//! Pools start lazily, one per thread count in use. A forked child finds pools built by its parent
//! (whose threads do not exist in the child): it abandons them and builds its own. When the pool
//! lock cannot be taken at once (another thread holds it, or a fork copied it held) the caller
//! gets no pool and does its work on its own thread, so nobody ever waits on that lock.

use std::sync::{Arc, Mutex};

struct Pools {
    pid: u32,
    by_size: Vec<(usize, Arc<rayon::ThreadPool>)>,
}

static POOLS: Mutex<Option<Pools>> = Mutex::new(None);

/// A pool of `nthreads` threads for this process, or `None` when the work should stay on the
/// calling thread (pool busy or unbuildable; the reason is logged).
pub fn get(nthreads: usize) -> Option<Arc<rayon::ThreadPool>> {
    let Ok(mut guard) = POOLS.try_lock() else {
        tracing::debug!("thread pool lock busy; running this request on the calling thread");
        return None;
    };
    let pid = crate::process::id();
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

/// [`get`] for a caller that blocks until tasks it hands the pool finish (waiting for a buffer
/// they return, say): `None` on a pool thread, where waiting could take the last thread the
/// tasks need and hang; the caller then works on its own thread.
pub fn for_waiting_caller(nthreads: usize) -> Option<Arc<rayon::ThreadPool>> {
    if rayon::current_thread_index().is_some() {
        return None;
    }
    get(nthreads)
}

/// Stops the pools' threads (they finish their current task and exit); called when the driver
/// is unloaded.
pub fn shutdown() {
    if let Ok(mut guard) = POOLS.try_lock() {
        if guard
            .as_ref()
            .is_some_and(|p| p.pid == crate::process::id())
        {
            *guard = None;
        } else {
            std::mem::forget(guard.take());
        }
    }
}
