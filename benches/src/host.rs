//! Host-memory benchmarks: the `gds` plugin against sec2 in the same process, alternating, with a
//! plain two-thread `pread` of the same bytes as the roofline for reads. Every read is checked
//! against the data written, outside the timed region.

use crate::h5::{self, h5t, Driver};
use crate::stats::Measurement;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What to run and how big.
#[derive(Clone, Debug)]
pub struct HostOptions {
    /// Size of the contiguous float32 dataset for the read and write benchmarks.
    pub bytes: u64,
    pub reps: usize,
    /// Where the benchmark files go (removed afterwards).
    pub dir: PathBuf,
    /// Side of the square float32 dataset for the strided reads.
    pub matrix: usize,
    pub small_datasets: usize,
    /// The config string given to the gds driver.
    pub gds_config: String,
}

fn drivers(config: &str) -> [Driver; 2] {
    [Driver::Sec2, Driver::Gds(config.to_string())]
}

/// Runs `f` for each alternative, `reps` times, rotating the order each repetition so neither
/// side always goes first; `progress` hears about every run.
pub(crate) fn interleave<A>(
    alternatives: &[A],
    reps: usize,
    progress: &mut dyn FnMut(),
    mut f: impl FnMut(&A) -> h5::Result<f64>,
) -> h5::Result<Vec<Vec<f64>>> {
    let mut times = vec![Vec::with_capacity(reps); alternatives.len()];
    for rep in 0..reps {
        for k in 0..alternatives.len() {
            let i = (k + rep) % alternatives.len();
            times[i].push(f(&alternatives[i])?);
            progress();
        }
    }
    Ok(times)
}

pub(crate) fn timed(f: impl FnOnce() -> h5::Result<()>) -> h5::Result<f64> {
    let start = Instant::now();
    f()?;
    Ok(start.elapsed().as_secs_f64())
}

/// Writes back all dirty pages (`sync`), so background writeback does not land in a timed run.
fn settle_page_cache() {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
}

fn write_contiguous(path: &Path, driver: &Driver, data: &[f32]) -> h5::Result<()> {
    let fapl = h5::file_access(driver)?;
    let file = h5::create_file(path, &fapl)?;
    let dset = h5::create_dataset(
        &file,
        "data",
        *h5t::H5T_IEEE_F32LE,
        &[data.len() as u64],
        h5::Layout::Contiguous,
    )?;
    h5::write_all(&dset, *h5t::H5T_NATIVE_FLOAT, data)?;
    drop(dset);
    file.close()
}

fn read_contiguous(path: &Path, driver: &Driver, out: &mut [f32]) -> h5::Result<()> {
    let fapl = h5::file_access(driver)?;
    let file = h5::open_file(path, &fapl)?;
    let dset = h5::open_dataset(&file, "data")?;
    h5::read_all(&dset, *h5t::H5T_NATIVE_FLOAT, out)?;
    drop(dset);
    file.close()
}

/// The roofline: the dataset's bytes read with `pread` by two threads, no HDF5.
fn pread_two_threads(path: &Path, offset: u64, out: &mut [f32]) -> h5::Result<()> {
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

pub(crate) fn check_equal(what: &str, got: &[f32], want: &[f32]) -> h5::Result<()> {
    match got
        .iter()
        .zip(want)
        .position(|(g, w)| g.to_bits() != w.to_bits())
    {
        None => Ok(()),
        Some(i) => Err(format!(
            "{what}: element {i} is {}, expected {}",
            got[i], want[i]
        )),
    }
}

/// How many progress steps `run` reports.
pub fn steps(opts: &HostOptions) -> usize {
    opts.reps * (2 + 3 + 2 + 2 + 2 + 2) + crate::access::steps(opts)
}

pub fn run(opts: &HostOptions, progress: &mut dyn FnMut()) -> h5::Result<Vec<Measurement>> {
    std::fs::create_dir_all(&opts.dir).map_err(|e| format!("cannot create {:?}: {e}", opts.dir))?;
    let mut results = Vec::new();
    let label = crate::stats::size_label(opts.bytes);
    let n = (opts.bytes / 4) as usize;
    let data: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let file_of = |d: &Driver| opts.dir.join(format!("h5gds-bench-{}.h5", d.name()));
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
            d.name(),
            opts.bytes,
            t,
        ));
    }

    // Read the file gds wrote (in page cache now), through sec2, gds and plain pread.
    let source = file_of(&drivers[1]);
    let offset = {
        let fapl = h5::file_access(&Driver::Sec2)?;
        let file = h5::open_file(&source, &fapl)?;
        h5::dataset_offset(&h5::open_dataset(&file, "data")?)?
    };
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

    results.extend(small_datasets(opts, &drivers, progress)?);
    results.extend(strided(opts, &drivers, progress)?);
    results.extend(crate::access::run(opts, &drivers, progress)?);
    Ok(results)
}

