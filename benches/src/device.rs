//! Device-memory benchmarks: a contiguous float32 dataset read into and written from GPU memory
//! through the `gds` driver, against "the 128 MB staged path" (sec2 through a bounded host
//! staging buffer, then a copy to or from the GPU, as array libraries do by default).
//! Alternatives are interleaved; every transfer is checked, untimed, against the data.

use crate::gpu::DeviceBuffer;
use crate::h5::{self, h5t, Driver, Layout, Selection};
use crate::stats::Measurement;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Clone, Debug)]
pub struct DeviceOptions {
    pub bytes: u64,
    pub reps: usize,
    pub dir: PathBuf,
    /// Host staging buffer of the staged path.
    pub staging: usize,
    pub gds_config: String,
}

/// The label of the staged baseline in the results.
pub const STAGED: &str = "staged";

pub fn steps(opts: &DeviceOptions) -> usize {
    opts.reps * 4
}

/// Reads the whole dataset `data` of `path` into device memory in pieces of the staging size.
fn staged_read(path: &Path, dev: &DeviceBuffer, staging: &mut [u8]) -> h5::Result<()> {
    let fapl = h5::file_access(&Driver::Sec2)?;
    let file = h5::open_file(path, &fapl)?;
    let dset = h5::open_dataset(&file, "data")?;
    let per = (staging.len() / 4) as u64;
    let total = (dev.len / 4) as u64;
    let mut start = 0u64;
    while start < total {
        let count = per.min(total - start);
        let (s, c) = ([start], [count]);
        let sel = Selection::Slab {
            start: &s,
            stride: &[1],
            count: &c,
        };
        // SAFETY: the staging buffer holds `count` floats.
        unsafe {
            h5::read_raw(
                &dset,
                *h5t::H5T_NATIVE_FLOAT,
                sel,
                staging.as_mut_ptr().cast(),
            )?
        };
        let bytes = count as usize * 4;
        dev.upload(start as usize * 4, &staging[..bytes])?;
        start += count;
    }
    drop(dset);
    file.close()
}

/// Writes device memory to a new file in pieces of the staging size.
fn staged_write(path: &Path, dev: &DeviceBuffer, staging: &mut [u8]) -> h5::Result<()> {
    let fapl = h5::file_access(&Driver::Sec2)?;
    let file = h5::create_file(path, &fapl)?;
    let total = (dev.len / 4) as u64;
    let dset = h5::create_dataset(
        &file,
        "data",
        *h5t::H5T_IEEE_F32LE,
        &[total],
        Layout::Contiguous,
    )?;
    let per = (staging.len() / 4) as u64;
    let mut start = 0u64;
    while start < total {
        let count = per.min(total - start);
        let bytes = count as usize * 4;
        dev.download_into(start as usize * 4, &mut staging[..bytes])?;
        let (s, c) = ([start], [count]);
        let sel = Selection::Slab {
            start: &s,
            stride: &[1],
            count: &c,
        };
        // SAFETY: the staging buffer holds `count` floats.
        unsafe { h5::write_raw(&dset, *h5t::H5T_NATIVE_FLOAT, sel, staging.as_ptr().cast())? };
        start += count;
    }
    drop(dset);
    file.close()
}

fn gds_read(path: &Path, dev: &DeviceBuffer, config: &str) -> h5::Result<()> {
    let fapl = h5::file_access(&Driver::Gds(config.to_string()))?;
    let file = h5::open_file(path, &fapl)?;
    let dset = h5::open_dataset(&file, "data")?;
    // SAFETY: the device buffer holds the whole dataset.
    unsafe { h5::read_raw(&dset, *h5t::H5T_NATIVE_FLOAT, Selection::All, dev.at(0))? };
    drop(dset);
    file.close()
}

fn gds_write(path: &Path, dev: &DeviceBuffer, config: &str) -> h5::Result<()> {
    let fapl = h5::file_access(&Driver::Gds(config.to_string()))?;
    let file = h5::create_file(path, &fapl)?;
    let dset = h5::create_dataset(
        &file,
        "data",
        *h5t::H5T_IEEE_F32LE,
        &[(dev.len / 4) as u64],
        Layout::Contiguous,
    )?;
    // SAFETY: the device buffer holds the whole dataset.
    unsafe { h5::write_raw(&dset, *h5t::H5T_NATIVE_FLOAT, Selection::All, dev.at(0))? };
    drop(dset);
    file.close()
}

