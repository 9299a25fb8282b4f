//! A dataset's chunk index held in memory: where each allocated chunk's stored bytes are, looked
//! up by the chunk's first element. Readers list it once (`H5Dchunk_iter`) and then look chunks up
//! with no HDF5 call, so it is kept small: training data often has millions of chunks, and a map
//! keyed by coordinate vectors cost 177 bytes a chunk (1 Mi chunks of a 2-D dataset: 177 MB, and
//! each DataLoader worker holds its own). Chunks of a written dataset fill its chunk grid, so the
//! usual index is a table in grid order, 24 bytes a cell, and a lookup is one array access; a
//! dataset whose chunks fill less than half of the grid they span keeps a map instead.

use crate::read::StoredChunk;
use std::collections::HashMap;

/// Grid cells a table may have beyond twice the chunks listed, so that small indexes with a few
/// gaps are tables too.
const TABLE_SLACK: u64 = 4096;

/// The allocated chunks of a dataset, by first element.
#[derive(Debug)]
pub struct ChunkIndex {
    /// The chunk shape, in elements.
    chunk: Vec<u64>,
    table: Table,
}

#[derive(Debug)]
enum Table {
    /// Every cell of the chunk grid that the listed chunks span (from the origin), row-major;
    /// `grid` cells per axis; a cell of size 0 was never written.
    Grid {
        grid: Vec<u64>,
        cells: Vec<StoredChunk>,
    },
    /// The listed chunks by first element.
    Map(HashMap<Box<[u64]>, StoredChunk>),
}

/// The chunks of a dataset as they are found, made into a [`ChunkIndex`] once all are in.
#[derive(Debug)]
pub struct ChunkListing {
    chunk: Vec<u64>,
    /// First elements, `chunk.len()` per chunk found.
    offsets: Vec<u64>,
    found: Vec<StoredChunk>,
    /// Whether every offset lies on a chunk boundary, so that a grid can hold it.
    aligned: bool,
}

impl ChunkListing {
    /// An empty listing of chunks of `chunk` elements.
    pub fn new(chunk: &[u64]) -> Self {
        ChunkListing {
            chunk: chunk.to_vec(),
            offsets: Vec::new(),
            found: Vec::new(),
            aligned: !chunk.contains(&0),
        }
    }

    /// Records the chunk whose first element is `offset`. Chunks never written (size 0) are not
    /// recorded; a chunk listed twice keeps its last record.
    pub fn add(&mut self, offset: &[u64], stored: StoredChunk) {
        if stored.size == 0 || offset.len() != self.chunk.len() {
            return;
        }
        // (Short-circuits: a chunk shape with a 0 never divides.)
        self.aligned = self.aligned && offset.iter().zip(&self.chunk).all(|(o, c)| o % c == 0);
        self.offsets.extend_from_slice(offset);
        self.found.push(stored);
    }

    /// The index of the chunks recorded.
    pub fn finish(self) -> ChunkIndex {
        let rank = self.chunk.len();
        let grid = self.aligned.then(|| self.grid()).flatten();
        let cells = grid
            .as_ref()
            .and_then(|g| g.iter().try_fold(1u64, |n, &d| n.checked_mul(d)));
        let fits = |cells: u64| cells <= 2 * self.found.len() as u64 + TABLE_SLACK;
        let table = match (grid, cells) {
            (Some(grid), Some(n)) if fits(n) => {
                let mut cells = vec![NEVER_WRITTEN; n as usize];
                for (offset, stored) in self.offsets.chunks_exact(rank.max(1)).zip(&self.found) {
                    if let Some(at) = cell(&self.chunk, &grid, offset) {
                        cells[at] = *stored;
                    }
                }
                Table::Grid { grid, cells }
            }
            _ => Table::Map(
                self.offsets
                    .chunks_exact(rank.max(1))
                    .map(Box::from)
                    .zip(self.found.iter().copied())
                    .collect(),
            ),
        };
        ChunkIndex {
            chunk: self.chunk,
            table,
        }
    }

