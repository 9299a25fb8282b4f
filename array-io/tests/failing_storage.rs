//! `to_file` on failing storage and killed part-way (the shim of `tests/shims/failing_io.c`,
//! preloaded into a child running one test of this binary): replacing an existing file, the path
//! afterwards holds the old file or the complete new one, whatever call the process dies at
//! (`kill -9` before each `pwrite` it makes, and before the rename); a write that fails (ENOSPC,
//! EIO) returns an error naming the path and leaves the old file, with nothing beside it.

use array_io::{from_file, to_file};
use h5gds_tests::failing_io_shim;
use h5gds_tests::process::{clean_env, output_within, OutputText, CHILD_VAR, TIME_LIMIT};
use ndarray::{Array2, ArrayD};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The arrays written: the old file's and the new one's (different shapes and values, so a
/// mixture of the two shows).
fn old_array() -> ArrayD<i64> {
    Array2::from_shape_fn((300, 200), |(i, j)| (i * 200 + j) as i64).into_dyn()
}

fn new_array() -> ArrayD<i64> {
    Array2::from_shape_fn((400, 300), |(i, j)| -((i * 300 + j) as i64) - 1).into_dyn()
}

/// The path a child writes to, given by the parent.
const TARGET_VAR: &str = "H5GDS_TEST_TARGET";

/// In the child: replaces the file with the new array; prints the outcome.
fn child_writes() {
    let path = PathBuf::from(std::env::var(TARGET_VAR).unwrap());
    match to_file(&new_array(), &path, "/x") {
        Ok(()) => println!("WROTE"),
        Err(e) => println!("FAILED: {e}"),
    }
}

/// Runs test `name` in a child with the shim preloaded and `fault` set, writing to `path`.
fn child(name: &str, path: &Path, fault: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", name, "--nocapture", "--test-threads=1"]);
    clean_env(&mut cmd)
        .env(CHILD_VAR, name)
        .env(TARGET_VAR, path)
        .env("LD_PRELOAD", failing_io_shim())
        .env("H5GDS_FAULT_PATH", path.parent().unwrap());
    for (k, v) in fault {
        cmd.env(format!("H5GDS_FAULT_{k}"), v);
    }
    output_within(&mut cmd, TIME_LIMIT)
}

fn is_child(name: &str) -> bool {
    std::env::var(CHILD_VAR).as_deref() == Ok(name)
}

/// The files in `dir` other than `keep`.
fn others(dir: &Path, keep: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p != keep)
        .collect()
}

#[test]
fn to_file_killed_at_any_write_leaves_the_old_file_or_the_new_one() {
    const NAME: &str = "to_file_killed_at_any_write_leaves_the_old_file_or_the_new_one";
    if is_child(NAME) {
        return child_writes();
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("replaced.h5");
    // How many writes a whole replacement makes (the shim counts them, failing none).
    to_file(&old_array(), &path, "/x").unwrap();
    let log = dir.path().join("writes.log");
    let out = child(
        NAME,
        &path,
        &[
            ("OP", "pwrite"),
            ("KIND", "count"),
            ("TIMES", "all"),
            ("LOG", log.to_str().unwrap()),
        ],
    );
    assert!(out.stdout_text().contains("WROTE"), "{}", out.stderr_text());
    let writes = std::fs::read_to_string(&log).unwrap().lines().count();
    assert!(writes > 2, "{writes} writes");
    std::fs::remove_file(&log).unwrap();
    // Killed before each of them, and before the rename.
    let points: Vec<(String, &str)> = (1..=writes)
        .map(|n| (n.to_string(), "pwrite"))
        .chain([("1".to_string(), "rename")])
        .collect();
    let (mut old, mut new) = (0, 0);
    for (at, op) in &points {
        to_file(&old_array(), &path, "/x").unwrap();
        let out = child(NAME, &path, &[("OP", op), ("KIND", "kill"), ("AT", at)]);
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            out.status.signal(),
            Some(9),
            "{op} {at}: {}",
            out.stdout_text()
        );
        let held = from_file::<i64>(&path, "/x").unwrap_or_else(|e| {
            panic!("killed before {op} {at}: the path holds no readable file: {e}")
        });
        if held == old_array() {
            old += 1;
        } else {
            assert_eq!(
                held,
                new_array(),
                "killed before {op} {at}: neither old nor new"
            );
            new += 1;
        }
        // What a killed writer leaves beside it: at most its hidden, partly written file.
        for other in others(dir.path(), &path) {
            let name = other.file_name().unwrap().to_string_lossy().into_owned();
            assert!(
                name.starts_with(".replaced.h5.") && name.ends_with(".h5gds-tmp"),
                "{name}"
            );
            std::fs::remove_file(other).unwrap();
        }
    }
    // Every kill came before the rename: the old file each time.
    assert_eq!((old, new), (points.len(), 0));
    println!("killed at {} points: the old file each time", points.len());
    // And with no kill, the new one.
    let out = child(NAME, &path, &[("OP", "pwrite"), ("KIND", "count")]);
    assert!(out.stdout_text().contains("WROTE"), "{}", out.stderr_text());
    assert_eq!(from_file::<i64>(&path, "/x").unwrap(), new_array());
}

#[test]
fn to_file_on_failing_storage_names_the_file_and_keeps_the_old_one() {
    const NAME: &str = "to_file_on_failing_storage_names_the_file_and_keeps_the_old_one";
    if is_child(NAME) {
        return child_writes();
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kept.h5");
    // Raw data writes (64 KiB and more) only: when HDF5's own metadata writes fail at close, the
    // HDF5 of the tests (built with its assertions) aborts in H5F__dest, under sec2 as under gds.
    for (kind, at, times) in [
        ("enospc", "1", "all"),
        ("eio", "1", "1"),
        ("eio", "2", "all"),
    ] {
        to_file(&old_array(), &path, "/x").unwrap();
        let fault = [
            ("OP", "pwrite"),
            ("KIND", kind),
            ("AT", at),
            ("TIMES", times),
            ("MIN_BYTES", "65536"),
        ];
        let out = child(NAME, &path, &fault);
        let said = out.stdout_text();
        assert!(
            out.status.success(),
            "{kind} at {at}: {said}\n{}",
            out.stderr_text()
        );
        if said.contains("WROTE") {
            // A write that reported success is there.
            assert_eq!(
                from_file::<i64>(&path, "/x").unwrap(),
                new_array(),
                "{kind} at {at}"
            );
        } else {
            assert!(
                said.contains("FAILED") && said.contains(path.to_str().unwrap()),
                "{kind} at {at}: the error names the file: {said}"
            );
            assert_eq!(
                from_file::<i64>(&path, "/x").unwrap(),
                old_array(),
                "{kind} at {at}"
            );
        }
        assert_eq!(
            others(dir.path(), &path),
            Vec::<PathBuf>::new(),
            "{kind} at {at}"
        );
    }
    // Short writes and EINTR are not failures.
    for (kind, times) in [("short", "all"), ("eintr", "3")] {
        to_file(&old_array(), &path, "/x").unwrap();
        let out = child(
            NAME,
            &path,
            &[("OP", "pwrite"), ("KIND", kind), ("TIMES", times)],
        );
        assert!(
            out.stdout_text().contains("WROTE"),
            "{kind}: {}",
            out.stdout_text()
        );
        assert_eq!(
            from_file::<i64>(&path, "/x").unwrap(),
            new_array(),
            "{kind}"
        );
    }
}
