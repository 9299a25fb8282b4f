//! The MPI test program, run by `tests/mpi.rs` as `mpirun -np N h5mpiprog <dir>`: every rank
//! writes and reads its tiles of arrays through array-io's collective calls (every element type,
//! 1-D to 3-D, uneven shares, a 2-D grid, caller-given tiles, host and device tiles), checks
//! what it reads, and provokes the collective failures (a wrong shape, a wrong type, a
//! directory, one rank failing mid-write, bad reads), checking every rank's error. Rank 0
//! writes `manifest.txt` (file, dataset, type, shape per line) for the h5py check that follows
//! in a separate process. Every rank prints `rank R: ALL OK` at the end; any failed check
//! panics, which ends the job with an error.

use array_io::collective::{self, mpi::traits::*, Decomposition};
use array_io::{DeviceArray, Element, Settings};
use cudarc::driver::CudaContext;
use ndarray::{ArrayD, IxDyn};
use std::fmt::Debug;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The value of every element, from its row-major index in the global array; the h5py check
/// computes the same with numpy (`mpi_verify.py`).
trait Pattern: Element + PartialEq + Debug {
    fn at(i: u64) -> Self;
}

macro_rules! int_pattern {
    ($($t:ty),*) => {$(
        impl Pattern for $t {
            fn at(i: u64) -> Self {
                // Truncation as numpy's astype does it.
                (i.wrapping_mul(2654435761) >> 7) as $t
            }
        }
    )*};
}
int_pattern!(i8, i16, i32, i64, isize, u8, u16, u32, u64, usize);

impl Pattern for f32 {
    fn at(i: u64) -> Self {
        (i as f64 * 0.5 - 3.0) as f32
    }
}
impl Pattern for f64 {
    fn at(i: u64) -> Self {
        i as f64 * 0.5 - 3.0
    }
}
impl Pattern for half::f16 {
    fn at(i: u64) -> Self {
        half::f16::from_f64((i % 2048) as f64 * 0.25)
    }
}
impl Pattern for bool {
    fn at(i: u64) -> Self {
        i % 3 == 0
    }
}

struct Job {
    world: collective::mpi::topology::SimpleCommunicator,
    rank: usize,
    size: usize,
    dir: PathBuf,
    manifest: Vec<String>,
    device: Option<Arc<CudaContext>>,
}

/// The box (`start`, `shape`) of `global` at `start`, filled with the pattern.
fn tile<T: Pattern>(global: &[usize], start: &[usize], shape: &[usize]) -> ArrayD<T> {
    ArrayD::from_shape_fn(IxDyn(shape), |idx| {
        let mut flat = 0u64;
        for d in 0..global.len() {
            flat = flat * global[d] as u64 + (start[d] + idx[d]) as u64;
        }
        T::at(flat)
    })
}

/// This rank's box of `global` for writing under `decomposition` (the same box it reads).
fn my_box(job: &Job, decomposition: &Decomposition, global: &[usize]) -> (Vec<usize>, Vec<usize>) {
    collective::tile_of(decomposition, global, job.rank, job.size).expect("a valid decomposition")
}

/// `err` must be the collective error with every `needles` in its text.
fn expect_error<T: Debug>(job: &Job, what: &str, result: array_io::Result<T>, needles: &[&str]) {
    let err = match result {
        Ok(v) => panic!("rank {}: {what}: expected an error, got {v:?}", job.rank),
        Err(e) => e.to_string(),
    };
    for needle in needles {
        assert!(
            err.contains(needle),
            "rank {}: {what}: {needle:?} is not in the error: {err}",
            job.rank
        );
    }
    println!("rank {}: expected error, {what}: {err}", job.rank);
}

fn no_partial_files(dir: &Path) {
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".partial"))
        .collect();
    assert!(left.is_empty(), "temporary files left behind: {left:?}");
}

impl Job {
    fn record(&mut self, file: &Path, dataset: &str, type_name: &str, shape: &[usize]) {
        let shape: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        self.manifest.push(format!(
            "{}\t{dataset}\t{type_name}\t{}",
            file.file_name().unwrap().to_string_lossy(),
            shape.join(",")
        ));
    }

