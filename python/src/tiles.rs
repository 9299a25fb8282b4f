//! The collective decomposition for `h5gds._collective` (`comm=`): the engine's
//! (`h5gds_engine::tiles`, which array-io's `collective` uses too), its errors worded as the
//! Python package words them (shapes as Python tuples). `_collective` parses the `decomposition=`
//! argument into `grid`: None (blocks of the leading axis) or `(rows, cols)`.

use h5gds_engine::collective::{byte_runs, ByteRun};
use h5gds_engine::tiles::{self, Decomposition, TileClaim, TilesError};
use h5gds_route::select::Block;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

pub(crate) type Grid = Option<(usize, usize)>;

/// Adds the `tiles_*` functions to the module (`_native`'s initialisation calls it).
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(tiles_grid, m)?)?;
    m.add_function(wrap_pyfunction!(tiles_share, m)?)?;
    m.add_function(wrap_pyfunction!(tiles_read_box, m)?)?;
    m.add_function(wrap_pyfunction!(tiles_write_boxes, m)?)?;
    Ok(())
}

pub(crate) fn decomposition(grid: Grid) -> Decomposition {
    match grid {
        None => Decomposition::LeadingAxis,
        Some((rows, cols)) => Decomposition::Grid { rows, cols },
    }
}

/// The grid `(rows, cols)` of `ranks` blocks closest to square (`decomposition="grid"`).
#[pyfunction]
fn tiles_grid(ranks: usize) -> (usize, usize) {
    tiles::square_grid(ranks)
}

/// Rank `rank`'s share `(first, end)` of `n` items over `ranks` (a batched read's chunks).
#[pyfunction]
fn tiles_share(n: u64, ranks: u64, rank: u64) -> (u64, u64) {
    let (first, count) = tiles::share(n, ranks, rank);
    (first, first + count)
}

/// The box `(start, count)` of a dataset of `shape` that `rank` of `ranks` reads.
#[pyfunction]
fn tiles_read_box(
    shape: Vec<u64>,
    rank: usize,
    ranks: usize,
    grid: Grid,
) -> PyResult<(Vec<u64>, Vec<u64>)> {
    let block = tiles::read_box(&decomposition(grid), &shape, rank, ranks)
        .map_err(|e| PyValueError::new_err(message(&e, "the dataset has")))?;
    Ok((block.start, block.count))
}

/// The global shape and every rank's start for a write, from every rank's tile shape (in rank
/// order). The grid's size is checked first, as part of the argument; the tiles' errors are
/// "invalid decomposition"s naming the rank.
#[pyfunction]
pub(crate) fn tiles_write_boxes(
    shapes: Vec<Vec<u64>>,
    grid: Grid,
) -> PyResult<(Vec<u64>, Vec<Vec<u64>>)> {
    if let Some((rows, cols)) = grid {
        tiles::check_grid_size(rows, cols, shapes.len())
            .map_err(|e| PyValueError::new_err(message(&e, "")))?;
    }
    let claims: Vec<TileClaim> = shapes
        .into_iter()
        .map(|shape| TileClaim { shape, start: None })
        .collect();
    let (shape, boxes) = tiles::write_boxes(&decomposition(grid), &claims).map_err(|e| {
        let reason = message(&e, "the tiles have");
        PyValueError::new_err(format!("invalid decomposition: {reason}"))
    })?;
    Ok((shape, boxes.into_iter().map(|b| b.start).collect()))
}

/// The byte runs of a tile's box (`start`, `count`) in the dataset of `shape` stored from byte
/// `offset`, of `item`-byte elements (`collective_write_tile`).
pub(crate) fn tile_runs(
    start: Vec<u64>,
    count: Vec<u64>,
    shape: &[u64],
    offset: u64,
    item: u64,
) -> PyResult<Vec<ByteRun>> {
    if start.len() != shape.len() || count.len() != shape.len() {
        return Err(PyValueError::new_err(format!(
            "the box at {start:?} of shape {count:?} needs one entry per dimension of the \
             array's shape {shape:?}"
        )));
    }
    Ok(byte_runs(&Block { start, count }, shape, offset, item))
}

/// `e` as the Python package words it; `counted` names what a grid's too few dimensions are of.
fn message(e: &TilesError, counted: &str) -> String {
    match e {
        TilesError::ScalarDataset => {
            "the dataset is a scalar (no axis to split); read it without comm=".into()
        }
        TilesError::GridSize { rows, cols, ranks } => format!(
            "decomposition ({rows}, {cols}): a {rows} x {cols} grid has {} blocks, but there are \
             {ranks} ranks",
            *rows as u128 * *cols as u128
        ),
        TilesError::GridAxes { ndim } => {
            format!("a 2-D grid needs at least 2 dimensions; {counted} {ndim}")
        }
        TilesError::RankDimensions { rank, shape, first } => format!(
            "rank {rank}'s tile has {} dimensions {}, rank 0's {} {}",
            shape.len(),
            tuple(shape),
            first.len(),
            tuple(first)
        ),
        TilesError::LeadingAxisShape { rank, shape, first } => format!(
            "rank {rank}'s tile has shape {}, rank 0's {}: stacked along axis 0, tiles must \
             agree on every other dimension",
            tuple(shape),
            tuple(first)
        ),
        TilesError::GridShape {
            rank,
            position: (gr, gc),
            shape,
            rows,
            cols,
            trailing,
            ..
        } => format!(
            "rank {rank}'s tile (grid position ({gr}, {gc})) has shape {}, but its grid row's \
             tiles have {rows} rows, its grid column's {cols} columns and every tile the \
             trailing shape {}",
            tuple(shape),
            tuple(trailing)
        ),
        // Scalar tiles are worded alike; the rest are errors of caller-given boxes, which the
        // Python package does not offer.
        other => other.to_string(),
    }
}

/// `shape` as Python prints a tuple: `(2, 3)`, `(2,)`, `()`.
fn tuple(shape: &[u64]) -> String {
    match shape {
        [one] => format!("({one},)"),
        _ => {
            let items: Vec<String> = shape.iter().map(u64::to_string).collect();
            format!("({})", items.join(", "))
        }
    }
}
