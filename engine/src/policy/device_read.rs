//! The order of a read into device memory, written once for both faces:
//!
//! 1. **stored**: a read-only file's dataset (`crate::stored::Stored`) read with no HDF5 call
//!    into pinned host memory on the host's threads, then copied up ([`read_stored`]), where the
//!    driver would stage the read anyway ([`staged_anyway`]), it is at most [`STORED_MAX`], no
//!    byte is checked nor converted on the host, and compressed chunks are decoded faster on the
//!    host than on the GPU;
//! 2. else compressed chunks decoded on the GPU with nvCOMP or by h5gds on the host's threads,
//!    where `gpu_decoded::decoder` says ([`read`]);
//! 3. else `route::plan`'s verdict for each block: straight through the `gds` driver (HDF5 hands
//!    it the device pointer) or staged through pinned host buffers that HDF5 fills.
//!
//! A read whose blocks' routes mix (unfiltered chunks the cache does not take, some of them never
//! written) moves each block its own way: the written chunks straight through the driver, those
//! never written staged so that HDF5 fills them. Staging the whole read for one chunk never
//! written (what the extension did) would move every written byte through host memory, the slow
//! way this project exists to avoid; the cost of moving blocks apart is one H5Dread per touched
//! chunk, and a chunk the route takes straight is larger than the dataset's chunk cache. A
//! selection with steps greater than 1 is staged whole (its blocks are not boxes of the array).
//!
//! Each way taken is one debug line naming it `way=<name>` (`stored`, `direct`, `staged`,
//! `host-decoded`, `gpu-decoded`), target `h5gds::engine`, in these words whichever face called.

use crate::chunks::Hdf5Lock;
use crate::decoded::Decoded;
use crate::device::{
    decoded_on_gpu, decoded_on_host, direct, fill_never_written, first_staged, pieces, spanned,
    staged_read, staged_whole, through_hdf5, DeviceMemory, OnDevice, Selected, Step,
};
use crate::facts::StoredLayout;
use crate::gpu_decoded::{self, CompressedRead};
use crate::policy::settings::CallSettings;
use crate::staged::NotBool;
use crate::stored::Stored;
use crate::Error;
use h5gds::VfdSettings;
use h5gds_chunk_codec::{Decoding, Hyperslab, Pipeline, RawChunks};
use h5gds_route::route::{blocker, data_blocker, plan, Decoder, Route, Storage, Transfer};
use h5gds_route::select::Block;
use h5gds_runtime::settings::DevicePath;
use h5gds_runtime::{cuda, pinned};

/// The largest read into device memory the stored way takes (read whole into pinned host memory,
/// then copied up); larger ones go through the driver, whose staged path overlaps the file reads
/// with the copies.
pub(crate) const STORED_MAX: usize = 16 << 20;

/// Why a read of `nbytes` into device memory would be staged through pinned host memory anyway
/// (the file is open with `other_driver`; `path` is `H5GDS_USE_VFD_GDS=0`; or the driver's
/// settings `vfd` stage device transfers), so the stored way may take it. None where the driver is
/// to take it: the read is larger than [`STORED_MAX`], `path` asks for the `gds` driver
/// (`H5GDS_USE_VFD_GDS=1`), or the driver could give GPUDirect Storage here. `vfd` is asked only
/// under `H5GDS_USE_VFD_GDS` unset.
pub(crate) fn staged_anyway<'s, E>(
    nbytes: usize,
    other_driver: Option<&str>,
    path: DevicePath,
    vfd: impl FnOnce() -> Result<&'s VfdSettings, E>,
) -> Result<Option<String>, E> {
    if nbytes > STORED_MAX {
        return Ok(None);
    }
    if let Some(driver) = other_driver {
        return Ok(Some(format!(
            "the file is open with the {driver} driver, which reads only into host memory"
        )));
    }
    Ok(match path {
        DevicePath::Staged => Some("H5GDS_USE_VFD_GDS=0 stages device reads".into()),
        DevicePath::Gds => None,
        DevicePath::Auto => h5gds::device_transfers_staged(vfd()?),
    })
}

