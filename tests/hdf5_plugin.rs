//! The plugin loaded by a C-API HDF5 program (HDF5 2.x built from source), through
//! `HDF5_PLUGIN_PATH` + `HDF5_DRIVER=gds` and through `H5Pset_driver_by_name` with a config string;
//! files it writes read back under sec2; invalid settings fail with clear errors.

use h5gds_tests::emulator::{emulator_lib_dir, NO_DEVICE};
use h5gds_tests::plugin_dir;
use h5gds_tests::process::{assert_ok, clean_env, output_within, text, TIME_LIMIT};
use std::path::Path;
use std::process::{Command, Output};

const PROG: &str = env!("CARGO_BIN_EXE_h5prog");
const PROG_HIDDEN: &str = env!("CARGO_BIN_EXE_h5prog_hidden");

/// Runs a test program with a clean HDF5/h5gds environment plus `env`.
fn run(program: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(program);
    cmd.args(args);
    clean_env(&mut cmd).env("HDF5_PLUGIN_PATH", plugin_dir());
    cmd.envs(env.iter().copied());
    output_within(&mut cmd, TIME_LIMIT)
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn hdf5_driver_env_loads_the_plugin_and_sec2_reads_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("env.h5");
    let gds = [("HDF5_DRIVER", "gds"), ("H5GDS_LOG", "info")];
    let out = run(PROG, &["write", path_str(&file)], &gds);
    assert_ok(&out, "WRITE OK");
    let opened = format!("opened {:?}", path_str(&file));
    assert!(
        text(&out.stderr).contains(&opened),
        "no open line from gds:\n{}",
        text(&out.stderr)
    );

    let out = run(PROG, &["verify", path_str(&file)], &gds);
    assert_ok(&out, "VERIFY OK");
    assert!(text(&out.stderr).contains(&opened));

    // The default driver (sec2) reads the same file, and gds was not involved.
    let out = run(PROG, &["verify", path_str(&file)], &[("H5GDS_LOG", "info")]);
    assert_ok(&out, "VERIFY OK");
    assert!(!text(&out.stderr).contains("opened"));
}

#[test]
fn sec2_written_file_reads_through_gds() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sec2.h5");
    assert_ok(&run(PROG, &["write", path_str(&file)], &[]), "WRITE OK");
    let out = run(
        PROG,
        &["verify", path_str(&file)],
        &[("HDF5_DRIVER", "gds")],
    );
    assert_ok(&out, "VERIFY OK");
}

#[test]
fn config_string_through_h5pset_driver_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cfg.h5");
    // A small task size and three threads put every large dataset through the thread pool.
    let config = "nthreads=3, task_size=64K";
    let out = run(
        PROG,
        &["write", path_str(&file), "--config", config],
        &[("H5GDS_LOG", "info")],
    );
    assert_ok(&out, "WRITE OK");
    let err = text(&out.stderr);
    assert!(err.contains("nthreads=3 (config string)"), "{err}");
    assert!(err.contains("task_size=64K (config string)"), "{err}");
    let out = run(PROG, &["verify", path_str(&file), "--config", config], &[]);
    assert_ok(&out, "VERIFY OK");
    assert_ok(&run(PROG, &["verify", path_str(&file)], &[]), "VERIFY OK");
}

