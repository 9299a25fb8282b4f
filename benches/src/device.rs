//! Device-memory benchmarks: a contiguous float32 dataset read into and written from GPU memory
//! through the `gds` driver, against "the 128 MB staged path" (sec2 through a bounded host
//! staging buffer, then a copy to or from the GPU, as array libraries do by default), against
//! what users do (`users`: the whole dataset read into host memory with sec2, then one copy up;
//! one copy down, then the whole dataset written), and beside the link's limit (`limit`: one copy
//! of the bytes between pinned host memory and the device, no file).
//! Alternatives are interleaved; every transfer is checked, untimed, against the data.
//!
//! Both paths are timed between storage and device memory: the source file is dropped from the
//! page cache before every timed read, and every timed write ends with `fsync`. GPUDirect Storage
//! bypasses the page cache (nvidia-fs, and the emulator's GDS path, use `O_DIRECT`), so timing
//! the staged path against warm page-cache pages would compare memory with storage.

use crate::gpu::DeviceBuffer;
use crate::harness::{create, create_f32, gds, open, Result};
use crate::stats::Measurement;
use array_io::hdf5_raw::{named as h5, FileDriver as Driver};
use array_io::transfer::{self, Hyperslab};
use hdf5::Datatype;
use std::os::fd::AsRawFd;
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

/// The paths compared: the driver, the staged baseline, what users do, the link's limit.
const PATHS: [&str; 4] = ["gds", STAGED, "users", "limit"];

pub fn steps(opts: &DeviceOptions) -> usize {
    opts.reps * 2 * PATHS.len()
}

/// The bytes of a float slice (f32 has no padding and every byte pattern of u8 is valid).
fn f32_bytes(v: &[f32]) -> &[u8] {
    // SAFETY: same allocation, 4 bytes per element, u8 has alignment 1.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), v.len() * 4) }
}

/// The bytes of a float slice, writable (every byte pattern is a valid f32).
fn f32_bytes_mut(v: &mut [f32]) -> &mut [u8] {
    // SAFETY: as above, and the borrow is exclusive.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast(), v.len() * 4) }
}

/// The float32 memory type.
fn f32_type() -> Result<Datatype> {
    h5("H5Tcopy", Datatype::from_type::<f32>())
}

/// Reads the whole dataset `data` of `path` into device memory in pieces of the staging size.
fn staged_read(path: &Path, dev: &DeviceBuffer, staging: &mut [f32]) -> Result<()> {
    let file = open(path, &Driver::Sec2)?;
    let dset = h5("H5Dopen2", file.dataset("data"))?;
    let f32_type = f32_type()?;
    let per = staging.len();
    let total = dev.len / 4;
    let mut start = 0;
    while start < total {
        let count = per.min(total - start);
        let part = &mut staging[..count];
        let slab = Hyperslab {
            start: &[start as u64],
            step: &[1],
            count: &[count as u64],
        };
        // SAFETY: `part` holds the piece's `count * 4` writable bytes; every bit pattern is an
        // f32.
        let read = unsafe {
            transfer::read(
                &dset,
                &f32_type,
                Some(slab),
                part.as_mut_ptr().cast(),
                count * 4,
            )
        };
        h5("H5Dread", read)?;
        dev.upload(start * 4, f32_bytes(part))?;
        start += count;
    }
    drop(dset);
    h5("H5Fclose", file.close())
}

/// Writes device memory to a new file in pieces of the staging size.
fn staged_write(path: &Path, dev: &DeviceBuffer, staging: &mut [f32]) -> Result<()> {
    let file = create(path, &Driver::Sec2)?;
    let total = dev.len / 4;
    let dset = create_f32(&file, "data", total)?;
    let per = staging.len();
    let mut start = 0;
    while start < total {
        let count = per.min(total - start);
        let part = &mut staging[..count];
        dev.download_into(start * 4, f32_bytes_mut(part))?;
        h5("H5Dwrite", dset.write_slice(&*part, start..start + count))?;
        start += count;
    }
    drop(dset);
    h5("H5Fclose", file.close())
}

