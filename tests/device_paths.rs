//! Device-memory reads and writes through HDF5 and the `gds` driver, on the CPU emulator of
//! CUDA and cuFile: GDS, the staged path, cuFile's compatibility mode, fallbacks after injected
//! faults, short transfers, compact datasets (ctl MEM_COPY) and reads past end of file. Every
//! run compares all bytes with host-side reads, and the emulator's report must show no leaked
//! device memory and no out-of-bounds access.
//!
//! Built with `H5GDS_TEST_REAL_CUDA=1` (`scripts/test-gpu.sh`), the same programs run against
//! the machine's real libcuda and libcufile instead, and the tests that need the emulator (its
//! switches, fault injection or report) are compiled as ignored: the harness lists them as
//! ignored, and its summary counts what ran on the GPU. Those tests expect the device path the
//! machine gives (what `h5gds info` says for their directory: GPUDirect Storage where the GDS
//! kernel path and a listed file system are there, the staged path otherwise), so they hold on
//! GPU machines with and without nvidia-fs. `H5GDS_TEST_EMULATED_MACHINE=h200-vm` runs that
//! build on the emulator configured as the first real-GPU machine (no nvidia-fs, every cuFile
//! handle registration refused with 5027), as `scripts/test.sh` does.

use h5gds_tests::emulator::{emulated_machine, emulator_lib_dir, read_report, Report};
use h5gds_tests::process::{clean_env, output_within, OutputText, TIME_LIMIT};
use h5gds_tests::{plugin_dir, REAL_CUDA};
use std::process::Output;

const DEVPROG: &str = env!("CARGO_BIN_EXE_h5devprog");

/// Small task and bounce sizes, so that the test sizes cross every splitting boundary; and
/// `device_copies=on`, as a program that hands HDF5 device pointers for compact data and cached
/// chunks (h5devprog does) must set.
const SMALL_SIZES: [(&str, &str); 4] = [
    ("H5GDS_TASK_SIZE", "256K"),
    ("H5GDS_BOUNCE_BUFFER_SIZE", "64K"),
    ("H5GDS_NTHREADS", "3"),
    ("H5GDS_DEVICE_COPIES", "on"),
];

struct Run {
    out: Output,
    /// The emulator's exit report (empty on a real GPU).
    report: Report,
    /// The HDF5 file the program wrote (its directory lives as long as the Run).
    file: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Run {
    fn stdout(&self) -> String {
        self.out.stdout_text()
    }
    fn stderr(&self) -> String {
        self.out.stderr_text()
    }
    fn counter(&self, name: &str) -> u64 {
        self.report.counter(name)
    }
    /// The program succeeded: its last line is `DEVICE OK <checks>` (some modes print lines of
    /// their own before it), and, on the emulator, nothing leaked or went out of bounds.
    #[track_caller]
    fn assert_device_ok(&self) {
        let stdout = self.stdout();
        assert!(
            self.out.status.success()
                && stdout
                    .lines()
                    .last()
                    .is_some_and(|l| l.starts_with("DEVICE OK")),
            "status {:?}\nstdout:\n{}\nstderr:\n{}",
            self.out.status,
            self.stdout(),
            self.stderr()
        );
        if !REAL_CUDA {
            self.report.assert_zero(&[
                "leaked device allocations",
                "bounds violations",
                "double frees",
            ]);
        }
    }
    #[track_caller]
    fn assert_log(&self, needle: &str) {
        assert!(
            self.stderr().contains(needle),
            "expected {needle:?} in:\n{}",
            self.stderr()
        );
    }
}

/// Runs h5devprog with the gds driver, the emulator (unless testing real CUDA) and `env`.
fn run(env: &[(&str, &str)]) -> Run {
    run_with(&[], env)
}

/// As `run`, with extra program arguments (e.g. `--sizes`).
fn run_with(args: &[&str], env: &[(&str, &str)]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let libs = emulator_lib_dir();
    let report = dir.path().join("emulator-report.txt");
    let mut cmd = std::process::Command::new(DEVPROG);
    cmd.arg(dir.path().join("device.h5")).args(args);
    clean_env(&mut cmd)
        .env("HDF5_PLUGIN_PATH", plugin_dir())
        .env("HDF5_DRIVER", "gds")
        .env("H5GDS_LOG", "info");
    if !REAL_CUDA {
        // Async copies really run late: a bounce buffer reused too early shows as wrong data.
        cmd.env("LD_LIBRARY_PATH", libs.path())
            .env("H5GDS_EMU_REPORT", &report)
            .env("H5GDS_EMU_DEFER_ASYNC", "1");
    } else if let Some(switches) = emulated_machine() {
        // The real-GPU build on the emulator configured as a real machine (no report checks).
        cmd.env("LD_LIBRARY_PATH", libs.path())
            .env("H5GDS_EMU_DEFER_ASYNC", "1")
            .envs(switches);
    }
    cmd.current_dir(dir.path()); // cuFile may write cufile.log into the working directory
    cmd.envs(SMALL_SIZES).envs(env.iter().copied());
    let out = output_within(&mut cmd, TIME_LIMIT);
    Run {
        out,
        report: read_report(&report),
        file: dir.path().join("device.h5"),
        _dir: dir,
    }
}

/// The device path files get on this machine under `compat_mode=auto`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MachinePath {
    /// GPUDirect Storage through cuFile.
    Gds,
    /// The driver's pinned bounce buffers (no GDS kernel path, or cuFile refuses the files).
    Staged,
}

impl MachinePath {
    /// The log line a file's device path is decided with on this path (at its first device
    /// transfer, or, where cuFile opened in the background, at the first after it had opened).
    fn log_line(self) -> &'static str {
        match self {
            MachinePath::Gds => "device buffers: GPUDirect Storage through cuFile",
            MachinePath::Staged => "device buffers: staged through pinned bounce buffers",
        }
    }
}

/// What `h5gds info` says device buffers of a file in a fresh directory get here (h5devprog
/// `--device-path` decides it with the driver's code, as the tool does), asked once.
fn machine_path() -> MachinePath {
    static PATH: std::sync::OnceLock<MachinePath> = std::sync::OnceLock::new();
    *PATH.get_or_init(|| {
        let run = run_with(&["--device-path"], &[("H5GDS_COMPAT_MODE", "auto")]);
        let stdout = run.stdout();
        let verdict = stdout
            .lines()
            .find_map(|l| l.strip_prefix("DEVICE PATH: "))
            .unwrap_or_else(|| panic!("no device path:\n{stdout}\n{}", run.stderr()));
        if verdict.starts_with("GPUDirect Storage through cuFile") {
            MachinePath::Gds
        } else if verdict.starts_with("staged through pinned bounce buffers") {
            MachinePath::Staged
        } else {
            panic!("device buffers cannot move on this machine: {verdict}")
        }
    })
}

