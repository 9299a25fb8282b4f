//! The options of one call: the settings that choose between the `gds` driver and the staged
//! path ([`Settings`], each unset field taken from the environment) and a read's options
//! ([`ReadOptions`]). The driver's own settings (thread counts, whether the driver stages every
//! device transfer) are checked at every open (`crate::driver::file_access`) and loaded by the
//! engine's dataset handle where a step needs them.

use crate::error::Result;
use h5gds_runtime::settings;
pub use h5gds_runtime::settings::{
    DevicePath, DEFAULT_STAGING_BUFFER_SIZE, MIN_STAGING_BUFFER_SIZE, STAGING_BUFFER_SIZE_ENV,
    USE_VFD_GDS_ENV,
};

/// The settings of one call: each field `None` takes the environment's value (or the default).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    pub device_path: Option<DevicePath>,
    pub staging_buffer_size: Option<usize>,
}

impl Settings {
    /// The device path: the explicit setting, else `H5GDS_USE_VFD_GDS`.
    pub fn device_path(&self) -> Result<DevicePath> {
        match self.device_path {
            Some(path) => Ok(path),
            None => Ok(settings::environment_device_path()?),
        }
    }

    /// The staging buffer size: the explicit setting, else `H5GDS_STAGING_BUFFER_SIZE`.
    pub fn staging_buffer_size(&self) -> Result<usize> {
        Ok(match self.staging_buffer_size {
            Some(size) => settings::check_staging_buffer_size(size, &size.to_string())?,
            None => settings::environment_staging_buffer_size()?,
        })
    }

    /// Whether device data goes through the `gds` driver.
    pub(crate) fn use_gds(&self) -> Result<bool> {
        Ok(settings::goes_through_gds(self.device_path()?))
    }
}

/// Options of a read.
#[derive(Clone, Debug, Default)]
pub struct ReadOptions {
    /// Let HDF5 convert a stored type that differs from the requested one (`i16` to `f64`,
    /// say). Off by default: a mismatch is an error naming both types.
    pub allow_conversion: bool,
    /// Path and staging settings; unset fields come from the environment.
    pub settings: Settings,
}

impl ReadOptions {
    pub fn new() -> ReadOptions {
        ReadOptions::default()
    }

    /// Allows (or forbids) type conversion.
    pub fn allow_conversion(mut self, allow: bool) -> ReadOptions {
        self.allow_conversion = allow;
        self
    }

    /// Chooses the device path instead of `H5GDS_USE_VFD_GDS`.
    pub fn device_path(mut self, path: DevicePath) -> ReadOptions {
        self.settings.device_path = Some(path);
        self
    }

    /// Chooses the staging buffer size instead of `H5GDS_STAGING_BUFFER_SIZE`.
    pub fn staging_buffer_size(mut self, bytes: usize) -> ReadOptions {
        self.settings.staging_buffer_size = Some(bytes);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn explicit_settings_are_validated_like_the_environment() {
        let s = Settings {
            device_path: Some(DevicePath::Staged),
            staging_buffer_size: Some(8192),
        };
        assert_eq!(s.device_path().unwrap(), DevicePath::Staged);
        assert_eq!(s.staging_buffer_size().unwrap(), 8192);
        let small = Settings {
            staging_buffer_size: Some(100),
            ..Default::default()
        };
        let err = small.staging_buffer_size().unwrap_err().to_string();
        assert!(err.contains("H5GDS_STAGING_BUFFER_SIZE=\"100\""), "{err}");
        assert!(err.contains("at least 4K"), "{err}");
    }

    #[test]
    fn use_vfd_gds_accepts_only_0_and_1() {
        assert_eq!(settings::device_path(Some("1")), Ok(DevicePath::Gds));
        assert_eq!(settings::device_path(Some("0")), Ok(DevicePath::Staged));
        let err = Error::from(settings::device_path(Some("yes")).unwrap_err()).to_string();
        assert!(err.contains("H5GDS_USE_VFD_GDS=\"yes\""), "{err}");
        assert!(
            err.contains("1 (the gds driver), 0 (the staged path)"),
            "{err}"
        );
    }
}
