//! `h5gds`: the command-line tool of h5gds.
//!
//! `h5gds info` reports what decides the path data takes (plugin, CUDA, cuFile, settings) with
//! a verdict per path; `h5gds bench` runs the benchmarks: the `gds` plugin against sec2 (and a
//! plain `pread` roofline) in one process, alternating, and prints a table of medians and ratios.
#![forbid(unsafe_code)]

use h5gds_info as info;

use array_io::hdf5_raw;
use clap::{Parser, Subcommand};
use h5gds_bench::{device, gpu, host, report, stats};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "h5gds",
    version,
    about = "GPU-first storage for HDF5: the gds driver's tool"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show what decides the I/O path (plugin, CUDA, cuFile, settings) and a verdict per path;
    /// given a URL, how that remote file would be read and whether it answers.
    Info {
        /// An s3://, http:// or https:// URL: say how the driver would read it (store, endpoint,
        /// region, the credentials' source, request settings) and ask its size and ETag.
        url: Option<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Directory holding libh5gds.so [default: beside this program, else H5GDS_PLUGIN_DIR].
        #[arg(long)]
        plugin_dir: Option<PathBuf>,
    },
    /// Benchmark the gds driver against sec2 and the pread roofline.
    Bench(BenchArgs),
}

#[derive(clap::Args)]
struct BenchArgs {
    /// Size of the contiguous float32 dataset read and written (K/M/G suffixes).
    #[arg(long, default_value = "1G", value_parser = parse_size)]
    size: u64,
    /// Repetitions of every measurement.
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Directory for the benchmark files [default: the system temporary directory].
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Side of the square float32 dataset for the strided reads.
    #[arg(long, default_value_t = 8192)]
    matrix: usize,
    /// Number of small datasets created and scanned.
    #[arg(long, default_value_t = 1000)]
    small_datasets: usize,
    /// Config string for the gds driver (as in HDF5_DRIVER_CONFIG).
    #[arg(long, default_value = "")]
    gds_config: String,
    /// Directory holding libh5gds.so [default: beside this program, else H5GDS_PLUGIN_DIR].
    #[arg(long)]
    plugin_dir: Option<PathBuf>,
    /// Which benchmarks to run.
    #[arg(long, value_enum, default_value_t = Only::All)]
    only: Only,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Also draw the throughputs as a bar chart (SVG) to this file.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Host staging buffer of the staged device path (the baseline).
    #[arg(long, default_value = "128M", value_parser = parse_size)]
    staging: u64,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Only {
    All,
    Host,
    Device,
    /// The host rows bound by the driver's cost per call: 100,000 small reads and writes through
    /// `H5FDread`/`H5FDwrite`, then creating and scanning the small datasets.
    Calls,
}

fn parse_size(text: &str) -> Result<u64, String> {
    match h5gds::parse_size(text) {
        Some(n) if n >= 4096 && n % 4 == 0 => Ok(n),
        _ => Err(format!(
            "{text:?} is not a size of at least 4K in whole float32 elements (e.g. 256M, 1G)"
        )),
    }
}

fn machine_line() -> String {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .next()
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map(|kb| kb / (1u64 << 20) as f64)
        .unwrap_or(f64::NAN);
    format!("{cores} cores, {mem_gib:.0} GiB memory")
}

fn progress_bar(steps: usize) -> Result<ProgressBar, String> {
    let bar = ProgressBar::new(steps as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} runs, {elapsed}")
            .map_err(|e| e.to_string())?,
    );
    Ok(bar)
}

