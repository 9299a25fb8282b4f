//! What `h5gds info` and Python's `h5gds.info()` report: everything that decides which path data
//! will take, and a verdict per path. Gathered here once, for both. The decisions and their
//! wording come from the driver itself (`h5gds::path_verdicts`, `h5gds::cufile_driver`), so the
//! report cannot drift from what an open would do.
//!
//! It never hangs: the driver opens libcufile only after CUDA is known to work, because without
//! an NVIDIA driver cuFile's driver open spins forever.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod plugins;

use h5gds::{VfdSettings, SETTINGS};
use h5gds_runtime::settings::environment_value;
use serde::Serialize;
use std::path::{Path, PathBuf};

#[derive(Serialize)]
pub struct Info {
    pub plugin: Option<PathBuf>,
    pub exports: Vec<String>,
    /// The `gds` drivers on `HDF5_PLUGIN_PATH`, h5gds's or another project's.
    pub gds_plugins: crate::plugins::GdsPluginSearch,
    pub cuda: CudaInfo,
    pub cufile: CufileInfo,
    pub nvcomp: NvcompInfo,
    pub settings: Vec<SettingInfo>,
    pub settings_error: Option<String>,
    pub verdict: Verdict,
}

#[derive(Serialize)]
pub struct CudaInfo {
    pub available: bool,
    pub driver_version: Option<i32>,
    pub devices: Option<i32>,
    /// Every device, by ordinal (the driver uses device 0).
    pub device_names: Vec<String>,
    pub problem: Option<String>,
}

#[derive(Serialize)]
pub struct CufileInfo {
    /// The file libcufile loads from (loading calls nothing, so it is safe without CUDA).
    pub library_file: Option<String>,
    /// Why libcufile does not load, where it does not.
    pub library_problem: Option<String>,
    /// Whether cuFile's driver was opened (only tried when CUDA works).
    pub loaded: bool,
    pub version: Option<String>,
    pub nvfs_version: Option<String>,
    pub gds_kernel_path: Option<bool>,
    pub problem: Option<String>,
}

/// nvCOMP, which array-io's GPU codec path needs to decode and encode compressed chunks on the
/// GPU (without it they go through HDF5's CPU filters, staged).
#[derive(Serialize)]
pub struct NvcompInfo {
    /// The library array-io opens (`nvcomp_sys::LIBRARY_NAME`).
    pub library: &'static str,
    /// The file it was loaded from, where it loads.
    pub file: Option<String>,
    /// Whether it loads in this process (opened and closed again; no nvCOMP call is made).
    pub loaded: bool,
    pub problem: Option<String>,
}

#[derive(Serialize)]
pub struct SettingInfo {
    /// The driver's config-string key; `None` for the settings read outside the driver.
    pub key: Option<&'static str>,
    pub env: &'static str,
    pub value: String,
    pub source: String,
}

#[derive(Serialize)]
pub struct Verdict {
    pub host: String,
    pub device: String,
}

fn cuda_info() -> CudaInfo {
    match h5gds::cuda() {
        Ok(c) => CudaInfo {
            available: true,
            driver_version: Some(c.driver_version),
            devices: Some(c.device_count),
            device_names: c.device_names.clone(),
            problem: None,
        },
        Err(err) => CudaInfo {
            available: false,
            driver_version: None,
            devices: None,
            device_names: Vec::new(),
            problem: Some(err.to_string()),
        },
    }
}

fn cufile_info(settings: Option<&VfdSettings>) -> CufileInfo {
    let (library_file, library_problem) = match h5gds::cufile_library_file() {
        Ok(file) => (Some(file), None),
        Err(why) => (None, Some(why)),
    };
    match h5gds::cufile_driver(settings) {
        Ok(d) => CufileInfo {
            library_file,
            library_problem,
            loaded: true,
            version: Some(format!("{}.{}", d.version / 1000, (d.version % 1000) / 10)),
            nvfs_version: Some(format!("{}.{}", d.nvfs.0, d.nvfs.1)),
            gds_kernel_path: Some(d.gds_available()),
            problem: None,
        },
        Err(why) => CufileInfo {
            library_file,
            library_problem,
            loaded: false,
            version: None,
            nvfs_version: None,
            gds_kernel_path: None,
            problem: Some(why),
        },
    }
}

fn nvcomp_info() -> NvcompInfo {
    let (file, problem) = match h5gds_runtime::libraries::nvcomp() {
        Ok(lib) => {
            let function = lib.nvcompGetProperties.as_ref().ok();
            (
                function.and_then(|f| h5gds_runtime::hdf5::loaded_file_of(*f as *const _)),
                None,
            )
        }
        Err(err) => (None, Some(err)),
    };
    NvcompInfo {
        library: nvcomp_sys::LIBRARY_NAME,
        file,
        loaded: problem.is_none(),
        problem,
    }
}

