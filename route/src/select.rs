//! Index arithmetic on row-major arrays, shared by the staged path and batched reads: boxes
//! (hyperslabs), the boxes that make up a flat range of elements, the runs a box occupies inside
//! a larger array, and the grid of chunks over an array. Pure functions, unit-tested here.

/// A box (hyperslab) of an array: `count[i]` elements from `start[i]` in each dimension.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Block {
    pub start: Vec<u64>,
    pub count: Vec<u64>,
}

impl Block {
    /// The whole of an array of `shape`.
    pub fn whole(shape: &[u64]) -> Block {
        Block {
            start: vec![0; shape.len()],
            count: shape.to_vec(),
        }
    }

    /// The number of elements.
    pub fn len(&self) -> u64 {
        self.count.iter().product()
    }

    /// Whether it holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The intersection with `other`, if not empty.
    pub fn intersect(&self, other: &Block) -> Option<Block> {
        let mut out = Block {
            start: Vec::with_capacity(self.start.len()),
            count: Vec::with_capacity(self.start.len()),
        };
        for i in 0..self.start.len() {
            let lo = self.start[i].max(other.start[i]);
            let hi = (self.start[i] + self.count[i]).min(other.start[i] + other.count[i]);
            if hi <= lo {
                return None;
            }
            out.start.push(lo);
            out.count.push(hi - lo);
        }
        Some(out)
    }

    /// This block moved by `-origin` (so that it is relative to a block starting at `origin`).
    pub fn relative_to(&self, origin: &[u64]) -> Block {
        Block {
            start: self.start.iter().zip(origin).map(|(s, o)| s - o).collect(),
            count: self.count.clone(),
        }
    }
}

/// At least how many pieces a staged transfer is cut into where its pieces can stay above their
/// floor: two buffers take turns, so the first piece's file side and the last piece's copy run
/// alone, and `n` even pieces hide at most `(n - 1) / n` of the shorter stage. Measured with the
/// emulator's modelled link (`benches/staged_stages.py`, EMULATED): 4 pieces of 128 MiB hid 0.72 of
/// a 512 MiB read's copies.
pub const PIPELINE_PIECES: u64 = 8;

/// The smallest staged piece: each costs an HDF5 call, a copy and a synchronization.
pub const MIN_STAGED_PIECE: u64 = 16 << 20;

/// The bytes of each piece of a staged transfer of `total` bytes through buffers of at most
/// `largest` bytes: a [`PIPELINE_PIECES`]th of the transfer, but no less than `floor` (what keeps
/// the file side's threads busy: the driver's tasks, or a chunk per decoding thread) nor
/// [`MIN_STAGED_PIECE`], and never more than `largest` or the transfer.
pub fn staged_piece_bytes(total: u64, largest: u64, floor: u64) -> u64 {
    (total / PIPELINE_PIECES)
        .max(floor)
        .max(MIN_STAGED_PIECE)
        .min(largest)
        .min(total)
        .max(1)
}

/// Most bytes a piece of a host-decoded read grows to, so that it holds a chunk for each decoding
/// thread.
pub const DECODE_STAGING_MAX: u64 = 256 << 20;

/// How a read whose chunks are decoded on the host is staged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodedPieces {
    /// The bytes of each piece ([`staged_piece_bytes`]).
    pub piece_bytes: u64,
    /// Where the selection enters a new layer of chunks ([`chunk_layer_cuts`]): pieces end there,
    /// so no chunk is decoded for two pieces.
    pub cuts: Vec<u64>,
}

