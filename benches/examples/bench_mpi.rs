//! Benchmark (not a test) of the collective calls: writing and reading one float32 array split
//! over the ranks, three ways, interleaved per repetition and compared in one run:
//!
//! * `collective`: `collective::to_file` / `from_file` (every rank its own bytes through the
//!   `gds` driver);
//! * `collective-sec2`: the same design with sec2 as every rank's I/O engine
//!   (`DevicePath::Staged`);
//! * `funnel`: everything through rank 0 (gather, one single-process `to_file`; one `from_file`,
//!   scatter), what Legate's guidance warns against.
//!
//! With `--device` the tiles live in device memory (each rank's from `local_device`); device
//! figures on a machine without a GPU are the emulator's and are labelled EMULATED.
//!
//! ```sh
//! cargo build --release -p array-io --features mpi --example bench_mpi
//! mpirun -np 4 target/release/examples/bench_mpi --size 1G --reps 3 [--device] [--dir DIR]
//! ```
//!
//! Aggregate throughput = array bytes / the slowest rank's time (a barrier before and after);
//! every read is checked against what was written.

use array_io::collective::mpi::datatype::{Partition, PartitionMut};
use array_io::collective::{self, mpi, mpi::traits::*};
use array_io::{DeviceArray, DevicePath, Settings};
use cudarc::driver::CudaContext;
use mpi::topology::SimpleCommunicator;
use ndarray::{Array1, ArrayD};
use std::sync::Arc;
use std::time::Instant;

struct Args {
    size: u64,
    reps: usize,
    device: bool,
    dir: std::path::PathBuf,
}

fn args() -> Args {
    let mut out = Args {
        size: 64 << 20,
        reps: 3,
        device: false,
        dir: std::env::temp_dir(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--size" => {
                out.size = h5gds_runtime::size::parse_size(&it.next().expect("--size N[K|M|G]"))
                    .expect("a size")
            }
            "--reps" => out.reps = it.next().expect("--reps N").parse().expect("a count"),
            "--device" => out.device = true,
            "--dir" => out.dir = it.next().expect("--dir DIR").into(),
            other => panic!("unknown argument {other:?}"),
        }
    }
    out
}

/// This rank's rows of an n-element 1-D array (r*n/p rule) and everyone's counts.
fn shares(n: usize, p: usize) -> Vec<(usize, usize)> {
    (0..p).map(|r| (r * n / p, (r + 1) * n / p)).collect()
}

enum Tile {
    Host(Array1<f32>),
    Device(DeviceArray<f32>),
}

impl Tile {
    fn host(&self) -> ArrayD<f32> {
        match self {
            Tile::Host(a) => a.clone().into_dyn(),
            Tile::Device(d) => d.to_host().expect("a device copy"),
        }
    }
}

fn timed(world: &SimpleCommunicator, f: impl FnOnce()) -> f64 {
    world.barrier();
    let t = Instant::now();
    f();
    world.barrier();
    t.elapsed().as_secs_f64()
}

/// Funnel write: gather every tile on rank 0, which writes the whole array.
fn funnel_write(world: &SimpleCommunicator, tile: &Tile, counts: &[i32], path: &std::path::Path) {
    let host = tile.host();
    let mine = host.as_slice().expect("contiguous");
    let root = world.process_at_rank(0);
    if world.rank() == 0 {
        let total: i32 = counts.iter().sum();
        let displs: Vec<i32> = counts
            .iter()
            .scan(0, |a, &c| {
                let d = *a;
                *a += c;
                Some(d)
            })
            .collect();
        let mut all = vec![0f32; total as usize];
        {
            let mut part = PartitionMut::new(&mut all[..], counts, &displs[..]);
            root.gather_varcount_into_root(mine, &mut part);
        }
        array_io::to_file(&Array1::from(all), path, "/x").expect("funnel write");
    } else {
        root.gather_varcount_into(mine);
    }
}

/// Funnel read: rank 0 reads the whole array and scatters the tiles.
fn funnel_read(
    world: &SimpleCommunicator,
    counts: &[i32],
    path: &std::path::Path,
    ctx: Option<&Arc<CudaContext>>,
) -> Tile {
    let root = world.process_at_rank(0);
    let mut mine = vec![0f32; counts[world.rank() as usize] as usize];
    if world.rank() == 0 {
        let all = array_io::from_file::<f32>(path, "/x").expect("funnel read");
        let displs: Vec<i32> = counts
            .iter()
            .scan(0, |a, &c| {
                let d = *a;
                *a += c;
                Some(d)
            })
            .collect();
        let part = Partition::new(all.as_slice().expect("contiguous"), counts, &displs[..]);
        root.scatter_varcount_into_root(&part, &mut mine[..]);
    } else {
        root.scatter_varcount_into(&mut mine[..]);
    }
    let host = Array1::from(mine).into_dyn();
    match ctx {
        Some(ctx) => Tile::Device(DeviceArray::from_host(ctx, &host).expect("to the device")),
        None => Tile::Host(host.into_dimensionality().expect("1-D")),
    }
}

