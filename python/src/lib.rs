//! `h5gds._native`: the extension module of the h5gds Python package. It carries the `gds`
//! driver itself (the `h5gds` crate, linked in) and registers it into the HDF5 library h5py
//! loaded; the pure-Python part (python/h5gds/) does the argument handling around it.
#![deny(unsafe_op_in_unsafe_fn)]

mod collective;
mod device;
mod dlpack;
mod encode;
mod error;
mod gather_call;
mod hdf5;
mod io_call;
mod known_read;
mod layout;
mod thread_end;
mod tiles;

use h5gds::VfdSettings;
use h5gds_runtime::settings::{driver_settings, DevicePath};
use pyo3::exceptions::{PyOSError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyString};
use std::ffi::CString;

/// Registers the driver into the HDF5 that the loaded object `near` (one of h5py's extension
/// modules) is linked with. Returns that library's path, the driver's id (None when h5gds's driver
/// was already registered there, such as its plugin loaded through `HDF5_PLUGIN_PATH`), and the
/// library of another driver holding the name `gds` there, if one does (then h5gds's is not
/// registered). The caller holds h5py's lock.
#[pyfunction]
fn register_driver(near: &str) -> PyResult<(String, Option<i64>, Option<String>)> {
    let near = CString::new(near).map_err(|_| PyValueError::new_err("path contains a NUL byte"))?;
    let registration = h5gds::register_in_loaded_hdf5(&near).map_err(PyOSError::new_err)?;
    let library = h5gds_runtime::hdf5::primary_library().map_or(String::new(), |l| l.path.clone());
    Ok(match registration {
        h5gds::DriverRegistration::Registered(id) => (library, Some(id), None),
        h5gds::DriverRegistration::AlreadyRegistered => (library, None, None),
        h5gds::DriverRegistration::Another(other) => (library, None, Some(other)),
    })
}

