//! VfdSettings: one table (`SETTINGS`) that names every setting, its environment variable, its
//! config-string key, default and accepted values; parsing from the environment and from config
//! strings (`HDF5_DRIVER_CONFIG`, `H5Pset_driver_by_name`); validation with errors that name the
//! setting and what it accepts.
//!
//! Precedence: argument (vfd-gds's `H5Pset_fapl_gds`) over config string over environment
//! variable over the earlier GDS driver's aliases over the default. The arguments and config-string
//! values travel with the file access property list ([`CarriedSettings`]), so every file HDF5 opens
//! from it (virtual dataset sources, external links) gets them too.

use crate::error::{Error, Result};
pub use h5gds_runtime::settings::{driver_settings, Key, SettingSpec, Source, LOG_ENV, SETTINGS};
pub use h5gds_runtime::size::{format_size, parse_size};
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

/// How device buffers reach the file (takes effect with the GPU paths).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompatMode {
    /// cuFile where GDS is really available, else the driver's own staged path.
    Auto,
    /// Never touch libcufile: always the staged path.
    On,
    /// Require cuFile; fail the open otherwise.
    Off,
}

/// Whether host I/O uses `O_DIRECT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirectIo {
    Off,
    On,
    /// `O_DIRECT` where the file system accepts it, buffered I/O elsewhere.
    Auto,
}

pub const MIN_SIZE: u64 = 4 << 10;
pub const MAX_SIZE: u64 = 1 << 30;
pub const MAX_THREADS: usize = 256;

/// The settings in effect for one open file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VfdSettings {
    pub compat_mode: CompatMode,
    pub nthreads: usize,
    pub task_size: usize,
    pub bounce_buffer_size: usize,
    pub direct_io: DirectIo,
    /// Whether HDF5's own copies (compact data, cached chunks) go through the driver, so device
    /// buffers work for them (`device_copies`).
    pub device_copies: bool,
    /// How remote files (URLs as file names) are read: environment only (the S3 and remote
    /// rows of `SETTINGS`).
    pub remote: RemoteSettings,
    /// Where each value came from, in `SETTINGS` order.
    pub sources: Vec<(Key, Source)>,
}

/// How remote files are read (docs/remote.md): the S3 and remote (request) rows of
/// `SETTINGS`, from the environment (S3's own chain, `AWS_*`, is read by object_store).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteSettings {
    /// `H5GDS_S3_ENDPOINT`: an S3-compatible store's endpoint, over `AWS_ENDPOINT_URL`.
    pub s3_endpoint: Option<String>,
    /// `H5GDS_S3_REGION`, over `AWS_REGION` / `AWS_DEFAULT_REGION`.
    pub s3_region: Option<String>,
    /// `H5GDS_S3_ANONYMOUS=1`: unsigned requests (public buckets).
    pub s3_anonymous: bool,
    /// `H5GDS_REMOTE_REQUEST_SIZE`: the ranged GETs a large read is split into.
    pub request_size: usize,
    /// `H5GDS_REMOTE_IN_FLIGHT`: GETs of one read in flight at once.
    pub in_flight: usize,
    /// `H5GDS_REMOTE_RETRIES`: retries of a transient failure.
    pub retries: usize,
    /// `H5GDS_REMOTE_TIMEOUT`: seconds one request may take.
    pub timeout_s: u64,
}

impl Default for RemoteSettings {
    fn default() -> Self {
        RemoteSettings {
            s3_endpoint: None,
            s3_region: None,
            s3_anonymous: false,
            request_size: 8 << 20,
            in_flight: 16,
            retries: 5,
            timeout_s: 30,
        }
    }
}

/// The rows of `SETTINGS` that [`RemoteSettings`] holds.
const REMOTE_KEYS: [Key; 7] = [
    Key::S3Endpoint,
    Key::S3Region,
    Key::S3Anonymous,
    Key::RemoteRequestSize,
    Key::RemoteInFlight,
    Key::RemoteRetries,
    Key::RemoteTimeout,
];

impl RemoteSettings {
    /// The remote settings from an environment lookup, each value checked against its row.
    pub fn from_env(env: impl Fn(&str) -> Option<OsString>) -> Result<RemoteSettings> {
        let mut remote = RemoteSettings::default();
        for spec in SETTINGS {
            let Some(raw) = env(spec.env) else { continue };
            let invalid = || Error::InvalidSetting {
                setting: spec.env.to_string(),
                value: shown(raw.as_encoded_bytes()),
                accepted: spec.accepted,
            };
            let text = raw.to_str().ok_or_else(invalid)?.trim();
            let integer = |low: u64, high: u64| {
                text.parse::<u64>()
                    .ok()
                    .filter(|n| (low..=high).contains(n))
                    .ok_or_else(invalid)
            };
            match spec.key {
                Key::S3Endpoint => {
                    let lower = text.to_ascii_lowercase();
                    if !(lower.starts_with("http://") || lower.starts_with("https://"))
                        || url::Url::parse(text).is_err()
                    {
                        return Err(invalid());
                    }
                    remote.s3_endpoint = Some(text.to_string());
                }
                Key::S3Region => {
                    if text.is_empty() || text.contains(|c: char| c.is_whitespace() || c == '/') {
                        return Err(invalid());
                    }
                    remote.s3_region = Some(text.to_string());
                }
                Key::S3Anonymous => {
                    remote.s3_anonymous = match text {
                        "0" | "" => false,
                        "1" => true,
                        _ => return Err(invalid()),
                    }
                }
                Key::RemoteRequestSize => {
                    remote.request_size = parse_size(text)
                        .filter(|n| (64 << 10..=MAX_SIZE).contains(n))
                        .ok_or_else(invalid)? as usize
                }
                Key::RemoteInFlight => remote.in_flight = integer(1, 256)? as usize,
                Key::RemoteRetries => remote.retries = integer(0, 100)? as usize,
                Key::RemoteTimeout => remote.timeout_s = integer(1, 3600)?,
                _ => {}
            }
        }
        Ok(remote)
    }
}

