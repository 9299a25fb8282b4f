//! Access patterns (issue 13): strided, point and block selections, partial reads of chunked
//! datasets, strided and point writes, threads sharing one file, and an open/read/close loop;
//! `gds` against sec2, interleaved. Every read is checked against the data, outside the timing.

use crate::h5::{self, h5t, Driver, Layout, Selection};
use crate::host::{check_equal, interleave, timed, HostOptions};
use crate::stats::Measurement;
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

fn write_file(
    path: &Path,
    name: &str,
    layout: Layout,
    dims: &[u64],
    data: &[f32],
) -> h5::Result<()> {
    let fapl = h5::file_access(&Driver::Sec2)?;
    let file = h5::create_file(path, &fapl)?;
    let dset = h5::create_dataset(&file, name, *h5t::H5T_IEEE_F32LE, dims, layout)?;
    h5::write_all(&dset, *h5t::H5T_NATIVE_FLOAT, data)?;
    drop(dset);
    file.close()
}

/// Opens `path` under `driver`, reads `sel` of dataset `name` into `out`, closes.
fn read_sel(
    path: &Path,
    driver: &Driver,
    name: &str,
    sel: Selection,
    out: &mut [f32],
) -> h5::Result<()> {
    let fapl = h5::file_access(driver)?;
    let file = h5::open_file(path, &fapl)?;
    let dset = h5::open_dataset(&file, name)?;
    // SAFETY: every caller sizes `out` to the selection.
    unsafe { h5::read_raw(&dset, *h5t::H5T_NATIVE_FLOAT, sel, out.as_mut_ptr().cast())? };
    drop(dset);
    file.close()
}

fn rows(out: &mut Vec<Measurement>, name: &str, drivers: &[Driver], times: Vec<Vec<f64>>) {
    for (d, t) in drivers.iter().zip(times) {
        out.push(Measurement::duration(name, d.name(), t));
    }
}