/// The config string for keyword settings (`nthreads=8, compat_mode="off"`), validated by the
/// driver's own parser: an unknown key raises TypeError, a bad value ValueError, each naming the
/// setting and what it accepts.
#[pyfunction]
fn config_string(settings: &Bound<'_, PyDict>) -> PyResult<String> {
    let keys = || {
        driver_settings()
            .map(|(_, key)| key)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut items = Vec::new();
    for (key, value) in settings.iter() {
        let key: String = key.extract()?;
        let Some((spec, _)) = driver_settings().find(|(_, k)| *k == key) else {
            return Err(PyTypeError::new_err(format!(
                "unknown keyword argument '{key}' for driver=\"gds\": accepted keywords are {}",
                keys()
            )));
        };
        let bad = |shown: String| {
            PyValueError::new_err(format!(
                "invalid value {shown} for {key}: accepted values are {}",
                spec.accepted
            ))
        };
        let text = if value.is_instance_of::<PyBool>() {
            let text = if value.extract::<bool>()? {
                "on"
            } else {
                "off"
            };
            // Named as the caller wrote it (True), not as the config string spells it (on).
            if VfdSettings::from_sources(|_| None, Some(format!("{key}={text}").as_bytes()))
                .is_err()
            {
                return Err(bad(value.repr()?.to_string()));
            }
            text.to_string()
        } else if let Ok(number) = value.extract::<i128>() {
            // Python and NumPy integers (anything with __index__), never floats.
            number.to_string()
        } else if value.is_instance_of::<PyString>() {
            let text: String = value.extract()?;
            // A comma or NUL would smuggle another item into the string.
            if text.contains([',', '\0']) {
                return Err(bad(format!("{text:?}")));
            }
            text
        } else {
            return Err(bad(value.repr()?.to_string()));
        };
        items.push(format!("{key}={text}"));
    }
    let config = items.join(",");
    // Keys are known by now, so what the parser refuses is a value.
    VfdSettings::from_sources(|_| None, Some(config.as_bytes()))
        .map(|_| config)
        .map_err(|err| PyValueError::new_err(err.to_string()))
}

/// Selects the `gds` driver with a config string on a file access property list (h5py's
/// `PropFAID.id`). The caller holds h5py's lock.
#[pyfunction]
fn set_fapl(fapl: i64, config: &str) -> PyResult<()> {
    h5gds::set_fapl_driver(fapl, config).map_err(PyOSError::new_err)
}

/// What `h5gds info --json` prints, as JSON text; `plugin` is the library carrying the driver
/// (this extension module), and no exports are needed (import h5gds registers the driver).
#[pyfunction]
fn info_json(module_path: std::path::PathBuf) -> PyResult<String> {
    serde_json::to_string(&package_info(module_path)).map_err(|e| PyOSError::new_err(e.to_string()))
}

/// What `h5gds info` prints (`python -m h5gds info`), for this extension module as the plugin.
#[pyfunction]
fn info_text(module_path: std::path::PathBuf) -> String {
    h5gds_info::render(&package_info(module_path))
}

/// The report for the package: the extension module is the library carrying the driver.
fn package_info(module_path: std::path::PathBuf) -> h5gds_info::Info {
    let mut info = h5gds_info::gather(None);
    info.plugin = Some(module_path);
    info
}

/// Host memory from the process's pool of pinned staging buffers (`h5gds_runtime::pinned`), for
/// Python code that fills a host buffer on its way to a device array (a gather, copied up with
/// `device_copy` afterwards: from pinned memory the copy runs at the link's rate, 55 against 7.6
/// GB/s from pageable memory on the H200). `address` holds at least `nbytes` bytes while the
/// object lives; the buffer goes back to the pool with it.
#[pyclass(frozen, module = "h5gds._native")]
struct PinnedHost {
    _taken: std::sync::Mutex<h5gds_runtime::pinned::Taken>,
    #[pyo3(get)]
    address: usize,
    #[pyo3(get)]
    nbytes: usize,
}

#[pymethods]
impl PinnedHost {
    #[new]
    fn new(nbytes: usize) -> PinnedHost {
        let mut taken = h5gds_runtime::pinned::Taken::new(nbytes);
        PinnedHost {
            address: taken.as_mut_ptr() as usize,
            nbytes,
            _taken: std::sync::Mutex::new(taken),
        }
    }
}

/// Copies between the device array `array` (an `_arrays.ArrayView`, held for the call) and the
/// host buffer at `host` (as many bytes): into the device with `to_device`, else out of it, after
/// the producer's stream has finished; complete when this returns (see
/// `device::copy_with_host`). ValueError for memory that is not one CUDA allocation holding the
/// array; OSError where CUDA fails. The caller keeps the host buffer alive.
#[pyfunction]
fn device_copy(
    py: Python<'_>,
    array: io_call::ArrayArg<'_>,
    host: usize,
    to_device: bool,
) -> PyResult<()> {
    crate::thread_end::guarded(|| {
        let claimed_ordinal = array.device.as_ref().and_then(|(_, ordinal)| *ordinal);
        let (address, nbytes, stream) = (array.address, array.nbytes, array.stream);
        crate::thread_end::detached(py, || {
            device::copy_with_host(address, nbytes, claimed_ordinal, stream, host, to_device)
        })
        .map_err(device_error)
    })
}

/// The number of CUDA devices this process sees (`h5gds.local_device`); OSError where CUDA does
/// not work or sees no device.
#[pyfunction]
fn device_count() -> PyResult<i32> {
    device::device_count().map_err(device_error)
}

pub(crate) fn device_error(e: device::DeviceError) -> PyErr {
    match e {
        device::DeviceError::Argument(message) => PyValueError::new_err(message),
        device::DeviceError::Failed(message) => PyOSError::new_err(message),
    }
}

/// How many compressed chunks h5gds has decoded on this process's host threads (all reads, all
/// threads): the tests' proof that a read decodes each chunk it touches once.
#[pyfunction]
fn chunks_decoded() -> u64 {
    h5gds_chunk_codec::chunks_decoded()
}

/// How many times this process has loaded the driver's settings from the environment
/// (`h5gds::VfdSettings::load`): the tests' proof that a native call loads them at most once, and
/// a small read not at all.
#[pyfunction]
fn settings_loads() -> usize {
    VfdSettings::loads_so_far()
}

/// Whether `H5GDS_USE_VFD_GDS=0` asks for the staged path: Python's `from_file`/`to_file` then
/// open files with sec2. Every setting is checked first, as array-io checks them at its opens
/// (`h5gds_engine::opening`): a refused value raises `ValueError` naming the setting and what it
/// accepts.
#[pyfunction]
fn staged_by_settings() -> PyResult<bool> {
    let path = h5gds_engine::opening(None).map_err(error::engine_error)?;
    Ok(path == DevicePath::Staged)
}

/// Whether `path` is a URL the driver reads remotely (`h5gds::is_url`: the one list of schemes).
#[pyfunction]
fn is_url(path: &str) -> bool {
    h5gds::is_url(path)
}

/// Refuses a write to `path` where it names a remote file (a URL: h5gds reads those only,
/// `h5gds_engine::opening`), as array-io refuses it: OSError (errno 30, EROFS) saying so.
#[pyfunction]
fn check_writable(path: &str) -> PyResult<()> {
    match h5gds_engine::opening(Some(path)) {
        Err(e) if e.facts().errno.is_some() => {
            let why = (e.facts().errno, e.facts().detail.clone(), path.to_owned());
            Err(PyOSError::new_err(why))
        }
        done => done.map(drop).map_err(error::engine_error),
    }
}

/// Makes the driver and the GPU codec path load libcufile and libnvcomp from these files (NVIDIA's
/// pip wheels in site-packages) before searching by soname; None leaves a library to the soname.
#[pyfunction]
#[pyo3(signature = (cufile=None, nvcomp=None))]
fn prefer_library_files(cufile: Option<std::path::PathBuf>, nvcomp: Option<std::path::PathBuf>) {
    h5gds_runtime::libraries::prefer_files(cufile, nvcomp);
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(prefer_library_files, m)?)?;
    m.add_function(wrap_pyfunction!(register_driver, m)?)?;
    m.add_function(wrap_pyfunction!(config_string, m)?)?;
    m.add_function(wrap_pyfunction!(set_fapl, m)?)?;
    m.add_function(wrap_pyfunction!(info_json, m)?)?;
    m.add_function(wrap_pyfunction!(info_text, m)?)?;
    m.add_function(wrap_pyfunction!(io_call::read_dataset, m)?)?;
    m.add_function(wrap_pyfunction!(io_call::write_dataset, m)?)?;
    m.add_class::<layout::Layout>()?;
    m.add_function(wrap_pyfunction!(known_read::read_remembered, m)?)?;
    m.add_function(wrap_pyfunction!(staged_by_settings, m)?)?;
    m.add_function(wrap_pyfunction!(check_writable, m)?)?;
    m.add_function(wrap_pyfunction!(is_url, m)?)?;
    m.add_function(wrap_pyfunction!(chunks_decoded, m)?)?;
    m.add_function(wrap_pyfunction!(settings_loads, m)?)?;
    m.add_function(wrap_pyfunction!(device_count, m)?)?;
    m.add_function(wrap_pyfunction!(dlpack::dlpack_tensor, m)?)?;
    m.add_function(wrap_pyfunction!(encode::encode_write_chunks, m)?)?;
    m.add_function(wrap_pyfunction!(device_copy, m)?)?;
    m.add_class::<PinnedHost>()?;
    m.add_function(wrap_pyfunction!(gather_call::gather_dataset, m)?)?;
    tiles::register(m)?;
    m.add_function(wrap_pyfunction!(collective::collective_agree, m)?)?;
    m.add_function(wrap_pyfunction!(collective::collective_to_file, m)?)?;
    m.add("DRIVER_NAME", "gds")?;
    m.add("DRIVER_VALUE", h5gds::DRIVER_VALUE)?;
    m.add(
        "SETTING_KEYS",
        driver_settings().map(|(_, key)| key).collect::<Vec<_>>(),
    )?;
    Ok(())
}
