//! The vfd-gds compatibility library (`libhdf5_vfd_gds.so.1`, crate `vfd-gds-compat`) under a C
//! program written for vfd-gds (`tests/c/vfd_gds_program.c`: its header, `H5Pset_fapl_gds`,
//! `-lhdf5_vfd_gds`), built here against HDF5 built from source: bytes through host and device
//! buffers, refused sizes, another `gds` driver registered first, and the settings of the file
//! access list reaching a virtual dataset's source and an external link's target.

use h5gds_tests::emulator::{emulator_cuda_lib_dir, emulator_lib_dir, NO_DEVICE};
use h5gds_tests::process::{assert_ok, clean_env, output_within, text, TIME_LIMIT};
use h5gds_tests::{vfd_gds_compat_library, workspace_root, REAL_CUDA};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The program and the directory holding the compatibility library under both its names.
struct Program {
    exe: PathBuf,
    lib_dir: PathBuf,
}

/// Builds the C program once per test process, as a vfd-gds user would: `cc ... -lhdf5_vfd_gds`
/// with HDF5's static library, exporting HDF5's symbols as a program linking a shared HDF5 does.
fn program() -> &'static Program {
    static PROGRAM: OnceLock<Program> = OnceLock::new();
    PROGRAM.get_or_init(|| {
        let root = workspace_root();
        let dir = root
            .join("target/test-programs")
            .join(format!("vfd-gds-{}", std::process::id()));
        let lib_dir = dir.join("lib");
        std::fs::create_dir_all(&lib_dir).unwrap();
        let library = vfd_gds_compat_library();
        for name in ["libhdf5_vfd_gds.so", "libhdf5_vfd_gds.so.1"] {
            std::os::unix::fs::symlink(&library, lib_dir.join(name)).unwrap();
        }
        let hdf5 = PathBuf::from(env!("H5GDS_TEST_HDF5_ROOT"));
        let exe = dir.join("vfd_gds_program");
        let mut cc = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
        cc.args(["-O1", "-Wall", "-Werror", "-o"])
            .arg(&exe)
            .arg(root.join("tests/c/vfd_gds_program.c"))
            .arg("-I")
            .arg(hdf5.join("include"))
            .arg("-I")
            .arg(root.join("vfd-gds-compat/include"))
            .arg("-L")
            .arg(&lib_dir)
            .arg("-lhdf5_vfd_gds")
            .arg(hdf5.join("lib/libhdf5.a"));
        let zlib_dir = env!("H5GDS_TEST_ZLIB_DIR");
        if !zlib_dir.is_empty() {
            cc.arg("-L").arg(zlib_dir);
        }
        cc.args(["-lz", "-lm", "-ldl", "-lpthread", "-Wl,--export-dynamic"]);
        let out = output_within(&mut cc, TIME_LIMIT);
        assert!(
            out.status.success(),
            "building the vfd-gds C program failed:\n{}",
            text(&out.stderr)
        );
        Program { exe, lib_dir }
    })
}

/// `LD_LIBRARY_PATH` with the compatibility library's directory first, then `more`.
fn library_path(more: Option<OsString>) -> OsString {
    let mut value = OsString::from(&program().lib_dir);
    if let Some(more) = more {
        value.push(":");
        value.push(more);
    }
    value
}

/// Runs the program with the driver's info log and `env`.
fn run(args: &[&str], ld_library_path: OsString, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(&program().exe);
    cmd.args(args);
    clean_env(&mut cmd)
        .env("LD_LIBRARY_PATH", ld_library_path)
        .env("H5GDS_LOG", "info")
        .envs(env.iter().copied());
    output_within(&mut cmd, TIME_LIMIT)
}

/// The driver's open lines for `file`.
fn open_lines(out: &Output, file: &Path) -> Vec<String> {
    let opened = format!("opened {:?}", file.to_str().unwrap());
    text(&out.stderr)
        .lines()
        .filter(|line| line.contains(&opened))
        .map(str::to_owned)
        .collect()
}

