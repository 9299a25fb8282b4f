//! The plan of a gather of rows along a dataset's first axis (`h5gds.read(d, sel=rows)`,
//! array-io's `from_file_rows`), made from the caller's indices with no HDF5: the distinct rows
//! sorted, repeats dropped and neighbours coalesced into runs (what is read), and each caller
//! position's rank among the distinct rows (how the rows read are copied into the caller's order,
//! repeats included: [`RowPlan::scatter`]); and the runs as selections of the dataset, each
//! with the other axes' selection, placed one after another in the output ([`RowRuns`]).

use h5gds_chunk_codec::{Hyperslab, Placed};
use rayon::prelude::*;

/// The caller's rows, sorted and coalesced (see the module's documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowPlan {
    /// The distinct rows as runs in increasing order: first row, number of rows.
    runs: Vec<(u64, u64)>,
    /// For each of the caller's indices, the position of its row among the distinct rows
    /// (empty when the indices are strictly increasing: then they are the distinct rows).
    ranks: Vec<usize>,
    distinct: usize,
    len: usize,
}

/// Scatters of more than this many bytes are split over the pool's threads, in parts of this
/// many: the output's pages are often fresh, and faulting them in is most of a scatter's time.
const SCATTER_SPLIT: usize = 8 << 20;

impl RowPlan {
    /// The plan for `indices`, each checked to lie below `rows` (the message names the first
    /// that does not).
    pub fn of(indices: &[u64], rows: u64) -> Result<RowPlan, String> {
        if let Some((at, bad)) = indices.iter().enumerate().find(|(_, &i)| i >= rows) {
            return Err(format!(
                "index {bad} (position {at}) is out of range for axis 0 with size {rows}"
            ));
        }
        let mut runs: Vec<(u64, u64)> = Vec::new();
        let mut add = |row: u64| match runs.last_mut() {
            Some((first, length)) if *first + *length == row => *length += 1,
            Some((first, length)) if *first + *length > row => {} // a repeat
            _ => runs.push((row, 1)),
        };
        if indices.windows(2).all(|w| w[0] < w[1]) {
            indices.iter().for_each(|&row| add(row));
            return Ok(RowPlan {
                runs,
                ranks: Vec::new(),
                distinct: indices.len(),
                len: indices.len(),
            });
        }
        let mut order: Vec<(u64, usize)> = indices.iter().copied().zip(0..).collect();
        order.sort_unstable();
        let mut ranks = vec![0; indices.len()];
        let mut distinct = 0;
        for (k, &(row, position)) in order.iter().enumerate() {
            if k > 0 && order[k - 1].0 != row {
                distinct += 1;
            }
            ranks[position] = distinct;
            add(row);
        }
        Ok(RowPlan {
            runs,
            ranks,
            distinct: distinct + usize::from(!indices.is_empty()),
            len: indices.len(),
        })
    }

    /// The distinct rows as runs in increasing order: first row, number of rows.
    pub fn runs(&self) -> &[(u64, u64)] {
        &self.runs
    }

    /// How many distinct rows (the rows read).
    pub fn distinct(&self) -> usize {
        self.distinct
    }

    /// How many indices the caller gave.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the caller gave no index.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the indices are strictly increasing: then the rows read are the output, and
    /// there is nothing to scatter.
    pub fn in_order(&self) -> bool {
        self.ranks.is_empty()
    }

    /// The caller's rows in the caller's order (repeats included), as runs (first row, rows) of
    /// rows that are neighbours both in the file and in that order.
    pub fn caller_runs(&self) -> Vec<(u64, u64)> {
        if self.ranks.is_empty() {
            return self.runs.clone();
        }
        let distinct: Vec<u64> = self
            .runs
            .iter()
            .flat_map(|&(first, rows)| first..first + rows)
            .collect();
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for row in self.ranks.iter().map(|&rank| distinct[rank]) {
            match runs.last_mut() {
                Some((first, rows)) if *first + *rows == row => *rows += 1,
                _ => runs.push((row, 1)),
            }
        }
        runs
    }

    /// Refuses a scatter of rows of `row_bytes` from `source` bytes into `target` bytes that do
    /// not hold the plan's distinct rows and its indices' rows.
    pub fn check_scatter(
        &self,
        source: usize,
        target: usize,
        row_bytes: usize,
    ) -> Result<(), String> {
        if self.distinct.checked_mul(row_bytes) != Some(source)
            || self.len.checked_mul(row_bytes) != Some(target)
        {
            return Err(format!(
                "scatter of {} rows ({} distinct) of {row_bytes} bytes from {source} bytes into \
                 {target} bytes: the sizes do not match",
                self.len, self.distinct
            ));
        }
        Ok(())
    }

