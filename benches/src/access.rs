//! Access patterns (issue 13): strided, point and block selections, partial reads of chunked
//! datasets, strided and point writes, threads sharing one file, and an open/read/close loop;
//! `gds` against sec2, interleaved. Every read is checked against the data, outside the timing.

use crate::harness::{
    check_equal, create, driver_label, interleave, open, timed, HostOptions, Result,
};
use crate::stats::Measurement;
use array_io::hdf5_raw::{linked_hdf5, locked, named as h5, FileDriver as Driver};
use array_io::transfer::{self, Hyperslab};
use hdf5::{Dataset, Dataspace, Datatype, Selection};
use std::path::Path;
use std::sync::Mutex;

/// The 1-D dataset: `--size`, at most this (the patterns, not the volume, are the point).
const MAX_BYTES: u64 = 128 << 20;
/// Points per point selection, at most.
const POINTS: usize = 10_000;

/// One row per pattern, one measurement per driver each.
pub fn steps(opts: &HostOptions) -> usize {
    opts.reps * 2 * (4 + 2 + 1 + 2 + 2 + 3 + 1)
}

fn value(i: usize) -> f32 {
    i as f32
}

/// Distinct pseudo-random indices below `n` (xorshift), in generation order.
fn random_indices(count: usize, n: usize, seed: u64) -> Vec<u64> {
    let mut state = seed | 1;
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(count);
    while out.len() < count.min(n) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let i = state % n as u64;
        if seen.insert(i) {
            out.push(i);
        }
    }
    out
}

/// Writes `data` as the float32 dataset `name` of `shape` in a new file (sec2) at `path`.
fn write_file(path: &Path, name: &str, shape: &[usize], data: &[f32]) -> Result<()> {
    let file = create(path, &Driver::Sec2)?;
    let dset = h5(
        "H5Dcreate2",
        file.new_dataset::<f32>().shape(shape).create(name),
    )?;
    h5("H5Dwrite", dset.write_raw(data))?;
    drop(dset);
    h5("H5Fclose", file.close())
}

/// What a benchmark reads or writes of a dataset: a hyperslab (start, step and count per axis),
/// moved between the dataset and the caller's buffer by the engine's checked transfer, or points
/// in the order given (`move_points`).
enum Sel {
    Slab([Vec<u64>; 3]),
    Points(Selection),
}

/// A selection of `indices` of a 1-D dataset, in the order given.
fn point_selection(indices: &[u64]) -> Sel {
    let points: Vec<usize> = indices.iter().map(|&i| i as usize).collect();
    Sel::Points(Selection::from(points))
}

/// The hyperslab of `start`, `step` and `count` per axis.
fn slab<const N: usize>(start: [usize; N], step: [usize; N], count: [usize; N]) -> Sel {
    let axes = |v: [usize; N]| v.iter().map(|&x| x as u64).collect();
    Sel::Slab([axes(start), axes(step), axes(count)])
}

fn f32_type() -> Result<Datatype> {
    h5("H5Tcopy", Datatype::from_type::<f32>())
}

/// Reads (or, `write`, writes) `points` of `dset` with one `H5Dread`/`H5Dwrite` of the linked
/// HDF5 at `buffer`, which holds `len` f32s, the file's dataspace selected by hdf5-metno: no copy
/// of the elements and no conversion check per call, as a C program moves them.
///
/// # Safety
/// `buffer` must hold `len` f32s, writable for reads.
unsafe fn move_points(
    write: bool,
    dset: &Dataset,
    points: &Selection,
    (buffer, len): (*mut f32, usize),
) -> Result<()> {
    let file = h5("H5Sselect", dset.space().and_then(|s| s.select(points)))?;
    if file.selection_size() != len {
        return Err(format!(
            "{} points selected for {len}",
            file.selection_size()
        ));
    }
    let memory = h5("H5Screate_simple", Dataspace::try_new(len))?;
    let (api, f32_type) = (linked_hdf5(), f32_type()?);
    let (d, t, m, f) = (dset.id(), f32_type.id(), memory.id(), file.id());
    let status = locked(|| {
        // SAFETY: open ids; the buffer holds the selection's f32s, as the caller guarantees.
        let status = unsafe {
            match write {
                true => api.H5Dwrite.map(|w| w(d, t, m, f, 0, buffer.cast())),
                false => api.H5Dread.map(|r| r(d, t, m, f, 0, buffer.cast())),
            }
        };
        status
            .map_err(|missing| missing.to_string().into())
            .and_then(hdf5::h5check)
    });
    h5(["H5Dread", "H5Dwrite"][write as usize], status.map(drop))
}