#[test]
fn auto_reads_and_writes_device_memory_through_the_path_this_machine_gives() {
    let run = run(&[("H5GDS_COMPAT_MODE", "auto")]);
    run.assert_device_ok();
    run.assert_log(machine_path().log_line());
    if !REAL_CUDA {
        assert!(
            run.counter("cufile reads") > 0 && run.counter("cufile writes") > 0,
            "{:?}",
            run.report
        );
        // Around the page cache, as nvidia-fs: the emulator's GDS path, not its compat mode.
        assert!(
            run.counter("cufile o_direct requests") > 0,
            "{:?}",
            run.report
        );
        assert_eq!(run.counter("cufile posix bounce copies"), 0);
    }
}

#[test]
fn staged_path_with_compat_mode_on_never_touches_cufile() {
    let run = run(&[("H5GDS_COMPAT_MODE", "on")]);
    run.assert_device_ok();
    run.assert_log("device buffers: staged through pinned bounce buffers of 64K (compat_mode=on)");
    if !REAL_CUDA {
        assert_eq!(run.counter("cufile reads"), 0);
        assert_eq!(run.counter("cufile writes"), 0);
        assert!(run.counter("copies htod") > 0 && run.counter("copies dtoh") > 0);
    }
}

#[test]
#[cfg_attr(real_cuda, ignore = "needs the CUDA/cuFile emulator")]
fn auto_without_the_gds_kernel_path_uses_the_staged_path_and_never_opens_cufile() {
    // No nvidia-fs and P2PDMA off: opening cuFile (0.47 s on an H200 VM) could only find that
    // out, so under auto the driver does not.
    let run = run(&[("H5GDS_COMPAT_MODE", "auto"), ("H5GDS_EMU_GDS", "0")]);
    run.assert_device_ok();
    run.assert_log(
        "first device transfer; device buffers: staged through pinned bounce buffers of 64K \
         (cuFile not opened: no nvidia-fs and P2PDMA off)",
    );
    assert_eq!(run.counter("cufile reads"), 0);
    assert_eq!(
        run.counter("cufile driver open calls"),
        0,
        "{:?}",
        run.report
    );
}

#[test]
#[cfg_attr(real_cuda, ignore = "needs the CUDA/cuFile emulator")]
fn compat_mode_off_uses_cufile_even_in_its_compatibility_mode() {
    let run = run(&[("H5GDS_COMPAT_MODE", "off"), ("H5GDS_EMU_GDS", "0")]);
    run.assert_device_ok();
    run.assert_log("in cuFile's own compatibility mode");
    assert!(run.counter("cufile reads") > 0);
    // cuFile's compatibility mode moves device data through its POSIX bounce buffers.
    assert!(
        run.counter("cufile posix bounce copies") > 0,
        "{:?}",
        run.report
    );
    assert_eq!(run.counter("cufile o_direct requests"), 0);
}

#[test]
#[cfg_attr(real_cuda, ignore = "needs the CUDA/cuFile emulator")]
fn compat_mode_off_fails_the_open_when_cufile_cannot_open() {
    let run = run(&[
        ("H5GDS_COMPAT_MODE", "off"),
        ("H5GDS_EMU_CUFILE_OPEN_ERROR", "5001"),
    ]);
    assert_eq!(run.out.status.code(), Some(1), "{}", run.stderr());
    assert!(
        run.stdout().contains("FAILED: H5Fcreate failed"),
        "{}",
        run.stdout()
    );
    run.assert_log("compat_mode=off requires cuFile: cuFileDriverOpen: cuFile error 5001");
}

/// The first real-GPU machine (an H200 VM): no nvidia-fs, and cuFile refuses every file handle
/// (5027) because it cannot read its virtual disk's attributes.
const H200_VM: [(&str, &str); 2] = [
    ("H5GDS_EMU_GDS", "0"),
    ("H5GDS_EMU_CUFILE_REGISTER_ERROR", "5027"),
];

#[test]
#[cfg_attr(real_cuda, ignore = "needs the CUDA/cuFile emulator")]
fn where_cufile_refuses_every_file_auto_stages_and_off_says_why_and_where_the_log_is() {
    let mut env = vec![("H5GDS_COMPAT_MODE", "auto")];
    env.extend_from_slice(&H200_VM);
    let run_auto = run(&env);
    run_auto.assert_device_ok();
    run_auto.assert_log(
        "first device transfer; device buffers: staged through pinned bounce buffers of 64K \
         (cuFile not opened: no nvidia-fs and P2PDMA off)",
    );
    assert_eq!(run_auto.counter("cufile reads"), 0);
    assert_eq!(run_auto.counter("cufile driver open calls"), 0);
    // off: the open fails naming the code, what it means there, and where cuFile's log is.
    let log = run_auto.file.parent().unwrap().join("cufile-log-here.log");
    env[0] = ("H5GDS_COMPAT_MODE", "off");
    let log_var = log.to_str().unwrap().to_owned();
    env.push(("CUFILE_LOGFILE_PATH", &log_var));
    let run_off = run(&env);
    assert_eq!(run_off.out.status.code(), Some(1), "{}", run_off.stderr());
    assert!(!run_off.file.exists(), "a refused open must leave no file");
    for needle in [
        "compat_mode=off requires cuFile: cuFileHandleRegister: cuFile error 5027 \
         (CU_FILE_HANDLE_NOT_REGISTERED)",
        "cannot read the attributes of the volume the file is on",
        &format!("cuFile's log: {log_var:?}"),
    ] {
        run_off.assert_log(needle);
    }
}

#[test]
#[cfg_attr(real_cuda, ignore = "needs the CUDA/cuFile emulator")]
fn a_cufile_error_mid_transfer_falls_back_to_the_staged_path() {
    let run = run(&[("H5GDS_COMPAT_MODE", "auto"), ("H5GDS_EMU_FAIL_IO", "3")]);
    run.assert_device_ok();
    run.assert_log("go through the staged path");
}

