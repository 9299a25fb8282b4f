//! The HDF5 calls that must stay raw, for every Rust program of the workspace: array-io itself,
//! the benchmarks behind `h5gds bench`, the CLI and the test programs. Everything else uses
//! hdf5-metno's high-level API, whose objects (`File`, `Dataset`, `Dataspace`, `FileAccess`)
//! these functions take and return.
//!
//! Raw here: file access lists selecting a driver hdf5-metno does not know (`gds`, by name for
//! the plugin or by id for the in-process class) and files opened with them (hdf5-metno's
//! `FileBuilder` rebuilds the list and rejects unknown drivers); driver registration and lookup;
//! the plugin search path (dataset transfers are the engine's, `crate::transfer`). Every call runs under hdf5-metno's library lock, through
//! the table of the HDF5 linked into the program ([`linked_hdf5`], from the one declaration of
//! HDF5's functions in `h5gds_runtime::hdf5::api`).
//!
//! Why a module of array-io and not a crate of its own: array-io is the workspace's HDF5 layer
//! (it links hdf5-metno and registers the driver), and every other user already needs either
//! array-io or nothing else from HDF5, so one module keeps one lock discipline and one error
//! style without another crate to version. Code that runs inside another program's HDF5 (the
//! Python package, inside h5py's) cannot use this module; what it shares with array-io is the
//! decision of how data may reach device memory, which lives in `route` over plain data.

use h5gds_runtime::hdf5::MissingSymbol;
use hdf5::plist::{DatasetAccess, FileAccess};
use hdf5::{h5check, Dataset, Dataspace, Datatype, File};
use hdf5_sys::h5i::hid_t;
use std::ffi::{c_void, CString};
use std::path::Path;

pub use hdf5::Result;

h5gds_runtime::linked_hdf5_api!();

/// A function of the linked HDF5's table, or an error naming the one it lacks.
fn linked<F>(found: std::result::Result<F, MissingSymbol>) -> Result<F> {
    found.map_err(|missing| hdf5::Error::from(format!("the linked HDF5: {missing}")))
}

/// An address inside the linked HDF5's code (its `H5FDregister`), by which the driver recognises
/// the HDF5 it registers into.
pub fn linked_code_address() -> Result<*const c_void> {
    Ok(linked(linked_hdf5().H5FDregister)? as *const c_void)
}

/// Runs `f` holding HDF5's library lock (hdf5-metno's, reentrant).
pub fn locked<T>(f: impl FnOnce() -> T) -> T {
    hdf5::sync::sync(f)
}

/// Every record of an error's HDF5 stack, outermost first, as `function(): description` lines
/// (what `H5Eprint` shows), or the error's own text when it carries no stack.
pub fn error_stack(err: &hdf5::Error) -> String {
    match err.stack() {
        Some(stack) if !stack.is_empty() => stack
            .iter()
            .map(|frame| format!("{}(): {}", frame.func(), frame.desc()))
            .collect::<Vec<_>>()
            .join("\n  "),
        _ => err.to_string(),
    }
}

/// `result`, with an error turned into text for programs that report errors as text: the
/// failed call's name, then HDF5's whole stack.
pub fn named<T>(call: &str, result: Result<T>) -> std::result::Result<T, String> {
    result.map_err(|err| format!("{call} failed\n  {}", error_stack(&err)))
}

fn c_string(text: &[u8], what: &str) -> Result<CString> {
    CString::new(text).map_err(|_| hdf5::Error::from(format!("{what} contains a NUL byte")))
}

fn c_path(path: &Path) -> Result<CString> {
    use std::os::unix::ffi::OsStrExt;
    c_string(path.as_os_str().as_bytes(), "the path")
}

/// The driver a file access list selects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileDriver {
    /// HDF5's default (`HDF5_DRIVER` if set, else sec2).
    Default,
    Sec2,
    /// A driver by name with its config string, loaded as a plugin if it is not registered
    /// (`H5Pset_driver_by_name`, what C programs and `HDF5_DRIVER` do).
    ByName {
        name: String,
        config: String,
    },
    /// A registered driver by id (the in-process `gds` class).
    Registered(hid_t),
}

