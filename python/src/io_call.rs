//! `h5gds.read` and `h5gds.write` in one native call each (`read_dataset`, `write_dataset`),
//! once Python has parsed the selection and converted the array: the call holds the dataset, the
//! array's owner and the memory type for all of its native part, and hands the array to the
//! engine's dataset handle (`h5gds_engine::Dataset`), which takes the way its policy decides: a
//! read-only file's dataset through its layout with no HDF5 call (`layout`, resolved and
//! remembered in `_layout` at its first read), chunks decoded by h5gds on the host or the GPU,
//! device memory straight through the driver or staged, one H5Dread or H5Dwrite. h5py's lock
//! (`phil`) is taken here, for the HDF5 calls only.

use crate::device::with_device_memory;
use crate::device_error;
use crate::error::engine_error;
use crate::hdf5::{self, Hid};
use crate::known_read::{cached_layout, Cached};
use crate::layout::{DeviceOut, Held, Layout};
use h5gds_chunk_codec::Hyperslab;
use h5gds_engine::{Dataset, DeviceMemory, Error as EngineError, Hdf5Lock, Kept, Selection as Sel};
use pyo3::exceptions::PyOSError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyDict;
use std::cell::OnceCell;

/// A hyperslab Python parsed (`_selection.Hyperslab`).
#[derive(FromPyObject)]
pub struct Selection {
    #[pyo3(attribute)]
    pub(crate) start: Vec<u64>,
    #[pyo3(attribute)]
    pub(crate) step: Vec<u64>,
    #[pyo3(attribute)]
    pub(crate) count: Vec<u64>,
}

impl Selection {
    /// The selection as the engine takes it.
    pub(crate) fn slab(&self) -> Hyperslab<'_> {
        Hyperslab {
            start: &self.start,
            step: &self.step,
            count: &self.count,
        }
    }
}

/// An array Python converted and checked against the selection (`_arrays.ArrayView`).
#[derive(FromPyObject)]
pub struct ArrayArg<'py> {
    #[pyo3(attribute)]
    pub(crate) address: u64,
    #[pyo3(attribute)]
    pub(crate) nbytes: usize,
    #[pyo3(attribute)]
    pub(crate) dtype: Bound<'py, PyAny>,
    /// None for host memory, else ("cuda", the ordinal the array claims, if it claims one).
    #[pyo3(attribute)]
    pub(crate) device: Option<(String, Option<i32>)>,
    /// The stream whose work finishes before bytes move (0: none).
    #[pyo3(attribute)]
    pub(crate) stream: u64,
    /// What keeps the memory alive, held by the call while its bytes move.
    #[pyo3(attribute("owner"))]
    _owner: Bound<'py, PyAny>,
}

impl ArrayArg<'_> {
    /// Bool elements: a byte other than 0 or 1 is refused on its way to device memory.
    pub(crate) fn bools(&self) -> PyResult<bool> {
        let py = self.dtype.py();
        let kind = self
            .dtype
            .getattr(intern!(py, "base"))?
            .getattr(intern!(py, "kind"))?;
        Ok(kind.extract::<String>()? == "b")
    }
}

/// Reads `sel` of the h5py dataset `dset` into the array `out`; complete when this returns.
#[pyfunction]
pub fn read_dataset<'py>(
    py: Python<'py>,
    dset: &Bound<'py, PyAny>,
    out: ArrayArg<'py>,
    sel: Selection,
) -> PyResult<()> {
    crate::thread_end::guarded(|| Call::new(false, dset, out, sel)?.run(py))
}

/// Writes the array `array` into `sel` of the h5py dataset `dset`.
#[pyfunction]
pub fn write_dataset<'py>(
    py: Python<'py>,
    dset: &Bound<'py, PyAny>,
    array: ArrayArg<'py>,
    sel: Selection,
) -> PyResult<()> {
    crate::thread_end::guarded(|| Call::new(true, dset, array, sel)?.run(py))
}

