//! Every HDF5 function h5gds calls, declared once, as [`Hdf5Api`]: a table whose fields are the
//! functions (and the few global ids read), each a `Result` whose error names the symbol an HDF5
//! library lacks, so a missing function fails the call that needs it, never the whole table.
//!
//! Two ways to fill it, from the one declaration list (`__hdf5_declarations`):
//! - [`Hdf5Api::from_symbols`]: the symbols of one loaded HDF5 copy, at run time (the driver and
//!   the Python extension, which link no libhdf5; see [`super::Hdf5Library`]);
//! - [`linked_hdf5_api!`](crate::linked_hdf5_api): the addresses of the HDF5 linked into the
//!   program (array-io, through hdf5-metno's static build). A macro, expanded in the crate that
//!   links HDF5, so that no other crate's objects refer to HDF5's symbols (a cargo feature would
//!   be unified into the driver's build whenever the workspace is built at once).

use super::{haddr_t, herr_t, hid_t, hsize_t, hssize_t, htri_t, H5D_chunk_iter_op_t, H5E_walk2_t};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

/// An HDF5 function or variable the table's HDF5 library does not provide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MissingSymbol {
    /// The symbol's name, such as `H5Dread_chunk2`.
    pub symbol: &'static str,
}

impl std::fmt::Display for MissingSymbol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "this HDF5 library has no {}", self.symbol)
    }
}

impl std::error::Error for MissingSymbol {}

impl From<MissingSymbol> for String {
    fn from(missing: MissingSymbol) -> String {
        missing.to_string()
    }
}