/// Creating many small datasets, then opening and reading each: metadata-bound work.
fn small_datasets(
    opts: &HostOptions,
    drivers: &[Driver],
    progress: &mut dyn FnMut(),
) -> h5::Result<Vec<Measurement>> {
    let count = opts.small_datasets;
    let path_of = |d: &Driver| opts.dir.join(format!("h5gds-small-{}.h5", d.name()));
    let create = |d: &Driver| {
        timed(|| {
            let fapl = h5::file_access(d)?;
            let file = h5::create_file(&path_of(d), &fapl)?;
            for i in 0..count {
                let dset = h5::create_dataset(
                    &file,
                    &format!("d{i}"),
                    *h5t::H5T_IEEE_F32LE,
                    &[16],
                    h5::Layout::Contiguous,
                )?;
                h5::write_all(&dset, *h5t::H5T_NATIVE_FLOAT, &[i as f32; 16])?;
            }
            file.close()
        })
    };
    let scan = |d: &Driver| {
        timed(|| {
            let fapl = h5::file_access(d)?;
            let file = h5::open_file(&path_of(d), &fapl)?;
            let mut buf = [0f32; 16];
            for i in 0..count {
                h5::read_all(
                    &h5::open_dataset(&file, &format!("d{i}"))?,
                    *h5t::H5T_NATIVE_FLOAT,
                    &mut buf,
                )?;
                check_equal("small dataset", &buf, &[i as f32; 16])?;
            }
            file.close()
        })
    };
    let created = interleave(drivers, opts.reps, progress, create)?;
    let scanned = interleave(drivers, opts.reps, progress, scan)?;
    let mut out = Vec::new();
    for (d, t) in drivers.iter().zip(created) {
        out.push(Measurement::duration(
            &format!("create {count} small datasets"),
            d.name(),
            t,
        ));
    }
    for (d, t) in drivers.iter().zip(scanned) {
        out.push(Measurement::duration(
            &format!("scan {count} small datasets"),
            d.name(),
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
) -> h5::Result<Vec<Measurement>> {
    let m = opts.matrix;
    let path = opts.dir.join("h5gds-strided.h5");
    let value = |r: usize, c: usize| (r * m + c) as f32;
    {
        let matrix: Vec<f32> = (0..m * m).map(|i| value(i / m, i % m)).collect();
        let fapl = h5::file_access(&Driver::Sec2)?;
        let file = h5::create_file(&path, &fapl)?;
        let dset = h5::create_dataset(
            &file,
            "data",
            *h5t::H5T_IEEE_F32LE,
            &[m as u64, m as u64],
            h5::Layout::Contiguous,
        )?;
        h5::write_all(&dset, *h5t::H5T_NATIVE_FLOAT, &matrix)?;
        drop(dset);
        file.close()?;
    }
    let read = |d: &Driver, stride: [u64; 2], count: [u64; 2], out: &mut Vec<f32>| {
        timed(|| {
            let fapl = h5::file_access(d)?;
            let file = h5::open_file(&path, &fapl)?;
            let dset = h5::open_dataset(&file, "data")?;
            h5::read_slab(&dset, *h5t::H5T_NATIVE_FLOAT, &[0, 0], &stride, &count, out)?;
            drop(dset);
            file.close()
        })
    };
    let mut column = vec![0f32; m];
    let col_times = interleave(drivers, opts.reps, progress, |d| {
        let t = read(d, [1, 1], [m as u64, 1], &mut column)?;
        let want: Vec<f32> = (0..m).map(|r| value(r, 0)).collect();
        check_equal("column", &column, &want)?;
        Ok(t)
    })?;
    let rows = m / 4;
    let mut every4 = vec![0f32; rows * m];
    let row_times = interleave(drivers, opts.reps, progress, |d| {
        let t = read(d, [4, 1], [rows as u64, m as u64], &mut every4)?;
        let want: Vec<f32> = (0..rows * m).map(|i| value((i / m) * 4, i % m)).collect();
        check_equal("every 4th row", &every4, &want)?;
        Ok(t)
    })?;
    let _ = std::fs::remove_file(&path);
    let mut out = Vec::new();
    for (d, t) in drivers.iter().zip(col_times) {
        out.push(Measurement::duration(
            &format!("read one column of {m}x{m} f32"),
            d.name(),
            t,
        ));
    }
    for (d, t) in drivers.iter().zip(row_times) {
        out.push(Measurement::duration(
            &format!("read every 4th row of {m}x{m} f32"),
            d.name(),
            t,
        ));
    }
    Ok(out)
}