/// Step 1 of the order for what a face keeps of a dataset (`Kept::read`: its `stored` storage,
/// its file open with `other_driver` where not `gds`): reads `sel` into `out`
/// with no HDF5 call where the stored way takes it, true then; false where the driver or HDF5 is
/// to read it, nothing read.
pub(crate) fn read_stored(
    stored: &Stored,
    other_driver: Option<&str>,
    sel: &Hyperslab,
    out: &DeviceMemory,
    settings: &CallSettings,
) -> Result<bool, Error> {
    let facts = Transfer {
        checked_bytes: out.bools,
        other_driver: other_driver.map(str::to_string),
        ..Transfer::default()
    };
    stored_way(
        || Ok(Some(stored)),
        (sel, out, &facts, out.path()?),
        settings,
    )
}

/// Step 1 of the order: reads `sel` into device memory `out` with no HDF5 call where the stored
/// way takes it (see the module's doc), into pinned host memory on the host's threads, then
/// copied up; true then. False where the next steps are to read it, nothing read. `stored`: the
/// dataset's storage where its file is read-only, asked only where the driver would stage the
/// read; `facts`: the transfer's, under the device `path` the settings ask for.
pub(crate) fn stored_way<'a>(
    stored: impl FnOnce() -> Result<Option<&'a Stored>, Error>,
    (sel, out, facts, path): (&Hyperslab, &DeviceMemory, &Transfer, DevicePath),
    settings: &CallSettings,
) -> Result<bool, Error> {
    let nbytes = out.nbytes;
    if nbytes == 0 || data_blocker(facts).is_some() {
        return Ok(false);
    }
    let vfd = || settings.get();
    let other = facts.other_driver.as_deref();
    let Some(staged) = staged_anyway(nbytes, other, path, vfd)? else {
        return Ok(false);
    };
    let Some(stored) = stored()? else {
        return Ok(false);
    };
    stored.check(sel, nbytes).map_err(Error::invalid)?;
    if let Some((filters, chunk)) = stored.filtered_chunks() {
        // With another driver the stored chunks still reach the GPU, read by the host's threads
        // (`gpu_decoded::host_reads`); with H5GDS_USE_VFD_GDS=0 nothing does.
        let blocker = (path == DevicePath::Staged).then(|| staged.clone());
        let choice = gpu_decoded::decoder(CompressedRead {
            filters,
            chunk,
            selection: sel,
            item: stored.element(),
            blocker,
            // A stored dataset resolves only with a pipeline h5gds decodes (`Stored::resolve`).
            host: Ok(()),
            host_threads: settings.nthreads()?,
        });
        let (choice, _) = choice.map_err(|e| Error::invalid(e.to_string()))?;
        if choice != Some(Decoder::Host) {
            return Ok(false);
        }
    }
    let Some(parts) = stored.serves(sel).map_err(Error::invalid)? else {
        return Ok(false);
    };
    let threads = || vfd().map(|v| v.nthreads).map_err(|e| e.to_string());
    let threads = stored.threads_for(nbytes, &parts, &threads)?;
    let words = format_args!("{PINNED}, read with no HDF5 call: {staged}");
    verdict(stored.name(), nbytes as u64, &spanned(sel), "stored", words);
    let mut host = pinned::Taken::new(nbytes);
    // SAFETY: the buffer holds at least `nbytes` bytes and is this call's alone.
    let buffer = unsafe { std::slice::from_raw_parts_mut(host.as_mut_ptr(), nbytes) };
    stored.read_served(sel, &parts, buffer, threads)?;
    let (to, from) = (out.address as usize, host.as_mut_ptr() as usize);
    // SAFETY: `out` holds `nbytes` of device memory in its context (the face's contract); the
    // pinned buffer holds them, and the copy has finished when this returns.
    unsafe { cuda::copy_any(out.context, to, from, nbytes) }?;
    Ok(true)
}

