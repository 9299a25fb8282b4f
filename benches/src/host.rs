//! Host-memory benchmarks: the `gds` plugin against sec2 in the same process, alternating, with a
//! plain two-thread `pread` of the same bytes as the roofline for reads. Every read is checked
//! against the data written, outside the timed region.

use crate::harness::{check_equal, create, create_f32, driver_label, gds, interleave, open, timed};
pub use crate::harness::{HostOptions, Result};
use crate::stats::Measurement;
use array_io::hdf5_raw::{self, linked_hdf5, locked, named as h5, FileDriver as Driver};
use array_io::transfer::{self, Hyperslab};
use std::os::unix::fs::FileExt;
use std::path::Path;

fn drivers(config: &str) -> [Driver; 2] {
    [Driver::Sec2, gds(config)]
}

/// Writes back all dirty pages (`sync`), so background writeback does not land in a timed run.
fn settle_page_cache() {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
}

fn write_contiguous(path: &Path, driver: &Driver, data: &[f32]) -> Result<()> {
    let file = create(path, driver)?;
    let dset = create_f32(&file, "data", data.len())?;
    h5("H5Dwrite", dset.write_raw(data))?;
    drop(dset);
    h5("H5Fclose", file.close())
}

fn read_contiguous(path: &Path, driver: &Driver, out: &mut [f32]) -> Result<()> {
    let file = open(path, driver)?;
    let dset = h5("H5Dopen2", file.dataset("data"))?;
    h5("H5Dread", dset.read_into_raw(out))?;
    drop(dset);
    h5("H5Fclose", file.close())
}

/// The roofline: the dataset's bytes read with `pread` by two threads, no HDF5.
fn pread_two_threads(path: &Path, offset: u64, out: &mut [f32]) -> Result<()> {
    let file = std::fs::File::open(path).map_err(|e| format!("open {path:?}: {e}"))?;
    // SAFETY: viewing f32s as bytes; every bit pattern is a valid f32.
    let bytes = unsafe {
        std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(out))
    };
    let half = (bytes.len() / 2) & !4095;
    let (a, b) = bytes.split_at_mut(half);
    std::thread::scope(|s| {
        let first = s.spawn(|| file.read_exact_at(a, offset));
        let second = file.read_exact_at(b, offset + half as u64);
        first
            .join()
            .map_err(|_| "pread thread panicked".to_string())?
            .map_err(|e| e.to_string())?;
        second.map_err(|e| e.to_string())
    })
}

/// How many progress steps `run` reports.
pub fn steps(opts: &HostOptions) -> usize {
    opts.reps * (2 + 3 + 2 + 2 + 2 + 2 + 2 + 2) + crate::access::steps(opts)
}

/// How many progress steps `run_calls` reports.
pub fn steps_calls(opts: &HostOptions) -> usize {
    opts.reps * (2 + 2 + 2 + 2)
}

/// The metadata-bound rows alone (`h5gds bench --only calls`): the per-call rows, then creating
/// and scanning small datasets.
pub fn run_calls(opts: &HostOptions, progress: &mut dyn FnMut()) -> Result<Vec<Measurement>> {
    std::fs::create_dir_all(&opts.dir).map_err(|e| format!("cannot create {:?}: {e}", opts.dir))?;
    let drivers = drivers(&opts.gds_config);
    let mut results = per_call(opts, &drivers, progress)?;
    results.extend(small_datasets(opts, &drivers, progress)?);
    Ok(results)
}

