//! The selection of a gather: rows of a dataset's first axis, given as sorted runs, selected as
//! a union of hyperslabs. The caller holds the HDF5's lock.

use super::{argument, dataset_space, stack, Hid, IoError, Prepared, Space, H5S_SELECT_SET, MAX_RANK};
use h5gds_runtime::hdf5::{hsize_t as Hsize, Hdf5Api};
use std::ffi::c_int;

/// `H5Smodify_select`'s type, from the table.
type Modify = unsafe extern "C" fn(space: Hid, op: c_int, other: Hid) -> c_int;

/// The checks and dataspaces of a gather: rows of the dataset's first axis
/// given as sorted, disjoint runs (`runs`: first row and number of rows each), the other axes
/// selected by one hyperslab (`rest_start`, `rest_step`, `rest_count`), read with one H5Dread
/// into `nbytes` at `buffer`, which holds the runs' rows one after another in file order. The
/// file selection is the union of one hyperslab per run; the memory selection all of a
/// one-dimensional space of as many elements. `Ok(None)`: nothing to move.
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
pub fn prepare_gather(
    api: &'static Hdf5Api,
    g: &GatherRead,
) -> Result<Option<Prepared>, IoError> {
    let (file_space, dims) = dataset_space(api, g.dataset, g.mem_type)?;
    let dims = &dims[..];
    let Some((&rows, rest_dims)) = dims.split_first() else {
        return Err(argument(
            "a gather selects rows of the first axis, and the dataset is a scalar".into(),
        ));
    };
    if [g.rest_start.len(), g.rest_step.len(), g.rest_count.len()] != [rest_dims.len(); 3] {
        return Err(argument(format!(
            "the selection of the axes after the first has {} axes, the dataset {}",
            g.rest_count.len(),
            rest_dims.len()
        )));
    }
    let mut row_elements: u64 = 1;
    for (axis, &dim) in rest_dims.iter().enumerate() {
        let (start, step, count) = (g.rest_start[axis], g.rest_step[axis], g.rest_count[axis]);
        let last = (count.max(1) - 1)
            .checked_mul(step)
            .and_then(|d| d.checked_add(start));
        if step == 0 || (count > 0 && last.is_none_or(|l| l >= dim)) {
            return Err(argument(format!(
                "selection out of range on axis {}: start {start}, step {step}, count {count} \
                 for a size of {dim}",
                axis + 1
            )));
        }
        row_elements = row_elements.saturating_mul(count);
    }
    let mut selected_rows: u64 = 0;
    let mut end = 0;
    for &(first, length) in g.runs {
        let past = first.checked_add(length);
        if length == 0 || first < end || past.is_none_or(|p| p > rows) {
            return Err(argument(format!(
                "rows {first}..{} are not a run after row {end} inside the first axis of size \
                 {rows}",
                first.saturating_add(length)
            )));
        }
        end = first + length;
        selected_rows += length;
    }
    let elements = selected_rows.saturating_mul(row_elements);
    // SAFETY: a valid datatype id.
    let type_size = unsafe { (api.H5Tget_size?)(g.mem_type) };
    let needed = (elements as u128) * (type_size as u128);
    if type_size == 0 || needed != g.nbytes as u128 {
        stack(api);
        return Err(argument(format!(
            "the buffer has {} bytes, the gather needs {needed} ({elements} elements of \
             {type_size} bytes)",
            g.nbytes
        )));
    }
    if elements == 0 {
        return Ok(None);
    }
    let mut rows_slab = RunsSlab {
        api,
        modify: api.H5Smodify_select?,
        dims,
        start: [0; MAX_RANK],
        step: [1; MAX_RANK],
        count: [0; MAX_RANK],
    };
    rows_slab.start[1..dims.len()].copy_from_slice(g.rest_start);
    rows_slab.step[1..dims.len()].copy_from_slice(g.rest_step);
    rows_slab.count[1..dims.len()].copy_from_slice(g.rest_count);
    rows_slab.select(file_space.0, g.runs)?;
    // SAFETY: a valid dataspace.
    let selected = unsafe { (api.H5Sget_select_npoints?)(file_space.0) };
    if selected != elements as i64 {
        stack(api);
        return Err(argument(format!(
            "the dataset has no data to select (its selection holds {selected} elements, the \
             gather {elements})"
        )));
    }
    // SAFETY: a one-dimensional space of the gather's element count.
    let mem_space = Space::new(
        unsafe { (api.H5Screate_simple?)(1, &elements, std::ptr::null()) },
        api,
    )?;
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

/// Runs of rows below 16 are added to a selection one by one; longer lists are split in two
/// halves selected in two dataspaces and combined, since HDF5 merges each hyperslab added to a
/// selection with all the blocks it already holds (one by one, 4096 runs take a quarter of a
/// second; halving, a few milliseconds).
const RUNS_ONE_BY_ONE: usize = 16;

/// The hyperslab of a run of rows: the other axes' start, step and count fixed, the first
/// axis's set per run.
struct RunsSlab<'a> {
    api: &'static Hdf5Api,
    /// `H5Smodify_select`: a space's selection combined into another's.
    modify: Modify,
    dims: &'a [Hsize],
    start: [Hsize; MAX_RANK],
    step: [Hsize; MAX_RANK],
    count: [Hsize; MAX_RANK],
}

impl RunsSlab<'_> {
    /// Sets `space`'s selection (a dataspace of the dataset's extent) to the union of `runs`
    /// (at least one; sorted, disjoint, inside the dataset).
    fn select(&mut self, space: Hid, runs: &[(u64, u64)]) -> Result<(), IoError> {
        let api = self.api;
        if runs.len() > RUNS_ONE_BY_ONE {
            let (left, right) = runs.split_at(runs.len() / 2);
            self.select(space, left)?;
            // SAFETY: a dataspace of the dataset's extent (`dims` has its rank, at most
            // MAX_RANK axes).
            let other = Space::new(
                unsafe {
                    (api.H5Screate_simple?)(
                        self.dims.len() as c_int,
                        self.dims.as_ptr(),
                        std::ptr::null(),
                    )
                },
                api,
            )?;
            self.select(other.0, right)?;
            // SAFETY: two valid dataspaces of the same extent.
            if unsafe { (self.modify)(space, H5S_SELECT_OR, other.0) } < 0 {
                return Err(IoError::Hdf5(stack(api)));
            }
            return Ok(());
        }
        for (i, &(first, length)) in runs.iter().enumerate() {
            self.start[0] = first;
            self.count[0] = length;
            let op = if i == 0 {
                H5S_SELECT_SET
            } else {
                H5S_SELECT_OR
            };
            // SAFETY: arrays of at least the space's rank, the hyperslab inside the dataset
            // (checked by the caller); block NULL means blocks of 1.
            let status = unsafe {
                (api.H5Sselect_hyperslab?)(
                    space,
                    op,
                    self.start.as_ptr(),
                    self.step.as_ptr(),
                    self.count.as_ptr(),
                    std::ptr::null(),
                )
            };
            if status < 0 {
                return Err(IoError::Hdf5(stack(api)));
            }
        }
        Ok(())
    }
}
