//! Whether a read into device memory may go straight through the `gds` driver, or must go
//! through pinned host memory first.
//!
//! HDF5 hands the driver the caller's buffer untouched only when it has nothing to do to the
//! data itself (DESIGN.md, "Facts about HDF5"). It touches the buffer — fatal for a device
//! pointer — for type conversion, fill values of unallocated storage, filtered chunks, chunks
//! that fit the chunk cache, external and virtual storage, and compact data. So:
//!
//! * **direct**: contiguous datasets whose storage is allocated, and unfiltered chunked datasets
//!   chunk by chunk (allocated chunks, with the chunk cache disabled so none is cached);
//! * **staged**: everything else — filtered (compressed) chunks, chunks never written (HDF5
//!   fills them), unallocated contiguous storage, compact, external and virtual storage, type
//!   conversion, and `bool` (every byte is checked to be 0 or 1 on the host).
//!
//! Each decision is logged at debug level (`H5GDS_LOG=debug`) with its reason.

use crate::element::{describe, descriptor_of, Element};
use crate::error::{Error, Result};
use crate::file::OpenDataset;
use crate::hdf::{check, locked, Handle};
use crate::select::{chunks_touching, Block};
use hdf5::Datatype;
use hdf5_sys::h5::{haddr_t, hsize_t, HADDR_UNDEF};
use hdf5_sys::h5d::{
    H5D_layout_t, H5D_space_status_t, H5Dchunk_iter, H5Dget_create_plist, H5Dget_offset,
    H5Dget_space_status, H5Dget_type,
};
use hdf5_sys::h5p::{
    H5Pclose, H5Pget_chunk, H5Pget_external_count, H5Pget_layout, H5Pget_nfilters, H5P_DEFAULT,
};
use hdf5_sys::h5t::H5Tequal;
use std::collections::HashSet;
use std::ffi::{c_int, c_uint, c_void};

/// How the dataset's elements are stored.
#[derive(Clone, Debug)]
pub(crate) enum Storage {
    /// One block in the file; `allocated` is false until the data is written.
    Contiguous { allocated: bool },
    /// Raw data in external files, read by HDF5's own I/O.
    External,
    /// Data inside the object header.
    Compact,
    /// A virtual dataset mapping other datasets.
    Virtual,
    /// Chunks of `chunk` elements; the offsets of the allocated ones.
    Chunked {
        chunk: Vec<u64>,
        filtered: bool,
        allocated: HashSet<Vec<u64>>,
    },
}

/// The element type the caller asked for, checked against the stored one.
pub(crate) struct Types {
    /// The memory type to read with.
    pub mem: Datatype,
    /// Why HDF5 must convert (byte order, float layout, or an allowed conversion), if it must.
    pub conversion: Option<String>,
}

/// Checks the stored type against `T`: the same kind of value (byte order aside) unless
/// `allow_conversion`, in which case HDF5 must know a conversion.
pub(crate) fn check_types<T: Element>(ds: &OpenDataset, allow_conversion: bool) -> Result<Types> {
    let want = descriptor_of::<T>()?;
    let where_ = |e: hdf5::Error| Error::hdf5("describing the types", &ds.path, Some(&ds.name), e);
    locked(|| {
        let mem = Datatype::from_descriptor(&want).map_err(where_)?;
        // SAFETY: a valid dataset; the new type id is owned by the Datatype.
        let file_id = unsafe { H5Dget_type(ds.dset.id()) };
        check(file_id, "getting the stored type", &ds.path, Some(&ds.name))?;
        // SAFETY: a fresh id with reference count 1, handed over to the Datatype.
        let file: Datatype = unsafe { hdf5::from_id(file_id) }.map_err(where_)?;
        let stored_desc = file.to_descriptor().ok();
        let stored = match &stored_desc {
            Some(desc) => describe(desc),
            None => "a type array-io does not read".into(),
        };
        // SAFETY: two valid datatype ids.
        let equal = unsafe { H5Tequal(file.id(), mem.id()) } > 0;
        let same_kind = stored_desc.as_ref() == Some(&want);
        if !same_kind {
            if !allow_conversion {
                return Err(Error::TypeMismatch {
                    path: ds.path.clone(),
                    dataset: ds.name.clone(),
                    stored,
                    requested: T::NAME,
                });
            }
            if file.conv_path(&mem).is_none() {
                return Err(Error::NoConversion {
                    path: ds.path.clone(),
                    dataset: ds.name.clone(),
                    stored,
                    requested: T::NAME,
                });
            }
        }
        let conversion = match (equal, same_kind) {
            (true, _) => None,
            (false, true) => Some(format!(
                "the stored {stored} has another byte order or layout than {}, so HDF5 \
                 converts it in the buffer itself",
                T::NAME
            )),
            (false, false) => Some(format!(
                "HDF5 converts the stored {stored} to {} in the buffer itself",
                T::NAME
            )),
        };
        Ok(Types { mem, conversion })
    })
}

