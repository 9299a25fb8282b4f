//! The two settings of the GPU codec path, parsed in one place for array-io and the Python
//! extension.

use h5gds_route::settings::InvalidSetting;

/// The setting that turns on the host-side Adler-32 check of deflate chunks.
pub const VERIFY_CHECKSUMS_ENV: &str = "H5GDS_VERIFY_CHECKSUMS";

/// The setting that turns the GPU codec path off (`0`) for reads: HDF5's CPU filters decode,
/// then the data is copied (the baseline the compressed-read benchmark compares against).
pub const GPU_CODEC_ENV: &str = "H5GDS_GPU_CODEC";

fn invalid(variable: &'static str, value: &str) -> InvalidSetting {
    InvalidSetting {
        variable,
        value: value.to_string(),
        accepted: "0 or 1",
    }
}

/// Why the settings turn decoding on the GPU off, if they do.
pub fn turned_off() -> Result<Option<String>, InvalidSetting> {
    match std::env::var(GPU_CODEC_ENV).as_deref() {
        Err(_) | Ok("") | Ok("1") => Ok(None),
        Ok("0") => Ok(Some(format!(
            "{GPU_CODEC_ENV}=0 turns decoding on the GPU off"
        ))),
        Ok(other) => Err(invalid(GPU_CODEC_ENV, other)),
    }
}

/// Whether decoded deflate chunks are checked against their Adler-32 on the host.
pub fn verify_checksums() -> Result<bool, InvalidSetting> {
    match std::env::var(VERIFY_CHECKSUMS_ENV).as_deref() {
        Err(_) | Ok("") | Ok("0") => Ok(false),
        Ok("1") => Ok(true),
        Ok(other) => Err(invalid(VERIFY_CHECKSUMS_ENV, other)),
    }
}