/// A dataset and the NumPy dtype its elements move as, their h5py objects held (which keep their
/// HDF5 ids open).
pub struct Target<'py> {
    /// The dataset's h5py DatasetID.
    dsid: Bound<'py, PyAny>,
    pub(crate) dataset: Hid,
    dtype: Bound<'py, PyAny>,
    /// HDF5's memory type for `dtype` (an h5py TypeID and its id), made where HDF5 is asked:
    /// reads a layout serves need none.
    mem_type: std::cell::OnceCell<(Bound<'py, PyAny>, Hid)>,
}

impl<'py> Target<'py> {
    pub(crate) fn new(
        dset: &Bound<'py, PyAny>,
        dtype: &Bound<'py, PyAny>,
    ) -> PyResult<Target<'py>> {
        let py = dset.py();
        // `Dataset.id` takes h5py's lock; the attribute it returns is read here.
        let dsid = dset
            .getattr(intern!(py, "_id"))
            .or_else(|_| dset.getattr(intern!(py, "id")))?;
        Ok(Target {
            dataset: dsid.getattr(intern!(py, "id"))?.extract()?,
            dsid,
            dtype: dtype.clone(),
            mem_type: std::cell::OnceCell::new(),
        })
    }

    /// HDF5's memory type for the dtype (`h5py.h5t.py_create`). The caller holds h5py's lock.
    pub(crate) fn mem_type(&self) -> PyResult<Hid> {
        if let Some((_, id)) = self.mem_type.get() {
            return Ok(*id);
        }
        let py = self.dtype.py();
        static PY_CREATE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let py_create = PY_CREATE.get_or_try_init(py, || {
            py.import("h5py.h5t")?
                .getattr("py_create")
                .map(Bound::unbind)
        })?;
        let made = py_create.bind(py).call1((&self.dtype,))?;
        let id: Hid = made.getattr(intern!(py, "id"))?.extract()?;
        let _ = self.mem_type.set((made, id));
        Ok(id)
    }

    /// The engine's handle of the dataset, its elements moved as `dtype`, keeping what `layout`
    /// (from [`Target::layout`]) keeps of it: a read it serves needs no HDF5 call.
    pub(crate) fn handle<'l>(
        &'l self,
        py: Python<'py>,
        layout: Option<&'l Bound<'py, Layout>>,
        make_mem_type: &'l dyn Fn() -> Result<Hid, EngineError>,
    ) -> PyResult<Dataset<'l, H5py<'py>>> {
        let lock = H5py {
            py,
            phil: OnceCell::new(),
        };
        let api = hdf5::api().map_err(PyOSError::new_err)?;
        let element: usize = self.dtype.getattr(intern!(py, "itemsize"))?.extract()?;
        let handle = Dataset::made_as(api, self.dataset, make_mem_type, element, lock);
        Ok(match layout {
            Some(layout) => handle.keeping(layout.get().kept()),
            None => handle,
        })
    }

    /// HDF5's memory type for the dtype as the engine's handle makes it (under h5py's lock).
    pub(crate) fn engine_mem_type(&self) -> Result<Hid, EngineError> {
        let made = self.mem_type();
        made.map_err(|e| EngineError::invalid(format!("no HDF5 type for the array's dtype: {e}")))
    }

    /// The dataset's layout for reads into `dtype` as `_layout` remembers it for its DatasetID;
    /// resolved now (under h5py's lock) and remembered there at its first read.
    pub(crate) fn layout(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, Layout>>> {
        let dtype = &self.dtype;
        let (layouts, remember) = layout_cache(py)?;
        match cached_layout(layouts, &self.dsid)? {
            Cached::Layout(layout, _) => return Ok(Some(layout)),
            Cached::None => return Ok(None),
            Cached::Unknown => {}
        }
        let element: usize = dtype.getattr(intern!(py, "itemsize"))?.extract()?;
        let found = {
            let _phil = Phil::acquire(py)?;
            Layout::resolve(self.dataset, self.mem_type()?, element)?
        };
        let found = found.map(|layout| Bound::new(py, layout)).transpose()?;
        remember.call1((&self.dsid, found.as_ref(), dtype))?;
        Ok(found)
    }
}