#[test]
fn invalid_config_string_fails_the_open_with_an_hdf5_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.h5");
    let out = run(
        PROG,
        &["write", path_str(&file), "--config", "nthreads=zero"],
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    // The log line, and the record the driver pushed onto HDF5's error stack.
    assert!(
        err.contains(
            "invalid value \"zero\" for nthreads: accepted values are an integer from 1 to 256"
        ),
        "{err}"
    );
    assert!(
        err.contains("gds_open(): invalid value"),
        "no error-stack record from the driver:\n{err}"
    );
    assert!(!file.exists(), "a failed open must not leave a file behind");

    let out = run(
        PROG,
        &["write", path_str(&file), "--config", "colour=blue"],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("unknown key \"colour\""),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn invalid_environment_setting_names_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("badenv.h5");
    let env = [("HDF5_DRIVER", "gds"), ("H5GDS_COMPAT_MODE", "sometimes")];
    let out = run(PROG, &["write", path_str(&file)], &env);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("H5GDS_COMPAT_MODE") && err.contains("auto, on, off"),
        "{err}"
    );

    let env = [("HDF5_DRIVER", "gds"), ("H5_GDS_VFD_IO_BLOCK_SIZE", "12Q")];
    let out = run(PROG, &["write", path_str(&file)], &env);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("H5_GDS_VFD_IO_BLOCK_SIZE"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn without_reachable_hdf5_symbols_the_driver_reads_hdf5_driver_config_itself() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hidden.h5");
    let env = [
        ("HDF5_DRIVER", "gds"),
        ("HDF5_DRIVER_CONFIG", "nthreads=3"),
        ("H5GDS_LOG", "info"),
    ];
    let out = run(PROG_HIDDEN, &["write", path_str(&file)], &env);
    assert_ok(&out, "WRITE OK");
    assert!(
        text(&out.stderr).contains("nthreads=3 (config string)"),
        "{}",
        text(&out.stderr)
    );
    assert_ok(&run(PROG, &["verify", path_str(&file)], &[]), "VERIFY OK");

    let env = [("HDF5_DRIVER", "gds"), ("HDF5_DRIVER_CONFIG", "nthreads=0")];
    let out = run(PROG_HIDDEN, &["write", path_str(&file)], &env);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("for nthreads"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn compat_mode_off_without_cuda_fails_the_open_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("off.h5");
    // A CUDA driver without devices (the emulator's switch): holds on any machine, also one
    // whose NVIDIA driver the system's library cache would find.
    let libs = emulator_lib_dir();
    let libs = libs.path().to_str().unwrap();
    let env = [
        ("HDF5_DRIVER", "gds"),
        ("H5GDS_COMPAT_MODE", "off"),
        ("LD_LIBRARY_PATH", libs),
        NO_DEVICE,
    ];
    let out = run(PROG, &["write", path_str(&file)], &env);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("compat_mode=off requires cuFile, but CUDA is not available"),
        "{err}"
    );
    assert!(
        !file.exists(),
        "a refused open must not leave a file behind"
    );
    // auto on the same machine works, with device I/O reported as not possible.
    let env = [
        ("HDF5_DRIVER", "gds"),
        ("H5GDS_LOG", "info"),
        ("LD_LIBRARY_PATH", libs),
        NO_DEVICE,
    ];
    let out = run(PROG, &["write", path_str(&file)], &env);
    assert_ok(&out, "WRITE OK");
    assert!(
        text(&out.stderr).contains("device buffers: not possible: no usable CUDA"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn direct_io_where_the_file_system_refuses_o_direct() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("direct.h5");
    let shim = h5gds_tests::refuse_o_direct_shim();
    let preload = shim.to_str().unwrap();
    // `on` fails the open, naming the setting and the way out.
    let env = [
        ("HDF5_DRIVER", "gds"),
        ("H5GDS_DIRECT_IO", "on"),
        ("LD_PRELOAD", preload),
    ];
    let out = run(PROG, &["write", path_str(&file)], &env);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("direct_io=on but the file system refuses O_DIRECT"),
        "{err}"
    );
    assert!(err.contains("use direct_io=auto or off"), "{err}");
    // `auto` falls back to buffered I/O, says so, and the data is right.
    let env = [
        ("HDF5_DRIVER", "gds"),
        ("H5GDS_DIRECT_IO", "auto"),
        ("H5GDS_LOG", "info"),
        ("LD_PRELOAD", preload),
    ];
    let out = run(PROG, &["write", path_str(&file)], &env);
    assert_ok(&out, "WRITE OK");
    assert!(
        text(&out.stderr).contains("O_DIRECT refused"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        !text(&out.stderr).contains("with O_DIRECT"),
        "{}",
        text(&out.stderr)
    );
    assert_ok(&run(PROG, &["verify", path_str(&file)], &[]), "VERIFY OK");
    // Without the shim, `on` really uses O_DIRECT (this machine's file systems accept it).
    let env = [
        ("HDF5_DRIVER", "gds"),
        ("H5GDS_DIRECT_IO", "on"),
        ("H5GDS_LOG", "info"),
    ];
    let out = run(PROG, &["write", path_str(&file)], &env);
    assert_ok(&out, "WRITE OK");
    assert!(
        text(&out.stderr).contains("with O_DIRECT for aligned transfers"),
        "{}",
        text(&out.stderr)
    );
}
