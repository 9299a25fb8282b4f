//! The collective calls of `h5gds._collective` (`comm=`) over the engine's protocol and
//! agreements (`h5gds_engine::collective`): an mpi4py communicator as the engine's
//! `Communicator`, a `_collective._Tile` (its checks, rank 0's file by h5py, its memory) as the
//! engine's `Writer`, and the engine's one error raised as the exception of its kind.

use crate::device::{self, DeviceError};
use crate::io_call::{ArrayArg, Phil};
use crate::tiles::{decomposition, Grid};
use h5gds_engine::collective::{self as engine, Tile, TileFile, Writer};
use h5gds_engine::{Error, ErrorKind as Kind};
use pyo3::exceptions::{PyOSError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use std::cell::RefCell;
use std::path::{Path, PathBuf};

/// What `_Tile.describe` returns: the target, the dataset, the element type, its size, the shape.
type Described = (PathBuf, String, String, usize, Vec<u64>);

/// An mpi4py communicator as the engine's: its pickled `allgather` of bytes, with the GIL held.
struct Mpi4py<'py> {
    comm: Bound<'py, PyAny>,
    rank: usize,
    size: usize,
}

impl<'py> Mpi4py<'py> {
    fn new(comm: Bound<'py, PyAny>) -> PyResult<Mpi4py<'py>> {
        let rank = comm.call_method0("Get_rank")?.extract()?;
        let size = comm.call_method0("Get_size")?.extract()?;
        Ok(Mpi4py { comm, rank, size })
    }
}

impl engine::Communicator for Mpi4py<'_> {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn all_gather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>, String> {
        let py = self.comm.py();
        let all = self
            .comm
            .call_method1("allgather", (PyBytes::new(py, mine),));
        let bytes = |m: PyResult<Bound<'_, PyAny>>| -> PyResult<Vec<u8>> {
            Ok(m?.cast_into::<PyBytes>()?.as_bytes().to_vec())
        };
        all.and_then(|all| all.try_iter()?.map(bytes).collect())
            .map_err(|e| format!("mpi4py's allgather: {e}"))
    }
}

/// A Python exception as one rank's failure, its kind from its class: ValueError the caller's
/// argument, TypeError an element type, OSError the storage (with its errno), anything else a
/// failure of HDF5 (h5py's RuntimeError) or of the rank's own code.
fn failure(py: Python<'_>, err: &PyErr) -> Error {
    let value = err.value(py);
    let message = value
        .str()
        .map_or_else(|_| err.to_string(), |s| s.to_string());
    let kind = if err.is_instance_of::<PyValueError>(py) {
        Kind::InvalidArgument
    } else if err.is_instance_of::<PyTypeError>(py) {
        Kind::Unsupported
    } else if err.is_instance_of::<PyOSError>(py) {
        Kind::Io
    } else {
        Kind::Hdf5
    };
    let errno = value.getattr("errno").ok().and_then(|e| e.extract().ok());
    Error::new(kind, message).with_errno(errno.filter(|_| kind == Kind::Io))
}

/// The engine's error as the exception of its kind (the kind every failed rank shares):
/// ValueError, TypeError, OSError with the shared errno, RuntimeError; where the ranks' kinds
/// differ, `h5gds.CollectiveError`. Its `failures` map each failed rank to its cause; this rank's
/// own exception (`mine`) is its cause.
fn raised(py: Python<'_>, e: Error, mine: Option<PyErr>) -> PyErr {
    let text = e.to_string();
    let failures = PyDict::new(py);
    for (rank, message) in e.failed_ranks() {
        let _ = failures.set_item(rank, message);
    }
    let err = match (e.kind(), e.facts().errno) {
        (Kind::InvalidArgument | Kind::InvalidSetting, _) => PyValueError::new_err(text),
        (Kind::Unsupported, _) => PyTypeError::new_err(text),
        (Kind::Io, Some(errno)) => PyOSError::new_err((errno, text)),
        (Kind::Io, None) => PyOSError::new_err(text),
        (Kind::Collective, _) => py
            .import("h5gds._collective")
            .and_then(|m| m.getattr("CollectiveError")?.call1((&text, &failures)))
            .map_or_else(|err| err, PyErr::from_value),
        _ => PyRuntimeError::new_err(text),
    };
    let _ = err.value(py).setattr("failures", failures);
    err.set_cause(py, mine);
    err
}

