//! The objects the dynamic loader has loaded (`dl_iterate_phdr`), and which one holds an address:
//! how a caller's HDF5 copy, or the library a registered driver class runs, is recognised.

use std::ffi::{c_int, c_void, CStr, CString};

/// One object loaded in the process, as the dynamic loader reports it.
pub(crate) struct LoadedObject {
    /// Its path ("" for the main program).
    pub(crate) name: CString,
    /// Its load bias: tells two objects of one path apart.
    pub(crate) base: usize,
    /// The address ranges of its loaded segments.
    segments: Vec<std::ops::Range<usize>>,
}

impl LoadedObject {
    pub(crate) fn contains(&self, addr: usize) -> bool {
        self.segments.iter().any(|s| s.contains(&addr))
    }

    /// Its dlopen handle (`RTLD_NOLOAD`: never loads anything); null if none. The caller closes it.
    pub(crate) fn handle(&self) -> *mut c_void {
        let path_ptr = if self.name.to_bytes().is_empty() {
            std::ptr::null()
        } else {
            self.name.as_ptr()
        };
        // SAFETY: RTLD_NOLOAD only returns a handle to an already loaded object; nothing new runs.
        unsafe { libc::dlopen(path_ptr, libc::RTLD_LAZY | libc::RTLD_NOLOAD) }
    }

    /// `symbol` where this object (opened as `handle`) defines it itself: a handle's lookup also
    /// searches the object's dependencies, whose definitions are not the object's.
    pub(crate) fn own_symbol(&self, handle: *mut c_void, symbol: &CStr) -> Option<*mut c_void> {
        // SAFETY: looking a name up in a valid handle has no side effects.
        let p = unsafe { libc::dlsym(handle, symbol.as_ptr()) };
        (!p.is_null() && self.contains(p as usize)).then_some(p)
    }
}

/// Every object loaded in the process.
pub(crate) fn loaded_objects() -> Vec<LoadedObject> {
    unsafe extern "C" fn collect(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: `data` is the Vec passed below; `info` and its program headers are valid for
        // the callback's duration, and a non-null name is a NUL-terminated string.
        unsafe {
            let objects = &mut *(data as *mut Vec<LoadedObject>);
            let info = &*info;
            if info.dlpi_name.is_null() {
                return 0;
            }
            let base = info.dlpi_addr as usize;
            let headers = if info.dlpi_phdr.is_null() {
                &[][..]
            } else {
                std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize)
            };
            let segments = headers
                .iter()
                .filter(|h| h.p_type == libc::PT_LOAD)
                .map(|h| {
                    let start = base.wrapping_add(h.p_vaddr as usize);
                    start..start.wrapping_add(h.p_memsz as usize)
                })
                .collect();
            objects.push(LoadedObject {
                name: CStr::from_ptr(info.dlpi_name).to_owned(),
                base,
                segments,
            });
        }
        0
    }
    let mut objects: Vec<LoadedObject> = Vec::new();
    // SAFETY: the callback only reads `info` and appends to `objects`.
    unsafe {
        libc::dl_iterate_phdr(
            Some(collect),
            (&mut objects as *mut Vec<LoadedObject>).cast(),
        )
    };
    objects
}

/// The loaded object whose code or data is at `addr`.
pub(crate) fn object_containing(addr: usize) -> Option<LoadedObject> {
    loaded_objects().into_iter().find(|o| o.contains(addr))
}

/// The file of the loaded object whose code or data is at `addr` ("" for the main program).
pub fn loaded_file_of(addr: *const c_void) -> Option<String> {
    object_containing(addr as usize).map(|o| o.name.to_string_lossy().into_owned())
}

/// The loaded object whose code is at `addr`: its file (for messages), and whether it defines
/// `symbol` itself. None where no loaded object holds `addr`.
pub fn object_defining(addr: usize, symbol: &CStr) -> Option<(String, bool)> {
    let object = object_containing(addr)?;
    let name = match object.name.to_string_lossy() {
        n if n.is_empty() => "the main program".to_string(),
        n => n.into_owned(),
    };
    let handle = object.handle();
    if handle.is_null() {
        return Some((name, false));
    }
    let defines = object.own_symbol(handle, symbol).is_some();
    // SAFETY: balances the dlopen in `handle`; the object stays loaded by its owner.
    unsafe { libc::dlclose(handle) };
    Some((name, defines))
}

/// The return address into the code that called the entry point now running in the object that
/// holds this code (the driver's library, into which this crate is linked): the first frame,
/// walking up the stack, outside that object. Only its own unwind tables are needed to get there.
pub fn calling_code() -> Option<usize> {
    // A private static, addressed directly: an exported function's address could be another
    // object's copy that interposes it (a program linking the driver's crate and exporting its
    // symbols, as the test programs do).
    static HERE: u8 = 0;
    let own = object_containing(std::ptr::addr_of!(HERE) as usize)?;
    let (mut inside, mut caller) = (false, None);
    backtrace::trace(|frame| {
        let ip = frame.ip() as usize;
        if own.contains(ip) {
            inside = true;
            true
        } else if inside {
            caller = Some(ip);
            false
        } else {
            true
        }
    });
    caller
}
