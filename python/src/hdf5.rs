//! Dataset reads and writes through the HDF5 library h5py loaded, with its functions resolved at
//! run time (`h5gds_runtime::hdf5::primary_symbol`): the extension links no libhdf5, exactly like the driver.
//!
//! Every id and size the caller passes is checked against HDF5 before bytes move, so a wrong
//! argument is an error, never a write past a buffer. The caller holds h5py's lock (`phil`),
//! which serialises all calls into that HDF5.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

pub type Hid = i64;
type Herr = c_int;
type Hsize = u64;

const H5P_DEFAULT: Hid = 0;
const H5E_DEFAULT: Hid = 0;
const H5I_DATATYPE: c_int = 3;
const H5I_DATASET: c_int = 5;
const H5S_SCALAR: c_int = 0;
const H5S_SELECT_SET: c_int = 0;
const H5E_WALK_DOWNWARD: c_int = 1;
/// HDF5's largest rank (checked against real headers by tests/abi_layout.rs).
const MAX_RANK: usize = h5gds_runtime::hdf5::H5S_MAX_RANK;

#[repr(C)]
struct ErrorRecord {
    cls_id: Hid,
    maj_num: Hid,
    min_num: Hid,
    line: c_uint,
    func_name: *const c_char,
    file_name: *const c_char,
    desc: *const c_char,
}

type Walk = unsafe extern "C" fn(c_uint, *const ErrorRecord, *mut c_void) -> Herr;
type Io = unsafe extern "C" fn(Hid, Hid, Hid, Hid, Hid, *mut c_void) -> Herr;

/// The HDF5 functions this module calls, from h5py's HDF5.
struct Api {
    iget_type: unsafe extern "C" fn(Hid) -> c_int,
    dget_space: unsafe extern "C" fn(Hid) -> Hid,
    sget_simple_extent_dims: unsafe extern "C" fn(Hid, *mut Hsize, *mut Hsize) -> c_int,
    sselect_hyperslab: unsafe extern "C" fn(
        Hid,
        c_int,
        *const Hsize,
        *const Hsize,
        *const Hsize,
        *const Hsize,
    ) -> Herr,
    sget_select_npoints: unsafe extern "C" fn(Hid) -> i64,
    screate: unsafe extern "C" fn(c_int) -> Hid,
    screate_simple: unsafe extern "C" fn(c_int, *const Hsize, *const Hsize) -> Hid,
    sclose: unsafe extern "C" fn(Hid) -> Herr,
    tget_size: unsafe extern "C" fn(Hid) -> usize,
    dread: Io,
    dwrite: Io,
    /// H5FDwrite(file, type, dxpl, addr, size, buf): a raw write through a file's driver.
    fdwrite: unsafe extern "C" fn(*mut c_void, c_int, Hid, u64, usize, *const c_void) -> Herr,
    ewalk2: unsafe extern "C" fn(Hid, c_int, Walk, *mut c_void) -> Herr,
    eclear2: unsafe extern "C" fn(Hid) -> Herr,
}

/// The function `name` of h5py's HDF5 as a function pointer of type `F`.
///
/// # Safety
/// `F` must be the C signature of that HDF5 function.
unsafe fn function<F: Copy>(name: &CStr) -> Result<F, String> {
    const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<*mut c_void>()) };
    let p = h5gds_runtime::hdf5::primary_symbol(name).ok_or_else(|| {
        format!(
            "{} not found in the HDF5 library h5gds registered with",
            name.to_string_lossy()
        )
    })?;
    // SAFETY: a non-null code address, of the signature the caller names.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