/// The one list of HDF5's declarations, handed to `__hdf5_generate` with `$mode` (`table`: the
/// struct and its run-time filling; `linked`: an `extern "C"` block and the table filled from
/// it). Signatures are HDF5 1.14's and 2.x's (identical for every function listed).
#[doc(hidden)]
#[macro_export]
macro_rules! __hdf5_declarations {
    ($mode:ident) => {
        $crate::__hdf5_generate! { $mode
            functions {
                // Property lists and drivers.
                fn H5Pcreate(class: hid_t) -> hid_t;
                fn H5Pclose(plist: hid_t) -> herr_t;
                fn H5Pget_driver(fapl: hid_t) -> hid_t;
                fn H5Pget_driver_info(fapl: hid_t) -> *const c_void;
                fn H5Pget_driver_config_str(fapl: hid_t, buf: *mut c_char, size: usize) -> isize;
                fn H5Pget_file_locking(fapl: hid_t, use_locking: *mut bool,
                    ignore_disabled: *mut bool) -> herr_t;
                fn H5Pset_driver(fapl: hid_t, driver: hid_t, info: *const c_void) -> herr_t;
                fn H5Pset_driver_by_name(fapl: hid_t, name: *const c_char, config: *const c_char)
                    -> herr_t;
                fn H5Pset_driver_by_value(fapl: hid_t, value: c_int, config: *const c_char)
                    -> herr_t;
                fn H5Pget_userblock(fcpl: hid_t, size: *mut hsize_t) -> herr_t;
                fn H5Pget_layout(dcpl: hid_t) -> c_int;
                fn H5Pget_external_count(dcpl: hid_t) -> c_int;
                fn H5Pget_chunk(dcpl: hid_t, max_rank: c_int, dims: *mut hsize_t) -> c_int;
                fn H5Pget_nfilters(dcpl: hid_t) -> c_int;
                fn H5Pget_filter2(dcpl: hid_t, index: c_uint, flags: *mut c_uint,
                    cd_nelmts: *mut usize, cd_values: *mut c_uint, namelen: usize,
                    name: *mut c_char, filter_config: *mut c_uint) -> c_int;
                fn H5Pget_chunk_cache(dapl: hid_t, slots: *mut usize, bytes: *mut usize,
                    w0: *mut f64) -> herr_t;
                fn H5Pset_filter(dcpl: hid_t, filter: c_int, flags: c_uint, cd_nelmts: usize,
                    cd_values: *const c_uint) -> herr_t;
                fn H5PLprepend(search_path: *const c_char) -> herr_t;
                // Drivers: registration, and files opened through a driver alone. A class is an
                // `H5FD_class_t` and a file an `H5FD_t`, whose layouts the driver's `abi` owns.
                fn H5FDregister(class: *const c_void) -> hid_t;
                fn H5FDis_driver_registered_by_value(value: c_int) -> htri_t;
                // Library-private, exported by every build: the public API maps no driver id to
                // its class.
                fn H5FD_get_class(driver: hid_t) -> *const c_void;
                fn H5FDopen(name: *const c_char, flags: c_uint, fapl: hid_t, maxaddr: haddr_t)
                    -> *mut c_void;
                fn H5FDset_eoa(file: *mut c_void, kind: c_int, addr: haddr_t) -> herr_t;
                fn H5FDwrite(file: *mut c_void, kind: c_int, dxpl: hid_t, addr: haddr_t,
                    size: usize, buf: *const c_void) -> herr_t;
                fn H5FDread(file: *mut c_void, kind: c_int, dxpl: hid_t, addr: haddr_t,
                    size: usize, buf: *mut c_void) -> herr_t;
                fn H5FDclose(file: *mut c_void) -> herr_t;
                // Files, ids, datatypes.
                fn H5Fcreate(name: *const c_char, flags: c_uint, fcpl: hid_t, fapl: hid_t) -> hid_t;
                fn H5Fopen(name: *const c_char, flags: c_uint, fapl: hid_t) -> hid_t;
                fn H5Fclose(file: hid_t) -> herr_t;
                fn H5Fget_intent(file: hid_t, intent: *mut c_uint) -> herr_t;
                fn H5Fget_create_plist(file: hid_t) -> hid_t;
                fn H5Fget_access_plist(file: hid_t) -> hid_t;
                fn H5Fget_vfd_handle(file: hid_t, fapl: hid_t, handle: *mut *mut c_void)
                    -> herr_t;
                fn H5Iget_type(id: hid_t) -> c_int;
                fn H5Iis_valid(id: hid_t) -> htri_t;
                fn H5Iget_file_id(id: hid_t) -> hid_t;
                fn H5Iget_name(id: hid_t, name: *mut c_char, size: usize) -> isize;
                fn H5Tget_size(datatype: hid_t) -> usize;
                fn H5Tequal(a: hid_t, b: hid_t) -> htri_t;
                fn H5Tclose(datatype: hid_t) -> herr_t;
                // Datasets.
                fn H5Dcreate2(loc: hid_t, name: *const c_char, datatype: hid_t, space: hid_t,
                    lcpl: hid_t, dcpl: hid_t, dapl: hid_t) -> hid_t;
                fn H5Dopen2(loc: hid_t, name: *const c_char, dapl: hid_t) -> hid_t;
                fn H5Dget_space(dataset: hid_t) -> hid_t;
                fn H5Dget_type(dataset: hid_t) -> hid_t;
                fn H5Dget_create_plist(dataset: hid_t) -> hid_t;
                fn H5Dget_access_plist(dataset: hid_t) -> hid_t;
                fn H5Dget_offset(dataset: hid_t) -> haddr_t;
                fn H5Dread(dataset: hid_t, mem_type: hid_t, mem_space: hid_t, file_space: hid_t,
                    dxpl: hid_t, buf: *mut c_void) -> herr_t;
                fn H5Dwrite(dataset: hid_t, mem_type: hid_t, mem_space: hid_t, file_space: hid_t,
                    dxpl: hid_t, buf: *const c_void) -> herr_t;
                fn H5Dread_chunk2(dataset: hid_t, dxpl: hid_t, offset: *const hsize_t,
                    filters: *mut u32, buf: *mut c_void, buf_size: *mut usize) -> herr_t;
                fn H5Dwrite_chunk(dataset: hid_t, dxpl: hid_t, filters: u32, offset: *const hsize_t,
                    size: usize, buf: *const c_void) -> herr_t;
                fn H5Dget_chunk_info_by_coord(dataset: hid_t, offset: *const hsize_t,
                    filter_mask: *mut c_uint, addr: *mut haddr_t, size: *mut hsize_t) -> herr_t;
                fn H5Dchunk_iter(dataset: hid_t, dxpl: hid_t, visit: H5D_chunk_iter_op_t,
                    data: *mut c_void) -> herr_t;
                // Dataspaces and selections.
                fn H5Screate(kind: c_int) -> hid_t;
                fn H5Screate_simple(rank: c_int, dims: *const hsize_t, max: *const hsize_t)
                    -> hid_t;
                fn H5Sclose(space: hid_t) -> herr_t;
                fn H5Sget_simple_extent_dims(space: hid_t, dims: *mut hsize_t, max: *mut hsize_t)
                    -> c_int;
                fn H5Sselect_none(space: hid_t) -> herr_t;
                fn H5Sselect_hyperslab(space: hid_t, op: c_int, start: *const hsize_t,
                    stride: *const hsize_t, count: *const hsize_t, block: *const hsize_t) -> herr_t;
                fn H5Smodify_select(space: hid_t, op: c_int, other: hid_t) -> herr_t;
                fn H5Sget_select_npoints(space: hid_t) -> hssize_t;
                fn H5Sget_select_type(space: hid_t) -> c_int;
                fn H5Sget_select_bounds(space: hid_t, start: *mut hsize_t, end: *mut hsize_t)
                    -> herr_t;
                fn H5Sis_regular_hyperslab(space: hid_t) -> htri_t;
                fn H5Sget_regular_hyperslab(space: hid_t, start: *mut hsize_t, stride: *mut hsize_t,
                    count: *mut hsize_t, block: *mut hsize_t) -> herr_t;
                fn H5Ssel_iter_create(space: hid_t, elem_size: usize, flags: c_uint) -> hid_t;
                fn H5Ssel_iter_get_seq_list(iter: hid_t, max_seq: usize, max_bytes: usize,
                    nseq: *mut usize, nbytes: *mut usize, off: *mut hsize_t, len: *mut usize)
                    -> herr_t;
                fn H5Ssel_iter_close(iter: hid_t) -> herr_t;
                // The error stack.
                fn H5Epush2(stack: hid_t, file: *const c_char, func: *const c_char, line: c_uint,
                    class: hid_t, major: hid_t, minor: hid_t, format: *const c_char, ...) -> herr_t;
                fn H5Ewalk2(stack: hid_t, direction: c_int, visit: H5E_walk2_t, data: *mut c_void)
                    -> herr_t;
                fn H5Eclear2(stack: hid_t) -> herr_t;
            }
            // HDF5 1.14's names, which HDF5 2.x (the one linked into Rust programs) replaced.
            loaded_only {
                fn H5Dread_chunk(dataset: hid_t, dxpl: hid_t, offset: *const hsize_t,
                    filters: *mut u32, buf: *mut c_void) -> herr_t;
            }
            // Global ids, initialised by HDF5 before it calls a driver.
            variables {
                H5E_ERR_CLS_g: hid_t;
                H5E_VFL_g: hid_t;
                H5E_BADVALUE_g: hid_t;
                H5E_CANTOPENFILE_g: hid_t;
                H5E_READERROR_g: hid_t;
                H5E_WRITEERROR_g: hid_t;
                H5E_OVERFLOW_g: hid_t;
                H5E_SYSERRSTR_g: hid_t;
                H5P_CLS_FILE_ACCESS_ID_g: hid_t;
            }
        }
    };
}