/// A file access property list selecting `driver`.
pub fn file_access(driver: &FileDriver) -> Result<FileAccess> {
    let mut builder = FileAccess::build();
    if *driver == FileDriver::Sec2 {
        builder.sec2();
    }
    let fapl = builder.finish()?;
    match driver {
        FileDriver::Default | FileDriver::Sec2 => {}
        FileDriver::ByName { name, config } => {
            let name = c_string(name.as_bytes(), "the driver name")?;
            let config = c_string(config.as_bytes(), "the driver config")?;
            let set = linked(linked_hdf5().H5Pset_driver_by_name)?;
            // SAFETY: a valid list and two C strings that outlive the call.
            h5check(locked(|| unsafe { set(fapl.id(), name.as_ptr(), config.as_ptr()) }) as i64)?;
        }
        FileDriver::Registered(id) => {
            let set = linked(linked_hdf5().H5Pset_driver)?;
            // SAFETY: a valid list; HDF5 checks the id; the drivers used here take no info.
            h5check(locked(|| unsafe { set(fapl.id(), *id, std::ptr::null()) }) as i64)?;
        }
    }
    Ok(fapl)
}

/// The id of the driver `fapl` selects (hdf5-metno names only the drivers it knows).
pub fn selected_driver(fapl: &FileAccess) -> Result<hid_t> {
    let get = linked(linked_hdf5().H5Pget_driver)?;
    // SAFETY: a valid list.
    h5check(locked(|| unsafe { get(fapl.id()) }))
}

/// Creates (truncating) the file at `path` with `fapl`.
pub fn create_file(path: &Path, fapl: &FileAccess) -> Result<File> {
    let name = c_path(path)?;
    let create = linked(linked_hdf5().H5Fcreate)?;
    locked(|| {
        // SAFETY: a valid C string and list.
        let id = unsafe {
            create(
                name.as_ptr(),
                hdf5_sys::h5f::H5F_ACC_TRUNC,
                hdf5_sys::h5p::H5P_DEFAULT,
                fapl.id(),
            )
        };
        // SAFETY: a fresh id (checked by from_id), owned by the File from here on.
        unsafe { hdf5::from_id(h5check(id)?) }
    })
}

/// Opens the file at `path` read-only with `fapl`.
pub fn open_file(path: &Path, fapl: &FileAccess) -> Result<File> {
    let name = c_path(path)?;
    let open = linked(linked_hdf5().H5Fopen)?;
    locked(|| {
        // SAFETY: a valid C string and list.
        let id = unsafe { open(name.as_ptr(), hdf5_sys::h5f::H5F_ACC_RDONLY, fapl.id()) };
        // SAFETY: a fresh id, owned by the File from here on.
        unsafe { hdf5::from_id(h5check(id)?) }
    })
}

/// How [`create_dataset`] stores a new dataset.
pub enum NewLayout<'a> {
    /// Contiguous, fill values never written (the whole dataset is written next), object times
    /// not tracked (as h5py); with `early`, its storage is allocated now (so it has a file offset
    /// other processes can write at).
    Contiguous { early: bool },
    /// In chunks of `chunk`, the pipeline the one filter `filter` with `cd_values`, marked
    /// optional as h5py marks filters. The filter need not be registered in this HDF5
    /// (hdf5-metno's builder refuses that): chunks are written already encoded
    /// (`H5Dwrite_chunk`), so it never runs here.
    Filtered {
        chunk: &'a [u64],
        filter: i32,
        cd_values: &'a [u32],
    },
}