/// Reads `sel` of `dset` into `out` (whose length must be the selection's).
fn read_dset(dset: &Dataset, sel: &Sel, out: &mut [f32]) -> Result<()> {
    let [start, step, count] = match sel {
        Sel::Slab(slab) => slab,
        Sel::Points(points) => {
            let buffer = (out.as_mut_ptr(), out.len());
            // SAFETY: `out` holds `out.len()` writable f32s; every bit pattern is an f32.
            return unsafe { move_points(false, dset, points, buffer) };
        }
    };
    let (slab, nbytes) = (Hyperslab { start, step, count }, std::mem::size_of_val(out));
    // SAFETY: `out` holds `nbytes` writable bytes; every bit pattern is an f32.
    let read = unsafe {
        transfer::read(
            dset,
            &f32_type()?,
            Some(slab),
            out.as_mut_ptr().cast(),
            nbytes,
        )
    };
    h5("H5Dread", read)
}

/// Writes `vals` to `sel` of `dset` (`vals`' length must be the selection's).
fn write_dset(dset: &Dataset, sel: &Sel, vals: &[f32]) -> Result<()> {
    let [start, step, count] = match sel {
        Sel::Slab(slab) => slab,
        Sel::Points(points) => {
            let buffer = (vals.as_ptr().cast_mut(), vals.len());
            // SAFETY: `vals` holds `vals.len()` f32s, which a write only reads.
            return unsafe { move_points(true, dset, points, buffer) };
        }
    };
    let (slab, nbytes) = (
        Hyperslab { start, step, count },
        std::mem::size_of_val(vals),
    );
    // SAFETY: `vals` holds `nbytes` readable bytes.
    let written =
        unsafe { transfer::write(dset, &f32_type()?, Some(slab), vals.as_ptr().cast(), nbytes) };
    h5("H5Dwrite", written)
}

/// Opens `path` under `driver`, reads `sel` of dataset `name` into `out`, closes.
fn read_sel(path: &Path, driver: &Driver, name: &str, sel: &Sel, out: &mut [f32]) -> Result<()> {
    let file = open(path, driver)?;
    let dset = h5("H5Dopen2", file.dataset(name))?;
    read_dset(&dset, sel, out)?;
    drop(dset);
    h5("H5Fclose", file.close())
}

fn rows(out: &mut Vec<Measurement>, name: &str, drivers: &[Driver], times: Vec<Vec<f64>>) {
    for (d, t) in drivers.iter().zip(times) {
        out.push(Measurement::duration(name, driver_label(d), t));
    }
}

