//! Opening and creating files and datasets, with the errors that name the culprit: a directory
//! where a file belongs, a missing file, a dataset name that is not a path, a dataset that does
//! not exist (listing those that do), a group where a dataset was expected.

use crate::driver::{file_access, Driver};
use crate::error::{Error, Result};
use crate::hdf::{c_name, c_path, check, locked, Handle};
use hdf5_sys::h5::{hsize_t, H5_index_t, H5_iter_order_t};
use hdf5_sys::h5d::{H5Dclose, H5Dget_space, H5Dopen2};
use hdf5_sys::h5f::{H5Fclose, H5Fcreate, H5Fopen, H5F_ACC_RDONLY, H5F_ACC_TRUNC};
use hdf5_sys::h5i::hid_t;
use hdf5_sys::h5l::{H5L_info2_t, H5L_type_t, H5Lexists, H5Lvisit2};
use hdf5_sys::h5o::{H5O_info2_t, H5O_type_t, H5Oget_info_by_name3, H5O_INFO_BASIC};
use hdf5_sys::h5p::{H5Pclose, H5Pcreate, H5Pset_chunk_cache, H5P_CLS_DATASET_ACCESS, H5P_DEFAULT};
use hdf5_sys::h5s::{
    H5S_class_t, H5Sclose, H5Sget_simple_extent_dims, H5Sget_simple_extent_ndims,
    H5Sget_simple_extent_type,
};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::{Path, PathBuf};

/// Checks that `name` is an absolute HDF5 path naming something below the root group.
pub(crate) fn check_dataset_name(name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        "it is empty"
    } else if !name.starts_with('/') {
        "it must be an absolute path, starting with '/'"
    } else if name == "/" {
        "it names the root group, not a dataset"
    } else if name.ends_with('/') {
        "it ends with '/'"
    } else if name[1..].split('/').any(str::is_empty) {
        "it has an empty path component ('//')"
    } else if name[1..].split('/').any(|c| c == "." || c == "..") {
        "'.' and '..' are not allowed as path components"
    } else if name.contains('\0') {
        "it contains a NUL byte"
    } else {
        return Ok(());
    };
    Err(Error::InvalidDatasetName {
        dataset: name.to_string(),
        reason,
    })
}

/// Fails if `path` is a directory.
fn refuse_directory(path: &Path) -> Result<()> {
    if path.is_dir() {
        return Err(Error::PathIsDirectory {
            path: path.to_path_buf(),
        });
    }
    Ok(())
}

/// Creates (truncating any existing file) the HDF5 file at `path`, and missing parent
/// directories.
pub(crate) fn create_file(path: &Path, driver: Driver) -> Result<Handle> {
    refuse_directory(path)?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|source| Error::Io {
            op: "creating the parent directories of",
            path: path.to_path_buf(),
            source,
        })?;
    }
    let fapl = file_access(driver, path)?;
    let name = c_path(path)?;
    locked(|| {
        // SAFETY: a valid C string and property list.
        let id = unsafe { H5Fcreate(name.as_ptr(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.id()) };
        Handle::new(id, H5Fclose, "creating the file", path, None)
    })
}

/// An open dataset, its file and its shape.
pub(crate) struct OpenDataset {
    pub path: PathBuf,
    pub name: String,
    pub shape: Vec<u64>,
    pub dset: Handle,
    pub file: Handle,
}

impl OpenDataset {
    /// Closes the dataset and the file, reporting failures.
    pub fn close(self) -> Result<()> {
        let OpenDataset {
            path,
            name,
            dset,
            file,
            ..
        } = self;
        dset.close("closing the dataset", &path, Some(&name))?;
        file.close("closing the file", &path, None)
    }
}

