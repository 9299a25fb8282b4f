//! The `h5gds` tool: `info` without CUDA, on the emulator, and with the real libcufile but no
//! usable CUDA device (must return promptly); `bench` with tiny sizes writes valid JSON and an
//! SVG; `info <url>` on a URL nobody serves. "No CUDA" is a CUDA driver without devices (the emulator's `H5GDS_EMU_DEVICES=0`),
//! which holds on any machine, also one with an NVIDIA driver in the system's library cache.

use h5gds_tests::emulator::{emulator_cuda_lib_dir, emulator_lib_dir, EmulatorLibDir, NO_DEVICE};
use h5gds_tests::nvcomp_emulator::nvcomp_emulator_lib_dir;
use h5gds_tests::process::{clean_env, output_within};
use h5gds_tests::python::cufile_lib_dir;
use h5gds_tests::{plugin_dir, workspace_root};
use std::ffi::{OsStr, OsString};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const TOOL: &str = env!("CARGO_BIN_EXE_h5gds");

/// Runs the tool with a clean h5gds/HDF5 environment and no inherited `LD_LIBRARY_PATH`, plus
/// `env`, failing if it takes over a minute (the tool must never hang).
fn tool(args: &[&str], env: &[(&str, &OsStr)]) -> Output {
    let mut cmd = Command::new(TOOL);
    cmd.args(args);
    clean_env(&mut cmd).env_remove("LD_LIBRARY_PATH");
    cmd.envs(env.iter().map(|(k, v)| (*k, *v)));
    output_within(&mut cmd, Duration::from_secs(60))
}

