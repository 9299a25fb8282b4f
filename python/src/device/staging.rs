//! The extension's staging through pinned host memory: a selection's elements in pieces, through
//! the runtime's staging ring (`h5gds_runtime::staging_ring`, two buffers taking turns).

use crate::error::DeviceError;
use h5gds_route::select::staging_pieces;
use h5gds_runtime::cuda::{self, DeviceContext};
use h5gds_runtime::pinned;
use h5gds_runtime::staging_ring::{StagingRing, Stop};

/// Moves `elements` elements of `item` bytes between device memory at `address` and the file
/// through pinned host buffers, piece by piece (`route::select::staging_pieces`: at most
/// `piece_bytes` each, cut at `cuts` where they fit): `io(a, b, host)` moves elements `[a, b)`
/// (in the array's row-major order) between a buffer and the file; a write's `io` only reads the
/// buffer. Several pieces take turns in the staging ring, each buffer copied on a stream of its
/// own, so that one piece's copy to (or from) the device runs while `io` reads (or writes) the
/// next; a single piece is copied synchronously. The one staging loop of the extension (dataset
/// selections and collective tiles).
#[allow(clippy::too_many_arguments)]
pub(super) fn through_pinned(
    context: DeviceContext,
    address: u64,
    elements: u64,
    item: usize,
    piece_bytes: usize,
    cuts: &[u64],
    write: bool,
    mut io: impl FnMut(u64, u64, *mut u8) -> Result<(), DeviceError>,
) -> Result<(), DeviceError> {
    let pieces = staging_pieces(elements, (piece_bytes / item).max(1) as u64, cuts);
    let largest = pieces.iter().map(|&(a, b)| b - a).max().unwrap_or(0) as usize * item;
    let device = |a: u64| address + a * item as u64;
    let bytes = |(a, b): (u64, u64)| (b - a) as usize * item;
    if pieces.len() <= 1 {
        let mut pinned = pinned::Taken::new(largest);
        for &(a, b) in &pieces {
            let host = pinned.as_mut_ptr();
            if write {
                // SAFETY: the pinned buffer holds the piece's bytes; the caller checked that the
                // device range lies inside one allocation.
                unsafe {
                    cuda::copy_any(context, host as usize, device(a) as usize, bytes((a, b)))
                }?;
            }
            io(a, b, host)?;
            if !write {
                // SAFETY: as for the copy from the device above.
                unsafe {
                    cuda::copy_any(context, device(a) as usize, host as usize, bytes((a, b)))
                }?;
            }
        }
        return Ok(());
    }
    let streams = cuda::thread_streams(context)?;
    let buffers = vec![pinned::Taken::new(largest), pinned::Taken::new(largest)];
    let mut ring = StagingRing::new(buffers, streams.to_vec());
    let moved = if write {
        ring.from_device(
            pieces.len(),
            |k, copies| {
                let (a, b) = pieces[k];
                // SAFETY: the piece's device range lies inside one allocation of `context` (checked
                // by the caller), which outlives the transfer and so the ring's wait for the copy.
                unsafe { copies.download(0, device(a), bytes((a, b))) }.map_err(DeviceError::from)
            },
            |k, buffer| {
                let (a, b) = pieces[k];
                io(a, b, buffer.as_ptr().cast_mut())
            },
        )
    } else {
        ring.to_device(
            pieces.len(),
            |k, buffer| {
                let (a, b) = pieces[k];
                io(a, b, buffer.as_mut_ptr())
            },
            |k, copies| {
                let (a, b) = pieces[k];
                // SAFETY: as for the copy from the device above.
                unsafe { copies.upload(0, device(a), bytes((a, b))) }.map_err(DeviceError::from)
            },
        )
    };
    moved.map_err(Stop::into_error)
}
