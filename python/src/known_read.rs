//! `h5gds.read` of a dataset whose layout `_layout` has already resolved, in one native call: the
//! dataset's validity, the selection (all of the dataset, or an index or a slice along the first
//! axis: the rows and runs of rows training loops read) and the output (a NumPy array, or a device
//! array with `__cuda_array_interface__` where the layout serves device reads: the driver would
//! stage them anyway) are checked here instead of in Python, without h5py's lock. A thread then holds the GIL about 1.3 µs per read
//! instead of seven, so threads reading rows of a read-only file overlap their reads (issue 26:
//! with seven microseconds of Python per 64 KiB row, two threads read less than one). Anything else (another
//! selection, another kind of array, a dataset with no known layout, a wrong argument) answers
//! None, and `h5gds.read`'s general path takes the call and raises its errors.

use crate::layout::{DeviceOut, Layout};
use h5gds_chunk_codec::Hyperslab;
use h5gds_engine::Kept;
use h5gds_runtime::hdf5::H5S_MAX_RANK;
use numpy::npyffi::flags::NPY_ARRAY_WRITEABLE;
use numpy::{PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyInt, PySlice, PyTuple};

/// The selection `item` makes along an axis of `size`: an index (not a bool; negative from the
/// end) in range, or a slice with a step of 1 or more, as (start, step, count, whether the axis
/// stays: not for an index, which NumPy drops). None for anything else, including what is wrong
/// (the general path says what).
fn first_axis(item: &Bound<'_, PyAny>, size: u64) -> Option<(u64, u64, u64, bool)> {
    if let Ok(slice) = item.cast::<PySlice>() {
        let found = slice.indices(isize::try_from(size).ok()?).ok()?;
        let count = found.slicelength as u64;
        let start = if count > 0 { found.start as u64 } else { 0 };
        return (found.step >= 1).then_some((start, found.step as u64, count, true));
    }
    // Python ints, and what has `__index__` (NumPy's integer scalars) as `operator.index` takes
    // it, except bools (Python's and NumPy's, which NumPy 1 gave an `__index__`).
    let index: i64 = if item.is_exact_instance_of::<PyInt>() {
        item.extract().ok()?
    } else {
        let kind = item.get_type().name().ok()?;
        if kind == "bool" || kind == "bool_" {
            return None;
        }
        item.call_method0(intern!(item.py(), "__index__"))
            .ok()?
            .extract()
            .ok()?
    };
    let index = if index < 0 {
        index.checked_add(i64::try_from(size).ok()?)?
    } else {
        index
    };
    let index = u64::try_from(index).ok().filter(|&i| i < size)?;
    Some((index, 1, 1, false))
}

/// The hyperslab `sel` selects in a dataset of `shape` when it is None, or an index or slice
/// along the first axis (alone or as a tuple of one).
fn hyperslab_of(sel: &Bound<'_, PyAny>, shape: &[u64]) -> Option<Selected> {
    let rank = shape.len();
    if rank == 0 || rank > H5S_MAX_RANK {
        return None;
    }
    let (start, step, count, keeps_axis) = if sel.is_none() {
        (0, 1, shape[0], true)
    } else {
        let item = match sel.cast::<PyTuple>() {
            Ok(tuple) if tuple.len() == 1 => tuple.get_item(0).ok()?,
            Ok(_) => return None,
            Err(_) => sel.clone(),
        };
        first_axis(&item, shape[0])?
    };
    let mut selected = Selected {
        rank,
        keeps_axis,
        start: [0; H5S_MAX_RANK],
        step: [1; H5S_MAX_RANK],
        count: [0; H5S_MAX_RANK],
    };
    selected.start[0] = start;
    selected.step[0] = step;
    selected.count[0] = count;
    selected.count[1..rank].copy_from_slice(&shape[1..]);
    Some(selected)
}

/// A selection along the first axis as a hyperslab (the other axes whole), held in place: a
/// row read allocates nothing for it.
struct Selected {
    rank: usize,
    /// False for an index: NumPy drops the first axis.
    keeps_axis: bool,
    start: [u64; H5S_MAX_RANK],
    step: [u64; H5S_MAX_RANK],
    count: [u64; H5S_MAX_RANK],
}

impl Selected {
    fn hyperslab(&self) -> Hyperslab<'_> {
        Hyperslab {
            start: &self.start[..self.rank],
            step: &self.step[..self.rank],
            count: &self.count[..self.rank],
        }
    }

    /// The selected shape, as NumPy gives it: the counts, less the first axis for an index.
    fn shape(&self) -> &[u64] {
        &self.count[usize::from(!self.keeps_axis)..self.rank]
    }
}