fn api() -> Result<&'static Api, String> {
    static API: std::sync::OnceLock<Result<Api, String>> = std::sync::OnceLock::new();
    API.get_or_init(|| {
        // SAFETY: each field's type is the C signature of the HDF5 1.14/2.x function named
        // (hid_t is int64_t, hsize_t uint64_t, hssize_t int64_t, enums int).
        unsafe {
            Ok(Api {
                iget_type: function(c"H5Iget_type")?,
                dget_space: function(c"H5Dget_space")?,
                sget_simple_extent_dims: function(c"H5Sget_simple_extent_dims")?,
                sselect_hyperslab: function(c"H5Sselect_hyperslab")?,
                sget_select_npoints: function(c"H5Sget_select_npoints")?,
                screate: function(c"H5Screate")?,
                screate_simple: function(c"H5Screate_simple")?,
                sclose: function(c"H5Sclose")?,
                tget_size: function(c"H5Tget_size")?,
                dread: function(c"H5Dread")?,
                dwrite: function(c"H5Dwrite")?,
                fdwrite: function(c"H5FDwrite")?,
                ewalk2: function(c"H5Ewalk2")?,
                eclear2: function(c"H5Eclear2")?,
            })
        }
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// Why a call failed: a wrong argument (the caller's mistake) or HDF5 refusing the operation.
#[derive(Debug)]
pub enum IoError {
    Argument(String),
    Hdf5(String),
}

impl Api {
    /// HDF5's error stack as one line (most general first), and the stack cleared.
    fn stack(&self) -> String {
        unsafe extern "C" fn collect(
            _n: c_uint,
            rec: *const ErrorRecord,
            data: *mut c_void,
        ) -> Herr {
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
                    // SAFETY: as above.
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
        let mut lines: Vec<String> = Vec::new();
        // SAFETY: the callback only appends to `lines`, alive for the call.
        unsafe {
            (self.ewalk2)(
                H5E_DEFAULT,
                H5E_WALK_DOWNWARD,
                collect,
                (&mut lines as *mut Vec<String>).cast(),
            );
            (self.eclear2)(H5E_DEFAULT);
        }
        if lines.is_empty() {
            "no HDF5 error message".into()
        } else {
            lines.join("; ")
        }
    }
}

/// H5FD_MEM_DRAW: raw data, the type of the bytes a collective write puts into a dataset.
const H5FD_MEM_DRAW: c_int = 3;

/// Writes `size` bytes from `buffer` at file address `addr` through the driver of `file` (an
/// `H5FD_t *` from `H5FDopen` in h5py's HDF5): the raw writes of a collective `to_file`, which
/// write no HDF5 metadata. The caller holds h5py's lock.
///
/// # Safety
/// `file` must be an open `H5FD_t *` of h5py's HDF5, and `buffer` valid for `size` bytes (host
/// memory, or device memory when the file's driver is `gds`).
pub unsafe fn driver_write(
    file: usize,
    addr: u64,
    size: usize,
    buffer: *const c_void,
) -> Result<(), String> {
    let api = api()?;
    // SAFETY: as the caller guarantees; H5P_DEFAULT is the default transfer list.
    let status = unsafe {
        (api.fdwrite)(
            file as *mut c_void,
            H5FD_MEM_DRAW,
            H5P_DEFAULT,
            addr,
            size,
            buffer,
        )
    };
    if status < 0 {
        return Err(api.stack());
    }
    Ok(())
}

/// A dataspace closed when dropped.
struct Space(Hid, &'static Api);

impl Space {
    /// Owns the id a dataspace call returned, or reports HDF5's error for a failed one.
    fn new(id: Hid, api: &'static Api) -> Result<Space, IoError> {
        if id < 0 {
            return Err(IoError::Hdf5(api.stack()));
        }
        Ok(Space(id, api))
    }
}

impl Drop for Space {
    fn drop(&mut self) {
        // SAFETY: a dataspace id this module created and owns.
        unsafe { (self.1.sclose)(self.0) };
    }
}

/// One read or write: a dataset, the memory type, the file selection (a hyperslab: start, step,
/// count per axis), the memory shape, and the buffer.
pub struct Transfer<'a> {
    pub write: bool,
    pub dataset: Hid,
    pub mem_type: Hid,
    pub start: &'a [u64],
    pub step: &'a [u64],
    pub count: &'a [u64],
    pub mem_shape: &'a [u64],
    pub buffer: usize,
    pub nbytes: usize,
}

/// The checked arguments of one transfer, ready to run without the GIL.
pub struct Prepared {
    api: &'static Api,
    io: Io,
    dataset: Hid,
    mem_type: Hid,
    file_space: Space,
    mem_space: Space,
    buffer: usize,
    rank: usize,
}

fn argument(message: String) -> IoError {
    IoError::Argument(message)
}

/// Checks that `dataset` is an open dataset and `mem_type` a datatype, and returns the dataset's
/// dataspace and its dimensions.
fn dataset_space(
    api: &'static Api,
    dataset: Hid,
    mem_type: Hid,
) -> Result<(Space, Vec<Hsize>), IoError> {
    // SAFETY: plain queries; an invalid id yields an error code (the stack is cleared below).
    let (dset_kind, type_kind) = unsafe { ((api.iget_type)(dataset), (api.iget_type)(mem_type)) };
    if dset_kind != H5I_DATASET || type_kind != H5I_DATATYPE {
        api.stack();
        return Err(argument(format!(
            "id {dataset} is not an open dataset or id {mem_type} not a datatype"
        )));
    }
    // SAFETY: a valid dataset id.
    let file_space = Space::new(unsafe { (api.dget_space)(dataset) }, api)?;
    let mut dims = [0 as Hsize; MAX_RANK];
    // SAFETY: `dims` has room for HDF5's largest rank.
    let rank = unsafe {
        (api.sget_simple_extent_dims)(file_space.0, dims.as_mut_ptr(), std::ptr::null_mut())
    };
    if rank < 0 {
        return Err(IoError::Hdf5(api.stack()));
    }
    Ok((file_space, dims[..rank as usize].to_vec()))
}

/// Checks every argument against HDF5 and builds the dataspaces. `Ok(None)`: nothing to move
/// (an empty selection).
pub fn prepare(t: &Transfer) -> Result<Option<Prepared>, IoError> {
    let api = api().map_err(IoError::Hdf5)?;
    let (file_space, dims) = dataset_space(api, t.dataset, t.mem_type)?;
    let dims = &dims[..];
    if [t.start.len(), t.step.len(), t.count.len()] != [dims.len(); 3] {
        return Err(argument(format!(
            "the selection has {} axes, the dataset {}",
            t.count.len(),
            dims.len()
        )));
    }
    let mut elements: u64 = 1;
    for (axis, &dim) in dims.iter().enumerate() {
        let (start, step, count) = (t.start[axis], t.step[axis], t.count[axis]);
        let last = (count.max(1) - 1)
            .checked_mul(step)
            .and_then(|d| d.checked_add(start));
        if step == 0 || (count > 0 && last.is_none_or(|l| l >= dim)) {
            return Err(argument(format!(
                "selection out of range on axis {axis}: start {start}, step {step}, count {count} \
                 for a size of {dim}"
            )));
        }
        elements = elements.saturating_mul(count);
    }
    let mem_elements = t.mem_shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d));
    if mem_elements != Some(elements) || t.mem_shape.len() > MAX_RANK {
        return Err(argument(format!(
            "the memory shape {:?} does not hold the {elements} elements selected",
            t.mem_shape
        )));
    }
    // SAFETY: a valid datatype id.
    let type_size = unsafe { (api.tget_size)(t.mem_type) };
    let needed = (elements as u128) * (type_size as u128);
    if type_size == 0 || needed != t.nbytes as u128 {
        api.stack();
        return Err(argument(format!(
            "the buffer has {} bytes, the selection needs {needed} ({elements} elements of {type_size} bytes)",
            t.nbytes
        )));
    }
    if elements == 0 {
        return Ok(None);
    }
    // A selection of everything stays HDF5's "all" selection (the dataspace's own), which the
    // driver reads as one request split over its threads, as it does for h5py's own reads.
    let whole = (0..dims.len())
        .all(|i| t.start[i] == 0 && t.count[i] == dims[i] && (t.step[i] == 1 || dims[i] <= 1));
    if !dims.is_empty() && !whole {
        // SAFETY: arrays of the space's rank; block NULL means blocks of 1.
        let status = unsafe {
            (api.sselect_hyperslab)(
                file_space.0,
                H5S_SELECT_SET,
                t.start.as_ptr(),
                t.step.as_ptr(),
                t.count.as_ptr(),
                std::ptr::null(),
            )
        };
        if status < 0 {
            return Err(IoError::Hdf5(api.stack()));
        }
    }
    // SAFETY: a valid dataspace.
    let selected = unsafe { (api.sget_select_npoints)(file_space.0) };
    if selected != elements as i64 {
        api.stack();
        return Err(argument(format!(
            "the dataset has no data to select (its dataspace holds {selected} elements, the \
             selection {elements})"
        )));
    }
    // SAFETY: creating a dataspace from a shape of at most MAX_RANK axes.
    let mem_space = Space::new(
        unsafe {
            if t.mem_shape.is_empty() {
                (api.screate)(H5S_SCALAR)
            } else {
                (api.screate_simple)(
                    t.mem_shape.len() as c_int,
                    t.mem_shape.as_ptr(),
                    std::ptr::null(),
                )
            }
        },
        api,
    )?;
    Ok(Some(Prepared {
        api,
        io: if t.write { api.dwrite } else { api.dread },
        dataset: t.dataset,
        mem_type: t.mem_type,
        file_space,
        mem_space,
        buffer: t.buffer,
        rank: dims.len(),
    }))
}

impl Prepared {
    /// The dataset's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Moves the elements of the file hyperslab (`start`, `step`, `count`: a part of the
    /// prepared selection) between the dataset and a host buffer holding them in row-major
    /// order. Runs without the GIL; h5py's lock stays held.
    ///
    /// # Safety
    /// `buffer` must hold the hyperslab's elements in the memory type (writable for reads), and
    /// the hyperslab must lie inside the dataset (a part of the checked selection).
    pub unsafe fn run_hyperslab(
        &self,
        start: &[u64],
        step: &[u64],
        count: &[u64],
        buffer: *mut c_void,
    ) -> Result<(), String> {
        let api = self.api;
        let failed = |_: IoError| api.stack();
        if self.rank == 0 {
            // A scalar dataset has one element: the prepared spaces select it.
            // SAFETY: as the caller guarantees.
            return unsafe { self.io_with(self.mem_space.0, self.file_space.0, buffer) };
        }
        // SAFETY: a dataset id checked in `prepare`.
        let file = Space::new(unsafe { (api.dget_space)(self.dataset) }, api).map_err(failed)?;
        // SAFETY: arrays of the dataset's rank (the caller's part of the checked selection).
        let status = unsafe {
            (api.sselect_hyperslab)(
                file.0,
                H5S_SELECT_SET,
                start.as_ptr(),
                step.as_ptr(),
                count.as_ptr(),
                std::ptr::null(),
            )
        };
        if status < 0 {
            return Err(api.stack());
        }
        let elements: u64 = count.iter().product();
        // SAFETY: a one-dimensional space of the hyperslab's element count.
        let memory = Space::new(
            unsafe { (api.screate_simple)(1, &elements, std::ptr::null()) },
            api,
        )
        .map_err(failed)?;
        // SAFETY: as the caller guarantees.
        unsafe { self.io_with(memory.0, file.0, buffer) }
    }

    /// H5Dread/H5Dwrite with the given spaces.
    ///
    /// # Safety
    /// `buffer` must hold the memory selection's elements in the memory type.
    unsafe fn io_with(&self, memory: Hid, file: Hid, buffer: *mut c_void) -> Result<(), String> {
        // SAFETY: ids checked in `prepare` or made from them; the buffer as the caller
        // guarantees.
        let status = unsafe {
            (self.io)(
                self.dataset,
                self.mem_type,
                memory,
                file,
                H5P_DEFAULT,
                buffer,
            )
        };
        if status < 0 {
            Err(self.api.stack())
        } else {
            Ok(())
        }
    }

    /// Moves the bytes (H5Dread or H5Dwrite). Runs without the GIL; h5py's lock stays held.
    ///
    /// # Safety
    /// The buffer must hold `nbytes` (checked in `prepare`) valid, writable (for reads) bytes for
    /// the duration of the call.
    pub unsafe fn run(&self) -> Result<(), String> {
        // SAFETY: ids checked in `prepare`; the buffer as the caller guarantees.
        let status = unsafe {
            (self.io)(
                self.dataset,
                self.mem_type,
                self.mem_space.0,
                self.file_space.0,
                H5P_DEFAULT,
                self.buffer as *mut c_void,
            )
        };
        if status < 0 {
            Err(self.api.stack())
        } else {
            Ok(())
        }
    }
}

/// The driver the file holding `dataset` is open with: `None` when it is h5gds's `gds` driver,
/// else its name (or a description when HDF5 cannot tell). The caller holds h5py's lock.
pub fn other_driver(dataset: Hid) -> Result<Option<String>, IoError> {
    let api = api().map_err(IoError::Hdf5)?;
    type IdOf = unsafe extern "C" fn(Hid) -> Hid;
    type Close = unsafe extern "C" fn(Hid) -> Herr;
    type ClassOf = unsafe extern "C" fn(Hid) -> *const h5gds::abi::H5FD_class_t;
    // SAFETY: the C signatures of these HDF5 1.14/2.x functions (H5FD_get_class is
    // library-private but exported by every shared build).
    let calls = unsafe {
        (|| -> Result<_, String> {
            Ok((
                function::<IdOf>(c"H5Iget_file_id")?,
                function::<IdOf>(c"H5Fget_access_plist")?,
                function::<IdOf>(c"H5Pget_driver")?,
                function::<ClassOf>(c"H5FD_get_class")?,
                function::<Close>(c"H5Pclose")?,
                function::<Close>(c"H5Fclose")?,
            ))
        })()
    };
    let Ok((file_of, access_of, driver_of, class_of, close_plist, close_file)) = calls else {
        return Ok(Some("(unknown: HDF5 cannot tell which)".into()));
    };
    // SAFETY: plain queries on ids HDF5 checks; every id opened here is closed here.
    unsafe {
        let file = file_of(dataset);
        if file < 0 {
            return Err(IoError::Hdf5(api.stack()));
        }
        let fapl = access_of(file);
        let driver = if fapl < 0 { -1 } else { driver_of(fapl) };
        let class = if driver < 0 {
            std::ptr::null()
        } else {
            class_of(driver)
        };
        if fapl >= 0 {
            close_plist(fapl);
        }
        close_file(file);
        if class.is_null() {
            api.stack();
            return Ok(Some("(unknown: HDF5 cannot tell which)".into()));
        }
        if h5gds::h5gds_library(class).is_ok() {
            return Ok(None);
        }
        let name = (*class).name;
        Ok(Some(if name.is_null() {
            "(unnamed)".into()
        } else {
            CStr::from_ptr(name).to_string_lossy().into_owned()
        }))
    }
}

/// The raw chunk calls of h5py's HDF5 (1.14: `H5Dread_chunk`; 2.x: `H5Dread_chunk2`, which
/// also takes the buffer's size), resolved at the first compressed device read.
struct ChunkApi {
    info_by_coord:
        unsafe extern "C" fn(Hid, *const Hsize, *mut c_uint, *mut u64, *mut Hsize) -> Herr,
    read: ReadChunk,
}

#[derive(Clone, Copy)]
enum ReadChunk {
    V1(unsafe extern "C" fn(Hid, Hid, *const Hsize, *mut u32, *mut c_void) -> Herr),
    V2(unsafe extern "C" fn(Hid, Hid, *const Hsize, *mut u32, *mut c_void, *mut usize) -> Herr),
}

fn chunk_api() -> Result<&'static ChunkApi, String> {
    static API: std::sync::OnceLock<Result<ChunkApi, String>> = std::sync::OnceLock::new();
    API.get_or_init(|| {
        // SAFETY: each type is the C signature of the HDF5 function named (haddr_t is
        // uint64_t, uint32_t filter masks).
        unsafe {
            let read = match function(c"H5Dread_chunk2") {
                Ok(f) => ReadChunk::V2(f),
                Err(_) => ReadChunk::V1(function(c"H5Dread_chunk")?),
            };
            Ok(ChunkApi {
                info_by_coord: function(c"H5Dget_chunk_info_by_coord")?,
                read,
            })
        }
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// HDF5's "undefined address": a chunk never written.
const HADDR_UNDEF: u64 = u64::MAX;

/// The stored size, filter mask and file address of the chunk whose first element is `offset`, or
/// `None` when it was never written. The caller holds h5py's lock.
pub fn chunk_location(
    dataset: Hid,
    offset: &[u64],
) -> Result<Option<h5gds_chunk_codec::StoredChunk>, String> {
    let (api, chunks) = (api()?, chunk_api()?);
    let (mut mask, mut addr, mut size): (c_uint, u64, Hsize) = (0, HADDR_UNDEF, 0);
    // SAFETY: `offset` has one entry per dimension of the dataset (the caller's chunk grid);
    // the out-pointers are valid.
    let status = unsafe {
        (chunks.info_by_coord)(dataset, offset.as_ptr(), &mut mask, &mut addr, &mut size)
    };
    if status < 0 {
        return Err(format!(
            "H5Dget_chunk_info_by_coord for the chunk at {offset:?} failed: {}",
            api.stack()
        ));
    }
    Ok(
        (addr != HADDR_UNDEF && size > 0).then_some(h5gds_chunk_codec::StoredChunk {
            size: size as usize,
            mask,
            address: addr,
        }),
    )
}

/// The file holding `dataset`, opened anew for reading, when its chunks may be read from it
/// directly at the addresses HDF5 reports: the file open read-only (HDF5 then holds no newer
/// bytes than the file's), through sec2 or h5gds's `gds` driver (whose addresses are the file's
/// offsets), with no user block. `None` otherwise, or when HDF5 cannot tell. The file is
/// `h5gds_chunk_codec::reopen`ed. The caller holds h5py's lock.
pub fn direct_file(dataset: Hid) -> Option<std::fs::File> {
    match other_driver(dataset) {
        Ok(None) => {}
        Ok(Some(name)) if name == "sec2" => {}
        _ => return None,
    }
    let api = api().ok()?;
    type IdOf = unsafe extern "C" fn(Hid) -> Hid;
    type Close = unsafe extern "C" fn(Hid) -> Herr;
    type Intent = unsafe extern "C" fn(Hid, *mut c_uint) -> Herr;
    type Userblock = unsafe extern "C" fn(Hid, *mut Hsize) -> Herr;
    type Handle = unsafe extern "C" fn(Hid, Hid, *mut *mut c_void) -> Herr;
    // SAFETY: the C signatures of these HDF5 1.14/2.x functions.
    let (file_of, intent_of, create_of, userblock_of, handle_of, close_plist, close_file) = unsafe {
        (
            function::<IdOf>(c"H5Iget_file_id").ok()?,
            function::<Intent>(c"H5Fget_intent").ok()?,
            function::<IdOf>(c"H5Fget_create_plist").ok()?,
            function::<Userblock>(c"H5Pget_userblock").ok()?,
            function::<Handle>(c"H5Fget_vfd_handle").ok()?,
            function::<Close>(c"H5Pclose").ok()?,
            function::<Close>(c"H5Fclose").ok()?,
        )
    };
    /// HDF5's H5F_ACC_RDWR.
    const READ_WRITE: c_uint = 0x0001;
    // SAFETY: plain queries on ids HDF5 checks; every id opened here is closed here; the
    // handle sec2 and gds hand out points to the file's descriptor (an int), read at once.
    let fd = unsafe {
        let file = file_of(dataset);
        if file < 0 {
            api.stack();
            return None;
        }
        let mut intent: c_uint = READ_WRITE;
        let mut userblock: Hsize = 1;
        let fcpl = create_of(file);
        if fcpl >= 0 {
            userblock_of(fcpl, &mut userblock);
            close_plist(fcpl);
        }
        let mut handle: *mut c_void = std::ptr::null_mut();
        let ok = intent_of(file, &mut intent) >= 0
            && intent & READ_WRITE == 0
            && userblock == 0
            && handle_of(file, H5P_DEFAULT, &mut handle) >= 0
            && !handle.is_null();
        let fd = ok.then(|| *handle.cast::<c_int>());
        close_file(file);
        api.stack();
        fd?
    };
    h5gds_chunk_codec::reopen(fd)
}

/// Reads the stored (still compressed) bytes of the chunk at `offset` into `buf`, device
/// memory when the file is open with the `gds` driver; returns the chunk's filter mask. The
/// caller holds h5py's lock.
///
/// # Safety
/// `buf` must be valid for writes of `size` bytes, the chunk's stored size.
pub unsafe fn read_chunk(
    dataset: Hid,
    offset: &[u64],
    buf: *mut c_void,
    size: usize,
) -> Result<u32, String> {
    let (api, chunks) = (api()?, chunk_api()?);
    let mut mask = 0u32;
    let mut len = size;
    // SAFETY: `offset` has one entry per dimension; `buf` as the caller guarantees (HDF5 2.x
    // also refuses a chunk larger than `len`).
    let status = unsafe {
        match chunks.read {
            ReadChunk::V2(f) => f(
                dataset,
                H5P_DEFAULT,
                offset.as_ptr(),
                &mut mask,
                buf,
                &mut len,
            ),
            ReadChunk::V1(f) => f(dataset, H5P_DEFAULT, offset.as_ptr(), &mut mask, buf),
        }
    };
    if status < 0 {
        return Err(format!(
            "H5Dread_chunk for the chunk at {offset:?} failed: {}",
            api.stack()
        ));
    }
    Ok(mask)
}

/// `H5Dwrite_chunk(dset, dxpl, filter_mask, offset, size, buf)`, resolved at the first
/// compressed `to_file` (the same signature in HDF5 1.14 and 2.x).
type WriteChunk = unsafe extern "C" fn(Hid, Hid, u32, *const Hsize, usize, *const c_void) -> Herr;

fn write_chunk_api() -> Result<WriteChunk, String> {
    static API: std::sync::OnceLock<Result<WriteChunk, String>> = std::sync::OnceLock::new();
    // SAFETY: the C signature of H5Dwrite_chunk.
    API.get_or_init(|| unsafe { function(c"H5Dwrite_chunk") })
        .clone()
}

/// Writes `size` stored (already filtered) bytes at `buf` as the chunk at `offset`, with filter
/// mask 0 (every filter applied). The caller holds h5py's lock.
///
/// # Safety
/// `buf` must be valid for reads of `size` bytes.
pub unsafe fn write_chunk(
    dataset: Hid,
    offset: &[u64],
    buf: *const c_void,
    size: usize,
) -> Result<(), String> {
    let (api, write) = (api()?, write_chunk_api()?);
    // SAFETY: `offset` has one entry per dimension of the dataset (the caller's chunk grid);
    // `buf` as the caller guarantees.
    let status = unsafe { write(dataset, H5P_DEFAULT, 0, offset.as_ptr(), size, buf) };
    if status < 0 {
        return Err(format!(
            "H5Dwrite_chunk for the chunk at {offset:?} failed: {}",
            api.stack()
        ));
    }
    Ok(())
}

/// The checks and dataspaces of a gather (`crate::gather`): rows of the dataset's first axis
/// given as sorted, disjoint runs (`runs`: first row and number of rows each), the other axes
/// selected by one hyperslab (`rest_start`, `rest_step`, `rest_count`), read with one H5Dread
/// into `nbytes` at `buffer`, which holds the runs' rows one after another in file order. The
/// file selection is the union of one hyperslab per run; the memory selection all of a
/// one-dimensional space of as many elements. `Ok(None)`: nothing to move. The caller holds
/// h5py's lock.
pub struct GatherRead<'a> {
    pub dataset: Hid,
    pub mem_type: Hid,
    pub runs: &'a [(u64, u64)],
    pub rest_start: &'a [u64],
    pub rest_step: &'a [u64],
    pub rest_count: &'a [u64],
    pub buffer: usize,
    pub nbytes: usize,
}

/// HDF5's `H5S_SELECT_OR`: a hyperslab added to the selection.
const H5S_SELECT_OR: c_int = 1;

/// Checks a gather's ids, runs and sizes against HDF5 and builds its dataspaces (see
/// [`GatherRead`]); what it returns runs with [`Prepared::run`].
pub fn prepare_gather(g: &GatherRead) -> Result<Option<Prepared>, IoError> {
    let api = api().map_err(IoError::Hdf5)?;
    let (file_space, dims) = dataset_space(api, g.dataset, g.mem_type)?;
    let dims = &dims[..];
    let Some((&rows, rest_dims)) = dims.split_first() else {
        return Err(argument(
            "a gather selects rows of the first axis, and the dataset is a scalar".into(),
        ));
    };
    if [g.rest_start.len(), g.rest_step.len(), g.rest_count.len()] != [rest_dims.len(); 3] {
        return Err(argument(format!(
            "the selection of the axes after the first has {} axes, the dataset {}",
            g.rest_count.len(),
            rest_dims.len()
        )));
    }
    let mut row_elements: u64 = 1;
    for (axis, &dim) in rest_dims.iter().enumerate() {
        let (start, step, count) = (g.rest_start[axis], g.rest_step[axis], g.rest_count[axis]);
        let last = (count.max(1) - 1)
            .checked_mul(step)
            .and_then(|d| d.checked_add(start));
        if step == 0 || (count > 0 && last.is_none_or(|l| l >= dim)) {
            return Err(argument(format!(
                "selection out of range on axis {}: start {start}, step {step}, count {count} \
                 for a size of {dim}",
                axis + 1
            )));
        }
        row_elements = row_elements.saturating_mul(count);
    }
    let mut selected_rows: u64 = 0;
    let mut end = 0;
    for &(first, length) in g.runs {
        let past = first.checked_add(length);
        if length == 0 || first < end || past.is_none_or(|p| p > rows) {
            return Err(argument(format!(
                "rows {first}..{} are not a run after row {end} inside the first axis of size \
                 {rows}",
                first.saturating_add(length)
            )));
        }
        end = first + length;
        selected_rows += length;
    }
    let elements = selected_rows.saturating_mul(row_elements);
    // SAFETY: a valid datatype id.
    let type_size = unsafe { (api.tget_size)(g.mem_type) };
    let needed = (elements as u128) * (type_size as u128);
    if type_size == 0 || needed != g.nbytes as u128 {
        api.stack();
        return Err(argument(format!(
            "the buffer has {} bytes, the gather needs {needed} ({elements} elements of \
             {type_size} bytes)",
            g.nbytes
        )));
    }
    if elements == 0 {
        return Ok(None);
    }
    let mut rows_slab = RunsSlab {
        api,
        modify: modify_select()?,
        dims,
        start: [0; MAX_RANK],
        step: [1; MAX_RANK],
        count: [0; MAX_RANK],
    };
    rows_slab.start[1..dims.len()].copy_from_slice(g.rest_start);
    rows_slab.step[1..dims.len()].copy_from_slice(g.rest_step);
    rows_slab.count[1..dims.len()].copy_from_slice(g.rest_count);
    rows_slab.select(file_space.0, g.runs)?;
    // SAFETY: a valid dataspace.
    let selected = unsafe { (api.sget_select_npoints)(file_space.0) };
    if selected != elements as i64 {
        api.stack();
        return Err(argument(format!(
            "the dataset has no data to select (its selection holds {selected} elements, the \
             gather {elements})"
        )));
    }
    // SAFETY: a one-dimensional space of the gather's element count.
    let mem_space = Space::new(
        unsafe { (api.screate_simple)(1, &elements, std::ptr::null()) },
        api,
    )?;
    Ok(Some(Prepared {
        api,
        io: api.dread,
        dataset: g.dataset,
        mem_type: g.mem_type,
        file_space,
        mem_space,
        buffer: g.buffer,
        rank: dims.len(),
    }))
}

/// `H5Smodify_select(space1, op, space2)`: `space2`'s selection combined into `space1`'s.
type ModifySelect = unsafe extern "C" fn(Hid, c_int, Hid) -> Herr;

/// H5Smodify_select of h5py's HDF5 (1.10.7 and later), resolved at the first gather.
fn modify_select() -> Result<ModifySelect, IoError> {
    static MODIFY: std::sync::OnceLock<Result<ModifySelect, String>> = std::sync::OnceLock::new();
    MODIFY
        // SAFETY: the C signature of H5Smodify_select (hid_t, H5S_seloper_t, hid_t).
        .get_or_init(|| unsafe { function(c"H5Smodify_select") })
        .clone()
        .map_err(IoError::Hdf5)
}

/// Runs of rows below 16 are added to a selection one by one; longer lists are split in two
/// halves selected in two dataspaces and combined, since HDF5 merges each hyperslab added to a
/// selection with all the blocks it already holds (one by one, 4096 runs take a quarter of a
/// second; halving, a few milliseconds).
const RUNS_ONE_BY_ONE: usize = 16;

/// The hyperslab of a run of rows: the other axes' start, step and count fixed, the first
/// axis's set per run.
struct RunsSlab<'a> {
    api: &'static Api,
    modify: ModifySelect,
    dims: &'a [Hsize],
    start: [Hsize; MAX_RANK],
    step: [Hsize; MAX_RANK],
    count: [Hsize; MAX_RANK],
}

impl RunsSlab<'_> {
    /// Sets `space`'s selection (a dataspace of the dataset's extent) to the union of `runs`
    /// (at least one; sorted, disjoint, inside the dataset).
    fn select(&mut self, space: Hid, runs: &[(u64, u64)]) -> Result<(), IoError> {
        let api = self.api;
        if runs.len() > RUNS_ONE_BY_ONE {
            let (left, right) = runs.split_at(runs.len() / 2);
            self.select(space, left)?;
            // SAFETY: a dataspace of the dataset's extent (`dims` has its rank, at most
            // MAX_RANK axes).
            let other = Space::new(
                unsafe {
                    (api.screate_simple)(
                        self.dims.len() as c_int,
                        self.dims.as_ptr(),
                        std::ptr::null(),
                    )
                },
                api,
            )?;
            self.select(other.0, right)?;
            // SAFETY: two valid dataspaces of the same extent.
            if unsafe { (self.modify)(space, H5S_SELECT_OR, other.0) } < 0 {
                return Err(IoError::Hdf5(api.stack()));
            }
            return Ok(());
        }
        for (i, &(first, length)) in runs.iter().enumerate() {
            self.start[0] = first;
            self.count[0] = length;
            let op = if i == 0 {
                H5S_SELECT_SET
            } else {
                H5S_SELECT_OR
            };
            // SAFETY: arrays of at least the space's rank, the hyperslab inside the dataset
            // (checked by the caller); block NULL means blocks of 1.
            let status = unsafe {
                (api.sselect_hyperslab)(
                    space,
                    op,
                    self.start.as_ptr(),
                    self.step.as_ptr(),
                    self.count.as_ptr(),
                    std::ptr::null(),
                )
            };
            if status < 0 {
                return Err(IoError::Hdf5(api.stack()));
            }
        }
        Ok(())
    }
}

