//! Every `H5GDS_*` setting in one table ([`SETTINGS`]): its variable, the driver's config-string
//! key where it has one, default, accepted values and meaning, the single source for parsing,
//! errors, `h5gds info` and the documentation. The driver parses its own settings from the table
//! (`h5gds::VfdSettings`); the few read outside the driver (how array-io and the Python
//! extension move device arrays, GPU decoding, logging) are parsed here, once for every caller.

use crate::size::parse_size;
use std::fmt;

/// Where a setting's value came from, for logs and `h5gds info`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    Default,
    Environment(&'static str),
    ConfigString,
    /// An argument of the named function (vfd-gds's `H5Pset_fapl_gds`).
    Argument(&'static str),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::Environment(var) => write!(f, "environment ({var})"),
            Source::ConfigString => f.write_str("config string"),
            Source::Argument(function) => write!(f, "argument of {function}"),
        }
    }
}

/// Identifies one setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    CompatMode,
    NThreads,
    TaskSize,
    BounceBufferSize,
    DirectIo,
    DeviceCopies,
    UseVfdGds,
    StagingBufferSize,
    GpuCodec,
    HostCodec,
    VerifyChecksums,
    Log,
    PluginDir,
    S3Endpoint,
    S3Region,
    S3Anonymous,
    RemoteRequestSize,
    RemoteInFlight,
    RemoteRetries,
    RemoteTimeout,
}

/// The description of one setting: the single source for parsing, errors and documentation.
pub struct SettingSpec {
    pub key: Key,
    pub env: &'static str,
    /// The key of the driver's config string (`HDF5_DRIVER_CONFIG`, `H5Pset_driver_by_name`);
    /// `None` for the settings read outside the driver (array transfers, GPU decoding, logging).
    pub config_key: Option<&'static str>,
    /// Environment variables of the earlier GDS driver that set the same thing.
    pub aliases: &'static [&'static str],
    pub meaning: &'static str,
    pub default: &'static str,
    pub accepted: &'static str,
}

/// The driver's own settings (those with a config-string key), with that key.
pub fn driver_settings() -> impl Iterator<Item = (&'static SettingSpec, &'static str)> {
    SETTINGS
        .iter()
        .filter_map(|spec| spec.config_key.map(|key| (spec, key)))
}

/// The environment variable that sets the log filter (not a per-file setting).
pub const LOG_ENV: &str = "H5GDS_LOG";
/// The h5gds tool's last place to look for the plugin.
pub const PLUGIN_DIR_ENV: &str = "H5GDS_PLUGIN_DIR";