/// One read or write, its Python objects held.
struct Call<'py> {
    write: bool,
    target: Target<'py>,
    dataset: Hid,
    array: ArrayArg<'py>,
    sel: Selection,
}

impl<'py> Call<'py> {
    fn new(
        write: bool,
        dset: &Bound<'py, PyAny>,
        array: ArrayArg<'py>,
        sel: Selection,
    ) -> PyResult<Call<'py>> {
        let target = Target::new(dset, &array.dtype)?;
        Ok(Call {
            write,
            dataset: target.dataset,
            target,
            array,
            sel,
        })
    }

    fn run(self, py: Python<'py>) -> PyResult<()> {
        if let (false, None) = (self.write, &self.array.device) {
            return self.read_host(py);
        }
        // A read-only file's dataset keeps its layout: a read it serves needs no HDF5 call, so
        // is tried without h5py's lock (threads reading tiles into device arrays overlap), with
        // the call's settings, which the handle then shares.
        let layout = match self.write {
            false => self.target.layout(py)?,
            true => None,
        };
        let call = Kept::default();
        if let (Some(layout), Some((_, claimed))) = (&layout, &self.array.device) {
            let out = DeviceOut {
                address: self.array.address,
                nbytes: self.array.nbytes,
                claimed_ordinal: *claimed,
                stream: self.array.stream,
                bools: self.array.bools()?,
            };
            if layout
                .get()
                .read_into_device(py, &self.sel.slab(), &out, &call)?
            {
                return Ok(());
            }
        }
        let _phil = Phil::acquire(py)?;
        match &self.array.device {
            None => self.write_host(py),
            Some((_, claimed)) => {
                let layout = layout.as_ref().map(|l| l.get());
                self.device(py, *claimed, layout, &call)
            }
        }
    }

    /// A read into a host array through the engine's dataset handle (`h5gds_engine::Dataset`,
    /// the way `policy::host_read` takes, as array-io's).
    fn read_host(&self, py: Python<'py>) -> PyResult<()> {
        let sel = Sel::Slab(self.sel.slab());
        // SAFETY: `owner` (held by this call) keeps the checked, writable, C-contiguous host
        // array of `nbytes` at `address` alive; each way checks its size against the selection.
        let out = unsafe {
            std::slice::from_raw_parts_mut(self.array.address as *mut u8, self.array.nbytes)
        };
        let layout = self.target.layout(py)?;
        let make = || self.target.engine_mem_type();
        let handle = self.target.handle(py, layout.as_ref(), &make)?;
        handle.read(sel, out).map_err(engine_error)
    }

    /// A write from a host array through the engine's dataset handle: one H5Dwrite. The caller
    /// holds h5py's lock.
    fn write_host(&self, py: Python<'py>) -> PyResult<()> {
        let make = || self.target.engine_mem_type();
        let handle = self.target.handle(py, None, &make)?;
        let sel = self.sel.slab();
        // SAFETY: `owner` (held by this call) keeps the checked, C-contiguous host array of
        // `nbytes` at `address` alive; the handle checks its size against the selection.
        let data = unsafe {
            std::slice::from_raw_parts(self.array.address as *const u8, self.array.nbytes)
        };
        handle.write(sel, data).map_err(engine_error)
    }

    /// A read into or a write from a device array through the engine's dataset handle (as
    /// array-io's), keeping what `layout` keeps of a read-only file's dataset, once CUDA has
    /// checked the memory and the producer's stream has finished; the GIL released. The caller
    /// holds h5py's lock.
    fn device(
        &self,
        py: Python<'py>,
        claimed_ordinal: Option<i32>,
        layout: Option<&Layout>,
        call: &Kept,
    ) -> PyResult<()> {
        let (address, nbytes, stream) = (self.array.address, self.array.nbytes, self.array.stream);
        let elements: u64 = self.sel.count.iter().product();
        if elements == 0 {
            return Ok(()); // nothing to move
        }
        let api = hdf5::api().map_err(PyOSError::new_err)?;
        let (dataset, mem_type, bools) =
            (self.dataset, self.target.mem_type()?, self.array.bools()?);
        let sel = self.sel.slab();
        let write = self.write;
        let role = if write { "array" } else { "out" };
        crate::thread_end::detached(py, || {
            with_device_memory(
                role,
                (address, nbytes),
                claimed_ordinal,
                stream,
                |context| {
                    let memory = DeviceMemory::in_context(address, nbytes, context, bools);
                    let element = nbytes / elements as usize;
                    let handle =
                        Dataset::new(api, dataset, mem_type, element, Held).with_settings_of(call);
                    let handle = match layout {
                        Some(layout) => handle.keeping(layout.kept()),
                        None => handle,
                    };
                    Ok(match write {
                        true => handle.write(sel, memory),
                        false => handle.read(Sel::Slab(sel), memory),
                    }?)
                },
            )
        })
        .map_err(device_error)
    }
}