    /// Chunks per axis from the origin to the farthest chunk found (none found: an empty grid).
    fn grid(&self) -> Option<Vec<u64>> {
        let rank = self.chunk.len();
        let mut grid = vec![0u64; rank];
        for offset in self.offsets.chunks_exact(rank.max(1)) {
            for ((g, o), c) in grid.iter_mut().zip(offset).zip(&self.chunk) {
                *g = (*g).max((o / c).saturating_add(1));
            }
        }
        (rank > 0).then_some(grid)
    }
}

/// A grid cell no chunk was listed for.
const NEVER_WRITTEN: StoredChunk = StoredChunk {
    size: 0,
    mask: 0,
    address: 0,
};

/// The row-major position in `grid` of the chunk whose first element is `offset`; None when it
/// lies off a chunk boundary or beyond the grid.
fn cell(chunk: &[u64], grid: &[u64], offset: &[u64]) -> Option<usize> {
    if offset.len() != chunk.len() {
        return None;
    }
    let mut at = 0u64;
    for ((&o, &c), &g) in offset.iter().zip(chunk).zip(grid) {
        let i = o / c;
        if o % c != 0 || i >= g {
            return None;
        }
        at = at * g + i;
    }
    Some(at as usize)
}

impl ChunkIndex {
    /// The chunk whose first element is `offset`; None when it was never written.
    pub fn get(&self, offset: &[u64]) -> Option<StoredChunk> {
        match &self.table {
            Table::Grid { grid, cells } => cell(&self.chunk, grid, offset)
                .and_then(|at| Some(cells[at]).filter(|c| c.size > 0)),
            Table::Map(map) => map.get(offset).copied(),
        }
    }

    /// Whether the chunk whose first element is `offset` was written.
    pub fn contains(&self, offset: &[u64]) -> bool {
        self.get(offset).is_some()
    }

    /// The first element of every chunk written, in no set order.
    pub fn offsets(&self) -> Vec<Vec<u64>> {
        match &self.table {
            Table::Map(map) => map.keys().map(|k| k.to_vec()).collect(),
            Table::Grid { grid, cells } => (0..cells.len())
                .filter(|&at| cells[at].size > 0)
                .map(|at| {
                    // Row-major position back to grid coordinates, then to elements.
                    let mut rest = at as u64;
                    let mut offset = vec![0u64; grid.len()];
                    for a in (0..grid.len()).rev() {
                        offset[a] = rest % grid[a] * self.chunk[a];
                        rest /= grid[a];
                    }
                    offset
                })
                .collect(),
        }
    }