pub const SETTINGS: &[SettingSpec] = &[
    SettingSpec {
        key: Key::CompatMode,
        env: "H5GDS_COMPAT_MODE",
        config_key: Some("compat_mode"),
        aliases: &[],
        meaning:
            "device I/O path: auto = cuFile when GDS is really available, else the staged path; \
                  on = never touch libcufile; off = require cuFile",
        default: "auto",
        accepted: "auto, on, off",
    },
    SettingSpec {
        key: Key::NThreads,
        env: "H5GDS_NTHREADS",
        config_key: Some("nthreads"),
        aliases: &["H5_GDS_VFD_IO_THREADS"],
        meaning: "I/O threads",
        default: "cores, at most 16",
        accepted: "an integer from 1 to 256",
    },
    SettingSpec {
        key: Key::TaskSize,
        env: "H5GDS_TASK_SIZE",
        config_key: Some("task_size"),
        aliases: &["H5_GDS_VFD_IO_BLOCK_SIZE"],
        meaning: "split size for large requests",
        default: "4M",
        accepted: "a size from 4K to 1G (bytes, or with a K/M/G suffix)",
    },
    SettingSpec {
        key: Key::BounceBufferSize,
        env: "H5GDS_BOUNCE_BUFFER_SIZE",
        config_key: Some("bounce_buffer_size"),
        aliases: &[],
        meaning: "pinned bounce buffer size",
        default: "16M",
        accepted: "a size from 4K to 1G (bytes, or with a K/M/G suffix)",
    },
    SettingSpec {
        key: Key::DirectIo,
        env: "H5GDS_DIRECT_IO",
        config_key: Some("direct_io"),
        aliases: &[],
        meaning: "O_DIRECT for host I/O",
        default: "off",
        accepted: "off, on, auto",
    },
    SettingSpec {
        key: Key::DeviceCopies,
        env: "H5GDS_DEVICE_COPIES",
        config_key: Some("device_copies"),
        aliases: &[],
        meaning: "device buffers for the data HDF5 copies itself (compact datasets, chunks in the \
                  chunk cache): on = HDF5 asks the driver to make those copies \
                  (H5FD_FEAT_MEMMANAGE), so they may go to and from GPU memory, at a cost to host \
                  reads of such data; off = HDF5 copies them itself, host buffers only",
        default: "off",
        accepted: "off, on",
    },
    SettingSpec {
        key: Key::UseVfdGds,
        env: USE_VFD_GDS_ENV,
        config_key: None,
        aliases: &[],
        meaning: "device arrays of array-io and h5gds.read/write: 1 = through the gds driver, \
                  0 = through the host staging buffer",
        default: "unset: the gds driver where CUDA works",
        accepted: USE_VFD_GDS_ACCEPTED,
    },
    SettingSpec {
        key: Key::StagingBufferSize,
        env: STAGING_BUFFER_SIZE_ENV,
        config_key: None,
        aliases: &[],
        meaning: "host staging buffer of array-io and h5gds.read/write for device arrays",
        default: "128M",
        accepted: STAGING_ACCEPTED,
    },
    SettingSpec {
        key: Key::GpuCodec,
        env: GPU_CODEC_ENV,
        config_key: None,
        aliases: &[],
        meaning: "compressed chunks read into device arrays: 1 = decoded on the GPU with nvCOMP \
                  where it can, 0 = never on the GPU (decoded on the host, by h5gds where it \
                  decodes the filters, else by HDF5's filters, then copied); unset = where h5gds \
                  estimates it is faster, from the codec, chunk size, chunk count and host threads",
        default: "unset",
        accepted: ZERO_OR_ONE,
    },
    SettingSpec {
        key: Key::HostCodec,
        env: HOST_CODEC_ENV,
        config_key: None,
        aliases: &[],
        meaning: "compressed chunks read into host arrays (h5gds.read, from_file, array-io): 1 = \
                  read raw and decoded by h5gds on the driver's I/O threads where it decodes the \
                  filters (deflate, shuffle, fletcher32, Zstandard, LZ4), 0 = decoded by HDF5's \
                  filters on one core",
        default: "1",
        accepted: ZERO_OR_ONE,
    },
    SettingSpec {
        key: Key::VerifyChecksums,
        env: VERIFY_CHECKSUMS_ENV,
        config_key: None,
        aliases: &[],
        meaning: "check the checksums of chunks decoded on the GPU on the host: deflate's \
                  Adler-32, a Zstandard frame's content checksum (1 = checked, 0 = opted out; \
                  the host decoders always check them, and Fletcher-32)",
        default: "1",
        accepted: ZERO_OR_ONE,
    },
    SettingSpec {
        key: Key::Log,
        env: LOG_ENV,
        config_key: None,
        aliases: &[],
        meaning: "log filter for lines on stderr (tracing's EnvFilter syntax)",
        default: "warn",
        accepted: "error, warn, info, debug, trace, or a filter such as h5gds=debug",
    },
    SettingSpec {
        key: Key::PluginDir,
        env: PLUGIN_DIR_ENV,
        config_key: None,
        aliases: &[],
        meaning: "where the h5gds tool finds libh5gds.so when no --plugin-dir is given and none \
                  lies beside the program",
        default: "unset",
        accepted: "a directory",
    },
    SettingSpec {
        key: Key::S3Endpoint,
        env: "H5GDS_S3_ENDPOINT",
        config_key: None,
        aliases: &[],
        meaning: "endpoint of an S3-compatible store for s3:// file names (remote files, \
                  docs/remote.md); over AWS_ENDPOINT_URL; an http:// endpoint given here is \
                  used as plain HTTP",
        default: "unset: AWS_ENDPOINT_URL, the AWS profile's endpoint_url, else AWS's endpoint \
                  for the region",
        accepted: "an http:// or https:// URL",
    },
    SettingSpec {
        key: Key::S3Region,
        env: "H5GDS_S3_REGION",
        config_key: None,
        aliases: &[],
        meaning: "region of s3:// file names; over AWS_REGION and AWS_DEFAULT_REGION",
        default: "unset: AWS_REGION, AWS_DEFAULT_REGION, the AWS profile's region, else us-east-1",
        accepted: "a region name",
    },
    SettingSpec {
        key: Key::S3Anonymous,
        env: "H5GDS_S3_ANONYMOUS",
        config_key: None,
        aliases: &[],
        meaning: "s3:// requests unsigned, for public buckets (1), or signed with the AWS \
                  credentials of the environment or the AWS profile (0)",
        default: "0",
        accepted: ZERO_OR_ONE,
    },
    SettingSpec {
        key: Key::RemoteRequestSize,
        env: "H5GDS_REMOTE_REQUEST_SIZE",
        config_key: None,
        aliases: &[],
        meaning: "size of the ranged GETs a large read of a remote file is split into",
        default: "8M",
        accepted: "a size from 64K to 1G (bytes, or with a K/M/G suffix)",
    },
    SettingSpec {
        key: Key::RemoteInFlight,
        env: "H5GDS_REMOTE_IN_FLIGHT",
        config_key: None,
        aliases: &[],
        meaning: "ranged GETs of one read of a remote file in flight at once",
        default: "16",
        accepted: "an integer from 1 to 256",
    },
    SettingSpec {
        key: Key::RemoteRetries,
        env: "H5GDS_REMOTE_RETRIES",
        config_key: None,
        aliases: &[],
        meaning: "retries (with backoff) of a remote request that failed transiently (HTTP 5xx, \
                  connection reset, timeout) before the read fails",
        default: "5",
        accepted: "an integer from 0 to 100",
    },
    SettingSpec {
        key: Key::RemoteTimeout,
        env: "H5GDS_REMOTE_TIMEOUT",
        config_key: None,
        aliases: &[],
        meaning: "seconds one remote request may take (connection included) before it counts \
                  as failed and is retried",
        default: "30",
        accepted: "an integer from 1 to 3600",
    },
];

