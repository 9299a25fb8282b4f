//! Host staging, the ring of array-io's collective staged writes (`h5gds_engine::staged`): data moves between the file and device memory through two bounded
//! host buffers taking turns (at most `H5GDS_STAGING_BUFFER_SIZE` each, from the process's pool
//! of pinned buffers; not the driver's bounce buffers) on the caller's cudarc stream and its fork.

use cudarc::driver::CudaStream;
use h5gds_runtime::cuda::call;
use h5gds_runtime::pinned;
use h5gds_runtime::staging_ring::StagingRing;
use std::sync::Arc;

/// Two staging buffers of `min(size, needed)` bytes (at least one byte) from the process's pool
/// of pinned buffers (`h5gds_runtime::pinned`, pageable where CUDA cannot pin), taking turns in
/// the staging ring (`h5gds_runtime::staging_ring`) for copies after the work queued on `stream`:
/// piece `k` uses buffer `k % 2` and stream `k % 2` (the caller's, and one forked from it when
/// the first copy is queued), so that one piece's copy runs while HDF5 (or the host decoding)
/// moves the next. Returns the ring and each buffer's bytes (the collective write cuts its
/// pieces to them).
pub(crate) fn ring(
    size: usize,
    needed: usize,
    stream: &Arc<CudaStream>,
) -> (StagingRing<Arc<CudaStream>>, usize) {
    let len = size.min(needed).max(1);
    let caller = stream.clone();
    let streams = move || {
        let fork = call("creating a stream", || caller.fork())?;
        Ok(vec![caller, fork])
    };
    let buffers = vec![pinned::Taken::new(len), pinned::Taken::new(len)];
    (StagingRing::streams_made_later(buffers, streams), len)
}