#[test]
#[cfg_attr(real_cuda, ignore = "needs the CUDA/cuFile emulator")]
fn short_cufile_transfers_are_continued() {
    let run = run(&[
        ("H5GDS_COMPAT_MODE", "auto"),
        ("H5GDS_EMU_SHORT_IO", "1000"),
    ]);
    run.assert_device_ok();
    // 5 MiB in 1000-byte pieces: thousands of calls.
    assert!(run.counter("cufile reads") > 5000, "{:?}", run.report);
}

#[test]
#[cfg_attr(real_cuda, ignore = "needs the CUDA/cuFile emulator")]
fn a_failed_device_copy_fails_the_read_instead_of_reporting_success() {
    // Copy 1 is the program filling its buffer; copy 2 is the driver's first staged copy.
    let run = run(&[("H5GDS_COMPAT_MODE", "on"), ("H5GDS_EMU_FAIL_COPY", "2")]);
    assert_eq!(
        run.out.status.code(),
        Some(1),
        "{}\n{}",
        run.stdout(),
        run.stderr()
    );
    assert!(run.stdout().contains("FAILED: H5D"), "{}", run.stdout());
    run.assert_log("staged copy");
}

#[test]
#[cfg_attr(real_cuda, ignore = "needs the CUDA/cuFile emulator")]
fn without_pinned_memory_staging_uses_pageable_buffers() {
    // Allocation 1 is the program's first device buffer; 2 is the driver's first bounce buffer.
    let run = run(&[("H5GDS_COMPAT_MODE", "on"), ("H5GDS_EMU_FAIL_ALLOC", "2")]);
    run.assert_device_ok();
    run.assert_log("staging through pageable memory");
}

#[test]
#[cfg_attr(real_cuda, ignore = "needs the CUDA/cuFile emulator")]
fn a_cufile_error_on_a_pool_thread_falls_back_and_is_logged() {
    // cuFile call 40 falls inside the 5 MiB read, whose 256K tasks run on the pool's threads.
    let run = run(&[("H5GDS_COMPAT_MODE", "auto"), ("H5GDS_EMU_FAIL_IO", "40")]);
    run.assert_device_ok();
    run.assert_log("go through the staged path");
}

#[test]
#[cfg_attr(real_cuda, ignore = "needs the CUDA/cuFile emulator's counters")]
fn small_staged_transfers_pin_small_bounce_buffers() {
    // 4 KiB transfers with 4M bounce buffers set: pinning 2 x 4M per task (32 x 16M for a first
    // read through 16 threads with the defaults) is what a request of that size does not need.
    let run = run_with(
        &["--sizes", "4096"],
        &[
            ("H5GDS_COMPAT_MODE", "on"),
            ("H5GDS_BOUNCE_BUFFER_SIZE", "4M"),
        ],
    );
    run.assert_device_ok();
    run.assert_log("staged through pinned bounce buffers of 4M (compat_mode=on)");
    let pinned = run.counter("pinned host bytes allocated");
    assert!(
        pinned > 0 && pinned < 4 << 20,
        "{pinned} bytes pinned for 4 KiB transfers: {:?}",
        run.report
    );
}

#[test]
fn sizes_around_task_and_bounce_boundaries() {
    // Task size 256K and bounce buffers of 64K: one byte either side of each boundary.
    let sizes = "3,65535,65537,131073,262143,262145,786431,786433";
    for mode in ["auto", "on"] {
        let run = run_with(&["--sizes", sizes], &[("H5GDS_COMPAT_MODE", mode)]);
        run.assert_device_ok();
        // 8 sizes x (read, write), 7 hyperslabs (not for 3 bytes), compact (2), past EOF (1),
        // strided (2), strided from cached chunks (2).
        assert!(
            run.stdout().starts_with("DEVICE OK 30"),
            "{mode}: {}",
            run.stdout()
        );
    }
}

#[test]
#[cfg_attr(real_cuda, ignore = "needs the CUDA/cuFile emulator")]
fn gds_where_the_file_system_refuses_o_direct() {
    let shim = h5gds_tests::refuse_o_direct_shim();
    let preload = shim.to_str().unwrap();
    // auto: the staged path, with the reason in the open line.
    let run_auto = run(&[("H5GDS_COMPAT_MODE", "auto"), ("LD_PRELOAD", preload)]);
    run_auto.assert_device_ok();
    run_auto.assert_log("staged through pinned bounce buffers of 64K (the file system refuses O_DIRECT, which cuFile needs");
    assert_eq!(run_auto.counter("cufile reads"), 0);
    // off: cuFile is required, so the open fails and says why.
    let run_off = run(&[("H5GDS_COMPAT_MODE", "off"), ("LD_PRELOAD", preload)]);
    assert_eq!(run_off.out.status.code(), Some(1), "{}", run_off.stderr());
    run_off.assert_log("compat_mode=off requires cuFile: the file system refuses O_DIRECT");
    assert!(
        run_off.stdout().contains("FAILED: H5Fcreate failed"),
        "{}",
        run_off.stdout()
    );
    assert!(
        !run_off.file.exists(),
        "a refused open must not leave a file behind"
    );
}

#[test]
#[cfg_attr(real_cuda, ignore = "needs the CUDA/cuFile emulator")]
fn staged_device_transfers_on_failing_storage_move_the_right_bytes_or_name_the_file() {
    // The driver's own staged path (device -> pinned bounce buffers -> pwrite, and back) on the
    // failing-storage shim (tests/shims/failing_io.c), for the program's file only.
    let shim = h5gds_tests::failing_io_shim();
    let preload = shim.to_str().unwrap();
    let on_failing = |fault: &[(&'static str, &'static str)]| {
        let mut env = vec![
            ("H5GDS_COMPAT_MODE", "on"),
            ("LD_PRELOAD", preload),
            ("H5GDS_FAULT_PATH", "device.h5"),
        ];
        env.extend_from_slice(fault);
        run(&env)
    };
    // Transient failures (short transfers, EINTR): every round trip (written, read back,
    // compared) passes.
    for (op, kind, times) in [
        ("pread", "short", "all"),
        ("pwrite", "short", "all"),
        ("pread", "eintr", "5"),
        ("pwrite", "eintr", "5"),
    ] {
        let run = on_failing(&[
            ("H5GDS_FAULT_OP", op),
            ("H5GDS_FAULT_KIND", kind),
            ("H5GDS_FAULT_TIMES", times),
        ]);
        run.assert_device_ok();
    }
    // EIO on the raw data (64 KiB transfers and more): the program fails, the error naming the
    // file, and no comparison of wrong bytes passes.
    for op in ["pread", "pwrite"] {
        let run = on_failing(&[
            ("H5GDS_FAULT_OP", op),
            ("H5GDS_FAULT_KIND", "eio"),
            ("H5GDS_FAULT_TIMES", "all"),
            ("H5GDS_FAULT_MIN_BYTES", "65536"),
        ]);
        assert_eq!(run.out.status.code(), Some(1), "{op}: {}", run.stdout());
        assert!(
            run.stdout().contains("FAILED") && !run.stdout().contains("DEVICE OK"),
            "{op}: {}",
            run.stdout()
        );
        let said = format!("{}{}", run.stdout(), run.stderr());
        assert!(
            said.contains(&format!("{}", run.file.display()))
                && said.contains("Input/output error"),
            "{op}: the error names the file and the failure:\n{said}"
        );
    }
}

