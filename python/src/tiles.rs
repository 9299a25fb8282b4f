//! The collective decomposition for `h5gds._collective` (`comm=`): the engine's
//! (`h5gds_engine::tiles`, which array-io's `collective` uses too), its errors the engine's.
//! `_collective` parses the `decomposition=` argument into `grid`: None (blocks of the leading
//! axis) or `(rows, cols)`.

use h5gds_engine::tiles::{self, Decomposition};
use pyo3::prelude::*;

pub(crate) type Grid = Option<(usize, usize)>;

/// Adds the `tiles_*` functions to the module (`_native`'s initialisation calls it).
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(tiles_grid, m)?)?;
    m.add_function(wrap_pyfunction!(tiles_share, m)?)?;
    m.add_function(wrap_pyfunction!(tiles_read_box, m)?)?;
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
        .map_err(crate::error::engine_error)?;
    Ok((block.start, block.count))
}
