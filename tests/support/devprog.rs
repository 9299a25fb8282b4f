//! A program that reads and writes HDF5 datasets straight from device memory through the `gds`
//! driver, run by the device tests as a child process: on a real GPU, or on the CPU emulator
//! (whose device memory the host cannot dereference, so any host access by the driver crashes).
//!
//! `h5devprog FILE [--sizes N,N,...]`: with the driver chosen by `HDF5_DRIVER=gds`, writes
//! reference datasets from host memory, then for every size reads them into device buffers (at
//! an unaligned offset, whole and by hyperslab), writes them back from device memory, reads a
//! compact dataset and storage past end of file into device memory, reads and writes every 3rd
//! byte of a dataset through device memory, and compares every byte with host-side reads. Prints `DEVICE OK <checks>`; on a mismatch or error prints `FAILED: ...`
//! and exits 1.
//!
//! `--caller-context none|device0|device1`: instead, the program keeps a context of its own
//! current around every HDF5 call (none at all, or a device's primary context, as a PyTorch user
//! on `cuda:1`), reads and writes device buffers of one task and of several, a compact dataset and
//! storage past end of file, and checks with `cuCtxGetCurrent` after each call that the driver
//! left that context current.
//!
//! `--buffers-on N`: the device buffers are allocated on device N (in its primary context),
//! not device 0.
//!
//! `--memory plain|pool|vmm|managed` (with `--caller-context`): how those buffers are allocated —
//! `cuMemAlloc`; `cuMemAllocAsync` from the device's stream-ordered pool, which already holds
//! another allocation at its start; VMM, 2 MiB physical handles mapped side by side into a
//! reservation with the buffer starting 1 MiB in, so a buffer of more than 1 MiB spans two
//! mappings (as PyTorch's expandable segments); or `cuMemAllocManaged`. With `vmm`, one more
//! check unmaps a 4 MiB mapping after a read and maps two 2 MiB handles at the same address, then
//! reads again (memory freed and reused at one address).
//!
//! `--stream-order`: device memory right after a read, seen from another non-blocking stream,
//! and a write right after a legacy-stream upload (see `run_stream_order`).
//!
//! `--fork`: a data-loader worker forked after the parent moved device data through the driver
//! (see `run_fork`).
//!
//! `--host-only`: never touches CUDA; writes and reads one dataset from host memory (a program
//! that never uses a GPU, for the side effects of merely opening files).
//!
//! `--background-open` (the emulator only, with a slow `cuFileDriverOpen`): the first device read
//! and write while cuFile opens in the background, then, once the emulator says the open has
//! returned, a read and a write after it; prints the emulator's counters around each (see
//! `run_background_open`).

use crate::pattern::bytes as pattern;
use array_io::hdf5_raw::{self, named as h5, FileDriver};
use array_io::transfer::{self, Hyperslab};
use cudarc::driver::{result, sys};
use h5gds_bench::gpu::{init_cuda, DeviceBuffer};
use hdf5::dataset::{AllocTime, FillTime, Layout};
use hdf5::{Dataset, Datatype, Group};
use ndarray::s;
use std::path::Path;

type Check<T> = Result<T, String>;

fn expect_bytes(what: &str, got: &[u8], want: &[u8]) -> Check<()> {
    if got.len() != want.len() {
        return Err(format!(
            "{what}: {} bytes, expected {}",
            got.len(),
            want.len()
        ));
    }
    match got.iter().zip(want).position(|(g, w)| g != w) {
        None => Ok(()),
        Some(i) => Err(format!(
            "{what}: byte {i} is {:#04x}, expected {:#04x}",
            got[i], want[i]
        )),
    }
}

const PAD: usize = 3; // device buffers are used at an unaligned offset

/// A `u8` dataset `name` of `len` elements with `layout`; `unwritten` allocates its storage at
/// creation and never fills it (until written, its bytes lie past the end of the file).
fn create(file: &Group, name: &str, len: usize, layout: Layout, unwritten: bool) -> Check<Dataset> {
    let mut builder = file.new_dataset::<u8>().shape(len).layout(layout);
    if unwritten {
        builder = builder
            .alloc_time(Some(AllocTime::Early))
            .fill_time(FillTime::Never);
    }
    h5(&format!("H5Dcreate2({name})"), builder.create(name))
}

/// The bytes of `dset` (`u8` elements) or of its hyperslab `slab`.
fn selected_bytes(dset: &Dataset, slab: Option<Hyperslab>) -> usize {
    slab.map_or(dset.size(), |s| s.count.iter().product::<u64>() as usize)
}

/// Reads `dset` (or its hyperslab `slab`) into memory at `buf`: device memory, or a host mapping
/// the driver cannot classify without asking CUDA.
///
/// # Safety
/// `buf` must have room for the selection's bytes.
unsafe fn read_device(
    dset: &Dataset,
    slab: Option<Hyperslab>,
    buf: *mut std::ffi::c_void,
) -> Check<()> {
    let u8_type = h5("H5Tcopy", Datatype::from_type::<u8>())?;
    let nbytes = selected_bytes(dset, slab);
    // SAFETY: as the caller guarantees.
    h5("H5Dread", unsafe {
        transfer::read(dset, &u8_type, slab, buf, nbytes)
    })
}

/// Writes `dset` (or its hyperslab `slab`) from device memory at `buf`.
///
/// # Safety
/// `buf` must be device memory holding the selection's bytes.
unsafe fn write_device(
    dset: &Dataset,
    slab: Option<Hyperslab>,
    buf: *const std::ffi::c_void,
) -> Check<()> {
    let u8_type = h5("H5Tcopy", Datatype::from_type::<u8>())?;
    let nbytes = selected_bytes(dset, slab);
    // SAFETY: as the caller guarantees.
    h5("H5Dwrite", unsafe {
        transfer::write(dset, &u8_type, slab, buf, nbytes)
    })
}