/// Opens dataset `name` of the file at `path` for reading with `driver`; with `cache_off`, the
/// chunk cache is disabled (so that HDF5 reads unfiltered chunks straight into the caller's
/// buffer).
pub(crate) fn open_dataset(
    path: &Path,
    name: &str,
    driver: Driver,
    cache_off: bool,
) -> Result<OpenDataset> {
    check_dataset_name(name)?;
    match path.try_exists() {
        Ok(true) => {}
        Ok(false) => {
            return Err(Error::FileNotFound {
                path: path.to_path_buf(),
            })
        }
        Err(source) => {
            return Err(Error::Io {
                op: "looking for",
                path: path.to_path_buf(),
                source,
            })
        }
    }
    refuse_directory(path)?;
    let fapl = file_access(driver, path)?;
    let c_file = c_path(path)?;
    let file = locked(|| {
        // SAFETY: a valid C string and property list.
        let id = unsafe { H5Fopen(c_file.as_ptr(), H5F_ACC_RDONLY, fapl.id()) };
        Handle::new(id, H5Fclose, "opening as an HDF5 file", path, None)
    })?;
    drop(fapl);
    resolve(&file, path, name)?;
    let c_dset = c_name(name)?;
    locked(|| {
        // SAFETY: plain calls on ids created here.
        let dapl = Handle::new(
            unsafe { H5Pcreate(*H5P_CLS_DATASET_ACCESS) },
            H5Pclose,
            "creating a dataset access list",
            path,
            Some(name),
        )?;
        if cache_off {
            // SAFETY: a valid list. Zero bytes disables the cache (HDF5 then zeroes both).
            let status = unsafe { H5Pset_chunk_cache(dapl.id(), 0, 0, 1.0) };
            check(status as i64, "disabling the chunk cache", path, Some(name))?;
        }
        // SAFETY: a valid file, C string and list.
        let dset = Handle::new(
            unsafe { H5Dopen2(file.id(), c_dset.as_ptr(), dapl.id()) },
            H5Dclose,
            "opening the dataset",
            path,
            Some(name),
        )?;
        let shape = shape_of(&dset, path, name)?;
        Ok(OpenDataset {
            path: path.to_path_buf(),
            name: name.to_string(),
            shape,
            dset,
            file,
        })
    })
}

/// The dataset's shape (empty for a scalar); a null dataspace is refused.
fn shape_of(dset: &Handle, path: &Path, name: &str) -> Result<Vec<u64>> {
    // SAFETY: plain calls on a valid dataset and the dataspace created here.
    unsafe {
        let space = Handle::new(
            H5Dget_space(dset.id()),
            H5Sclose,
            "getting the dataspace",
            path,
            Some(name),
        )?;
        match H5Sget_simple_extent_type(space.id()) {
            H5S_class_t::H5S_SCALAR => Ok(Vec::new()),
            H5S_class_t::H5S_SIMPLE => {
                let rank = H5Sget_simple_extent_ndims(space.id());
                check(rank as i64, "getting the rank", path, Some(name))?;
                let mut dims = vec![0 as hsize_t; rank as usize];
                let status =
                    H5Sget_simple_extent_dims(space.id(), dims.as_mut_ptr(), std::ptr::null_mut());
                check(status as i64, "getting the shape", path, Some(name))?;
                Ok(dims)
            }
            _ => Err(Error::UnsupportedDataset {
                path: path.to_path_buf(),
                dataset: name.to_string(),
                reason: "has a null dataspace (no shape and no elements); h5py writes these \
                         for h5py.Empty"
                    .into(),
            }),
        }
    }
}

