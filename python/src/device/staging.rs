//! The extension's staging loop through pinned host memory (two buffers taking turns).

use crate::error::DeviceError;
use h5gds_route::select::staging_pieces;
use h5gds_runtime::cuda::{self, DeviceContext, Direction};
use h5gds_runtime::pinned;

/// Moves `elements` elements of `item` bytes between device memory at `address` and the file
/// through pinned host buffers, piece by piece (`route::select::staging_pieces`: at most
/// `piece_bytes` each, cut at `cuts` where they fit): `io(a, b, host)` moves elements `[a, b)` (in the array's
/// row-major order) between a buffer and the file. Two buffers take turns, each copied on a
/// stream of its own, so that one piece's copy to (or from) the device runs while `io` reads (or
/// writes) the next. The one staging loop of the extension (dataset selections and collective
/// tiles).
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
    let mut buffers = [pinned::Taken::new(largest), pinned::Taken::new(largest)];
    let hosts = [buffers[0].as_mut_ptr(), buffers[1].as_mut_ptr()];
    let direction = if write {
        Direction::Write
    } else {
        Direction::Read
    };
    let start = |k: usize| {
        let (a, b) = pieces[k];
        // SAFETY: the buffer holds the piece's bytes and is not touched until its stream is
        // synchronized below; the device range lies inside one allocation (checked by the
        // caller).
        unsafe {
            cuda::copy_async(
                direction,
                hosts[k % 2],
                device(a),
                bytes((a, b)),
                streams[k % 2],
            )
        }
    };
    let mut moved = || -> Result<(), DeviceError> {
        if write {
            start(0)?;
            for (k, &(a, b)) in pieces.iter().enumerate() {
                cuda::synchronize(streams[k % 2])?;
                // The other buffer's piece has been written: its next copy overlaps this `io`.
                if k + 1 < pieces.len() {
                    start(k + 1)?;
                }
                io(a, b, hosts[k % 2])?;
            }
        } else {
            for (k, &(a, b)) in pieces.iter().enumerate() {
                if k >= 2 {
                    // The copy of the piece two before, from the same buffer, has finished.
                    cuda::synchronize(streams[k % 2])?;
                }
                io(a, b, hosts[k % 2])?;
                start(k)?;
            }
        }
        Ok(())
    };
    let result = moved();
    // Whatever happened, no copy may still use a buffer once it goes back to the pool.
    let waited = streams
        .iter()
        .map(|&stream| cuda::synchronize(stream))
        .collect::<Result<Vec<_>, _>>();
    drop(buffers);
    result?;
    waited?;
    Ok(())
}