fn main() {
    let universe = mpi::initialize().expect("MPI initialises");
    let world = universe.world();
    let (rank, p) = (world.rank() as usize, world.size() as usize);
    let a = args();
    let n = (a.size / 4) as usize;
    let all = shares(n, p);
    let counts: Vec<i32> = all.iter().map(|(s, e)| (e - s) as i32).collect();
    let (first, end) = all[rank];
    let host = Array1::from_shape_fn(end - first, |i| (first + i) as f32);
    let ctx = a
        .device
        .then(|| collective::local_device(&world).expect("a device per rank"));
    let tile = match &ctx {
        Some(ctx) => Tile::Device(DeviceArray::from_host(ctx, &host).expect("a device tile")),
        None => Tile::Host(host.clone()),
    };
    let want = host.into_dyn();
    let path = a.dir.join(format!("bench_mpi_{p}.h5"));
    let sec2 = Settings {
        device_path: Some(DevicePath::Staged),
        ..Default::default()
    };
    let methods = ["collective", "collective-sec2", "funnel"];
    // seconds[method][0 = write, 1 = read]
    let mut seconds = vec![[Vec::new(), Vec::new()]; methods.len()];
    for _ in 0..a.reps {
        for (m, method) in methods.iter().enumerate() {
            let settings = if *method == "collective-sec2" {
                sec2.clone()
            } else {
                Settings::default()
            };
            let d = collective::Decomposition::LeadingAxis;
            let w = timed(&world, || match (*method, &tile) {
                ("funnel", t) => funnel_write(&world, t, &counts, &path),
                (_, Tile::Host(h)) => {
                    collective::to_file_with(&world, h, &path, "/x", &d, &settings).unwrap()
                }
                (_, Tile::Device(t)) => {
                    collective::to_file_with(&world, t, &path, "/x", &d, &settings).unwrap()
                }
            });
            let mut got = None;
            let options = array_io::ReadOptions::default()
                .device_path(settings.device_path.unwrap_or(DevicePath::Auto));
            let r = timed(&world, || {
                got = Some(match (*method, &ctx) {
                    ("funnel", c) => funnel_read(&world, &counts, &path, c.as_ref()),
                    (_, None) => Tile::Host(
                        collective::from_file_with::<_, f32>(&world, &path, "/x", &d, &options)
                            .unwrap()
                            .into_dimensionality()
                            .unwrap(),
                    ),
                    (_, Some(c)) => Tile::Device(
                        collective::from_file_to_device_with::<_, f32>(
                            &world, &path, "/x", c, &d, &options,
                        )
                        .unwrap(),
                    ),
                });
            });
            // Checked outside the timed part (a device tile is copied back for it).
            let got = got.map(|t| t.host());
            assert_eq!(got.as_ref(), Some(&want), "{method}: rank {rank} read back");
            seconds[m][0].push(w);
            seconds[m][1].push(r);
        }
    }
    let _ = std::fs::remove_file(&path);
    if rank == 0 {
        let label = match &ctx {
            Some(_) if h5gds_bench::gpu::is_emulated() => "device tiles, EMULATED",
            Some(_) => "device tiles",
            None => "host tiles",
        };
        println!(
            "{p} rank(s), {} MiB float32, {label}, best of {} (aggregate MiB/s; ratio vs funnel)",
            a.size >> 20,
            a.reps
        );
        let mib = a.size as f64 / (1 << 20) as f64;
        let best = |v: &Vec<f64>| v.iter().cloned().fold(f64::INFINITY, f64::min);
        for (k, op) in ["write", "read"].iter().enumerate() {
            let funnel = best(&seconds[2][k]);
            for (m, method) in methods.iter().enumerate() {
                let s = best(&seconds[m][k]);
                println!(
                    "  {op:5} {method:16} {:8.1} ms {:8.0} MiB/s  {:5.2}x",
                    s * 1e3,
                    mib / s,
                    funnel / s
                );
            }
        }
    }
}