/// Compares device memory with `want`, 64 MiB at a time.
fn check_device(what: &str, dev: &DeviceBuffer, want: &[u8]) -> h5::Result<()> {
    for (k, part) in want.chunks(64 << 20).enumerate() {
        let got = dev.download(k * (64 << 20), part.len())?;
        if got != part {
            return Err(format!(
                "{what}: device memory differs from the file in the 64 MiB block {k}"
            ));
        }
    }
    Ok(())
}

/// Compares a file's dataset with `want`.
fn check_file(what: &str, path: &Path, want: &[u8]) -> h5::Result<()> {
    let fapl = h5::file_access(&Driver::Sec2)?;
    let file = h5::open_file(path, &fapl)?;
    let mut got = vec![0u8; want.len()];
    // SAFETY: got holds the whole dataset.
    unsafe {
        h5::read_raw(
            &h5::open_dataset(&file, "data")?,
            *h5t::H5T_NATIVE_FLOAT,
            Selection::All,
            got.as_mut_ptr().cast(),
        )?
    };
    if got != want {
        return Err(format!(
            "{what}: the file written differs from device memory"
        ));
    }
    Ok(())
}

pub fn run(opts: &DeviceOptions, progress: &mut dyn FnMut()) -> h5::Result<Vec<Measurement>> {
    crate::gpu::init_cuda()?;
    std::fs::create_dir_all(&opts.dir).map_err(|e| format!("cannot create {:?}: {e}", opts.dir))?;
    let n = (opts.bytes / 4) as usize;
    let data: Vec<u8> = (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let source = opts.dir.join("h5gds-device-source.h5");
    {
        let fapl = h5::file_access(&Driver::Sec2)?;
        let file = h5::create_file(&source, &fapl)?;
        let dset = h5::create_dataset(
            &file,
            "data",
            *h5t::H5T_IEEE_F32LE,
            &[n as u64],
            Layout::Contiguous,
        )?;
        // SAFETY: data holds n little-endian floats.
        unsafe {
            h5::write_raw(
                &dset,
                *h5t::H5T_NATIVE_FLOAT,
                Selection::All,
                data.as_ptr().cast(),
            )?
        };
        drop(dset);
        file.close()?;
    }
    let dev = DeviceBuffer::new(opts.bytes as usize)?;
    let mut staging = vec![0u8; opts.staging.min(opts.bytes as usize)];
    let label = crate::stats::size_label(opts.bytes);
    let paths = ["gds", STAGED];
    let mut read_times = vec![Vec::new(), Vec::new()];
    let mut write_times = vec![Vec::new(), Vec::new()];
    let target = |p: &str| opts.dir.join(format!("h5gds-device-{p}.h5"));
    // One untimed round first: the first touch of fresh memory and page cache is charged to
    // neither path.
    gds_read(&source, &dev, &opts.gds_config)?;
    staged_read(&source, &dev, &mut staging)?;
    gds_write(&target("gds"), &dev, &opts.gds_config)?;
    staged_write(&target(STAGED), &dev, &mut staging)?;
    for rep in 0..opts.reps {
        for k in 0..2 {
            let i = (k + rep) % 2;
            dev.upload(0, &vec![0xAB; 1 << 20])?; // spoil the head so a no-op read cannot pass
            let start = Instant::now();
            match paths[i] {
                "gds" => gds_read(&source, &dev, &opts.gds_config)?,
                _ => staged_read(&source, &dev, &mut staging)?,
            }
            read_times[i].push(start.elapsed().as_secs_f64());
            check_device(&format!("{} read", paths[i]), &dev, &data)?;
            progress();
        }
        for k in 0..2 {
            let i = (k + rep) % 2;
            let _ = std::fs::remove_file(target(paths[i]));
            let start = Instant::now();
            match paths[i] {
                "gds" => gds_write(&target(paths[i]), &dev, &opts.gds_config)?,
                _ => staged_write(&target(paths[i]), &dev, &mut staging)?,
            }
            write_times[i].push(start.elapsed().as_secs_f64());
            check_file(&format!("{} write", paths[i]), &target(paths[i]), &data)?;
            progress();
        }
    }
    for p in paths
        .iter()
        .map(|p| target(p))
        .chain(std::iter::once(source))
    {
        let _ = std::fs::remove_file(p);
    }
    let mut out = Vec::new();
    for (p, t) in paths.iter().zip(read_times) {
        out.push(Measurement::throughput(
            &format!("device read {label} f32"),
            p,
            opts.bytes,
            t,
        ));
    }
    for (p, t) in paths.iter().zip(write_times) {
        out.push(Measurement::throughput(
            &format!("device write {label} f32"),
            p,
            opts.bytes,
            t,
        ));
    }
    Ok(out)
}