    /// Writes the pattern array of `global` from every rank's box (host or device tiles),
    /// reads every box back (host, and device when there is one) and compares.
    fn round_trip<T: Pattern>(
        &mut self,
        name: &str,
        global: &[usize],
        decomposition: &Decomposition,
        device_tiles: bool,
    ) {
        let path = self.dir.join(format!("{name}.h5"));
        let (start, shape) = my_box(self, decomposition, global);
        let mine = tile::<T>(global, &start, &shape);
        let settings = Settings::default();
        let write = match decomposition {
            // Caller-given tiles say where they go.
            Decomposition::Tile { .. } => Decomposition::Tile {
                start: start.clone(),
                shape: shape.clone(),
            },
            other => other.clone(),
        };
        if device_tiles {
            let ctx = self.device.as_ref().expect("a device");
            let d = DeviceArray::from_host(ctx, &mine).expect("a device tile");
            collective::to_file_with(&self.world, &d, &path, "/g/x", &write, &settings)
        } else {
            collective::to_file_with(&self.world, &mine, &path, "/g/x", &write, &settings)
        }
        .unwrap_or_else(|e| panic!("rank {}: writing {name}: {e}", self.rank));
        let options = array_io::ReadOptions::default();
        let back = collective::from_file_with::<_, T>(&self.world, &path, "/g/x", &write, &options)
            .unwrap_or_else(|e| panic!("rank {}: reading {name}: {e}", self.rank));
        assert_eq!(back, mine, "rank {}: {name} read back", self.rank);
        if let Some(ctx) = &self.device {
            let d = collective::from_file_to_device_with::<_, T>(
                &self.world,
                &path,
                "/g/x",
                ctx,
                &write,
                &options,
            )
            .unwrap_or_else(|e| panic!("rank {}: reading {name} to the device: {e}", self.rank));
            assert_eq!(
                d.to_host().unwrap(),
                mine,
                "rank {}: {name} read to the device",
                self.rank
            );
        }
        self.record(&path, "/g/x", T::NAME, global);
    }

    fn every_type(&mut self, global: &[usize], tag: &str, device_tiles: bool) {
        let d = Decomposition::LeadingAxis;
        macro_rules! each {
            ($($t:ty),*) => {$(
                self.round_trip::<$t>(
                    &format!("{tag}_{}", <$t as Element>::NAME),
                    global,
                    &d,
                    device_tiles,
                );
            )*};
        }
        each!(
            i8,
            i16,
            i32,
            i64,
            isize,
            u8,
            u16,
            u32,
            u64,
            usize,
            half::f16,
            f32,
            f64,
            bool
        );
    }

    fn batched(&mut self) {
        let global = [2 * self.size + 3, 5];
        let path = self.dir.join("batched.h5");
        let (start, shape) = my_box(self, &Decomposition::LeadingAxis, &global);
        collective::to_file(
            &self.world,
            &tile::<i32>(&global, &start, &shape),
            &path,
            "/b",
        )
        .unwrap();
        let mut chunks = 0u64;
        let mut first = u64::MAX;
        for item in
            collective::from_file_batched::<_, i32>(&self.world, &path, "/b", &[2, 2]).unwrap()
        {
            let (chunk, at) = item.unwrap();
            let want = tile::<i32>(&global, &at, chunk.shape());
            assert_eq!(chunk, want, "rank {}: the chunk at {at:?}", self.rank);
            // Row-major chunk index, for the check that shares are contiguous blocks.
            let index = (at[0] / 2) * 3 + at[1] / 2;
            first = first.min(index as u64);
            chunks += 1;
        }
        let total = global[0].div_ceil(2) as u64 * 3;
        let mut counts = vec![0u64; self.size];
        self.world.all_gather_into(&chunks, &mut counts[..]);
        assert_eq!(
            counts.iter().sum::<u64>(),
            total,
            "every chunk read once: {counts:?}"
        );
        let expected_first = (self.rank as u64 * total) / self.size as u64;
        if chunks > 0 {
            assert_eq!(
                first, expected_first,
                "rank {}'s share starts at r*n/p",
                self.rank
            );
        }
        self.record(&path, "/b", "i32", &global);
    }