/// How the dataset is stored.
pub(crate) fn storage(ds: &OpenDataset) -> Result<Storage> {
    let (path, name) = (&ds.path, Some(ds.name.as_str()));
    locked(|| {
        // SAFETY: plain queries on a valid dataset and the list created here.
        unsafe {
            let dcpl = Handle::new(
                H5Dget_create_plist(ds.dset.id()),
                H5Pclose,
                "getting the creation properties",
                path,
                name,
            )?;
            match H5Pget_layout(dcpl.id()) {
                H5D_layout_t::H5D_CONTIGUOUS => {
                    let external = H5Pget_external_count(dcpl.id());
                    check(external as i64, "counting external files", path, name)?;
                    if external > 0 {
                        return Ok(Storage::External);
                    }
                    let mut status = H5D_space_status_t::H5D_SPACE_STATUS_ERROR;
                    let rc = H5Dget_space_status(ds.dset.id(), &mut status);
                    check(rc as i64, "getting the allocation status", path, name)?;
                    let offset: haddr_t = H5Dget_offset(ds.dset.id());
                    let allocated = status == H5D_space_status_t::H5D_SPACE_STATUS_ALLOCATED
                        && offset != HADDR_UNDEF;
                    Ok(Storage::Contiguous { allocated })
                }
                H5D_layout_t::H5D_COMPACT => Ok(Storage::Compact),
                H5D_layout_t::H5D_CHUNKED => {
                    let rank = ds.shape.len();
                    let mut chunk = vec![0 as hsize_t; rank.max(1)];
                    let n = H5Pget_chunk(dcpl.id(), rank as c_int, chunk.as_mut_ptr());
                    check(n as i64, "getting the chunk shape", path, name)?;
                    chunk.truncate(rank);
                    let filters = H5Pget_nfilters(dcpl.id());
                    check(filters as i64, "counting the filters", path, name)?;
                    Ok(Storage::Chunked {
                        chunk,
                        filtered: filters > 0,
                        allocated: allocated_chunks(ds)?,
                    })
                }
                H5D_layout_t::H5D_LAYOUT_ERROR => Err(Error::hdf5(
                    "getting the layout",
                    path,
                    name,
                    crate::hdf::last_error(),
                )),
                _ => Ok(Storage::Virtual),
            }
        }
    })
}

/// The offsets of the dataset's allocated chunks.
fn allocated_chunks(ds: &OpenDataset) -> Result<HashSet<Vec<u64>>> {
    struct Visit {
        rank: usize,
        offsets: HashSet<Vec<u64>>,
    }
    unsafe extern "C" fn visit(
        offset: *const hsize_t,
        _filter_mask: c_uint,
        _addr: haddr_t,
        _size: hsize_t,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: HDF5 passes `rank` offsets; `data` is the Visit passed below.
        let done = std::panic::catch_unwind(|| unsafe {
            let visit = &mut *(data as *mut Visit);
            let offsets = std::slice::from_raw_parts(offset, visit.rank).to_vec();
            visit.offsets.insert(offsets);
        });
        if done.is_ok() {
            0
        } else {
            -1
        }
    }
    let mut state = Visit {
        rank: ds.shape.len(),
        offsets: HashSet::new(),
    };
    // SAFETY: a valid chunked dataset; the callback matches H5D_chunk_iter_op_t and `state`
    // outlives the call.
    let status = unsafe {
        H5Dchunk_iter(
            ds.dset.id(),
            H5P_DEFAULT,
            Some(visit),
            (&mut state as *mut Visit).cast(),
        )
    };
    check(
        status as i64,
        "listing the allocated chunks",
        &ds.path,
        Some(&ds.name),
    )?;
    Ok(state.offsets)
}

