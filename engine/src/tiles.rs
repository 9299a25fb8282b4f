//! Which box of the global array each rank holds in a collective read or write: pure index
//! arithmetic over plain data, the same on every rank (each computes every rank's box from the
//! all-gathered tiles), so a bad decomposition is found, and named, identically everywhere. Both
//! faces use it: array-io's `collective` and the Python extension (`h5gds._collective`). Errors
//! are [`TilesError`]s, worded once for both (shapes as `[2, 3]`).
#![forbid(unsafe_code)]

use h5gds_route::select::Block;

/// How the global array is split into one tile per rank.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Decomposition {
    /// Blocks of the leading axis in rank order (the default). On reads rank r of p holds rows
    /// `[r*n/p, (r+1)*n/p)` of n (uneven lengths differ by at most one row); on writes the
    /// ranks' tiles, which must agree on every other dimension, are stacked along axis 0.
    #[default]
    LeadingAxis,
    /// A `rows` × `cols` grid of blocks over the first two axes, rank r at grid position
    /// `(r / cols, r % cols)`; `rows * cols` must be the number of ranks. Reads split each of
    /// the two axes by the r*n/p rule; on writes the tiles of a grid row share their first
    /// length and the tiles of a grid column their second.
    Grid { rows: usize, cols: usize },
    /// This rank's box, given by the caller: `start` and `shape` in global coordinates. Reads
    /// need it inside the dataset; writes need the boxes of all ranks to be disjoint and to
    /// cover the array (whose shape is the union's extent), and `shape` to be the tile's.
    Tile {
        start: Vec<usize>,
        shape: Vec<usize>,
    },
}

impl Decomposition {
    /// The grid of `ranks` blocks closest to square (`rows >= cols`): 4 ranks → 2 × 2,
    /// 6 → 3 × 2, a prime p → p × 1.
    pub fn grid(ranks: usize) -> Decomposition {
        let (rows, cols) = square_grid(ranks);
        Decomposition::Grid { rows, cols }
    }
}

/// `(rows, cols)` of [`Decomposition::grid`].
pub fn square_grid(ranks: usize) -> (usize, usize) {
    let ranks = ranks.max(1);
    let mut cols = (ranks as f64).sqrt() as usize;
    while cols > 1 && ranks % cols != 0 {
        cols -= 1;
    }
    let cols = cols.max(1);
    (ranks / cols, cols)
}

