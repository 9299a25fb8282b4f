//! The `gds` driver is registered in-process, and coexists with the plugin loaded from
//! `HDF5_PLUGIN_PATH` in either order: plugin first (`HDF5_DRIVER=gds` makes HDF5 load it when
//! it initialises), or array-io first (a later `H5Pset_driver_by_name("gds")` then finds the
//! registered driver instead of loading the plugin). Each case runs in a child process, since
//! HDF5 reads `HDF5_DRIVER` once per process. Another driver registered as `gds` (vfd-gds
//! shares the name and value) is refused with an error saying what to do.

mod common;

use array_io::hdf5_raw::{self, FileDriver};
use array_io::{from_file, gds_driver, to_file, DevicePath, Registration, Settings};
use common::*;
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
        assert!(hdf5_raw::registered_driver(512).unwrap().is_some());
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
        assert_eq!(hdf5_raw::registered_driver(512).unwrap(), None);
        let (id, how) = gds_driver().unwrap();
        assert_eq!(how, Registration::InProcess);
        round_trip();
        // Selecting the driver by name, as C programs and HDF5_DRIVER do, finds this one.
        let by_name = FileDriver::ByName {
            name: "gds".into(),
            config: String::new(),
        };
        let fapl = hdf5_raw::file_access(&by_name).unwrap();
        assert_eq!(hdf5_raw::selected_driver(&fapl).unwrap(), id);
        assert!(!plugin_loaded(), "the plugin was not loaded a second time");
    });
}

#[test]
fn another_driver_registered_as_gds_is_refused_with_advice() {
    let name = "another_driver_registered_as_gds_is_refused_with_advice";
    in_child(name, false, &[], || {
        // Another driver of the same name and value: sec2's class, renamed, as vfd-gds would
        // appear in a process that loaded it.
        let sec2 = hdf5_raw::locked(|| *hdf5::globals::H5FD_SEC2);
        let class = hdf5_raw::driver_class(sec2).unwrap();
        // SAFETY: HDF5's copy of sec2's class has the layout h5gds::abi describes; the copy
        // is leaked, as HDF5 needs it for the rest of the process.
        let other: &'static mut h5gds::abi::H5FD_class_t = unsafe {
            Box::leak(Box::new(std::ptr::read(
                class.cast::<h5gds::abi::H5FD_class_t>(),
            )))
        };
        other.value = 512;
        other.name = c"gds".as_ptr();
        // SAFETY: a complete class that lives for the rest of the process.
        unsafe { hdf5_raw::register_driver((other as *const h5gds::abi::H5FD_class_t).cast()) }
            .unwrap();

        let err = gds_driver().unwrap_err().to_string();
        assert!(
            err.contains("another HDF5 driver is registered as gds"),
            "{err}"
        );
        assert!(err.contains("vfd-gds"), "{err}");
        assert!(err.contains("HDF5_PLUGIN_PATH"), "{err}");
        assert!(err.contains("H5GDS_USE_VFD_GDS=0"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("refused.h5");
        let a = arr2(&[[1.0f32, 2.0]]);
        let err = to_file(&a, &path, "/a").unwrap_err().to_string();
        assert!(err.contains("another HDF5 driver"), "{err}");
        assert!(!path.exists(), "a refused write leaves no file");
        // The advice works: the staged path goes through sec2.
        let staged = Settings {
            device_path: Some(DevicePath::Staged),
            ..Default::default()
        };
        array_io::to_file_with(&a, &path, "/a", &staged).unwrap();
        let options = array_io::ReadOptions::new().device_path(DevicePath::Staged);
        let back = array_io::from_file_with::<f32>(&path, "/a", &options).unwrap();
        assert_eq!(back, a.into_dyn());
    });
}