fn run(path: &Path, sizes: &[usize]) -> Check<usize> {
    let fapl = h5("H5Pcreate", hdf5_raw::file_access(&FileDriver::Default))?;
    let file = h5("H5Fcreate", hdf5_raw::create_file(path, &fapl))?;
    let mut checks = 0;
    for (k, &size) in sizes.iter().enumerate() {
        let want = pattern(size, k as u8 + 1);
        let dset = create(&file, &format!("d{size}"), size, Layout::Contiguous, false)?;
        h5("H5Dwrite", dset.write_raw(&want))?;

        // Whole dataset into device memory at an unaligned offset.
        let dev = DeviceBuffer::new(size + 2 * PAD)?;
        dev.upload(0, &vec![0xAA; size + 2 * PAD])?;
        // SAFETY: the device buffer holds size bytes from offset PAD.
        unsafe { read_device(&dset, None, dev.at(PAD))? };
        expect_bytes(
            &format!("device read of {size} bytes"),
            &dev.download(PAD, size)?,
            &want,
        )?;
        expect_bytes("guard bytes before", &dev.download(0, PAD)?, &[0xAA; PAD])?;
        expect_bytes(
            "guard bytes after",
            &dev.download(PAD + size, PAD)?,
            &[0xAA; PAD],
        )?;
        checks += 1;

        // A hyperslab starting at an odd offset.
        if size > 10 {
            let (start, count) = ((size / 3) | 1, size / 2);
            let sel = Hyperslab {
                start: &[start as u64],
                step: &[1],
                count: &[count as u64],
            };
            // SAFETY: the device buffer holds count bytes from offset PAD.
            unsafe { read_device(&dset, Some(sel), dev.at(PAD))? };
            expect_bytes(
                &format!("device hyperslab of {size}"),
                &dev.download(PAD, count)?,
                &want[start..start + count],
            )?;
            checks += 1;
        }

        // Written from device memory, read back on the host.
        let back = pattern(size, k as u8 + 101);
        dev.upload(PAD, &back)?;
        let wset = create(&file, &format!("w{size}"), size, Layout::Contiguous, false)?;
        // SAFETY: the device buffer holds size bytes from offset PAD.
        unsafe { write_device(&wset, None, dev.at(PAD))? };
        let host = h5("H5Dread", wset.read_raw::<u8>())?;
        expect_bytes(&format!("device write of {size} bytes"), &host, &back)?;
        checks += 1;
    }

    // Compact datasets go through ctl(MEM_COPY) in both directions.
    let compact = pattern(200, 77);
    let cset = create(&file, "compact", 200, Layout::Compact, false)?;
    let dev = DeviceBuffer::new(200 + PAD)?;
    dev.upload(PAD, &compact)?;
    // SAFETY: the device buffer holds 200 bytes from offset PAD.
    unsafe { write_device(&cset, None, dev.at(PAD))? };
    let host = h5("H5Dread", cset.read_raw::<u8>())?;
    expect_bytes("compact write from device", &host, &compact)?;
    dev.upload(PAD, &[0u8; 200])?;
    // SAFETY: as above.
    unsafe { read_device(&cset, None, dev.at(PAD))? };
    expect_bytes(
        "compact read into device",
        &dev.download(PAD, 200)?,
        &compact,
    )?;
    checks += 2;

    // Storage allocated but never written lies past end of file: it reads as zeros.
    let len = 300_000;
    let eset = create(&file, "unwritten", len, Layout::Contiguous, true)?;
    let dev = DeviceBuffer::new(len)?;
    dev.upload(0, &vec![0xAA; len])?;
    // SAFETY: the device buffer holds len bytes.
    unsafe { read_device(&eset, None, dev.at(0))? };
    expect_bytes(
        "device read past end of file",
        &dev.download(0, len)?,
        &vec![0; len],
    )?;
    checks += 1;

    // Strided selections (every 3rd byte) into and out of device memory: the driver's selection
    // callbacks take these through the vector path, piece by piece.
    let len = 30_000;
    let full = pattern(len, 55);
    let sset = create(&file, "strided", len, Layout::Contiguous, false)?;
    h5("H5Dwrite", sset.write_raw(&full))?;
    let count = len / 3 - 1;
    let sel = Hyperslab {
        start: &[1],
        step: &[3],
        count: &[count as u64],
    };
    let every_third: Vec<u8> = full
        .iter()
        .skip(1)
        .step_by(3)
        .take(count)
        .copied()
        .collect();
    let dev = DeviceBuffer::new(count)?;
    // SAFETY: the device buffer holds one byte per selected element.
    unsafe { read_device(&sset, Some(sel), dev.at(0))? };
    expect_bytes(
        "strided read into device",
        &dev.download(0, count)?,
        &every_third,
    )?;
    let back = pattern(count, 66);
    dev.upload(0, &back)?;
    // SAFETY: as above.
    unsafe { write_device(&sset, Some(sel), dev.at(0))? };
    let host = h5("H5Dread", sset.read_raw::<u8>())?;
    let mut want = full.clone();
    for (i, b) in back.iter().enumerate() {
        want[1 + 3 * i] = *b;
    }
    expect_bytes("strided write from device", &host, &want)?;
    checks += 2;

    // The same selection of a chunked dataset whose chunks fit HDF5's chunk cache: HDF5 copies
    // each element out of the cached chunk through the driver's ctl(MEM_COPY), into host memory
    // and into device memory (each copy loop's base pointers classified once).
    let kset = h5(
        "H5Dcreate2(cached)",
        file.new_dataset::<u8>()
            .shape(len)
            .chunk(4096)
            .create("cached"),
    )?;
    h5("H5Dwrite", kset.write_raw(&full))?;
    let host: Vec<u8> = h5(
        "H5Dread",
        kset.read_slice_1d::<u8, _>(s![1..1 + 3 * count;3]),
    )?
    .to_vec();
    expect_bytes(
        "strided read of cached chunks into host",
        &host,
        &every_third,
    )?;
    dev.upload(0, &vec![0xAA; count])?;
    // SAFETY: the device buffer holds one byte per selected element.
    unsafe { read_device(&kset, Some(sel), dev.at(0))? };
    expect_bytes(
        "strided read of cached chunks into device",
        &dev.download(0, count)?,
        &every_third,
    )?;
    checks += 2;
    drop((cset, eset, sset, kset));
    h5("H5Fclose", file.close())?;
    Ok(checks)
}

