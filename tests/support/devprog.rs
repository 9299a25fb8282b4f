//! A program that reads and writes HDF5 datasets straight from device memory through the `gds`
//! driver, run by the device tests as a child process: on a real GPU, or on the CPU emulator
//! (whose device memory the host cannot dereference, so any host access by the driver crashes).
//!
//! `h5devprog FILE [--sizes N,N,...]`: with the driver chosen by `HDF5_DRIVER=gds`, writes
//! reference datasets from host memory, then for every size reads them into device buffers (at
//! an unaligned offset, whole and by hyperslab), writes them back from device memory, reads a
//! compact dataset and storage past end of file into device memory, and compares every byte
//! with host-side reads. Prints `DEVICE OK <checks>`; on a mismatch or error prints `FAILED: ...`
//! and exits 1.

use h5gds_bench::gpu::{init_cuda, DeviceBuffer};
use h5gds_bench::h5::{self, h5t, Layout, Selection};
use std::path::Path;

type Check<T> = Result<T, String>;

/// Reference bytes for a dataset of `len` bytes.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u32)
                .wrapping_mul(2_654_435_761)
                .rotate_left(seed as u32 % 31) as u8
                ^ seed
        })
        .collect()
}

fn expect_bytes(what: &str, got: &[u8], want: &[u8]) -> Check<()> {
    if got.len() != want.len() {
        return Err(format!(
            "{what}: {} bytes, expected {}",
            got.len(),
            want.len()
        ));
    }
    match got.iter().zip(want).position(|(g, w)| g != w) {
        None => Ok(()),
        Some(i) => Err(format!(
            "{what}: byte {i} is {:#04x}, expected {:#04x}",
            got[i], want[i]
        )),
    }
}

const PAD: usize = 3; // device buffers are used at an unaligned offset