pub fn run(opts: &HostOptions, progress: &mut dyn FnMut()) -> Result<Vec<Measurement>> {
    std::fs::create_dir_all(&opts.dir).map_err(|e| format!("cannot create {:?}: {e}", opts.dir))?;
    let mut results = Vec::new();
    let label = crate::stats::size_label(opts.bytes);
    let n = (opts.bytes / 4) as usize;
    let data: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let file_of = |d: &Driver| opts.dir.join(format!("h5gds-bench-{}.h5", driver_label(d)));
    let drivers = drivers(&opts.gds_config);

    // Write: each driver writes its own file; the time includes closing (and so flushing to the
    // page cache). Before each run, untimed: the old file is removed and dirty pages are written
    // back, so no run pays for another's truncation or writeback. One untimed round first, so
    // page-cache memory the machine has never handed out (slow on first touch in a VM) is
    // not charged to whichever driver happens to meet it.
    for d in &drivers {
        write_contiguous(&file_of(d), d, &data)?;
    }
    let times = interleave(&drivers, opts.reps, progress, |d| {
        let _ = std::fs::remove_file(file_of(d));
        settle_page_cache();
        timed(|| write_contiguous(&file_of(d), d, &data))
    })?;
    for (d, t) in drivers.iter().zip(times) {
        results.push(Measurement::throughput(
            &format!("write {label} contiguous f32"),
            driver_label(d),
            opts.bytes,
            t,
        ));
    }

    // Read the file gds wrote (in page cache now), through sec2, gds and plain pread.
    let source = file_of(&drivers[1]);
    let offset = h5("H5Dopen2", open(&source, &Driver::Sec2)?.dataset("data"))?
        .offset()
        .ok_or("the dataset has no contiguous storage")?;
    let mut out = vec![0f32; n];
    read_contiguous(&source, &Driver::Sec2, &mut out)?; // warm the page cache
    let readers = ["sec2", "gds", "pread"];
    let times = interleave(&readers, opts.reps, progress, |r| {
        out.iter_mut().for_each(|x| *x = -1.0);
        let t = timed(|| match *r {
            "pread" => pread_two_threads(&source, offset, &mut out),
            "sec2" => read_contiguous(&source, &drivers[0], &mut out),
            _ => read_contiguous(&source, &drivers[1], &mut out),
        })?;
        check_equal(&format!("{r} read"), &out, &data)?;
        Ok(t)
    })?;
    for (r, t) in readers.iter().zip(times) {
        results.push(Measurement::throughput(
            &format!("read {label} contiguous f32"),
            r,
            opts.bytes,
            t,
        ));
    }
    drop(out);
    drop(data);
    for d in &drivers {
        let _ = std::fs::remove_file(file_of(d));
    }

    results.extend(per_call(opts, &drivers, progress)?);
    results.extend(small_datasets(opts, &drivers, progress)?);
    results.extend(strided(opts, &drivers, progress)?);
    results.extend(crate::access::run(opts, &drivers, progress)?);
    Ok(results)
}

/// Driver calls per run of the per-call rows.
const CALLS: usize = 100_000;
/// Bytes per call, from 8 to 512 (varying from call to call): small metadata pieces as HDF5's
/// metadata cache reads and writes them (a checksum, a link, a heap block, an object header).
const CALL_MIN: usize = 8;
const CALL_MAX: usize = 512;
/// The file span the calls cycle through, and the distance between two calls' addresses: apart
/// enough that every call is one system call for either driver.
const CALL_SPAN: u64 = 16 << 20;
const CALL_STEP: u64 = 69_643;
/// `H5FD_MEM_OHDR`: object headers, metadata as HDF5's metadata cache reads and writes it.
const H5FD_MEM_OHDR: std::ffi::c_int = 6;

/// The address of call `i`.
fn call_addr(i: usize) -> u64 {
    (i as u64 * CALL_STEP) % (CALL_SPAN - CALL_MAX as u64)
}

/// The length of call `i`.
fn call_len(i: usize) -> usize {
    CALL_MIN + (i * 7_919) % (CALL_MAX - CALL_MIN + 1)
}

/// The byte the per-call file holds at `addr`: every write puts back these bytes, so that calls
/// whose ranges overlap agree.
fn call_byte(addr: u64) -> u8 {
    (addr % 251) as u8
}