/// Reads and writes with the caller's own current context (`--caller-context`): the program
/// fails if `cuCtxGetCurrent` differs after any HDF5 call, for one task on the calling thread
/// and several on the pool.
fn assert_caller_context_kept(which: &str, mode: &str, env: &[(&str, &str)]) -> Run {
    let mut all = vec![("H5GDS_COMPAT_MODE", mode)];
    all.extend_from_slice(env);
    let run = run_with(&["--caller-context", which], &all);
    run.assert_device_ok();
    assert!(
        run.stdout().starts_with("DEVICE OK 6"),
        "{which}, {mode}: {}",
        run.stdout()
    );
    run
}

#[test]
fn the_callers_missing_context_is_left_missing_and_cufile_still_opens() {
    // No context on the calling thread: cuFileDriverOpen and cuFileHandleRegister fail there
    // on real cuFile (and on the emulator), so the driver must bring its own, and take it away;
    // whichever path the machine gives, the caller's (missing) context is left as it was.
    let run = assert_caller_context_kept("none", "auto", &[]);
    run.assert_log(machine_path().log_line());
    if !REAL_CUDA {
        assert!(run.counter("cufile reads") > 0, "{:?}", run.report);
        assert!(run.counter("cufile writes") > 0, "{:?}", run.report);
        assert_eq!(run.counter("cufile handle register calls"), 1);
    }
    // compat_mode=off opens cuFile and registers the file at open, on the caller's thread too
    // (where the machine gives GDS: elsewhere cuFile may refuse every file, and off fails).
    if machine_path() == MachinePath::Gds {
        let run = assert_caller_context_kept("none", "off", &[]);
        run.assert_log("device buffers: GPUDirect Storage through cuFile");
    }
    assert_caller_context_kept("none", "on", &[]);
}

#[test]
#[cfg_attr(real_cuda, ignore = "needs two devices: the CUDA/cuFile emulator")]
fn another_devices_context_stays_current_after_device_reads_and_writes() {
    // A PyTorch or CuPy user on cuda:1: device 1's primary context is current around each call.
    for mode in ["auto", "on"] {
        assert_caller_context_kept("device1", mode, &[("H5GDS_EMU_DEVICES", "2")]);
    }
}

#[test]
#[cfg_attr(real_cuda, ignore = "needs the CUDA/cuFile emulator's report")]
fn a_host_only_program_never_opens_cufile_and_leaves_no_cufile_log() {
    let run = run_with(&["--host-only"], &[("H5GDS_COMPAT_MODE", "auto")]);
    assert!(
        run.out.status.success() && run.stdout().starts_with("DEVICE OK 3"),
        "{}\n{}",
        run.stdout(),
        run.stderr()
    );
    assert_eq!(
        run.counter("cufile driver open calls"),
        0,
        "{:?}",
        run.report
    );
    assert_eq!(run.counter("cufile handle register calls"), 0);
    let cwd = run.file.parent().unwrap();
    assert!(
        !cwd.join("cufile.log").exists(),
        "cufile.log in the working directory"
    );
    // The open line still says which path device buffers would take.
    run.assert_log(
        "device buffers: cuFile opens at the first device transfer, in the background where it \
         could give GDS (that transfer and those until it has opened are staged): then \
         GPUDirect Storage where it finds the GDS kernel path and the file system accepts \
         O_DIRECT, else staged",
    );
}

#[test]
#[cfg_attr(real_cuda, ignore = "needs the CUDA/cuFile emulator's counters")]
fn hdf5s_own_copies_reach_the_driver_only_in_files_that_ask() {
    // With CUDA working, MEMMANAGE makes HDF5 copy compact data and every element of cached
    // chunks through the driver's ctl(MEM_COPY), whose pointer classification costs a host
    // workload (0.77x sec2 for chunked[::3] on an H200): by default a file does not ask.
    let queries = |copies: &str| {
        let run = run_with(
            &["--host-only"],
            &[
                ("H5GDS_COMPAT_MODE", "auto"),
                ("H5GDS_DEVICE_COPIES", copies),
            ],
        );
        assert!(
            run.out.status.success() && run.stdout().starts_with("DEVICE OK 3"),
            "{copies}: {}\n{}",
            run.stdout(),
            run.stderr()
        );
        run.assert_log(&format!("device_copies={copies}"));
        run.counter("pointer queries")
    };
    let (off, on) = (queries("off"), queries("on"));
    assert!(
        on > off,
        "the MEM_COPY path classifies its copy loops' buffers: {on} queries with \
         device_copies=on, {off} without"
    );
    // Without MEM_COPY the driver sees only buffers in the program's heap and HDF5's own (its
    // chunk cache): host memory known without asking CUDA (`h5gds_runtime::known_host`).
    assert_eq!(
        off, 0,
        "pointer queries for heap buffers with device_copies=off"
    );
}

#[test]
#[cfg_attr(real_cuda, ignore = "needs the CUDA/cuFile emulator's log model")]
fn cufiles_log_stays_out_of_the_working_directory_unless_the_user_places_it() {
    let run = run(&[("H5GDS_COMPAT_MODE", "auto")]);
    run.assert_device_ok();
    assert_eq!(
        run.counter("cufile driver open calls"),
        1,
        "{:?}",
        run.report
    );
    let cwd = run.file.parent().unwrap();
    assert!(
        !cwd.join("cufile.log").exists(),
        "cufile.log in the working directory"
    );
    // A place the user chose is kept.
    let mine = tempfile::tempdir().unwrap();
    let log = mine.path().join("my-cufile.log");
    let run = run_with(
        &["--sizes", "4096"],
        &[
            ("H5GDS_COMPAT_MODE", "auto"),
            ("CUFILE_LOGFILE_PATH", log.to_str().unwrap()),
        ],
    );
    run.assert_device_ok();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(text.contains("cuFile driver opened"), "{log:?}: {text:?}");
}

