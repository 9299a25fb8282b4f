//! A thin, safe layer over the HDF5 C calls the benchmarks and test programs make: ids that close
//! themselves, file access lists for sec2 or gds, datasets written and read whole or by hyperslab.

use hdf5_metno_sys as sys;
use std::ffi::{c_void, CString};
use std::path::Path;
use sys::h5::{hsize_t, H5open};
use sys::h5d::*;
use sys::h5e::{H5Eprint2, H5E_DEFAULT};
use sys::h5f::*;
use sys::h5i::hid_t;
use sys::h5p::*;
use sys::h5s::*;

pub use sys::h5t;

pub type Result<T> = std::result::Result<T, String>;

/// Fails with `what` when an HDF5 call returned a negative status, printing HDF5's error stack.
pub fn check(status: i64, what: &str) -> Result<i64> {
    if status < 0 {
        // SAFETY: prints HDF5's default error stack to stderr.
        unsafe { H5Eprint2(H5E_DEFAULT, std::ptr::null_mut()) };
        Err(format!("{what} failed"))
    } else {
        Ok(status)
    }
}

fn cstr(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| format!("{s:?} contains a NUL byte"))
}

/// Initialises HDF5 and puts `plugin_dir` first on its plugin search path.
pub fn init(plugin_dir: Option<&Path>) -> Result<()> {
    // SAFETY: initialising the library is always allowed.
    check(unsafe { H5open() } as i64, "H5open")?;
    if let Some(dir) = plugin_dir {
        let dir = cstr(&dir.to_string_lossy())?;
        // SAFETY: a valid C string.
        check(
            unsafe { sys::h5pl::H5PLprepend(dir.as_ptr()) } as i64,
            "H5PLprepend",
        )?;
    }
    Ok(())
}

/// An HDF5 id closed with the right function when dropped.
pub struct Id {
    id: hid_t,
    close: unsafe extern "C" fn(hid_t) -> sys::h5::herr_t,
}

impl Id {
    fn new(
        id: hid_t,
        close: unsafe extern "C" fn(hid_t) -> sys::h5::herr_t,
        what: &str,
    ) -> Result<Id> {
        check(id, what)?;
        Ok(Id { id, close })
    }
    pub fn raw(&self) -> hid_t {
        self.id
    }
    /// Closes now, reporting failure (a file's close flushes it).
    pub fn close(self) -> Result<()> {
        let me = std::mem::ManuallyDrop::new(self);
        // SAFETY: the id is valid and closed exactly once (Drop will not run).
        check(unsafe { (me.close)(me.id) } as i64, "close")?;
        Ok(())
    }
}

impl Drop for Id {
    fn drop(&mut self) {
        // SAFETY: the id is valid and closed exactly once.
        unsafe { (self.close)(self.id) };
    }
}

/// Which driver a file access list selects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Driver {
    /// Whatever HDF5 uses by default (`HDF5_DRIVER` if set, else sec2).
    Default,
    Sec2,
    /// The `gds` plugin, with a config string (may be empty).
    Gds(String),
}

impl Driver {
    pub fn name(&self) -> &'static str {
        match self {
            Driver::Default => "default",
            Driver::Sec2 => "sec2",
            Driver::Gds(_) => "gds",
        }
    }
}

/// A file access property list selecting `driver`.
pub fn file_access(driver: &Driver) -> Result<Id> {
    // SAFETY: plain HDF5 calls on an id created here.
    unsafe {
        let fapl = Id::new(
            H5Pcreate(*H5P_CLS_FILE_ACCESS),
            H5Pclose,
            "H5Pcreate(file access)",
        )?;
        match driver {
            Driver::Default => 0,
            Driver::Sec2 => check(H5Pset_fapl_sec2(fapl.raw()) as i64, "H5Pset_fapl_sec2")?,
            Driver::Gds(config) => {
                let (name, config) = (cstr("gds")?, cstr(config)?);
                check(
                    H5Pset_driver_by_name(fapl.raw(), name.as_ptr(), config.as_ptr()) as i64,
                    "H5Pset_driver_by_name(gds)",
                )?
            }
        };
        Ok(fapl)
    }
}