/// The environment of a machine whose CUDA driver has no device: the emulator as libcuda (and
/// libcufile) with its zero-device switch.
fn no_gpu(libs: &EmulatorLibDir) -> [(&'static str, OsString); 2] {
    [
        ("LD_LIBRARY_PATH", libs.path().as_os_str().to_owned()),
        (NO_DEVICE.0, OsString::from(NO_DEVICE.1)),
    ]
}

fn borrowed<'a>(env: &'a [(&'static str, OsString)]) -> Vec<(&'static str, &'a OsStr)> {
    env.iter().map(|(k, v)| (*k, v.as_os_str())).collect()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn info_json(env: &[(&str, &OsStr)]) -> serde_json::Value {
    let dir = plugin_dir();
    let out = tool(
        &["info", "--json", "--plugin-dir", dir.to_str().unwrap()],
        env,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("info --json prints JSON")
}

#[test]
fn info_without_cuda() {
    let libs = emulator_lib_dir();
    let env = no_gpu(&libs);
    let env = borrowed(&env);
    let info = info_json(&env);
    assert_eq!(info["cuda"]["available"], false);
    assert_eq!(info["cufile"]["loaded"], false);
    assert!(info["verdict"]["device"]
        .as_str()
        .unwrap()
        .starts_with("not possible"));
    assert!(info["plugin"].as_str().unwrap().ends_with("libh5gds.so"));
    assert_eq!(info["settings"][0]["key"], "compat_mode");

    let dir = plugin_dir();
    let out = tool(&["info", "--plugin-dir", dir.to_str().unwrap()], &env);
    let text = stdout(&out);
    assert!(text.contains("export HDF5_DRIVER=gds"), "{text}");
    assert!(text.contains("CUDA:     not usable"), "{text}");
}

#[test]
fn info_reports_where_each_setting_came_from() {
    let cfg = OsStr::new("task_size=8M");
    let threads = OsStr::new("3");
    let info = info_json(&[("HDF5_DRIVER_CONFIG", cfg), ("H5GDS_NTHREADS", threads)]);
    let row = |key: &str| {
        info["settings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["key"] == key)
            .unwrap()
            .clone()
    };
    assert_eq!(row("task_size")["value"], "8M");
    assert_eq!(row("task_size")["source"], "config string");
    assert_eq!(row("nthreads")["source"], "environment (H5GDS_NTHREADS)");
    assert_eq!(row("direct_io")["source"], "default");
    let bad = OsStr::new("sometimes");
    let info = info_json(&[("H5GDS_COMPAT_MODE", bad)]);
    assert!(info["settings_error"]
        .as_str()
        .unwrap()
        .contains("H5GDS_COMPAT_MODE"));
}

#[test]
fn info_says_whether_nvcomp_loads() {
    // The CUDA emulator alone: no libnvcomp.so.6 on the library path.
    let libs = emulator_lib_dir();
    let info = info_json(&[("LD_LIBRARY_PATH", libs.path().as_os_str())]);
    assert_eq!(info["nvcomp"]["loaded"], false, "{info}");
    assert_eq!(info["nvcomp"]["library"], "libnvcomp.so.6");
    assert!(
        info["nvcomp"]["problem"]
            .as_str()
            .unwrap()
            .contains("libnvcomp.so.6"),
        "{info}"
    );
    // With the nvCOMP emulator standing in for libnvcomp.so.6, and the text report's line.
    let libs = nvcomp_emulator_lib_dir();
    let info = info_json(&[("LD_LIBRARY_PATH", libs.path().as_os_str())]);
    assert_eq!(info["nvcomp"]["loaded"], true, "{info}");
    assert!(info["nvcomp"]["problem"].is_null(), "{info}");
    // The file it was loaded from: the emulator under the soname, in that directory.
    let file = std::path::PathBuf::from(info["nvcomp"]["file"].as_str().unwrap_or_default());
    assert_eq!(file, libs.path().join("libnvcomp.so.6"), "{info}");
    let dir = plugin_dir();
    let out = tool(
        &["info", "--plugin-dir", dir.to_str().unwrap()],
        &[("LD_LIBRARY_PATH", libs.path().as_os_str())],
    );
    assert!(
        stdout(&out).contains(&format!(
            "nvCOMP:   libnvcomp.so.6 loads (from {}): array-io decodes",
            file.display()
        )),
        "{}",
        stdout(&out)
    );
}

#[test]
fn info_on_the_emulator_sees_cuda_and_gds() {
    let libs = emulator_lib_dir();
    let info = info_json(&[("LD_LIBRARY_PATH", libs.path().as_os_str())]);
    assert_eq!(info["cuda"]["available"], true, "{info}");
    assert_eq!(info["cuda"]["devices"], 1);
    assert_eq!(info["cuda"]["device_names"].as_array().unwrap().len(), 1);
    assert_eq!(info["cufile"]["loaded"], true, "{info}");
    assert_eq!(info["cufile"]["gds_kernel_path"], true);
    assert!(info["verdict"]["device"]
        .as_str()
        .unwrap()
        .starts_with("GPUDirect Storage"));

    let no_gds = OsStr::new("0");
    let two = OsStr::new("2");
    let info = info_json(&[
        ("LD_LIBRARY_PATH", libs.path().as_os_str()),
        ("H5GDS_EMU_GDS", no_gds),
        ("H5GDS_EMU_DEVICES", two),
    ]);
    assert_eq!(
        info["cuda"]["device_names"].as_array().unwrap().len(),
        2,
        "{info}"
    );
    // No nvidia-fs and P2PDMA off: under auto, cuFile is not even opened, and info says so.
    assert_eq!(info["cufile"]["loaded"], false, "{info}");
    let not_opened = "cuFile not opened: no nvidia-fs and P2PDMA off";
    assert_eq!(info["cufile"]["problem"], not_opened, "{info}");
    let device = info["verdict"]["device"].as_str().unwrap();
    assert!(
        device.starts_with("staged") && device.ends_with(&format!("({not_opened})")),
        "{info}"
    );
}

#[test]
fn info_says_which_path_a_file_in_the_working_directory_gets() {
    let libs = emulator_lib_dir();
    let lib_path = libs.path().as_os_str();
    // PCI P2PDMA without nvidia-fs is GPUDirect Storage; the storage is named.
    let info = info_json(&[
        ("LD_LIBRARY_PATH", lib_path),
        ("H5GDS_EMU_GDS", OsStr::new("p2pdma")),
    ]);
    let device = info["verdict"]["device"].as_str().unwrap();
    assert!(
        device.starts_with("GPUDirect Storage through cuFile 1.20 (PCI P2PDMA, no nvidia-fs) to ")
            && device.contains(" for files in the working directory"),
        "{info}"
    );
    // On NFS (the shim), which cuFile does not list: staged under auto, cuFile's compatibility
    // mode under off, each saying why.
    let shim = h5gds_tests::nfs_statfs_shim();
    let unlisted = [
        ("LD_LIBRARY_PATH", lib_path),
        ("LD_PRELOAD", shim.as_os_str()),
        ("H5GDS_EMU_GDS_TARGETS", OsStr::new("nvme")),
    ];
    let info = info_json(&unlisted);
    let device = info["verdict"]["device"].as_str().unwrap();
    assert!(
        device.starts_with("staged")
            && device.contains("on NFS: cuFile does not list NFS among the file systems"),
        "{info}"
    );
    let mut off = unlisted.to_vec();
    off.push(("H5GDS_COMPAT_MODE", OsStr::new("off")));
    let info = info_json(&off);
    let device = info["verdict"]["device"].as_str().unwrap();
    assert!(
        device.contains("in cuFile's own compatibility mode for NFS"),
        "{info}"
    );
}

#[test]
fn info_with_real_libcufile_and_no_driver_returns_promptly() {
    // The installed nvidia-cufile package's libcufile 1.20, behind a CUDA driver without
    // devices (the emulator stands in for libcuda only).
    let cufile = cufile_lib_dir();
    let cuda = emulator_cuda_lib_dir();
    let mut path = cuda.path().as_os_str().to_owned();
    path.push(":");
    path.push(&cufile);
    let zero = OsStr::new(NO_DEVICE.1);
    let start = Instant::now();
    let info = info_json(&[("LD_LIBRARY_PATH", &path), (NO_DEVICE.0, zero)]);
    assert!(start.elapsed() < Duration::from_secs(30));
    assert_eq!(info["cuda"]["available"], false);
    assert_eq!(info["cufile"]["loaded"], false);
    assert!(info["cufile"]["problem"]
        .as_str()
        .unwrap()
        .contains("would hang"));
}

#[test]
fn tiny_bench_writes_json_and_svg() {
    let work = tempfile::tempdir().unwrap();
    let libs = emulator_lib_dir();
    let (json, svg) = (
        work.path().join("bench.json"),
        work.path().join("bench.svg"),
    );
    let dir = plugin_dir();
    let args = [
        "bench",
        "--size",
        "1M",
        "--reps",
        "2",
        "--matrix",
        "64",
        "--small-datasets",
        "5",
        "--dir",
        work.path().to_str().unwrap(),
        "--plugin-dir",
        dir.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
    ];
    let out = tool(&args, &[("LD_LIBRARY_PATH", libs.path().as_os_str())]);
    assert!(
        out.status.success(),
        "{}\n{}",
        stdout(&out),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = stdout(&out);
    assert!(
        text.contains("HOST MEMORY") && text.contains("DEVICE MEMORY, EMULATED"),
        "{text}"
    );
    let value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let results = value["results"].as_array().unwrap();
    let row = |bench: &str, path: &str| {
        results
            .iter()
            .find(|r| r["benchmark"] == bench && r["path"] == path)
            .unwrap_or_else(|| panic!("no {bench}/{path}"))
    };
    assert_eq!(
        row("read 1 MiB contiguous f32", "gds")["seconds"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert!(
        row("read 1 MiB contiguous f32", "gds")["ratios"]["vs_sec2"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    // Beside gds and the staged baseline: what users do, and the link's limit.
    for bench in [
        "device read 1 MiB f32 EMULATED",
        "device write 1 MiB f32 EMULATED",
    ] {
        for path in ["gds", "users", "limit"] {
            assert!(row(bench, path)["ratios"]["vs_staged"].as_f64().unwrap() > 0.0);
            assert_eq!(row(bench, path)["seconds"].as_array().unwrap().len(), 2);
        }
    }
    assert!(value["labels"]["device_results"]
        .as_str()
        .unwrap()
        .contains("EMULATED"));
    let picture = std::fs::read_to_string(&svg).unwrap();
    assert!(
        picture.starts_with("<svg")
            && picture.contains("device rows EMULATED")
            && picture.contains("</svg>")
    );
    assert_eq!(
        picture.matches("<rect x=").count(),
        results.iter().filter(|r| !r["bytes"].is_null()).count()
    );
}

#[test]
fn bench_without_cuda_runs_the_host_benchmarks_and_says_why_not_device() {
    let work = tempfile::tempdir().unwrap();
    let dir = plugin_dir();
    let (json, svg) = (
        work.path().join("bench.json"),
        work.path().join("bench.svg"),
    );
    let args = [
        "bench",
        "--size",
        "1M",
        "--reps",
        "1",
        "--matrix",
        "64",
        "--small-datasets",
        "5",
        "--dir",
        work.path().to_str().unwrap(),
        "--plugin-dir",
        dir.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
    ];
    let libs = emulator_lib_dir();
    let out = tool(&args, &borrowed(&no_gpu(&libs)));
    assert!(out.status.success());
    let text = stdout(&out);
    assert!(text.contains("HOST MEMORY"), "{text}");
    assert!(
        text.contains("DEVICE MEMORY: skipped: the device benchmarks need a CUDA driver library"),
        "{text}"
    );
    // The outputs hold what was measured, and say what was skipped and why.
    let value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let results = value["results"].as_array().unwrap();
    assert!(
        results
            .iter()
            .any(|r| r["benchmark"] == "read 1 MiB contiguous f32" && r["path"] == "gds"),
        "{value}"
    );
    assert!(results
        .iter()
        .all(|r| !r["benchmark"].as_str().unwrap().starts_with("device")));
    let skipped = value["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 1, "{value}");
    assert_eq!(skipped[0]["part"], "device");
    assert!(skipped[0]["reason"]
        .as_str()
        .unwrap()
        .contains("need a CUDA driver library"));
    let picture = std::fs::read_to_string(&svg).unwrap();
    assert!(picture.contains("device benchmarks skipped: the device benchmarks need a CUDA"));
    assert!(picture.contains("read 1 MiB contiguous f32"));
}

#[test]
fn info_names_which_gds_driver_the_plugin_path_gives() {
    let work = tempfile::tempdir().unwrap();
    let other = work.path().join("libother_gds.so");
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&other)
        .arg(workspace_root().join("tests/shims/other_gds_driver.c"))
        .status()
        .expect("a C compiler (cc)");
    assert!(status.success());
    let ours = plugin_dir();
    let path_of = |dirs: &[&std::path::Path]| std::env::join_paths(dirs).unwrap();
    // Another project's gds driver first on the path: that is what HDF5 would load.
    let both = path_of(&[work.path(), &ours]);
    let info = info_json(&[("HDF5_PLUGIN_PATH", both.as_os_str())]);
    let found = info["gds_plugins"]["found"].as_array().unwrap();
    assert_eq!(found[0]["path"], other.to_str().unwrap());
    assert_eq!(found[0]["is_h5gds"], false);
    // Ours: the plugin and the vfd-gds compatibility library, which carries the driver too and
    // is a plugin as vfd-gds's library is.
    let in_ours: Vec<&str> = found[1..]
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    let expected = ["libh5gds.so", "libhdf5_vfd_gds.so"].map(|n| ours.join(n));
    assert_eq!(
        in_ours,
        expected.each_ref().map(|p| p.to_str().unwrap()),
        "{info}"
    );
    assert!(found[1..].iter().all(|f| f["is_h5gds"] == true), "{info}");
    let out = tool(
        &["info", "--plugin-dir", ours.to_str().unwrap()],
        &[("HDF5_PLUGIN_PATH", both.as_os_str())],
    );
    let text = stdout(&out);
    assert!(
        text.contains("HDF5_DRIVER=gds loads: ANOTHER gds driver, not h5gds")
            && text.contains("3 gds drivers on the path"),
        "{text}"
    );
    // h5gds's directory first: h5gds.
    let ours_first = path_of(&[&ours, work.path()]);
    let out = tool(
        &["info", "--plugin-dir", ours.to_str().unwrap()],
        &[("HDF5_PLUGIN_PATH", ours_first.as_os_str())],
    );
    assert!(
        stdout(&out).contains("HDF5_DRIVER=gds loads: h5gds: ")
            && !stdout(&out).contains("ANOTHER"),
        "{}",
        stdout(&out)
    );
}

/// `h5gds info <url>` on a URL nobody serves (loopback's discard port) reports the object as not
/// readable, naming the URL, and exits 0; a path given where a URL is expected is the tool's error.
/// (Reachable objects, S3 credentials and endpoints: tests/python/test_remote.py, with servers.)
#[test]
fn info_on_an_unreachable_url_reports_it() {
    let url = "http://user:pw@127.0.0.1:9/nobody.h5";
    let retries = [("H5GDS_REMOTE_RETRIES", OsStr::new("0"))];
    let out = tool(&["info", url], &retries);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("store:          HTTP (plain)"), "{text}");
    assert!(
        text.contains("object:         NOT READABLE: ")
            && text.contains("http://127.0.0.1:9/nobody.h5")
            && !text.contains("pw"),
        "{text}"
    );
    let out = tool(&["info", "--json", url], &retries);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["reachable"], false, "{report}");
    assert_eq!(report["retries"], 0, "{report}");
    assert!(
        report["size"].is_null() && report["problem"].is_string(),
        "{report}"
    );
    let out = tool(&["info", "data/file.h5"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("not a URL"), "{err}");
    // A bad remote setting is reported too, naming it.
    let out = tool(
        &["info", url],
        &[("H5GDS_REMOTE_IN_FLIGHT", OsStr::new("0"))],
    );
    let text = stdout(&out);
    assert!(
        out.status.success()
            && text.contains("H5GDS_REMOTE_IN_FLIGHT")
            && text.contains("1 to 256"),
        "{text}"
    );
}