pub fn run(
    opts: &HostOptions,
    drivers: &[Driver],
    progress: &mut dyn FnMut(),
) -> h5::Result<Vec<Measurement>> {
    let mut out = Vec::new();
    let n = (opts.bytes.min(MAX_BYTES) / 4) as usize;
    let label = crate::stats::size_label(n as u64 * 4);
    let path = opts.dir.join("h5gds-access.h5");
    let data: Vec<f32> = (0..n).map(value).collect();
    write_file(&path, "x", Layout::Contiguous, &[n as u64], &data)?;
    drop(data);

    // 1-D steps.
    for step in [2usize, 7, 64, 1024] {
        let count = n.div_ceil(step);
        let want: Vec<f32> = (0..count).map(|k| value(k * step)).collect();
        let mut got = vec![0f32; count];
        let (start, stride, cnt) = ([0u64], [step as u64], [count as u64]);
        let times = interleave(drivers, opts.reps, progress, |d| {
            got.fill(-1.0);
            let sel = Selection::Slab {
                start: &start,
                stride: &stride,
                count: &cnt,
            };
            let t = timed(|| read_sel(&path, d, "x", sel, &mut got))?;
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
        let times = interleave(drivers, opts.reps, progress, |d| {
            got.fill(-1.0);
            let t = timed(|| read_sel(&path, d, "x", Selection::Points(idx), &mut got))?;
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
    write_file(
        &mpath,
        "m",
        Layout::Contiguous,
        &[m as u64, m as u64],
        &matrix,
    )?;
    drop(matrix);
    let b = (m / 2).min(64);
    let (r0, c0) = (m / 3, m / 3);
    let want: Vec<f32> = (0..b * b)
        .map(|i| value((r0 + i / b) * m + c0 + i % b))
        .collect();
    let mut got = vec![0f32; b * b];
    let (start, stride, cnt) = ([r0 as u64, c0 as u64], [1u64, 1], [b as u64, b as u64]);
    let times = interleave(drivers, opts.reps, progress, |d| {
        got.fill(-1.0);
        let sel = Selection::Slab {
            start: &start,
            stride: &stride,
            count: &cnt,
        };
        let t = timed(|| read_sel(&mpath, d, "m", sel, &mut got))?;
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
    let chunk = [(n as u64 / 16).clamp(1, 256 << 10)];
    {
        let data: Vec<f32> = (0..n).map(value).collect();
        let fapl = h5::file_access(&Driver::Sec2)?;
        let file = h5::create_file(&cpath, &fapl)?;
        for (name, layout) in [
            ("plain", Layout::Chunked(&chunk)),
            ("gzip", Layout::ChunkedGzip(&chunk)),
        ] {
            let dset = h5::create_dataset(&file, name, *h5t::H5T_IEEE_F32LE, &[n as u64], layout)?;
            h5::write_all(&dset, *h5t::H5T_NATIVE_FLOAT, &data)?;
        }
        file.close()?;
    }
    let (first, last) = (n / 10, n - n / 10);
    let count = (last - first).div_ceil(3);
    for name in ["plain", "gzip"] {
        let want: Vec<f32> = (0..count).map(|k| value(first + 3 * k)).collect();
        let mut got = vec![0f32; count];
        let (start, stride, cnt) = ([first as u64], [3u64], [count as u64]);
        let times = interleave(drivers, opts.reps, progress, |d| {
            got.fill(-1.0);
            let sel = Selection::Slab {
                start: &start,
                stride: &stride,
                count: &cnt,
            };
            let t = timed(|| read_sel(&cpath, d, name, sel, &mut got))?;
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
    let wpath = |d: &Driver| opts.dir.join(format!("h5gds-access-w-{}.h5", d.name()));
    let thirds = n.div_ceil(3);
    let values: Vec<f32> = (0..thirds).map(|k| value(k + 1)).collect();
    let write = |d: &Driver, sel: Selection, vals: &[f32]| {
        let _ = std::fs::remove_file(wpath(d));
        timed(|| {
            let fapl = h5::file_access(d)?;
            let file = h5::create_file(&wpath(d), &fapl)?;
            let dset = h5::create_dataset(
                &file,
                "x",
                *h5t::H5T_IEEE_F32LE,
                &[n as u64],
                Layout::Contiguous,
            )?;
            // SAFETY: `vals` holds one element per selected point.
            unsafe { h5::write_raw(&dset, *h5t::H5T_NATIVE_FLOAT, sel, vals.as_ptr().cast())? };
            drop(dset);
            file.close()
        })
    };
    let mut back = vec![0f32; n];
    let (start, stride, cnt) = ([0u64], [3u64], [thirds as u64]);
    let times = interleave(drivers, opts.reps, progress, |d| {
        let sel = Selection::Slab {
            start: &start,
            stride: &stride,
            count: &cnt,
        };
        let t = write(d, sel, &values)?;
        read_sel(&wpath(d), &Driver::Sec2, "x", Selection::All, &mut back)?;
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
    let times = interleave(drivers, opts.reps, progress, |d| {
        let t = write(d, Selection::Points(&unsorted), &pvals)?;
        read_sel(&wpath(d), &Driver::Sec2, "x", Selection::All, &mut back)?;
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
    for threads in [1usize, 2, 8] {
        let times = interleave(drivers, opts.reps, progress, |d| {
            let fapl = h5::file_access(d)?;
            let file = h5::open_file(&path, &fapl)?;
            let mfile = h5::open_file(&mpath, &fapl)?;
            let lock = Mutex::new(());
            let t = timed(|| {
                std::thread::scope(|s| {
                    let workers: Vec<_> = (0..threads)
                        .map(|t| {
                            let (file, mfile, lock, sorted) = (&file, &mfile, &lock, &sorted);
                            s.spawn(move || -> h5::Result<()> {
                                let count = (n / 8).div_ceil(7);
                                let mut strided = vec![0f32; count];
                                let mut column = vec![0f32; m];
                                let mut pts = vec![0f32; sorted.len()];
                                let (start, stride, cnt) = ([t as u64], [7u64], [count as u64]);
                                let (cstart, cstride, ccnt) =
                                    ([0u64, t as u64 % m as u64], [1u64, 1], [m as u64, 1]);
                                {
                                    let _held =
                                        lock.lock().map_err(|_| "lock poisoned".to_string())?;
                                    let x = h5::open_dataset(file, "x")?;
                                    let mm = h5::open_dataset(mfile, "m")?;
                                    let f = *h5t::H5T_NATIVE_FLOAT;
                                    // SAFETY: each buffer is sized to its selection.
                                    unsafe {
                                        h5::read_raw(
                                            &x,
                                            f,
                                            Selection::Slab {
                                                start: &start,
                                                stride: &stride,
                                                count: &cnt,
                                            },
                                            strided.as_mut_ptr().cast(),
                                        )?;
                                        h5::read_raw(
                                            &mm,
                                            f,
                                            Selection::Slab {
                                                start: &cstart,
                                                stride: &cstride,
                                                count: &ccnt,
                                            },
                                            column.as_mut_ptr().cast(),
                                        )?;
                                        h5::read_raw(
                                            &x,
                                            f,
                                            Selection::Points(sorted),
                                            pts.as_mut_ptr().cast(),
                                        )?;
                                    }
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
            mfile.close()?;
            file.close()?;
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
    write_file(&spath, "c", Layout::Chunked(&[10_000]), &[100_000], &small)?;
    let want: Vec<f32> = small.iter().step_by(3).copied().collect();
    let mut got = vec![0f32; want.len()];
    let (start, stride, cnt) = ([0u64], [3u64], [want.len() as u64]);
    let times = interleave(drivers, opts.reps, progress, |d| {
        let t = timed(|| {
            for _ in 0..cycles {
                let sel = Selection::Slab {
                    start: &start,
                    stride: &stride,
                    count: &cnt,
                };
                read_sel(&spath, d, "c", sel, &mut got)?;
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