impl Default for VfdSettings {
    fn default() -> Self {
        VfdSettings {
            compat_mode: CompatMode::Auto,
            nthreads: default_nthreads(),
            task_size: 4 << 20,
            bounce_buffer_size: 16 << 20,
            direct_io: DirectIo::Off,
            device_copies: false,
            remote: RemoteSettings::default(),
            sources: driver_settings()
                .map(|(s, _)| (s.key, Source::Default))
                .collect(),
        }
    }
}

/// Calls of [`VfdSettings::load`] in this process (a relaxed counter, costing nothing measurable
/// beside the parse it counts).
static LOADS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One I/O thread per core, at most 16. Counted once: `available_parallelism` reads cgroup files,
/// 2% of a loop of opens and small reads measured on the 2-core VM.
pub fn default_nthreads() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .min(16)
    })
}

/// The driver's variables of the process environment (`H5GDS_*`, `H5_GDS_*`), read in one pass.
/// A settings load asks for some 35 names, and each `getenv` scans the whole environment: that
/// was half of an open's instructions (callgrind). Other names are looked up as before.
struct SettingsEnvironment(Vec<(Vec<u8>, OsString)>);

impl SettingsEnvironment {
    const PREFIXES: [&'static [u8]; 2] = [b"H5GDS_", b"H5_GDS_"];

    fn read() -> SettingsEnvironment {
        unsafe extern "C" {
            static environ: *const *const libc::c_char;
        }
        let mut found = Vec::new();
        // SAFETY: `environ` is the C library's NULL-terminated array of NUL-terminated
        // "NAME=value" strings; reading it is what `getenv` does, with the same (lack of) guard
        // against another thread's `setenv`.
        unsafe {
            let mut at = environ;
            while !at.is_null() && !(*at).is_null() {
                // Most entries are not the driver's: their first byte says so without a strlen.
                if **at as u8 != b'H' {
                    at = at.add(1);
                    continue;
                }
                let entry = std::ffi::CStr::from_ptr(*at).to_bytes();
                if Self::PREFIXES.iter().any(|p| entry.starts_with(p)) {
                    if let Some(eq) = entry.iter().position(|&b| b == b'=') {
                        let value = OsString::from_vec(entry[eq + 1..].to_vec());
                        found.push((entry[..eq].to_vec(), value));
                    }
                }
                at = at.add(1);
            }
        }
        SettingsEnvironment(found)
    }

    /// The value of `name`, as `std::env::var_os` gives it (the first entry, as `getenv`).
    fn var(&self, name: &str) -> Option<OsString> {
        if !Self::PREFIXES
            .iter()
            .any(|p| name.as_bytes().starts_with(p))
        {
            return std::env::var_os(name);
        }
        self.0
            .iter()
            .find(|(n, _)| n == name.as_bytes())
            .map(|(_, v)| v.clone())
    }
}

impl VfdSettings {
    /// The bytes one task for each I/O thread covers: the least a piece of a staged transfer
    /// holds so that every thread of a host read or write through the driver takes part.
    pub fn task_round_bytes(&self) -> usize {
        self.nthreads.saturating_mul(self.task_size)
    }

    /// VfdSettings from the process environment and an optional config string (its raw bytes, as
    /// HDF5 or the environment hold them).
    pub fn load(config: Option<&[u8]>) -> Result<VfdSettings> {
        LOADS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let env = SettingsEnvironment::read();
        Self::from_sources(|name| env.var(name), config)
    }

