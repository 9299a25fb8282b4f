//! `h5gds.read` in one native call (`_native.read`): the short way of a dataset whose layout is
//! remembered (`known_read`), else the general path's checks in Python (`_io._checked`, called
//! back) and the read (`io_call`, `gather_call`), in the same call.

use crate::known_read::read_known_layout;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// `h5gds.read` in one native call: the short way where `layouts` knows the dataset's layout and
/// `sel` and `out` are of the kinds it serves (`known_read::read_known_layout`), else the general path:
/// `general(dset, out, sel)` (Python: the arguments checked, the array converted; it raises their
/// errors) returns `(result, view, selection, rows)`, `rows` the first axis's length for a gather
/// (else None), and the read runs here (`io_call::read_dataset` / `gather_call::gather_dataset`).
/// Returns `result`. No Python test of the short way's kinds runs first: the short way declines
/// in the native code (issue 42: a Python pre-check cost a tenth of a 64 KiB row's read).
#[pyfunction]
pub fn read<'py>(
    py: Python<'py>,
    layouts: &Bound<'py, PyDict>,
    dset: &Bound<'py, PyAny>,
    out: &Bound<'py, PyAny>,
    sel: &Bound<'py, PyAny>,
    general: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    if let Some(known) = read_known_layout(py, layouts, dset, out, sel)? {
        return Ok(known);
    }
    let checked = general.call1((dset, out, sel))?;
    let (result, view, selection, rows): (Bound<PyAny>, Bound<PyAny>, Bound<PyAny>, Option<u64>) =
        checked.extract()?;
    match rows {
        None => crate::io_call::read_dataset(py, dset, view.extract()?, selection.extract()?)?,
        Some(rows) => crate::gather_call::gather_dataset(
            py,
            dset,
            view.extract()?,
            selection.extract()?,
            rows,
        )?,
    }
    Ok(result)
}
