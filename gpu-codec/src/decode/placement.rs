//! Where a decoded chunk's elements go in the output array: the strided copies (one per chunk
//! of rank 3 or less) that place the part of it a read needs.

use h5gds_route::select::Block;
use h5gds_runtime::stream::Strided;

/// The copies that place `part` (file coordinates) out of a decoded chunk at `origin` of shape
/// `chunk` into an array holding `region`, elements of `item` bytes, offsets in bytes from the
/// chunk's and the array's first byte. Trailing dimensions the part spans whole in both merge
/// into one row; the next two dimensions out are one copy's rows and slices, so a chunk of rank
/// 3 or less is one copy (one CUDA call), not one per row; dimensions further out repeat it.
pub fn placement(
    part: &Block,
    origin: &[u64],
    chunk: &[u64],
    region: &Block,
    item: usize,
) -> Vec<Strided> {
    let rank = part.count.len();
    if rank == 0 {
        return vec![Strided::run(0, 0, item)];
    }
    let strides = |shape: &[u64]| {
        let mut s = vec![1u64; shape.len()];
        for d in (0..shape.len().saturating_sub(1)).rev() {
            s[d] = s[d + 1] * shape[d + 1];
        }
        s
    };
    let (cs, rs) = (strides(chunk), strides(&region.count));
    // `k` is the first dimension of a row.
    let mut k = rank - 1;
    while k > 0 && part.count[k] == chunk[k] && part.count[k] == region.count[k] {
        k -= 1;
    }
    let es = item as u64;
    let width = (part.count[k..].iter().product::<u64>() * es) as usize;
    let mut copy = Strided::run(0, 0, width);
    if k >= 1 {
        copy.height = part.count[k - 1] as usize;
        copy.src_pitch = (cs[k - 1] * es) as usize;
        copy.dst_pitch = (rs[k - 1] * es) as usize;
        (copy.src_rows, copy.dst_rows) = (copy.height, copy.height);
    }
    if k >= 2 {
        copy.depth = part.count[k - 2] as usize;
        copy.src_rows = chunk[k - 1] as usize;
        copy.dst_rows = region.count[k - 1] as usize;
    }
    // Dimensions outside the copy's own, each combination one copy.
    let outer = k.saturating_sub(2);
    let repeats: u64 = part.count[..outer].iter().product();
    let mut copies = Vec::with_capacity(repeats as usize);
    let mut index = vec![0u64; outer];
    for _ in 0..repeats {
        let (mut src, mut dst) = (0u64, 0u64);
        for d in 0..rank {
            let at = part.start[d] + if d < outer { index[d] } else { 0 };
            src += (at - origin[d]) * cs[d];
            dst += (at - region.start[d]) * rs[d];
        }
        copies.push(Strided {
            src: src * es,
            dst: dst * es,
            ..copy
        });
        for d in (0..outer).rev() {
            index[d] += 1;
            if index[d] < part.count[d] {
                break;
            }
            index[d] = 0;
        }
    }
    copies
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(start: &[u64], count: &[u64]) -> Block {
        Block {
            start: start.to_vec(),
            count: count.to_vec(),
        }
    }

    /// Every row `placement` copies, in elements (items of one byte): (source, destination,
    /// length).
    fn rows(part: &Block, origin: &[u64], chunk: &[u64], region: &Block) -> Vec<(u64, u64, u64)> {
        placement(part, origin, chunk, region, 1)
            .iter()
            .flat_map(|c| {
                c.rows()
                    .map(|(s, d, n)| (s, d, n as u64))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    #[test]
    fn whole_rows_merge_into_one_run_and_edges_are_clipped() {
        // A 2x4 chunk at (2, 0) of a 5x4 region: rows span the region, one run of 8.
        let region = block(&[0, 0], &[5, 4]);
        let copies = placement(&block(&[2, 0], &[2, 4]), &[2, 0], &[2, 4], &region, 4);
        assert_eq!(copies, [Strided::run(0, 32, 32)]);
        // The edge chunk at (4, 0) holds one row of the region (the chunk has two).
        let copies = placement(&block(&[4, 0], &[1, 4]), &[4, 0], &[2, 4], &region, 1);
        assert_eq!(copies, [Strided::run(0, 16, 4)]);
        // A 2x2 chunk at (2, 2) of a 5x5 region starting at (1, 1): clipped rows of 2, in one
        // copy of two rows (pitch 2 in the chunk, 5 in the region).
        let region = block(&[1, 1], &[5, 5]);
        let part = block(&[2, 2], &[2, 2]);
        assert_eq!(
            rows(&part, &[2, 2], &[2, 2], &region),
            [(0, 6, 2), (2, 11, 2)]
        );
        let copies = placement(&part, &[2, 2], &[2, 2], &region, 8);
        assert_eq!(copies.len(), 1);
        let c = copies[0];
        assert_eq!(
            (
                c.src,
                c.dst,
                c.width,
                c.height,
                c.depth,
                c.src_pitch,
                c.dst_pitch
            ),
            (0, 48, 16, 2, 1, 16, 40)
        );
        // Part of a chunk: elements (3, 3..5) of chunk (2, 2)-(4, 4) in a region from (0, 0).
        let region = block(&[0, 0], &[4, 5]);
        assert_eq!(
            rows(&block(&[3, 3], &[1, 1]), &[2, 2], &[2, 2], &region),
            [(3, 18, 1)]
        );
    }

    #[test]
    fn three_dimensional_chunks_place_in_one_copy_and_higher_ranks_repeat_it() {
        let region = block(&[0, 0, 0], &[3, 2, 4]);
        // Chunk 2x2x4 at (2, 0, 0), edge: one plane of 2x4 is inside.
        let copies = placement(
            &block(&[2, 0, 0], &[1, 2, 4]),
            &[2, 0, 0],
            &[2, 2, 4],
            &region,
            1,
        );
        assert_eq!(copies, [Strided::run(0, 16, 8)]);
        // Chunk 2x2x2 at (0, 0, 2): runs of 2 per row, rows of 4 in the region: one copy of two
        // slices of two rows.
        let part = block(&[0, 0, 2], &[2, 2, 2]);
        assert_eq!(
            rows(&part, &[0, 0, 2], &[2, 2, 2], &region),
            [(0, 2, 2), (2, 6, 2), (4, 10, 2), (6, 14, 2)]
        );
        assert_eq!(
            placement(&part, &[0, 0, 2], &[2, 2, 2], &region, 1).len(),
            1
        );
        // Rank 4, a 2x2x2x2 chunk at (0, 0, 0, 1) of a 2x2x2x3 region: one 3-D copy per index of
        // the first dimension, the same rows as element by element.
        let region = block(&[0, 0, 0, 0], &[2, 2, 2, 3]);
        let part = block(&[0, 0, 0, 1], &[2, 2, 2, 2]);
        let copies = placement(&part, &[0, 0, 0, 1], &[2, 2, 2, 2], &region, 1);
        assert_eq!(copies.len(), 2);
        let mut expected = Vec::new();
        for a in 0..2u64 {
            for b in 0..2u64 {
                for c in 0..2u64 {
                    expected.push((a * 8 + b * 4 + c * 2, a * 12 + b * 6 + c * 3 + 1, 2));
                }
            }
        }
        assert_eq!(rows(&part, &[0, 0, 0, 1], &[2, 2, 2, 2], &region), expected);
        // Scalars: one element.
        assert_eq!(
            placement(&block(&[], &[]), &[], &[], &block(&[], &[]), 4),
            [Strided::run(0, 0, 4)]
        );
    }
}
