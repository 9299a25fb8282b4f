//! `from_file` and its kin given an `http://` URL (docs/remote.md): nginx (Debian's, installed
//! by scripts/setup.sh) serves, on loopback, h5py's files of every element type and layout
//! (`h5py_interop.py`) and its compressed files (`gpu_codec_files.py`: gzip, Zstd, LZ4, chains,
//! chunks never written); each dataset read through the URL, into host memory and (on the
//! emulator) into device memory, must hold the bytes h5py reads from the local file. A write to a
//! URL is refused and creates nothing; a missing object fails naming the URL. Each body runs in
//! a child whose log the parent reads (the close line counts the requests).

mod common;

use array_io::{
    from_file, from_file_batched, from_file_rows, from_file_to_device, to_file, DeviceArray,
};
use common::*;
use h5gds_tests::process::OutputText;
use ndarray::{ArrayD, IxDyn};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The variable through which the parent hands the served directory's URL to the child.
const URL_VAR: &str = "ARRAY_IO_TEST_URL";

/// nginx serving `root` on 127.0.0.1 (byte ranges and ETags are its defaults), stopped on drop.
struct Nginx {
    child: Child,
    port: u16,
    _prefix: tempfile::TempDir,
}

fn nginx_binary() -> PathBuf {
    ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .expect("nginx is missing: scripts/setup.sh installs Debian's nginx")
}

