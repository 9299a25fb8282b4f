//! The settings as one face call takes them: the driver's (`H5GDS_NTHREADS`, `H5GDS_TASK_SIZE`,
//! ...) [`check`]ed where a call opens a file (array-io's every open, Python's `from_file` and
//! `to_file`), and held by a [`CallSettings`], loaded at most once, when a step first needs them;
//! and what `H5GDS_HOST_CODEC` means ([`filters_left_to_hdf5`]). An invalid value is an error
//! naming the setting and the values it accepts, the same in both faces; never the defaults in
//! its place.

use h5gds::VfdSettings;
use h5gds_runtime::settings::{host_codec_turned_off, InvalidSetting, SETTINGS};
use std::sync::OnceLock;

/// The driver's settings from the environment, each value checked against its row.
pub fn load() -> Result<VfdSettings, InvalidSetting> {
    VfdSettings::load(None).map_err(invalid)
}

/// Checks every setting of the environment where a face call opens or creates a file, before
/// HDF5 is asked (whose refusal would name only the open): an invalid value is an error naming the
/// setting and what it accepts. Not counted as a load ([`VfdSettings::loads_so_far`]): the
/// call's [`CallSettings`] are loaded apart, where a step needs them, as the driver's open
/// parses its own.
pub fn check() -> Result<(), InvalidSetting> {
    VfdSettings::from_sources(|name| std::env::var_os(name), None)
        .map(drop)
        .map_err(invalid)
}

/// The driver's refusal as the settings table's: the variable, the value, what it accepts.
fn invalid(e: h5gds::Error) -> InvalidSetting {
    if let h5gds::Error::InvalidSetting {
        setting,
        value,
        accepted,
    } = &e
    {
        if let Some(spec) = SETTINGS.iter().find(|spec| spec.env == setting) {
            // The driver shows the value quoted; the table's error quotes it again.
            let value = value.trim_matches('"').to_string();
            return InvalidSetting {
                variable: spec.env,
                value,
                accepted,
            };
        }
    }
    // Only the environment is read (no config string), whose one refusal is the one above.
    InvalidSetting {
        variable: "H5GDS_*",
        value: e.to_string(),
        accepted: "the values docs/settings.md lists",
    }
}

/// What `H5GDS_HOST_CODEC` means, for every read of either face: why HDF5's filters decode a
/// dataset's chunks, where its chunks are `filtered` and the setting is `0`; None where h5gds
/// reads them itself. Unfiltered chunks are the file's own bytes, with nothing to decode: h5gds
/// reads them whatever the setting says.
pub fn filters_left_to_hdf5(filtered: bool) -> Result<Option<String>, InvalidSetting> {
    match filtered {
        true => host_codec_turned_off(),
        false => Ok(None),
    }
}

/// The driver's settings for one face call, loaded at the first ask (a read that never asks,
/// a row of a read-only file, never reads them); an invalid setting is kept as its error, not
/// parsed again.
#[derive(Default)]
pub struct CallSettings(OnceLock<Result<VfdSettings, InvalidSetting>>);

impl CallSettings {
    /// Settings the call loaded already (with [`load`], where it starts).
    pub fn loaded(settings: VfdSettings) -> CallSettings {
        CallSettings(OnceLock::from(Ok(settings)))
    }

    /// The settings, loaded now if this call has not loaded them yet.
    pub fn get(&self) -> Result<&VfdSettings, InvalidSetting> {
        self.0.get_or_init(load).as_ref().map_err(Clone::clone)
    }

    /// The driver's I/O thread count, which also decodes chunks on the host.
    pub fn nthreads(&self) -> Result<usize, InvalidSetting> {
        self.get().map(|s| s.nthreads)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drivers_refusal_names_the_setting_and_what_it_accepts() {
        let refused = h5gds::Error::InvalidSetting {
            setting: "H5GDS_NTHREADS".into(),
            value: "\"abc\"".into(),
            accepted: "an integer from 1 to 256",
        };
        let e = invalid(refused);
        assert_eq!((e.variable, e.value.as_str()), ("H5GDS_NTHREADS", "abc"));
        assert_eq!(
            e.to_string(),
            "invalid H5GDS_NTHREADS=\"abc\": accepted values are an integer from 1 to 256"
        );
        // H5GDS_HOST_CODEC is left unset by the engine's tests.
        assert_eq!(filters_left_to_hdf5(true).unwrap(), None);
        assert_eq!(filters_left_to_hdf5(false).unwrap(), None);
        let loaded = CallSettings::loaded(VfdSettings::default());
        assert_eq!(loaded.nthreads().unwrap(), VfdSettings::default().nthreads);
    }
}
