//! Opening and creating files and datasets, with the errors that name the culprit: a directory
//! where a file belongs, a missing file, a dataset name that is not a path, a dataset that does
//! not exist (listing those that do), a group where a dataset was expected.

use crate::driver::{file_access, Driver};
use crate::error::{Error, Result};
use crate::hdf5_raw::{self, NewLayout};
use h5gds_engine::Kept;
use h5gds_engine::{Dataset as Handle, Hdf5Lock};
use hdf5::types::TypeDescriptor;
use hdf5::{Dataset, Datatype, File, Group, LinkType, LocationToken, LocationType};
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
pub(crate) fn refuse_directory(path: &Path) -> Result<()> {
    if path.is_dir() {
        return Err(Error::PathIsDirectory {
            path: path.to_path_buf(),
        });
    }
    Ok(())
}

/// The URL `path` names, where it is one the `gds` driver reads remotely (`s3://`, `http://`,
/// `https://`: docs/remote.md); `None` for a local path.
pub(crate) fn url_of(path: &Path) -> Option<&str> {
    path.to_str().filter(|name| h5gds::is_url(name))
}

/// Creates the HDF5 file that will replace `path` (and missing parent directories): under a
/// hidden name next to it (see [`Replacing`]), so that `path` keeps its old file until the new
/// one is complete. A URL is refused before anything is created (remote files are read-only).
fn create_file(path: &Path, driver: Driver) -> Result<(File, Replacing)> {
    let fapl = file_access(driver, path, true)?;
    refuse_directory(path)?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|source| Error::Io {
            op: "creating the parent directories of",
            path: path.to_path_buf(),
            source,
        })?;
    }
    let replacing = Replacing::new(path)?;
    let file = hdf5_raw::create_file(&replacing.tmp, &fapl)
        .map_err(|e| Error::hdf5("creating the file", path, None, e))?;
    Ok((file, replacing))
}

/// A new file written next to the path it replaces: created as `.NAME.PID-N.h5gds-tmp` in the
/// same directory (so the rename is atomic), renamed over the target by [`Replacing::finish`]
/// once the file is closed, removed if it is dropped unfinished (a failed write). A crash or
/// `kill -9` at any point leaves the target holding its old file or the complete new one (and at
/// most the hidden file beside it). Through a symbolic link the file it points to is replaced;
/// an existing file's permission bits are kept.
pub(crate) struct Replacing {
    tmp: PathBuf,
    target: PathBuf,
    done: bool,
}

impl Replacing {
    fn new(path: &Path) -> Result<Replacing> {
        static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let target = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        let Some(name) = target.file_name() else {
            return Err(Error::Io {
                op: "naming a file at",
                path: path.to_path_buf(),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "the path has no file name",
                ),
            });
        };
        let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut tmp = std::ffi::OsString::from(".");
        tmp.push(name);
        tmp.push(format!(".{}-{n}.h5gds-tmp", std::process::id()));
        Ok(Replacing {
            tmp: target.with_file_name(tmp),
            target,
            done: false,
        })
    }

    /// The closed new file renamed over the target (`path`, as the caller named it, for errors).
    fn finish(mut self, path: &Path) -> Result<()> {
        if let Ok(old) = std::fs::metadata(&self.target) {
            std::fs::set_permissions(&self.tmp, old.permissions()).map_err(|source| Error::Io {
                op: "giving the new file the permissions of the old one at",
                path: path.to_path_buf(),
                source,
            })?;
        }
        std::fs::rename(&self.tmp, &self.target).map_err(|source| Error::Io {
            op: "renaming the new file into place at",
            path: path.to_path_buf(),
            source,
        })?;
        self.done = true;
        Ok(())
    }
}

impl Drop for Replacing {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// A new HDF5 file to replace the one at `path` (see [`Replacing`]), opened with `driver`,
/// holding dataset `name` (missing groups created) of `desc`'s type and `shape`, stored as
/// `layout`; and the memory type to write it with. [`OpenDataset::close`] puts it in place.
pub(crate) fn create_dataset(
    path: &Path,
    name: &str,
    driver: Driver,
    desc: &TypeDescriptor,
    (shape, layout): (&[u64], NewLayout),
) -> Result<(OpenDataset, Datatype)> {
    let (file, replacing) = create_file(path, driver)?;
    let fail = |op: &str, e: hdf5::Error| Error::hdf5(op, path, Some(name), e);
    let mem_type = hdf5_raw::locked(|| Datatype::from_descriptor(desc))
        .map_err(|e| fail("creating the element type", e))?;
    let dset = hdf5_raw::create_dataset(&file, name, &mem_type, shape, &layout)
        .map_err(|e| fail("creating the dataset", e))?;
    let mut ds = OpenDataset::new(path, name, shape.to_vec(), dset, file);
    ds.replacing = Some(replacing);
    Ok((ds, mem_type))
}

/// An open dataset, its file and its shape.
pub(crate) struct OpenDataset {
    pub path: PathBuf,
    pub name: String,
    pub shape: Vec<u64>,
    pub dset: Dataset,
    pub file: File,
    /// What the engine keeps of it for the call's handles: its storage for reads with no HDF5
    /// call, once resolved, and the driver's settings, loaded at most once.
    pub kept: Kept,
    /// For a new file: the path it replaces once closed (dropped last: after the file closes).
    replacing: Option<Replacing>,
}

impl OpenDataset {
    /// The engine's handle of this dataset (`h5gds_engine::Dataset`), its elements moving as
    /// `mem`, its calls under hdf5-metno's lock.
    pub fn engine(&self, mem: &Datatype) -> Handle<'_, Metno> {
        let (id, api) = (self.dset.id(), hdf5_raw::linked_hdf5());
        Handle::new(api, id, mem.id(), mem.size(), Metno).named(&self.name)
    }

