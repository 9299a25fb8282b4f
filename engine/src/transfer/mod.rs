//! One transfer of a dataset's elements through HDF5 (`H5Dread`/`H5Dwrite` of a hyperslab, or of a
//! gather's union of runs of rows), over the table of the HDF5 copy a face hands in
//! (`h5gds_runtime::hdf5::Hdf5Api`): every id and size checked against HDF5 before bytes move, so a
//! wrong argument is an error, never a write past a buffer. The caller holds that HDF5's lock
//! (h5py's `phil`, or hdf5-metno's).

mod gather;

pub use gather::{prepare_gather_in_groups, GatherRead};

use crate::Error;
use h5gds_runtime::hdf5::{hid_t as Hid, Hdf5Api};
use h5gds_runtime::hdf5::{stack, Hdf5Error, IdKind, Owned};
use std::ffi::{c_int, c_void};

type Hsize = u64;

const H5P_DEFAULT: Hid = 0;
const H5I_DATATYPE: c_int = 3;
const H5I_DATASET: c_int = 5;
const H5S_SCALAR: c_int = 0;
const H5S_SELECT_SET: c_int = 0;
/// HDF5's largest rank (checked against real headers by tests/abi_layout.rs).
const MAX_RANK: usize = h5gds_runtime::hdf5::H5S_MAX_RANK;

/// A dataspace, closed when dropped, and the table of its HDF5.
struct Space(Owned, &'static Hdf5Api);

impl Space {
    /// Owns the id a dataspace call returned, or reports HDF5's error for a failed one.
    fn new(id: Hid, api: &'static Hdf5Api) -> Result<Space, Error> {
        match Owned::new(api, IdKind::Dataspace, id, "a dataspace call") {
            Ok(owned) => Ok(Space(owned, api)),
            Err(Hdf5Error::Failed { stack, .. }) => Err(Error::hdf5(stack)),
            Err(missing) => Err(Error::hdf5(missing.to_string())),
        }
    }

    fn id(&self) -> Hid {
        self.0.id()
    }

    /// A simple dataspace of `shape` (at most HDF5's largest rank).
    fn simple(api: &'static Hdf5Api, shape: &[u64]) -> Result<Space, Error> {
        let rank = shape.len() as c_int;
        // SAFETY: `shape` holds `rank` dimensions; no maximum dimensions (NULL).
        let id = unsafe { (api.H5Screate_simple?)(rank, shape.as_ptr(), std::ptr::null()) };
        Space::new(id, api)
    }

    /// A copy of `dataset`'s dataspace (an id HDF5 checks).
    fn of(api: &'static Hdf5Api, dataset: Hid) -> Result<Space, Error> {
        // SAFETY: a plain query; an invalid id yields an error code.
        Space::new(unsafe { (api.H5Dget_space?)(dataset) }, api)
    }

    /// Selects (`op`: set, or or-ed into the selection) the hyperslab `start`, `step`, `count`
    /// (blocks of 1).
    ///
    /// # Safety
    /// The three arrays must have the space's rank.
    unsafe fn select(
        &self,
        op: c_int,
        start: &[u64],
        step: &[u64],
        count: &[u64],
    ) -> Result<(), Error> {
        let (api, null) = (self.1, std::ptr::null());
        let (start, step, count) = (start.as_ptr(), step.as_ptr(), count.as_ptr());
        // SAFETY: arrays of the space's rank, as the caller guarantees; block NULL means blocks
        // of 1.
        let status = unsafe { (api.H5Sselect_hyperslab?)(self.id(), op, start, step, count, null) };
        match status < 0 {
            true => Err(Error::hdf5(stack(api))),
            false => Ok(()),
        }
    }

    /// Checks that the selection holds the `elements` the caller counted (`what`: the
    /// selection's holder and the caller's request, as the refusal names them).
    fn check_selected(&self, elements: u64, (holder, what): (&str, &str)) -> Result<(), Error> {
        // SAFETY: a valid dataspace.
        let selected = unsafe { (self.1.H5Sget_select_npoints?)(self.id()) };
        if selected != elements as i64 {
            stack(self.1);
            return Err(Error::invalid(format!(
                "the dataset has no data to select (its {holder} holds {selected} elements, the \
                 {what} {elements})"
            )));
        }
        Ok(())
    }
}

impl From<Error> for String {
    fn from(e: Error) -> String {
        e.to_string()
    }
}

/// One read or write: a dataset, the memory type, the file selection (a hyperslab: start, step,
/// count per axis), the memory shape, and the buffer.
pub struct Transfer<'a> {
    pub write: bool,
    pub dataset: Hid,
    pub mem_type: Hid,
    pub start: &'a [u64],
    pub step: &'a [u64],
    pub count: &'a [u64],
    pub mem_shape: &'a [u64],
    pub buffer: usize,
    pub nbytes: usize,
}

