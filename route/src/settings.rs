//! The two settings that choose between the `gds` driver and the staged path for device data,
//! parsed from their text: one parser for array-io (Rust) and the Python extension, so
//! `H5GDS_USE_VFD_GDS` and `H5GDS_STAGING_BUFFER_SIZE` mean the same in both.

use h5gds_runtime::size::parse_size;

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