/// Host buffers on a machine where vfd-gds aborts (CUDA reports no device, no libcufile):
/// h5gds opens the files, the bytes round-trip and equal sec2's, the copy buffer size is the
/// bounce buffer size and `H5Pget_fapl_gds` returns what was set (checked in the program).
#[test]
fn a_program_written_for_vfd_gds_runs_on_h5gds_without_a_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("host.h5");
    let no_gpu = emulator_cuda_lib_dir();
    let out = run(
        &["host", file.to_str().unwrap()],
        library_path(Some(no_gpu.path().into())),
        &[NO_DEVICE],
    );
    assert_ok(&out, "host OK");
    let lines = open_lines(&out, &file);
    assert_eq!(lines.len(), 2, "{}", text(&out.stderr));
    assert!(
        lines
            .iter()
            .all(|l| l.contains("bounce_buffer_size=8M (argument of H5Pset_fapl_gds)")),
        "{lines:#?}"
    );
}

/// Device buffers (cuMemAlloc) written and read through the compatibility library, on the CUDA
/// emulator (or a real GPU under `H5GDS_TEST_REAL_CUDA=1`); bytes compared in the program.
#[test]
fn a_program_written_for_vfd_gds_moves_device_buffers() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("device.h5");
    let emulator = (!REAL_CUDA).then(emulator_lib_dir);
    let out = run(
        &["device", file.to_str().unwrap()],
        library_path(emulator.as_ref().map(|e| e.path().into())),
        &[],
    );
    assert_ok(&out, "device OK");
    let lines = open_lines(&out, &file);
    assert_eq!(lines.len(), 2, "{}", text(&out.stderr));
    // Each open's first device transfer is logged: the device buffers reached the driver.
    let first = format!("{:?}: first device transfer", file.to_str().unwrap());
    assert_eq!(
        text(&out.stderr).matches(&first).count(),
        2,
        "{}",
        text(&out.stderr)
    );
}

/// Sizes vfd-gds refuses (a copy buffer not a multiple of the block size) or h5gds cannot use
/// (a 2 GiB bounce buffer) fail with a message naming them, the list unchanged and usable.
#[test]
fn refused_sizes_fail_and_leave_the_list_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("refused.h5");
    let out = run(&["refuse", file.to_str().unwrap()], library_path(None), &[]);
    assert_ok(&out, "refuse OK");
    let log = text(&out.stderr);
    assert!(
        log.contains("the copy buffer size (12800) must be a multiple of the block size (4096)"),
        "{log}"
    );
    assert!(
        log.contains("bounce_buffer_size (argument of H5Pset_fapl_gds)") && log.contains("2G"),
        "{log}"
    );
    assert!(open_lines(&out, &file).is_empty(), "{log}");
}

/// Another driver registered as `gds`/512 first (the stand-in for vfd-gds's own class): the
/// compatibility library registers h5gds's class beside it and every file goes through h5gds.
#[test]
fn another_gds_driver_registered_first_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("other.h5");
    let plugin = dir.path().join("libother_gds.so");
    let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-shared", "-fPIC", "-o"])
        .arg(&plugin)
        .arg(workspace_root().join("tests/shims/other_gds_driver.c"))
        .status()
        .unwrap();
    assert!(status.success());
    let out = run(
        &["other", plugin.to_str().unwrap(), file.to_str().unwrap()],
        library_path(None),
        &[],
    );
    assert_ok(&out, "other OK");
    assert!(!text(&out.stderr).contains("the other gds driver was asked"));
    assert_eq!(open_lines(&out, &file).len(), 2, "{}", text(&out.stderr));
}

/// The settings of the list a file was opened with reach the files HDF5 opens from it: a
/// virtual dataset's source and an external link's target, given by config string or by
/// `H5Pset_fapl_gds`, each named with where it came from in every file's open line.
#[test]
fn settings_reach_virtual_dataset_sources_and_external_link_targets() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    assert_ok(
        &run(&["links-make", d], library_path(None), &[]),
        "links-make OK",
    );
    for (how, setting) in [
        ("config", "nthreads=3 (config string)"),
        (
            "fapl_gds",
            "bounce_buffer_size=8M (argument of H5Pset_fapl_gds)",
        ),
    ] {
        let out = run(&["links-read", d, how], library_path(None), &[]);
        assert_ok(&out, "links-read OK");
        for name in ["main.h5", "src.h5", "ext.h5"] {
            let lines = open_lines(&out, &dir.path().join(name));
            assert!(
                !lines.is_empty() && lines.iter().all(|l| l.contains(setting)),
                "{how}: {name} opened without {setting}:\n{}",
                text(&out.stderr)
            );
        }
    }
}
