//! The NVIDIA libraries loaded at run time, libcufile and libnvcomp: each opened once per process
//! and kept (loading calls nothing in it, so it is safe without CUDA; unloading a C++ library that
//! may have started threads is not), or why it could not be.
//!
//! Each is looked for first in the file the Python package names (NVIDIA's pip wheels in
//! site-packages, so no `LD_LIBRARY_PATH` is needed), then by soname. The sys crates hold only the
//! bindings: one loader serves both, and the driver, the GPU codec and `h5gds info` share one
//! loaded copy of each.

use cufile_sys::CuFileLib;
use nvcomp_sys::NvcompLib;
use std::ffi::OsStr;
use std::path::PathBuf;
use std::sync::OnceLock;

/// One library: its soname, the file to try first, and the outcome of loading it.
struct RuntimeLibrary<L> {
    soname: &'static str,
    preferred: OnceLock<PathBuf>,
    loaded: OnceLock<Result<L, String>>,
}

impl<L> RuntimeLibrary<L> {
    const fn new(soname: &'static str) -> Self {
        RuntimeLibrary {
            soname,
            preferred: OnceLock::new(),
            loaded: OnceLock::new(),
        }
    }

    /// The library, loaded at the first call with `open` (its constructors run, none of its
    /// functions is called): the preferred file where one was named and loads, else the soname.
    fn get(&self, open: impl Fn(&OsStr) -> Result<L, libloading::Error>) -> Result<&L, String> {
        self.loaded
            .get_or_init(|| {
                let preferred = self.preferred.get().map(|f| f.as_os_str());
                preferred
                    .and_then(|f| open(f).ok())
                    .map_or_else(|| open(self.soname.as_ref()), Ok)
                    .map_err(|e| format!("{} cannot be loaded ({e})", self.soname))
            })
            .as_ref()
            .map_err(Clone::clone)
    }
}

static CUFILE: RuntimeLibrary<CuFileLib> = RuntimeLibrary::new(cufile_sys::LIBRARY_NAME);
static NVCOMP: RuntimeLibrary<NvcompLib> = RuntimeLibrary::new(nvcomp_sys::LIBRARY_NAME);

/// Makes [`cufile`] and [`nvcomp`] try these files before the sonames (the first call wins, and
/// only before a library is loaded); None leaves a library to its soname.
pub fn prefer_files(cufile: Option<PathBuf>, nvcomp: Option<PathBuf>) {
    if let Some(file) = cufile {
        let _ = CUFILE.preferred.set(file);
    }
    if let Some(file) = nvcomp {
        let _ = NVCOMP.preferred.set(file);
    }
}

/// libcufile. Calling into it before CUDA is known to work can hang (`cuFileDriverOpen` spins
/// without an NVIDIA driver); loading it cannot.
pub fn cufile() -> Result<&'static CuFileLib, String> {
    // SAFETY: loading a shared library runs its initialisers; libcufile's do not open the driver.
    CUFILE.get(|name| unsafe { CuFileLib::new(name) })
}

/// libnvcomp.
pub fn nvcomp() -> Result<&'static NvcompLib, String> {
    // SAFETY: loading a shared library runs its initialisers; nvCOMP's touch no GPU state.
    NVCOMP.get(|name| unsafe { NvcompLib::new(name) })
}
