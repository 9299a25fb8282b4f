//! `h5gds.read` of compressed chunks into device memory, decoded on the GPU: the h5py side of
//! the engine's GPU-decoded read (`h5gds_engine::gpu_decoded`, which array-io uses too). Each needed chunk's stored bytes are
//! found and read raw by the engine's source (`h5gds_engine::chunks` over h5py's HDF5, through
//! `hdf5::stored_chunks`) into device memory through the `gds` driver (or, where the driver
//! would stage them anyway, by the host's threads from the file), nvCOMP decodes them and the
//! decoded chunks are placed into the output array on the device. Chunks never written are
//! read through pinned host memory, where HDF5 fills them with the fill value, as array-io
//! does. `h5gds_route::route::gpu_decode` decides when this path is taken.

use crate::error::DeviceError;
use crate::hdf5::{self, Hid, Prepared};
use cudarc::driver::CudaContext;
use h5gds_engine::gpu_decoded;
use h5gds_engine::staged;
use h5gds_gpu_codec::decode::{Decoding, HostReads};
use h5gds_route::route::{Block, GpuCodec};
use h5gds_route::select::{chunks_touching, staging_pieces};
use h5gds_runtime::cuda::{self, DeviceContext};

/// One compressed read: the dataset, its chunks' codec and shape, the region (file
/// coordinates, steps of 1) and the device array holding it in row-major order.
pub struct CompressedRead<'a> {
    pub dataset: Hid,
    pub name: &'a str,
    pub codec: GpuCodec,
    pub chunk: &'a [u64],
    pub element_size: usize,
    pub region: &'a Block,
    pub dest: u64,
    /// The array's context (its device's, for the codec's cudarc context).
    pub context: DeviceContext,
    pub staging_size: usize,
}

/// Reads the region, decoding its allocated chunks on the GPU (the engine's
/// `gpu_decoded::read`), the stored chunks read by the host's threads where `host_reads` says
/// (else through the driver), then the chunks never written; returns, in words, how many chunks
/// moved compressed and how, and how many were never written. The caller has made the device's
/// primary context current and holds h5py's lock.
pub fn read(
    r: &CompressedRead,
    host_reads: Option<HostReads>,
    prepared: &Prepared,
) -> Result<String, DeviceError> {
    let failed = DeviceError::Failed;
    let lib = h5gds_gpu_codec::nvcomp::library().map_err(failed)?;
    let verify = h5gds_runtime::settings::verify_checksums()
        .map_err(|e| DeviceError::Argument(e.to_string()))?;
    let touched = chunks_touching(r.region, r.chunk);
    let mut source = hdf5::stored_chunks(r.dataset, r.name, r.chunk, touched.len(), failed)?;
    let index = source.index_of(r.chunk, touched.into_iter().map(|(offset, _)| offset))?;
    let context = cuda::call("making the array's device's context", || {
        CudaContext::new(r.context.device as usize)
    })?;
    let how = Decoding {
        lib,
        codec: r.codec,
        chunk: r.chunk,
        element_size: r.element_size,
        verify,
        host_reads,
    };
    let stream = context.default_stream();
    let decoded = gpu_decoded::read(&source, &index, &how, r.region, r.dest, &stream)?;
    let (es, per) = (
        r.element_size,
        (r.staging_size / r.element_size).max(1) as u64,
    );
    let missing = &decoded.missing;
    if let Some(largest) = missing.iter().map(Block::len).max() {
        // Through pinned host memory, where HDF5 fills them with the fill value.
        let mut ring = staged::thread_ring(r.context, &staging_pieces(largest, per, &[]), es)?;
        let never = |m| failed(format!("H5Dread of the chunk never written failed: {m}"));
        let to = (r.dest, es, per);
        staged::fill_never_written(&mut ring, prepared, missing, r.region, to, None, never)?;
    }
    Ok(decoded.words)
}