/// What `_layout` remembers of a DatasetID's layout.
pub enum Cached<'py> {
    /// Not resolved yet.
    Unknown,
    /// Resolved: HDF5 reads it.
    None,
    /// Its layout, and the dtype it was resolved for.
    Layout(Bound<'py, Layout>, Bound<'py, PyAny>),
}

/// The entry of `layouts` (`_layout`'s: id of a DatasetID -> (weak reference to it, its Layout
/// or None, its dtype)) for the DatasetID `dsid`, where it is this one's and not one of an
/// object since freed at the same address.
pub fn cached_layout<'py>(
    layouts: &Bound<'py, PyDict>,
    dsid: &Bound<'py, PyAny>,
) -> PyResult<Cached<'py>> {
    let Some(entry) = layouts.get_item(dsid.as_ptr() as usize)? else {
        return Ok(Cached::Unknown);
    };
    Ok(match entry_layout(&entry)? {
        Some((of, cached)) if of.is(dsid) => cached,
        _ => Cached::Unknown,
    })
}

/// What `entry`, an entry of `_layout`'s `_layouts`, remembers, and the DatasetID it is of; None
/// where that is gone or `entry` is not one.
fn entry_layout<'py>(
    entry: &Bound<'py, PyAny>,
) -> PyResult<Option<(Bound<'py, PyAny>, Cached<'py>)>> {
    let Ok(entry) = entry.cast::<PyTuple>() else {
        return Ok(None);
    };
    let dsid = entry.get_item(0)?.call0()?;
    if dsid.is_none() {
        return Ok(None);
    }
    let cached = match entry.get_item(1)?.cast_into::<Layout>() {
        Ok(layout) => Cached::Layout(layout, entry.get_item(2)?),
        Err(_) => Cached::None,
    };
    Ok(Some((dsid, cached)))
}

/// `numpy.empty`, looked up once.
fn numpy_empty(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static EMPTY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    EMPTY
        .get_or_try_init(py, || {
            py.import("numpy")?.getattr("empty").map(Bound::unbind)
        })
        .map(|f| f.bind(py))
}

/// Reads `dset[sel]` into `out` (a new NumPy array when None) and returns it, given `entry`, the
/// entry of `_layouts` that `h5gds.read` keeps on the dataset (`_layout.serving`; its weak
/// reference names the DatasetID), where `sel` and `out` are of the kinds this module serves; else
/// None, having read nothing. No dict lookup nor
/// attribute read, here or in Python: they were a sixth of a row read's instructions.
#[pyfunction]
pub fn read_remembered<'py>(
    py: Python<'py>,
    entry: &Bound<'py, PyAny>,
    out: &Bound<'py, PyAny>,
    sel: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    crate::thread_end::guarded(|| {
        let Some((dsid, Cached::Layout(layout, dtype))) = entry_layout(entry)? else {
            return Ok(None);
        };
        // Closed (by its own close or its file's): h5py sets the id to 0, and the general path raises
        // ValueError. (`valid` would also ask HDF5 under h5py's lock, for identifiers closed behind
        // h5py's back, which a read-only file's unchanged bytes make no different to read.)
        if dsid.getattr(intern!(py, "id"))?.extract::<i64>()? == 0 {
            return Ok(None);
        }
        let layout = layout.get();
        let Some(selected) = hyperslab_of(sel, layout.shape()) else {
            return Ok(None);
        };
        let out = if out.is_none() {
            numpy_empty(py)?.call1((PyTuple::new(py, selected.shape())?, &dtype))?
        } else {
            out.clone()
        };
        let Ok(array) = out.cast::<PyUntypedArray>() else {
            return read_into_device_array(py, layout, &selected, out, &dtype);
        };
        let array_dtype = array.dtype();
        let same_dtype = array_dtype.is(&dtype) || array_dtype.as_any().eq(&dtype)?;
        let shape = selected.shape();
        let shape_matches = array.shape().len() == shape.len()
            && array
                .shape()
                .iter()
                .zip(shape)
                .all(|(&a, &s)| a as u64 == s);
        // SAFETY: `array` is a live NumPy array; its flags are read under the GIL.
        let writable = unsafe { (*array.as_array_ptr()).fields.flags } & NPY_ARRAY_WRITEABLE != 0;
        let writable_c_order = writable && array.is_c_contiguous();
        if !(same_dtype && shape_matches && writable_c_order) {
            return Ok(None);
        }
        // SAFETY: as above, the data pointer of a live array.
        let data = unsafe { (*array.as_array_ptr()).fields.data } as usize;
        let nbytes = array.len() * array_dtype.itemsize();
        let sel = selected.hyperslab();
        // SAFETY: `out` is a writable, C-contiguous array of `nbytes` bytes (checked above), kept
        // referenced here for the read; an array another reference can see cannot be resized.
        if unsafe { layout.read_host(py, &sel, data, nbytes) }? {
            Ok(Some(out))
        } else {
            Ok(None)
        }
    })
}