/// The verdict per path, decided by the driver's own code for a file opened now.
fn verdict(settings: Option<&VfdSettings>) -> Verdict {
    let Some(settings) = settings else {
        let bad = "files will not open: fix the setting above".to_string();
        return Verdict {
            host: bad.clone(),
            device: bad,
        };
    };
    let h5gds::PathVerdicts { host, device } = h5gds::path_verdicts(settings);
    Verdict { host, device }
}

/// Where the plugin is: the flag, else beside this program, else H5GDS_PLUGIN_DIR.
pub fn find_plugin_dir(flag: Option<PathBuf>) -> Result<PathBuf, String> {
    let beside_exe = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(PathBuf::from));
    let candidates = flag
        .into_iter()
        .chain(beside_exe)
        .chain(std::env::var_os(h5gds_runtime::settings::PLUGIN_DIR_ENV).map(PathBuf::from));
    let mut tried = Vec::new();
    for dir in candidates {
        if dir.join("libh5gds.so").is_file() {
            return Ok(dir);
        }
        tried.push(dir.display().to_string());
    }
    Err(format!(
        "libh5gds.so not found (looked in: {}); build it with `cargo build --release -p h5gds-vfd` or pass --plugin-dir",
        tried.join(", ")
    ))
}

pub fn gather(plugin_dir: Option<&Path>) -> Info {
    let config = h5gds::config_from_environment();
    let loaded = VfdSettings::load(config.as_deref());
    let (settings, settings_error) = match loaded {
        Ok(s) => (Some(s), None),
        Err(e) => (None, Some(e.to_string())),
    };
    let cuda = cuda_info();
    let cufile = cufile_info(settings.as_ref());
    let verdict = verdict(settings.as_ref());
    let plugin = plugin_dir.map(|d| d.join("libh5gds.so"));
    let exports = match plugin_dir {
        Some(dir) => vec![
            format!("export HDF5_PLUGIN_PATH={}", dir.display()),
            "export HDF5_DRIVER=gds".into(),
        ],
        None => Vec::new(),
    };
    // The whole table: the driver's settings as a file opened now gets them, the others as this
    // process's environment sets them.
    let settings_rows = settings
        .as_ref()
        .map(|s| {
            SETTINGS
                .iter()
                .map(|spec| {
                    let (value, source) = match s.value_text(spec.key) {
                        Some(value) => (value, s.source(spec.key).to_string()),
                        None => {
                            let (value, source) = environment_value(spec);
                            (value, source.to_string())
                        }
                    };
                    SettingInfo {
                        key: spec.config_key,
                        env: spec.env,
                        value,
                        source,
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    Info {
        plugin,
        exports,
        gds_plugins: crate::plugins::search(),
        cuda,
        cufile,
        nvcomp: nvcomp_info(),
        settings: settings_rows,
        settings_error,
        verdict,
    }
}

/// What `h5gds info <url>` reports: how the driver would read that URL (store, endpoint, region,
/// the credentials' source, never a secret; the request settings) and whether the object answers
/// one HEAD (size, ETag), or why not.
#[derive(Serialize)]
pub struct UrlInfo {
    pub url: String,
    /// `S3`, `HTTP (plain)` or `HTTPS`; `None` where the client cannot be set up.
    pub store: Option<String>,
    pub endpoint: Option<String>,
    pub region: Option<String>,
    /// Which credentials sign the requests: their source only.
    pub credentials: Option<String>,
    pub request_size: Option<String>,
    pub in_flight: Option<usize>,
    pub retries: Option<usize>,
    pub timeout_s: Option<u64>,
    /// Reads up to this size go through the block cache.
    pub block_cache: String,
    pub reachable: bool,
    pub size: Option<u64>,
    pub etag: Option<String>,
    pub version: Option<String>,
    /// Why the object cannot be read, where it cannot.
    pub problem: Option<String>,
    /// What device buffers would take.
    pub device: String,
}

/// The report on `url`, from the driver's own code (`h5gds::url_report`).
pub fn gather_url(url: &str) -> UrlInfo {
    let report = h5gds::url_report(url);
    let facts = report.facts.as_ref();
    let settings = report.settings.as_ref();
    let (size, etag, version, problem) = match &report.object {
        Ok(o) => (Some(o.size), o.etag.clone(), o.version.clone(), None),
        Err(why) => (None, None, None, Some(why.clone())),
    };
    UrlInfo {
        url: report.url.clone(),
        store: facts.map(|f| f.store.clone()),
        endpoint: facts.map(|f| f.endpoint.clone()),
        region: facts.and_then(|f| f.region.clone()),
        credentials: facts.map(|f| f.credentials.clone()),
        request_size: settings.map(|s| h5gds::format_size(s.request_size as u64)),
        in_flight: settings.map(|s| s.in_flight),
        retries: settings.map(|s| s.retries),
        timeout_s: settings.map(|s| s.timeout_s),
        block_cache: h5gds::format_size(h5gds::REMOTE_CACHE_BLOCK),
        reachable: report.object.is_ok(),
        size,
        etag,
        version,
        problem,
        device: match h5gds::cuda() {
            Ok(_) => "staged: ranged GETs into the pinned bounce buffers of the staging ring, \
                      copied to the GPU (a remote file has no descriptor for cuFile)"
                .into(),
            Err(e) => format!("not possible: {e}"),
        },
    }
}

/// `h5gds info <url>` as text.
pub fn render_url(info: &UrlInfo) -> String {
    let mut out = String::new();
    let mut line = |label: &str, value: String| {
        out.push_str(&format!("{label:<15} {value}\n"));
    };
    line("url:", info.url.clone());
    let unknown = || "- (the client cannot be set up)".to_string();
    line("store:", info.store.clone().unwrap_or_else(unknown));
    line("endpoint:", info.endpoint.clone().unwrap_or_else(unknown));
    if info.store.as_deref() == Some("S3") {
        line("region:", info.region.clone().unwrap_or_else(unknown));
    }
    line(
        "credentials:",
        info.credentials.clone().unwrap_or_else(unknown),
    );
    if let (Some(size), Some(in_flight), Some(retries), Some(timeout)) = (
        &info.request_size,
        info.in_flight,
        info.retries,
        info.timeout_s,
    ) {
        line(
            "requests:",
            format!(
                "ranged GETs of {size}, {in_flight} in flight, {retries} retries with backoff, \
                 {timeout} s timeout; reads up to {} through a block cache",
                info.block_cache
            ),
        );
    }
    match (&info.problem, info.size) {
        (None, Some(size)) => line(
            "object:",
            format!(
                "reachable: {size} bytes, {}",
                match (&info.etag, &info.version) {
                    (Some(etag), _) => format!("ETag {etag} (every read conditional on it)"),
                    (None, Some(version)) => format!("version {version}"),
                    (None, None) => "no ETag".into(),
                }
            ),
        ),
        (problem, _) => line(
            "object:",
            format!("NOT READABLE: {}", problem.as_deref().unwrap_or("unknown")),
        ),
    }
    line("device buffers:", info.device.clone());
    out
}

pub fn render(info: &Info) -> String {
    let mut out = String::new();
    let mut line = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    match &info.plugin {
        Some(p) => line(format!("plugin:   {}", p.display())),
        None => line("plugin:   libh5gds.so not found (cargo build --release -p h5gds-vfd)".into()),
    }
    for e in &info.exports {
        line(format!("          {e}"));
    }
    line(format!(
        "HDF5_DRIVER=gds loads: {}",
        info.gds_plugins.summary()
    ));
    let c = &info.cuda;
    match (c.available, &c.problem) {
        (true, _) => {
            line(format!(
                "CUDA:     driver {}, {} device(s)",
                c.driver_version.unwrap_or(0),
                c.devices.unwrap_or(0)
            ));
            for (ordinal, name) in c.device_names.iter().enumerate() {
                line(format!("          device {ordinal}: {name}"));
            }
        }
        (false, problem) => line(format!(
            "CUDA:     not usable: {}",
            problem.as_deref().unwrap_or("unknown")
        )),
    }
    let f = &info.cufile;
    // The file it loads from, or why it does not load: exactly one of them is set.
    let library = f.library_file.as_ref().or(f.library_problem.as_ref());
    line(format!("libcufile: {}", library.map_or("", String::as_str)));
    if f.loaded {
        line(format!(
            "cuFile:   {} (nvidia-fs {}): {}",
            f.version.as_deref().unwrap_or("?"),
            f.nvfs_version.as_deref().unwrap_or("?"),
            if f.gds_kernel_path == Some(true) {
                "GDS kernel path present"
            } else {
                "no GDS kernel path: cuFile would run in compat mode"
            }
        ));
    } else {
        line(format!(
            "cuFile:   {}",
            f.problem.as_deref().unwrap_or("not opened")
        ));
    }
    let n = &info.nvcomp;
    match &n.problem {
        None => line(format!(
            "nvCOMP:   {} loads (from {}): array-io decodes and encodes deflate, Zstandard and \
             LZ4 chunks on the GPU",
            n.library,
            n.file.as_deref().unwrap_or("an unknown file")
        )),
        Some(problem) => line(format!(
            "nvCOMP:   not loaded ({problem}): compressed chunks go through HDF5's CPU filters"
        )),
    }
    if let Some(err) = &info.settings_error {
        line(format!("settings: INVALID: {err}"));
    } else {
        line("settings:".into());
        for s in &info.settings {
            line(format!(
                "          {:<20} {:<10} {} [{}]",
                s.key.unwrap_or("-"),
                s.value,
                s.source,
                s.env
            ));
        }
    }
    line(format!("host buffers:   {}", info.verdict.host));
    line(format!("device buffers: {}", info.verdict.device));
    out
}