#[test]
#[cfg_attr(real_cuda, ignore = "needs two devices: the CUDA/cuFile emulator")]
fn device_1_buffers_move_in_device_1s_context_and_streams() {
    // Buffers on device 1, the caller with no context or with device 0's current: one task and
    // several, compact (MEM_COPY) and past end of file. cuFile refuses a buffer of another
    // context than the current one (CU_FILE_CUDA_CONTEXT_MISMATCH), and the emulator counts every
    // copy, memset or stream call that uses device 1's memory from another context, or a stream
    // of another context.
    for mode in ["auto", "on"] {
        for caller in ["none", "device0"] {
            let run = run_with(
                &["--buffers-on", "1", "--caller-context", caller],
                &[("H5GDS_COMPAT_MODE", mode), ("H5GDS_EMU_DEVICES", "2")],
            );
            run.assert_device_ok();
            assert!(
                run.stdout().starts_with("DEVICE OK 6"),
                "{mode}, {caller}: {}",
                run.stdout()
            );
            assert_eq!(
                run.counter("cross-context uses"),
                0,
                "{mode}, {caller}: {:?}",
                run.report
            );
            assert!(
                !run.stderr().contains("go through the staged path"),
                "{mode}, {caller}: a cuFile call failed:\n{}",
                run.stderr()
            );
            if mode == "auto" {
                assert!(run.counter("cufile reads") > 0, "{:?}", run.report);
                assert!(run.counter("cufile writes") > 0, "{:?}", run.report);
            } else {
                assert!(run.counter("copies htod") > 0, "{:?}", run.report);
            }
        }
    }
}

/// Reads and writes (one task, several, compact, past end of file) with device buffers allocated
/// as `memory` says, with no context current on the caller's thread; returns the run.
fn run_with_memory(memory: &str, mode: &str, env: &[(&str, &str)]) -> Run {
    let mut all = vec![("H5GDS_COMPAT_MODE", mode)];
    all.extend_from_slice(env);
    let run = run_with(&["--caller-context", "none", "--memory", memory], &all);
    run.assert_device_ok();
    let checks = if memory == "vmm" { 7 } else { 6 };
    assert!(
        run.stdout().starts_with(&format!("DEVICE OK {checks}")),
        "{memory}, {mode}: {}",
        run.stdout()
    );
    run
}

#[test]
fn pool_and_vmm_buffers_go_to_cufile_one_mapping_at_a_time() {
    // Pool memory (no context; the pool's range starts at another allocation) and VMM buffers
    // spanning two mappings, with memory unmapped and mapped again at one address: cuFile refuses
    // a range that leaves its mapping (CU_FILE_CUDA_POINTER_RANGE_ERROR in the emulator), so a
    // driver that takes the reservation for the buffer, or remembers a mapping that is gone,
    // falls back to staging with a warning.
    for memory in ["pool", "vmm"] {
        let run = run_with_memory(memory, "auto", &[]);
        assert!(
            !run.stderr().contains("go through the staged path"),
            "{memory}: a cuFile call failed:\n{}",
            run.stderr()
        );
        if !REAL_CUDA {
            assert!(
                run.counter("cufile reads") > 0,
                "{memory}: {:?}",
                run.report
            );
            assert!(
                run.counter("cufile writes") > 0,
                "{memory}: {:?}",
                run.report
            );
            assert_eq!(run.counter("cross-context uses"), 0, "{:?}", run.report);
        }
        // The staged path too: copies stay inside mapped memory (the report's bounds check).
        run_with_memory(memory, "on", &[]);
    }
}

#[test]
fn a_forked_child_reads_host_data_and_never_calls_into_cuda_or_cufile() {
    // A data-loader worker forked after the parent moved device data through the driver (cuFile
    // opened, the file registered). Host reads work in the child; a device read fails naming
    // fork; the child's exit (HDF5 closing the inherited file) deregisters nothing.
    for mode in ["auto", "on"] {
        let run = run_with(&["--fork"], &[("H5GDS_COMPAT_MODE", mode)]);
        let stdout = run.stdout();
        assert!(
            run.out.status.success()
                && stdout.contains("CHILD OK")
                && stdout.contains("DEVICE OK 4"),
            "{mode}: status {:?}\nstdout:\n{stdout}\nstderr:\n{}",
            run.out.status,
            run.stderr()
        );
        let error = stdout
            .lines()
            .find_map(|l| l.strip_prefix("CHILD DEVICE ERROR: "))
            .unwrap_or_default();
        assert!(
            error.contains("is a fork of process")
                && error.contains("device memory cannot be used here"),
            "{mode}: {error}"
        );
        assert!(!error.contains("Bad address"), "{mode}: {error}");
        if REAL_CUDA {
            continue;
        }
        // The child's own emulator report: no CUDA or cuFile call reached the emulator.
        let dir = run.file.parent().unwrap();
        let children: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("emulator-report.txt.forked-")
            })
            .collect();
        assert_eq!(children.len(), 1, "{mode}: {children:?}");
        let child = read_report(&children[0].path());
        assert_eq!(
            child.counter("calls from a forked child"),
            0,
            "{mode}: {child:?}\n{}",
            run.stderr()
        );
        assert!(!run.stderr().contains("h5gds-emu: "), "{}", run.stderr());
        assert_eq!(run.counter("calls from a forked child"), 0);
        run.report
            .assert_zero(&["bounds violations", "double frees"]);
    }
}

/// Lines of `stderr` containing `needle`.
fn count_lines(text: &str, needle: &str) -> usize {
    text.lines().filter(|l| l.contains(needle)).count()
}

