//! Runs of a file's bytes read for a stored dataset: a hyperslab of row-major storage cut into runs and
//! pieces, read on the pool's threads where large.

use super::{each_on, pool_for, Stored, PARALLEL_BYTES, PIECE_BYTES};
use h5gds_chunk_codec::place::SharedOut;
use h5gds_chunk_codec::Hyperslab;
use h5gds_runtime::hdf5::H5S_MAX_RANK;

/// The runs of a hyperslab of row-major storage, as [`Stored::read_runs`] cuts them: `rows`
/// runs of `row_bytes` (each a row's span where `stepped`), the n-th at the n-th position of
/// the axes before `rows_axes` (and the selection's start along `rows_axes`).
struct Runs<'a> {
    sel: &'a Hyperslab<'a>,
    /// Elements per index of each axis in the storage (held in place: a row read allocates
    /// nothing for it).
    strides: [u64; H5S_MAX_RANK],
    rank: usize,
    address: u64,
    element: u64,
    rows_axes: usize,
    rows: u64,
    row_bytes: u64,
    stepped: bool,
}

impl Runs<'_> {
    /// Hands `each` every piece (file byte, output byte, bytes), in the output's order: a run
    /// split at [`PIECE_BYTES`], a stepped row whole; stops at the first error.
    fn for_each(
        &self,
        mut each: impl FnMut((u64, u64, u64)) -> Result<(), String>,
    ) -> Result<(), String> {
        let (sel, strides) = (self.sel, &self.strides);
        let mut index = [0u64; H5S_MAX_RANK];
        for r in 0..self.rows {
            let mut at = 0u64;
            for a in 0..self.rows_axes {
                at += (sel.start[a] + index[a] * sel.step[a]) * strides[a];
            }
            if self.rows_axes < self.rank {
                at += sel.start[self.rows_axes] * strides[self.rows_axes];
            }
            let (file_at, out_at) = (self.address + at * self.element, r * self.row_bytes);
            if self.stepped {
                each((file_at, out_at, self.row_bytes))?;
            } else {
                let mut done = 0;
                while done < self.row_bytes {
                    let len = PIECE_BYTES.min(self.row_bytes - done);
                    each((file_at + done, out_at + done, len))?;
                    done += len;
                }
            }
            for a in (0..self.rows_axes).rev() {
                index[a] += 1;
                if index[a] < sel.count[a] {
                    break;
                }
                index[a] = 0;
            }
        }
        Ok(())
    }
}

impl Stored {
    /// Reads a hyperslab of row-major storage of `shape` at `address` (a contiguous dataset, or
    /// an unfiltered chunk): one read per run of the file that
    /// maps to a run of the output (rows of the selection, merged where whole trailing axes
    /// are selected), split into pieces for the pool when large; where the last axis has steps,
    /// each row's span is read and its elements picked. A read the pool does not take reads its
    /// pieces as they are found, with no list of them.
    pub(super) fn read_runs(
        &self,
        address: u64,
        shape: &[u64],
        sel: &Hyperslab,
        out: &mut [u8],
        threads: usize,
    ) -> Result<(), String> {
        let rank = shape.len();
        if rank > H5S_MAX_RANK {
            return Err(format!(
                "dataset {} has {rank} axes, more than HDF5's {H5S_MAX_RANK}",
                self.name
            ));
        }
        let e = self.element as u64;
        let mut strides = [1u64; H5S_MAX_RANK];
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
        let runs = Runs {
            sel,
            strides,
            rank,
            address,
            element: e,
            rows_axes,
            rows: sel.count[..rows_axes].iter().product(),
            row_bytes: run * e,
            stepped,
        };
        let stepped = stepped.then_some(sel.step[rank - 1]);
        // A source that batches (a remote object: each read a round trip) takes every run at once.
        if (out.len() >= PARALLEL_BYTES && threads > 1) || self.source.batches() {
            let mut pieces: Vec<(u64, u64, u64)> = Vec::new();
            runs.for_each(|piece| {
                pieces.push(piece);
                Ok(())
            })?;
            return self.read_pieces(&pieces, out, threads, stepped);
        }
        // SAFETY: the pieces are disjoint runs of `out`, which outlives the reads below.
        let out_ptr = unsafe { SharedOut::new(out.as_mut_ptr()) };
        runs.for_each(|piece| self.read_piece(out_ptr, piece, stepped))
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
        if stepped.is_none() {
            // The pieces as the disjoint runs of `out` they are, read by the source its own way.
            let base = out.as_mut_ptr();
            let dests = pieces
                .iter()
                .map(|&(file_at, out_at, len)| {
                    assert!(
                        out_at + len <= out.len() as u64,
                        "a piece lies inside the output"
                    );
                    // SAFETY: the pieces are disjoint runs of `out` (the callers' contract), so
                    // no two of these slices overlap, and `out` is borrowed for their lifetime.
                    let dest = unsafe {
                        std::slice::from_raw_parts_mut(base.add(out_at as usize), len as usize)
                    };
                    (file_at, dest)
                })
                .collect();
            return self
                .source
                .read_pieces(dests, threads)
                .map_err(|e| format!("dataset {} of {}: {e}", self.name, self.source.name()));
        }
        // SAFETY: the pieces are disjoint runs of `out`, which outlives the reads below.
        let out_ptr = unsafe { SharedOut::new(out.as_mut_ptr()) };
        let read_piece = |&piece: &(u64, u64, u64)| self.read_piece(out_ptr, piece, stepped);
        let pool = pool_for(out.len() >= PARALLEL_BYTES && pieces.len() > 1, threads);
        // Small pieces go to the threads in groups: one task per 4 KiB row costs more than the
        // row's read.
        let group = (PIECE_BYTES / (out.len() as u64 / pieces.len().max(1) as u64).max(1))
            .clamp(1, 64) as usize;
        each_on(pool.as_deref(), pieces.len(), group, |k| {
            read_piece(&pieces[k])
        })
    }

    /// Reads one piece (file byte, output byte, bytes) into the output at `out` (see
    /// [`Stored::read_pieces`]; `stepped`: the piece is a row whose elements lie that many
    /// elements apart in the file). The piece is a run of the output no other thread writes.
    fn read_piece(
        &self,
        out: SharedOut,
        (file_at, out_at, len): (u64, u64, u64),
        stepped: Option<u64>,
    ) -> Result<(), String> {
        let e = self.element as u64;
        let failed = |err: String| {
            format!(
                "dataset {} of {}: reading {len} bytes at byte {file_at} failed: {err}",
                self.name,
                self.source.name()
            )
        };
        // SAFETY: the pieces are disjoint runs of the output, each written by one thread
        // (`SharedOut::new`'s contract, kept by the callers).
        let dest = unsafe { std::slice::from_raw_parts_mut(out.at(out_at), len as usize) };
        let Some(last_step) = stepped else {
            return self.source.read_at(file_at, dest).map_err(failed);
        };
        // A row whose elements are `last_step` apart: read its span, keep every one.
        let n = len / e;
        let mut span = vec![0u8; (((n - 1) * last_step + 1) * e) as usize];
        self.source.read_at(file_at, &mut span).map_err(failed)?;
        for (k, item) in dest.chunks_exact_mut(e as usize).enumerate() {
            let from = k * (last_step * e) as usize;
            item.copy_from_slice(&span[from..from + e as usize]);
        }
        Ok(())
    }
}
