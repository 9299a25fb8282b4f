//! Settings read from the environment (`H5GDS_USE_VFD_GDS`, `H5GDS_STAGING_BUFFER_SIZE`):
//! invalid values are errors naming the variable and the accepted values. Each case runs in a
//! child process with the variable set. (Kept apart from the tests that open HDF5 files in
//! this process: a child forked while this process holds a file's lock keeps the lock until it
//! execs, and a concurrent re-open of that file would then fail.)

mod common;

use array_io::{to_file, Error};
use common::*;
use ndarray::arr1;

/// Runs one invalid-setting case in a child process (settings are read from the environment).
fn settings_child(name: &str, var: &str, value: &str, accepted: &str) {
    let test = format!("invalid_setting_{name}");
    in_child(&test, false, &[(var, value)], || {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.h5");
        let err = match var {
            // The driver's own settings too: refused naming the setting, not as HDF5's failed
            // create (every open checks them first).
            "H5GDS_USE_VFD_GDS" | "H5GDS_NTHREADS" => {
                to_file(&arr1(&[1u8]), &path, "/x").unwrap_err()
            }
            _ => {
                // The staging size matters to device transfers only; check it is parsed.
                array_io::Settings::default()
                    .staging_buffer_size()
                    .unwrap_err()
            }
        };
        assert!(matches!(err, Error::InvalidSetting { .. }), "{err:?}");
        let text = err.to_string();
        assert!(text.contains(&format!("{var}={value:?}")), "{text}");
        assert!(text.contains(accepted), "{text}");
    });
}

#[test]
fn invalid_setting_flag() {
    settings_child(
        "flag",
        "H5GDS_USE_VFD_GDS",
        "yes",
        "1 (the gds driver), 0 (the staged path)",
    );
}

#[test]
fn invalid_setting_threads() {
    settings_child(
        "threads",
        "H5GDS_NTHREADS",
        "abc",
        "an integer from 1 to 256",
    );
}

#[test]
fn invalid_setting_size() {
    settings_child(
        "size",
        "H5GDS_STAGING_BUFFER_SIZE",
        "lots",
        "K, M or G suffix",
    );
}

#[test]
fn invalid_setting_small() {
    settings_child("small", "H5GDS_STAGING_BUFFER_SIZE", "12", "at least 4K");
}

#[test]
fn staging_size_comes_from_the_environment() {
    in_child(
        "staging_size_comes_from_the_environment",
        false,
        &[("H5GDS_STAGING_BUFFER_SIZE", "3M")],
        || {
            assert_eq!(
                array_io::Settings::default().staging_buffer_size().unwrap(),
                3 << 20
            );
        },
    );
}