    /// Copies the distinct rows (`source`: `distinct` rows of `row_len` elements, in increasing
    /// row order) into the caller's order (`target`: one row per index, repeats included).
    /// Refused, before anything is copied, when a size does not match the plan.
    pub fn scatter<T: Copy + Send + Sync>(
        &self,
        source: &[T],
        target: &mut [T],
        row_len: usize,
    ) -> Result<(), String> {
        self.check_scatter(source.len(), target.len(), row_len)?;
        if self.ranks.is_empty() {
            target.copy_from_slice(source);
            return Ok(());
        }
        if row_len == 0 {
            return Ok(());
        }
        let copy = |(ranks, part): (&[usize], &mut [T])| {
            for (row, &rank) in part.chunks_exact_mut(row_len).zip(ranks) {
                row.copy_from_slice(&source[rank * row_len..(rank + 1) * row_len]);
            }
        };
        if std::mem::size_of_val(target) < SCATTER_SPLIT {
            copy((&self.ranks, target));
        } else {
            // Parts of at least a split's bytes, on the pool's threads.
            let per = (SCATTER_SPLIT / std::mem::size_of_val(&source[..row_len])).max(1);
            self.ranks
                .par_chunks(per)
                .zip(target.par_chunks_mut(per * row_len))
                .for_each(copy);
        }
        Ok(())
    }
}

/// A gather's runs of rows as selections of the dataset, filling an output one run after
/// another: each run (first row, rows) with the same selection of the other axes, its rows of
/// `row_bytes` each. What the decoded and stored reads of a gather map onto chunks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowRuns {
    /// Per run: the selection's start and count (the first axis's, then the other axes'), the
    /// byte of the output it starts at and its bytes.
    runs: Vec<(Vec<u64>, Vec<u64>, u64, u64)>,
    /// Every run's step: 1 along the first axis, then the other axes'.
    step: Vec<u64>,
}

impl RowRuns {
    /// The runs `runs` (first row, rows), each row `rest` of the other axes and `row_bytes` of
    /// the output.
    pub fn new(runs: &[(u64, u64)], rest: &Hyperslab, row_bytes: u64) -> RowRuns {
        let along = |first: u64, rest: &[u64]| -> Vec<u64> {
            std::iter::once(first).chain(rest.iter().copied()).collect()
        };
        let mut at = 0;
        let runs = runs.iter().map(|&(row, rows)| {
            let (start, len) = (at, rows * row_bytes);
            at += len;
            (along(row, rest.start), along(rows, rest.count), start, len)
        });
        RowRuns {
            runs: runs.collect(),
            step: along(1, rest.step),
        }
    }

    /// Each run's selection, the byte of the output it starts at and its bytes, in order.
    pub fn iter(&self) -> impl Iterator<Item = (Hyperslab<'_>, u64, u64)> {
        let step = &self.step;
        (self.runs.iter())
            .map(move |(start, count, at, len)| (Hyperslab { start, step, count }, *at, *len))
    }

    /// Each run's selection and the byte of the output it starts at.
    pub fn placed(&self) -> Vec<Placed<'_>> {
        self.iter()
            .map(|(selection, at, _)| Placed { selection, at })
            .collect()
    }

    /// The selection from the first run's first row to the last run's last row (its start, step
    /// and count), or None without runs.
    pub fn span(&self) -> Option<[Vec<u64>; 3]> {
        let (first, last) = (self.runs.first()?, self.runs.last()?);
        let mut count = last.1.clone();
        count[0] += last.0[0] - first.0[0];
        Some([first.0.clone(), self.step.clone(), count])
    }
}

#[cfg(test)]
mod tests {
    use super::{RowPlan, RowRuns};
    use h5gds_chunk_codec::Hyperslab;

    #[test]
    fn row_runs_select_the_other_axes_in_every_run_one_after_another() {
        let rest = Hyperslab {
            start: &[2],
            step: &[3],
            count: &[4],
        };
        let runs = RowRuns::new(&[(1, 2), (5, 1), (9, 3)], &rest, 16);
        let slabs: Vec<[Vec<u64>; 3]> = runs
            .iter()
            .map(|(s, ..)| [s.start.to_vec(), s.step.to_vec(), s.count.to_vec()])
            .collect();
        assert_eq!(
            slabs,
            [
                [vec![1, 2], vec![1, 3], vec![2, 4]],
                [vec![5, 2], vec![1, 3], vec![1, 4]],
                [vec![9, 2], vec![1, 3], vec![3, 4]],
            ]
        );
        let places: Vec<(u64, u64)> = runs.iter().map(|(_, at, len)| (at, len)).collect();
        assert_eq!(places, [(0, 32), (32, 16), (48, 48)]);
        let ats: Vec<u64> = runs.placed().iter().map(|p| p.at).collect();
        assert_eq!(ats, [0, 32, 48]);
        assert_eq!(runs.span(), Some([vec![1, 2], vec![1, 3], vec![11, 4]]));
        let none = RowRuns::new(&[], &rest, 16);
        assert_eq!((none.span(), none.placed().len()), (None, 0));
    }