/// The pieces of a read of the selection `start`/`step`/`count` (file coordinates) of a dataset in
/// chunks of `chunk`, elements of `item` bytes, decoded on `threads` host threads through
/// buffers of `staging` bytes: the buffers grow to hold a chunk per thread (up to
/// [`DECODE_STAGING_MAX`]), and a piece holds at least that and the selection's largest layer of
/// chunks (a smaller piece would end inside a layer, whose chunks would be decoded twice).
pub fn decoded_pieces(
    start: &[u64],
    step: &[u64],
    count: &[u64],
    chunk: &[u64],
    item: u64,
    threads: u64,
    staging: u64,
) -> DecodedPieces {
    let chunk_bytes = chunk.iter().product::<u64>() * item;
    let per_thread = threads.saturating_mul(chunk_bytes).min(DECODE_STAGING_MAX);
    let cuts = chunk_layer_cuts(start, step, count, chunk);
    let elements: u64 = count.iter().product();
    let starts = std::iter::once(0).chain(cuts.iter().copied());
    let ends = cuts.iter().copied().chain(std::iter::once(elements));
    let layer = starts.zip(ends).map(|(a, b)| b - a).max().unwrap_or(0) * item;
    DecodedPieces {
        piece_bytes: staged_piece_bytes(
            elements * item,
            staging.max(per_thread),
            per_thread.max(layer),
        ),
        cuts,
    }
}

/// Pieces of at most `per` elements covering `[0, elements)` in order, each ending at the last
/// of `cuts` (increasing element offsets) it reaches, if any: so pieces cut where whole runs
/// between cuts fit, and elsewhere hold `per` elements.
pub fn staging_pieces(elements: u64, per: u64, cuts: &[u64]) -> Vec<(u64, u64)> {
    let per = per.max(1);
    let mut out = Vec::new();
    let mut cuts = cuts.iter().copied().peekable();
    let mut a = 0u64;
    while a < elements {
        let limit = (a + per).min(elements);
        let mut b = limit;
        while let Some(&c) = cuts.peek() {
            if c > limit {
                break;
            }
            if c > a && limit < elements {
                b = c;
            }
            cuts.next();
        }
        out.push((a, b));
        a = b;
    }
    out
}

/// The element offsets (in row-major order of the selection `count`, from file element `start`
/// with `step`) where a selection crosses into the next layer of chunks of shape `chunk` along
/// the first axis: staging pieces cut there never share a chunk.
pub fn chunk_layer_cuts(start: &[u64], step: &[u64], count: &[u64], chunk: &[u64]) -> Vec<u64> {
    let (Some(&c0), Some(&n0), Some(&s0), Some(&k0)) =
        (chunk.first(), count.first(), start.first(), step.first())
    else {
        return Vec::new();
    };
    if n0 == 0 {
        return Vec::new();
    }
    let row: u64 = count[1..].iter().product();
    let (c0, k0) = (c0.max(1), k0.max(1));
    let last = s0 + (n0 - 1) * k0;
    // Selection index i reads file row s0 + i * k0; layer L starts at the first i reaching L * c0.
    (s0 / c0 + 1..=last / c0)
        .map(|layer| (layer * c0 - s0).div_ceil(k0) * row)
        .collect()
}

/// The blocks whose union is the elements `[a, b)` of an array of `shape` in row-major order,
/// each in row-major order, in order: at most `2 * rank - 1` of them. A rank-0 array has one
/// element and one empty-shaped block.
pub fn flat_range_blocks(shape: &[u64], a: u64, b: u64) -> Vec<Block> {
    let mut out = Vec::new();
    if a >= b {
        return out;
    }
    if shape.is_empty() {
        out.push(Block {
            start: vec![],
            count: vec![],
        });
        return out;
    }
    push_range(shape, &mut Vec::new(), a, b, &mut out);
    out
}