/// Why a decomposition does not fit the dataset or the tiles, worded once for both faces. Shapes
/// are in elements; `rank`s are ranks of the communicator.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TilesError {
    /// A read of a dataset with no axis.
    #[error("the dataset is a scalar (no axis to split); read it whole, without a communicator")]
    ScalarDataset,
    /// A write of tiles with no axis.
    #[error("the tiles are scalars (no axis to stack them along); write 1-D tiles")]
    ScalarTiles,
    /// A grid whose number of blocks is not the number of ranks.
    #[error("a {rows} x {cols} grid has {} blocks, but there are {ranks} ranks", blocks(.rows, .cols))]
    GridSize {
        rows: usize,
        cols: usize,
        ranks: usize,
    },
    /// A grid over an array of fewer than two dimensions.
    #[error("a 2-D grid needs at least 2 dimensions; the array has {ndim}")]
    GridAxes { ndim: usize },
    /// A caller-given read box with another number of dimensions than the dataset.
    #[error(
        "the tile's start {start:?} and shape {count:?} need one entry per dimension of the \
         dataset's shape {shape:?}"
    )]
    TileDimensions {
        start: Vec<u64>,
        count: Vec<u64>,
        shape: Vec<u64>,
    },
    /// A caller-given read box reaching past the dataset in dimension `dim`.
    #[error(
        "the tile at {start:?} of shape {count:?} reaches past the dataset's shape {shape:?} in \
         dimension {dim}"
    )]
    TilePastEnd {
        start: Vec<u64>,
        count: Vec<u64>,
        shape: Vec<u64>,
        dim: usize,
    },
    /// A rank's tile with another number of dimensions than rank 0's (`first`).
    #[error(
        "rank {rank}'s tile has {} dimensions ({shape:?}), rank 0's {} ({first:?})",
        .shape.len(),
        .first.len()
    )]
    RankDimensions {
        rank: usize,
        shape: Vec<u64>,
        first: Vec<u64>,
    },
    /// Tiles stacked along axis 0 that differ in another dimension from rank 0's (`first`).
    #[error(
        "rank {rank}'s tile has shape {shape:?}, rank 0's {first:?}: stacked along axis 0, tiles \
         must agree on every other dimension"
    )]
    LeadingAxisShape {
        rank: usize,
        shape: Vec<u64>,
        first: Vec<u64>,
    },
    /// A grid tile whose shape is not its grid row's `rows`, its grid column's `cols` and every
    /// tile's `trailing` shape; the row's lengths come from grid column 0, the column's from
    /// grid row 0, the trailing shape from rank 0.
    #[error(
        "rank {rank}'s tile (grid position ({gr}, {gc})) has shape {shape:?}, but its grid row's \
         tiles have {rows} rows (rank {row_rank}), its grid column's {cols} columns (rank {gc}) \
         and every tile the trailing shape {trailing:?} (rank 0)",
        gr = .position.0,
        gc = .position.1
    )]
    GridShape {
        rank: usize,
        position: (usize, usize),
        shape: Vec<u64>,
        rows: u64,
        cols: u64,
        trailing: Vec<u64>,
        row_rank: usize,
    },
    /// A caller-given box (`given`) whose shape is not its tile's (`shape`).
    #[error("the caller-given box has shape {given:?}, but the tile has shape {shape:?}")]
    TileShape { given: Vec<u64>, shape: Vec<u64> },
    /// A rank without a caller-given start where the decomposition is [`Decomposition::Tile`].
    #[error(
        "rank {rank} did not give its tile's start (where one rank gives its box, every rank must)"
    )]
    MissingStart { rank: usize },
    /// A rank's caller-given start with another number of entries than its tile's dimensions.
    #[error("rank {rank}'s tile start {start:?} needs {ndim} entries, one per dimension")]
    StartDimensions {
        rank: usize,
        start: Vec<u64>,
        ndim: usize,
    },
    /// Two ranks' caller-given boxes share elements, from `at` on (the boxes boxed: the error
    /// stays small).
    #[error(
        "rank {a}'s tile (at {:?}, shape {:?}) and rank {b}'s (at {:?}, shape {:?}) overlap at \
         {at:?}",
        .boxes.0.start, .boxes.0.count, .boxes.1.start, .boxes.1.count,
        a = .ranks.0,
        b = .ranks.1
    )]
    Overlap {
        ranks: (usize, usize),
        boxes: Box<(Block, Block)>,
        at: Vec<u64>,
    },
    /// Caller-given boxes that leave elements of the array they span to no tile.
    #[error(
        "the tiles cover {covered} of the {total} elements of the array of shape {shape:?} they \
         span; every element must belong to one tile"
    )]
    Uncovered {
        covered: u128,
        total: u128,
        shape: Vec<u64>,
    },
}

fn blocks(rows: &usize, cols: &usize) -> u128 {
    *rows as u128 * *cols as u128
}

/// Rank `r`'s share of `n` items split over `p` ranks: `(start, count)` of `[r*n/p, (r+1)*n/p)`.
pub fn share(n: u64, p: u64, r: u64) -> (u64, u64) {
    let start = (r as u128 * n as u128 / p as u128) as u64;
    let end = ((r as u128 + 1) * n as u128 / p as u128) as u64;
    (start, end - start)
}

/// The box rank `rank` of `size` reads from a dataset of `shape`; an error naming the shape
/// where the decomposition does not fit it.
pub fn read_box(
    decomposition: &Decomposition,
    shape: &[u64],
    rank: usize,
    size: usize,
) -> crate::Result<Block> {
    let boxed = box_of(decomposition, shape, rank, size);
    boxed.map_err(|e| crate::Error::invalid(e.to_string()).with_shape(shape))
}