impl Nginx {
    fn serve(root: &Path) -> Nginx {
        let prefix = tempfile::tempdir().unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let p = prefix.path().display();
        // As root, nginx's workers would switch to a user that cannot read a private directory.
        // SAFETY: geteuid has no preconditions.
        let user = if unsafe { libc::geteuid() } == 0 {
            "user root;"
        } else {
            ""
        };
        let conf = prefix.path().join("nginx.conf");
        std::fs::write(
            &conf,
            format!(
                "{user}\nworker_processes 1;\npid {p}/nginx.pid;\nerror_log {p}/error.log;\n\
                 events {{ worker_connections 256; }}\nhttp {{\n  access_log {p}/access.log;\n  \
                 client_body_temp_path {p}/body;\n  proxy_temp_path {p}/proxy;\n  \
                 fastcgi_temp_path {p}/fastcgi;\n  uwsgi_temp_path {p}/uwsgi;\n  \
                 scgi_temp_path {p}/scgi;\n  default_type application/octet-stream;\n  \
                 server {{ listen 127.0.0.1:{port}; root {}; }}\n}}\n",
                root.display()
            ),
        )
        .unwrap();
        let mut child = Command::new(nginx_binary())
            .arg("-p")
            .arg(prefix.path())
            .arg("-c")
            .arg(&conf)
            .args(["-g", "daemon off;"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("nginx starts");
        let deadline = Instant::now() + Duration::from_secs(30);
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        while TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err() {
            if let Some(status) = child.try_wait().unwrap() {
                let out = child.wait_with_output().unwrap();
                panic!(
                    "nginx exited with {status} before listening: {}",
                    out.stderr_text()
                );
            }
            assert!(Instant::now() < deadline, "nginx did not listen on {addr}");
            std::thread::sleep(Duration::from_millis(100));
        }
        Nginx {
            child,
            port,
            _prefix: prefix,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn access_log(&self) -> String {
        std::fs::read_to_string(self._prefix.path().join("access.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SAFETY: a signal to the child this test started (its pid, still not reaped).
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait().ok().flatten().is_none() {
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The served directory: h5py's interop files under `interop/`, its compressed files under
/// `codec/` (written in the parent only; the child finds them through `DIR_VAR`).
fn served_files() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    if !is_child_any() {
        let interop = dir.path().join("interop");
        std::fs::create_dir(&interop).unwrap();
        run_h5py("write", &interop);
        let codec = codec_files();
        let to = dir.path().join("codec");
        std::fs::create_dir(&to).unwrap();
        for entry in std::fs::read_dir(codec.path()).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
    dir
}

/// Runs `body` in a child with the files served by nginx: `emulated` on the CUDA emulator.
fn run(name: &str, emulated: bool, env: &[(&str, &str)], body: fn()) -> Option<(ChildRun, Nginx)> {
    let dir = served_files();
    let (nginx, url) = if is_child_any() {
        (None, String::new())
    } else {
        let nginx = Nginx::serve(dir.path());
        let url = nginx.url();
        (Some(nginx), url)
    };
    let dir_text = dir.path().to_str().unwrap().to_string();
    let plugins = hdf5plugin_dir();
    let mut all = vec![
        ("H5GDS_LOG", "info"),
        ("HDF5_PLUGIN_PATH", plugins.as_str()),
        (DIR_VAR, dir_text.as_str()),
        (URL_VAR, url.as_str()),
    ];
    all.extend_from_slice(env);
    let run = in_child(name, emulated, &all, body)?;
    Some((run, nginx.expect("the parent started nginx")))
}

/// The served file `file` (`interop/h5py.h5`, ...) as URL, and its local path.
fn served(file: &str) -> (String, PathBuf) {
    let url = std::env::var(URL_VAR).expect("the parent passes the URL");
    (format!("{url}/{file}"), test_dir().join(file))
}

/// Whole, in batches of rows, and (rank 1 or more) a gather of rows: h5py's bytes.
fn host_reads<T: Sample>(url: &str, entry: &Entry) {
    let whole: ArrayD<T> =
        from_file(url, &entry.name).unwrap_or_else(|e| panic!("{url} {}: {e}", entry.name));
    assert_eq!(
        bytes_of(&whole),
        entry.bytes,
        "{} ({})",
        entry.name,
        entry.dtype
    );
    if entry.shape.is_empty() || entry.shape.contains(&0) {
        return;
    }
    let want = expected::<T>(entry);
    let mut batch = entry.shape.clone();
    batch[0] = 3;
    let mut seen = 0;
    for item in from_file_batched::<T>(url, &entry.name, &batch).unwrap() {
        let (chunk, offsets) = item.unwrap_or_else(|e| panic!("{}: {e}", entry.name));
        let rows = offsets[0]..offsets[0] + chunk.shape()[0];
        assert_eq!(
            chunk,
            want.slice_axis(ndarray::Axis(0), rows.into()),
            "{} batch at {offsets:?}",
            entry.name
        );
        seen += chunk.len();
    }
    assert_eq!(seen, want.len(), "{}", entry.name);
    let n = entry.shape[0] as i64;
    let rows: Vec<i64> = [n - 1, 0, n / 2, 0].into_iter().collect();
    let got: ArrayD<T> = from_file_rows(url, &entry.name, &rows).unwrap();
    let picks: Vec<usize> = rows.iter().map(|&r| r as usize).collect();
    assert_eq!(got, want.select(ndarray::Axis(0), &picks), "{}", entry.name);
}

fn host_body() {
    for file in ["interop/h5py.h5", "codec/h5py.h5"] {
        let (url, local) = served(file);
        let manifest = h5py_manifest(local.parent().unwrap());
        assert!(manifest.len() > 10, "{file}: {} datasets", manifest.len());
        for entry in manifest {
            for_dtype!(entry.dtype.as_str(), host_reads(&url, &entry));
        }
    }
}

#[test]
fn every_type_layout_and_codec_reads_through_a_url_as_h5py_reads_the_file() {
    let name = "every_type_layout_and_codec_reads_through_a_url_as_h5py_reads_the_file";
    let Some((run, nginx)) = run(name, false, &[], host_body) else {
        return;
    };
    let log = run.stderr();
    // Every open of the URL closes with its request count (H5GDS_LOG=info): no HEAD (the
    // open's GET of the first block gives the length and ETag).
    let closes: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(&format!("closed {}/", nginx.url())))
        .collect();
    assert!(closes.len() > 40, "{} close lines:\n{log}", closes.len());
    assert!(closes.iter().all(|l| l.contains("(0 HEAD, ")), "{closes:?}");
    let access = nginx.access_log();
    assert!(
        access.contains("\"GET /codec/h5py.h5 HTTP/1.1\" 206")
            && access.contains("\"GET /interop/h5py.h5 HTTP/1.1\" 206")
            && !access.contains("\"HEAD /interop/h5py.h5 HTTP/1.1\""),
        "{access}"
    );
}

fn device_reads<T: Sample>(url: &str, entry: &Entry) {
    let array: DeviceArray<T> = from_file_to_device(url, &entry.name, stream())
        .unwrap_or_else(|e| panic!("{url} {}: {e}", entry.name));
    assert_eq!(array.shape(), entry.shape.as_slice(), "{}", entry.name);
    let host = array.to_host().unwrap();
    assert_eq!(
        bytes_of(&host),
        entry.bytes,
        "{} ({})",
        entry.name,
        entry.dtype
    );
}

fn device_body() {
    for file in ["interop/h5py.h5", "codec/h5py.h5"] {
        let (url, local) = served(file);
        for entry in h5py_manifest(local.parent().unwrap()) {
            // bool has no device type of its own in array-io's tests of h5py's files.
            if entry.dtype != "bool" {
                for_dtype!(entry.dtype.as_str(), device_reads(&url, &entry));
            }
        }
    }
}

#[test]
fn device_reads_through_a_url_hold_h5py_bytes_on_the_emulator() {
    let name = "device_reads_through_a_url_hold_h5py_bytes_on_the_emulator";
    let Some((run, _nginx)) = run(name, true, &[], device_body) else {
        return;
    };
    run.assert_clean();
    // A remote file has no descriptor for cuFile: nothing goes through it.
    assert_eq!(run.counter("cufile reads"), 0, "{:?}", run.report);
}

fn refusals_body() {
    let (url, _) = served("interop/new.h5");
    let array = ArrayD::<f32>::zeros(IxDyn(&[4]));
    let err = to_file(&array, &url, "/x").unwrap_err().to_string();
    assert!(
        err.contains("read-only") && err.contains(&url),
        "to_file: {err}"
    );
    // Nothing created locally under a name like the URL's (the child runs in a fresh directory).
    assert!(!Path::new("http:").exists());
    let (missing, _) = served("interop/absent.h5");
    let err = from_file::<f32>(&missing, "/x").unwrap_err().to_string();
    // HDF5's error names the URL; the driver's reason (the 404) is on HDF5's error stack where
    // the driver can push it, and in its log line (which the parent checks) in any case.
    assert!(
        err.contains(&missing) && err.contains("opening as an HDF5 file"),
        "missing: {err}"
    );
    let (url, _) = served("interop/h5py.h5");
    let err = from_file::<f32>(&url, "/no/such").unwrap_err().to_string();
    assert!(
        err.contains("has no dataset") || err.contains("/no/such"),
        "{err}"
    );
}

#[test]
fn a_url_is_never_written_and_a_missing_one_is_named() {
    let name = "a_url_is_never_written_and_a_missing_one_is_named";
    let Some((run, nginx)) = run(name, false, &[], refusals_body) else {
        return;
    };
    let log = run.stderr();
    assert!(
        log.lines()
            .any(|l| l.contains("interop/absent.h5") && l.contains("404 Not Found")),
        "{log}"
    );
    let access = nginx.access_log();
    // The refused write sent nothing; the missing object was asked once (a HEAD).
    assert!(!access.contains("new.h5"), "{access}");
    assert!(
        access.contains("\"HEAD /interop/absent.h5 HTTP/1.1\" 404"),
        "{access}"
    );
}

fn stored_way_body() {
    let (url, local) = served("codec/h5py.h5");
    let manifest = h5py_manifest(local.parent().unwrap());
    let entry = manifest
        .iter()
        .find(|e| e.name.trim_start_matches('/') == "zstd/many")
        .expect("the codec files hold /zstd/many");
    let whole: ArrayD<f32> = from_file(&url, &entry.name).unwrap();
    assert_eq!(bytes_of(&whole), entry.bytes, "{}", entry.name);
}

#[test]
fn compressed_chunks_of_a_url_are_fetched_ahead_with_no_hdf5_call() {
    // The chunk index listed once through HDF5, then the 1,300 chunks' ranges fetched by the
    // driver's remote file (coalesced GETs) and decoded with no HDF5 call: the engine's verdict.
    let name = "compressed_chunks_of_a_url_are_fetched_ahead_with_no_hdf5_call";
    let Some((run, _nginx)) = run(name, false, &[("H5GDS_LOG", "debug")], stored_way_body) else {
        return;
    };
    let log = run.stderr();
    assert!(
        log.contains("host read: way=stored: /zstd/many: 332800 bytes, 1300 chunks, on "),
        "{log}"
    );
}