/// The per-call file's bytes from `addr` on, at least `CALL_MAX` of them: a slice of `pattern`
/// (`call_byte` of 0.. for 251 + CALL_MAX bytes), so a write's source costs no filling.
fn call_bytes(pattern: &[u8], addr: u64) -> &[u8] {
    &pattern[(addr % 251) as usize..]
}

/// A file opened through HDF5's public driver API (`H5FDopen`) with `driver`, closed on drop.
struct DriverFile {
    file: *mut std::ffi::c_void,
}

impl DriverFile {
    fn open(path: &Path, driver: &Driver, write: bool) -> Result<Self> {
        let api = linked_hdf5();
        let fapl = h5("H5Pset_driver", hdf5_raw::file_access(driver))?;
        let name = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| format!("{path:?} holds a NUL byte"))?;
        // H5F_ACC_RDWR | H5F_ACC_CREAT | H5F_ACC_TRUNC, or H5F_ACC_RDONLY.
        let flags = if write { 0x0001 | 0x0010 | 0x0002 } else { 0 };
        let (open, set_eoa) = (
            api.H5FDopen.map_err(|m| m.to_string())?,
            api.H5FDset_eoa.map_err(|m| m.to_string())?,
        );
        let fapl_id = fapl.id();
        let file = locked(|| {
            // SAFETY: a NUL-terminated name and an open access list; HADDR_UNDEF as maxaddr lets
            // the driver choose.
            let file = unsafe { open(name.as_ptr(), flags, fapl_id, u64::MAX) };
            if file.is_null() {
                return Err(format!("H5FDopen {path:?} failed"));
            }
            // SAFETY: `file` is the open driver file just returned.
            if unsafe { set_eoa(file, H5FD_MEM_OHDR, CALL_SPAN) } < 0 {
                return Err(format!("H5FDset_eoa {path:?} failed"));
            }
            Ok(file)
        })?;
        Ok(DriverFile { file })
    }

    /// `CALLS` reads (`write` false) or writes of `call_len(i)` bytes at `call_addr(i)`; returns
    /// the sum of the first and last bytes read (written: of the bytes written).
    fn calls(&self, write: bool) -> Result<u64> {
        let api = linked_hdf5();
        let (read, write_fn) = (
            api.H5FDread.map_err(|m| m.to_string())?,
            api.H5FDwrite.map_err(|m| m.to_string())?,
        );
        let pattern: Vec<u8> = (0..(251 + CALL_MAX) as u64).map(call_byte).collect();
        locked(|| {
            let mut sum = 0u64;
            let mut buf = [0u8; CALL_MAX];
            for i in 0..CALLS {
                let (addr, len) = (call_addr(i), call_len(i));
                let status = if write {
                    let src = call_bytes(&pattern, addr);
                    sum += src[0] as u64 + src[len - 1] as u64;
                    // SAFETY: an open driver file; `src` holds at least CALL_MAX >= len bytes;
                    // H5P_DEFAULT (0) as the transfer list.
                    unsafe { write_fn(self.file, H5FD_MEM_OHDR, 0, addr, len, src.as_ptr().cast()) }
                } else {
                    // SAFETY: as above; `buf` holds CALL_MAX >= len bytes.
                    let status = unsafe {
                        read(
                            self.file,
                            H5FD_MEM_OHDR,
                            0,
                            addr,
                            len,
                            buf.as_mut_ptr().cast(),
                        )
                    };
                    sum += buf[0] as u64 + buf[len - 1] as u64;
                    status
                };
                if status < 0 {
                    return Err(format!(
                        "H5FD{} of {len} bytes at {addr} failed",
                        ["read", "write"][write as usize]
                    ));
                }
            }
            Ok(sum)
        })
    }
}

impl Drop for DriverFile {
    fn drop(&mut self) {
        if let Ok(close) = linked_hdf5().H5FDclose {
            // SAFETY: the open driver file, closed once.
            locked(|| unsafe { close(self.file) });
        }
    }
}