/// Appends the blocks of `[a, b)` within the sub-array of `shape` whose outer indices are
/// `prefix` (fixed, count 1 each).
fn push_range(shape: &[u64], prefix: &mut Vec<u64>, a: u64, b: u64, out: &mut Vec<Block>) {
    let block = |prefix: &[u64], first: u64, rows: u64, inner: &[u64]| {
        let mut start = prefix.to_vec();
        let mut count = vec![1; prefix.len()];
        start.push(first);
        count.push(rows);
        start.extend(std::iter::repeat_n(0, inner.len()));
        count.extend_from_slice(inner);
        Block { start, count }
    };
    if shape.len() == 1 {
        out.push(block(prefix, a, b - a, &[]));
        return;
    }
    let inner: u64 = shape[1..].iter().product();
    let (mut a, b) = (a, b);
    // A partial first row.
    if a % inner != 0 {
        let row = a / inner;
        let end = b.min((row + 1) * inner);
        prefix.push(row);
        push_range(&shape[1..], prefix, a % inner, end - row * inner, out);
        prefix.pop();
        a = end;
        if a == b {
            return;
        }
    }
    // Whole rows.
    let full = (b - a) / inner;
    if full > 0 {
        out.push(block(prefix, a / inner, full, &shape[1..]));
        a += full * inner;
    }
    // A partial last row.
    if a < b {
        let row = a / inner;
        prefix.push(row);
        push_range(&shape[1..], prefix, 0, b - row * inner, out);
        prefix.pop();
    }
}

/// Row-major strides (in elements) of an array of `shape`.
pub fn strides(shape: &[u64]) -> Vec<u64> {
    let mut out = vec![1u64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        out[i] = out[i + 1] * shape[i + 1];
    }
    out
}

/// How a block's elements, in its own row-major order, lie in an enclosing array: contiguous
/// runs of `run_len` elements, run `k` starting at element `run_start(k)` of the array.
#[derive(Clone, Debug)]
pub struct Runs {
    pub run_len: u64,
    /// Block counts of the dimensions that index runs (outer), and the array's strides of them.
    outer_count: Vec<u64>,
    outer_stride: Vec<u64>,
    base: u64,
}

impl Runs {
    /// The runs of `block` (relative to the array's origin) inside an array of `shape`.
    pub fn new(block: &Block, shape: &[u64]) -> Runs {
        let stride = strides(shape);
        let rank = shape.len();
        let base: u64 = (0..rank).map(|i| block.start[i] * stride[i]).sum();
        // Trailing dimensions that the block spans fully merge into the run.
        let mut d = rank;
        while d > 0 && block.count[d - 1] == shape[d - 1] {
            d -= 1;
        }
        // Dimension d - 1 (if any) is partial: it is the run's outermost dimension.
        let split = d.saturating_sub(1);
        let run_len: u64 = block.count[split..].iter().product();
        Runs {
            run_len,
            outer_count: block.count[..split].to_vec(),
            outer_stride: stride[..split].to_vec(),
            base,
        }
    }

    /// The array element where run `k` starts.
    pub fn run_start(&self, mut k: u64) -> u64 {
        let mut offset = self.base;
        for i in (0..self.outer_count.len()).rev() {
            offset += (k % self.outer_count[i]) * self.outer_stride[i];
            k /= self.outer_count[i];
        }
        offset
    }

    /// The pieces of the block's elements `[a, b)` (in its own order): for each, the position
    /// in `[a, b)` where it starts, the array element it goes to, and its length.
    pub fn pieces(&self, a: u64, b: u64) -> Vec<(u64, u64, u64)> {
        let mut out = Vec::new();
        if self.run_len == 0 {
            return out;
        }
        let mut p = a;
        while p < b {
            let (k, within) = (p / self.run_len, p % self.run_len);
            let len = (self.run_len - within).min(b - p);
            out.push((p - a, self.run_start(k) + within, len));
            p += len;
        }
        out
    }
}

/// The chunks of `chunk_shape` tiling an array of `shape`, in row-major order, clipped at the
/// boundary. An array with a zero-length dimension has no chunks; a rank-0 array has one.
pub fn chunk_grid(shape: &[u64], chunk_shape: &[u64]) -> ChunkGrid {
    let counts: Vec<u64> = shape
        .iter()
        .zip(chunk_shape)
        .map(|(&n, &c)| n.div_ceil(c))
        .collect();
    let total = counts.iter().product();
    ChunkGrid {
        shape: shape.to_vec(),
        chunk_shape: chunk_shape.to_vec(),
        counts,
        next: 0,
        end: total,
        total,
    }
}