pub fn create_file(path: &Path, fapl: &Id) -> Result<Id> {
    let name = cstr(&path.to_string_lossy())?;
    // SAFETY: valid C string and property list.
    Id::new(
        unsafe { H5Fcreate(name.as_ptr(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.raw()) },
        H5Fclose,
        "H5Fcreate",
    )
}

pub fn open_file(path: &Path, fapl: &Id) -> Result<Id> {
    let name = cstr(&path.to_string_lossy())?;
    // SAFETY: valid C string and property list.
    Id::new(
        unsafe { H5Fopen(name.as_ptr(), H5F_ACC_RDONLY, fapl.raw()) },
        H5Fclose,
        "H5Fopen",
    )
}

/// How a dataset's storage is laid out.
#[derive(Clone, Copy, Debug)]
pub enum Layout<'a> {
    Contiguous,
    Chunked(&'a [hsize_t]),
    /// Chunked and gzip-compressed (level 1).
    ChunkedGzip(&'a [hsize_t]),
    Compact,
    /// Contiguous storage allocated when the dataset is created and never filled: until written,
    /// its bytes lie past the end of the file.
    AllocatedUnwritten,
}

/// Creates a dataset of `file_type` with shape `dims` and the given layout.
pub fn create_dataset(
    loc: &Id,
    name: &str,
    file_type: hid_t,
    dims: &[hsize_t],
    layout: Layout,
) -> Result<Id> {
    let c_name = cstr(name)?;
    // SAFETY: plain HDF5 calls on ids created here; dims and chunk outlive the calls.
    unsafe {
        let space = Id::new(
            H5Screate_simple(dims.len() as i32, dims.as_ptr(), std::ptr::null()),
            H5Sclose,
            "H5Screate_simple",
        )?;
        let dcpl = Id::new(
            H5Pcreate(*H5P_CLS_DATASET_CREATE),
            H5Pclose,
            "H5Pcreate(dataset create)",
        )?;
        let dcpl_id = dcpl.raw();
        match layout {
            Layout::Contiguous => 0,
            Layout::Chunked(chunk) => check(
                H5Pset_chunk(dcpl_id, chunk.len() as i32, chunk.as_ptr()) as i64,
                "H5Pset_chunk",
            )?,
            Layout::ChunkedGzip(chunk) => {
                check(
                    H5Pset_chunk(dcpl_id, chunk.len() as i32, chunk.as_ptr()) as i64,
                    "H5Pset_chunk",
                )?;
                check(H5Pset_deflate(dcpl_id, 1) as i64, "H5Pset_deflate")?
            }
            Layout::Compact => check(
                H5Pset_layout(dcpl_id, H5D_layout_t::H5D_COMPACT) as i64,
                "H5Pset_layout",
            )?,
            Layout::AllocatedUnwritten => {
                check(
                    H5Pset_alloc_time(dcpl_id, H5D_alloc_time_t::H5D_ALLOC_TIME_EARLY) as i64,
                    "H5Pset_alloc_time",
                )?;
                check(
                    H5Pset_fill_time(dcpl_id, H5D_fill_time_t::H5D_FILL_TIME_NEVER) as i64,
                    "H5Pset_fill_time",
                )?
            }
        };
        let what = format!("H5Dcreate2({name})");
        Id::new(
            H5Dcreate2(
                loc.raw(),
                c_name.as_ptr(),
                file_type,
                space.raw(),
                H5P_DEFAULT,
                dcpl.raw(),
                H5P_DEFAULT,
            ),
            H5Dclose,
            &what,
        )
    }
}

pub fn open_dataset(loc: &Id, name: &str) -> Result<Id> {
    let c_name = cstr(name)?;
    // SAFETY: valid id and C string.
    Id::new(
        unsafe { H5Dopen2(loc.raw(), c_name.as_ptr(), H5P_DEFAULT) },
        H5Dclose,
        &format!("H5Dopen2({name})"),
    )
}

/// Creates a group `name` in `loc`.
pub fn create_group(loc: &Id, name: &str) -> Result<Id> {
    let c_name = cstr(name)?;
    // SAFETY: a valid location id and C string.
    let id = unsafe {
        sys::h5g::H5Gcreate2(
            loc.raw(),
            c_name.as_ptr(),
            H5P_DEFAULT,
            H5P_DEFAULT,
            H5P_DEFAULT,
        )
    };
    Id::new(id, sys::h5g::H5Gclose, &format!("H5Gcreate2({name})"))
}

/// Writes a scalar attribute `name` of `file_type` on `loc` from `value` (of `mem_type`).
pub fn write_scalar_attribute<T>(
    loc: &Id,
    name: &str,
    file_type: hid_t,
    mem_type: hid_t,
    value: &T,
) -> Result<()> {
    let c_name = cstr(name)?;
    // SAFETY: ids created here; `value` is one element of `mem_type`.
    unsafe {
        let space = Id::new(H5Screate(H5S_class_t::H5S_SCALAR), H5Sclose, "H5Screate")?;
        let attr = Id::new(
            sys::h5a::H5Acreate2(
                loc.raw(),
                c_name.as_ptr(),
                file_type,
                space.raw(),
                H5P_DEFAULT,
                H5P_DEFAULT,
            ),
            sys::h5a::H5Aclose,
            &format!("H5Acreate2({name})"),
        )?;
        check(
            sys::h5a::H5Awrite(attr.raw(), mem_type, (value as *const T).cast()) as i64,
            "H5Awrite",
        )?;
    }
    Ok(())
}

/// Reads a scalar attribute `name` of `loc` as `mem_type` into `value`.
pub fn read_scalar_attribute<T>(
    loc: &Id,
    name: &str,
    mem_type: hid_t,
    value: &mut T,
) -> Result<()> {
    let c_name = cstr(name)?;
    // SAFETY: ids opened here; `value` has room for one element of `mem_type`.
    unsafe {
        let attr = Id::new(
            sys::h5a::H5Aopen(loc.raw(), c_name.as_ptr(), H5P_DEFAULT),
            sys::h5a::H5Aclose,
            &format!("H5Aopen({name})"),
        )?;
        check(
            sys::h5a::H5Aread(attr.raw(), mem_type, (value as *mut T).cast()) as i64,
            "H5Aread",
        )?;
    }
    Ok(())
}

/// The dataset's file address (contiguous layout), for reading its bytes without HDF5.
pub fn dataset_offset(dset: &Id) -> Result<u64> {
    // SAFETY: valid dataset id.
    let addr = unsafe { H5Dget_offset(dset.raw()) };
    if addr == u64::MAX {
        return Err("H5Dget_offset: the dataset has no contiguous storage".into());
    }
    Ok(addr)
}

/// A selection of a dataset: all of it, a hyperslab (start, stride, count per dimension), or
/// points of a 1-D dataset in the order given.
#[derive(Clone, Copy, Debug)]
pub enum Selection<'a> {
    All,
    Slab {
        start: &'a [hsize_t],
        stride: &'a [hsize_t],
        count: &'a [hsize_t],
    },
    Points(&'a [hsize_t]),
}

/// Dataspaces (memory, file) for a selection; `None` means `H5S_ALL`.
fn spaces(dset: &Id, sel: Selection) -> Result<Option<(Id, Id)>> {
    let (start, stride, count) = match sel {
        Selection::All => return Ok(None),
        Selection::Slab {
            start,
            stride,
            count,
        } => (start, stride, count),
        Selection::Points(points) => {
            // SAFETY: ids created here; the array outlives the calls.
            return unsafe {
                let file_space = Id::new(H5Dget_space(dset.raw()), H5Sclose, "H5Dget_space")?;
                let status = H5Sselect_elements(
                    file_space.raw(),
                    H5S_SELECT_SET,
                    points.len(),
                    points.as_ptr(),
                );
                check(status as i64, "H5Sselect_elements")?;
                let n = [points.len() as hsize_t];
                let mem_space = Id::new(
                    H5Screate_simple(1, n.as_ptr(), std::ptr::null()),
                    H5Sclose,
                    "H5Screate_simple",
                )?;
                Ok(Some((mem_space, file_space)))
            };
        }
    };
    // SAFETY: ids created here; the arrays outlive the calls.
    unsafe {
        let file_space = Id::new(H5Dget_space(dset.raw()), H5Sclose, "H5Dget_space")?;
        let status = H5Sselect_hyperslab(
            file_space.raw(),
            H5S_SELECT_SET,
            start.as_ptr(),
            stride.as_ptr(),
            count.as_ptr(),
            std::ptr::null(),
        );
        check(status as i64, "H5Sselect_hyperslab")?;
        let mem_space = Id::new(
            H5Screate_simple(count.len() as i32, count.as_ptr(), std::ptr::null()),
            H5Sclose,
            "H5Screate_simple",
        )?;
        Ok(Some((mem_space, file_space)))
    }
}

/// Reads a selection into memory at `buf` (host or device memory, as HDF5 allows).
///
/// # Safety
/// `buf` must have room for the selection's elements of `mem_type`.
pub unsafe fn read_raw(dset: &Id, mem_type: hid_t, sel: Selection, buf: *mut c_void) -> Result<()> {
    let spaces = spaces(dset, sel)?;
    let (m, f) = spaces
        .as_ref()
        .map_or((H5S_ALL, H5S_ALL), |(m, f)| (m.raw(), f.raw()));
    check(
        H5Dread(dset.raw(), mem_type, m, f, H5P_DEFAULT, buf) as i64,
        "H5Dread",
    )
    .map(|_| ())
}

/// Writes a selection from memory at `buf` (host or device memory, as HDF5 allows).
///
/// # Safety
/// `buf` must hold the selection's elements of `mem_type`.
pub unsafe fn write_raw(
    dset: &Id,
    mem_type: hid_t,
    sel: Selection,
    buf: *const c_void,
) -> Result<()> {
    let spaces = spaces(dset, sel)?;
    let (m, f) = spaces
        .as_ref()
        .map_or((H5S_ALL, H5S_ALL), |(m, f)| (m.raw(), f.raw()));
    check(
        H5Dwrite(dset.raw(), mem_type, m, f, H5P_DEFAULT, buf) as i64,
        "H5Dwrite",
    )
    .map(|_| ())
}

/// Writes the whole dataset from `data`.
pub fn write_all<T>(dset: &Id, mem_type: hid_t, data: &[T]) -> Result<()> {
    // SAFETY: the caller's slice matches the dataset's extent and `mem_type`.
    unsafe { write_raw(dset, mem_type, Selection::All, data.as_ptr().cast()) }
}

/// Reads the whole dataset into `out`.
pub fn read_all<T>(dset: &Id, mem_type: hid_t, out: &mut [T]) -> Result<()> {
    // SAFETY: the caller's slice matches the dataset's extent and `mem_type`.
    unsafe { read_raw(dset, mem_type, Selection::All, out.as_mut_ptr().cast()) }
}

/// Reads a hyperslab (`start`, `stride`, `count` per dimension) into `out`, which must hold the
/// product of `count` elements.
pub fn read_slab<T>(
    dset: &Id,
    mem_type: hid_t,
    start: &[hsize_t],
    stride: &[hsize_t],
    count: &[hsize_t],
    out: &mut [T],
) -> Result<()> {
    let wanted: hsize_t = count.iter().product();
    if wanted as usize != out.len() {
        return Err(format!(
            "hyperslab of {wanted} elements into a buffer of {}",
            out.len()
        ));
    }
    // SAFETY: the selection's size equals the buffer's length.
    unsafe {
        read_raw(
            dset,
            mem_type,
            Selection::Slab {
                start,
                stride,
                count,
            },
            out.as_mut_ptr().cast(),
        )
    }
}