    fn failures(&mut self) {
        let last = self.size - 1;
        let p = self.size;
        if p > 1 {
            // A rank whose tile has the wrong shape.
            let path = self.dir.join("wrong_shape.h5");
            let cols = if self.rank == last { 4 } else { 3 };
            let t = ndarray::Array2::<f32>::zeros((2, cols));
            let result = collective::to_file(&self.world, &t, &path, "/x");
            expect_error(
                self,
                "a wrong shape",
                result,
                &[&format!("rank {last}'s tile has shape [2, 4]")],
            );
            assert!(!path.exists());
            // A rank whose tile has another element type.
            let path = self.dir.join("wrong_type.h5");
            let result = if self.rank == last {
                collective::to_file(&self.world, &ndarray::Array1::<i32>::zeros(2), &path, "/x")
            } else {
                collective::to_file(&self.world, &ndarray::Array1::<f32>::zeros(2), &path, "/x")
            };
            expect_error(
                self,
                "a wrong type",
                result,
                &[&format!("rank {last} has a tile of i32, rank 0 f32")],
            );
            assert!(!path.exists());
        }
        // A directory as the path.
        let result = collective::to_file(
            &self.world,
            &ndarray::Array1::<f32>::zeros(2),
            &self.dir,
            "/x",
        );
        let needle = format!("describing the tiles failed on rank 0 of {p}");
        expect_error(self, "a directory", result, &[&needle, "is a directory"]);
        assert!(self.dir.is_dir());

        // One rank fails mid-write (its file size limit stops its pwrite with EFBIG, as a full
        // disk stops it with ENOSPC): every rank fails naming it; the old file stays.
        for device in [false, true] {
            if device && self.device.is_none() {
                continue;
            }
            let path = self.dir.join(if device {
                "mid_write_device.h5"
            } else {
                "mid_write.h5"
            });
            let old = ndarray::Array1::<f64>::from_elem(3, 42.0);
            if self.rank == 0 {
                array_io::to_file(&old, &path, "/old").unwrap();
            }
            self.world.barrier();
            let rows = (2 << 20) / 4; // 2 MiB of f32 per rank
            let t = ndarray::Array2::<f32>::from_elem((rows, 1), self.rank as f32);
            // Allocated before the limit is set (the emulator's device memory is a mapping the
            // limit would refuse).
            let d = self
                .device
                .as_ref()
                .filter(|_| device)
                .map(|ctx| DeviceArray::from_host(ctx, &t).unwrap());
            let limit = (last as u64 * 2 + 1) << 20; // 1 MiB into the last rank's bytes
            let failing = self.rank == last;
            if failing {
                set_file_size_limit(Some(limit));
            }
            let result = match &d {
                Some(d) => collective::to_file(&self.world, d, &path, "/x"),
                None => collective::to_file(&self.world, &t, &path, "/x"),
            };
            if failing {
                set_file_size_limit(None);
            }
            // Alone, rank 0 hits the limit already when HDF5 extends the new file to hold the
            // allocated dataset.
            let needle = if p == 1 {
                "creating the file failed on rank 0 of 1".to_string()
            } else {
                format!("writing the tiles failed on rank {last} of {p}")
            };
            expect_error(
                self,
                "one rank failing mid-write",
                result,
                &[&needle, "File too large"],
            );
            let kept = array_io::from_file::<f64>(&path, "/old").unwrap();
            assert_eq!(kept, old.into_dyn(), "the old file is untouched");
            self.world.barrier();
            no_partial_files(&self.dir);
            if self.rank == 0 {
                self.record(&path, "/old", "f64", &[3]);
            }
        }

        // Reads: a missing dataset fails on every rank; a tile outside the dataset on one.
        let path = self.dir.join("batched.h5");
        let result = collective::from_file::<_, i32>(&self.world, &path, "/nope");
        let needle = if p == 1 {
            "reading the tiles failed on rank 0 of 1".to_string()
        } else {
            format!("reading the tiles failed on every rank ({p})")
        };
        expect_error(
            self,
            "a missing dataset",
            result,
            &[&needle, "no dataset \"/nope\""],
        );
        let tile = if self.rank == last {
            Decomposition::Tile {
                start: vec![0, 3],
                shape: vec![1, 5],
            }
        } else {
            Decomposition::Tile {
                start: vec![0, 0],
                shape: vec![1, 5],
            }
        };
        let result = collective::from_file_with::<_, i32>(
            &self.world,
            &path,
            "/b",
            &tile,
            &array_io::ReadOptions::default(),
        );
        expect_error(
            self,
            "a tile outside the dataset",
            result,
            &[
                &format!("rank {last} of {p}"),
                "reaches past the dataset's shape",
            ],
        );
    }
}

/// The emulator's counters (`h5gds_emu_counters`: live allocations, their bytes, live pinned
/// buffers, double frees, bounds violations, cuFile reads, cuFile writes, copies to and from the
/// device), or `None` when libcuda is not the emulator.
fn emulator_counters() -> Option<[u64; 9]> {
    let f = h5gds_tests::emulator::loaded_emulator_symbol(c"h5gds_emu_counters")?;
    // SAFETY: the symbol has the emulator's documented signature (one out-pointer to nine u64).
    unsafe {
        let f: unsafe extern "C" fn(*mut [u64; 9]) -> libc::c_int = std::mem::transmute(f);
        let mut out = [0u64; 9];
        (f(&mut out) == 0).then_some(out)
    }
}