/// The checked arguments of one transfer, ready to run without the GIL.
pub struct Prepared {
    api: &'static Hdf5Api,
    /// H5Dwrite, else H5Dread.
    write: bool,
    dataset: Hid,
    mem_type: Hid,
    file_space: Space,
    mem_space: Space,
    buffer: usize,
    rank: usize,
}

/// Checks that `dataset` is an open dataset and `mem_type` a datatype, and returns the dataset's
/// dataspace and its dimensions.
fn dataset_space(
    api: &'static Hdf5Api,
    dataset: Hid,
    mem_type: Hid,
) -> Result<(Space, Vec<Hsize>), Error> {
    // SAFETY: plain queries; an invalid id yields an error code (the stack is cleared below).
    let (dset_kind, type_kind) =
        unsafe { ((api.H5Iget_type?)(dataset), (api.H5Iget_type?)(mem_type)) };
    if dset_kind != H5I_DATASET || type_kind != H5I_DATATYPE {
        stack(api);
        return Err(Error::invalid(format!(
            "id {dataset} is not an open dataset or id {mem_type} not a datatype"
        )));
    }
    let file_space = Space::of(api, dataset)?;
    let mut dims = [0 as Hsize; MAX_RANK];
    // SAFETY: `dims` has room for HDF5's largest rank.
    let rank = unsafe {
        (api.H5Sget_simple_extent_dims?)(file_space.id(), dims.as_mut_ptr(), std::ptr::null_mut())
    };
    if rank < 0 {
        return Err(Error::hdf5(stack(api)));
    }
    Ok((file_space, dims[..rank as usize].to_vec()))
}

/// Refuses a hyperslab (`start`, `step`, `count`, of `dims`' rank) reaching past `dims` or of a
/// step 0, naming its axis counted from `first_axis`; else the number of elements it selects.
pub(crate) fn hyperslab_elements(
    dims: &[u64],
    (start, step, count): (&[u64], &[u64], &[u64]),
    first_axis: usize,
) -> Result<u64, String> {
    let mut elements: u64 = 1;
    for (axis, &dim) in dims.iter().enumerate() {
        let (start, step, count) = (start[axis], step[axis], count[axis]);
        let last = (count.max(1) - 1)
            .checked_mul(step)
            .and_then(|d| d.checked_add(start));
        if step == 0 || (count > 0 && last.is_none_or(|l| l >= dim)) {
            return Err(format!(
                "selection out of range on axis {}: start {start}, step {step}, count {count} \
                 for a size of {dim}",
                axis + first_axis
            ));
        }
        elements = elements.saturating_mul(count);
    }
    Ok(elements)
}

/// Refuses a buffer of `nbytes` that does not hold `elements` of `mem_type` (`what`: the
/// request, as the refusal names it).
fn check_buffer(
    api: &Hdf5Api,
    mem_type: Hid,
    (elements, nbytes): (u64, usize),
    what: &str,
) -> Result<(), Error> {
    // SAFETY: a valid datatype id.
    let type_size = unsafe { (api.H5Tget_size?)(mem_type) };
    let needed = (elements as u128) * (type_size as u128);
    if type_size == 0 || needed != nbytes as u128 {
        stack(api);
        return Err(Error::invalid(format!(
            "the buffer has {nbytes} bytes, the {what} needs {needed} ({elements} elements of \
             {type_size} bytes)"
        )));
    }
    Ok(())
}

/// Checks every argument against HDF5 and builds the dataspaces. `Ok(None)`: nothing to move
/// (an empty selection). `api`: the table of the HDF5 that opened the dataset.
pub fn prepare(api: &'static Hdf5Api, t: &Transfer) -> Result<Option<Prepared>, Error> {
    let (file_space, dims) = dataset_space(api, t.dataset, t.mem_type)?;
    let dims = &dims[..];
    if [t.start.len(), t.step.len(), t.count.len()] != [dims.len(); 3] {
        return Err(Error::invalid(format!(
            "the selection has {} axes, the dataset {}",
            t.count.len(),
            dims.len()
        )));
    }
    let elements =
        hyperslab_elements(dims, (t.start, t.step, t.count), 0).map_err(Error::invalid)?;
    let mem_elements = t.mem_shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d));
    if mem_elements != Some(elements) || t.mem_shape.len() > MAX_RANK {
        return Err(Error::invalid(format!(
            "the memory shape {:?} does not hold the {elements} elements selected",
            t.mem_shape
        )));
    }
    check_buffer(api, t.mem_type, (elements, t.nbytes), "selection")?;
    if elements == 0 {
        return Ok(None);
    }
    // A selection of everything stays HDF5's "all" selection (the dataspace's own), which the
    // driver reads as one request split over its threads, as it does for h5py's own reads.
    let whole = (0..dims.len())
        .all(|i| t.start[i] == 0 && t.count[i] == dims[i] && (t.step[i] == 1 || dims[i] <= 1));
    if !dims.is_empty() && !whole {
        // SAFETY: arrays of the space's rank (checked above).
        unsafe { file_space.select(H5S_SELECT_SET, t.start, t.step, t.count) }?;
    }
    file_space.check_selected(elements, ("dataspace", "selection"))?;
    let mem_space = match t.mem_shape.is_empty() {
        // SAFETY: a plain call making a scalar dataspace.
        true => Space::new(unsafe { (api.H5Screate?)(H5S_SCALAR) }, api)?,
        false => Space::simple(api, t.mem_shape)?,
    };
    Ok(Some(Prepared {
        api,
        write: t.write,
        dataset: t.dataset,
        mem_type: t.mem_type,
        file_space,
        mem_space,
        buffer: t.buffer,
        rank: dims.len(),
    }))
}