fn bench(args: BenchArgs) -> Result<(), String> {
    if args.reps == 0 {
        return Err("--reps must be at least 1".into());
    }
    if args.matrix < 4 {
        return Err("--matrix must be at least 4".into());
    }
    let plugin_dir = info::find_plugin_dir(args.plugin_dir)?;
    let dir = args.dir.unwrap_or_else(std::env::temp_dir);
    hdf5_raw::named("H5PLprepend", hdf5_raw::prepend_plugin_path(&plugin_dir))?;
    let machine = machine_line();
    println!(
        "h5gds bench: {} on {machine}",
        plugin_dir.join("libh5gds.so").display()
    );
    let mut all = Vec::new();
    let mut emulated = false;
    println!("files in {} (page cache warm); ratios compare medians of {} interleaved runs, > 1 = faster", dir.display(), args.reps);
    if args.only != Only::Device {
        let opts = host::HostOptions {
            bytes: args.size,
            reps: args.reps,
            dir: dir.clone(),
            matrix: args.matrix,
            small_datasets: args.small_datasets,
            gds_config: args.gds_config.clone(),
        };
        println!("\nHOST MEMORY: gds vs sec2 vs 2-thread pread (the roofline)");
        let calls = args.only == Only::Calls;
        let steps = if calls {
            host::steps_calls(&opts)
        } else {
            host::steps(&opts)
        };
        let bar = progress_bar(steps)?;
        let results = if calls {
            host::run_calls(&opts, &mut || bar.inc(1))
        } else {
            host::run(&opts, &mut || bar.inc(1))
        };
        bar.finish_and_clear();
        let results = results?;
        print!("{}", report::table(&results, &["sec2", "pread"]));
        all.extend(results);
    }
    if !matches!(args.only, Only::Host | Only::Calls) {
        let opts = device::DeviceOptions {
            bytes: args.size,
            reps: args.reps,
            dir,
            staging: args.staging as usize,
            gds_config: args.gds_config,
        };
        if let Err(err) = gpu::init_cuda() {
            let reason = format!("the device benchmarks need a CUDA driver library ({err})");
            println!("\nDEVICE MEMORY: skipped: {reason}");
            // What was measured is saved all the same, with the reason the rest is missing.
            let skipped = [report::Skipped {
                part: "device",
                reason,
            }];
            let outputs = (args.json.as_deref(), args.plot.as_deref());
            save(&all, &machine, false, &skipped, outputs)?;
            return if args.only == Only::Device {
                Err(err)
            } else {
                Ok(())
            };
        }
        let staging = h5gds::format_size(args.staging);
        emulated = gpu::is_emulated();
        if emulated {
            println!("\nDEVICE MEMORY, EMULATED: libcuda and libcufile are h5gds's CPU emulator; these are not GPU figures");
            println!("(the emulated GDS path bypasses the page cache with O_DIRECT where the file system allows, as nvidia-fs does)");
        } else {
            println!("\nDEVICE MEMORY: gds vs the staged path (sec2 through a {staging} host buffer, then a copy)");
        }
        println!("(users: the whole dataset through host memory and one copy, as with h5py + cupy; limit: one copy between pinned host memory and the device, no file)");
        println!("(storage to device: the file is dropped from the page cache before each read, and each write ends with fsync)");
        let bar = progress_bar(device::steps(&opts))?;
        let results = device::run(&opts, &mut || bar.inc(1));
        bar.finish_and_clear();
        let mut results = results?;
        if emulated {
            for m in &mut results {
                m.benchmark.push_str(" EMULATED");
            }
        }
        print!("{}", report::table(&results, &[device::STAGED]));
        all.extend(results);
    }
    save(
        &all,
        &machine,
        emulated,
        &[],
        (args.json.as_deref(), args.plot.as_deref()),
    )
}

/// Writes the JSON and SVG outputs that were asked for.
fn save(
    all: &[stats::Measurement],
    machine: &str,
    emulated: bool,
    skipped: &[report::Skipped],
    (json, plot): (Option<&Path>, Option<&Path>),
) -> Result<(), String> {
    let device = if emulated {
        "EMULATED (CPU emulator of CUDA and cuFile; its GDS path bypasses the page cache with O_DIRECT); both device paths timed from and to storage (page cache dropped before reads, fsync after writes)"
    } else {
        "real CUDA, if any device rows"
    };
    if let Some(path) = json {
        let value = report::json(
            all,
            &["sec2", "pread", device::STAGED],
            &[("machine", machine), ("device_results", device)],
            skipped,
        );
        let text = serde_json::to_string_pretty(&value).map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    if let Some(path) = plot {
        let mut title = format!("h5gds bench on {machine}");
        if emulated {
            title.push_str(" (device rows EMULATED; emulated GDS bypasses the page cache)");
        }
        std::fs::write(path, report::svg(all, &title, skipped))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}

/// `h5gds info <url>`: the remote file's report; an unreachable object is reported, not an
/// error of the tool.
fn show_url_info(json: bool, url: &str) -> Result<(), String> {
    if !h5gds::is_url(url) {
        return Err(format!(
            "{url:?} is not a URL the driver reads remotely: give s3://bucket/key, http://... or \
             https://... (without a URL, `h5gds info` reports on this machine)"
        ));
    }
    let report = info::gather_url(url);
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?
        );
    } else {
        print!("{}", info::render_url(&report));
    }
    Ok(())
}

fn show_info(json: bool, plugin_dir: Option<PathBuf>) -> Result<(), String> {
    let dir = info::find_plugin_dir(plugin_dir).ok();
    let report = info::gather(dir.as_deref());
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?
        );
    } else {
        print!("{}", info::render(&report));
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(args) => bench(args),
        Command::Info {
            json,
            url: Some(url),
            ..
        } => show_url_info(json, &url),
        Command::Info {
            json,
            plugin_dir,
            url: None,
        } => show_info(json, plugin_dir),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("h5gds: {err}");
            ExitCode::FAILURE
        }
    }
}