fn box_of(
    decomposition: &Decomposition,
    shape: &[u64],
    rank: usize,
    size: usize,
) -> Result<Block, TilesError> {
    let (r, p) = (rank as u64, size as u64);
    if shape.is_empty() {
        return Err(TilesError::ScalarDataset);
    }
    let mut block = Block::whole(shape);
    match decomposition {
        Decomposition::LeadingAxis => {
            (block.start[0], block.count[0]) = share(shape[0], p, r);
        }
        Decomposition::Grid { rows, cols } => {
            check_grid(*rows, *cols, size, shape.len())?;
            let (gr, gc) = (r / *cols as u64, r % *cols as u64);
            (block.start[0], block.count[0]) = share(shape[0], *rows as u64, gr);
            (block.start[1], block.count[1]) = share(shape[1], *cols as u64, gc);
        }
        Decomposition::Tile {
            start,
            shape: count,
        } => {
            let start: Vec<u64> = start.iter().map(|&s| s as u64).collect();
            let count: Vec<u64> = count.iter().map(|&c| c as u64).collect();
            if start.len() != shape.len() || count.len() != shape.len() {
                return Err(TilesError::TileDimensions {
                    start,
                    count,
                    shape: shape.to_vec(),
                });
            }
            if let Some(dim) = (0..shape.len()).find(|&i| start[i] + count[i] > shape[i]) {
                return Err(TilesError::TilePastEnd {
                    start,
                    count,
                    shape: shape.to_vec(),
                    dim,
                });
            }
            block = Block { start, count };
        }
    }
    Ok(block)
}

/// That a `rows` x `cols` grid has one block per rank (checked first by the Python extension,
/// whose argument check it is).
pub fn check_grid_size(rows: usize, cols: usize, ranks: usize) -> Result<(), TilesError> {
    if rows.checked_mul(cols) != Some(ranks) {
        return Err(TilesError::GridSize { rows, cols, ranks });
    }
    Ok(())
}

fn check_grid(rows: usize, cols: usize, size: usize, ndim: usize) -> Result<(), TilesError> {
    check_grid_size(rows, cols, size)?;
    if ndim < 2 {
        return Err(TilesError::GridAxes { ndim });
    }
    Ok(())
}

/// What one rank says about its tile on a write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TileClaim {
    pub shape: Vec<u64>,
    /// The caller-given start (for [`Decomposition::Tile`]).
    pub start: Option<Vec<u64>>,
}

