//! What every benchmark shares: the options and result type of the host benchmarks, the drivers
//! compared and their labels, interleaved repetitions, timing, files opened with a driver, and
//! the check of what was read.

use array_io::hdf5_raw::{self, named as h5, FileDriver as Driver};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What to run and how big.
#[derive(Clone, Debug)]
pub struct HostOptions {
    /// Size of the contiguous float32 dataset for the read and write benchmarks.
    pub bytes: u64,
    pub reps: usize,
    /// Where the benchmark files go (removed afterwards).
    pub dir: PathBuf,
    /// Side of the square float32 dataset for the strided reads.
    pub matrix: usize,
    pub small_datasets: usize,
    /// The config string given to the gds driver.
    pub gds_config: String,
}

/// The result type of the benchmarks: errors as text.
pub type Result<T> = std::result::Result<T, String>;

/// The `gds` plugin by name with its config string, as C programs select it.
pub fn gds(config: &str) -> Driver {
    Driver::ByName {
        name: "gds".into(),
        config: config.to_string(),
    }
}

/// The label of a driver in the results.
pub fn driver_label(driver: &Driver) -> &'static str {
    match driver {
        Driver::Sec2 => "sec2",
        Driver::ByName { .. } | Driver::Registered(_) => "gds",
        Driver::Default => "default",
    }
}

/// Runs `f` for each alternative, `reps` times, rotating the order each repetition so neither
/// side always goes first; `progress` hears about every run.
pub fn interleave<A>(
    alternatives: &[A],
    reps: usize,
    progress: &mut dyn FnMut(),
    mut f: impl FnMut(&A) -> Result<f64>,
) -> Result<Vec<Vec<f64>>> {
    let mut times = vec![Vec::with_capacity(reps); alternatives.len()];
    for rep in 0..reps {
        for k in 0..alternatives.len() {
            let i = (k + rep) % alternatives.len();
            times[i].push(f(&alternatives[i])?);
            progress();
        }
    }
    Ok(times)
}

pub fn timed(f: impl FnOnce() -> Result<()>) -> Result<f64> {
    let start = Instant::now();
    f()?;
    Ok(start.elapsed().as_secs_f64())
}

/// Creates the file at `path` with `driver`.
pub fn create(path: &Path, driver: &Driver) -> Result<hdf5::File> {
    let fapl = h5("H5Pset_driver", hdf5_raw::file_access(driver))?;
    h5("H5Fcreate", hdf5_raw::create_file(path, &fapl))
}

/// Opens the file at `path` read-only with `driver`.
pub fn open(path: &Path, driver: &Driver) -> Result<hdf5::File> {
    let fapl = h5("H5Pset_driver", hdf5_raw::file_access(driver))?;
    h5("H5Fopen", hdf5_raw::open_file(path, &fapl))
}

/// A contiguous float32 dataset `name` of `len` elements.
pub fn create_f32(file: &hdf5::File, name: &str, len: usize) -> Result<hdf5::Dataset> {
    h5(
        "H5Dcreate2",
        file.new_dataset::<f32>().shape(len).create(name),
    )
}
/// Whether `got` holds exactly the values of `want`; else the first element that differs.
pub fn check_equal(what: &str, got: &[f32], want: &[f32]) -> Result<()> {
    match got
        .iter()
        .zip(want)
        .position(|(g, w)| g.to_bits() != w.to_bits())
    {
        None => Ok(()),
        Some(i) => Err(format!(
            "{what}: element {i} is {}, expected {}",
            got[i], want[i]
        )),
    }
}