/// The caller's current context: `cuCtxGetCurrent`, null for none.
fn current_context() -> Check<sys::CUcontext> {
    let current = result::ctx::get_current().map_err(|e| format!("cuCtxGetCurrent: {:?}", e.0))?;
    Ok(current.unwrap_or(std::ptr::null_mut()))
}

fn set_context(ctx: sys::CUcontext) -> Check<()> {
    // SAFETY: null or a primary context retained by this program and never released.
    unsafe { result::ctx::set_current(ctx) }.map_err(|e| format!("cuCtxSetCurrent: {:?}", e.0))
}

/// Runs `call` (an HDF5 call) with `theirs` current, as the caller's own context, and checks that
/// it is still current afterwards; the program's device-0 context is current again on return
/// (for its own uploads and downloads).
fn as_caller<T>(what: &str, theirs: sys::CUcontext, call: impl FnOnce() -> Check<T>) -> Check<T> {
    let ours = current_context()?;
    set_context(theirs)?;
    let result = call();
    let after = current_context();
    set_context(ours)?;
    let after = after?;
    if after != theirs {
        return Err(format!(
            "{what}: the caller's CUDA context was {theirs:?} before and {after:?} after"
        ));
    }
    result
}

/// Device `ordinal`'s primary context, retained for the rest of the program.
fn primary_context(ordinal: i32) -> Check<sys::CUcontext> {
    let device =
        result::device::get(ordinal).map_err(|e| format!("cuDeviceGet({ordinal}): {:?}", e.0))?;
    // SAFETY: a device handle from cuDeviceGet; the context is never released.
    unsafe { result::primary_ctx::retain(device) }
        .map_err(|e| format!("cuDevicePrimaryCtxRetain({ordinal}): {:?}", e.0))
}

/// CUDA loaded, with device `ordinal`'s primary context current: the program's device buffers
/// are allocated there.
fn init_cuda_on(ordinal: i32) -> Check<()> {
    init_cuda()?;
    if ordinal != 0 {
        set_context(primary_context(ordinal)?)?;
    }
    Ok(())
}

/// How `--memory` allocates the device buffers of `run_with_caller_context`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Memory {
    Plain,
    Pool,
    Vmm,
    Managed,
}

static MEMORY: std::sync::OnceLock<Memory> = std::sync::OnceLock::new();
/// `--buffers-on`.
static BUFFERS_ON: std::sync::OnceLock<i32> = std::sync::OnceLock::new();

fn memory() -> Memory {
    *MEMORY.get().unwrap_or(&Memory::Plain)
}

const MIB: usize = 1 << 20;
/// The VMM granularity of current GPUs (and the emulator).
const GRANULE: usize = 2 * MIB;

fn cu(call: &str, result: sys::CUresult) -> Check<()> {
    match result {
        sys::CUresult::CUDA_SUCCESS => Ok(()),
        err => Err(format!("{call}: {err:?}")),
    }
}

/// A VMM reservation with handles mapped into it (unmapped and freed on drop).
struct Reservation {
    base: sys::CUdeviceptr,
    size: usize,
    /// (address, size, handle) of each mapping.
    mapped: Vec<(sys::CUdeviceptr, usize, u64)>,
}

impl Reservation {
    fn new(size: usize) -> Check<Reservation> {
        let mut base = 0;
        // SAFETY: a valid out-pointer; size is a multiple of the granularity.
        cu("cuMemAddressReserve", unsafe {
            sys::cuMemAddressReserve(&mut base, size, 0, 0, 0)
        })?;
        Ok(Reservation {
            base,
            size,
            mapped: Vec::new(),
        })
    }