/// `out`'s device memory as its `__cuda_array_interface__` says, where it is of the kind the short
/// way serves (one `_arrays` would accept): the dataset's dtype (given as its `typestr`, as
/// `dtype.str` spells it; not bool, which the driver's path checks byte by byte), `shape`,
/// writable, C-contiguous, no mask, a stream to wait for that is not the forbidden 0; None for
/// anything else, which the general path reads or refuses with its message.
fn device_out<'py>(
    py: Python<'py>,
    out: &Bound<'py, PyAny>,
    dtype: &Bound<'py, PyAny>,
    shape: &[u64],
) -> Option<DeviceOut> {
    let interface = out
        .getattr(intern!(py, "__cuda_array_interface__"))
        .ok()?
        .cast_into::<PyDict>()
        .ok()?;
    let item = |key: &Bound<'py, pyo3::types::PyString>| -> Option<Bound<'py, PyAny>> {
        interface.get_item(key).ok().flatten()
    };
    let typestr: String = item(intern!(py, "typestr"))?.extract().ok()?;
    let expected: String = dtype.getattr(intern!(py, "str")).ok()?.extract().ok()?;
    if typestr != expected || typestr.contains('b') || typestr.contains('V') {
        return None;
    }
    let itemsize: usize = dtype
        .getattr(intern!(py, "itemsize"))
        .ok()?
        .extract()
        .ok()?;
    let got: Vec<u64> = item(intern!(py, "shape"))?.extract().ok()?;
    if got != shape {
        return None;
    }
    if item(intern!(py, "mask")).is_some_and(|m| !m.is_none()) {
        return None;
    }
    if let Some(strides) = item(intern!(py, "strides")).filter(|s| !s.is_none()) {
        let strides: Vec<i64> = strides.extract().ok()?;
        if strides.len() != shape.len() {
            return None;
        }
        let mut expected = itemsize as i64;
        for (&size, &stride) in shape.iter().rev().zip(strides.iter().rev()) {
            if size == 0 {
                break;
            }
            if size != 1 && stride != expected {
                return None;
            }
            expected *= size as i64;
        }
    }
    let (address, readonly): (u64, bool) = item(intern!(py, "data"))?.extract().ok()?;
    let version: i64 = match item(intern!(py, "version")) {
        Some(v) => v.extract().ok()?,
        None => 0,
    };
    // As `_arrays`: v3 names the stream to wait for (None: none); older versions name none, and
    // the legacy default stream (1) is waited for.
    // An explicit 0 is forbidden by the interface (the general path says so).
    let stream: u64 = if version >= 3 {
        match item(intern!(py, "stream")) {
            Some(s) if !s.is_none() => s.extract().ok().filter(|&s: &u64| s != 0)?,
            _ => 0,
        }
    } else {
        1
    };
    if readonly {
        return None;
    }
    let elements: u64 = shape.iter().product();
    let nbytes = usize::try_from(elements).ok()?.checked_mul(itemsize)?;
    Some(DeviceOut {
        address,
        nbytes,
        claimed_ordinal: None,
        stream,
        bools: false,
    })
}

/// The device half of [`read_remembered`]: `out` a device array with `__cuda_array_interface__`
/// that [`device_out`] accepts, read by the layout where it serves device reads
/// (`Layout::read_into_device`: the driver would stage the read anyway); else None, having read
/// nothing.
fn read_into_device_array<'py>(
    py: Python<'py>,
    layout: &Layout,
    selected: &Selected,
    out: Bound<'py, PyAny>,
    dtype: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let Some(device) = device_out(py, &out, dtype, selected.shape()) else {
        return Ok(None);
    };
    let sel = selected.hyperslab();
    let read = layout.read_into_device(py, &sel, &device, &Kept::default())?;
    Ok(read.then_some(out))
}