/// The driver's cost per call against sec2's: `CALLS` reads, then writes, of 8 to 512 bytes each
/// at addresses spread over 16 MiB, through HDF5's public driver API (`H5FDread`/`H5FDwrite`),
/// each one system call for either driver and the same HDF5 work above it. A small metadata read
/// or write costs this in every HDF5 program. Every read's bytes are checked after its run, and
/// every write's in the file after its run.
fn per_call(
    opts: &HostOptions,
    drivers: &[Driver],
    progress: &mut dyn FnMut(),
) -> Result<Vec<Measurement>> {
    let path = opts.dir.join("h5gds-per-call.h5");
    let bytes: Vec<u8> = (0..CALL_SPAN).map(call_byte).collect();
    std::fs::write(&path, &bytes).map_err(|e| format!("cannot write {path:?}: {e}"))?;
    let want: u64 = (0..CALLS)
        .map(|i| {
            let (addr, len) = (call_addr(i), call_len(i) as u64);
            call_byte(addr) as u64 + call_byte(addr + len - 1) as u64
        })
        .sum();
    let reads = interleave(drivers, opts.reps, progress, |d| {
        let file = DriverFile::open(&path, d, false)?;
        let start = std::time::Instant::now();
        let sum = file.calls(false)?;
        let t = start.elapsed().as_secs_f64();
        if sum != want {
            return Err(format!(
                "per-call reads through {}: sum of first and last bytes {sum}, expected {want}",
                driver_label(d)
            ));
        }
        Ok(t)
    })?;
    let wpath = |d: &Driver| {
        opts.dir
            .join(format!("h5gds-per-call-{}.h5", driver_label(d)))
    };
    let writes = interleave(drivers, opts.reps, progress, |d| {
        let _ = std::fs::remove_file(wpath(d));
        let file = DriverFile::open(&wpath(d), d, true)?;
        let start = std::time::Instant::now();
        let sum = file.calls(true)?;
        let t = start.elapsed().as_secs_f64();
        drop(file);
        let back = std::fs::read(wpath(d)).map_err(|e| format!("cannot read back: {e}"))?;
        for i in 0..CALLS {
            let (a, len) = (call_addr(i) as usize, call_len(i));
            if sum != want || back.get(a..a + len) != Some(&bytes[a..a + len]) {
                return Err(format!(
                    "per-call writes through {}: {len} bytes at {a} not as written",
                    driver_label(d)
                ));
            }
        }
        Ok(t)
    })?;
    let mut out = Vec::new();
    for (what, times) in [("H5FDread", reads), ("H5FDwrite", writes)] {
        for (d, t) in drivers.iter().zip(times) {
            out.push(Measurement::per_call(
                &format!("{CALLS} x {what} of {CALL_MIN}-{CALL_MAX} B"),
                driver_label(d),
                CALLS as u64,
                t,
            ));
        }
    }
    for d in drivers {
        let _ = std::fs::remove_file(wpath(d));
    }
    let _ = std::fs::remove_file(&path);
    Ok(out)
}

/// Creating many small datasets, then opening and reading each: metadata-bound work.
fn small_datasets(
    opts: &HostOptions,
    drivers: &[Driver],
    progress: &mut dyn FnMut(),
) -> Result<Vec<Measurement>> {
    let count = opts.small_datasets;
    let path_of = |d: &Driver| opts.dir.join(format!("h5gds-small-{}.h5", driver_label(d)));
    let create_all = |d: &Driver| {
        timed(|| {
            let file = create(&path_of(d), d)?;
            for i in 0..count {
                let dset = create_f32(&file, &format!("d{i}"), 16)?;
                h5("H5Dwrite", dset.write_raw(&[i as f32; 16]))?;
            }
            h5("H5Fclose", file.close())
        })
    };
    let scan = |d: &Driver| {
        timed(|| {
            let file = open(&path_of(d), d)?;
            let mut buf = [0f32; 16];
            for i in 0..count {
                let dset = h5("H5Dopen2", file.dataset(&format!("d{i}")))?;
                h5("H5Dread", dset.read_into_raw(&mut buf))?;
                check_equal("small dataset", &buf, &[i as f32; 16])?;
            }
            h5("H5Fclose", file.close())
        })
    };
    let created = interleave(drivers, opts.reps, progress, create_all)?;
    let scanned = interleave(drivers, opts.reps, progress, scan)?;
    let mut out = Vec::new();
    for (d, t) in drivers.iter().zip(created) {
        out.push(Measurement::duration(
            &format!("create {count} small datasets"),
            driver_label(d),
            t,
        ));
    }
    for (d, t) in drivers.iter().zip(scanned) {
        out.push(Measurement::duration(
            &format!("scan {count} small datasets"),
            driver_label(d),
            t,
        ));
    }
    for d in drivers {
        let _ = std::fs::remove_file(path_of(d));
    }
    Ok(out)
}

