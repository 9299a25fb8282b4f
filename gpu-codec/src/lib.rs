//! Compressed HDF5 chunks decoded on the GPU with NVIDIA nvCOMP, with no HDF5 binding of its
//! own: shared by array-io (which reads raw chunks through hdf5-metno) and the Python extension
//! (which reads them through h5py's HDF5). The caller supplies each chunk's stored bytes
//! ([`decode::ChunkSource`]); this crate takes the filters' stored formats from `h5gds_chunk_codec::format`, calls
//! nvCOMP ([`nvcomp`]) and places decoded chunks into the output ([`decode`]).
//! `h5gds_route::route::gpu_decode` decides when this path is taken.

pub mod decode;
pub mod device;
pub mod nvcomp;

pub use device::DeviceFailure;