/// Iterator over the chunk blocks of [`chunk_grid`].
#[derive(Clone, Debug)]
pub struct ChunkGrid {
    shape: Vec<u64>,
    chunk_shape: Vec<u64>,
    counts: Vec<u64>,
    next: u64,
    /// One past the last chunk the iterator yields (`total` unless restricted).
    end: u64,
    total: u64,
}

impl ChunkGrid {
    /// The block of chunk number `k` (row-major).
    pub fn block(&self, mut k: u64) -> Block {
        let rank = self.shape.len();
        let mut start = vec![0; rank];
        let mut count = vec![0; rank];
        for i in (0..rank).rev() {
            let index = k % self.counts[i];
            k /= self.counts[i];
            start[i] = index * self.chunk_shape[i];
            count[i] = self.chunk_shape[i].min(self.shape[i] - start[i]);
        }
        Block { start, count }
    }

    /// The number of chunks.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Restricts the iteration to chunks `[first, end)` (clipped to the grid): one rank's share
    /// of a collective `from_file_batched`.
    pub fn restrict(&mut self, first: u64, end: u64) {
        self.end = end.min(self.total);
        self.next = first.min(self.end);
    }
}

impl Iterator for ChunkGrid {
    type Item = Block;
    fn next(&mut self) -> Option<Block> {
        if self.next >= self.end {
            return None;
        }
        let block = self.block(self.next);
        self.next += 1;
        Some(block)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = (self.end - self.next) as usize;
        (left, Some(left))
    }
}