    /// Dataset `name` (`dset`, of `shape`) of `file`, at `path`.
    pub fn new(path: &Path, name: &str, shape: Vec<u64>, dset: Dataset, file: File) -> Self {
        OpenDataset {
            path: path.to_path_buf(),
            name: name.to_string(),
            shape,
            dset,
            file,
            kept: Kept::default(),
            replacing: None,
        }
    }

    /// Closes the dataset and the file, reporting failures; a new file then replaces the one at
    /// its path (a failure removes it instead, leaving the old file).
    pub fn close(self) -> Result<()> {
        let OpenDataset {
            path,
            dset,
            file,
            replacing,
            ..
        } = self;
        drop(dset);
        file.close()
            .map_err(|e| Error::hdf5("closing the file", &path, None, e))?;
        match replacing {
            Some(new) => new.finish(&path),
            None => Ok(()),
        }
    }
}

/// Opens dataset `name` of the file at `path` for reading with `driver`; with `cache_off`, the
/// chunk cache is disabled (so that HDF5 reads unfiltered chunks straight into the caller's
/// buffer). A URL (`url_of`) is opened through the `gds` driver whatever `driver` says (only it
/// reads remote files; a 404 or 403 is its error, naming the URL); the engine's reads with no HDF5
/// call take the driver's remote file as their source (`h5gds_engine::stored::byte_source`).
pub(crate) fn open_dataset(
    path: &Path,
    name: &str,
    driver: Driver,
    cache_off: bool,
) -> Result<OpenDataset> {
    check_dataset_name(name)?;
    let driver = match url_of(path) {
        Some(_) => Driver::Gds,
        None => {
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
            driver
        }
    };
    let fapl = file_access(driver, path, false)?;
    let file = hdf5_raw::open_file(path, &fapl).map_err(|e| {
        // HDF5's own account of a failed open is its outermost frame and its innermost one; a
        // URL's reason (404, 403, the server unreachable) is the driver's frame, which names it.
        let driver_frame = url_of(path).and_then(|url| {
            e.stack()?
                .iter()
                .map(|frame| frame.desc().to_string())
                .find(|desc| desc.contains(url))
        });
        match driver_frame {
            Some(why) => Error::hdf5("opening as an HDF5 file", path, None, format!("{e}: {why}")),
            None => Error::hdf5("opening as an HDF5 file", path, None, e),
        }
    })?;
    drop(fapl);
    resolve(&file, path, name)?;
    let fail = |op: &str, e: hdf5::Error| Error::hdf5(op, path, Some(name), e);
    let mut dapl = hdf5::plist::DatasetAccess::build();
    if cache_off {
        // Zero bytes disables the cache.
        dapl.chunk_cache(0, 0, 1.0);
    }
    let dapl = dapl
        .finish()
        .map_err(|e| fail("creating a dataset access list", e))?;
    let dset =
        hdf5_raw::open_dataset(&file, name, &dapl).map_err(|e| fail("opening the dataset", e))?;
    let space = dset.space().map_err(|e| fail("getting the dataspace", e))?;
    if space.is_null() {
        return Err(Error::UnsupportedDataset {
            path: path.to_path_buf(),
            dataset: name.to_string(),
            reason: "has a null dataspace (no shape and no elements); h5py writes these for \
                     h5py.Empty"
                .into(),
        });
    }
    let shape = space.shape().iter().map(|&d| d as u64).collect();
    Ok(OpenDataset::new(path, name, shape, dset, file))
}

/// Checks that `name` exists in `file` and is a dataset.
fn resolve(file: &File, path: &Path, name: &str) -> Result<()> {
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
        if !file.link_exists(&prefix) {
            return missing();
        }
    }
    let kind = match file.loc_type_by_name(name) {
        Ok(LocationType::Dataset) => return Ok(()),
        Ok(LocationType::Group) => "group",
        Ok(LocationType::NamedDatatype) => "named datatype",
        Ok(_) => "non-dataset object",
        // A dangling soft or external link.
        Err(_) => return missing(),
    };
    Err(Error::NotADataset {
        path: path.to_path_buf(),
        dataset: name.to_string(),
        kind,
    })
}

/// The absolute paths of every dataset in the file reachable through hard links, sorted.
pub(crate) fn list_datasets(file: &File, path: &Path) -> Result<Vec<String>> {
    fn visit(
        group: &Group,
        prefix: &str,
        seen: &mut Vec<LocationToken>,
        names: &mut Vec<String>,
    ) -> hdf5::Result<()> {
        let mut children = Vec::new();
        group.iter_visit_default(|name, info| {
            if info.link_type == LinkType::Hard {
                children.push(name.to_string());
            }
            Ok(())
        })?;
        for child in children {
            let info = group.loc_info_by_name(&child)?;
            let full = format!("{prefix}/{child}");
            match info.loc_type {
                LocationType::Dataset => names.push(full),
                // Each group once: hard links can form cycles.
                LocationType::Group if !seen.contains(&info.token) => {
                    seen.push(info.token);
                    visit(&group.group(&child)?, &full, seen, names)?;
                }
                _ => {}
            }
        }
        Ok(())
    }
    let mut names = Vec::new();
    visit(file, "", &mut Vec::new(), &mut names)
        .map_err(|e| Error::hdf5("listing the datasets", path, None, e))?;
    names.sort();
    Ok(names)
}

/// hdf5-metno's lock on the linked HDF5, taken per call, as the engine's handle takes it.
pub(crate) struct Metno;

impl Hdf5Lock for Metno {
    fn call<T>(call: impl FnOnce() -> T) -> T {
        hdf5_raw::locked(call)
    }
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
