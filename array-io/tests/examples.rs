//! The examples `roundtrip` and `batched_read` (built by `cargo test` into
//! target/<profile>/examples/) pass their own checks: on the host, and with `--device` on the
//! CUDA/cuFile emulator through the gds driver and through the staged path.

mod common;

use common::ChildRun;
use h5gds_tests::emulator::read_report;
use h5gds_tests::process;
use std::path::PathBuf;
use std::process::Command;

/// The built example `name`, next to this test binary's directory.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().unwrap().parent().unwrap();
    let path = profile_dir.join("examples").join(name);
    assert!(
        path.is_file(),
        "{} is missing: `cargo test -p array-io` builds the examples (or run `cargo build -p \
         array-io --examples`)",
        path.display()
    );
    path
}

/// Runs example `name` with `args`, on the emulator if `device`, with `env`.
fn run(name: &str, args: &[&str], env: &[(&str, &str)]) -> ChildRun {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.txt");
    let libs = h5gds_tests::emulator::emulator_lib_dir();
    let mut cmd = Command::new(example(name));
    cmd.args(args).arg("--dir").arg(dir.path().join("data"));
    process::clean_env(&mut cmd);
    if args.contains(&"--device") {
        libs.configure(&mut cmd);
        cmd.env("H5GDS_EMU_REPORT", &report);
    }
    cmd.current_dir(dir.path()).envs(env.iter().copied());
    let out = process::output_within(&mut cmd, process::TIME_LIMIT);
    let run = ChildRun {
        out,
        report: read_report(&report),
    };
    assert!(
        run.out.status.success(),
        "{name} {args:?} {env:?} failed: {:?}\nstdout:\n{}\nstderr:\n{}",
        run.out.status,
        run.stdout(),
        run.stderr()
    );
    run
}

#[test]
fn roundtrip_passes_on_the_host() {
    let run = run("roundtrip", &[], &[]);
    assert!(
        run.stdout().ends_with("HDF5 ROUND TRIP OK\n"),
        "{}",
        run.stdout()
    );
}

#[test]
fn roundtrip_passes_on_the_device_through_gds_and_staged() {
    let run = run("roundtrip", &["--device"], &[("H5GDS_USE_VFD_GDS", "1")]);
    assert!(
        run.stdout().ends_with("HDF5 ROUND TRIP OK\n"),
        "{}",
        run.stdout()
    );
    run.assert_clean();
    assert!(run.counter("cufile reads") > 0 && run.counter("cufile writes") > 0);
    assert!(!run.stderr().contains("WARN"), "{}", run.stderr());
    let run = run_staged("roundtrip");
    assert!(
        run.stdout().ends_with("HDF5 ROUND TRIP OK\n"),
        "{}",
        run.stdout()
    );
}

fn run_staged(name: &str) -> ChildRun {
    let run = run(
        name,
        &["--device"],
        &[
            ("H5GDS_USE_VFD_GDS", "0"),
            ("H5GDS_STAGING_BUFFER_SIZE", "16K"),
        ],
    );
    run.assert_clean();
    assert_eq!(run.counter("cufile reads"), 0);
    assert_eq!(run.counter("cufile writes"), 0);
    run
}

#[test]
fn batched_read_passes_on_the_host() {
    let run = run("batched_read", &[], &[]);
    assert!(
        run.stdout().ends_with("HDF5 BATCHED READ OK\n"),
        "{}",
        run.stdout()
    );
}

#[test]
fn batched_read_passes_on_the_device_through_gds_and_staged() {
    let run = run("batched_read", &["--device"], &[("H5GDS_USE_VFD_GDS", "1")]);
    assert!(
        run.stdout().ends_with("HDF5 BATCHED READ OK\n"),
        "{}",
        run.stdout()
    );
    run.assert_clean();
    assert!(run.counter("cufile reads") > 0);
    let run = run_staged("batched_read");
    assert!(
        run.stdout().ends_with("HDF5 BATCHED READ OK\n"),
        "{}",
        run.stdout()
    );
}