    /// How many times this process has called [`VfdSettings::load`]: lets a test check that one
    /// call above the driver (an array-io read, say) parses the settings once, not per step.
    pub fn loads_so_far() -> usize {
        LOADS.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// VfdSettings for a file opened from a file access property list: the environment, the
    /// values the list carries from where it was made (`carried`: the config string, then the
    /// arguments of the list the file was opened from), and its own config string, in the order
    /// of precedence.
    pub fn load_for_open(
        config: Option<&[u8]>,
        carried: Option<&CarriedSettings>,
    ) -> Result<VfdSettings> {
        let env = SettingsEnvironment::read();
        Self::from_all_sources(|name| env.var(name), config, carried)
    }

    /// VfdSettings from an environment lookup function (for tests) and an optional config string.
    /// A value that is not valid UTF-8 is invalid like any other, never skipped.
    pub fn from_sources(
        env: impl Fn(&str) -> Option<OsString>,
        config: Option<&[u8]>,
    ) -> Result<VfdSettings> {
        Self::from_all_sources(env, config, None)
    }

    /// `from_sources` with the values a file access property list carries (see `load_for_open`).
    pub fn from_all_sources(
        env: impl Fn(&str) -> Option<OsString>,
        config: Option<&[u8]>,
        carried: Option<&CarriedSettings>,
    ) -> Result<VfdSettings> {
        let mut settings = VfdSettings {
            remote: RemoteSettings::from_env(&env)?,
            ..VfdSettings::default()
        };
        for spec in SETTINGS.iter().filter(|s| REMOTE_KEYS.contains(&s.key)) {
            if env(spec.env).is_some() {
                settings
                    .sources
                    .push((spec.key, Source::Environment(spec.env)));
            }
        }
        for (spec, _) in driver_settings() {
            // Aliases first, so the newer name wins when both are set.
            for var in spec.aliases.iter().chain(std::iter::once(&spec.env)) {
                if let Some(value) = env(var) {
                    settings.apply(spec, &value.into_vec(), Source::Environment(var))?;
                }
            }
        }
        if let Some(carried) = carried {
            // Config-string values of the list this one was made from; its own string wins.
            settings.apply_carried(carried, |s| *s == Source::ConfigString)?;
        }
        if let Some(config) = config {
            for (key, value) in parse_config_string(config)? {
                let spec = std::str::from_utf8(key)
                    .ok()
                    .and_then(|key| driver_settings().find(|(_, k)| *k == key))
                    .map(|(spec, _)| spec)
                    .ok_or_else(|| Error::UnknownConfigKey {
                        key: shown(key),
                        accepted: driver_settings()
                            .map(|(_, k)| k)
                            .collect::<Vec<_>>()
                            .join(", "),
                    })?;
                settings.apply(spec, value, Source::ConfigString)?;
            }
        }
        if let Some(carried) = carried {
            // Arguments win over every config string.
            settings.apply_carried(carried, |s| matches!(s, Source::Argument(_)))?;
        }
        Ok(settings)
    }

    /// Applies the carried values whose source `which` accepts.
    fn apply_carried(
        &mut self,
        carried: &CarriedSettings,
        which: impl Fn(&Source) -> bool,
    ) -> Result<()> {
        for (spec, value, source) in carried.entries() {
            if which(&source) {
                self.apply(spec, value, source)?;
            }
        }
        Ok(())
    }

    fn apply(&mut self, spec: &'static SettingSpec, raw: &[u8], source: Source) -> Result<()> {
        let invalid = || Error::InvalidSetting {
            setting: match &source {
                Source::Environment(var) => (*var).to_string(),
                Source::Argument(function) => format!(
                    "{} (argument of {function})",
                    spec.config_key.unwrap_or(spec.env)
                ),
                _ => spec.config_key.unwrap_or(spec.env).to_string(),
            },
            value: shown(raw),
            accepted: spec.accepted,
        };
        let value = std::str::from_utf8(raw).map_err(|_| invalid())?.trim();
        match spec.key {
            Key::CompatMode => {
                self.compat_mode = match value.to_ascii_lowercase().as_str() {
                    "auto" => CompatMode::Auto,
                    "on" => CompatMode::On,
                    "off" => CompatMode::Off,
                    _ => return Err(invalid()),
                }
            }
            Key::DirectIo => {
                self.direct_io = match value.to_ascii_lowercase().as_str() {
                    "off" => DirectIo::Off,
                    "on" => DirectIo::On,
                    "auto" => DirectIo::Auto,
                    _ => return Err(invalid()),
                }
            }
            Key::DeviceCopies => {
                self.device_copies = match value.to_ascii_lowercase().as_str() {
                    "off" => false,
                    "on" => true,
                    _ => return Err(invalid()),
                }
            }
            Key::NThreads => {
                self.nthreads = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_THREADS).contains(n))
                    .ok_or_else(invalid)?
            }
            Key::TaskSize => self.task_size = parse_bounded_size(value).ok_or_else(invalid)?,
            Key::BounceBufferSize => {
                self.bounce_buffer_size = parse_bounded_size(value).ok_or_else(invalid)?
            }
            // Read outside the driver (`h5gds_runtime::settings`); `driver_settings` never
            // yields them, so no config string or driver environment lookup reaches here.
            Key::UseVfdGds
            | Key::StagingBufferSize
            | Key::GpuCodec
            | Key::HostCodec
            | Key::VerifyChecksums
            | Key::Log
            | Key::PluginDir
            | Key::S3Endpoint
            | Key::S3Region
            | Key::S3Anonymous
            | Key::RemoteRequestSize
            | Key::RemoteInFlight
            | Key::RemoteRetries
            | Key::RemoteTimeout => return Err(invalid()),
        }
        if let Some(slot) = self.sources.iter_mut().find(|(k, _)| *k == spec.key) {
            slot.1 = source;
        }
        Ok(())
    }