pub fn run(
    opts: &HostOptions,
    drivers: &[Driver],
    progress: &mut dyn FnMut(),
) -> Result<Vec<Measurement>> {
    let mut out = Vec::new();
    let n = (opts.bytes.min(MAX_BYTES) / 4) as usize;
    let label = crate::stats::size_label(n as u64 * 4);
    let path = opts.dir.join("h5gds-access.h5");
    let data: Vec<f32> = (0..n).map(value).collect();
    write_file(&path, "x", &[n], &data)?;
    drop(data);

    // 1-D steps.
    for step in [2usize, 7, 64, 1024] {
        let count = n.div_ceil(step);
        let want: Vec<f32> = (0..count).map(|k| value(k * step)).collect();
        let mut got = vec![0f32; count];
        let sel = slab([0], [step], [count]);
        let times = interleave(drivers, opts.reps, progress, |d| {
            got.fill(-1.0);
            let t = timed(|| read_sel(&path, d, "x", &sel, &mut got))?;
            check_equal(&format!("x[::{step}]"), &got, &want)?;
            Ok(t)
        })?;
        rows(
            &mut out,
            &format!("read x[::{step}] of {label} f32"),
            drivers,
            times,
        );
    }

    // Points, sorted and in random order.
    let points = POINTS.min(n / 4).max(1);
    let unsorted = random_indices(points, n, 0x9e37_79b9_7f4a_7c15);
    let mut sorted = unsorted.clone();
    sorted.sort_unstable();
    for (what, idx) in [("sorted", &sorted), ("unsorted", &unsorted)] {
        let want: Vec<f32> = idx.iter().map(|&i| value(i as usize)).collect();
        let mut got = vec![0f32; idx.len()];
        let sel = point_selection(idx);
        let times = interleave(drivers, opts.reps, progress, |d| {
            got.fill(-1.0);
            let t = timed(|| read_sel(&path, d, "x", &sel, &mut got))?;
            check_equal(&format!("{what} points"), &got, &want)?;
            Ok(t)
        })?;
        rows(
            &mut out,
            &format!("read {points} {what} points of {label} f32"),
            drivers,
            times,
        );
    }

    // A small block of a 2-D matrix (the column and every 4th row are in `host`).
    let m = opts.matrix;
    let mpath = opts.dir.join("h5gds-access-matrix.h5");
    let matrix: Vec<f32> = (0..m * m).map(value).collect();
    write_file(&mpath, "m", &[m, m], &matrix)?;
    drop(matrix);
    let b = (m / 2).min(64);
    let (r0, c0) = (m / 3, m / 3);
    let want: Vec<f32> = (0..b * b)
        .map(|i| value((r0 + i / b) * m + c0 + i % b))
        .collect();
    let mut got = vec![0f32; b * b];
    let sel = slab([r0, c0], [1, 1], [b, b]);
    let times = interleave(drivers, opts.reps, progress, |d| {
        got.fill(-1.0);
        let t = timed(|| read_sel(&mpath, d, "m", &sel, &mut got))?;
        check_equal("block", &got, &want)?;
        Ok(t)
    })?;
    rows(
        &mut out,
        &format!("read a {b}x{b} block of {m}x{m} f32"),
        drivers,
        times,
    );

    // Partial reads of chunked datasets: every 3rd element of the middle 80%.
    let cpath = opts.dir.join("h5gds-access-chunked.h5");
    let chunk = (n / 16).clamp(1, 256 << 10);
    {
        let data: Vec<f32> = (0..n).map(value).collect();
        let file = create(&cpath, &Driver::Sec2)?;
        for (name, gzip) in [("plain", false), ("gzip", true)] {
            let mut builder = file.new_dataset::<f32>().shape(n).chunk(chunk);
            if gzip {
                builder = builder.deflate(1);
            }
            let dset = h5("H5Dcreate2", builder.create(name))?;
            h5("H5Dwrite", dset.write_raw(&data))?;
        }
        h5("H5Fclose", file.close())?;
    }
    let (first, last) = (n / 10, n - n / 10);
    let count = (last - first).div_ceil(3);
    for name in ["plain", "gzip"] {
        let want: Vec<f32> = (0..count).map(|k| value(first + 3 * k)).collect();
        let mut got = vec![0f32; count];
        let sel = slab([first], [3], [count]);
        let times = interleave(drivers, opts.reps, progress, |d| {
            got.fill(-1.0);
            let t = timed(|| read_sel(&cpath, d, name, &sel, &mut got))?;
            check_equal(&format!("{name} chunks"), &got, &want)?;
            Ok(t)
        })?;
        let what = if name == "gzip" { "gzip" } else { "unfiltered" };
        rows(
            &mut out,
            &format!("read [n/10:-n/10:3] of {label} {what} chunked f32"),
            drivers,
            times,
        );
    }

    // Writes: a fresh file each run, x[::3] (or points) written, closed; checked afterwards.
    let wpath = |d: &Driver| {
        opts.dir
            .join(format!("h5gds-access-w-{}.h5", driver_label(d)))
    };
    let thirds = n.div_ceil(3);
    let values: Vec<f32> = (0..thirds).map(|k| value(k + 1)).collect();
    let write = |d: &Driver, sel: &Sel, vals: &[f32]| {
        let _ = std::fs::remove_file(wpath(d));
        timed(|| {
            let file = create(&wpath(d), d)?;
            let dset = h5("H5Dcreate2", file.new_dataset::<f32>().shape(n).create("x"))?;
            write_dset(&dset, sel, vals)?;
            drop(dset);
            h5("H5Fclose", file.close())
        })
    };
    let mut back = vec![0f32; n];
    let whole = slab([0], [1], [n]);
    let sel = slab([0], [3], [thirds]);
    let times = interleave(drivers, opts.reps, progress, |d| {
        let t = write(d, &sel, &values)?;
        read_sel(&wpath(d), &Driver::Sec2, "x", &whole, &mut back)?;
        let want: Vec<f32> = (0..n)
            .map(|i| if i % 3 == 0 { value(i / 3 + 1) } else { 0.0 })
            .collect();
        check_equal("x[::3] written", &back, &want)?;
        Ok(t)
    })?;
    rows(
        &mut out,
        &format!("write x[::3] of {label} f32"),
        drivers,
        times,
    );
    let pvals: Vec<f32> = (0..unsorted.len()).map(|k| value(k + 1)).collect();
    let sel = point_selection(&unsorted);
    let times = interleave(drivers, opts.reps, progress, |d| {
        let t = write(d, &sel, &pvals)?;
        read_sel(&wpath(d), &Driver::Sec2, "x", &whole, &mut back)?;
        let mut want = vec![0f32; n];
        for (k, &i) in unsorted.iter().enumerate() {
            want[i as usize] = pvals[k];
        }
        check_equal("points written", &back, &want)?;
        Ok(t)
    })?;
    rows(
        &mut out,
        &format!("write {points} unsorted points of {label} f32"),
        drivers,
        times,
    );
    drop(back);
    for d in drivers {
        let _ = std::fs::remove_file(wpath(d));
    }

    // Threads sharing one open file, each reading mixed selections (HDF5 serialises them, as
    // h5py's lock does): x[t::7] over a slice, a column, sorted points.
    let sorted_sel = point_selection(&sorted);
    for threads in [1usize, 2, 8] {
        let times = interleave(drivers, opts.reps, progress, |d| {
            let file = open(&path, d)?;
            let mfile = open(&mpath, d)?;
            let lock = Mutex::new(());
            let t = timed(|| {
                std::thread::scope(|s| {
                    let workers: Vec<_> = (0..threads)
                        .map(|t| {
                            let (file, mfile, lock) = (&file, &mfile, &lock);
                            let (sorted, sorted_sel) = (&sorted, &sorted_sel);
                            s.spawn(move || -> Result<()> {
                                let count = (n / 8).div_ceil(7);
                                let mut strided = vec![0f32; count];
                                let mut column = vec![0f32; m];
                                let mut pts = vec![0f32; sorted.len()];
                                let strided_sel = slab([t], [7], [count]);
                                let column_sel = slab([0, t % m], [1, 1], [m, 1]);
                                {
                                    let _held =
                                        lock.lock().map_err(|_| "lock poisoned".to_string())?;
                                    let x = h5("H5Dopen2", file.dataset("x"))?;
                                    let mm = h5("H5Dopen2", mfile.dataset("m"))?;
                                    read_dset(&x, &strided_sel, &mut strided)?;
                                    read_dset(&mm, &column_sel, &mut column)?;
                                    read_dset(&x, sorted_sel, &mut pts)?;
                                }
                                check_equal(
                                    "thread strided",
                                    &strided,
                                    &(0..count).map(|k| value(t + 7 * k)).collect::<Vec<_>>(),
                                )?;
                                check_equal(
                                    "thread column",
                                    &column,
                                    &(0..m).map(|r| value(r * m + t % m)).collect::<Vec<_>>(),
                                )?;
                                check_equal(
                                    "thread points",
                                    &pts,
                                    &sorted
                                        .iter()
                                        .map(|&i| value(i as usize))
                                        .collect::<Vec<_>>(),
                                )
                            })
                        })
                        .collect();
                    workers.into_iter().try_for_each(|w| {
                        w.join().map_err(|_| "reader thread panicked".to_string())?
                    })
                })
            })?;
            h5("H5Fclose", mfile.close())?;
            h5("H5Fclose", file.close())?;
            Ok(t)
        })?;
        rows(
            &mut out,
            &format!("{threads} threads reading mixed selections of one file"),
            drivers,
            times,
        );
    }

    // Open, read every 3rd element of a small-chunked dataset, close; `--small-datasets` cycles.
    let cycles = opts.small_datasets.max(1);
    let spath = opts.dir.join("h5gds-access-small-chunks.h5");
    let small: Vec<f32> = (0..100_000).map(value).collect();
    {
        let file = create(&spath, &Driver::Sec2)?;
        let dset = h5(
            "H5Dcreate2",
            file.new_dataset::<f32>()
                .shape(small.len())
                .chunk(10_000)
                .create("c"),
        )?;
        h5("H5Dwrite", dset.write_raw(&small))?;
        drop(dset);
        h5("H5Fclose", file.close())?;
    }
    let want: Vec<f32> = small.iter().step_by(3).copied().collect();
    let mut got = vec![0f32; want.len()];
    let sel = slab([0], [3], [want.len()]);
    let times = interleave(drivers, opts.reps, progress, |d| {
        let t = timed(|| {
            for _ in 0..cycles {
                read_sel(&spath, d, "c", &sel, &mut got)?;
            }
            Ok(())
        })?;
        check_equal("chunked[::3]", &got, &want)?;
        Ok(t)
    })?;
    rows(
        &mut out,
        &format!("{cycles} x (open, read chunked[::3], close)"),
        drivers,
        times,
    );

    for p in [&path, &mpath, &cpath, &spath] {
        let _ = std::fs::remove_file(p);
    }
    Ok(out)
}