/// What users do: the whole dataset into host memory (sec2), then one copy to the device.
fn users_read(path: &Path, dev: &DeviceBuffer, host: &mut [f32]) -> Result<()> {
    let file = open(path, &Driver::Sec2)?;
    let dset = h5("H5Dopen2", file.dataset("data"))?;
    h5("H5Dread", dset.read_into_raw(host))?;
    drop(dset);
    h5("H5Fclose", file.close())?;
    dev.upload(0, f32_bytes(host))
}

/// What users do: one copy from the device, then the whole dataset written (sec2).
fn users_write(path: &Path, dev: &DeviceBuffer, host: &mut [f32]) -> Result<()> {
    dev.download_into(0, f32_bytes_mut(host))?;
    let file = create(path, &Driver::Sec2)?;
    let dset = create_f32(&file, "data", host.len())?;
    h5("H5Dwrite", dset.write_raw(&*host))?;
    drop(dset);
    h5("H5Fclose", file.close())
}

fn gds_read(path: &Path, dev: &DeviceBuffer, config: &str) -> Result<()> {
    let file = open(path, &gds(config))?;
    let dset = h5("H5Dopen2", file.dataset("data"))?;
    // SAFETY: the device buffer holds the whole dataset.
    let read = unsafe { transfer::read(&dset, &f32_type()?, None, dev.at(0), dev.len / 4 * 4) };
    h5("H5Dread", read)?;
    drop(dset);
    h5("H5Fclose", file.close())
}

fn gds_write(path: &Path, dev: &DeviceBuffer, config: &str) -> Result<()> {
    let file = create(path, &gds(config))?;
    let dset = create_f32(&file, "data", dev.len / 4)?;
    // SAFETY: the device buffer holds the whole dataset.
    let written = unsafe { transfer::write(&dset, &f32_type()?, None, dev.at(0), dev.len / 4 * 4) };
    h5("H5Dwrite", written)?;
    drop(dset);
    h5("H5Fclose", file.close())
}

/// Compares device memory with `want`, 64 MiB at a time.
fn check_device(what: &str, dev: &DeviceBuffer, want: &[f32]) -> Result<()> {
    for (k, part) in want.chunks(16 << 20).enumerate() {
        let got = dev.download(k * (64 << 20), part.len() * 4)?;
        if got.iter().ne(part
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect::<Vec<u8>>()
            .iter())
        {
            return Err(format!(
                "{what}: device memory differs from the file in the 64 MiB block {k}"
            ));
        }
    }
    Ok(())
}

/// Compares a file's dataset with `want`.
fn check_file(what: &str, path: &Path, want: &[f32]) -> Result<()> {
    let file = open(path, &Driver::Sec2)?;
    let got = h5(
        "H5Dread",
        h5("H5Dopen2", file.dataset("data"))?.read_raw::<f32>(),
    )?;
    if got
        .iter()
        .map(|x| x.to_bits())
        .ne(want.iter().map(|x| x.to_bits()))
    {
        return Err(format!(
            "{what}: the file written differs from device memory"
        ));
    }
    Ok(())
}

/// Writes `path`'s dirty pages to storage and drops its pages from the page cache, so the next
/// read of it comes from storage.
fn evict(path: &Path) -> Result<()> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot open {path:?}: {e}"))?;
    file.sync_all()
        .map_err(|e| format!("fsync of {path:?} failed: {e}"))?;
    // SAFETY: an advisory call on a descriptor `file` owns; offset 0, length 0 = the whole file.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(format!(
            "posix_fadvise(DONTNEED) of {path:?} failed: {}",
            std::io::Error::from_raw_os_error(rc)
        ));
    }
    Ok(())
}