/// Every allocated chunk of `dataset` (chunks of `chunk` elements): its stored size, filter mask
/// and address by first element (`H5Dchunk_iter`, one call for the whole index). The caller holds
/// h5py's lock.
pub fn chunk_index(dataset: Hid, chunk: &[u64]) -> Result<h5gds_chunk_codec::ChunkIndex, String> {
    type Visit = unsafe extern "C" fn(*const Hsize, c_uint, u64, Hsize, *mut c_void) -> c_int;
    type Iterate = unsafe extern "C" fn(Hid, Hid, Visit, *mut c_void) -> Herr;
    struct Found {
        rank: usize,
        chunks: h5gds_chunk_codec::ChunkListing,
    }
    unsafe extern "C" fn visit(
        offset: *const Hsize,
        mask: c_uint,
        addr: u64,
        size: Hsize,
        data: *mut c_void,
    ) -> c_int {
        // Never unwind into HDF5: a panic stops the iteration as a failure.
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: `data` is the `Found` the caller passed, alive for the call.
            let found = unsafe { &mut *data.cast::<Found>() };
            // SAFETY: HDF5 passes one offset per axis of the dataset.
            let offset = unsafe { std::slice::from_raw_parts(offset, found.rank) };
            if addr != HADDR_UNDEF && size > 0 {
                found.chunks.add(
                    offset,
                    h5gds_chunk_codec::StoredChunk {
                        size: size as usize,
                        mask,
                        address: addr,
                    },
                );
            }
            0
        }))
        .unwrap_or(-1)
    }
    let api = api()?;
    // SAFETY: the C signature of H5Dchunk_iter (HDF5 1.14 and 2.x; the callback's size is an
    // hsize_t since 1.14.0).
    let iterate: Iterate = unsafe { function(c"H5Dchunk_iter")? };
    let mut found = Found {
        rank: chunk.len(),
        chunks: h5gds_chunk_codec::ChunkListing::new(chunk),
    };
    // SAFETY: a dataset id; the callback and its data as declared above.
    let status = unsafe {
        iterate(
            dataset,
            H5P_DEFAULT,
            visit,
            (&raw mut found).cast::<c_void>(),
        )
    };
    if status < 0 {
        return Err(format!("H5Dchunk_iter failed: {}", api.stack()));
    }
    Ok(found.chunks.finish())
}