/// What steps 2 and 3 of a read are decided over.
pub(crate) struct ReadRoute<'a> {
    /// The dataset's name, for the verdict lines.
    pub dataset: &'a str,
    /// How the dataset is stored: HDF5's words (filtered chunks: where they are decoded is asked
    /// first), and route's (`device::storage`).
    pub layout: &'a StoredLayout,
    pub storage: &'a Storage,
    pub facts: &'a Transfer,
    /// The device path the settings ask for (`H5GDS_USE_VFD_GDS`).
    pub path: DevicePath,
    /// How h5gds decodes filtered chunks on the host's threads, or why it cannot (the face's
    /// verdict).
    pub host: Result<&'a Pipeline, String>,
}

/// Steps 2 and 3 of the order: reads the selection into device memory, each part its way:
/// compressed chunks decoded on the GPU or by h5gds on the host's threads where
/// `gpu_decoded::decoder` says, else as `route::plan` says for each block. Every copy has
/// finished when this returns.
///
/// # Safety
/// `io.address` must hold the selection's elements in the prepared memory type, in writable
/// device memory the driver takes (one allocation of a device this process sees), alive for the
/// call.
pub(crate) unsafe fn read<L: Hdf5Lock>(
    face: &OnDevice<L>,
    io: &Selected,
    route: &ReadRoute,
) -> Result<(), Error> {
    let (sel, item, name) = (&io.selection, io.item, route.dataset);
    let region = spanned(sel);
    let bytes = |block: &Block| block.len() * item as u64;
    let direct_words = format_args!("straight into device memory through the gds driver");
    let refuse = |n| Error::from(n).in_dataset(face.name);
    let bools = (route.facts.checked_bytes).then_some(&refuse as &dyn Fn(NotBool) -> Error);
    let routes = plan(route.storage, &region, blocker(route.facts));
    let compressed = match route.layout {
        StoredLayout::Chunked { chunk, filters, .. } if !filters.is_empty() => {
            Some((chunk, filters))
        }
        _ => None,
    };
    if let Some((chunk, filters)) = compressed {
        let threads = face.driver()?.nthreads;
        // Stored chunks the host's threads read reach the GPU without the driver: a file open
        // with sec2 blocks the driver's path, not decoding on the GPU.
        let direct_file = || face.stored_chunks(chunk, 0).ok()?.direct_file();
        let other = route.facts.other_driver.as_deref();
        let reads = gpu_decoded::host_reads(route.path, other, face.driver()?, direct_file);
        let blocker = match reads {
            Some(_) => data_blocker(route.facts),
            None => blocker(route.facts),
        };
        let (choice, words) = gpu_decoded::decoder(CompressedRead {
            filters: &filters.iter().map(|f| f.id).collect::<Vec<_>>(),
            chunk,
            selection: sel,
            item,
            blocker,
            host: route.host.as_ref().map(drop).map_err(Clone::clone),
            host_threads: threads,
        })?;
        super::say(format_args!("h5gds.read {name:?}: {words}"));
        match (choice, &route.host) {
            (Some(Decoder::Gpu(codec)), _) => {
                // SAFETY: as the caller guarantees.
                let decoded = unsafe { decoded_on_gpu(face, io, (chunk, codec, reads), &region) };
                let (missing, words) = decoded?;
                let words =
                    format_args!("into device memory: {words} (filled through pinned host memory)");
                verdict(name, bytes(&region), &region, "gpu-decoded", words);
                return fill_never_written(face, io, &region, &missing, bools);
            }
            (Some(Decoder::Host), Ok(pipeline)) => {
                let reason = first_staged(&routes);
                let reason = reason.as_deref().unwrap_or("its chunks are compressed");
                let words = format_args!(
                    "{PINNED}, its chunks decoded by h5gds on the host's threads: {reason}"
                );
                verdict(name, bytes(&region), &region, "host-decoded", words);
                let how = Decoding {
                    pipeline,
                    chunk,
                    element_size: item,
                    threads,
                };
                let tell = |done: &Decoded| super::say(format_args!("h5gds.read {name:?}: {done}"));
                return decoded_on_host(face, io, &how, bools, &tell);
            }
            _ => {}
        }
    }
    let split = routes.len() > 1 && sel.step.iter().all(|&s| s == 1);
    if !split {
        let Some(reason) = first_staged(&routes) else {
            verdict(name, bytes(&region), &region, "direct", direct_words);
            // SAFETY: as the caller guarantees.
            return unsafe { direct(face, io, &region, None) };
        };
        let words = format_args!("{PINNED}: {reason}");
        verdict(name, bytes(&region), &region, "staged", words);
        let (pieces, mut ring) = staged_whole(face, io)?;
        let all = Block::whole(sel.count);
        return staged_read(face, io, &mut ring, (&all, &pieces, Step::Staged), bools);
    }
    let (mut ring, mut said) = (None, Vec::new());
    let piece_bytes = through_hdf5(face, io)?;
    let buffer = (piece_bytes / item as u64).max(1) as usize * item;
    for (block, way) in &routes {
        let Route::Staged(reason) = way else {
            verdict(name, bytes(block), block, "direct", direct_words);
            // SAFETY: as the caller guarantees; the block is a box of the region.
            unsafe { direct(face, io, &region, Some(block)) }?;
            continue;
        };
        // The first three reasons of a split read are said.
        if !said.contains(&reason) && said.len() < 3 {
            verdict(
                name,
                bytes(block),
                block,
                "staged",
                format_args!("{PINNED}: {reason}"),
            );
            said.push(reason);
        }
        let (pieces, _) = pieces(block.len(), piece_bytes, item, &[]);
        // One ring for every staged block, its buffers sized for the whole region's pieces.
        let ring = match &mut ring {
            Some(ring) => ring,
            None => ring.insert(face.ring(buffer, pieces.len())?),
        };
        let inside = block.relative_to(&region.start);
        staged_read(face, io, ring, (&inside, &pieces, Step::Staged), bools)?;
    }
    Ok(())
}

