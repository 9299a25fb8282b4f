//! The native calls of a collective `to_file` (`python/h5gds/_collective.py`), over the engine's
//! shared steps (`h5gds_engine::collective`): the description each rank sends (mpi4py carries the
//! bytes), the plan every rank derives from all of them, the temporary name and the finish, and
//! one rank's tile written through the file's driver in h5py's HDF5. Errors as the package words
//! them. The caller holds h5py's lock.

use crate::device::{self, DeviceError};
use crate::io_call::ArrayArg;
use crate::tiles::{self, Grid};
use h5gds_engine::collective::FileStepError;
use h5gds_engine::collective::{self as engine, Description, DriverFile, DriverFileError, Field};
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use std::ffi::{CString, OsString};
use std::path::PathBuf;

/// What this rank sends the others: it writes its tile of `shape` and `dtype` (its `str`) as
/// `dataset` of the file at `path`, split by `grid` (None: blocks of the leading axis).
#[pyfunction]
pub fn collective_description<'py>(
    py: Python<'py>,
    path: PathBuf,
    dataset: String,
    dtype: String,
    grid: Grid,
    shape: Vec<u64>,
) -> PyResult<Bound<'py, PyBytes>> {
    let (path, decomposition) = (path.to_string_lossy().into(), tiles::decomposition(grid));
    let d = Description::new(path, dataset, dtype, &decomposition, shape);
    Ok(PyBytes::new(
        py,
        &d.map_err(|e| PyValueError::new_err(e.to_string()))?
            .encode(),
    ))
}

/// The global shape and every rank's start from every rank's description (in rank order): a rank
/// writing another file, dataset, dtype or decomposition than rank 0 is an invalid decomposition
/// naming it, then the tiles are checked as `tiles_write_boxes` checks them.
#[pyfunction]
pub fn collective_plan(
    py: Python<'_>,
    descriptions: Vec<Vec<u8>>,
    grid: Grid,
) -> PyResult<(Vec<u64>, Vec<Vec<u64>>)> {
    let invalid =
        |reason: String| PyValueError::new_err(format!("invalid decomposition: {reason}"));
    let all = engine::decode_all(&descriptions).map_err(invalid)?;
    if let Some((r, field)) = engine::disagreement(&all) {
        let (d, first) = (&all[r], &all[0]);
        let repr = |p: &str| PyString::new(py, p).repr();
        let dtype = |s: &str| py.import("numpy")?.call_method1("dtype", (s,))?.str();
        return Err(invalid(match field {
            Field::File | Field::Dataset => format!(
                "rank {r} writes {}:{}, rank 0 {}:{}",
                repr(&d.path)?,
                d.dataset,
                repr(&first.path)?,
                first.dataset
            ),
            Field::Element => format!(
                "rank {r} has a tile of {}, rank 0 of {}",
                dtype(&d.element)?,
                dtype(&first.element)?
            ),
            Field::Decomposition => format!("rank {r} uses another decomposition than rank 0"),
        }));
    }
    tiles::tiles_write_boxes(all.into_iter().map(|d| d.claim.shape).collect(), grid)
}

/// OSError (of the errno's class) for a failed file-system step.
fn step_error(e: FileStepError) -> PyErr {
    let text = format!("{} {}: {}", e.op, e.path.display(), e.source);
    match e.source.raw_os_error() {
        Some(errno) => PyOSError::new_err((errno, text)),
        None => PyOSError::new_err(text),
    }
}

/// The temporary name rank 0 creates the file under, next to the target `path`.
#[pyfunction]
pub fn collective_temporary_path(path: PathBuf) -> PyResult<OsString> {
    engine::temporary_path(&path)
        .map(PathBuf::into_os_string)
        .map_err(step_error)
}

/// Rank 0, once the writes are agreed: `tmp` renamed over `path` when every rank `written` (removed
/// where the rename fails), else removed.
#[pyfunction]
pub fn collective_finish(tmp: PathBuf, path: PathBuf, written: bool) -> PyResult<()> {
    engine::finish(&tmp, &path, written).map_err(step_error)
}

/// Writes this rank's tile `tile` (an `_arrays.ArrayView`, held for the call), the box at
/// `start` of shape `count` of the dataset of `shape` stored from byte `offset` of the file `tmp`
/// rank 0 created, through the driver the access list `fapl` selects (`direct`: `gds`, which
/// takes device pointers; else sec2, a device tile staged through pinned memory). The file is
/// opened with HDF5's driver API (`H5FDopen`), its end of address set to `end`, and closed
/// before this returns; the bytes move with the GIL released.
#[pyfunction]
pub fn collective_write_tile(
    py: Python<'_>,
    file: (Vec<u8>, i64),
    place: (u64, u64),
    boxed: (Vec<u64>, Vec<u64>, Vec<u64>),
    tile: ArrayArg<'_>,
    direct: bool,
) -> PyResult<()> {
    let ((tmp, fapl), (offset, end), (start, count, shape)) = (file, place, boxed);
    let item = tile.dtype.getattr("itemsize")?.extract::<usize>()?;
    let (address, nbytes, stream) = (tile.address, tile.nbytes, tile.stream);
    // The runs lie inside the tile where its box holds its bytes.
    if count.iter().product::<u64>() * item as u64 != nbytes as u64 {
        let text = format!("the tile's {nbytes} bytes are not its box of shape {count:?}");
        return Err(PyValueError::new_err(text));
    }
    let runs = tiles::tile_runs(start, count, &shape, offset, item as u64)?;
    let opening =
        |e: String| PyOSError::new_err(format!("opening the file for the tile's bytes: {e}"));
    let name = CString::new(tmp).map_err(|_| opening("the path contains a NUL byte".into()))?;
    let api = crate::hdf5::api().map_err(opening)?;
    let claimed = tile.device.as_ref().map(|(_, ordinal)| *ordinal);
    let in_file = |e: DriverFileError| PyOSError::new_err(format!("{}: {}", e.op, e.cause()));
    let device = |e: DeviceError| match e {
        DeviceError::Argument(m) => PyValueError::new_err(format!("{DEVICE}: {m}")),
        DeviceError::Failed(m) => PyOSError::new_err(format!("{DEVICE}: {m}")),
    };
    py.detach(|| {
        let file = DriverFile::open(api, &name, fapl, end).map_err(in_file)?;
        match claimed {
            // SAFETY: every run lies inside the tile (checked above), host memory the caller
            // keeps alive.
            None => unsafe { engine::write_runs(&file, &runs, address) }.map_err(in_file)?,
            Some(claimed) => device::write_tile(
                (&file, &runs),
                (address, nbytes, item),
                (claimed, stream),
                direct,
            )
            .map_err(device)?,
        }
        file.close().map_err(in_file)
    })
}

const DEVICE: &str = "writing the tile from device memory";
