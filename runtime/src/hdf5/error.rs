//! The result layer between the table of HDF5's functions ([`Hdf5Api`]) and the code that calls
//! them: a failed call as [`Hdf5Error`] (which call, and HDF5's error stack read and cleared as one
//! line), return codes checked once ([`Hdf5Error::check`]), and ids owned by Rust, closed once
//! with their kind's close function when dropped ([`Owned`]), as cudarc puts a result layer
//! between its sys and safe layers.

use super::{herr_t, hid_t, H5E_error2_t, Hdf5Api, MissingSymbol};
use std::ffi::{c_int, c_uint, c_void, CStr};
use std::fmt;

/// `H5E_DEFAULT`: the calling thread's default error stack.
const H5E_DEFAULT: i64 = 0;
const H5E_WALK_DOWNWARD: c_int = 1;

/// A failed HDF5 call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hdf5Error {
    /// `call` failed; `stack`: HDF5's error stack at the time, as [`stack`] reads it.
    Failed { call: &'static str, stack: String },
    /// The table's HDF5 library lacks a function the query needs.
    Missing(MissingSymbol),
}

impl Hdf5Error {
    /// `call` failed: HDF5's stack read and cleared now.
    pub fn failed(api: &Hdf5Api, call: &'static str) -> Hdf5Error {
        Hdf5Error::Failed {
            call,
            stack: stack(api),
        }
    }

    /// `value` (an id, a count, a status), or `call`'s failure where HDF5 returned a negative one.
    pub fn check<T: PartialOrd + Default>(
        api: &Hdf5Api,
        value: T,
        call: &'static str,
    ) -> Result<T, Hdf5Error> {
        match value < T::default() {
            true => Err(Hdf5Error::failed(api, call)),
            false => Ok(value),
        }
    }
}

impl fmt::Display for Hdf5Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Hdf5Error::Failed { call, stack } => write!(f, "{call} failed: {stack}"),
            Hdf5Error::Missing(missing) => write!(f, "{missing}"),
        }
    }
}

impl std::error::Error for Hdf5Error {}

impl From<MissingSymbol> for Hdf5Error {
    fn from(missing: MissingSymbol) -> Hdf5Error {
        Hdf5Error::Missing(missing)
    }
}

impl From<Hdf5Error> for String {
    fn from(error: Hdf5Error) -> String {
        error.to_string()
    }
}

/// What an owned id is, which says how it is closed.
#[derive(Clone, Copy, Debug)]
pub enum IdKind {
    File,
    PropertyList,
    Dataspace,
    Datatype,
}

/// An HDF5 id owned by Rust: closed once, with its kind's close function, when dropped.
pub struct Owned {
    id: hid_t,
    close: unsafe extern "C" fn(hid_t) -> herr_t,
}

impl Owned {
    /// Owns `id`, which `call` returned, or reports `call`'s failure where it is negative (HDF5's
    /// stack read and cleared). The caller holds the lock that serialises calls into `api`'s HDF5.
    pub fn new(
        api: &Hdf5Api,
        kind: IdKind,
        id: hid_t,
        call: &'static str,
    ) -> Result<Owned, Hdf5Error> {
        let close = match kind {
            IdKind::File => api.H5Fclose?,
            IdKind::PropertyList => api.H5Pclose?,
            IdKind::Dataspace => api.H5Sclose?,
            IdKind::Datatype => api.H5Tclose?,
        };
        let id = Hdf5Error::check(api, id, call)?;
        Ok(Owned { id, close })
    }

    /// The id, valid while this lives.
    pub fn id(&self) -> hid_t {
        self.id
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: an id HDF5 handed out (checked non-negative) and owned here alone, closed once
        // with the close function of its kind.
        unsafe { (self.close)(self.id) };
    }
}

/// HDF5's error stack as one line (most general first), and the stack cleared. The caller holds
/// the lock that serialises calls into the table's HDF5.
pub fn stack(api: &Hdf5Api) -> String {
    unsafe extern "C" fn collect(
        _n: c_uint,
        rec: *const H5E_error2_t,
        data: *mut c_void,
    ) -> herr_t {
        // SAFETY: `data` is the Vec below; HDF5 passes a valid record for the call.
        let lines = unsafe { &mut *data.cast::<Vec<String>>() };
        // SAFETY: as above, the record is valid for the callback's duration.
        let rec = unsafe { &*rec };
        if !rec.desc.is_null() {
            // SAFETY: HDF5's description is a NUL-terminated string.
            let desc = unsafe { CStr::from_ptr(rec.desc) }.to_string_lossy();
            let func = if rec.func_name.is_null() {
                String::new()
            } else {
                format!(
                    "{}: ",
                    // SAFETY: HDF5's function name is a NUL-terminated string.
                    unsafe { CStr::from_ptr(rec.func_name) }.to_string_lossy()
                )
            };
            lines.push(format!("{func}{desc}"));
        }
        0
    }
    let (Ok(walk), Ok(clear)) = (api.H5Ewalk2, api.H5Eclear2) else {
        return "no HDF5 error message (the HDF5 library has no H5Ewalk2 or H5Eclear2)".into();
    };
    let mut lines: Vec<String> = Vec::new();
    // SAFETY: the callback only appends to `lines`, alive for the call.
    unsafe {
        walk(
            H5E_DEFAULT,
            H5E_WALK_DOWNWARD,
            collect,
            (&mut lines as *mut Vec<String>).cast(),
        );
        clear(H5E_DEFAULT);
    }
    if lines.is_empty() {
        "no HDF5 error message".into()
    } else {
        lines.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_names_the_call_before_the_stack_and_a_missing_function_itself() {
        let failed = Hdf5Error::Failed {
            call: "H5Pget_chunk",
            stack: "H5Pget_chunk(): not a chunked storage layout".into(),
        };
        assert_eq!(
            String::from(failed),
            "H5Pget_chunk failed: H5Pget_chunk(): not a chunked storage layout"
        );
        let missing = Hdf5Error::from(MissingSymbol {
            symbol: "H5Dget_offset",
        });
        assert_eq!(
            missing.to_string(),
            "this HDF5 library has no H5Dget_offset"
        );
    }
}
