//! Collective I/O with real MPI processes (feature `mpi`): `tests/bin/h5mpiprog.rs` under
//! `mpirun -np N --oversubscribe` for N = 1 to 4, inside `timeout` (a deadlock fails the test
//! instead of hanging the run), on the CUDA emulator with two devices so that device tiles are
//! exercised on both, then its files checked by h5py in a separate process.

use h5gds_tests::emulator::emulator_lib_dir;
use h5gds_tests::process::{clean_env, output_within, text};
use h5gds_tests::python::python;
use h5gds_tests::workspace_root;
use std::process::Command;
use std::time::Duration;

/// Seconds one MPI job may take (`timeout` kills it after that; a healthy run takes a few).
const JOB_LIMIT_SECS: u64 = 120;

fn mpirun(ranks: usize, dir: &std::path::Path) -> Command {
    let mut cmd = Command::new("timeout");
    cmd.args(["-k", "5", &JOB_LIMIT_SECS.to_string(), "mpirun", "-np"])
        .arg(ranks.to_string())
        .args(["--oversubscribe", env!("CARGO_BIN_EXE_h5mpiprog")])
        .arg(dir);
    clean_env(&mut cmd);
    // CI and these machines run as root, which Open MPI refuses unless told.
    cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("H5GDS_EMU_DEVICES", "2");
    cmd
}

#[test]
fn collective_writes_and_reads_with_1_to_4_ranks_are_verified_by_h5py() {
    let emulator = emulator_lib_dir();
    for ranks in 1..=4 {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = mpirun(ranks, dir.path());
        emulator.configure(&mut cmd);
        let out = output_within(&mut cmd, Duration::from_secs(JOB_LIMIT_SECS + 30));
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(
            out.status.success(),
            "mpirun -np {ranks} failed ({:?}; 124 = timed out, a hang)\nstdout:\n{stdout}\nstderr:\n{stderr}",
            out.status.code()
        );
        for rank in 0..ranks {
            assert!(
                stdout.contains(&format!("rank {rank}: ALL OK")),
                "rank {rank} of {ranks} did not finish:\n{stdout}\n{stderr}"
            );
            // Node-local rank modulo the emulator's two devices, and the path the tiles took.
            assert!(
                stdout.contains(&format!("rank {rank}: device {}", rank % 2)),
                "{stdout}"
            );
            assert!(
                stdout.contains(&format!("rank {rank}: device paths checked")),
                "{stdout}"
            );
        }
        let verify = Command::new(python())
            .arg(workspace_root().join("tests/python/mpi_verify.py"))
            .arg(dir.path())
            .output()
            .unwrap();
        let report = text(&verify.stdout);
        assert!(
            verify.status.success() && report.contains("VERIFIED"),
            "h5py check of the {ranks}-rank files failed:\n{report}\n{}",
            text(&verify.stderr)
        );
        println!("{ranks} ranks: {}", report.trim());
    }
}