impl Prepared {
    /// The memory type's id (the reads of chunks never written take it, `crate::decoded`).
    pub fn mem_type(&self) -> Hid {
        self.mem_type
    }

    /// Moves the elements of the file hyperslab (`start`, `step`, `count`: a part of the
    /// prepared selection) between the dataset and a host buffer holding them in row-major
    /// order. The HDF5's lock stays held.
    ///
    /// # Safety
    /// `buffer` must hold the hyperslab's elements in the memory type (writable for reads), and
    /// the hyperslab must lie inside the dataset (a part of the checked selection).
    pub(crate) unsafe fn run_hyperslab(
        &self,
        start: &[u64],
        step: &[u64],
        count: &[u64],
        buffer: *mut c_void,
    ) -> Result<(), String> {
        let api = self.api;
        if self.rank == 0 {
            // A scalar dataset has one element: the prepared spaces select it.
            // SAFETY: as the caller guarantees.
            return unsafe { self.io_with(self.mem_space.id(), self.file_space.id(), buffer) };
        }
        let file = Space::of(api, self.dataset)?;
        // SAFETY: arrays of the dataset's rank (the caller's part of the checked selection).
        unsafe { file.select(H5S_SELECT_SET, start, step, count) }?;
        let memory = Space::simple(api, &[count.iter().product()])?;
        // SAFETY: as the caller guarantees.
        unsafe { self.io_with(memory.id(), file.id(), buffer) }
    }

    /// Moves the file block (`start`, `count`; steps of 1, a part of the prepared selection)
    /// between the dataset and the prepared buffer, which holds an array of `shape` where the
    /// block lies from `at`. The HDF5's lock stays held.
    ///
    /// # Safety
    /// The prepared buffer must hold the array of `shape` in the memory type (writable for
    /// reads), and the block must lie inside the dataset and, from `at`, inside that array.
    pub(crate) unsafe fn run_block(
        &self,
        (start, count): (&[u64], &[u64]),
        shape: &[u64],
        at: &[u64],
    ) -> Result<(), String> {
        let (api, ones) = (self.api, vec![1u64; count.len()]);
        let (file, memory) = (Space::of(api, self.dataset)?, Space::simple(api, shape)?);
        // SAFETY: arrays of the dataset's rank (the caller's block).
        unsafe { file.select(H5S_SELECT_SET, start, &ones, count) }?;
        // SAFETY: arrays of `shape`'s rank (the block's place in it).
        unsafe { memory.select(H5S_SELECT_SET, at, &ones, count) }?;
        // SAFETY: as the caller guarantees.
        unsafe { self.io_with(memory.id(), file.id(), self.buffer as *mut c_void) }
    }

    /// H5Dread/H5Dwrite with the given spaces.
    ///
    /// # Safety
    /// `buffer` must hold the memory selection's elements in the memory type.
    unsafe fn io_with(&self, memory: Hid, file: Hid, buffer: *mut c_void) -> Result<(), String> {
        let api = self.api;
        let (d, t) = (self.dataset, self.mem_type);
        // SAFETY: ids checked in `prepare` or made from them; the buffer as the caller
        // guarantees.
        let status = unsafe {
            if self.write {
                (api.H5Dwrite?)(d, t, memory, file, H5P_DEFAULT, buffer)
            } else {
                (api.H5Dread?)(d, t, memory, file, H5P_DEFAULT, buffer)
            }
        };
        if status < 0 {
            Err(stack(api))
        } else {
            Ok(())
        }
    }

    /// Moves the bytes (H5Dread or H5Dwrite). The HDF5's lock stays held.
    ///
    /// # Safety
    /// The buffer must hold `nbytes` (checked in `prepare`) valid, writable (for reads) bytes for
    /// the duration of the call.
    pub unsafe fn run(&self) -> Result<(), String> {
        let (memory, file) = (self.mem_space.id(), self.file_space.id());
        // SAFETY: ids checked in `prepare`; the buffer as the caller guarantees.
        unsafe { self.io_with(memory, file, self.buffer as *mut c_void) }
    }
}