#[test]
#[cfg_attr(real_cuda, ignore = "needs the CUDA/cuFile emulator's fault injection")]
fn a_cufile_error_that_recurs_is_met_once_per_file_and_buffer_kind() {
    // IO_NOT_SUPPORTED rules out the file; MEMORY_TYPE_INVALID and CONTEXT_MISMATCH the kind of
    // buffer (all of the program's buffers are plain device memory of device 0). Either way: one
    // failed cuFile call and one warning for the whole program (dozens of transfers, many of
    // several tasks), every byte still right through the staged path.
    for (code, name, which) in [
        (
            "5008",
            "CU_FILE_IO_NOT_SUPPORTED",
            "device buffers of this file",
        ),
        (
            "5013",
            "CU_FILE_CUDA_MEMORY_TYPE_INVALID",
            "buffers in device memory of device 0 of this file",
        ),
        (
            "5015",
            "CU_FILE_CUDA_CONTEXT_MISMATCH",
            "buffers in device memory of device 0 of this file",
        ),
    ] {
        let run = run(&[
            ("H5GDS_COMPAT_MODE", "auto"),
            ("H5GDS_EMU_CUFILE_IO_ERROR", code),
        ]);
        run.assert_device_ok();
        assert_eq!(
            run.counter("cufile failed transfers"),
            1,
            "{name}: {:?}\n{}",
            run.report,
            run.stderr()
        );
        let stderr = run.stderr();
        assert_eq!(count_lines(&stderr, name), 1, "{name}:\n{stderr}");
        run.assert_log(&format!("{name}) at offset "));
        run.assert_log(&format!(
            " of {:?}: an error that recurs, so {which} go through the staged path from now on",
            run.file
        ));
        assert_eq!(count_lines(&stderr, "WARN"), 1, "{name}:\n{stderr}");
    }
}

#[test]
#[cfg_attr(real_cuda, ignore = "needs two devices: the CUDA/cuFile emulator")]
fn device_1_pool_memory_names_no_context_and_moves_in_device_1s() {
    let run = run_with(
        &[
            "--buffers-on",
            "1",
            "--caller-context",
            "device0",
            "--memory",
            "pool",
        ],
        &[("H5GDS_COMPAT_MODE", "auto"), ("H5GDS_EMU_DEVICES", "2")],
    );
    run.assert_device_ok();
    assert!(
        !run.stderr().contains("go through the staged path"),
        "{}",
        run.stderr()
    );
    assert!(run.counter("cufile reads") > 0, "{:?}", run.report);
    assert_eq!(run.counter("cross-context uses"), 0, "{:?}", run.report);
}

#[test]
fn managed_memory_is_staged_not_given_to_cufile() {
    // cuFile documents device and host buffers only; the emulator refuses managed memory with
    // CU_FILE_CUDA_MEMORY_TYPE_INVALID, so handing it to cuFile shows as a fallback warning.
    let run = run_with_memory("managed", "auto", &[]);
    assert!(
        !run.stderr().contains("go through the staged path"),
        "{}",
        run.stderr()
    );
    if !REAL_CUDA {
        assert_eq!(run.counter("cufile reads"), 0, "{:?}", run.report);
        assert_eq!(run.counter("cufile writes"), 0, "{:?}", run.report);
        assert!(run.counter("copies htod") > 0, "{:?}", run.report);
    }
}

#[test]
#[cfg_attr(real_cuda, ignore = "needs the CUDA/cuFile emulator's fault injection")]
fn a_failed_pointer_query_is_an_error_naming_cuda_not_efault() {
    // The program's host write makes the driver's first two pointer queries (selection
    // callback, then transfer); its device read the third, which meets a sticky CUDA error. That buffer is neither known host nor device memory:
    // the read fails naming the query and CUDA's code, instead of a pread into device memory.
    let run = run_with(&["--sizes", "4096"], &[("H5GDS_EMU_STICKY_ERROR", "3")]);
    let stdout = run.stdout();
    assert!(
        !run.out.status.success() && stdout.starts_with("FAILED: H5Dread"),
        "{stdout}\n{}",
        run.stderr()
    );
    for needle in [
        "cannot tell whether the buffer at 0x",
        "cuPointerGetAttributes: CUDA_ERROR_ILLEGAL_ADDRESS",
    ] {
        assert!(stdout.contains(needle), "{needle:?} in {stdout}");
    }
    assert!(!stdout.contains("Bad address"), "{stdout}");
}

#[test]
fn reads_are_in_place_on_return_and_writes_wait_for_the_legacy_stream() {
    // The emulator (H5GDS_EMU_DEFER_ASYNC=1, set by `run`) leaves memsets, copies from pageable
    // memory and device-to-device copies on the legacy stream until something synchronizes
    // with it, as a GPU may: a zero fill or compact copy not waited for shows as 0xAA from
    // another stream, a write that does not wait for the upload writes stale bytes.
    // Through the path the machine gives (auto), the staged path (on), and cuFile itself (off)
    // where the machine gives GDS.
    let modes: &[&str] = match machine_path() {
        MachinePath::Gds => &["auto", "on", "off"],
        MachinePath::Staged => &["auto", "on"],
    };
    for &mode in modes {
        let run = run_with(&["--stream-order"], &[("H5GDS_COMPAT_MODE", mode)]);
        run.assert_device_ok();
        assert!(
            run.stdout().starts_with("DEVICE OK 4"),
            "{mode}: {}",
            run.stdout()
        );
    }
}

#[test]
#[cfg_attr(
    real_cuda,
    ignore = "needs the CUDA/cuFile emulator's NFS and GDS-target models"
)]
fn a_file_system_cufile_does_not_list_gets_exactly_the_path_it_really_takes() {
    // nvidia-fs is loaded, but the file lives on NFS (the shim's fstatfs) and cuFile lists only
    // local devices as GDS targets: cuFile would register the file in its compatibility mode
    // without a word.
    let shim = h5gds_tests::nfs_statfs_shim();
    let preload = shim.to_str().unwrap();
    let not_listed = [
        ("LD_PRELOAD", preload),
        ("H5GDS_EMU_GDS_TARGETS", "nvme,scsi"),
    ];
    // auto: the driver's own staged path, saying why.
    let mut env = vec![("H5GDS_COMPAT_MODE", "auto")];
    env.extend_from_slice(&not_listed);
    let run_auto = run(&env);
    run_auto.assert_device_ok();
    run_auto.assert_log(
        "device buffers: staged through pinned bounce buffers of 64K (NFS: \
         cuFile does not list NFS among the file systems it supports for GDS, so cuFile would use \
         its compatibility mode)",
    );
    assert_eq!(run_auto.counter("cufile reads"), 0);
    assert_eq!(run_auto.counter("cufile handle register calls"), 0);
    // off: cuFile, and the line says it is cuFile's compatibility mode (which the emulator's
    // counters confirm: POSIX bounce copies, no O_DIRECT requests).
    let mut env = vec![("H5GDS_COMPAT_MODE", "off")];
    env.extend_from_slice(&not_listed);
    let run_off = run(&env);
    run_off.assert_device_ok();
    run_off.assert_log(
        "device buffers: cuFile 1.20 (nvidia-fs 2.20) in cuFile's own compatibility mode for NFS \
         (cuFile does not list NFS among the file systems it supports for GDS)",
    );
    assert!(run_off.counter("cufile posix bounce copies") > 0);
    assert_eq!(run_off.counter("cufile o_direct requests"), 0);
    // NFS listed: GPU-direct, and the line names the storage.
    let run_listed = run(&[
        ("H5GDS_COMPAT_MODE", "auto"),
        ("LD_PRELOAD", preload),
        ("H5GDS_EMU_GDS_TARGETS", "nfs,nvme"),
    ]);
    run_listed.assert_device_ok();
    run_listed.assert_log(
        "device buffers: GPUDirect Storage through cuFile 1.20 (nvidia-fs 2.20) to NFS",
    );
    assert!(run_listed.counter("cufile o_direct requests") > 0);
    assert_eq!(run_listed.counter("cufile posix bounce copies"), 0);
}

