//! The raw chunk calls of h5py's HDF5: a chunk's stored bytes read and written as stored, its
//! location, and the whole chunk index. The caller holds h5py's lock.

use super::{api, stack, Hid, H5P_DEFAULT};
use h5gds_runtime::hdf5::{hsize_t, HADDR_UNDEF};
use std::ffi::{c_int, c_uint, c_void};

/// The stored size, filter mask and file address of the chunk whose first element is `offset`, or
/// `None` when it was never written.
pub fn chunk_location(
    dataset: Hid,
    offset: &[u64],
) -> Result<Option<h5gds_chunk_codec::StoredChunk>, String> {
    let api = api()?;
    let info_by_coord = api.H5Dget_chunk_info_by_coord?;
    let (mut mask, mut addr, mut size): (c_uint, u64, hsize_t) = (0, HADDR_UNDEF, 0);
    // SAFETY: `offset` has one entry per dimension of the dataset (the caller's chunk grid);
    // the out-pointers are valid.
    let status =
        unsafe { info_by_coord(dataset, offset.as_ptr(), &mut mask, &mut addr, &mut size) };
    if status < 0 {
        return Err(format!(
            "H5Dget_chunk_info_by_coord for the chunk at {offset:?} failed: {}",
            stack(api)
        ));
    }
    Ok(
        (addr != HADDR_UNDEF && size > 0).then_some(h5gds_chunk_codec::StoredChunk {
            size: size as usize,
            mask,
            address: addr,
        }),
    )
}

/// Reads the stored (still compressed) bytes of the chunk at `offset` into `buf`, device
/// memory when the file is open with the `gds` driver; returns the chunk's filter mask. HDF5 2.x
/// has `H5Dread_chunk2`, which also takes the buffer's size; 1.14 `H5Dread_chunk`.
///
/// # Safety
/// `buf` must be valid for writes of `size` bytes, the chunk's stored size.
pub unsafe fn read_chunk(
    dataset: Hid,
    offset: &[u64],
    buf: *mut c_void,
    size: usize,
) -> Result<u32, String> {
    let api = api()?;
    let mut mask = 0u32;
    let mut len = size;
    // SAFETY: `offset` has one entry per dimension; `buf` as the caller guarantees (HDF5 2.x
    // also refuses a chunk larger than `len`).
    let status = unsafe {
        match (api.H5Dread_chunk2, api.H5Dread_chunk) {
            (Ok(read), _) => read(
                dataset,
                H5P_DEFAULT,
                offset.as_ptr(),
                &mut mask,
                buf,
                &mut len,
            ),
            (Err(_), Ok(read)) => read(dataset, H5P_DEFAULT, offset.as_ptr(), &mut mask, buf),
            (Err(missing), Err(_)) => return Err(format!("{missing} (nor H5Dread_chunk)")),
        }
    };
    if status < 0 {
        return Err(format!(
            "H5Dread_chunk for the chunk at {offset:?} failed: {}",
            stack(api)
        ));
    }
    Ok(mask)
}

/// Writes `size` stored (already filtered) bytes at `buf` as the chunk at `offset`, with filter
/// mask 0 (every filter applied).
///
/// # Safety
/// `buf` must be valid for reads of `size` bytes.
pub unsafe fn write_chunk(
    dataset: Hid,
    offset: &[u64],
    buf: *const c_void,
    size: usize,
) -> Result<(), String> {
    let api = api()?;
    let write = api.H5Dwrite_chunk?;
    // SAFETY: `offset` has one entry per dimension of the dataset (the caller's chunk grid);
    // `buf` as the caller guarantees.
    let status = unsafe { write(dataset, H5P_DEFAULT, 0, offset.as_ptr(), size, buf) };
    if status < 0 {
        return Err(format!(
            "H5Dwrite_chunk for the chunk at {offset:?} failed: {}",
            stack(api)
        ));
    }
    Ok(())
}

/// Every allocated chunk of `dataset` (chunks of `chunk` elements): its stored size, filter mask
/// and address by first element (`H5Dchunk_iter`, one call for the whole index).
pub fn chunk_index(dataset: Hid, chunk: &[u64]) -> Result<h5gds_chunk_codec::ChunkIndex, String> {
    struct Found {
        rank: usize,
        chunks: h5gds_chunk_codec::ChunkListing,
    }
    unsafe extern "C" fn visit(
        offset: *const hsize_t,
        mask: c_uint,
        addr: u64,
        size: hsize_t,
        data: *mut c_void,
    ) -> c_int {
        // Never unwind into HDF5: a panic stops the iteration as a failure.
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: `data` is the `Found` the caller passed, alive for the call.
            let found = unsafe { &mut *data.cast::<Found>() };
            // SAFETY: HDF5 passes one offset per axis of the dataset.
            let offset = unsafe { std::slice::from_raw_parts(offset, found.rank) };
            if addr != HADDR_UNDEF && size > 0 {
                found.chunks.add(
                    offset,
                    h5gds_chunk_codec::StoredChunk {
                        size: size as usize,
                        mask,
                        address: addr,
                    },
                );
            }
            0
        }))
        .unwrap_or(-1)
    }
    let api = api()?;
    let iterate = api.H5Dchunk_iter?;
    let mut found = Found {
        rank: chunk.len(),
        chunks: h5gds_chunk_codec::ChunkListing::new(chunk),
    };
    // SAFETY: a dataset id; the callback and its data as declared above.
    let status = unsafe {
        iterate(
            dataset,
            H5P_DEFAULT,
            visit,
            (&raw mut found).cast::<c_void>(),
        )
    };
    if status < 0 {
        return Err(format!("H5Dchunk_iter failed: {}", stack(api)));
    }
    Ok(found.chunks.finish())
}
