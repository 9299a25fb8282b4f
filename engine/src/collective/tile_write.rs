//! One rank's tile written into the collective file: its byte runs (one per contiguous stretch
//! of the global row-major order) through a [`DriverFile`], straight from memory the file's driver
//! takes (host memory; device memory under `gds`), or from device memory staged through pinned
//! host buffers piece by piece.

use super::driver_file::DriverFile;
use crate::staged;
use h5gds_route::select::{staged_piece_bytes, staging_pieces, Block, Runs};
use h5gds_runtime::staging_ring::{RingStream, StagingRing};
use std::ffi::c_void;

/// A stretch of a tile's bytes: `len` bytes from byte `at` of the tile (row-major) to file
/// address `file_at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteRun {
    pub file_at: u64,
    pub at: u64,
    pub len: u64,
}

/// The runs of the tile `tile`, a box of the array of `shape` stored contiguously from byte
/// `offset`, in bytes of `item`-byte elements, in the tile's memory order.
pub fn byte_runs(tile: &Block, shape: &[u64], offset: u64, item: u64) -> Vec<ByteRun> {
    let runs = Runs::new(tile, shape).pieces(0, tile.len());
    runs.into_iter()
        .map(|(at, element, len)| ByteRun {
            file_at: offset + element * item,
            at: at * item,
            len: len * item,
        })
        .collect()
}

/// Writes `runs` of the tile at address `src` through `file`, straight.
///
/// # Safety
/// Every run must lie inside the tile, valid for reads: host memory, or device memory where the
/// file's driver is `gds`.
pub unsafe fn write_runs(file: &DriverFile, runs: &[ByteRun], src: u64) -> crate::Result<()> {
    runs.iter().try_for_each(|r| {
        // SAFETY: as the caller guarantees.
        unsafe { file.write(r.file_at, r.len as usize, (src + r.at) as *const c_void) }
    })
}

/// The pieces (element ranges) a device tile of `elements` `item`-byte elements is staged in,
/// through buffers of at most `staging` bytes: large enough to keep the driver's I/O threads busy
/// (a task each), never larger than the buffers.
pub fn staged_pieces(elements: u64, item: usize, staging: usize) -> crate::Result<Vec<(u64, u64)>> {
    let vfd = crate::policy::settings::load()?;
    let (item, floor) = (item as u64, vfd.task_round_bytes() as u64);
    let piece = staged_piece_bytes(elements * item, staging as u64, floor);
    Ok(staging_pieces(elements, (piece / item).max(1), &[]))
}

/// Writes `runs` of the device tile at `src` (of `item`-byte elements) through `ring`: each of
/// `pieces` (element ranges) is copied down into a pinned buffer, then the parts of the runs in
/// it are written while the next piece comes down.
pub fn write_staged<S: RingStream>(
    file: &DriverFile,
    (ring, pieces): (&mut StagingRing<S>, &[(u64, u64)]),
    (src, item): (u64, usize),
    runs: &[ByteRun],
) -> crate::Result<()> {
    let mut next = 0usize; // the first run not yet written to its end
    staged::write(ring, pieces, item, src, |a, b, host| {
        let (lo, hi) = (a * item as u64, b * item as u64);
        while let Some(r) = runs.get(next) {
            let (from, to) = (r.at.max(lo), (r.at + r.len).min(hi));
            if from < to {
                let bytes = &host[(from - lo) as usize..(to - lo) as usize];
                // SAFETY: host memory holding the run's part in this piece.
                unsafe {
                    file.write(
                        r.file_at + (from - r.at),
                        bytes.len(),
                        bytes.as_ptr().cast(),
                    )
                }?;
            }
            if r.at + r.len > hi {
                break; // the run goes on in the next piece
            }
            next += 1;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_the_tiles_rows_at_their_file_addresses() {
        // Rows 1-2, columns 1-2 of a 4 x 3 array of 4-byte elements stored from byte 100.
        let tile = Block {
            start: vec![1, 1],
            count: vec![2, 2],
        };
        let runs = byte_runs(&tile, &[4, 3], 100, 4);
        let run = |file_at, at, len| ByteRun { file_at, at, len };
        assert_eq!(runs, [run(116, 0, 8), run(128, 8, 8)]);
        let rows = Block {
            start: vec![1, 0],
            count: vec![2, 3],
        };
        assert_eq!(byte_runs(&rows, &[4, 3], 100, 4), [run(112, 0, 24)]);
    }
}