#[test]
#[cfg_attr(real_cuda, ignore = "needs the CUDA/cuFile emulator's P2PDMA model")]
fn pci_p2pdma_without_nvidia_fs_is_gpudirect_storage() {
    let run = run(&[("H5GDS_COMPAT_MODE", "auto"), ("H5GDS_EMU_GDS", "p2pdma")]);
    run.assert_device_ok();
    run.assert_log(
        "device buffers: GPUDirect Storage through cuFile 1.20 (PCI P2PDMA, no nvidia-fs) to ",
    );
    assert!(run.counter("cufile reads") > 0 && run.counter("cufile writes") > 0);
    assert!(run.counter("cufile o_direct requests") > 0);
    assert_eq!(run.counter("cufile posix bounce copies"), 0);
}

/// A cufile.json (in a directory of its own, kept while the value lives) that asks for PCI
/// P2PDMA or not, as NVIDIA's "GDS Support for NVMe Drives Using Linux PCI P2PDMA Support" sets it
/// up ("Setting cufile.json Configuration": `{"properties": {"use_pci_p2pdma": true}}` in
/// /etc/cufile.json or the file `CUFILE_ENV_PATH_JSON` names).
struct CufileJson {
    path: String,
    _dir: tempfile::TempDir,
}

fn cufile_json(use_pci_p2pdma: bool) -> CufileJson {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cufile.json");
    std::fs::write(
        &path,
        format!(
            "{{\n    // what this application changes\n    \"properties\": {{\n        \
             \"allow_compat_mode\": true,\n        \"use_pci_p2pdma\": {use_pci_p2pdma}\n    }}\n}}\n"
        ),
    )
    .unwrap();
    CufileJson {
        path: path.to_str().unwrap().to_owned(),
        _dir: dir,
    }
}

/// What opening cuFile costs in the tests of the background open: about what it cost on the
/// first real-GPU machine (0.47 s), and far longer than a 1 MiB transfer on the emulator.
const SLOW_OPEN_MS: &str = "500";

/// h5devprog with `args` on a P2PDMA machine whose cufile.json asks for P2PDMA, under
/// `compat_mode`, with cuFile's open costing `open_ms`.
fn run_with_slow_p2pdma_open(args: &[&str], compat_mode: &str, open_ms: &str) -> Run {
    let json = cufile_json(true);
    run_with(
        args,
        &[
            ("H5GDS_COMPAT_MODE", compat_mode),
            ("H5GDS_EMU_GDS", "p2pdma"),
            ("CUFILE_ENV_PATH_JSON", json.path.as_str()),
            ("H5GDS_EMU_CUFILE_OPEN_MS", open_ms),
        ],
    )
}

/// The line `PREFIX: ...` of h5devprog's output, or a failure showing the run.
#[track_caller]
fn line_of(run: &Run, prefix: &str) -> String {
    run.stdout()
        .lines()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} in\n{}\n{}", run.stdout(), run.stderr()))
        .to_owned()
}

/// The number after `name ` in one of h5devprog's counter lines.
#[track_caller]
fn number_after(line: &str, name: &str) -> u64 {
    let rest = line
        .split_once(&format!("{name} "))
        .unwrap_or_else(|| panic!("no {name:?} in {line:?}"))
        .1;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap()
}

#[test]
#[cfg_attr(
    real_cuda,
    ignore = "needs the CUDA/cuFile emulator's cufile.json model"
)]
fn cufile_json_named_by_cufile_env_path_json_decides_whether_p2pdma_is_asked_for() {
    // A PCI P2PDMA machine (no nvidia-fs) whose application cufile.json does not ask for it:
    // under auto cuFile is never opened; under off cuFile runs in its compatibility mode.
    let off_json = cufile_json(false);
    let p2pdma_off = [
        ("H5GDS_EMU_GDS", "p2pdma"),
        ("CUFILE_ENV_PATH_JSON", off_json.path.as_str()),
    ];
    let mut env = vec![("H5GDS_COMPAT_MODE", "auto")];
    env.extend_from_slice(&p2pdma_off);
    let run_auto = run(&env);
    run_auto.assert_device_ok();
    run_auto.assert_log(
        "first device transfer; device buffers: staged through pinned bounce buffers of 64K \
         (cuFile not opened: no nvidia-fs and P2PDMA off)",
    );
    assert_eq!(run_auto.counter("cufile driver open calls"), 0);
    assert_eq!(run_auto.counter("cufile reads"), 0);
    env[0] = ("H5GDS_COMPAT_MODE", "off");
    let run_off = run(&env);
    run_off.assert_device_ok();
    run_off.assert_log("in cuFile's own compatibility mode (no GDS kernel path)");
    assert!(
        run_off.counter("cufile posix bounce copies") > 0,
        "{:?}",
        run_off.report
    );
    assert_eq!(run_off.counter("cufile o_direct requests"), 0);
    // The same machine with a cufile.json that asks for P2PDMA: GPU-direct.
    let on_json = cufile_json(true);
    let run_on = run(&[
        ("H5GDS_COMPAT_MODE", "auto"),
        ("H5GDS_EMU_GDS", "p2pdma"),
        ("CUFILE_ENV_PATH_JSON", on_json.path.as_str()),
    ]);
    run_on.assert_device_ok();
    run_on.assert_log(
        "device buffers: GPUDirect Storage through cuFile 1.20 (PCI P2PDMA, no nvidia-fs)",
    );
    assert!(
        run_on.counter("cufile o_direct requests") > 0,
        "{:?}",
        run_on.report
    );
    assert_eq!(run_on.counter("cufile posix bounce copies"), 0);
}