    pub fn source(&self, key: Key) -> &Source {
        self.sources
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, s)| s)
            .unwrap_or(&Source::Default)
    }

    /// The value of one of the driver's settings as text, as a user would write it; `None` for
    /// the settings read outside the driver.
    pub fn value_text(&self, key: Key) -> Option<String> {
        Some(match key {
            Key::CompatMode => format!("{:?}", self.compat_mode).to_lowercase(),
            Key::DirectIo => format!("{:?}", self.direct_io).to_lowercase(),
            Key::DeviceCopies => if self.device_copies { "on" } else { "off" }.to_string(),
            Key::NThreads => self.nthreads.to_string(),
            Key::TaskSize => format_size(self.task_size as u64),
            Key::BounceBufferSize => format_size(self.bounce_buffer_size as u64),
            Key::UseVfdGds
            | Key::StagingBufferSize
            | Key::GpuCodec
            | Key::HostCodec
            | Key::VerifyChecksums
            | Key::Log
            | Key::PluginDir => return None,
            // Remote files' settings, as parsed (an endpoint shown without user info or query).
            Key::S3Endpoint => self
                .remote
                .s3_endpoint
                .as_deref()
                .map_or_else(|| "unset".into(), crate::url_name::shown_url),
            Key::S3Region => self
                .remote
                .s3_region
                .clone()
                .unwrap_or_else(|| "unset".into()),
            Key::S3Anonymous => if self.remote.s3_anonymous { "1" } else { "0" }.to_string(),
            Key::RemoteRequestSize => format_size(self.remote.request_size as u64),
            Key::RemoteInFlight => self.remote.in_flight.to_string(),
            Key::RemoteRetries => self.remote.retries.to_string(),
            Key::RemoteTimeout => self.remote.timeout_s.to_string(),
        })
    }

    /// `key=value (source), ...` for log lines.
    pub fn describe(&self) -> String {
        driver_settings()
            .map(|(s, key)| {
                format!(
                    "{key}={} ({})",
                    self.value_text(s.key).unwrap_or_default(),
                    self.source(s.key)
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The name under which vfd-gds's `H5Pset_fapl_gds` arguments are reported as a source.
pub const SET_FAPL_GDS: &str = "H5Pset_fapl_gds";

/// vfd-gds's defaults for the three sizes of `H5Pset_fapl_gds` (memory alignment, file block
/// size, copy buffer size), which it puts in place of a 0.
pub const VFD_GDS_DEFAULT_SIZES: [u64; 3] = [4096, 4096, 16 << 20];

const CARRIED_SLOTS: usize = 8;
const CARRIED_VALUE_BYTES: usize = 24;
const CARRIED_MAGIC: u64 = u64::from_le_bytes(*b"h5gdsfa1");
const FROM_CONFIG_STRING: u64 = 1;
const FROM_SET_FAPL_GDS: u64 = 2;

/// The driver's settings as a file access property list carries them (the class's `fapl_size`
/// bytes): HDF5 copies them with the list, hands them to the driver's `open` of every file opened
/// from it, and asks an open file for them (`fapl_get`) to make the list it opens that file's
/// virtual dataset sources and external link targets with. Plain bytes, no pointers, no padding:
/// HDF5 compares two lists' copies bytewise. Holds the values given by argument or config
/// string (as text, each with where it came from; the environment is the same for every file)
/// and vfd-gds's three sizes as `H5Pset_fapl_gds` got them.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CarriedSettings {
    /// `CARRIED_MAGIC`: tells this layout from bytes of any other kind.
    magic: u64,
    /// Memory alignment, file block size and copy buffer size of `H5Pset_fapl_gds` (0: not
    /// given there).
    pub vfd_gds_sizes: [u64; 3],
    /// Per driver setting, in `driver_settings()` order: 0 not carried, `FROM_CONFIG_STRING`,
    /// `FROM_SET_FAPL_GDS`.
    origins: [u64; CARRIED_SLOTS],
    /// Each carried value as text, NUL-padded.
    values: [[u8; CARRIED_VALUE_BYTES]; CARRIED_SLOTS],
}

const _: () = assert!(std::mem::size_of::<CarriedSettings>() % 8 == 0);

impl CarriedSettings {
    fn empty() -> CarriedSettings {
        CarriedSettings {
            magic: CARRIED_MAGIC,
            vfd_gds_sizes: [0; 3],
            origins: [0; CARRIED_SLOTS],
            values: [[0; CARRIED_VALUE_BYTES]; CARRIED_SLOTS],
        }
    }

    /// What a file opened with `settings` passes on: its values from a config string or an
    /// argument, and the vfd-gds sizes it was opened with.
    pub fn of_open_file(settings: &VfdSettings, vfd_gds_sizes: [u64; 3]) -> CarriedSettings {
        let mut carried = CarriedSettings::empty();
        carried.vfd_gds_sizes = vfd_gds_sizes;
        for (slot, (spec, _)) in driver_settings().enumerate().take(CARRIED_SLOTS) {
            let origin = match settings.source(spec.key) {
                Source::ConfigString => FROM_CONFIG_STRING,
                Source::Argument(_) => FROM_SET_FAPL_GDS,
                Source::Default | Source::Environment(_) => continue,
            };
            let text = settings.value_text(spec.key).unwrap_or_default();
            carried.carry(slot, &text, origin);
        }
        carried
    }

    /// Carries `text` (cut to `CARRIED_VALUE_BYTES`) in `slot`, from `origin`.
    fn carry(&mut self, slot: usize, text: &str, origin: u64) {
        let n = text.len().min(CARRIED_VALUE_BYTES);
        self.values[slot][..n].copy_from_slice(&text.as_bytes()[..n]);
        self.origins[slot] = origin;
    }

    /// The settings of vfd-gds's `H5Pset_fapl_gds(fapl, alignment, block_size, cbuf_size)`,
    /// checked as vfd-gds checks them (a 0 means vfd-gds's default; the copy buffer a multiple of
    /// the block size) and as h5gds checks the setting the copy buffer size becomes
    /// (`bounce_buffer_size`, the piece each bounce buffer of the staged path carries). The
    /// alignment and block size have no h5gds setting: h5gds aligns what needs it itself; they
    /// are kept for `H5Pget_fapl_gds`.
    pub fn from_set_fapl_gds(
        alignment: u64,
        block_size: u64,
        cbuf_size: u64,
    ) -> Result<CarriedSettings> {
        let given = [alignment, block_size, cbuf_size];
        let mut sizes = VFD_GDS_DEFAULT_SIZES;
        for (size, given) in sizes.iter_mut().zip(given) {
            if given != 0 {
                *size = given;
            }
        }
        if sizes[2] % sizes[1] != 0 {
            return Err(Error::InvalidArgument(format!(
                "{SET_FAPL_GDS}: the copy buffer size ({}) must be a multiple of the block size ({})",
                sizes[2], sizes[1]
            )));
        }
        let mut carried = CarriedSettings::empty();
        carried.vfd_gds_sizes = sizes;
        if cbuf_size != 0 {
            let (slot, _) = driver_settings()
                .enumerate()
                .find(|(_, (spec, _))| spec.key == Key::BounceBufferSize)
                .ok_or_else(|| Error::InvalidArgument("no bounce_buffer_size setting".into()))?;
            carried.carry(slot, &format_size(cbuf_size), FROM_SET_FAPL_GDS);
        }
        // Refused here, with the argument named, rather than at every open.
        VfdSettings::default().apply_carried(&carried, |_| true)?;
        Ok(carried)
    }

    /// The carried values: the setting, its text and where it came from.
    fn entries(&self) -> impl Iterator<Item = (&'static SettingSpec, &[u8], Source)> + '_ {
        driver_settings()
            .take(CARRIED_SLOTS)
            .enumerate()
            .filter_map(|(slot, (spec, _))| {
                let source = match self.origins[slot] {
                    FROM_CONFIG_STRING => Source::ConfigString,
                    FROM_SET_FAPL_GDS => Source::Argument(SET_FAPL_GDS),
                    _ => return None,
                };
                let value = &self.values[slot];
                let len = value.iter().position(|&b| b == 0).unwrap_or(value.len());
                Some((spec, &value[..len], source))
            })
    }

    /// The carried settings at `info` (a file access list's driver info), if it holds them.
    ///
    /// # Safety
    /// `info` must be null or point to at least `size_of::<CarriedSettings>()` readable bytes
    /// (HDF5's copy of a driver info of this class: `fapl_size` bytes).
    pub unsafe fn at<'a>(info: *const std::ffi::c_void) -> Option<&'a CarriedSettings> {
        if info.is_null() || info.align_offset(std::mem::align_of::<CarriedSettings>()) != 0 {
            return None;
        }
        // SAFETY: the caller's contract; the magic is checked before the rest is trusted, and
        // every bit pattern is a valid CarriedSettings.
        let carried = unsafe { &*info.cast::<CarriedSettings>() };
        (carried.magic == CARRIED_MAGIC).then_some(carried)
    }
}

/// The config string HDF5 itself reads from the environment, as raw bytes.
pub fn config_from_environment() -> Option<Vec<u8>> {
    std::env::var_os("HDF5_DRIVER_CONFIG").map(OsString::into_vec)
}

/// Splits `key=value,key=value` into pairs; empty items are ignored. Works on bytes, so that an
/// item that is not UTF-8 is reported under its key rather than spoiling the whole string.
pub fn parse_config_string(config: &[u8]) -> Result<Vec<(&[u8], &[u8])>> {
    config
        .split(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|item| !item.is_empty())
        .map(|item| {
            let eq = item.iter().position(|&b| b == b'=');
            eq.map(|i| (item[..i].trim_ascii(), item[i + 1..].trim_ascii()))
                .ok_or_else(|| Error::MalformedConfig { item: shown(item) })
        })
        .collect()
}

/// How much of a user's value an error message quotes: enough to recognise it, never a
/// 100,000-character config string back in full.
const QUOTED_CHARS: usize = 64;

/// A user-supplied value for an error message: quoted and escaped (bytes that are not UTF-8 show
/// as `\xNN`), cut after `QUOTED_CHARS` characters with the full length said.
pub fn shown(raw: &[u8]) -> String {
    let mut pieces: Vec<String> = Vec::new();
    for chunk in raw.utf8_chunks() {
        pieces.extend(chunk.valid().chars().map(|c| c.escape_debug().to_string()));
        pieces.extend(chunk.invalid().iter().map(|b| format!("\\x{b:02x}")));
    }
    let quoted: String = pieces
        .iter()
        .take(QUOTED_CHARS)
        .map(String::as_str)
        .collect();
    if pieces.len() <= QUOTED_CHARS {
        format!("\"{quoted}\"")
    } else {
        format!("\"{quoted}\"... ({} bytes in all)", raw.len())
    }
}

fn parse_bounded_size(text: &str) -> Option<usize> {
    parse_size(text)
        .filter(|n| (MIN_SIZE..=MAX_SIZE).contains(n))
        .map(|n| n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let map: HashMap<String, OsString> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        move |name| map.get(name).cloned()
    }

    fn cfg(text: &str) -> Option<&[u8]> {
        Some(text.as_bytes())
    }

    /// The one-pass read of the environment gives what `getenv` gives, for the driver's names
    /// and others. Run in a child with a known environment (a test must not change its own).
    #[test]
    fn the_settings_environment_reads_as_getenv() {
        if std::env::var_os("H5GDS_TEST_ENV_CHILD").is_none() {
            let status = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "config::tests::the_settings_environment_reads_as_getenv",
                ])
                .args(["--nocapture", "--test-threads=1"])
                .env("H5GDS_TEST_ENV_CHILD", "1")
                .env("H5GDS_NTHREADS", " 3 ")
                .env("H5GDS_TEST_NTHREADS_EXTRA", "x")
                .env("H5_GDS_VFD_IO_THREADS", "2")
                .env_remove("H5GDS_TASK_SIZE")
                .env("H5GDS_TEST_LOG_ELSEWHERE", "not=here")
                .status()
                .unwrap();
            assert!(status.success());
            return;
        }
        let env = SettingsEnvironment::read();
        for name in [
            "H5GDS_NTHREADS",
            "H5GDS_TEST_NTHREADS_EXTRA",
            "H5GDS_TEST_NTHREAD",
            "H5_GDS_VFD_IO_THREADS",
            "H5GDS_TASK_SIZE",
            "H5GDS_TEST_LOG_ELSEWHERE",
            "H5GDS_TEST_ENV_CHILD",
            "PATH",
        ] {
            assert_eq!(env.var(name), std::env::var_os(name), "{name}");
        }
        assert_eq!(env.var("H5GDS_NTHREADS"), Some(OsString::from(" 3 ")));
        assert_eq!(env.var("H5_GDS_VFD_IO_THREADS"), Some(OsString::from("2")));
        assert_eq!(
            env.var("H5GDS_TEST_LOG_ELSEWHERE"),
            Some(OsString::from("not=here"))
        );
        assert_eq!(VfdSettings::load(None).unwrap().nthreads, 3);
    }

    #[test]
    fn defaults_match_the_design_table() {
        let s = VfdSettings::from_sources(env_of(&[]), None).unwrap();
        assert_eq!(s.compat_mode, CompatMode::Auto);
        assert_eq!(s.task_size, 4 << 20);
        assert_eq!(s.bounce_buffer_size, 16 << 20);
        assert_eq!(s.direct_io, DirectIo::Off);
        assert!(s.nthreads >= 1 && s.nthreads <= 16);
        assert!(s.sources.iter().all(|(_, src)| *src == Source::Default));
    }

    #[test]
    fn remote_settings_come_from_their_rows() {
        let s = VfdSettings::from_sources(env_of(&[]), None).unwrap();
        assert_eq!(s.remote, RemoteSettings::default());
        let s = VfdSettings::from_sources(
            env_of(&[
                ("H5GDS_S3_ENDPOINT", "http://127.0.0.1:9000"),
                ("H5GDS_S3_REGION", "eu-west-1"),
                ("H5GDS_S3_ANONYMOUS", "1"),
                ("H5GDS_REMOTE_REQUEST_SIZE", "1M"),
                ("H5GDS_REMOTE_IN_FLIGHT", "4"),
                ("H5GDS_REMOTE_RETRIES", "0"),
                ("H5GDS_REMOTE_TIMEOUT", "7"),
            ]),
            None,
        )
        .unwrap();
        let r = &s.remote;
        assert_eq!(r.s3_endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert_eq!(r.s3_region.as_deref(), Some("eu-west-1"));
        assert!(r.s3_anonymous);
        assert_eq!(
            (r.request_size, r.in_flight, r.retries, r.timeout_s),
            (1 << 20, 4, 0, 7)
        );
        assert_eq!(s.value_text(Key::RemoteRequestSize).as_deref(), Some("1M"));
        assert_eq!(
            s.source(Key::S3Region),
            &Source::Environment("H5GDS_S3_REGION")
        );
        let with_user = VfdSettings::from_sources(
            env_of(&[("H5GDS_S3_ENDPOINT", "https://me:secret@store.example:9000")]),
            None,
        )
        .unwrap();
        let shown = with_user.value_text(Key::S3Endpoint).unwrap();
        assert!(
            !shown.contains("secret") && shown.contains("store.example:9000"),
            "{shown}"
        );
        for (var, bad, accepted) in [
            ("H5GDS_S3_ENDPOINT", "ftp://x", "http:// or https://"),
            ("H5GDS_S3_ANONYMOUS", "yes", "0 or 1"),
            ("H5GDS_REMOTE_REQUEST_SIZE", "4K", "64K to 1G"),
            ("H5GDS_REMOTE_IN_FLIGHT", "0", "1 to 256"),
            ("H5GDS_REMOTE_TIMEOUT", "0", "1 to 3600"),
        ] {
            let err = VfdSettings::from_sources(env_of(&[(var, bad)]), None)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(var) && err.contains(bad) && err.contains(accepted),
                "{err}"
            );
        }
    }

    #[test]
    fn every_load_from_the_environment_is_counted() {
        // Other tests may load meanwhile: the count only grows, by at least these two.
        let before = VfdSettings::loads_so_far();
        let _ = VfdSettings::load(None);
        let _ = VfdSettings::load(Some(b"nthreads=2"));
        assert!(VfdSettings::loads_so_far() >= before + 2);
    }

    #[test]
    fn config_string_overrides_environment_overrides_alias() {
        let env = env_of(&[
            ("H5_GDS_VFD_IO_THREADS", "3"),
            ("H5GDS_NTHREADS", "5"),
            ("H5_GDS_VFD_IO_BLOCK_SIZE", "1M"),
        ]);
        let s = VfdSettings::from_sources(&env, None).unwrap();
        assert_eq!(s.nthreads, 5);
        assert_eq!(s.task_size, 1 << 20);
        assert_eq!(
            *s.source(Key::TaskSize),
            Source::Environment("H5_GDS_VFD_IO_BLOCK_SIZE")
        );
        let s = VfdSettings::from_sources(&env, cfg("nthreads=4, task_size=8M,compat_mode=ON"))
            .unwrap();
        assert_eq!(s.nthreads, 4);
        assert_eq!(s.task_size, 8 << 20);
        assert_eq!(s.compat_mode, CompatMode::On);
        assert_eq!(*s.source(Key::NThreads), Source::ConfigString);
    }

    #[test]
    fn invalid_values_name_the_setting_and_accepted_values() {
        let err =
            VfdSettings::from_sources(env_of(&[("H5GDS_COMPAT_MODE", "maybe")]), None).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("H5GDS_COMPAT_MODE")
                && text.contains("maybe")
                && text.contains("auto, on, off")
        );
        let err = VfdSettings::from_sources(env_of(&[]), cfg("nthreads=0")).unwrap_err();
        assert!(err.to_string().contains("nthreads") && err.to_string().contains("1 to 256"));
        let err = VfdSettings::from_sources(env_of(&[]), cfg("task_size=2G")).unwrap_err();
        assert!(err.to_string().contains("task_size"));
        let err = VfdSettings::from_sources(env_of(&[]), cfg("bogus=1")).unwrap_err();
        assert!(err.to_string().contains("bogus") && err.to_string().contains("compat_mode"));
        let err = VfdSettings::from_sources(env_of(&[]), cfg("nthreads")).unwrap_err();
        assert!(err.to_string().contains("key=value"));
    }

    #[test]
    fn values_that_are_not_utf8_are_invalid_not_ignored() {
        use std::os::unix::ffi::OsStringExt;
        let bad = OsString::from_vec(vec![0xff]);
        let env = move |name: &str| (name == "H5GDS_NTHREADS").then(|| bad.clone());
        let err = VfdSettings::from_sources(env, None).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("H5GDS_NTHREADS") && text.contains("\\xff") && text.contains("1 to 256"),
            "{text}"
        );
        let err = VfdSettings::from_sources(env_of(&[]), Some(b"direct_io=o\xffn".as_slice()))
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("direct_io") && text.contains("o\\xffn"),
            "{text}"
        );
        let err =
            VfdSettings::from_sources(env_of(&[]), Some(b"\xfe\xff=1".as_slice())).unwrap_err();
        assert!(
            err.to_string().contains("unknown key \"\\xfe\\xff\""),
            "{err}"
        );
    }

    #[test]
    fn every_driver_setting_fits_the_carried_settings() {
        assert!(driver_settings().count() <= CARRIED_SLOTS);
        assert!(driver_settings().all(|(spec, _)| {
            let widest = match spec.key {
                Key::CompatMode | Key::DirectIo | Key::DeviceCopies => "auto".len(),
                Key::NThreads => MAX_THREADS.to_string().len(),
                _ => format_size(MAX_SIZE - 1).len(),
            };
            widest <= CARRIED_VALUE_BYTES
        }));
    }

    #[test]
    fn carried_settings_keep_their_source_and_rank_between_config_strings() {
        let env = env_of(&[("H5GDS_NTHREADS", "5"), ("H5GDS_TASK_SIZE", "1M")]);
        let parent =
            VfdSettings::from_sources(&env, cfg("nthreads=3,direct_io=auto,task_size=8M")).unwrap();
        let carried = CarriedSettings::of_open_file(&parent, [0; 3]);
        // A file opened from the parent's list (no config string of its own) gets its values and
        // their sources; the environment is still read for the rest.
        let child = VfdSettings::from_all_sources(
            env_of(&[("H5GDS_NTHREADS", "5"), ("H5GDS_BOUNCE_BUFFER_SIZE", "64K")]),
            None,
            Some(&carried),
        )
        .unwrap();
        assert_eq!(child.nthreads, 3);
        assert_eq!(child.task_size, 8 << 20);
        assert_eq!(child.direct_io, DirectIo::Auto);
        assert_eq!(*child.source(Key::NThreads), Source::ConfigString);
        assert_eq!(child.bounce_buffer_size, 64 << 10);
        assert_eq!(
            *child.source(Key::BounceBufferSize),
            Source::Environment("H5GDS_BOUNCE_BUFFER_SIZE")
        );
        // A config string of the list itself wins over carried config-string values.
        let own =
            VfdSettings::from_all_sources(env_of(&[]), cfg("nthreads=7"), Some(&carried)).unwrap();
        assert_eq!((own.nthreads, own.task_size), (7, 8 << 20));
        // Bytes that are not carried settings are not read as such.
        let zeros = [0u64; 64];
        // SAFETY: 512 readable, aligned bytes.
        assert!(unsafe { CarriedSettings::at(zeros.as_ptr().cast()) }.is_none());
        // SAFETY: a CarriedSettings.
        let back = unsafe { CarriedSettings::at(std::ptr::from_ref(&carried).cast()) };
        assert_eq!(back, Some(&carried));
    }

    #[test]
    fn set_fapl_gds_arguments_win_over_config_strings_and_are_checked() {
        let carried = CarriedSettings::from_set_fapl_gds(0, 8192, 8 << 20).unwrap();
        assert_eq!(carried.vfd_gds_sizes, [4096, 8192, 8 << 20]);
        let s = VfdSettings::from_all_sources(
            env_of(&[("H5GDS_BOUNCE_BUFFER_SIZE", "1M")]),
            cfg("bounce_buffer_size=2M,nthreads=2"),
            Some(&carried),
        )
        .unwrap();
        assert_eq!(s.bounce_buffer_size, 8 << 20);
        assert_eq!(
            *s.source(Key::BounceBufferSize),
            Source::Argument(SET_FAPL_GDS)
        );
        assert_eq!(s.nthreads, 2);
        assert!(s
            .describe()
            .contains("bounce_buffer_size=8M (argument of H5Pset_fapl_gds)"));
        // Passed on unchanged to the files opened from a file opened so.
        let again = CarriedSettings::of_open_file(&s, carried.vfd_gds_sizes);
        let child = VfdSettings::from_all_sources(env_of(&[]), None, Some(&again)).unwrap();
        assert_eq!(child.bounce_buffer_size, 8 << 20);
        assert_eq!(
            *child.source(Key::BounceBufferSize),
            Source::Argument(SET_FAPL_GDS)
        );
        assert_eq!(*child.source(Key::NThreads), Source::ConfigString);
        // A 0 takes vfd-gds's default, and sets nothing of h5gds's.
        let defaults = CarriedSettings::from_set_fapl_gds(0, 0, 0).unwrap();
        assert_eq!(defaults.vfd_gds_sizes, VFD_GDS_DEFAULT_SIZES);
        assert_eq!(defaults.entries().count(), 0);
        let err = CarriedSettings::from_set_fapl_gds(4096, 4096, 12800).unwrap_err();
        assert!(
            err.to_string().contains("multiple of the block size"),
            "{err}"
        );
        let err = CarriedSettings::from_set_fapl_gds(4096, 4096, 2 << 30).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("bounce_buffer_size (argument of H5Pset_fapl_gds)")
                && text.contains("4K to 1G"),
            "{text}"
        );
    }

    #[test]
    fn messages_quote_a_bounded_part_of_a_value() {
        let long = format!("nthreads={}", "9".repeat(100_000));
        let err = VfdSettings::from_sources(env_of(&[]), cfg(&long)).unwrap_err();
        let text = err.to_string();
        assert!(text.len() < 400, "{} bytes: {}", text.len(), &text[..400]);
        assert!(
            text.contains("nthreads") && text.contains("100000 bytes in all"),
            "{text}"
        );
        let long_item = "x".repeat(50_000);
        let err = VfdSettings::from_sources(env_of(&[]), cfg(&long_item)).unwrap_err();
        assert!(err.to_string().len() < 400);
        let env = env_of(&[("H5GDS_TASK_SIZE", &"7".repeat(10_000))]);
        let err = VfdSettings::from_sources(env, None).unwrap_err();
        assert!(err.to_string().len() < 400);
    }
}