    /// Bytes the index holds.
    #[cfg(test)]
    fn held_bytes(&self) -> usize {
        match &self.table {
            Table::Grid { cells, .. } => cells.len() * std::mem::size_of::<StoredChunk>(),
            Table::Map(map) => {
                map.capacity()
                    * (std::mem::size_of::<(Box<[u64]>, StoredChunk)>() + 1 + 8 * self.chunk.len())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(n: u64) -> StoredChunk {
        StoredChunk {
            size: 100 + n as usize,
            mask: (n % 3) as u32,
            address: 4096 * n,
        }
    }

    fn listed(chunk: &[u64], offsets: &[Vec<u64>]) -> ChunkIndex {
        let mut listing = ChunkListing::new(chunk);
        for (n, offset) in offsets.iter().enumerate() {
            listing.add(offset, stored(n as u64));
        }
        listing.finish()
    }

    #[test]
    fn a_written_dataset_is_a_table_of_its_grid_in_any_listing_order() {
        // 3 x 4 chunks of 10 x 5, listed out of order.
        let mut offsets: Vec<Vec<u64>> = (0..3)
            .flat_map(|i| (0..4).map(move |j| vec![i * 10, j * 5]))
            .collect();
        offsets.reverse();
        let index = listed(&[10, 5], &offsets);
        assert!(matches!(index.table, Table::Grid { ref grid, .. } if grid == &[3, 4]));
        for (n, offset) in offsets.iter().enumerate() {
            assert_eq!(index.get(offset), Some(stored(n as u64)), "{offset:?}");
        }
        // Off a boundary, beyond the grid, or of another rank: not a chunk.
        for offset in [
            &[5u64, 0][..],
            &[0, 3],
            &[30, 0],
            &[0, 20],
            &[0],
            &[0, 0, 0],
        ] {
            assert_eq!(index.get(offset), None, "{offset:?}");
        }
        assert_eq!(index.held_bytes(), 12 * std::mem::size_of::<StoredChunk>());
    }

    #[test]
    fn chunks_never_written_are_missing_from_the_table() {
        let index = listed(&[4], &[vec![0], vec![12]]);
        assert!(matches!(index.table, Table::Grid { .. }));
        assert!(index.contains(&[0]) && index.contains(&[12]));
        assert!(!index.contains(&[4]) && !index.contains(&[8]) && !index.contains(&[16]));
        // Size 0 is a chunk never written, whatever its address.
        let mut listing = ChunkListing::new(&[4]);
        listing.add(
            &[0],
            StoredChunk {
                size: 0,
                mask: 0,
                address: 8,
            },
        );
        assert!(!listing.finish().contains(&[0]));
    }

    #[test]
    fn offsets_list_the_chunks_written_from_a_table_or_a_map() {
        let sorted = |index: &ChunkIndex| {
            let mut offsets = index.offsets();
            offsets.sort();
            offsets
        };
        // A grid of 2 x 3 chunks of 4 x 5, one never written.
        let written = vec![vec![0, 0], vec![0, 10], vec![4, 0], vec![4, 5], vec![4, 10]];
        let table = listed(&[4, 5], &written);
        assert!(matches!(table.table, Table::Grid { .. }));
        assert_eq!(sorted(&table), written);
        let far = vec![vec![0, 0], vec![7_000_000, 3_000_000]];
        let map = listed(&[7, 3], &far);
        assert!(matches!(map.table, Table::Map(_)));
        assert_eq!(sorted(&map), far);
    }

    #[test]
    fn a_sparse_or_misaligned_listing_is_a_map() {
        // Two chunks spanning a grid of 10^12 cells.
        let far = vec![0, 0];
        let corner = vec![1_000_000 * 7, 1_000_000 * 3];
        let index = listed(&[7, 3], &[far.clone(), corner.clone()]);
        assert!(matches!(index.table, Table::Map(_)));
        assert_eq!(index.get(&far), Some(stored(0)));
        assert_eq!(index.get(&corner), Some(stored(1)));
        assert_eq!(index.get(&[7, 3]), None);
        // A grid whose cell count overflows u64.
        let huge = vec![u64::MAX - 1, u64::MAX - 1];
        let index = listed(&[1, 1], &[vec![0, 0], huge.clone()]);
        assert_eq!(index.get(&huge), Some(stored(1)));
        // An offset off the chunk boundaries (a damaged index) is still found where listed.
        let index = listed(&[4], &[vec![0], vec![6]]);
        assert!(matches!(index.table, Table::Map(_)));
        assert_eq!(index.get(&[6]), Some(stored(1)));
        // Chunks of size 0 along an axis cannot be placed in a grid.
        let index = listed(&[0], &[vec![0]]);
        assert_eq!(index.get(&[0]), Some(stored(0)));
    }

    #[test]
    fn a_million_chunks_take_24_bytes_each() {
        let mut listing = ChunkListing::new(&[1, 16]);
        for row in 0..(1u64 << 20) {
            listing.add(&[row, 0], stored(row));
        }
        let index = listing.finish();
        assert_eq!(index.held_bytes(), (1 << 20) * 24);
        assert_eq!(index.get(&[77_777, 0]), Some(stored(77_777)));
        assert_eq!(index.get(&[1 << 20, 0]), None);
    }
}
