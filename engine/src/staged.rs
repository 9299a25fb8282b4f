//! The staged path, written once for both faces: a selection's elements move between device
//! memory and the file through pinned host buffers, piece by piece (`route::select::staging_pieces`),
//! in the staging ring (`h5gds_runtime::staging_ring`, generic over its streams: array-io's cudarc
//! streams, the extension's [`ThreadLane`]s), so any size works with any buffer size and one
//! piece's copy overlaps the next piece's file side. The file side of a piece is the face's
//! closure: HDF5 through a [`Prepared`] transfer (`hyperslab_piece`), or h5gds decoding chunks
//! on the host. HDF5 only ever sees host memory here, so it may convert types, fill unwritten
//! storage and decode filtered chunks as it likes.

use crate::transfer::Prepared;
use h5gds_route::select::{flat_range_blocks, Runs};
use h5gds_runtime::cuda::{self, CudaError, DeviceContext};
use h5gds_runtime::pinned;
use h5gds_runtime::staging_ring::{RingStream, StagingRing, Stop};

/// A byte of a bool read that is not 0 or 1 (which a device library's bool cannot hold): its
/// element (of the selection, in row-major order) and value.
#[derive(Debug, PartialEq, Eq)]
pub struct NotBool {
    pub element: u64,
    pub value: u8,
}

/// Refuses the first byte of `bytes`, bools starting at selection element `first`, that is not 0
/// or 1.
pub fn check_bools(bytes: &[u8], first: u64) -> Result<(), NotBool> {
    let Some(at) = bytes.iter().position(|&v| v > 1) else {
        return Ok(());
    };
    let (element, value) = (first + at as u64, bytes[at]);
    Err(NotBool { element, value })
}

/// A lane of the runtime's own streams (the extension's): a single piece is copied synchronously
/// (`cuda::copy_any`), several on this thread's two streams (`cuda::thread_streams`).
#[derive(Clone, Copy)]
pub enum ThreadLane {
    Synchronous(DeviceContext),
    Stream(cuda::Stream),
}

impl RingStream for ThreadLane {
    unsafe fn upload(&self, dst: u64, src: *const u8, len: usize) -> Result<(), CudaError> {
        match self {
            // SAFETY: the caller's contract; the copy has finished when it returns.
            ThreadLane::Synchronous(c) => unsafe {
                cuda::copy_any(*c, dst as usize, src as usize, len)
            },
            // SAFETY: the caller's contract.
            ThreadLane::Stream(s) => unsafe { s.upload(dst, src, len) },
        }
    }
    unsafe fn download(&self, dst: *mut u8, src: u64, len: usize) -> Result<(), CudaError> {
        match self {
            // SAFETY: the caller's contract; the copy has finished when it returns.
            ThreadLane::Synchronous(c) => unsafe {
                cuda::copy_any(*c, dst as usize, src as usize, len)
            },
            // SAFETY: the caller's contract.
            ThreadLane::Stream(s) => unsafe { s.download(dst, src, len) },
        }
    }
    fn wait(&self) -> Result<(), CudaError> {
        match self {
            ThreadLane::Synchronous(_) => Ok(()),
            ThreadLane::Stream(s) => s.wait(),
        }
    }
}

/// The ring for `pieces` (of `item`-byte elements) on the runtime's streams of `context`, with
/// buffers of the largest piece ([`ring_of`]).
pub fn thread_ring(
    context: DeviceContext,
    pieces: &[(u64, u64)],
    item: usize,
) -> Result<StagingRing<ThreadLane>, CudaError> {
    let largest = pieces.iter().map(|&(a, b)| b - a).max().unwrap_or(0) as usize * item;
    ring_of(context, largest, pieces.len())
}

/// The ring for `count` pieces on the runtime's streams of `context`: one synchronous lane for a
/// single piece, else two buffers of `bytes` taking turns on this thread's streams.
pub fn ring_of(
    context: DeviceContext,
    bytes: usize,
    count: usize,
) -> Result<StagingRing<ThreadLane>, CudaError> {
    if count <= 1 {
        let (buffer, lane) = (pinned::Taken::new(bytes), ThreadLane::Synchronous(context));
        return Ok(StagingRing::new(vec![buffer], vec![lane]));
    }
    let streams = cuda::thread_streams(context)?.map(ThreadLane::Stream);
    let buffers = vec![pinned::Taken::new(bytes), pinned::Taken::new(bytes)];
    Ok(StagingRing::new(buffers, streams.to_vec()))
}

