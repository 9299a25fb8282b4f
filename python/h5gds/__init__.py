"""h5gds: the ``gds`` HDF5 driver for h5py.

Importing this package registers the driver into the HDF5 library h5py loaded (h5py's wheel
carries a private copy; the driver joins that copy), so that::

    h5py.File(path, "r", driver="gds", nthreads=8, compat_mode="off")

works. The keywords are the driver's settings (see ``SETTING_KEYS``); the environment variables
(``H5GDS_NTHREADS``, ...) keep working for every setting not given as a keyword.

``read(dset, out=None, sel=None)`` and ``write(dset, array, sel=None)`` move a dataset's bytes
into or out of a NumPy array with HDF5's own H5Dread/H5Dwrite (the GIL released meanwhile),
``info()`` reports what ``h5gds info --json`` prints; ``batches(dset, batch_size)`` yields shuffled batches
of rows for training loops, the next read while the current one is used.

``from_file(path, dataset, like="numpy")``, ``to_file(array, path, dataset)`` and
``from_file_batched(path, dataset, chunk_size, like="numpy")`` read and write whole arrays (or
chunks) with the semantics of array-io's functions of the same names and of Legate's
``legate.io.hdf5``; with ``comm=`` (an mpi4py communicator) they are collective, each rank writing
or reading its own tile of one file (``CollectiveError`` when ranks fail with different exception
classes), tiles in host memory (NumPy) or device memory (CuPy, PyTorch); ``local_device(comm)`` is
this rank's GPU (node-local rank modulo the device count). ``vfd_gds_compat_library()`` is the
path of ``libhdf5_vfd_gds.so.1``, vfd-gds's API on h5gds's driver (for Legate's GPU I/O).

``LazyDataset(path, dataset, like="numpy")`` is a dataset as a lazy, picklable array for Dask
(``dask.array.from_array``): each process that indexes it opens the file itself (docs/dask.md).
"""

import h5py  # h5gds joins the HDF5 library h5py loads, so h5py must be loaded first

from . import _exit  # its exit hook, registered after h5py's, runs before it

# cuFile and nvCOMP are looked for (_nvidia.prepare) at the first device transfer, not here.
from ._driver import HDF5_LIBRARY, SETTING_KEYS
from ._batches import batches
from ._collective import CollectiveError, local_device
from ._files import from_file, from_file_batched, to_file
from ._info import info
from ._io import read, write
from ._lazy import LazyDataset
from ._vfd_gds import vfd_gds_compat_library

__all__ = ["CollectiveError", "HDF5_LIBRARY", "LazyDataset", "SETTING_KEYS", "batches", "from_file", "from_file_batched", "info", "local_device",
           "read", "to_file", "vfd_gds_compat_library", "write"]