/// Strided reads of a square float32 dataset: one column, and every 4th row.
fn strided(
    opts: &HostOptions,
    drivers: &[Driver],
    progress: &mut dyn FnMut(),
) -> Result<Vec<Measurement>> {
    let m = opts.matrix;
    let path = opts.dir.join("h5gds-strided.h5");
    let value = |r: usize, c: usize| (r * m + c) as f32;
    {
        let matrix: Vec<f32> = (0..m * m).map(|i| value(i / m, i % m)).collect();
        let file = create(&path, &Driver::Sec2)?;
        let dset = h5(
            "H5Dcreate2",
            file.new_dataset::<f32>().shape([m, m]).create("data"),
        )?;
        h5("H5Dwrite", dset.write_raw(&matrix))?;
        drop(dset);
        h5("H5Fclose", file.close())?;
    }
    let f32_type = h5("H5Tcopy", hdf5::Datatype::from_type::<f32>())?;
    // Reads a strided selection (every `step`th row, `cols` columns) into `out`.
    let read = |d: &Driver, step: usize, cols: usize, out: &mut Vec<f32>| {
        timed(|| {
            let file = open(&path, d)?;
            let dset = h5("H5Dopen2", file.dataset("data"))?;
            let slab = Hyperslab {
                start: &[0, 0],
                step: &[step as u64, 1],
                count: &[m.div_ceil(step) as u64, cols as u64],
            };
            let nbytes = std::mem::size_of_val(out.as_slice());
            // SAFETY: `out` holds `nbytes` writable bytes; every bit pattern is an f32.
            let read = unsafe {
                transfer::read(
                    &dset,
                    &f32_type,
                    Some(slab),
                    out.as_mut_ptr().cast(),
                    nbytes,
                )
            };
            h5("H5Dread", read)?;
            drop(dset);
            h5("H5Fclose", file.close())
        })
    };
    let mut column = vec![0f32; m];
    let col_times = interleave(drivers, opts.reps, progress, |d| {
        let t = read(d, 1, 1, &mut column)?;
        let want: Vec<f32> = (0..m).map(|r| value(r, 0)).collect();
        check_equal("column", &column, &want)?;
        Ok(t)
    })?;
    let rows = m.div_ceil(4);
    let mut every4 = vec![0f32; rows * m];
    let row_times = interleave(drivers, opts.reps, progress, |d| {
        let t = read(d, 4, m, &mut every4)?;
        let want: Vec<f32> = (0..rows * m).map(|i| value((i / m) * 4, i % m)).collect();
        check_equal("every 4th row", &every4, &want)?;
        Ok(t)
    })?;
    let _ = std::fs::remove_file(&path);
    let mut out = Vec::new();
    for (d, t) in drivers.iter().zip(col_times) {
        out.push(Measurement::duration(
            &format!("read one column of {m}x{m} f32"),
            driver_label(d),
            t,
        ));
    }
    for (d, t) in drivers.iter().zip(row_times) {
        out.push(Measurement::duration(
            &format!("read every 4th row of {m}x{m} f32"),
            driver_label(d),
            t,
        ));
    }
    Ok(out)
}