pub fn run(opts: &DeviceOptions, progress: &mut dyn FnMut()) -> Result<Vec<Measurement>> {
    crate::gpu::init_cuda()?;
    std::fs::create_dir_all(&opts.dir).map_err(|e| format!("cannot create {:?}: {e}", opts.dir))?;
    let n = (opts.bytes / 4) as usize;
    let data: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let source = opts.dir.join("h5gds-device-source.h5");
    {
        let file = create(&source, &Driver::Sec2)?;
        h5("H5Dwrite", create_f32(&file, "data", n)?.write_raw(&data))?;
        h5("H5Fclose", file.close())?;
    }
    let dev = DeviceBuffer::new(opts.bytes as usize)?;
    let mut staging = vec![0f32; (opts.staging.min(opts.bytes as usize) / 4).max(1)];
    let mut whole = vec![0f32; n];
    // The limit's pinned buffer holds the data (checked reads) and takes the device's bytes back.
    let mut pinned = h5gds_runtime::pinned::Taken::new(opts.bytes as usize);
    let pinned_ptr = pinned.as_mut_ptr();
    // SAFETY: the buffer holds `opts.bytes` bytes and lives until the end of this function; it is
    // only touched through this slice.
    let pinned_bytes = unsafe { std::slice::from_raw_parts_mut(pinned_ptr, opts.bytes as usize) };
    pinned_bytes.copy_from_slice(f32_bytes(&data));
    let label = crate::stats::size_label(opts.bytes);
    let mut read_times = vec![Vec::new(); PATHS.len()];
    let mut write_times = vec![Vec::new(); PATHS.len()];
    let target = |p: &str| opts.dir.join(format!("h5gds-device-{p}.h5"));
    let read = |p: &str, staging: &mut [f32], whole: &mut [f32], pinned: &[u8]| match p {
        "gds" => gds_read(&source, &dev, &opts.gds_config),
        STAGED => staged_read(&source, &dev, staging),
        "users" => users_read(&source, &dev, whole),
        _ => dev.upload(0, pinned),
    };
    let write = |p: &str, staging: &mut [f32], whole: &mut [f32], pinned: &mut [u8]| match p {
        "gds" => gds_write(&target(p), &dev, &opts.gds_config),
        STAGED => staged_write(&target(p), &dev, staging),
        "users" => users_write(&target(p), &dev, whole),
        _ => dev.download_into(0, pinned),
    };
    // One untimed round first: the first touch of fresh memory and page cache is charged to
    // no path.
    for p in PATHS {
        read(p, &mut staging, &mut whole, pinned_bytes)?;
        write(p, &mut staging, &mut whole, pinned_bytes)?;
    }
    for rep in 0..opts.reps {
        for k in 0..PATHS.len() {
            let i = (k + rep) % PATHS.len();
            dev.upload(0, &vec![0xAB; (1 << 20).min(opts.bytes as usize)])?; // spoil the head
            evict(&source)?;
            let start = Instant::now();
            read(PATHS[i], &mut staging, &mut whole, pinned_bytes)?;
            read_times[i].push(start.elapsed().as_secs_f64());
            check_device(&format!("{} read", PATHS[i]), &dev, &data)?;
            progress();
        }
        for k in 0..PATHS.len() {
            let i = (k + rep) % PATHS.len();
            let p = PATHS[i];
            let _ = std::fs::remove_file(target(p));
            let start = Instant::now();
            write(p, &mut staging, &mut whole, pinned_bytes)?;
            if p != "limit" {
                evict(&target(p))?; // on storage: the staged paths' pages are only cached
            }
            write_times[i].push(start.elapsed().as_secs_f64());
            if p == "limit" {
                if pinned_bytes != f32_bytes(&data) {
                    return Err("limit write: the pinned buffer differs from device memory".into());
                }
            } else {
                check_file(&format!("{p} write"), &target(p), &data)?;
            }
            progress();
        }
    }
    drop(pinned);
    h5gds_runtime::pinned::release_idle();
    for p in PATHS
        .iter()
        .map(|p| target(p))
        .chain(std::iter::once(source))
    {
        let _ = std::fs::remove_file(p);
    }
    let mut out = Vec::new();
    for (p, t) in PATHS.iter().zip(read_times) {
        out.push(Measurement::throughput(
            &format!("device read {label} f32"),
            p,
            opts.bytes,
            t,
        ));
    }
    for (p, t) in PATHS.iter().zip(write_times) {
        out.push(Measurement::throughput(
            &format!("device write {label} f32"),
            p,
            opts.bytes,
            t,
        ));
    }
    Ok(out)
}