/// How one block of a device read travels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// Straight from the file into device memory.
    Direct,
    /// Through pinned host memory, for this reason.
    Staged(String),
}

/// Plans the device read of `region` (file coordinates) of a dataset stored as `storage`.
/// `blocker`, if any, is a reason that stages the whole read (type conversion, settings).
/// Returns blocks covering `region` exactly once, each with its route.
pub(crate) fn plan(
    storage: &Storage,
    region: &Block,
    blocker: Option<String>,
) -> Vec<(Block, Route)> {
    let whole = |route: Route| vec![(region.clone(), route)];
    if let Some(reason) = blocker {
        return whole(Route::Staged(reason));
    }
    match storage {
        Storage::Contiguous { allocated: true } => whole(Route::Direct),
        Storage::Contiguous { allocated: false } => whole(Route::Staged(
            "its storage was never written, so HDF5 fills the buffer with the fill value itself"
                .into(),
        )),
        Storage::External => whole(Route::Staged(
            "its data lives in external files, which HDF5 reads itself".into(),
        )),
        Storage::Compact => whole(Route::Staged(
            "it is compact (its data lives in the object header)".into(),
        )),
        Storage::Virtual => whole(Route::Staged(
            "it is a virtual dataset, assembled by HDF5 from other datasets".into(),
        )),
        Storage::Chunked { filtered: true, .. } => whole(Route::Staged(
            "its chunks are filtered (compressed), and HDF5 decodes them in host memory".into(),
        )),
        Storage::Chunked {
            chunk, allocated, ..
        } => {
            let parts = chunks_touching(region, chunk);
            if parts.iter().all(|(offset, _)| allocated.contains(offset)) {
                return whole(Route::Direct);
            }
            parts
                .into_iter()
                .map(|(offset, part)| {
                    let route = if allocated.contains(&offset) {
                        Route::Direct
                    } else {
                        Route::Staged(format!(
                            "its chunk at {offset:?} was never written, so HDF5 fills it with \
                             the fill value itself"
                        ))
                    };
                    (part, route)
                })
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(start: &[u64], count: &[u64]) -> Block {
        Block {
            start: start.to_vec(),
            count: count.to_vec(),
        }
    }

    #[test]
    fn only_allocated_contiguous_and_unfiltered_allocated_chunks_go_direct() {
        let region = block(&[0, 0], &[4, 4]);
        let direct = vec![(region.clone(), Route::Direct)];
        assert_eq!(
            plan(&Storage::Contiguous { allocated: true }, &region, None),
            direct
        );
        for storage in [
            Storage::Contiguous { allocated: false },
            Storage::External,
            Storage::Compact,
            Storage::Virtual,
            Storage::Chunked {
                chunk: vec![2, 2],
                filtered: true,
                allocated: HashSet::new(),
            },
        ] {
            let p = plan(&storage, &region, None);
            assert_eq!(p.len(), 1);
            assert!(matches!(p[0].1, Route::Staged(_)), "{storage:?}");
        }
        let staged = plan(
            &Storage::Contiguous { allocated: true },
            &region,
            Some("type conversion".into()),
        );
        assert_eq!(staged[0].1, Route::Staged("type conversion".into()));
    }

    #[test]
    fn missing_chunks_are_staged_one_by_one() {
        let all: HashSet<Vec<u64>> = [[0, 0], [0, 2], [2, 0], [2, 2]]
            .iter()
            .map(|a| a.to_vec())
            .collect();
        let region = block(&[1, 1], &[3, 3]);
        let full = Storage::Chunked {
            chunk: vec![2, 2],
            filtered: false,
            allocated: all.clone(),
        };
        assert_eq!(
            plan(&full, &region, None),
            vec![(region.clone(), Route::Direct)]
        );
        let mut some = all;
        some.remove(&vec![2, 2]);
        let sparse = Storage::Chunked {
            chunk: vec![2, 2],
            filtered: false,
            allocated: some,
        };
        let p = plan(&sparse, &region, None);
        assert_eq!(p.len(), 4);
        assert_eq!(p.iter().map(|(b, _)| b.len()).sum::<u64>(), 9);
        let staged: Vec<&Block> = p
            .iter()
            .filter(|(_, r)| matches!(r, Route::Staged(_)))
            .map(|(b, _)| b)
            .collect();
        assert_eq!(staged, [&block(&[2, 2], &[2, 2])]);
    }
}
