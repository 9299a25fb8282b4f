"""The global arrays of the MPI tests: the same values in the MPI programs (each rank's tile) and in
the pytest process (the whole array h5py must read)."""

import numpy as np


def pattern(dtype, shape):
    i = np.arange(int(np.prod(shape)), dtype=np.uint64)
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        values = (i % 2048).astype(np.float64) * 0.25
    elif dtype.kind == "b":
        values = i % 3 == 0
    else:
        values = (i * np.uint64(2654435761)) >> np.uint64(7)
    return values.astype(dtype).reshape(shape)
