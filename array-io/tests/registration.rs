//! The `gds` driver is registered in-process, and coexists with the plugin loaded from
//! `HDF5_PLUGIN_PATH` in either order: plugin first (`HDF5_DRIVER=gds` makes HDF5 load it when
//! it initialises), or array-io first (a later `H5Pset_driver_by_name("gds")` then finds the
//! registered driver instead of loading the plugin). Each case runs in a child process, since
//! HDF5 reads `HDF5_DRIVER` once per process.

mod common;

use array_io::{from_file, gds_driver, to_file, Registration};
use common::*;
use hdf5_sys::h5fd::H5FDis_driver_registered_by_value;
use hdf5_sys::h5p::{
    H5Pclose, H5Pcreate, H5Pget_driver, H5Pset_driver_by_name, H5P_CLS_FILE_ACCESS,
};
use ndarray::arr2;

fn plugin_dir() -> String {
    h5gds_tests::plugin_dir().to_str().unwrap().to_string()
}

/// Whether the plugin library file is mapped into this process.
fn plugin_loaded() -> bool {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines().any(|l| {
        l.contains(&format!(
            "{}/libh5gds.so",
            h5gds_tests::plugin_dir().display()
        ))
    })
}

fn round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.h5");
    let a = arr2(&[[1.25f64, -2.0], [3.5, 4.0]]);
    to_file(&a, &path, "/r").unwrap();
    assert_eq!(from_file::<f64>(&path, "/r").unwrap(), a.into_dyn());
}

#[test]
fn the_plugin_loaded_first_is_used() {
    let name = "the_plugin_loaded_first_is_used";
    let dir = plugin_dir();
    let env = [("HDF5_PLUGIN_PATH", dir.as_str()), ("HDF5_DRIVER", "gds")];
    in_child(name, false, &env, || {
        // HDF5 initialises (and loads the plugin for HDF5_DRIVER) on first use.
        hdf5::sync::sync(|| ());
        assert!(plugin_loaded(), "HDF5_DRIVER=gds loads the plugin");
        // SAFETY: a plain query.
        assert!(unsafe { H5FDis_driver_registered_by_value(512) } > 0);
        let (id, how) = gds_driver().unwrap();
        assert_eq!(how, Registration::AlreadyRegistered);
        assert!(id > 0);
        round_trip();
    });
}

#[test]
fn array_io_first_then_the_driver_by_name_finds_it() {
    let name = "array_io_first_then_the_driver_by_name_finds_it";
    let dir = plugin_dir();
    in_child(name, false, &[("HDF5_PLUGIN_PATH", dir.as_str())], || {
        // SAFETY: a plain query (HDF5 initialises on first use).
        assert_eq!(
            hdf5::sync::sync(|| unsafe { H5FDis_driver_registered_by_value(512) }),
            0
        );
        let (id, how) = gds_driver().unwrap();
        assert_eq!(how, Registration::InProcess);
        round_trip();
        // Selecting the driver by name, as C programs and HDF5_DRIVER do, finds this one.
        let found = hdf5::sync::sync(|| {
            // SAFETY: plain calls on a list created and closed here.
            unsafe {
                let fapl = H5Pcreate(*H5P_CLS_FILE_ACCESS);
                assert!(H5Pset_driver_by_name(fapl, c"gds".as_ptr(), c"".as_ptr()) >= 0);
                let found = H5Pget_driver(fapl);
                H5Pclose(fapl);
                found
            }
        });
        assert_eq!(found, id);
        assert!(!plugin_loaded(), "the plugin was not loaded a second time");
    });
}