    #[test]
    fn indices_become_sorted_runs_and_ranks() {
        let plan = RowPlan::of(&[7, 2, 3, 7, 0], 8).unwrap();
        assert_eq!(plan.runs(), &[(0, 1), (2, 2), (7, 1)]);
        assert_eq!(
            (plan.distinct(), plan.len(), plan.in_order()),
            (4, 5, false)
        );
        assert_eq!(plan.caller_runs(), vec![(7, 1), (2, 2), (7, 1), (0, 1)]);
        let increasing = RowPlan::of(&[1, 2, 5], 6).unwrap();
        assert_eq!(increasing.runs(), &[(1, 2), (5, 1)]);
        assert!(increasing.in_order());
        assert_eq!(
            RowPlan::of(&[1, 6], 6).unwrap_err(),
            "index 6 (position 1) is out of range for axis 0 with size 6"
        );
    }

    #[test]
    fn scatter_copies_rows_into_the_callers_order_and_refuses_wrong_sizes() {
        let plan = RowPlan::of(&[2, 0, 2], 3).unwrap();
        let source = [10u8, 11, 20, 21];
        let mut target = [0u8; 6];
        plan.scatter(&source, &mut target, 2).unwrap();
        assert_eq!(target, [20, 21, 10, 11, 20, 21]);
        let mut short = [0u8; 4];
        assert!(plan.scatter(&source, &mut short, 2).is_err());
        assert_eq!(short, [0; 4]);
    }

    #[test]
    fn neighbouring_rows_coalesce_into_runs_in_and_out_of_order() {
        let plan = RowPlan::of(&[5, 6, 7, 1, 1, 2, 9], 10).unwrap();
        assert_eq!(
            (plan.distinct(), plan.runs().len(), plan.in_order()),
            (6, 3, false)
        );
        let increasing = [0, 1, 2, 4, 5, 9];
        let plan = RowPlan::of(&increasing, 10).unwrap();
        assert_eq!(
            (plan.distinct(), plan.runs().len(), plan.in_order()),
            (6, 3, true)
        );
        assert_eq!(
            RowPlan::of(&increasing, 9).unwrap_err(),
            "index 9 (position 5) is out of range for axis 0 with size 9"
        );
        let empty = RowPlan::of(&[], 10).unwrap();
        assert_eq!(
            (empty.distinct(), empty.runs().len(), empty.in_order()),
            (0, 0, true)
        );
    }

    #[test]
    fn a_scatter_refuses_sizes_that_do_not_match_the_plan_naming_them() {
        let plan = RowPlan::of(&[2, 0, 2], 3).unwrap();
        let source: Vec<u8> = [0i64, 1].iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut target = [0xFFu8; 24];
        assert_eq!(
            plan.scatter(&source, &mut target[..16], 8).unwrap_err(),
            "scatter of 3 rows (2 distinct) of 8 bytes from 16 bytes into 16 bytes: the sizes \
             do not match"
        );
        assert_eq!(target, [0xFF; 24]);
        plan.scatter(&source, &mut target, 8).unwrap();
        let rows: Vec<i64> = target
            .chunks_exact(8)
            .map(|row| i64::from_le_bytes(row.try_into().unwrap()))
            .collect();
        assert_eq!(rows, [1, 0, 1]);
    }

    #[test]
    fn a_large_scatter_split_over_threads_places_every_row() {
        let rows = 5000u64;
        let indices: Vec<u64> = (0..rows).rev().chain(0..rows).collect();
        let plan = RowPlan::of(&indices, rows).unwrap();
        let row_bytes = 2048;
        let source: Vec<u8> = (0..rows as usize * row_bytes)
            .map(|i| (i / row_bytes) as u8)
            .collect();
        let mut target = vec![0u8; indices.len() * row_bytes];
        plan.scatter(&source, &mut target, row_bytes).unwrap();
        for (i, &row) in indices.iter().enumerate() {
            assert!(target[i * row_bytes..(i + 1) * row_bytes]
                .iter()
                .all(|&b| b == row as u8));
        }
    }
}