// What the one native call of `h5gds.read`/`h5gds.write` asks about a dataset (`crate::facts`),
// each function of h5py's HDF5 resolved once. Kept together: the HDF5 binding is moving to one
// table in the runtime crate.

/// HDF5's layouts (`H5D_layout_t`).
const H5D_COMPACT: c_int = 0;
const H5D_CONTIGUOUS: c_int = 1;
const H5D_CHUNKED: c_int = 2;
/// `H5F_ACC_RDWR` and `H5F_ACC_SWMR_READ` of a file's intent.
const H5F_ACC_RDWR: c_uint = 0x0001;
const H5F_ACC_SWMR_READ: c_uint = 0x0040;

/// The HDF5 functions the dataset facts come from.
struct FactsApi {
    dget_create_plist: unsafe extern "C" fn(Hid) -> Hid,
    dget_access_plist: unsafe extern "C" fn(Hid) -> Hid,
    dget_type: unsafe extern "C" fn(Hid) -> Hid,
    dget_offset: unsafe extern "C" fn(Hid) -> u64,
    pget_layout: unsafe extern "C" fn(Hid) -> c_int,
    pget_external_count: unsafe extern "C" fn(Hid) -> c_int,
    pget_chunk: unsafe extern "C" fn(Hid, c_int, *mut Hsize) -> c_int,
    pget_nfilters: unsafe extern "C" fn(Hid) -> c_int,
    #[allow(clippy::type_complexity)] // H5Pget_filter2's C signature, as declared
    pget_filter2: unsafe extern "C" fn(
        Hid,
        c_uint,
        *mut c_uint,
        *mut usize,
        *mut c_uint,
        usize,
        *mut c_char,
        *mut c_uint,
    ) -> c_int,
    pget_chunk_cache: unsafe extern "C" fn(Hid, *mut usize, *mut usize, *mut f64) -> Herr,
    pclose: unsafe extern "C" fn(Hid) -> Herr,
    tequal: unsafe extern "C" fn(Hid, Hid) -> c_int,
    tclose: unsafe extern "C" fn(Hid) -> Herr,
    iget_file_id: unsafe extern "C" fn(Hid) -> Hid,
    iget_name: unsafe extern "C" fn(Hid, *mut c_char, usize) -> isize,
    fget_intent: unsafe extern "C" fn(Hid, *mut c_uint) -> Herr,
    fclose: unsafe extern "C" fn(Hid) -> Herr,
}