/// The global shape and every rank's box for a write, from every rank's tile (in rank order);
/// the error names the ranks at fault.
pub fn write_boxes(
    decomposition: &Decomposition,
    tiles: &[TileClaim],
) -> Result<(Vec<u64>, Vec<Block>), TilesError> {
    let p = tiles.len();
    let ndim = tiles[0].shape.len();
    if ndim == 0 {
        return Err(TilesError::ScalarTiles);
    }
    if let Some(r) = tiles.iter().position(|t| t.shape.len() != ndim) {
        return Err(TilesError::RankDimensions {
            rank: r,
            shape: tiles[r].shape.clone(),
            first: tiles[0].shape.clone(),
        });
    }
    match decomposition {
        Decomposition::LeadingAxis => {
            let trailing = &tiles[0].shape[1..];
            if let Some(r) = tiles.iter().position(|t| &t.shape[1..] != trailing) {
                return Err(TilesError::LeadingAxisShape {
                    rank: r,
                    shape: tiles[r].shape.clone(),
                    first: tiles[0].shape.clone(),
                });
            }
            let mut boxes = Vec::with_capacity(p);
            let mut row = 0u64;
            for t in tiles {
                let mut start = vec![0; ndim];
                start[0] = row;
                row += t.shape[0];
                boxes.push(Block {
                    start,
                    count: t.shape.clone(),
                });
            }
            let mut shape = tiles[0].shape.clone();
            shape[0] = row;
            Ok((shape, boxes))
        }
        Decomposition::Grid { rows, cols } => {
            check_grid(*rows, *cols, p, ndim)?;
            let at = |gr: usize, gc: usize| &tiles[gr * cols + gc].shape;
            // Row heights from grid column 0, column widths from grid row 0.
            let heights: Vec<u64> = (0..*rows).map(|gr| at(gr, 0)[0]).collect();
            let widths: Vec<u64> = (0..*cols).map(|gc| at(0, gc)[1]).collect();
            let rest = &tiles[0].shape[2..];
            let mut boxes = Vec::with_capacity(p);
            for (r, t) in tiles.iter().enumerate() {
                let (gr, gc) = (r / cols, r % cols);
                if t.shape[0] != heights[gr] || t.shape[1] != widths[gc] || &t.shape[2..] != rest {
                    return Err(TilesError::GridShape {
                        rank: r,
                        position: (gr, gc),
                        shape: t.shape.clone(),
                        rows: heights[gr],
                        cols: widths[gc],
                        trailing: rest.to_vec(),
                        row_rank: gr * cols,
                    });
                }
                let mut start = vec![0; ndim];
                start[0] = heights[..gr].iter().sum();
                start[1] = widths[..gc].iter().sum();
                boxes.push(Block {
                    start,
                    count: t.shape.clone(),
                });
            }
            let mut shape = tiles[0].shape.clone();
            shape[0] = heights.iter().sum();
            shape[1] = widths.iter().sum();
            Ok((shape, boxes))
        }
        Decomposition::Tile { .. } => {
            let mut boxes = Vec::with_capacity(p);
            for (r, t) in tiles.iter().enumerate() {
                let Some(start) = &t.start else {
                    return Err(TilesError::MissingStart { rank: r });
                };
                if start.len() != ndim {
                    return Err(TilesError::StartDimensions {
                        rank: r,
                        start: start.clone(),
                        ndim,
                    });
                }
                boxes.push(Block {
                    start: start.clone(),
                    count: t.shape.clone(),
                });
            }
            let shape: Vec<u64> = (0..ndim)
                .map(|i| {
                    boxes
                        .iter()
                        .map(|b| b.start[i] + b.count[i])
                        .max()
                        .unwrap_or(0)
                })
                .collect();
            for (a, ba) in boxes.iter().enumerate() {
                for (b, bb) in boxes.iter().enumerate().skip(a + 1) {
                    if let Some(common) = ba.intersect(bb) {
                        return Err(TilesError::Overlap {
                            ranks: (a, b),
                            boxes: Box::new((ba.clone(), bb.clone())),
                            at: common.start,
                        });
                    }
                }
            }
            let covered: u128 = boxes.iter().map(|b| b.len() as u128).sum();
            let total: u128 = shape.iter().map(|&d| d as u128).product();
            if covered != total {
                return Err(TilesError::Uncovered {
                    covered,
                    total,
                    shape,
                });
            }
            Ok((shape, boxes))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(shape: &[u64]) -> TileClaim {
        TileClaim {
            shape: shape.to_vec(),
            start: None,
        }
    }

    fn tile(start: &[u64], shape: &[u64]) -> TileClaim {
        TileClaim {
            shape: shape.to_vec(),
            start: Some(start.to_vec()),
        }
    }

    #[test]
    fn shares_follow_r_n_over_p_and_cover_uneven_lengths() {
        let shares: Vec<_> = (0..4).map(|r| share(10, 4, r)).collect();
        assert_eq!(shares, [(0, 2), (2, 3), (5, 2), (7, 3)]);
        assert_eq!((0..3).map(|r| share(2, 3, r).1).sum::<u64>(), 2);
        assert_eq!(share(2, 3, 0), (0, 0));
    }

    #[test]
    fn grids_are_as_square_as_the_rank_count_allows() {
        let g = |p| match Decomposition::grid(p) {
            Decomposition::Grid { rows, cols } => (rows, cols),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            [g(1), g(2), g(3), g(4), g(6), g(9)],
            [(1, 1), (2, 1), (3, 1), (2, 2), (3, 2), (3, 3)]
        );
    }

    #[test]
    fn read_boxes_split_the_leading_axis_or_a_grid() {
        let b = read_box(&Decomposition::LeadingAxis, &[7, 3], 2, 3).unwrap();
        assert_eq!((b.start, b.count), (vec![4, 0], vec![3, 3]));
        let grid = Decomposition::Grid { rows: 2, cols: 2 };
        let b = read_box(&grid, &[5, 7, 2], 3, 4).unwrap();
        assert_eq!((b.start, b.count), (vec![2, 3, 0], vec![3, 4, 2]));
        let err = read_box(&grid, &[5], 0, 4).unwrap_err().to_string();
        assert!(err.contains("at least 2 dimensions"), "{err}");
        let err = read_box(&grid, &[5, 5], 0, 3).unwrap_err().to_string();
        assert!(err.contains("3 ranks"), "{err}");
        let err = check_grid_size(1 << 40, 1 << 40, 4)
            .unwrap_err()
            .to_string();
        assert!(err.contains(" 1208925819614629174706176 blocks"), "{err}");
        let t = Decomposition::Tile {
            start: vec![1, 1],
            shape: vec![2, 5],
        };
        let err = read_box(&t, &[4, 4], 0, 1).unwrap_err().to_string();
        assert!(err.contains("dimension 1"), "{err}");
        let err = read_box(&Decomposition::LeadingAxis, &[], 0, 1)
            .unwrap_err()
            .to_string();
        assert!(err.contains("scalar"), "{err}");
        let err = read_box(&grid, &[5, 5], 0, 3).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::InvalidArgument);
        assert_eq!(err.facts().shape.as_deref(), Some(&[5, 5][..]));
    }

    #[test]
    fn leading_axis_writes_stack_tiles_and_name_a_mismatched_rank() {
        let (shape, boxes) = write_boxes(
            &Decomposition::LeadingAxis,
            &[claim(&[2, 3]), claim(&[0, 3]), claim(&[5, 3])],
        )
        .unwrap();
        assert_eq!(shape, [7, 3]);
        assert_eq!(boxes[2].start, [2, 0]);
        let err = write_boxes(
            &Decomposition::LeadingAxis,
            &[claim(&[2, 3]), claim(&[2, 4])],
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("rank 1's tile has shape [2, 4]"), "{err}");
        let err = write_boxes(&Decomposition::LeadingAxis, &[claim(&[2]), claim(&[2, 1])])
            .unwrap_err()
            .to_string();
        assert!(err.contains("rank 1's tile has 2 dimensions"), "{err}");
        let scalars = write_boxes(&Decomposition::LeadingAxis, &[claim(&[]), claim(&[])]);
        assert_eq!(scalars.unwrap_err(), TilesError::ScalarTiles);
        let grid = Decomposition::Grid { rows: 2, cols: 2 };
        let flat = write_boxes(&grid, &[claim(&[2]), claim(&[2]), claim(&[2]), claim(&[2])]);
        assert_eq!(flat.unwrap_err(), TilesError::GridAxes { ndim: 1 });
        let three = write_boxes(&grid, &[claim(&[2, 3]), claim(&[2, 3]), claim(&[2, 3])]);
        let (rows, cols, ranks) = (2, 2, 3);
        assert_eq!(
            three.unwrap_err(),
            TilesError::GridSize { rows, cols, ranks }
        );
    }

    #[test]
    fn grid_writes_place_tiles_by_grid_position() {
        let grid = Decomposition::Grid { rows: 2, cols: 2 };
        let tiles = [
            claim(&[2, 3]),
            claim(&[2, 1]),
            claim(&[1, 3]),
            claim(&[1, 1]),
        ];
        let (shape, boxes) = write_boxes(&grid, &tiles).unwrap();
        assert_eq!(shape, [3, 4]);
        assert_eq!(boxes[3].start, [2, 3]);
        let mut bad = tiles.clone();
        bad[3] = claim(&[1, 2]);
        let err = write_boxes(&grid, &bad).unwrap_err().to_string();
        assert_eq!(
            err,
            "rank 3's tile (grid position (1, 1)) has shape [1, 2], but its grid row's tiles \
             have 1 rows (rank 2), its grid column's 1 columns (rank 1) and every tile the \
             trailing shape [] (rank 0)"
        );
    }

    #[test]
    fn given_tiles_must_be_disjoint_and_cover_the_array() {
        let t = Decomposition::Tile {
            start: vec![],
            shape: vec![],
        };
        let (shape, _) =
            write_boxes(&t, &[tile(&[0, 0], &[2, 4]), tile(&[2, 0], &[1, 4])]).unwrap();
        assert_eq!(shape, [3, 4]);
        let err = write_boxes(&t, &[tile(&[0, 0], &[2, 4]), tile(&[1, 0], &[2, 4])])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("rank 0's tile") && err.contains("overlap"),
            "{err}"
        );
        let err = write_boxes(&t, &[tile(&[0, 0], &[2, 2]), tile(&[2, 2], &[1, 2])])
            .unwrap_err()
            .to_string();
        assert!(err.contains("cover 6 of the 12 elements"), "{err}");
        let err = write_boxes(&t, &[tile(&[0, 0], &[2, 2]), claim(&[2, 2])])
            .unwrap_err()
            .to_string();
        assert!(err.contains("rank 1 did not give"), "{err}");
    }
}