/// `H5GDS_USE_VFD_GDS`: `1` = device data through the `gds` driver, `0` = the staged path,
/// unset = the driver when CUDA works in this process.
pub const USE_VFD_GDS_ENV: &str = "H5GDS_USE_VFD_GDS";
/// `H5GDS_STAGING_BUFFER_SIZE`: the host staging buffer of the staged path (default 128M).
pub const STAGING_BUFFER_SIZE_ENV: &str = "H5GDS_STAGING_BUFFER_SIZE";
/// The default staging buffer: 128 MiB, the size array libraries stage through by default.
pub const DEFAULT_STAGING_BUFFER_SIZE: usize = 128 << 20;
/// The smallest staging buffer accepted (it must hold at least one element of any type).
pub const MIN_STAGING_BUFFER_SIZE: usize = 4 << 10;

pub const USE_VFD_GDS_ACCEPTED: &str =
    "1 (the gds driver), 0 (the staged path) or unset (automatic)";
pub const STAGING_ACCEPTED: &str =
    "a byte count of at least 4K, with an optional K, M or G suffix (default 128M)";

/// Where device data goes, as the settings ask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DevicePath {
    /// Through the `gds` driver, straight between the file and device memory where safe.
    Gds,
    /// Through a host staging buffer, then copied.
    Staged,
    /// `Gds` when CUDA works in this process, else `Staged`.
    Auto,
}