/// The storage chunks (of `chunk_shape`, the dataset's layout) that `block` touches, as their
/// grid coordinates times the chunk shape (HDF5's chunk offsets), with the part of `block`
/// inside each.
pub fn chunks_touching(block: &Block, chunk_shape: &[u64]) -> Vec<(Vec<u64>, Block)> {
    let rank = chunk_shape.len();
    let first: Vec<u64> = (0..rank).map(|i| block.start[i] / chunk_shape[i]).collect();
    let last: Vec<u64> = (0..rank)
        .map(|i| (block.start[i] + block.count[i] - 1) / chunk_shape[i])
        .collect();
    let mut out = Vec::new();
    if block.count.contains(&0) {
        return out;
    }
    let mut index = first.clone();
    loop {
        let offset: Vec<u64> = (0..rank).map(|i| index[i] * chunk_shape[i]).collect();
        let chunk = Block {
            start: offset.clone(),
            count: chunk_shape.to_vec(),
        };
        if let Some(part) = chunk.intersect(block) {
            out.push((offset, part));
        }
        // Advance the multi-index, last dimension fastest.
        let mut i = rank;
        loop {
            if i == 0 {
                return out;
            }
            i -= 1;
            if index[i] < last[i] {
                index[i] += 1;
                break;
            }
            index[i] = first[i];
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn staged_pieces_are_an_eighth_of_the_transfer_between_their_floor_and_the_buffers() {
        const M: u64 = 1 << 20;
        // 512 MiB through 128 MiB buffers: 8 pieces of 64 MiB, not 4 of 128.
        assert_eq!(staged_piece_bytes(512 * M, 128 * M, 0), 64 * M);
        // 4 GiB: the buffers bound the pieces.
        assert_eq!(staged_piece_bytes(4096 * M, 128 * M, 0), 128 * M);
        // 64 MiB: pieces of at least 16 MiB, or of the floor (16 threads x 4 MiB tasks).
        assert_eq!(staged_piece_bytes(64 * M, 128 * M, 0), 16 * M);
        assert_eq!(staged_piece_bytes(512 * M, 128 * M, 64 * M), 64 * M);
        assert_eq!(staged_piece_bytes(256 * M, 128 * M, 64 * M), 64 * M);
        // Small transfers go in one piece; smaller buffers win over the floor.
        assert_eq!(staged_piece_bytes(3 * M, 128 * M, 0), 3 * M);
        assert_eq!(staged_piece_bytes(512 * M, 8 * M, 64 * M), 8 * M);
        assert_eq!(staged_piece_bytes(0, 128 * M, 0), 1);
    }

    #[test]
    fn decoded_pieces_hold_a_chunk_per_thread_and_a_whole_layer() {
        const M: u64 = 1 << 20;
        // 1-D, 512 MiB of float32 in 1 MiB chunks, 2 threads, 128 MiB buffers: eighths, cut at
        // every chunk.
        let n = 128 * M;
        let d = decoded_pieces(&[0], &[1], &[n], &[M / 4], 4, 2, 128 * M);
        assert_eq!(d.piece_bytes, 64 * M);
        assert_eq!(d.cuts.len(), 511);
        // 16 threads of 16 MiB chunks: pieces grow to 256 MiB.
        let d = decoded_pieces(&[0], &[1], &[n], &[4 * M], 4, 16, 128 * M);
        assert_eq!(d.piece_bytes, 256 * M);
        // 2-D, 64 MiB whose chunk layers hold 32 MiB: pieces of a layer, not 16 MiB.
        let d = decoded_pieces(
            &[0, 0],
            &[1, 1],
            &[64, 256 * 1024],
            &[32, 65536],
            4,
            2,
            128 * M,
        );
        assert_eq!((d.piece_bytes, d.cuts), (32 * M, vec![32 * 256 * 1024]));
        // Small buffers bound the pieces, whatever the layers.
        let d = decoded_pieces(&[0, 0], &[1, 1], &[400, 50], &[7, 16], 4, 2, 4096);
        assert_eq!(d.piece_bytes, 4096);
    }

    #[test]
    fn staging_pieces_cut_where_whole_runs_fit() {
        // No cuts: pieces of `per`.
        assert_eq!(staging_pieces(10, 4, &[]), [(0, 4), (4, 8), (8, 10)]);
        // Cuts every 3: pieces end on the last cut each reaches.
        assert_eq!(staging_pieces(10, 7, &[3, 6, 9]), [(0, 6), (6, 10)]);
        // A run between cuts longer than `per` is split by `per`.
        assert_eq!(
            staging_pieces(10, 2, &[5]),
            [(0, 2), (2, 4), (4, 5), (5, 7), (7, 9), (9, 10)]
        );
        assert!(staging_pieces(0, 4, &[]).is_empty());
        assert_eq!(staging_pieces(3, 0, &[]), [(0, 1), (1, 2), (2, 3)]);
    }

    #[test]
    fn chunk_layer_cuts_follow_the_selection_into_each_layer() {
        // Rows 3..13 of chunks of 4 rows, rows of 5 elements: layers start at rows 4, 8, 12.
        assert_eq!(
            chunk_layer_cuts(&[3, 0], &[1, 1], &[10, 5], &[4, 2]),
            [5, 25, 45]
        );
        // Every third row from 1 (1, 4, 7, 10): rows 4 and 10 start layers 1 and 2 (row 8 is not
        // selected; 10 is the first in layer 2).
        assert_eq!(chunk_layer_cuts(&[1], &[3], &[4], &[4]), [1, 3]);
        // Inside one layer, or a scalar: no cut.
        assert!(chunk_layer_cuts(&[0], &[1], &[4], &[4]).is_empty());
        assert!(chunk_layer_cuts(&[], &[], &[], &[]).is_empty());
    }

    use super::*;

    /// Every element of `shape`, flat index -> multi-index.
    fn unravel(shape: &[u64], mut k: u64) -> Vec<u64> {
        let mut idx = vec![0; shape.len()];
        for i in (0..shape.len()).rev() {
            idx[i] = k % shape[i];
            k /= shape[i];
        }
        idx
    }

    fn elements_of(block: &Block) -> Vec<Vec<u64>> {
        (0..block.len())
            .map(|k| {
                unravel(&block.count, k)
                    .iter()
                    .zip(&block.start)
                    .map(|(i, s)| i + s)
                    .collect()
            })
            .collect()
    }

    #[test]
    fn flat_ranges_become_blocks_covering_exactly_the_range_in_order() {
        for shape in [vec![7u64], vec![3, 5], vec![2, 3, 4], vec![3, 1, 4, 2]] {
            let n: u64 = shape.iter().product();
            for a in 0..n {
                for b in a..=n {
                    let blocks = flat_range_blocks(&shape, a, b);
                    assert!(blocks.len() < 2 * shape.len().max(1), "{shape:?} {a} {b}");
                    let got: Vec<Vec<u64>> = blocks.iter().flat_map(elements_of).collect();
                    let want: Vec<Vec<u64>> = (a..b).map(|k| unravel(&shape, k)).collect();
                    assert_eq!(got, want, "{shape:?} [{a}, {b})");
                }
            }
        }
        assert_eq!(flat_range_blocks(&[], 0, 1).len(), 1);
    }

    #[test]
    fn runs_place_every_element_of_a_block_in_the_array() {
        let shape = [4u64, 5, 6];
        let stride = strides(&shape);
        let blocks = [
            Block::whole(&shape),
            Block {
                start: vec![1, 0, 0],
                count: vec![2, 5, 6],
            },
            Block {
                start: vec![1, 2, 3],
                count: vec![3, 2, 3],
            },
            Block {
                start: vec![0, 1, 0],
                count: vec![4, 3, 6],
            },
        ];
        for block in &blocks {
            let runs = Runs::new(block, &shape);
            let want: Vec<u64> = elements_of(block)
                .iter()
                .map(|idx| idx.iter().zip(&stride).map(|(i, s)| i * s).sum())
                .collect();
            for (a, b) in [(0, block.len()), (1, block.len() - 2), (5, 17)] {
                let mut got = Vec::new();
                for (at, dest, len) in runs.pieces(a, b) {
                    assert_eq!(at, got.len() as u64);
                    got.extend(dest..dest + len);
                }
                assert_eq!(got, want[a as usize..b as usize], "{block:?} [{a}, {b})");
            }
        }
        // A block spanning whole rows is one run.
        assert_eq!(Runs::new(&blocks[1], &shape).run_len, 60);
    }

    #[test]
    fn chunk_grids_clip_at_the_boundary_and_cover_everything_once() {
        let lengths: Vec<u64> = chunk_grid(&[5], &[2]).map(|b| b.count[0]).collect();
        assert_eq!(lengths, [2, 2, 1]);
        let shape = [5u64, 3, 4];
        let grid = chunk_grid(&shape, &[2, 3, 3]);
        assert_eq!(grid.total(), 3 * 2);
        let mut seen = vec![0u32; 60];
        let stride = strides(&shape);
        let mut previous: Option<Vec<u64>> = None;
        for block in grid {
            if let Some(prev) = &previous {
                assert!(prev < &block.start, "row-major order");
            }
            previous = Some(block.start.clone());
            for idx in elements_of(&block) {
                let k: u64 = idx.iter().zip(&stride).map(|(i, s)| i * s).sum();
                seen[k as usize] += 1;
            }
        }
        assert!(seen.iter().all(|&n| n == 1));
        assert_eq!(chunk_grid(&[0, 3], &[1, 1]).count(), 0);
        assert_eq!(chunk_grid(&[], &[]).count(), 1);
    }

    #[test]
    fn storage_chunks_touching_a_block_are_found_with_their_parts() {
        let block = Block {
            start: vec![3, 1],
            count: vec![4, 5],
        };
        let found = chunks_touching(&block, &[2, 4]);
        let offsets: Vec<Vec<u64>> = found.iter().map(|(o, _)| o.clone()).collect();
        assert_eq!(
            offsets,
            [[2, 0], [2, 4], [4, 0], [4, 4], [6, 0], [6, 4]].map(|a| a.to_vec())
        );
        let total: u64 = found.iter().map(|(_, part)| part.len()).sum();
        assert_eq!(total, block.len());
    }
}