#[test]
#[cfg_attr(
    real_cuda,
    ignore = "needs the CUDA/cuFile emulator's slow open and counters"
)]
fn the_first_transfers_are_staged_while_cufile_opens_and_later_ones_use_it() {
    // P2PDMA asked for by the application's cufile.json, and an open as slow as on a real
    // machine: the first device read and write return correct bytes before the open has
    // returned, moved by the staged path; once it has, cuFile moves them.
    let run = run_with_slow_p2pdma_open(&["--background-open"], "auto", SLOW_OPEN_MS);
    run.assert_device_ok();
    let first_read = line_of(&run, "FIRST READ: ");
    assert_eq!(number_after(&first_read, "cufile reads"), 0, "{first_read}");
    assert!(number_after(&first_read, "copies htod") > 0, "{first_read}");
    assert_eq!(
        number_after(&first_read, "opens completed"),
        0,
        "the first read waited for cuFile's open: {first_read}"
    );
    let first_write = line_of(&run, "FIRST WRITE: ");
    assert_eq!(
        number_after(&first_write, "cufile writes"),
        0,
        "{first_write}"
    );
    assert!(
        number_after(&first_write, "copies dtoh") > 0,
        "{first_write}"
    );
    assert_eq!(
        number_after(&first_write, "opens completed"),
        0,
        "the first write waited for cuFile's open: {first_write}"
    );
    let after = line_of(&run, "AFTER THE OPEN: ");
    assert!(number_after(&after, "cufile reads") > 0, "{after}");
    assert!(number_after(&after, "cufile writes") > 0, "{after}");
    assert_eq!(number_after(&after, "copies htod"), 0, "{after}");
    assert_eq!(number_after(&after, "copies dtoh"), 0, "{after}");
    // The log says which path each transfer got, and why.
    run.assert_log(
        "first device transfer; device buffers: staged through pinned bounce buffers of 64K while \
         cuFile opens in the background (cuFile's configuration asks for PCI P2PDMA",
    );
    run.assert_log("cuFile opened in the background in ");
    run.assert_log(
        "cuFile has opened; device buffers: GPUDirect Storage through cuFile 1.20 (PCI P2PDMA, no \
         nvidia-fs) to ",
    );
    assert_eq!(
        run.counter("cufile driver open calls"),
        1,
        "{:?}",
        run.report
    );
    assert_eq!(run.counter("cufile driver opens completed"), 1);
    assert_eq!(run.counter("cufile handle register calls"), 1);
    assert!(run.counter("cufile o_direct requests") > 0);
    // The bounce buffers pinned for the staged transfers were released once the file went
    // GPU-direct (pinned host memory the rest of the process would not use).
    assert!(run.counter("pinned host bytes allocated") > 0);
    assert_eq!(
        run.counter("leaked pinned host allocations"),
        0,
        "{:?}",
        run.report
    );
}

#[test]
#[cfg_attr(
    real_cuda,
    ignore = "needs the CUDA/cuFile emulator's slow open and counters"
)]
fn compat_mode_off_opens_cufile_before_the_file_opens_however_slow() {
    // GDS demanded: the open decides (and fails the open where cuFile cannot), so the first
    // transfer already goes through cuFile.
    let run = run_with_slow_p2pdma_open(&["--background-open"], "off", SLOW_OPEN_MS);
    run.assert_device_ok();
    let first_read = line_of(&run, "FIRST READ: ");
    assert!(
        number_after(&first_read, "cufile reads") > 0,
        "{first_read}"
    );
    assert_eq!(number_after(&first_read, "copies htod"), 0, "{first_read}");
    assert_eq!(
        number_after(&first_read, "opens completed"),
        1,
        "{first_read}"
    );
    assert!(
        !run.stderr().contains("in the background"),
        "{}",
        run.stderr()
    );
}

#[test]
#[cfg_attr(real_cuda, ignore = "needs the CUDA/cuFile emulator's slow open")]
fn a_child_forked_while_cufile_opens_works_and_does_not_wait_for_the_open() {
    // The parent's first device read starts cuFile's open on a thread of the parent; the child
    // forked before it has returned has no such thread: its host I/O works, its device read fails
    // naming fork, and its exit does not wait for an open that nothing in it will finish.
    let run = run_with_slow_p2pdma_open(&["--fork"], "auto", "3000");
    let stdout = run.stdout();
    assert!(
        run.out.status.success() && stdout.contains("CHILD OK") && stdout.contains("DEVICE OK 4"),
        "status {:?}\nstdout:\n{stdout}\nstderr:\n{}",
        run.out.status,
        run.stderr()
    );
    let error = line_of(&run, "CHILD DEVICE ERROR: ");
    assert!(error.contains("is a fork of process"), "{error}");
    assert_eq!(
        line_of(&run, "OPENS COMPLETED WHEN THE CHILD HAD EXITED: "),
        "0",
        "the child outlived the parent's cuFile open (did it wait for the open at exit?)"
    );
    run.assert_log("while cuFile opens in the background");
    // The parent's own open finished, and the child called nothing of CUDA or cuFile.
    assert_eq!(
        run.counter("cufile driver opens completed"),
        1,
        "{:?}",
        run.report
    );
    assert_eq!(run.counter("calls from a forked child"), 0);
    let dir = run.file.parent().unwrap();
    let child: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("emulator-report.txt.forked-")
        })
        .collect();
    assert_eq!(child.len(), 1, "{child:?}");
    let child = read_report(&child[0].path());
    assert_eq!(child.counter("calls from a forked child"), 0, "{child:?}");
}

#[test]
#[cfg_attr(real_cuda, ignore = "needs the CUDA/cuFile emulator's slow open")]
fn a_program_that_exits_while_cufile_opens_exits_cleanly_after_the_open() {
    // A short program: a few 4 KiB transfers, all done long before a 3 s open returns. Its exit
    // lets the open finish before libcufile's static destructors run (the emulator's report,
    // written by its destructor, sees the open returned), and the program exits normally.
    let run = run_with_slow_p2pdma_open(&["--sizes", "4096"], "auto", "3000");
    run.assert_device_ok();
    run.assert_log("while cuFile opens in the background");
    run.assert_log("cuFile opened in the background in ");
    assert_eq!(
        run.counter("cufile driver open calls"),
        1,
        "{:?}",
        run.report
    );
    assert_eq!(
        run.counter("cufile driver opens completed"),
        1,
        "{:?}",
        run.report
    );
}