/// A setting's value that is refused: the variable, the value, what is accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidSetting {
    pub variable: &'static str,
    pub value: String,
    pub accepted: &'static str,
}

impl std::fmt::Display for InvalidSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "invalid {}={:?}: accepted values are {}",
            self.variable, self.value, self.accepted
        )
    }
}

/// The device path for `H5GDS_USE_VFD_GDS`'s value (`None`: unset).
pub fn device_path(value: Option<&str>) -> Result<DevicePath, InvalidSetting> {
    match value.map(str::trim) {
        None => Ok(DevicePath::Auto),
        Some("1") => Ok(DevicePath::Gds),
        Some("0") => Ok(DevicePath::Staged),
        Some(_) => Err(InvalidSetting {
            variable: USE_VFD_GDS_ENV,
            value: value.unwrap_or_default().to_string(),
            accepted: USE_VFD_GDS_ACCEPTED,
        }),
    }
}

/// A variable's value in this process's environment (`None`: unset); one that is not Unicode is
/// passed on as lossy text, which the parsers refuse.
fn environment_text(variable: &str) -> Option<String> {
    std::env::var_os(variable).map(|v| v.to_string_lossy().into_owned())
}

/// The device path `H5GDS_USE_VFD_GDS` asks for in this process's environment.
pub fn environment_device_path() -> Result<DevicePath, InvalidSetting> {
    device_path(environment_text(USE_VFD_GDS_ENV).as_deref())
}

/// Whether device data on `path` goes through the `gds` driver (`Auto`: where CUDA works in this
/// process).
pub fn goes_through_gds(path: DevicePath) -> bool {
    match path {
        DevicePath::Gds => true,
        DevicePath::Staged => false,
        DevicePath::Auto => crate::cuda::cuda().is_ok(),
    }
}

/// The staging buffer size `H5GDS_STAGING_BUFFER_SIZE` sets in this process's environment (the
/// default where unset).
pub fn environment_staging_buffer_size() -> Result<usize, InvalidSetting> {
    staging_buffer_size(environment_text(STAGING_BUFFER_SIZE_ENV).as_deref())
}

/// The staging buffer size for `H5GDS_STAGING_BUFFER_SIZE`'s value (`None`: unset).
pub fn staging_buffer_size(value: Option<&str>) -> Result<usize, InvalidSetting> {
    let Some(text) = value else {
        return Ok(DEFAULT_STAGING_BUFFER_SIZE);
    };
    match parse_size(text) {
        Some(size) if size <= usize::MAX as u64 => check_staging_buffer_size(size as usize, text),
        _ => Err(staging_error(text)),
    }
}

/// `size` if it is a staging buffer size accepted (`text` is how it was given).
pub fn check_staging_buffer_size(size: usize, text: &str) -> Result<usize, InvalidSetting> {
    if size < MIN_STAGING_BUFFER_SIZE {
        return Err(staging_error(text));
    }
    Ok(size)
}

fn staging_error(value: &str) -> InvalidSetting {
    InvalidSetting {
        variable: STAGING_BUFFER_SIZE_ENV,
        value: value.to_string(),
        accepted: STAGING_ACCEPTED,
    }
}

/// The setting that opts out (`0`) of the host-side check of the checksums of chunks decoded on
/// the GPU (deflate's Adler-32, a Zstandard frame's content checksum), on by default.
pub const VERIFY_CHECKSUMS_ENV: &str = "H5GDS_VERIFY_CHECKSUMS";

/// The setting that forces (`1`) or turns off (`0`) the GPU codec path for reads; unset, h5gds
/// chooses between decoding on the GPU and on the host's threads.
pub const GPU_CODEC_ENV: &str = "H5GDS_GPU_CODEC";

/// The setting that turns decoding compressed chunks on the host's cores off (`0`): HDF5's
/// filters decode host reads on one core, as in h5py.
pub const HOST_CODEC_ENV: &str = "H5GDS_HOST_CODEC";

