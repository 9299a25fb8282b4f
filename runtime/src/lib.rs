//! h5gds-runtime: the low-level crate beneath the `gds` driver. The driver, `route` and the
//! crates around them (the Python extension, the GPU codec, array-io, the benchmarks) share what
//! is here without depending on the driver itself: CUDA through one wrapper of cudarc's result
//! layer ([`cuda`]) and cuFile's results decoded beside it ([`cufile`]), the device ranges seen so far ([`device_ranges`]) and the buffers known to be host
//! memory without asking ([`known_host`]), HDF5 functions resolved
//! at run time from the HDF5 copies in the process, one binding per copy ([`hdf5`]), one table of
//! every `H5GDS_*` setting ([`settings`]), libcufile and libnvcomp loaded once ([`libraries`]), the process-wide thread pools ([`pool`]), pinned host buffers kept for staging ([`pinned`]) and the ring of them that stages pieces between files and devices ([`staging_ring`]), this process's id without a system call ([`process`]), stream-ordered copies for code that holds cudarc
//! streams ([`stream`]), and byte sizes as the settings write them ([`size`]).

pub mod cuda;
pub mod cufile;
pub mod device_ranges;
pub mod hdf5;
pub mod known_host;
pub mod libraries;
pub mod pinned;
pub mod pool;
pub mod process;
pub mod settings;
pub mod size;
pub mod staging_ring;
pub mod stream;