    /// Maps a new physical handle of `size` bytes on the buffers' device at `offset`, readable
    /// and writable by it.
    fn map(&mut self, offset: usize, size: usize) -> Check<()> {
        let device = *BUFFERS_ON.get().unwrap_or(&0);
        // SAFETY: an all-zero CUmemAllocationProp is valid (every enum has a 0 value).
        let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
        prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = device;
        let mut handle = 0;
        // SAFETY: valid out-pointer and properties.
        cu("cuMemCreate", unsafe {
            sys::cuMemCreate(&mut handle, size, &prop, 0)
        })?;
        let at = self.base + offset as u64;
        // SAFETY: the range lies in this reservation, unmapped.
        cu("cuMemMap", unsafe { sys::cuMemMap(at, size, 0, handle, 0) })?;
        self.mapped.push((at, size, handle));
        let access = sys::CUmemAccessDesc {
            location: prop.location,
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: one valid descriptor for the mapping just made.
        cu("cuMemSetAccess", unsafe {
            sys::cuMemSetAccess(at, size, &access, 1)
        })
    }

    /// Unmaps and releases every mapping.
    fn unmap_all(&mut self) -> Check<()> {
        for (at, size, handle) in self.mapped.drain(..) {
            // SAFETY: mapped by `map`, unmapped and released once.
            cu("cuMemUnmap", unsafe { sys::cuMemUnmap(at, size) })?;
            // SAFETY: as above.
            cu("cuMemRelease", unsafe { sys::cuMemRelease(handle) })?;
        }
        Ok(())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let _ = self.unmap_all();
        // SAFETY: reserved in `new`, freed once.
        let _ = unsafe { sys::cuMemAddressFree(self.base, self.size) };
    }
}

/// A device buffer allocated as `--memory` says.
struct TestBuffer {
    ptr: sys::CUdeviceptr,
    len: usize,
    owner: Owner,
}

/// What frees the buffer: the allocation types that free themselves on drop, or the call
/// `TestBuffer`'s drop makes.
enum Owner {
    Plain { _freed_on_drop: DeviceBuffer },
    Pool,
    Managed,
    Vmm { _freed_on_drop: Reservation },
}

impl TestBuffer {
    fn new(len: usize) -> Check<TestBuffer> {
        let (ptr, owner) = match memory() {
            Memory::Plain => {
                let buffer = DeviceBuffer::new(len)?;
                (
                    buffer.ptr,
                    Owner::Plain {
                        _freed_on_drop: buffer,
                    },
                )
            }
            Memory::Pool => {
                // SAFETY: a context is current; the legacy default stream.
                let ptr = unsafe { result::malloc_async(std::ptr::null_mut(), len) }
                    .map_err(|e| format!("cuMemAllocAsync: {:?}", e.0))?;
                (ptr, Owner::Pool)
            }
            Memory::Managed => {
                let mut ptr = 0;
                // SAFETY: a valid out-pointer; CU_MEM_ATTACH_GLOBAL.
                cu("cuMemAllocManaged", unsafe {
                    sys::cuMemAllocManaged(&mut ptr, len, 1)
                })?;
                (ptr, Owner::Managed)
            }
            Memory::Vmm => {
                // The buffer starts 1 MiB into a run of 2 MiB mappings.
                let mapped = (MIB + len).div_ceil(GRANULE) * GRANULE;
                let mut reservation = Reservation::new(mapped + GRANULE)?;
                for k in 0..mapped / GRANULE {
                    reservation.map(k * GRANULE, GRANULE)?;
                }
                let ptr = reservation.base + MIB as u64;
                (
                    ptr,
                    Owner::Vmm {
                        _freed_on_drop: reservation,
                    },
                )
            }
        };
        Ok(TestBuffer { ptr, len, owner })
    }
    fn upload(&self, offset: usize, data: &[u8]) -> Check<()> {
        if offset + data.len() > self.len {
            return Err("upload past the end of a test buffer".into());
        }
        // SAFETY: the range lies in this buffer; data is a live slice.
        unsafe { result::memcpy_htod_sync(self.ptr + offset as u64, data) }
            .map_err(|e| format!("cuMemcpyHtoD: {:?}", e.0))
    }
    fn download(&self, offset: usize, len: usize) -> Check<Vec<u8>> {
        if offset + len > self.len {
            return Err("download past the end of a test buffer".into());
        }
        let mut out = vec![0u8; len];
        // SAFETY: the range lies in this buffer; out is a live, exclusive slice.
        unsafe { result::memcpy_dtoh_sync(&mut out, self.ptr + offset as u64) }
            .map_err(|e| format!("cuMemcpyDtoH: {:?}", e.0))?;
        Ok(out)
    }
    fn at(&self, offset: usize) -> *mut std::ffi::c_void {
        (self.ptr + offset as u64) as *mut std::ffi::c_void
    }
}

impl Drop for TestBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` and freed once; failures cannot be reported from drop.
        match self.owner {
            Owner::Pool => {
                // SAFETY: as above; pool memory is freed on the stream it was allocated on.
                let _ = unsafe { sys::cuMemFreeAsync(self.ptr, std::ptr::null_mut()) };
            }
            Owner::Managed => {
                // SAFETY: as above; managed memory is freed with cuMemFree.
                let _ = unsafe { sys::cuMemFree_v2(self.ptr) };
            }
            Owner::Plain { .. } | Owner::Vmm { .. } => {}
        }
    }
}

/// `--memory vmm`: a dataset read into a 4 MiB mapping, which is then unmapped and replaced by
/// two 2 MiB mappings at the same address, and read into it again.
fn remapped_reads(file: &Group, theirs: sys::CUcontext) -> Check<()> {
    let len = 3 * MIB;
    let want = pattern(len, 91);
    let dset = create(file, "remapped", len, Layout::Contiguous, false)?;
    h5("H5Dwrite", dset.write_raw(&want))?;
    let mut reservation = Reservation::new(4 * GRANULE)?;
    reservation.map(0, 2 * GRANULE)?;
    let at = reservation.base as *mut std::ffi::c_void;
    let read = |what: &str| -> Check<()> {
        // SAFETY: the reservation's first 4 MiB are mapped, and hold len bytes.
        as_caller(what, theirs, || unsafe { read_device(&dset, None, at) })?;
        let mut got = vec![0u8; len];
        // SAFETY: as above; got is a live, exclusive slice.
        unsafe { result::memcpy_dtoh_sync(&mut got, at as sys::CUdeviceptr) }
            .map_err(|e| format!("cuMemcpyDtoH: {:?}", e.0))?;
        expect_bytes(what, &got, &want)
    };
    read("read into one 4 MiB mapping")?;
    reservation.unmap_all()?;
    reservation.map(0, GRANULE)?;
    reservation.map(GRANULE, GRANULE)?;
    let zeros = vec![0u8; len];
    // SAFETY: both new mappings are readable and writable and hold len bytes together.
    unsafe { result::memcpy_htod_sync(reservation.base, &zeros) }
        .map_err(|e| format!("cuMemcpyHtoD: {:?}", e.0))?;
    read("read into two 2 MiB mappings at the same address")
}

/// `--caller-context`: reads and writes through the driver with the caller's own context (or
/// none) current, checking it is left alone. Sizes: one task on the calling thread (4096) and
/// several on the pool (1 MiB + 5 with the tests' 256K tasks).
fn run_with_caller_context(path: &Path, which: &str) -> Check<usize> {
    let theirs: sys::CUcontext = match which {
        "none" => std::ptr::null_mut(),
        "device0" => primary_context(0)?,
        "device1" => primary_context(1)?,
        other => {
            return Err(format!(
                "--caller-context takes none, device0 or device1, not {other:?}"
            ))
        }
    };
    let fapl = h5("H5Pcreate", hdf5_raw::file_access(&FileDriver::Default))?;
    let file = as_caller("H5Fcreate", theirs, || {
        h5("H5Fcreate", hdf5_raw::create_file(path, &fapl))
    })?;
    let mut checks = 0;
    // A pool that already holds another allocation where it starts.
    let _spacer = match memory() {
        Memory::Pool => Some(TestBuffer::new(GRANULE + GRANULE / 4)?),
        _ => None,
    };
    for (k, size) in [4096usize, (1 << 20) + 5].into_iter().enumerate() {
        let want = pattern(size, k as u8 + 11);
        let dset = create(&file, &format!("c{size}"), size, Layout::Contiguous, false)?;
        h5("H5Dwrite", dset.write_raw(&want))?;
        let dev = TestBuffer::new(size)?;
        // SAFETY: the device buffer holds size bytes.
        as_caller(&format!("H5Dread of {size} bytes"), theirs, || unsafe {
            read_device(&dset, None, dev.at(0))
        })?;
        expect_bytes(
            &format!("read of {size} bytes"),
            &dev.download(0, size)?,
            &want,
        )?;
        let back = pattern(size, k as u8 + 21);
        dev.upload(0, &back)?;
        // SAFETY: as above.
        as_caller(&format!("H5Dwrite of {size} bytes"), theirs, || unsafe {
            write_device(&dset, None, dev.at(0))
        })?;
        let host = h5("H5Dread", dset.read_raw::<u8>())?;
        expect_bytes(&format!("write of {size} bytes"), &host, &back)?;
        checks += 2;
    }
    // A compact dataset (ctl MEM_COPY) and storage past end of file (zero-filled on the device).
    let compact = pattern(200, 31);
    let cset = create(&file, "compact", 200, Layout::Compact, false)?;
    h5("H5Dwrite", cset.write_raw(&compact))?;
    let dev = TestBuffer::new(200)?;
    // SAFETY: the device buffer holds 200 bytes.
    as_caller("H5Dread (compact)", theirs, || unsafe {
        read_device(&cset, None, dev.at(0))
    })?;
    expect_bytes("compact read", &dev.download(0, 200)?, &compact)?;
    let len = 300_000;
    let eset = create(&file, "unwritten", len, Layout::Contiguous, true)?;
    let dev = TestBuffer::new(len)?;
    dev.upload(0, &vec![0xAA; len])?;
    // SAFETY: the device buffer holds len bytes.
    as_caller("H5Dread (past end of file)", theirs, || unsafe {
        read_device(&eset, None, dev.at(0))
    })?;
    expect_bytes(
        "read past end of file",
        &dev.download(0, len)?,
        &vec![0; len],
    )?;
    checks += 2;
    if memory() == Memory::Vmm {
        remapped_reads(&file, theirs)?;
        checks += 1;
    }
    drop((cset, eset));
    as_caller("H5Fclose", theirs, || h5("H5Fclose", file.close()))?;
    Ok(checks)
}

/// Host memory from an anonymous mapping, as large NumPy arrays and other `mmap`ed buffers are.
struct HostMapping {
    ptr: *mut u8,
    len: usize,
}

impl HostMapping {
    fn new(len: usize) -> Check<Self> {
        // SAFETY: a new private anonymous mapping at an address the kernel picks.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(format!("mmap of {len} bytes failed"));
        }
        Ok(Self {
            ptr: ptr.cast(),
            len,
        })
    }

    fn ptr(&self) -> *mut std::ffi::c_void {
        self.ptr.cast()
    }

    fn bytes(&self, n: usize) -> &[u8] {
        // SAFETY: the mapping is readable for `len` bytes and lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, n.min(self.len)) }
    }
}

impl Drop for HostMapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// `--host-only`: one dataset written and read from host memory; CUDA is never touched here.
fn run_host_only(path: &Path) -> Check<usize> {
    let fapl = h5("H5Pcreate", hdf5_raw::file_access(&FileDriver::Default))?;
    let file = h5("H5Fcreate", hdf5_raw::create_file(path, &fapl))?;
    let want = pattern(100_000, 41);
    let dset = create(&file, "host", want.len(), Layout::Contiguous, false)?;
    h5("H5Dwrite", dset.write_raw(&want))?;
    let got = h5("H5Dread", dset.read_raw::<u8>())?;
    expect_bytes("host read", &got, &want)?;
    // What HDF5 copies itself (a compact dataset, elements of cached chunks), into host memory:
    // through the driver's ctl(MEM_COPY) only when the file asked for it (device_copies=on). Read
    // into an anonymous mapping, which the driver cannot tell from device memory without asking
    // CUDA (the stack and the brk heap it can), so each copy loop's classification is counted.
    let compact = pattern(200, 43);
    let cset = create(&file, "compact", compact.len(), Layout::Compact, false)?;
    h5("H5Dwrite", cset.write_raw(&compact))?;
    let mapped = HostMapping::new(want.len())?;
    // SAFETY: the mapping has room for the dataset's bytes.
    unsafe { read_device(&cset, None, mapped.ptr())? };
    expect_bytes("host compact read", mapped.bytes(compact.len()), &compact)?;
    let kset = h5(
        "H5Dcreate2(cached)",
        file.new_dataset::<u8>()
            .shape(want.len())
            .chunk(4096)
            .create("cached"),
    )?;
    h5("H5Dwrite", kset.write_raw(&want))?;
    let third: Vec<u8> = want.iter().step_by(3).copied().collect();
    let sel = Hyperslab {
        start: &[0],
        step: &[3],
        count: &[third.len() as u64],
    };
    // SAFETY: the mapping has room for every third byte.
    unsafe { read_device(&kset, Some(sel), mapped.ptr())? };
    expect_bytes(
        "host strided read of cached chunks",
        mapped.bytes(third.len()),
        &third,
    )?;
    drop((dset, cset, kset));
    h5("H5Fclose", file.close())?;
    Ok(3)
}

/// The child of `--fork`: host reads from the file its parent opened (into a fresh host
/// buffer, whole and by hyperslab), a device read into the parent's device buffer (which must
/// fail, naming fork), and a new file written and read from host memory. Returns the device
/// read's error text.
fn forked_child(dset: &Dataset, dev: &DeviceBuffer, want: &[u8], other: &Path) -> Check<String> {
    let got = h5("H5Dread", dset.read_raw::<u8>())?;
    expect_bytes("child's host read of the parent's open file", &got, want)?;
    let (start, count) = (1001usize, want.len() / 2);
    let part: Vec<u8> = h5(
        "H5Dread",
        dset.read_slice_1d::<u8, _>(s![start..start + count]),
    )?
    .to_vec();
    expect_bytes("child's host hyperslab", &part, &want[start..start + count])?;
    // SAFETY: the device buffer holds want.len() bytes (in the parent's CUDA state).
    let device_error = match unsafe { read_device(dset, None, dev.at(0)) } {
        Ok(()) => return Err("a device read in the forked child succeeded".into()),
        Err(err) => err,
    };
    let fapl = h5("H5Pcreate", hdf5_raw::file_access(&FileDriver::Default))?;
    let file = h5("H5Fcreate", hdf5_raw::create_file(other, &fapl))?;
    let mine = pattern(300_000, 99);
    let mset = create(&file, "child", mine.len(), Layout::Contiguous, false)?;
    h5("H5Dwrite", mset.write_raw(&mine))?;
    let back = h5("H5Dread", mset.read_raw::<u8>())?;
    expect_bytes("child's new file", &back, &mine)?;
    drop(mset);
    h5("H5Fclose", file.close())?;
    Ok(device_error)
}

/// `--fork`: a data loader's life. The parent opens a file with gds and reads it into device
/// memory (cuFile opened, the file registered), then forks; the child (`forked_child`) prints
/// `CHILD OK` and the device read's error as `CHILD DEVICE ERROR: ...`, and exits normally
/// with the file still open (HDF5 closes it at exit, in the child). The parent then reads into
/// device memory again.
fn run_fork(path: &Path) -> Check<usize> {
    let fapl = h5("H5Pcreate", hdf5_raw::file_access(&FileDriver::Default))?;
    let file = h5("H5Fcreate", hdf5_raw::create_file(path, &fapl))?;
    let want = pattern((1 << 20) + 5, 17);
    let dset = create(&file, "data", want.len(), Layout::Contiguous, false)?;
    h5("H5Dwrite", dset.write_raw(&want))?;
    let dev = DeviceBuffer::new(want.len())?;
    // SAFETY: the device buffer holds want.len() bytes.
    unsafe { read_device(&dset, None, dev.at(0))? };
    expect_bytes("parent's device read", &dev.download(0, want.len())?, &want)?;
    // SAFETY: fork in a program whose other threads (the driver's pool) hold no lock the child
    // needs: the driver rebuilds its pool in the child.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        let code = match forked_child(&dset, &dev, &want, &path.with_extension("child.h5")) {
            Ok(device_error) => {
                println!("CHILD DEVICE ERROR: {}", device_error.replace('\n', " | "));
                println!("CHILD OK");
                0
            }
            Err(what) => {
                println!("CHILD FAILED: {what}");
                1
            }
        };
        // A normal exit: HDF5 closes the inherited file at exit, in the child.
        std::process::exit(code);
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked; `status` is a valid out-pointer.
    if unsafe { libc::waitpid(pid, &mut status, 0) } != pid {
        return Err(format!("waitpid: {}", std::io::Error::last_os_error()));
    }
    // Whether cuFile's open (started in the background by the first device read, where cuFile
    // could give GDS) had returned when the child was gone: a child that waited at exit for the
    // parent's open thread, which does not exist in it, would have outlived a slow open.
    if let Some(done) = emulator_counter("cufile driver opens completed") {
        println!("OPENS COMPLETED WHEN THE CHILD HAD EXITED: {done}");
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        return Err(format!("the forked child ended with status {status:#x}"));
    }
    dev.upload(0, &vec![0u8; want.len()])?;
    // SAFETY: as above.
    unsafe { read_device(&dset, None, dev.at(0))? };
    expect_bytes(
        "parent's device read after the fork",
        &dev.download(0, want.len())?,
        &want,
    )?;
    drop(dset);
    h5("H5Fclose", file.close())?;
    Ok(4)
}

/// The emulator's report counter `name` now (`h5gds_emu_report_counter`), or `None` when
/// libcuda is not the emulator.
fn emulator_counter(name: &str) -> Option<u64> {
    let name = std::ffi::CString::new(name).ok()?;
    let f = crate::emulator::loaded_emulator_symbol(c"h5gds_emu_report_counter")?;
    // SAFETY: the symbol has the emulator's documented signature (a C string and one
    // out-pointer to a u64).
    unsafe {
        let f: unsafe extern "C" fn(*const std::ffi::c_char, *mut u64) -> libc::c_int =
            std::mem::transmute(f);
        let mut out = 0u64;
        (f(name.as_ptr(), &mut out) == 0).then_some(out)
    }
}

/// The emulator's counters a device transfer moves: cuFile reads, cuFile writes, host-to-device
/// and device-to-host copies, and the cuFile opens that have returned.
#[derive(Clone, Copy, Debug)]
struct Moved {
    cufile_reads: u64,
    cufile_writes: u64,
    htod: u64,
    dtoh: u64,
    opens_completed: u64,
}

impl Moved {
    fn now() -> Check<Moved> {
        let get = |name| {
            emulator_counter(name)
                .ok_or_else(|| format!("no emulator counter {name:?}: --background-open needs it"))
        };
        Ok(Moved {
            cufile_reads: get("cufile reads")?,
            cufile_writes: get("cufile writes")?,
            htod: get("copies htod")?,
            dtoh: get("copies dtoh")?,
            opens_completed: get("cufile driver opens completed")?,
        })
    }

    /// One line: what moved the bytes since `before`, and the opens completed now.
    fn line(self, before: Moved) -> String {
        format!(
            "cufile reads {}, cufile writes {}, copies htod {}, copies dtoh {}; cufile driver \
             opens completed {}",
            self.cufile_reads - before.cufile_reads,
            self.cufile_writes - before.cufile_writes,
            self.htod - before.htod,
            self.dtoh - before.dtoh,
            self.opens_completed
        )
    }
}

/// `--background-open`: the first device read of the process (cuFile's open starts in the
/// background where cuFile could give GDS) and a device write right after it, each followed by
/// the emulator's counters (`FIRST READ: ...`, `FIRST WRITE: ...`: which path moved the bytes,
/// and whether the open had returned when the transfer had); then waits, at most a minute, until
/// the emulator says the open has returned, and reads and writes again (`AFTER THE OPEN: ...`).
/// Every byte is checked on the host.
fn run_background_open(path: &Path) -> Check<usize> {
    let fapl = h5("H5Pcreate", hdf5_raw::file_access(&FileDriver::Default))?;
    let file = h5("H5Fcreate", hdf5_raw::create_file(path, &fapl))?;
    let want = pattern((1 << 20) + 5, 23);
    let dset = create(&file, "data", want.len(), Layout::Contiguous, false)?;
    h5("H5Dwrite", dset.write_raw(&want))?;
    let out = create(&file, "out", want.len(), Layout::Contiguous, true)?;
    let dev = DeviceBuffer::new(want.len())?;
    let check_out = |what: &str| -> Check<()> {
        let back = h5("H5Dread", out.read_raw::<u8>())?;
        expect_bytes(what, &back, &want)
    };
    let before = Moved::now()?;
    // SAFETY: the device buffer holds want.len() bytes.
    unsafe { read_device(&dset, None, dev.at(0))? };
    println!("FIRST READ: {}", Moved::now()?.line(before));
    expect_bytes("first device read", &dev.download(0, want.len())?, &want)?;
    let before = Moved::now()?;
    // SAFETY: as above.
    unsafe { write_device(&out, None, dev.at(0))? };
    println!("FIRST WRITE: {}", Moved::now()?.line(before));
    check_out("first device write")?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while Moved::now()?.opens_completed == 0 {
        if std::time::Instant::now() > deadline {
            return Err("cuFile's open had not returned after a minute".into());
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    fill(&dev, 0)?;
    let out_again = create(&file, "out_again", want.len(), Layout::Contiguous, true)?;
    let before = Moved::now()?;
    // SAFETY: as above.
    unsafe {
        read_device(&dset, None, dev.at(0))?;
        write_device(&out_again, None, dev.at(0))?;
    }
    println!("AFTER THE OPEN: {}", Moved::now()?.line(before));
    expect_bytes(
        "device read after the open",
        &dev.download(0, want.len())?,
        &want,
    )?;
    let back = h5("H5Dread", out_again.read_raw::<u8>())?;
    expect_bytes("device write after the open", &back, &want)?;
    drop((dset, out, out_again));
    h5("H5Fclose", file.close())?;
    Ok(4)
}

/// A non-blocking stream of the program's own and a pinned buffer: how a user of another
/// stream reads device memory (nothing orders it after the legacy default stream).
struct OtherStream {
    stream: sys::CUstream,
    pinned: *mut u8,
    len: usize,
}

impl OtherStream {
    fn new(len: usize) -> Check<OtherStream> {
        let stream = result::stream::create(result::stream::StreamKind::NonBlocking)
            .map_err(|e| format!("cuStreamCreate: {:?}", e.0))?;
        // SAFETY: plain pinned memory, used as bytes.
        let pinned = unsafe { result::malloc_host(len, 0) }
            .map_err(|e| format!("cuMemHostAlloc: {:?}", e.0))?;
        Ok(OtherStream {
            stream,
            pinned: pinned.cast(),
            len,
        })
    }

    /// `len` bytes of `dev` as this stream sees them.
    fn download(&self, dev: &DeviceBuffer, len: usize) -> Check<Vec<u8>> {
        if len > self.len || len > dev.len {
            return Err(format!("{len} bytes do not fit the buffers"));
        }
        // SAFETY: the pinned buffer holds self.len >= len bytes and is left alone until the
        // stream is synchronized; the device range lies in `dev`.
        unsafe {
            let host = std::slice::from_raw_parts_mut(self.pinned, len);
            result::memcpy_dtoh_async(host, dev.ptr, self.stream)
                .map_err(|e| format!("cuMemcpyDtoHAsync: {:?}", e.0))?;
            result::stream::synchronize(self.stream)
                .map_err(|e| format!("cuStreamSynchronize: {:?}", e.0))?;
            Ok(host.to_vec())
        }
    }
}

/// Fills `dev` with `byte` and waits until it is there.
fn fill(dev: &DeviceBuffer, byte: u8) -> Check<()> {
    dev.upload(0, &vec![byte; dev.len])?;
    result::ctx::synchronize().map_err(|e| format!("cuCtxSynchronize: {:?}", e.0))
}

/// `--stream-order`: what a read leaves in device memory, seen from another non-blocking stream
/// right after the read returns (a compact dataset, copied by `ctl(MEM_COPY)`, and storage past
/// end of file, zero-filled on the device); and a write from a device buffer that a
/// legacy-stream upload (`cuMemcpyHtoD` from pageable memory, which may return before the
/// bytes land) has just filled, read back on the host.
fn run_stream_order(path: &Path) -> Check<usize> {
    let fapl = h5("H5Pcreate", hdf5_raw::file_access(&FileDriver::Default))?;
    let file = h5("H5Fcreate", hdf5_raw::create_file(path, &fapl))?;
    let other = OtherStream::new(1 << 20)?;
    let compact = pattern(200, 45);
    let cset = create(&file, "compact", 200, Layout::Compact, false)?;
    h5("H5Dwrite", cset.write_raw(&compact))?;
    let dev = DeviceBuffer::new(200)?;
    fill(&dev, 0xAA)?;
    // SAFETY: the device buffer holds 200 bytes.
    unsafe { read_device(&cset, None, dev.at(0))? };
    expect_bytes(
        "compact read, seen from another stream",
        &other.download(&dev, 200)?,
        &compact,
    )?;
    let len = 300_000;
    let eset = create(&file, "unwritten", len, Layout::Contiguous, true)?;
    let dev = DeviceBuffer::new(len)?;
    fill(&dev, 0xAA)?;
    // SAFETY: the device buffer holds len bytes.
    unsafe { read_device(&eset, None, dev.at(0))? };
    expect_bytes(
        "read past end of file, seen from another stream",
        &other.download(&dev, len)?,
        &vec![0; len],
    )?;
    let mut checks = 2;
    for size in [4096usize, (1 << 20) + 5] {
        let want = pattern(size, 71);
        let wset = create(&file, &format!("w{size}"), size, Layout::Contiguous, false)?;
        let dev = DeviceBuffer::new(size)?;
        fill(&dev, 0xAA)?;
        dev.upload(0, &want)?;
        // SAFETY: the device buffer holds size bytes.
        unsafe { write_device(&wset, None, dev.at(0))? };
        let host = h5("H5Dread", wset.read_raw::<u8>())?;
        expect_bytes(
            &format!("write of {size} bytes right after a legacy-stream upload"),
            &host,
            &want,
        )?;
        checks += 1;
    }
    drop((cset, eset));
    h5("H5Fclose", file.close())?;
    Ok(checks)
}

/// `--device-path`: prints the device path a file in the working directory gets on this
/// machine, decided as `h5gds info` decides it (cuFile opened first where CUDA works), so tests
/// can expect what the machine really gives.
fn print_device_path() -> i32 {
    let settings = match h5gds::VfdSettings::load(None) {
        Ok(settings) => settings,
        Err(err) => {
            println!("FAILED: {err}");
            return 1;
        }
    };
    let _ = h5gds::cufile_driver(Some(&settings));
    println!("DEVICE PATH: {}", h5gds::path_verdicts(&settings).device);
    0
}

/// Entry point of `h5devprog`; returns the exit code.
pub fn main() -> i32 {
    // This program hands HDF5 device pointers for compact data and cached chunks, so it asks
    // the driver to make HDF5's own copies (device_copies=on), unless told otherwise.
    if std::env::var_os("H5GDS_DEVICE_COPIES").is_none() {
        std::env::set_var("H5GDS_DEVICE_COPIES", "on");
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!(
            "usage: h5devprog FILE [--sizes N,N,... | --caller-context none|device0|device1 | \
             --host-only | --fork | --stream-order | --background-open | --device-path] \
             [--buffers-on N] \
             [--memory plain|pool|vmm|managed]"
        );
        return 2;
    };
    let sizes: Vec<usize> = match args
        .iter()
        .position(|a| a == "--sizes")
        .and_then(|i| args.get(i + 1))
    {
        Some(list) => match list.split(',').map(str::parse).collect() {
            Ok(sizes) => sizes,
            Err(_) => {
                eprintln!("--sizes takes comma-separated byte counts");
                return 2;
            }
        },
        None => vec![1, 7, 4096, 65_536 + 13, 1 << 20, (5 << 20) + 5],
    };
    let option = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .map(|i| args.get(i + 1).cloned().unwrap_or_default())
    };
    let path = Path::new(path);
    let Ok(buffers_on) = option("--buffers-on").map_or(Ok(0), |n| n.parse::<i32>()) else {
        eprintln!("--buffers-on takes a device ordinal");
        return 2;
    };
    let memory = match option("--memory").as_deref() {
        None | Some("plain") => Memory::Plain,
        Some("pool") => Memory::Pool,
        Some("vmm") => Memory::Vmm,
        Some("managed") => Memory::Managed,
        Some(other) => {
            eprintln!("--memory takes plain, pool, vmm or managed, not {other:?}");
            return 2;
        }
    };
    let _ = MEMORY.set(memory);
    let _ = BUFFERS_ON.set(buffers_on);
    if args.iter().any(|a| a == "--device-path") {
        return print_device_path();
    }
    let result = if args.iter().any(|a| a == "--host-only") {
        run_host_only(path)
    } else if args.iter().any(|a| a == "--stream-order") {
        init_cuda_on(buffers_on).and_then(|_| run_stream_order(path))
    } else if args.iter().any(|a| a == "--fork") {
        init_cuda_on(buffers_on).and_then(|_| run_fork(path))
    } else if args.iter().any(|a| a == "--background-open") {
        init_cuda_on(buffers_on).and_then(|_| run_background_open(path))
    } else if let Some(which) = option("--caller-context") {
        init_cuda_on(buffers_on).and_then(|_| run_with_caller_context(path, &which))
    } else {
        init_cuda_on(buffers_on).and_then(|_| run(path, &sizes))
    };
    match result {
        Ok(checks) => {
            println!("DEVICE OK {checks}");
            0
        }
        Err(what) => {
            println!("FAILED: {what}");
            1
        }
    }
}