/// How the ways through pinned host memory begin their words.
const PINNED: &str = "into device memory through pinned host memory";

/// Writes the verdict line of `block` (file coordinates, `bytes` long) of a read of `dataset` into
/// device memory: it went `way` (`stored`, `direct`, `staged`, `host-decoded`, `gpu-decoded`),
/// as `words` say.
fn verdict(dataset: &str, bytes: u64, block: &Block, way: &str, words: std::fmt::Arguments<'_>) {
    let (start, count) = (&block.start, &block.count);
    super::say(format_args!(
        "h5gds.read {dataset:?}: {bytes} bytes {words} (way={way}; elements {start:?} + \
         {count:?})"
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use h5gds::CompatMode;

    #[test]
    fn a_read_is_staged_anyway_past_another_driver_or_by_the_settings_and_only_small_ones() {
        let on = VfdSettings {
            compat_mode: CompatMode::On,
            ..VfdSettings::default()
        };
        let vfd = || Ok::<_, ()>(&on);
        let sec2 = staged_anyway(4096, Some("sec2"), DevicePath::Gds, vfd).unwrap();
        assert!(sec2.is_some_and(|why| why.contains("the sec2 driver")));
        let off = staged_anyway(4096, None, DevicePath::Staged, vfd).unwrap();
        assert!(off.is_some_and(|why| why.contains("H5GDS_USE_VFD_GDS=0")));
        let compat = staged_anyway(4096, None, DevicePath::Auto, vfd).unwrap();
        assert!(compat.is_some_and(|why| why.contains("compat_mode=on")));
        assert!(staged_anyway(4096, None, DevicePath::Gds, vfd)
            .unwrap()
            .is_none());
        let big = staged_anyway(STORED_MAX + 1, Some("sec2"), DevicePath::Staged, vfd);
        assert!(big.unwrap().is_none());
        // The driver's settings are not asked where the device path decides.
        let never = || -> Result<&VfdSettings, ()> { panic!("asked") };
        assert!(staged_anyway(4096, None, DevicePath::Gds, never)
            .unwrap()
            .is_none());
    }
}