/// After the device round trips: no device access outside an allocation on any rank, and a
/// rank on device 0 moved its tiles through cuFile (the direct path). Ranks on another device
/// are staged by array-io until the driver serves every device directly (then this check
/// should cover them too).
fn check_device_paths(job: &Job) {
    let Some(c) = emulator_counters() else {
        return; // a real GPU: the counters are the emulator's
    };
    let [_, _, _, double_frees, bounds, cufile_reads, cufile_writes, _, _] = c;
    assert_eq!((double_frees, bounds), (0, 0), "rank {}: {c:?}", job.rank);
    if job.device.as_ref().map(|d| d.ordinal()) == Some(0) {
        assert!(
            cufile_writes > 0 && cufile_reads > 0,
            "rank {} on device 0: tiles did not go through cuFile: {c:?}",
            job.rank
        );
    }
    println!(
        "rank {}: device paths checked (cuFile reads {cufile_reads}, writes {cufile_writes})",
        job.rank
    );
}

/// Sets (or lifts) this process's file size limit; writes past it fail with EFBIG (SIGXFSZ
/// ignored, so the write returns the error instead of killing the process).
fn set_file_size_limit(limit: Option<u64>) {
    // SAFETY: plain libc calls on this process's own limits and signal disposition.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        let mut current = std::mem::zeroed::<libc::rlimit>();
        assert_eq!(libc::getrlimit(libc::RLIMIT_FSIZE, &mut current), 0);
        current.rlim_cur = limit.unwrap_or(current.rlim_max);
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &current), 0);
    }
}

fn main() {
    let universe = collective::mpi::initialize().expect("MPI initialises");
    let world = universe.world();
    let dir = PathBuf::from(std::env::args().nth(1).expect("usage: h5mpiprog <dir>"));
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    // Device tiles where CUDA works (the emulator in the tests): each rank on its node-local
    // device.
    let device = if h5gds::cuda().is_ok() {
        Some(collective::local_device(&world).expect("a device per rank"))
    } else {
        None
    };
    if let Some(ctx) = &device {
        println!("rank {rank}: device {}", ctx.ordinal());
        // On the emulator, cuFile is opened first, as `h5gds info` does: the driver opens it in
        // the background at a process's first device transfer and stages transfers until then,
        // so `check_device_paths` would otherwise count how far that open had got.
        if emulator_counters().is_some() {
            if let Ok(settings) = h5gds::VfdSettings::load(None) {
                let _ = h5gds::cufile_driver(Some(&settings));
            }
        }
    }
    let mut job = Job {
        world,
        rank,
        size,
        dir,
        manifest: Vec::new(),
        device,
    };
    let p = size;
    // Uneven leading lengths: 2p + 1 rows, and p - 1 rows (a rank with none).
    job.every_type(&[2 * p + 1], "d1", false);
    job.every_type(&[2 * p + 1, 3], "d2", false);
    job.every_type(&[p + 2, 3, 2], "d3", false);
    job.round_trip::<f32>("short", &[p - 1, 2], &Decomposition::LeadingAxis, false);
    let grid = Decomposition::grid(p);
    job.round_trip::<f32>("grid2", &[2 * p + 1, 2 * p + 3], &grid, false);
    job.round_trip::<i16>("grid3", &[p + 3, 5, 2], &grid, false);
    // Caller-given tiles: columns split over the ranks.
    let cols = 3 * p + 1;
    let (c0, c1) = (job.rank * cols / p, (job.rank + 1) * cols / p);
    let columns = Decomposition::Tile {
        start: vec![0, c0],
        shape: vec![4, c1 - c0],
    };
    job.round_trip::<u8>("columns", &[4, cols], &columns, false);
    if job.device.is_some() {
        job.round_trip::<f32>("dev_d1", &[2 * p + 1], &Decomposition::LeadingAxis, true);
        job.round_trip::<f64>("dev_d2", &[2 * p + 1, 3], &Decomposition::LeadingAxis, true);
        job.round_trip::<i64>("dev_d3", &[p + 2, 3, 2], &Decomposition::LeadingAxis, true);
        job.round_trip::<half::f16>("dev_grid", &[2 * p + 1, 5], &grid, true);
        job.round_trip::<bool>("dev_bool", &[2 * p + 1], &Decomposition::LeadingAxis, true);
        job.round_trip::<u16>("dev_columns", &[4, cols], &columns, true);
        check_device_paths(&job);
    }
    job.batched();
    job.failures();
    job.world.barrier();
    no_partial_files(&job.dir);
    if job.rank == 0 {
        let mut f = std::fs::File::create(job.dir.join("manifest.txt")).unwrap();
        for line in &job.manifest {
            writeln!(f, "{line}").unwrap();
        }
    }
    println!("rank {}: ALL OK", job.rank);
}