/// Creates dataset `name` (missing groups created) of `dtype` and `shape` in `file`, stored as
/// `layout` says.
pub fn create_dataset(
    file: &File,
    name: &str,
    dtype: &Datatype,
    shape: &[u64],
    layout: &NewLayout,
) -> Result<Dataset> {
    let c_name = c_string(name.as_bytes(), "the dataset name")?;
    let api = linked_hdf5();
    let (set_filter, create) = (linked(api.H5Pset_filter)?, linked(api.H5Dcreate2)?);
    locked(|| {
        let mut dcpl = hdf5::plist::DatasetCreate::build();
        match layout {
            NewLayout::Contiguous { early } => dcpl
                .obj_track_times(false)
                .fill_time(hdf5::dataset::FillTime::Never)
                .alloc_time(early.then_some(hdf5::dataset::AllocTime::Early)),
            NewLayout::Filtered { chunk, .. } => {
                dcpl.chunk(chunk.iter().map(|&c| c as usize).collect::<Vec<_>>())
            }
        };
        let dcpl = dcpl.finish()?;
        if let NewLayout::Filtered {
            filter, cd_values, ..
        } = layout
        {
            // SAFETY: a valid list; cd_values has cd_values.len() entries.
            h5check(unsafe {
                set_filter(
                    dcpl.id(),
                    *filter,
                    hdf5_sys::h5z::H5Z_FLAG_OPTIONAL,
                    cd_values.len(),
                    cd_values.as_ptr(),
                )
            } as i64)?;
        }
        let lcpl = hdf5::plist::LinkCreate::build()
            .create_intermediate_group(true)
            .finish()?;
        let extents: hdf5::Extents = match shape.is_empty() {
            true => ().into(),
            false => shape.iter().map(|&d| d as usize).collect::<Vec<_>>().into(),
        };
        let space = Dataspace::try_new(extents)?;
        // SAFETY: valid ids and C string.
        let id = unsafe {
            create(
                file.id(),
                c_name.as_ptr(),
                dtype.id(),
                space.id(),
                lcpl.id(),
                dcpl.id(),
                hdf5_sys::h5p::H5P_DEFAULT,
            )
        };
        // SAFETY: a fresh id, owned by the Dataset from here on.
        unsafe { hdf5::from_id(h5check(id)?) }
    })
}

/// Opens dataset `name` below `file` with the access list `dapl` (hdf5-metno opens with the
/// default list only).
pub fn open_dataset(file: &File, name: &str, dapl: &DatasetAccess) -> Result<Dataset> {
    let c_name = c_string(name.as_bytes(), "the dataset name")?;
    let open = linked(linked_hdf5().H5Dopen2)?;
    locked(|| {
        // SAFETY: a valid location, C string and list.
        let id = unsafe { open(file.id(), c_name.as_ptr(), dapl.id()) };
        // SAFETY: a fresh id, owned by the Dataset from here on.
        unsafe { hdf5::from_id(h5check(id)?) }
    })
}

/// Puts `dir` first on HDF5's plugin search path.
pub fn prepend_plugin_path(dir: &Path) -> Result<()> {
    let dir = c_path(dir)?;
    let prepend = linked(linked_hdf5().H5PLprepend)?;
    // SAFETY: a valid C string.
    h5check(locked(|| unsafe { prepend(dir.as_ptr()) }) as i64).map(drop)
}

/// The id of the driver registered with `value`, if one is.
pub fn registered_driver(value: i32) -> Result<Option<hid_t>> {
    let api = linked_hdf5();
    let (is_registered, set_by_value) = (
        linked(api.H5FDis_driver_registered_by_value)?,
        linked(api.H5Pset_driver_by_value)?,
    );
    locked(|| {
        // SAFETY: a plain query.
        let registered = h5check(unsafe { is_registered(value) } as i64)?;
        if registered == 0 {
            return Ok(None);
        }
        // Selecting the driver by value on a scratch list finds the registered one (it would
        // load a plugin only if none were registered).
        let fapl = FileAccess::try_new()?;
        h5check(
            // SAFETY: a valid list; no config string.
            unsafe { set_by_value(fapl.id(), value, std::ptr::null()) } as i64,
        )?;
        selected_driver(&fapl).map(Some)
    })
}

/// Registers a driver class.
///
/// # Safety
/// `class` must point to a valid `H5FD_class_t` of the linked HDF5's layout that lives for the
/// rest of the process.
pub unsafe fn register_driver(class: *const c_void) -> Result<hid_t> {
    let register = linked(linked_hdf5().H5FDregister)?;
    // SAFETY: as the caller guarantees.
    h5check(locked(|| unsafe { register(class) }))
}

/// HDF5's copy of the class registered as driver `id` (HDF5 keeps one per registration), through
/// HDF5's library-private `H5FD_get_class`: the public API maps no driver id to its class
/// (`H5Iobject_verify` refuses library id types).
pub fn driver_class(id: hid_t) -> Result<*const c_void> {
    let get_class = linked(linked_hdf5().H5FD_get_class)?;
    // SAFETY: a plain lookup under the lock; HDF5 checks the id and its type.
    let class = locked(|| unsafe { get_class(id) });
    if class.is_null() {
        return Err(format!("{id} is not a registered file driver").into());
    }
    Ok(class)
}
