//! The selection of a gather: rows of a dataset's first axis, given as sorted runs, selected as
//! a union of hyperslabs. The caller holds the HDF5's lock.

use super::{check_buffer, dataset_space, hyperslab_elements, stack, Hid, Prepared};
use super::{Space, H5S_SELECT_SET};
use crate::Error;
use h5gds_runtime::hdf5::Hdf5Api;
use std::ffi::c_int;

/// The checks and dataspaces of a gather: rows of the dataset's first axis
/// given as sorted, disjoint runs (`runs`: first row and number of rows each), the other axes
/// selected by one hyperslab (`rest_start`, `rest_step`, `rest_count`), read with one H5Dread
/// into `nbytes` at `buffer`, which holds the runs' rows one after another in file order. The
/// file selection is the union of one hyperslab per run; the memory selection all of a
/// one-dimensional space of as many elements. `Ok(None)`: nothing to move.
#[derive(Clone, Copy)]
pub struct GatherRead<'a> {
    pub dataset: Hid,
    pub mem_type: Hid,
    pub runs: &'a [(u64, u64)],
    pub rest_start: &'a [u64],
    pub rest_step: &'a [u64],
    pub rest_count: &'a [u64],
    pub buffer: usize,
    pub nbytes: usize,
}

/// HDF5's `H5S_SELECT_OR`: a hyperslab added to the selection.
const H5S_SELECT_OR: c_int = 1;

/// Checks a gather's ids, runs and sizes against HDF5 and builds its dataspaces (see
/// [`GatherRead`]); what it returns runs with [`Prepared::run`].
fn prepare_gather(api: &'static Hdf5Api, g: &GatherRead) -> Result<Option<Prepared>, Error> {
    let (file_space, dims) = dataset_space(api, g.dataset, g.mem_type)?;
    let dims = &dims[..];
    let Some((&rows, rest_dims)) = dims.split_first() else {
        return Err(Error::invalid(
            "a gather selects rows of the first axis, and the dataset is a scalar",
        ));
    };
    if [g.rest_start.len(), g.rest_step.len(), g.rest_count.len()] != [rest_dims.len(); 3] {
        return Err(Error::invalid(format!(
            "the selection of the axes after the first has {} axes, the dataset {}",
            g.rest_count.len(),
            rest_dims.len()
        )));
    }
    let rest = (g.rest_start, g.rest_step, g.rest_count);
    let row_elements = hyperslab_elements(rest_dims, rest, 1).map_err(Error::invalid)?;
    let mut selected_rows: u64 = 0;
    let mut end = 0;
    for &(first, length) in g.runs {
        let past = first.checked_add(length);
        if length == 0 || first < end || past.is_none_or(|p| p > rows) {
            return Err(Error::invalid(format!(
                "rows {first}..{} are not a run after row {end} inside the first axis of size \
                 {rows}",
                first.saturating_add(length)
            )));
        }
        end = first + length;
        selected_rows += length;
    }
    let elements = selected_rows.saturating_mul(row_elements);
    check_buffer(api, g.mem_type, (elements, g.nbytes), "gather")?;
    if elements == 0 {
        return Ok(None);
    }
    let with_first = |rest: &[u64], first| [&[first][..], rest].concat();
    let (start, step) = (with_first(g.rest_start, 0), with_first(g.rest_step, 1));
    let slab = (start, step, with_first(g.rest_count, 0));
    select_runs(&file_space, (dims, api.H5Smodify_select?), slab, g.runs)?;
    file_space.check_selected(elements, ("selection", "gather"))?;
    let mem_space = Space::simple(api, &[elements])?;
    Ok(Some(Prepared {
        api,
        write: false,
        dataset: g.dataset,
        mem_type: g.mem_type,
        file_space,
        mem_space,
        buffer: g.buffer,
        rank: dims.len(),
    }))
}

/// The reads of a gather's rows (`g`, its buffer holding all the runs' rows) in groups of
/// `runs_per_read` runs (0: one read of all), each checked as `prepare_gather` checks one,
/// every group before any is read: HDF5 maps a selection onto a chunked dataset's chunks in time
/// that grows faster than the number of chunks touched, so chunked gathers read in groups.
pub fn prepare_gather_in_groups(
    api: &'static Hdf5Api,
    g: &GatherRead,
    runs_per_read: usize,
) -> Result<Vec<Prepared>, Error> {
    let rows: u64 = g.runs.iter().map(|&(_, length)| length).sum();
    if rows == 0 {
        return Ok(Vec::new());
    }
    if g.nbytes as u64 % rows != 0 {
        return Err(Error::invalid(format!(
            "the buffer has {} bytes, not a whole number of rows for the {rows} rows of the \
             gather",
            g.nbytes
        )));
    }
    let row_bytes = g.nbytes / rows as usize;
    let per_read = if runs_per_read == 0 {
        g.runs.len()
    } else {
        runs_per_read
    };
    let mut reads = Vec::new();
    let mut offset = 0;
    for group in g.runs.chunks(per_read) {
        let nbytes = group.iter().map(|&(_, length)| length).sum::<u64>() as usize * row_bytes;
        let read = GatherRead {
            runs: group,
            buffer: g.buffer + offset,
            nbytes,
            ..*g
        };
        reads.extend(prepare_gather(api, &read)?);
        offset += nbytes;
    }
    Ok(reads)
}

/// Runs of rows below 16 are added to a selection one by one; longer lists are split in two
/// halves selected in two dataspaces and combined, since HDF5 merges each hyperslab added to a
/// selection with all the blocks it already holds (one by one, 4096 runs take a quarter of a
/// second; halving, a few milliseconds).
const RUNS_ONE_BY_ONE: usize = 16;

/// `H5Smodify_select`: a space's selection combined into another's.
type Modify = unsafe extern "C" fn(space: Hid, op: c_int, other: Hid) -> c_int;

/// Sets `space`'s selection (a dataspace of the dataset's extent, `dims`) to the union of `runs`
/// (at least one; sorted, disjoint, inside the dataset), each the hyperslab `slab` (start, step,
/// count of the dataset's rank) with the first axis's start and count the run's.
fn select_runs(
    space: &Space,
    (dims, modify): (&[u64], Modify),
    mut slab: (Vec<u64>, Vec<u64>, Vec<u64>),
    runs: &[(u64, u64)],
) -> Result<(), Error> {
    if runs.len() > RUNS_ONE_BY_ONE {
        let (left, right) = runs.split_at(runs.len() / 2);
        select_runs(space, (dims, modify), slab.clone(), left)?;
        let other = Space::simple(space.1, dims)?;
        select_runs(&other, (dims, modify), slab, right)?;
        // SAFETY: two valid dataspaces of the same extent.
        if unsafe { modify(space.id(), H5S_SELECT_OR, other.id()) } < 0 {
            return Err(Error::hdf5(stack(space.1)));
        }
        return Ok(());
    }
    for (i, &(first, length)) in runs.iter().enumerate() {
        (slab.0[0], slab.2[0]) = (first, length);
        let op = if i == 0 {
            H5S_SELECT_SET
        } else {
            H5S_SELECT_OR
        };
        // SAFETY: arrays of the space's rank, the hyperslab inside the dataset (checked by the
        // caller).
        unsafe { space.select(op, &slab.0, &slab.1, &slab.2) }?;
    }
    Ok(())
}