/// Checks that `name` exists in `file` and is a dataset.
fn resolve(file: &Handle, path: &Path, name: &str) -> Result<()> {
    let missing = || -> Result<()> {
        Err(Error::NoSuchDataset {
            path: path.to_path_buf(),
            dataset: name.to_string(),
            existing: list_datasets(file, path)?,
        })
    };
    // Every prefix must exist, or HDF5 fails on the first missing one.
    let mut prefix = String::new();
    for part in name[1..].split('/') {
        prefix.push('/');
        prefix.push_str(part);
        let c_prefix = c_name(&prefix)?;
        // SAFETY: a valid file id and C string.
        let exists = locked(|| unsafe { H5Lexists(file.id(), c_prefix.as_ptr(), H5P_DEFAULT) });
        if exists <= 0 {
            return missing();
        }
    }
    let c_full = c_name(name)?;
    let kind = locked(|| object_type(file.id(), c_full.as_ptr()));
    match kind {
        Some(H5O_type_t::H5O_TYPE_DATASET) => Ok(()),
        Some(H5O_type_t::H5O_TYPE_GROUP) => Err(Error::NotADataset {
            path: path.to_path_buf(),
            dataset: name.to_string(),
            kind: "group",
        }),
        Some(H5O_type_t::H5O_TYPE_NAMED_DATATYPE) => Err(Error::NotADataset {
            path: path.to_path_buf(),
            dataset: name.to_string(),
            kind: "named datatype",
        }),
        Some(_) => Err(Error::NotADataset {
            path: path.to_path_buf(),
            dataset: name.to_string(),
            kind: "non-dataset object",
        }),
        // A dangling soft or external link.
        None => missing(),
    }
}

/// The type of the object `name` names below `loc`, if it can be opened.
fn object_type(loc: hid_t, name: *const c_char) -> Option<H5O_type_t> {
    // SAFETY: an all-zero H5O_info2_t is a valid value; HDF5 fills it.
    let mut info: H5O_info2_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid location, C string and out-pointer.
    let status = unsafe { H5Oget_info_by_name3(loc, name, &mut info, H5O_INFO_BASIC, H5P_DEFAULT) };
    (status >= 0).then_some(info.type_)
}

/// The absolute paths of every dataset in the file reachable through hard links, sorted.
pub(crate) fn list_datasets(file: &Handle, path: &Path) -> Result<Vec<String>> {
    unsafe extern "C" fn visit(
        group: hid_t,
        name: *const c_char,
        info: *const H5L_info2_t,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: HDF5 passes valid pointers for the duration of the callback; `data` is the
        // Vec passed to H5Lvisit2 below.
        let result = std::panic::catch_unwind(|| unsafe {
            if (*info).type_ != H5L_type_t::H5L_TYPE_HARD {
                return;
            }
            if object_type(group, name) == Some(H5O_type_t::H5O_TYPE_DATASET) {
                let names = &mut *(data as *mut Vec<String>);
                names.push(format!("/{}", CStr::from_ptr(name).to_string_lossy()));
            }
        });
        // Stop the visit (negative) if anything panicked; never unwind into HDF5.
        if result.is_ok() {
            0
        } else {
            -1
        }
    }
    let mut names: Vec<String> = Vec::new();
    let status = locked(|| {
        // SAFETY: a valid file id; the callback matches H5L_iterate2_t and `names` outlives
        // the call.
        unsafe {
            H5Lvisit2(
                file.id(),
                H5_index_t::H5_INDEX_NAME,
                H5_iter_order_t::H5_ITER_NATIVE,
                Some(visit),
                (&mut names as *mut Vec<String>).cast(),
            )
        }
    });
    check(status as i64, "listing the datasets", path, None)?;
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dataset_names_must_be_absolute_paths_below_the_root() {
        for good in ["/x", "/a/b/c", "/with space", "/a.b"] {
            check_dataset_name(good).unwrap();
        }
        for (bad, why) in [
            ("", "empty"),
            ("x", "absolute"),
            ("a/b", "absolute"),
            ("/", "root group"),
            ("/a/", "ends with"),
            ("/a//b", "empty path component"),
            ("/a/../b", "'.' and '..'"),
        ] {
            let err = check_dataset_name(bad).unwrap_err().to_string();
            assert!(err.contains(why), "{bad:?}: {err}");
            assert!(err.contains(&format!("{bad:?}")), "{bad:?}: {err}");
        }
    }
}