/// Every rank's agreement on a step's outcome (`error`: this rank's exception, or None): returns
/// on every rank where no rank failed, else raises on every rank the same exception, naming each
/// failed rank and its cause.
#[pyfunction]
pub fn collective_agree(
    py: Python<'_>,
    comm: Bound<'_, PyAny>,
    op: &str,
    error: Option<Bound<'_, PyAny>>,
) -> PyResult<()> {
    let comm = Mpi4py::new(comm)?;
    let mine = error.map(PyErr::from_value);
    let outcome = mine.as_ref().map_or(Ok(()), |e| Err(failure(py, e)));
    engine::agree(&comm, op, outcome).map_err(|e| raised(py, e, mine))
}

/// The collective write of this rank's tile, `tile` (a `_collective._Tile`), under `grid` (None:
/// blocks of the leading axis): the engine's protocol over `comm`.
#[pyfunction]
pub fn collective_to_file(
    py: Python<'_>,
    comm: Bound<'_, PyAny>,
    tile: Bound<'_, PyAny>,
    grid: Grid,
) -> PyResult<()> {
    let comm = Mpi4py::new(comm)?;
    let writer = Face {
        tile,
        mine: RefCell::new(None),
    };
    engine::write(&comm, &writer, &decomposition(grid))
        .map_err(|e| raised(py, e, writer.mine.take()))
}

/// A `_collective._Tile` as the engine's `Writer`; the last exception it raised kept as the
/// cause of the collective error.
struct Face<'py> {
    tile: Bound<'py, PyAny>,
    mine: RefCell<Option<PyErr>>,
}

impl Face<'_> {
    fn failed(&self, err: PyErr) -> Error {
        let failure = failure(self.tile.py(), &err);
        *self.mine.borrow_mut() = Some(err);
        failure
    }
}

impl Writer for Face<'_> {
    fn describe(&self) -> Result<Tile, Error> {
        let described = self.tile.call_method0("describe");
        let described = described.and_then(|d| d.extract::<Described>());
        let (path, dataset, element, item, shape) = described.map_err(|e| self.failed(e))?;
        Ok(Tile {
            path,
            dataset,
            element,
            item,
            shape,
        })
    }

    fn create(&self, tmp: &Path, dataset: &str, shape: &[u64]) -> Result<Option<u64>, Error> {
        let args = (tmp.to_path_buf(), dataset, shape.to_vec());
        let created = self.tile.call_method1("create", args);
        created
            .and_then(|o| o.extract())
            .map_err(|e| self.failed(e))
    }

    fn write(&self, to: &TileFile) -> Result<(), Error> {
        let py = self.tile.py();
        // The access list held (h5py closes its id when the object goes) until the file is closed.
        let access = self.tile.call_method0("access").and_then(|a| a.extract());
        let (fapl, view, direct): (Bound<'_, PyAny>, Bound<'_, PyAny>, bool) =
            access.map_err(|e| self.failed(e))?;
        let fapl_id = fapl.getattr("id").and_then(|id| id.extract::<i64>());
        let fapl_id = fapl_id.map_err(|e| self.failed(e))?;
        let tile: ArrayArg<'_> = view.extract().map_err(|e| self.failed(e))?;
        let (address, nbytes, stream) = (tile.address, tile.nbytes, tile.stream);
        let api = crate::hdf5::api().map_err(Error::hdf5)?;
        let claimed = tile.device.as_ref().map(|(_, ordinal)| *ordinal);
        let _phil = Phil::acquire(py).map_err(|e| self.failed(e))?;
        crate::thread_end::detached(py, || match claimed {
            // SAFETY: host memory of `nbytes` bytes, which the caller keeps alive.
            None => unsafe { to.write_direct(api, (fapl_id, nbytes as u64), address) },
            Some(claimed) => {
                let (tile, device) = ((address, nbytes), (claimed, stream));
                device::write_tile(to, (api, fapl_id), tile, device, direct).map_err(|e| match e {
                    DeviceError::Argument(m) => Error::invalid(device_text(m)),
                    DeviceError::Failed(m) => Error::new(Kind::Io, device_text(m)),
                })
            }
        })
    }
}

fn device_text(m: String) -> String {
    format!("writing the tile from device memory: {m}")
}
