//! Runs of a file's bytes read for a stored dataset: a hyperslab of row-major storage cut into runs and
//! pieces, read on the pool's threads where large.

use super::{each_on, pool_for, Stored, PARALLEL_BYTES, PIECE_BYTES};
use h5gds_chunk_codec::place::SharedOut;
use h5gds_chunk_codec::Hyperslab;
use std::os::unix::fs::FileExt;

impl Stored {
    /// Reads a hyperslab of row-major storage of `shape` at `address` (a contiguous dataset, or
    /// an unfiltered chunk): one read per run of the file that
    /// maps to a run of the output (rows of the selection, merged where whole trailing axes
    /// are selected), split into pieces for the pool when large; where the last axis has steps,
    /// each row's span is read and its elements picked.
    pub(super) fn read_runs(
        &self,
        address: u64,
        shape: &[u64],
        sel: &Hyperslab,
        out: &mut [u8],
        threads: usize,
    ) -> Result<(), String> {
        let rank = shape.len();
        let e = self.element as u64;
        let mut strides = vec![1u64; rank];
        for a in (0..rank.saturating_sub(1)).rev() {
            strides[a] = strides[a + 1] * shape[a + 1];
        }
        // Trailing axes selected whole merge into the run of the axis before them.
        let full = |a: usize| sel.count[a] == shape[a] && (sel.step[a] == 1 || sel.count[a] <= 1);
        let mut split = rank;
        while split > 0 && full(split - 1) {
            split -= 1;
        }
        let tail: u64 = shape[split..].iter().product();
        // The run, from the last axis not selected whole (`j`): with steps of 1 its count of
        // whole trailing blocks (rows over the axes before it); with steps, one trailing block
        // per index (rows over it too), or, where it is the last axis, its elements picked from
        // the row's span (`stepped`).
        let (rows_axes, run, stepped) = match split.checked_sub(1) {
            None => (0, tail, false),
            Some(j) if sel.step[j] == 1 || sel.count[j] <= 1 => (j, sel.count[j] * tail, false),
            Some(j) if j + 1 < rank => (split, tail, false),
            Some(j) => (j, sel.count[j], true),
        };
        let rows: u64 = sel.count[..rows_axes].iter().product();
        let mut pieces: Vec<(u64, u64, u64)> = Vec::new(); // (file byte, output byte, bytes)
        let mut index = vec![0u64; rows_axes];
        let row_bytes = run * e;
        for r in 0..rows {
            let mut at = 0u64;
            for a in 0..rows_axes {
                at += (sel.start[a] + index[a] * sel.step[a]) * strides[a];
            }
            if rows_axes < rank {
                at += sel.start[rows_axes] * strides[rows_axes];
            }
            let (file_at, out_at) = (address + at * e, r * row_bytes);
            if stepped {
                pieces.push((file_at, out_at, row_bytes));
            } else {
                let mut done = 0;
                while done < row_bytes {
                    let len = PIECE_BYTES.min(row_bytes - done);
                    pieces.push((file_at + done, out_at + done, len));
                    done += len;
                }
            }
            for a in (0..rows_axes).rev() {
                index[a] += 1;
                if index[a] < sel.count[a] {
                    break;
                }
                index[a] = 0;
            }
        }
        let stepped = stepped.then_some(sel.step[rank - 1]);
        self.read_pieces(&pieces, out, threads, stepped)
    }

    /// Reads `pieces` (file byte, output byte, bytes: disjoint runs of `out`) from the file,
    /// on `threads` of the pool where `out` is large enough to gain from it. `stepped`: each
    /// piece is a row whose elements lie that many elements apart in the file (its span is read,
    /// every one kept).
    pub(super) fn read_pieces(
        &self,
        pieces: &[(u64, u64, u64)],
        out: &mut [u8],
        threads: usize,
        stepped: Option<u64>,
    ) -> Result<(), String> {
        let e = self.element as u64;
        // SAFETY: the pieces are disjoint runs of `out`, which outlives the reads below.
        let out_ptr = unsafe { SharedOut::new(out.as_mut_ptr()) };
        let read_piece = |&(file_at, out_at, len): &(u64, u64, u64)| -> Result<(), String> {
            let failed = |err: std::io::Error| {
                format!(
                    "dataset {}: reading {len} bytes at byte {file_at} of its file failed: {err}",
                    self.name
                )
            };
            // SAFETY: the pieces are disjoint runs of the output, each written by one thread.
            let dest = unsafe { std::slice::from_raw_parts_mut(out_ptr.at(out_at), len as usize) };
            let Some(last_step) = stepped else {
                return self.file.read_exact_at(dest, file_at).map_err(failed);
            };
            // A row whose elements are `last_step` apart: read its span, keep every one.
            let n = len / e;
            let mut span = vec![0u8; (((n - 1) * last_step + 1) * e) as usize];
            self.file
                .read_exact_at(&mut span, file_at)
                .map_err(failed)?;
            for (k, item) in dest.chunks_exact_mut(e as usize).enumerate() {
                let from = k * (last_step * e) as usize;
                item.copy_from_slice(&span[from..from + e as usize]);
            }
            Ok(())
        };
        let pool = pool_for(out.len() >= PARALLEL_BYTES && pieces.len() > 1, threads);
        // Small pieces go to the threads in groups: one task per 4 KiB row costs more than the
        // row's read.
        let group = (PIECE_BYTES / (out.len() as u64 / pieces.len().max(1) as u64).max(1))
            .clamp(1, 64) as usize;
        each_on(pool.as_deref(), pieces.len(), group, |k| {
            read_piece(&pieces[k])
        })
    }
}
