//! One `H5Dread`/`H5Dwrite` of a hyperslab of an hdf5-metno dataset, through the engine's dataset
//! handle (`h5gds_engine::Dataset::transfer`) over the linked HDF5 (`hdf5_raw::linked_hdf5`), under
//! hdf5-metno's lock: array-io's host reads and writes, and the transfers of the benchmarks and
//! test programs. The pointer reaches HDF5 untouched, so it may be device memory the `gds` driver
//! takes; the memory type may differ from the stored one (HDF5 converts).

use crate::file::Metno;
use crate::hdf5_raw::linked_hdf5;
use h5gds_engine::Dataset as Handle;
use hdf5::{Dataset, Datatype, Result};
use std::ffi::c_void;

/// A hyperslab of a dataset: per axis the first index, the step and the count (the workspace's
/// one description of it, from the chunk codec).
pub use h5gds_chunk_codec::Hyperslab;

/// Reads `slab` of `dset` (`None`: all of it) into `nbytes` at `buffer` as its elements of
/// `mem_type` in row-major order. Ids, selection and `nbytes` are checked against HDF5 before a
/// byte moves: a mismatch is an error naming it.
///
/// # Safety
/// `buffer` must be valid for writes of `nbytes` bytes: host memory, or device memory under the
/// `gds` driver.
pub unsafe fn read(
    dset: &Dataset,
    mem_type: &Datatype,
    slab: Option<Hyperslab>,
    buffer: *mut c_void,
    nbytes: usize,
) -> Result<()> {
    // SAFETY: as the caller guarantees.
    unsafe { run(false, dset, mem_type, slab, buffer, nbytes) }
}

/// Writes `slab` of `dset` (`None`: all of it) from `nbytes` at `buffer`, checked as [`read`]
/// checks.
///
/// # Safety
/// `buffer` must be valid for reads of `nbytes` bytes: host memory, or device memory under the
/// `gds` driver.
pub unsafe fn write(
    dset: &Dataset,
    mem_type: &Datatype,
    slab: Option<Hyperslab>,
    buffer: *const c_void,
    nbytes: usize,
) -> Result<()> {
    // SAFETY: as the caller guarantees (HDF5 only reads a write's buffer).
    unsafe { run(true, dset, mem_type, slab, buffer.cast_mut(), nbytes) }
}

/// Runs the transfer through the engine's dataset handle (one checked `H5Dread`/`H5Dwrite` under
/// hdf5-metno's lock); an empty selection moves nothing.
///
/// # Safety
/// As [`read`] (or [`write`], for `write`).
unsafe fn run(
    write: bool,
    dset: &Dataset,
    mem_type: &Datatype,
    slab: Option<Hyperslab>,
    buffer: *mut c_void,
    nbytes: usize,
) -> Result<()> {
    let whole: [Vec<u64>; 3];
    let slab = match slab {
        Some(slab) => slab,
        None => {
            let dims: Vec<u64> = dset.shape().iter().map(|&d| d as u64).collect();
            whole = [vec![0; dims.len()], vec![1; dims.len()], dims];
            Hyperslab {
                start: &whole[0],
                step: &whole[1],
                count: &whole[2],
            }
        }
    };
    let handle = Handle::new(
        linked_hdf5(),
        dset.id(),
        mem_type.id(),
        mem_type.size(),
        Metno,
    );
    // SAFETY: as the caller guarantees; the handle checks `nbytes` against the selection.
    unsafe { handle.transfer(write, slab, buffer as usize, nbytes) }
        .map_err(|e| hdf5::Error::from(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hdf5_raw::{create_file, file_access, FileDriver};

    #[test]
    fn transfers_convert_select_and_refuse_a_buffer_of_another_size() {
        let dir = tempfile::tempdir().unwrap();
        let fapl = file_access(&FileDriver::Sec2).unwrap();
        let file = create_file(&dir.path().join("t.h5"), &fapl).unwrap();
        let dset = file.new_dataset::<f64>().shape([2, 3]).create("x").unwrap();
        let (f64_type, i32_type) = (
            Datatype::from_type::<f64>().unwrap(),
            Datatype::from_type::<i32>().unwrap(),
        );
        let values = [1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0];
        // SAFETY: `values` holds the dataset's 48 bytes.
        unsafe { write(&dset, &f64_type, None, values.as_ptr().cast(), 48) }.unwrap();
        // Six f64 elements are 48 bytes: a 24-byte buffer is refused, and nothing moves.
        let mut short = [0.0f64; 3];
        // SAFETY: `short` holds 24 writable bytes, as claimed.
        let err = unsafe { read(&dset, &f64_type, None, short.as_mut_ptr().cast(), 24) };
        let text = err.unwrap_err().to_string();
        assert!(text.contains("the buffer has 24 bytes"), "{text}");
        assert_eq!(short, [0.0; 3]);
        // SAFETY: `values` holds 48 readable bytes; the write claims 8 and is refused.
        let err = unsafe { write(&dset, &f64_type, None, values.as_ptr().cast(), 8) };
        assert!(err.is_err());
        // Column 1 of both rows, converted to i32 by HDF5.
        let mut column = [0i32; 2];
        let slab = Hyperslab {
            start: &[0, 1],
            step: &[1, 1],
            count: &[2, 1],
        };
        // SAFETY: `column` holds the slab's two i32 elements.
        unsafe { read(&dset, &i32_type, Some(slab), column.as_mut_ptr().cast(), 8) }.unwrap();
        assert_eq!(column, [2, 5]);
    }
}