/// What `__hdf5_declarations` generates: in mode `table`, [`Hdf5Api`] and its run-time filling;
/// in mode `linked`, the `extern "C"` block of a program that links HDF5 and `linked_table()`.
#[doc(hidden)]
#[macro_export]
macro_rules! __hdf5_generate {
    (table
        functions { $(fn $f:ident ( $($fp:tt)* ) -> $fr:ty;)* }
        loaded_only { $(fn $l:ident ( $($lp:tt)* ) -> $lr:ty;)* }
        variables { $($v:ident : $vt:ty;)* }
    ) => {
        /// The HDF5 functions h5gds calls, from one HDF5 library, each named as in C (`H5Dread`):
        /// the function, or which symbol is missing. Fields are `Copy`: `(api.H5Dread?)(...)`.
        #[allow(non_snake_case)]
        pub struct Hdf5Api {
            $(pub $f: Result<unsafe extern "C" fn($($fp)*) -> $fr, MissingSymbol>,)*
            $(pub $l: Result<unsafe extern "C" fn($($lp)*) -> $lr, MissingSymbol>,)*
            $(pub $v: Result<*const $vt, MissingSymbol>,)*
        }

        impl Hdf5Api {
            /// The table as `symbol` finds each name in one HDF5 library (null-free addresses).
            pub fn from_symbols(mut symbol: impl FnMut(&CStr) -> Option<*mut c_void>) -> Hdf5Api {
                Hdf5Api {
                    $($f: match symbol($crate::__hdf5_c_name!($f)) {
                        // SAFETY: the declaration list gives this symbol's C signature.
                        Some(p) => Ok(unsafe {
                            std::mem::transmute::<
                                *mut c_void,
                                unsafe extern "C" fn($($fp)*) -> $fr,
                            >(p)
                        }),
                        None => Err(MissingSymbol { symbol: stringify!($f) }),
                    },)*
                    $($l: match symbol($crate::__hdf5_c_name!($l)) {
                        // SAFETY: the declaration list gives this symbol's C signature.
                        Some(p) => Ok(unsafe {
                            std::mem::transmute::<
                                *mut c_void,
                                unsafe extern "C" fn($($lp)*) -> $lr,
                            >(p)
                        }),
                        None => Err(MissingSymbol { symbol: stringify!($l) }),
                    },)*
                    $($v: symbol($crate::__hdf5_c_name!($v))
                        .map(|p| p as *const $vt)
                        .ok_or(MissingSymbol { symbol: stringify!($v) }),)*
                }
            }
        }
    };
    (linked
        functions { $(fn $f:ident ( $($fp:tt)* ) -> $fr:ty;)* }
        loaded_only { $(fn $l:ident ( $($lp:tt)* ) -> $lr:ty;)* }
        variables { $($v:ident : $vt:ty;)* }
    ) => {
        #[allow(non_upper_case_globals, clippy::missing_safety_doc)]
        mod linked_hdf5_symbols {
            use $crate::hdf5::api::{Hdf5Api, MissingSymbol};
            #[allow(unused_imports)]
            use $crate::hdf5::{
                haddr_t, herr_t, hid_t, hsize_t, hssize_t, htri_t, H5D_chunk_iter_op_t,
                H5E_walk2_t,
            };
            #[allow(unused_imports)]
            use std::ffi::{c_char, c_int, c_uint, c_void};

            extern "C" {
                $(fn $f($($fp)*) -> $fr;)*
                $(static $v: $vt;)*
            }

            /// The table of the HDF5 linked into this program: every function it links.
            pub fn linked_table() -> Hdf5Api {
                Hdf5Api {
                    $($f: Ok($f as unsafe extern "C" fn($($fp)*) -> $fr),)*
                    $($l: Err(MissingSymbol { symbol: stringify!($l) }),)*
                    $($v: Ok(&raw const $v),)*
                }
            }
        }
    };
}

