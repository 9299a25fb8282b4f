//! The one engine of dataset reads and writes, beneath array-io (its `ndarray`/cudarc face) and
//! the Python extension (its pyo3 face), so that each way of moving a dataset is written once.
//! It holds no `ndarray`, pyo3 nor HDF5 binding of its own: it calls HDF5 through the table a
//! face hands it (`h5gds_runtime::hdf5::Hdf5Api`), and the faces convert their arrays and errors.
//! It holds the collective decomposition ([`tiles`]) and the collective write's protocol over a
//! communicator each face implements ([`collective`]), the plan of a gather of rows ([`rows`]),
//! what HDF5 says about a stored dataset
//! ([`facts`]) and the HDF5 side of stored chunks ([`chunks`]), the reads
//! of a dataset whose storage cannot change, with no HDF5 call ([`stored`]), one checked
//! transfer through HDF5 ([`transfer`]), the reads whose chunks h5gds decodes on the host's cores
//! ([`decoded`]), where chunks bound for device memory are decoded ([`gpu_decoded`]), the staged
//! path through pinned host buffers ([`staged`]), one transfer between a dataset and device
//! memory, each of those ways run, the GPU-decoded read among them ([`device`]), the compressed
//! writes whose chunks h5gds encodes on the host's cores ([`encoded`]) or on the GPU
//! ([`gpu_encoded`]), and the order every read and write takes, with its verdict lines ([`policy`]).
//! Both faces call its dataset handle ([`Dataset`]: one [`Selection`] type, reads as the policy
//! decides). Every failure is one [`Error`]: a kind for the faces to map, and the facts it names.

pub mod chunks;
pub mod collective;
pub mod dataset;
pub mod decoded;
pub(crate) mod device;
pub(crate) mod encoded;
pub mod error;
pub mod facts;
pub(crate) mod gpu_decoded;
pub(crate) mod gpu_encoded;
pub mod policy;
pub mod rows;
pub mod staged;
pub mod stored;
pub mod tiles;
pub mod transfer;

pub use dataset::{Dataset, Hdf5Lock, Kept, ReadInto, Selection, WriteFrom};
pub use device::DeviceMemory;
pub use error::{Error, Facts, Kind as ErrorKind, Result};
pub use gpu_encoded::DeviceArray;
pub use policy::files::opening;
pub use policy::write::{CompressedWrite, Memory};
