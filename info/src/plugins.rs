//! Which `gds` driver a process would load through `HDF5_PLUGIN_PATH`.
//!
//! The name `gds` and value 512 are registered to the GPUDirect Storage driver that other
//! projects ship (vfd-gds) as well as used by h5gds, deliberately (h5gds is a drop-in for it).
//! With both on the plugin path, HDF5 takes the first library that declares a VFD named `gds`:
//! directories in path order, files within a directory in the order the file system lists them.
//! h5gds's library exports `h5gds_driver_class` (the driver's identity symbol), which tells it
//! apart.

use serde::Serialize;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// HDF5's plugin directory when `HDF5_PLUGIN_PATH` is unset (H5PL_DEFAULT_PLUGINDIR).
const DEFAULT_PLUGIN_DIR: &str = "/usr/local/hdf5/lib/plugin";
const H5PL_TYPE_VFD: c_int = 2;

/// One library on the plugin path that declares a VFD named `gds`.
#[derive(Serialize)]
pub struct GdsPlugin {
    pub path: PathBuf,
    /// Whether this is h5gds's own library (else another project's `gds` driver).
    pub is_h5gds: bool,
}

/// The plugin path as HDF5 reads it, and every `gds` driver on it in HDF5's search order.
#[derive(Serialize)]
pub struct GdsPluginSearch {
    pub directories: Vec<PathBuf>,
    pub found: Vec<GdsPlugin>,
}

impl GdsPluginSearch {
    /// What a process started now would get for `HDF5_DRIVER=gds`, in words.
    pub fn summary(&self) -> String {
        match self.found.first() {
            None => "no gds driver on the plugin path".into(),
            Some(first) => {
                let who = if first.is_h5gds {
                    "h5gds"
                } else {
                    "ANOTHER gds driver, not h5gds"
                };
                let mut text = format!("{who}: {}", first.path.display());
                if self.found.len() > 1 {
                    text.push_str(&format!(
                        " ({} gds drivers on the path; HDF5 takes the first: put h5gds's directory first, or remove the others)",
                        self.found.len()
                    ));
                }
                text
            }
        }
    }
}

pub fn search() -> GdsPluginSearch {
    let directories: Vec<PathBuf> = match std::env::var_os("HDF5_PLUGIN_PATH") {
        Some(path) => std::env::split_paths(&path)
            .filter(|d| !d.as_os_str().is_empty())
            .collect(),
        None => vec![PathBuf::from(DEFAULT_PLUGIN_DIR)],
    };
    let mut found = Vec::new();
    for dir in &directories {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.as_bytes();
            // HDF5's own filter on plugin file names.
            if name.starts_with(b"lib") && name.windows(3).any(|w| w == b".so") {
                if let Some(plugin) = inspect(entry.path()) {
                    found.push(plugin);
                }
            }
        }
    }
    GdsPluginSearch { directories, found }
}

/// Loads one candidate as HDF5 would and reports it if it is a VFD named `gds`.
fn inspect(path: PathBuf) -> Option<GdsPlugin> {
    let c_path = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: loading a plugin library, exactly as HDF5's plugin search does (RTLD_LAZY |
    // RTLD_LOCAL); it stays loaded, since symbols of it may be referenced below.
    let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return None;
    }
    let symbol = |name: &CStr| {
        // SAFETY: a lookup in a valid handle.
        let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
        (!p.is_null()).then_some(p)
    };
    let plugin_type = symbol(c"H5PLget_plugin_type")?;
    let plugin_info = symbol(c"H5PLget_plugin_info")?;
    // SAFETY: HDF5's plugin ABI: `H5PL_type_t H5PLget_plugin_type(void)` and
    // `const void *H5PLget_plugin_info(void)`.
    let class = unsafe {
        let kind = std::mem::transmute::<*mut c_void, extern "C" fn() -> c_int>(plugin_type)();
        if kind != H5PL_TYPE_VFD {
            return None;
        }
        std::mem::transmute::<*mut c_void, extern "C" fn() -> *const c_void>(plugin_info)()
    };
    if class.is_null() {
        return None;
    }
    // SAFETY: a VFD plugin's info is an `H5FD_class_t`, whose third field (after `unsigned
    // version` and `H5FD_class_value_t value`, offset 8 on x86-64) is `const char *name`.
    let name = unsafe {
        let name = *class.cast::<u8>().add(8).cast::<*const c_char>();
        if name.is_null() {
            return None;
        }
        CStr::from_ptr(name)
    };
    if name.to_bytes() != b"gds" {
        return None;
    }
    let is_h5gds = symbol(h5gds::IDENTITY_SYMBOL).is_some();
    Some(GdsPlugin { path, is_h5gds })
}