/// `name` as a C string literal (`H5Dread` -> `c"H5Dread"`).
#[doc(hidden)]
#[macro_export]
macro_rules! __hdf5_c_name {
    ($name:ident) => {
        const {
            match ::std::ffi::CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes())
            {
                Ok(name) => name,
                Err(_) => panic!("a symbol name holds a NUL byte"),
            }
        }
    };
}

__hdf5_declarations!(table);

// SAFETY: the table holds addresses of functions and global variables of a loaded (or linked)
// library that is never unloaded; calling and reading them from any thread is what HDF5's own
// callers do (HDF5 serialises itself, or its caller holds its lock).
unsafe impl Send for Hdf5Api {}
// SAFETY: as above; the table is immutable after construction.
unsafe impl Sync for Hdf5Api {}

/// The table of the HDF5 linked into the program that invokes this macro (one that links HDF5
/// statically, such as array-io through hdf5-metno), once per process: `fn linked_hdf5() ->
/// &'static Hdf5Api` in the invoking module. Only a crate that links an HDF5 may invoke it; the
/// driver and the Python extension never do (they link no libhdf5).
#[macro_export]
macro_rules! linked_hdf5_api {
    () => {
        $crate::__hdf5_declarations!(linked);

        /// The functions of the HDF5 linked into this program.
        pub fn linked_hdf5() -> &'static $crate::hdf5::api::Hdf5Api {
            static TABLE: std::sync::OnceLock<$crate::hdf5::api::Hdf5Api> =
                std::sync::OnceLock::new();
            TABLE.get_or_init(linked_hdf5_symbols::linked_table)
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_symbol_fails_only_its_own_field_naming_it() {
        let mut asked = Vec::new();
        // Never called: a non-null address stands for every symbol found.
        let found = std::ptr::NonNull::<u8>::dangling()
            .as_ptr()
            .cast::<c_void>();
        let api = Hdf5Api::from_symbols(|name| {
            asked.push(name.to_str().unwrap_or_default().to_string());
            (name != c"H5Dread_chunk2").then_some(found)
        });
        let missing = api.H5Dread_chunk2.err();
        assert_eq!(
            missing,
            Some(MissingSymbol {
                symbol: "H5Dread_chunk2"
            })
        );
        assert_eq!(
            String::from(missing.unwrap_or(MissingSymbol { symbol: "" })),
            "this HDF5 library has no H5Dread_chunk2"
        );
        assert!(api.H5Dread.is_ok() && api.H5Dread_chunk.is_ok() && api.H5E_VFL_g.is_ok());
        // Each symbol asked for once, by its C name.
        let mut distinct = asked.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), asked.len(), "{asked:?}");
        assert!(asked.iter().all(|name| name.starts_with("H5")), "{asked:?}");
        assert!(asked.len() > 60, "{}", asked.len());
    }
}
