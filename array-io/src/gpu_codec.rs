//! Compressed chunks straight to the GPU, the hdf5-metno side: each allocated chunk's stored
//! (compressed) bytes are read raw by the engine's source (`crate::chunks`) into device memory
//! through the `gds` driver, and `h5gds_gpu_codec::decode` decodes them there with nvCOMP and
//! places them into the output array (the part shared with the Python extension). Chunks never
//! written are read through the staged path, where HDF5 fills them with the fill value.
//! `route::gpu_decode` decides when this path is taken.
//!
//! Integrity: a chunk that does not decode, decodes to the wrong size, or whose framing is not
//! what the filter writes fails the read with an error naming the dataset and the chunk. The
//! Adler-32 that ends every deflate chunk is not computed on the GPU (nvCOMP has no Adler-32);
//! `H5GDS_VERIFY_CHECKSUMS=1` copies each decoded deflate chunk to the host to check it.

use crate::error::{Error, Result};
use crate::file::OpenDataset;
use crate::host_staging::{read_block, Elements, HostStaging};
use crate::route::GpuCodec;
use crate::select::Block;
use cudarc::driver::{sys, CudaStream};
pub use h5gds_chunk_codec::ChunkIndex;
use h5gds_gpu_codec::decode::{self, Decoding, HostReads};
use h5gds_runtime::settings;
pub use h5gds_runtime::settings::{GPU_CODEC_ENV, VERIFY_CHECKSUMS_ENV};
use nvcomp_sys::NvcompLib;
use std::sync::Arc;

/// Why the settings turn decoding on the GPU off, if they do.
pub(crate) fn turned_off() -> Result<Option<String>> {
    Ok(settings::gpu_codec_turned_off()?)
}

/// A dataset whose chunks are decoded on the GPU: its storage, its allocated chunks, the
/// staging buffer size for the chunks never written, the device path the settings ask for, and
/// the driver's settings (read once for the read).
pub(crate) struct CompressedDataset<'a> {
    pub ds: &'a OpenDataset,
    pub storage: &'a crate::route::Storage,
    pub index: &'a ChunkIndex,
    pub staging_size: usize,
    pub device_path: crate::DevicePath,
    pub driver: &'a h5gds::VfdSettings,
}

/// Where the stored chunks are read by the host's threads ([`HostReads`]): where the driver would
/// stage them anyway (its settings, no GDS kernel path; not when `device_path` asks for the
/// driver's device path, `H5GDS_USE_VFD_GDS=1`) and HDF5 has the file open read-only through a
/// driver whose addresses are the file's offsets.
fn host_reads(
    ds: &OpenDataset,
    device_path: crate::DevicePath,
    vfd: &h5gds::VfdSettings,
) -> Result<Option<HostReads>> {
    if device_path == crate::DevicePath::Gds {
        return Ok(None);
    }
    let Some(why) = h5gds::device_transfers_staged(vfd) else {
        return Ok(None);
    };
    Ok(ds.direct_file().map(|file| HostReads {
        file,
        threads: vfd.nthreads,
        why,
    }))
}

/// Reads `region` of a dataset whose chunks use `codec` into device memory `dest` (holding the
/// region in row-major order), decoding on the GPU.
pub(crate) fn read(
    source: &CompressedDataset,
    lib: &NvcompLib,
    codec: GpuCodec,
    elements: &Elements,
    region: &Block,
    dest: sys::CUdeviceptr,
    stream: &Arc<CudaStream>,
) -> Result<()> {
    let ds = source.ds;
    let crate::route::Storage::Chunked { chunk, .. } = source.storage else {
        return Err(Error::UnsupportedDataset {
            path: ds.path.clone(),
            dataset: ds.name.clone(),
            reason: "is not chunked, so it has no chunks to decode on the GPU".into(),
        });
    };
    let how = Decoding {
        lib,
        codec,
        chunk,
        element_size: elements.size,
        verify: settings::verify_checksums()?,
        host_reads: host_reads(ds, source.device_path, source.driver)?,
    };
    let (mut present, missing) = decode::split(source.index, region, chunk);
    crate::log::debug(format_args!(
        "{}: reading {:?} (elements {:?} + {:?}): {} chunks move compressed ({codec:?}) {} and \
         are decoded on the GPU with nvCOMP; {} chunks were never written",
        ds.path.display(),
        ds.name,
        region.start,
        region.count,
        present.len(),
        HostReads::route(&how.host_reads),
        missing.len()
    ));
    // The index is listed already: the source only reads the chunks it is handed.
    let stored = ds.stored_chunks(chunk, 0)?;
    decode::read(&stored, &how, &mut present, region, dest, stream)?;
    if !missing.is_empty() {
        let es = elements.size;
        let mut staging = HostStaging::new(
            source.staging_size,
            missing
                .iter()
                .map(|b| b.len() as usize * es)
                .max()
                .unwrap_or(es),
            stream,
        );
        for part in &missing {
            read_block(ds, elements, part, region, dest, stream, &mut staging, None)?;
        }
    }
    Ok(())
}