fn facts_api() -> Result<&'static FactsApi, String> {
    static API: std::sync::OnceLock<Result<FactsApi, String>> = std::sync::OnceLock::new();
    API.get_or_init(|| {
        // SAFETY: each field's type is the C signature of the HDF5 1.14/2.x function named
        // (hid_t is int64_t, hsize_t and haddr_t uint64_t, ssize_t isize, enums and htri_t int).
        unsafe {
            Ok(FactsApi {
                dget_create_plist: function(c"H5Dget_create_plist")?,
                dget_access_plist: function(c"H5Dget_access_plist")?,
                dget_type: function(c"H5Dget_type")?,
                dget_offset: function(c"H5Dget_offset")?,
                pget_layout: function(c"H5Pget_layout")?,
                pget_external_count: function(c"H5Pget_external_count")?,
                pget_chunk: function(c"H5Pget_chunk")?,
                pget_nfilters: function(c"H5Pget_nfilters")?,
                pget_filter2: function(c"H5Pget_filter2")?,
                pget_chunk_cache: function(c"H5Pget_chunk_cache")?,
                pclose: function(c"H5Pclose")?,
                tequal: function(c"H5Tequal")?,
                tclose: function(c"H5Tclose")?,
                iget_file_id: function(c"H5Iget_file_id")?,
                iget_name: function(c"H5Iget_name")?,
                fget_intent: function(c"H5Fget_intent")?,
                fclose: function(c"H5Fclose")?,
            })
        }
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// An id this module opened, closed with `close` when dropped.
struct Opened(Hid, unsafe extern "C" fn(Hid) -> Herr);

impl Opened {
    fn new(
        id: Hid,
        close: unsafe extern "C" fn(Hid) -> Herr,
        what: &str,
    ) -> Result<Opened, String> {
        if id < 0 {
            return Err(format!("{what} failed: {}", api()?.stack()));
        }
        Ok(Opened(id, close))
    }
}

impl Drop for Opened {
    fn drop(&mut self) {
        // SAFETY: an id HDF5 handed to this module, closed once with its own close function.
        unsafe { (self.1)(self.0) };
    }
}

/// How a dataset is stored, as its creation property list says (`H5D_layout_t`).
pub enum StoredLayout {
    /// One run of bytes: at `address` where allocated; `external`: in external files.
    Contiguous {
        address: Option<u64>,
        external: bool,
    },
    Compact,
    /// Chunks of `chunk` elements through the pipeline `filters` (`(id, client values)` in
    /// order); `cache_bytes`: the dataset's chunk cache size.
    Chunked {
        chunk: Vec<u64>,
        filters: Vec<(i32, Vec<u32>)>,
        cache_bytes: usize,
    },
    Virtual,
}

/// What the one native call needs to know about a dataset, asked of HDF5 once per call.
pub struct DatasetFacts {
    pub layout: StoredLayout,
    /// The stored type is the memory type in HDF5's terms (`H5Tequal`): HDF5 converts nothing.
    pub same_type: bool,
    /// The stored element's size in bytes.
    pub stored_size: usize,
}

/// The layout of `dataset` and whether its stored type is `mem_type`. The caller holds h5py's
/// lock.
pub fn dataset_facts(dataset: Hid, mem_type: Hid) -> Result<DatasetFacts, String> {
    let f = facts_api()?;
    // SAFETY: plain queries on ids HDF5 checks (a failure is reported, its stack cleared);
    // every id opened here is closed by `Opened`; the out-pointers are valid for the calls.
    unsafe {
        let stored_type = Opened::new((f.dget_type)(dataset), f.tclose, "H5Dget_type")?;
        let same_type = (f.tequal)(stored_type.0, mem_type) > 0;
        let stored_size = (api()?.tget_size)(stored_type.0);
        let dcpl = Opened::new(
            (f.dget_create_plist)(dataset),
            f.pclose,
            "H5Dget_create_plist",
        )?;
        let layout = match (f.pget_layout)(dcpl.0) {
            H5D_CONTIGUOUS => {
                let address = (f.dget_offset)(dataset);
                api()?.stack(); // an unallocated dataset has no offset: not an error here
                StoredLayout::Contiguous {
                    address: (address != HADDR_UNDEF).then_some(address),
                    external: (f.pget_external_count)(dcpl.0) > 0,
                }
            }
            H5D_COMPACT => StoredLayout::Compact,
            H5D_CHUNKED => {
                let mut dims = [0 as Hsize; MAX_RANK];
                let rank = (f.pget_chunk)(dcpl.0, MAX_RANK as c_int, dims.as_mut_ptr());
                if rank < 0 {
                    return Err(format!("H5Pget_chunk failed: {}", api()?.stack()));
                }
                let mut filters = Vec::new();
                for i in 0..(f.pget_nfilters)(dcpl.0).max(0) as c_uint {
                    filters.push(filter(f, dcpl.0, i)?);
                }
                let dapl = Opened::new(
                    (f.dget_access_plist)(dataset),
                    f.pclose,
                    "H5Dget_access_plist",
                )?;
                let (mut slots, mut cache_bytes, mut w0) = (0usize, 0usize, 0f64);
                if (f.pget_chunk_cache)(dapl.0, &mut slots, &mut cache_bytes, &mut w0) < 0 {
                    return Err(format!("H5Pget_chunk_cache failed: {}", api()?.stack()));
                }
                StoredLayout::Chunked {
                    chunk: dims[..rank as usize].to_vec(),
                    filters,
                    cache_bytes,
                }
            }
            _ => StoredLayout::Virtual,
        };
        Ok(DatasetFacts {
            layout,
            same_type,
            stored_size,
        })
    }
}

/// Filter `index` of the pipeline in `dcpl`: its id and client values.
///
/// # Safety
/// `dcpl` must be an open dataset creation property list with more than `index` filters.
unsafe fn filter(f: &FactsApi, dcpl: Hid, index: c_uint) -> Result<(i32, Vec<u32>), String> {
    let mut values = vec![0 as c_uint; 16];
    loop {
        let (mut flags, mut config) = (0 as c_uint, 0 as c_uint);
        let mut count = values.len();
        // SAFETY: `values` holds `count` entries; no name is asked for (namelen 0).
        let id = unsafe {
            (f.pget_filter2)(
                dcpl,
                index,
                &mut flags,
                &mut count,
                values.as_mut_ptr(),
                0,
                std::ptr::null_mut(),
                &mut config,
            )
        };
        if id < 0 {
            return Err(format!("H5Pget_filter2 failed: {}", api()?.stack()));
        }
        if count <= values.len() {
            values.truncate(count);
            return Ok((id, values));
        }
        values.resize(count, 0);
    }
}

/// Whether the file holding `dataset` is open read-only and not for SWMR reading: nothing can
/// change its storage while it is open. The caller holds h5py's lock.
pub fn read_only_file(dataset: Hid) -> Result<bool, String> {
    let f = facts_api()?;
    // SAFETY: plain queries on ids HDF5 checks; the file id opened here is closed by `Opened`.
    unsafe {
        let file = Opened::new((f.iget_file_id)(dataset), f.fclose, "H5Iget_file_id")?;
        let mut intent: c_uint = H5F_ACC_RDWR;
        if (f.fget_intent)(file.0, &mut intent) < 0 {
            return Err(format!("H5Fget_intent failed: {}", api()?.stack()));
        }
        Ok(intent & (H5F_ACC_RDWR | H5F_ACC_SWMR_READ) == 0)
    }
}

/// The dataset's name in its file (`H5Iget_name`), "None" for an anonymous dataset, as h5py's
/// `Dataset.name` prints. The caller holds h5py's lock.
pub fn object_name(object: Hid) -> String {
    let Ok(f) = facts_api() else {
        return "None".into();
    };
    // SAFETY: a length query (NULL buffer), then a buffer of that length plus the NUL.
    unsafe {
        let len = (f.iget_name)(object, std::ptr::null_mut(), 0);
        if len <= 0 {
            if let Ok(api) = api() {
                api.stack();
            }
            return "None".into();
        }
        let mut name = vec![0u8; len as usize + 1];
        (f.iget_name)(object, name.as_mut_ptr().cast(), name.len());
        name.truncate(len as usize);
        String::from_utf8_lossy(&name).into_owned()
    }
}

/// The dataset's dimensions (`H5Sget_simple_extent_dims`; none for a scalar or null dataspace).
/// The caller holds h5py's lock.
pub fn dataset_dims(dataset: Hid) -> Result<Vec<u64>, String> {
    let api = api()?;
    // SAFETY: a dataset id HDF5 checks; the dataspace is closed by `Space`.
    let space = Space::new(unsafe { (api.dget_space)(dataset) }, api).map_err(|e| match e {
        IoError::Argument(m) | IoError::Hdf5(m) => m,
    })?;
    let mut dims = [0 as Hsize; MAX_RANK];
    // SAFETY: `dims` has room for HDF5's largest rank.
    let rank =
        unsafe { (api.sget_simple_extent_dims)(space.0, dims.as_mut_ptr(), std::ptr::null_mut()) };
    if rank < 0 {
        return Err(api.stack());
    }
    Ok(dims[..rank as usize].to_vec())
}