/// Reads `pieces` into the device array at `dest` (of `item`-byte elements) through `ring`:
/// `fill(a, b, buffer)` fills a buffer with elements `[a, b)` (the buffer's first `(b - a) * item`
/// bytes), a bool read refuses other bytes with `bools`, then `runs` place the piece's elements
/// in the array while the next piece is filled. Every copy has finished when this returns.
pub fn read<S: RingStream, E: From<CudaError>>(
    ring: &mut StagingRing<S>,
    pieces: &[(u64, u64)],
    (dest, item, runs): (u64, usize, &Runs),
    bools: Option<&dyn Fn(NotBool) -> E>,
    mut fill: impl FnMut(u64, u64, &mut [u8]) -> Result<(), E>,
) -> Result<(), E> {
    let bytes = |n: u64| n as usize * item;
    ring.to_device(
        pieces.len(),
        |k, buffer| {
            let (a, b) = pieces[k];
            let piece = &mut buffer[..bytes(b - a)];
            fill(a, b, piece)?;
            bools.map_or(Ok(()), |refuse| check_bools(piece, a).map_err(refuse))
        },
        |k, copies| {
            let (a, b) = pieces[k];
            for (at, element, len) in runs.pieces(a, b) {
                // SAFETY: the run lies inside the device array, which the caller keeps until
                // this returns, after the ring's wait for its copies.
                unsafe { copies.upload(bytes(at), dest + bytes(element) as u64, bytes(len))? };
            }
            Ok(())
        },
    )
    .map_err(Stop::into_error)
}

/// Writes `pieces` of the `item`-byte elements at device address `src` (in row-major order)
/// through `ring`: each piece is copied down into a buffer, then `drain(a, b, buffer)` takes
/// elements `[a, b)` from it, while the next piece comes down. Every copy has finished when this
/// returns.
pub fn write<S: RingStream, E: From<CudaError>>(
    ring: &mut StagingRing<S>,
    pieces: &[(u64, u64)],
    item: usize,
    src: u64,
    mut drain: impl FnMut(u64, u64, &[u8]) -> Result<(), E>,
) -> Result<(), E> {
    let es = item as u64;
    ring.from_device(
        pieces.len(),
        |k, copies| {
            let (a, b) = pieces[k];
            // SAFETY: the piece lies inside the device array, which the caller keeps until this
            // returns, after the ring's wait for its copies.
            unsafe { copies.download(0, src + a * es, ((b - a) * es) as usize)? };
            Ok(())
        },
        |k, buffer| {
            let (a, b) = pieces[k];
            drain(a, b, &buffer[..((b - a) * es) as usize])
        },
    )
    .map_err(Stop::into_error)
}

/// Moves elements `[a, b)` (in row-major order) of the hyperslab `(start, step, count)` (file
/// coordinates), a part of `prepared`'s, between
/// the dataset and `buffer` with HDF5 (`prepared`'s direction), one hyperslab per block of the
/// range (`route::select::flat_range_blocks`). The HDF5's lock is the caller's.
///
/// # Safety
/// `buffer` must hold `b - a` elements of the prepared memory type, of `item` bytes each
/// (writable for a read).
pub(crate) unsafe fn hyperslab_piece(
    prepared: &Prepared,
    (start, step, count): (&[u64], &[u64], &[u64]),
    (a, b): (u64, u64),
    item: usize,
    buffer: *mut u8,
) -> Result<(), String> {
    let mut offset = 0usize;
    for block in flat_range_blocks(count, a, b) {
        let first: Vec<u64> = (0..block.start.len())
            .map(|i| start[i] + block.start[i] * step[i])
            .collect();
        let at = buffer.wrapping_add(offset).cast();
        // SAFETY: the block is part of the checked selection; its elements lie in the buffer
        // from `offset` (the blocks of [a, b) hold b - a elements in order).
        unsafe { prepared.run_hyperslab(&first, step, &block.count, at) }?;
        offset += block.len() as usize * item;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bools_refuse_the_first_other_byte_naming_its_element() {
        assert_eq!(check_bools(&[0, 1, 1, 0], 5), Ok(()));
        assert_eq!(
            check_bools(&[0, 1, 7, 2], 5),
            Err(NotBool {
                element: 7,
                value: 7
            })
        );
    }
}