fn run(path: &Path, sizes: &[usize]) -> Check<usize> {
    let u8_type = *h5t::H5T_NATIVE_UCHAR;
    let fapl = h5::file_access(&h5::Driver::Default)?;
    let file = h5::create_file(path, &fapl)?;
    let mut checks = 0;
    for (k, &size) in sizes.iter().enumerate() {
        let want = pattern(size, k as u8 + 1);
        let dset = h5::create_dataset(
            &file,
            &format!("d{size}"),
            *h5t::H5T_STD_U8LE,
            &[size as u64],
            Layout::Contiguous,
        )?;
        h5::write_all(&dset, u8_type, &want)?;

        // Whole dataset into device memory at an unaligned offset.
        let dev = DeviceBuffer::new(size + 2 * PAD)?;
        dev.upload(0, &vec![0xAA; size + 2 * PAD])?;
        // SAFETY: the device buffer holds size bytes from offset PAD.
        unsafe { h5::read_raw(&dset, u8_type, Selection::All, dev.at(PAD))? };
        expect_bytes(
            &format!("device read of {size} bytes"),
            &dev.download(PAD, size)?,
            &want,
        )?;
        expect_bytes("guard bytes before", &dev.download(0, PAD)?, &[0xAA; PAD])?;
        expect_bytes(
            "guard bytes after",
            &dev.download(PAD + size, PAD)?,
            &[0xAA; PAD],
        )?;
        checks += 1;

        // A hyperslab starting at an odd offset.
        if size > 10 {
            let (start, count) = ((size as u64 / 3) | 1, size as u64 / 2);
            let (start_a, count_a) = ([start], [count]);
            let sel = Selection::Slab {
                start: &start_a,
                stride: &[1],
                count: &count_a,
            };
            // SAFETY: the device buffer holds count bytes from offset PAD.
            unsafe { h5::read_raw(&dset, u8_type, sel, dev.at(PAD))? };
            let part = &want[start as usize..(start + count) as usize];
            expect_bytes(
                &format!("device hyperslab of {size}"),
                &dev.download(PAD, count as usize)?,
                part,
            )?;
            checks += 1;
        }

        // Written from device memory, read back on the host.
        let back = pattern(size, k as u8 + 101);
        dev.upload(PAD, &back)?;
        let wset = h5::create_dataset(
            &file,
            &format!("w{size}"),
            *h5t::H5T_STD_U8LE,
            &[size as u64],
            Layout::Contiguous,
        )?;
        // SAFETY: the device buffer holds size bytes from offset PAD.
        unsafe { h5::write_raw(&wset, u8_type, Selection::All, dev.at(PAD))? };
        let mut host = vec![0u8; size];
        h5::read_all(&wset, u8_type, &mut host)?;
        expect_bytes(&format!("device write of {size} bytes"), &host, &back)?;
        checks += 1;
    }

    // Compact datasets go through ctl(MEM_COPY) in both directions.
    let compact = pattern(200, 77);
    let cset = h5::create_dataset(
        &file,
        "compact",
        *h5t::H5T_STD_U8LE,
        &[200],
        Layout::Compact,
    )?;
    let dev = DeviceBuffer::new(200 + PAD)?;
    dev.upload(PAD, &compact)?;
    // SAFETY: the device buffer holds 200 bytes from offset PAD.
    unsafe { h5::write_raw(&cset, u8_type, Selection::All, dev.at(PAD))? };
    let mut host = vec![0u8; 200];
    h5::read_all(&cset, u8_type, &mut host)?;
    expect_bytes("compact write from device", &host, &compact)?;
    dev.upload(PAD, &[0u8; 200])?;
    // SAFETY: as above.
    unsafe { h5::read_raw(&cset, u8_type, Selection::All, dev.at(PAD))? };
    expect_bytes(
        "compact read into device",
        &dev.download(PAD, 200)?,
        &compact,
    )?;
    checks += 2;

    // Storage allocated but never written lies past end of file: it reads as zeros.
    let len = 300_000;
    let eset = h5::create_dataset(
        &file,
        "unwritten",
        *h5t::H5T_STD_U8LE,
        &[len as u64],
        Layout::AllocatedUnwritten,
    )?;
    let dev = DeviceBuffer::new(len)?;
    dev.upload(0, &vec![0xAA; len])?;
    // SAFETY: the device buffer holds len bytes.
    unsafe { h5::read_raw(&eset, u8_type, Selection::All, dev.at(0))? };
    expect_bytes(
        "device read past end of file",
        &dev.download(0, len)?,
        &vec![0; len],
    )?;
    checks += 1;

    // Strided selections (every 3rd byte) into and out of device memory: the driver's selection
    // callbacks take these through the vector path, piece by piece.
    let len = 30_000u64;
    let full = pattern(len as usize, 55);
    let sset = h5::create_dataset(
        &file,
        "strided",
        *h5t::H5T_STD_U8LE,
        &[len],
        Layout::Contiguous,
    )?;
    h5::write_all(&sset, u8_type, &full)?;
    let (start, stride, count) = ([1u64], [3u64], [len / 3 - 1]);
    let sel = || Selection::Slab {
        start: &start,
        stride: &stride,
        count: &count,
    };
    let every_third: Vec<u8> = full
        .iter()
        .skip(1)
        .step_by(3)
        .take(count[0] as usize)
        .copied()
        .collect();
    let dev = DeviceBuffer::new(count[0] as usize)?;
    // SAFETY: the device buffer holds one byte per selected element.
    unsafe { h5::read_raw(&sset, u8_type, sel(), dev.at(0))? };
    expect_bytes(
        "strided read into device",
        &dev.download(0, count[0] as usize)?,
        &every_third,
    )?;
    let back = pattern(count[0] as usize, 66);
    dev.upload(0, &back)?;
    // SAFETY: as above.
    unsafe { h5::write_raw(&sset, u8_type, sel(), dev.at(0))? };
    let mut host = vec![0u8; len as usize];
    h5::read_all(&sset, u8_type, &mut host)?;
    let mut want = full.clone();
    for (i, b) in back.iter().enumerate() {
        want[1 + 3 * i] = *b;
    }
    expect_bytes("strided write from device", &host, &want)?;
    checks += 2;
    drop((cset, eset, sset));
    file.close()?;
    Ok(checks)
}

/// Entry point of `h5devprog`; returns the exit code.
pub fn main() -> i32 {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!("usage: h5devprog FILE [--sizes N,N,...]");
        return 2;
    };
    let sizes: Vec<usize> = match args
        .iter()
        .position(|a| a == "--sizes")
        .and_then(|i| args.get(i + 1))
    {
        Some(list) => match list.split(',').map(str::parse).collect() {
            Ok(sizes) => sizes,
            Err(_) => {
                eprintln!("--sizes takes comma-separated byte counts");
                return 2;
            }
        },
        None => vec![1, 7, 4096, 65_536 + 13, 1 << 20, (5 << 20) + 5],
    };
    let result = init_cuda()
        .and_then(|_| h5::init(None))
        .and_then(|_| run(Path::new(path), &sizes));
    match result {
        Ok(checks) => {
            println!("DEVICE OK {checks}");
            0
        }
        Err(what) => {
            println!("FAILED: {what}");
            1
        }
    }
}