const ZERO_OR_ONE: &str = "0 or 1";

fn invalid(variable: &'static str, value: &str) -> InvalidSetting {
    InvalidSetting {
        variable,
        value: value.to_string(),
        accepted: ZERO_OR_ONE,
    }
}

/// Why the settings turn decoding on the GPU off, if they do.
pub fn gpu_codec_turned_off() -> Result<Option<String>, InvalidSetting> {
    match std::env::var(GPU_CODEC_ENV).as_deref() {
        Err(_) | Ok("") | Ok("1") => Ok(None),
        Ok("0") => Ok(Some(format!(
            "{GPU_CODEC_ENV}=0 turns decoding on the GPU off"
        ))),
        Ok(other) => Err(invalid(GPU_CODEC_ENV, other)),
    }
}

/// Why the settings leave host reads of compressed chunks to HDF5's filters, if they do.
pub fn host_codec_turned_off() -> Result<Option<String>, InvalidSetting> {
    match std::env::var(HOST_CODEC_ENV).as_deref() {
        Err(_) | Ok("") | Ok("1") => Ok(None),
        Ok("0") => Ok(Some(format!(
            "{HOST_CODEC_ENV}=0 leaves decoding to HDF5's filters"
        ))),
        Ok(other) => Err(invalid(HOST_CODEC_ENV, other)),
    }
}

/// `H5GDS_GPU_CODEC` as a choice: `Some(true)` = 1, `Some(false)` = 0, `None` = unset (h5gds
/// chooses).
pub fn gpu_codec_forced() -> Result<Option<bool>, InvalidSetting> {
    match std::env::var(GPU_CODEC_ENV).as_deref() {
        Err(_) | Ok("") => Ok(None),
        Ok("1") => Ok(Some(true)),
        Ok("0") => Ok(Some(false)),
        Ok(other) => Err(invalid(GPU_CODEC_ENV, other)),
    }
}

/// Whether the checksums of chunks decoded on the GPU are checked on the host (unset: yes).
pub fn verify_checksums() -> Result<bool, InvalidSetting> {
    match std::env::var(VERIFY_CHECKSUMS_ENV).as_deref() {
        Err(_) | Ok("") | Ok("1") => Ok(true),
        Ok("0") => Ok(false),
        Ok(other) => Err(invalid(VERIFY_CHECKSUMS_ENV, other)),
    }
}

/// The value `spec`'s setting has in this process's environment, as text, and where it came from
/// (for `h5gds info`; the driver's own settings are shown as a file opened now would get them).
pub fn environment_value(spec: &SettingSpec) -> (String, Source) {
    match std::env::var(spec.env) {
        Ok(value) => (value, Source::Environment(spec.env)),
        Err(_) => (spec.default.to_string(), Source::Default),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_path_accepts_only_0_1_and_unset() {
        assert_eq!(device_path(None), Ok(DevicePath::Auto));
        assert_eq!(device_path(Some(" 1")), Ok(DevicePath::Gds));
        assert_eq!(device_path(Some("0")), Ok(DevicePath::Staged));
        let err = device_path(Some("yes")).unwrap_err();
        assert_eq!(err.variable, USE_VFD_GDS_ENV);
        assert!(err.to_string().contains("\"yes\""), "{err}");
    }

    #[test]
    fn staging_sizes_parse_with_suffixes_and_a_minimum() {
        assert_eq!(staging_buffer_size(None), Ok(DEFAULT_STAGING_BUFFER_SIZE));
        assert_eq!(staging_buffer_size(Some("8M")), Ok(8 << 20));
        assert_eq!(staging_buffer_size(Some("4K")), Ok(4096));
        for bad in ["1K", "lots", "", "-5"] {
            let err = staging_buffer_size(Some(bad)).unwrap_err();
            assert_eq!(err.variable, STAGING_BUFFER_SIZE_ENV, "{bad}");
        }
    }
}