/// h5py's lock as the engine's handle takes it: at the first HDF5 call of a request, held to its
/// end (as h5py holds it around its own); long work runs without the GIL.
pub struct H5py<'py> {
    py: Python<'py>,
    phil: OnceCell<Phil<'py>>,
}

impl Hdf5Lock for H5py<'_> {
    fn enter(&self) -> Result<(), h5gds_engine::Error> {
        if self.phil.get().is_none() {
            let phil = Phil::acquire(self.py);
            let phil = phil.map_err(|e| EngineError::hdf5(format!("taking h5py's lock: {e}")))?;
            let _ = self.phil.set(phil);
        }
        Ok(())
    }

    fn unlocked<R: Send>(&self, work: impl FnOnce() -> R + Send) -> R {
        crate::thread_end::detached(self.py, work)
    }
}

/// Where `h5gds._layout` remembers layouts per DatasetID: its `_layouts` (never rebound) and its
/// `remember`, looked up once.
fn layout_cache(py: Python<'_>) -> PyResult<(&Bound<'_, PyDict>, &Bound<'_, PyAny>)> {
    static CACHE: PyOnceLock<(Py<PyDict>, Py<PyAny>)> = PyOnceLock::new();
    let (layouts, remember) = CACHE.get_or_try_init(py, || {
        let module = py.import("h5gds._layout")?;
        let layouts = module.getattr("_layouts")?.cast_into::<PyDict>()?;
        Ok::<_, PyErr>((layouts.unbind(), module.getattr("remember")?.unbind()))
    })?;
    Ok((layouts.bind(py), remember.bind(py)))
}

/// h5py's lock (`h5py._objects.phil`), held while this guard lives: every call into h5py's HDF5
/// is made under it, as h5py makes its own.
pub struct Phil<'py>(Bound<'py, PyAny>);

impl<'py> Phil<'py> {
    pub fn acquire(py: Python<'py>) -> PyResult<Phil<'py>> {
        static PHIL: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let lock = PHIL
            .get_or_try_init(py, || {
                py.import("h5py._objects")?
                    .getattr("phil")
                    .map(Bound::unbind)
            })?
            .bind(py)
            .clone();
        lock.call_method0(intern!(py, "acquire"))?;
        Ok(Phil(lock))
    }
}

impl Drop for Phil<'_> {
    fn drop(&mut self) {
        let py = self.0.py();
        if let Err(err) = self.0.call_method0(intern!(py, "release")) {
            err.write_unraisable(py, Some(&self.0));
        }
    }
}
