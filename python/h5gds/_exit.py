"""Interpreter exit while daemon threads (a DataLoader's, ``h5gds.batches``' consumers) still read:
from its exit hook on, the main thread holds h5py's lock (``phil``) for good.

Without it, two things go wrong at exit. h5py's own exit hook (``unregister_converters``, registered
when h5py is imported, so run after this one) calls HDF5 without the lock while daemon threads call
HDF5 under it, and HDF5 is not thread-safe: a daemon's ``H5Iis_valid`` crashed in ``H5CX_pop``
beside the main thread's ``H5Tunregister``. And a daemon thread that CPython ends (before 3.14, it
ends with ``pthread_exit`` a thread taking the GIL back once finalization began) inside ``with
phil:`` never releases the lock: the main thread's teardown of h5py's objects, which takes it,
then waits forever.

Held by the main thread (the lock is reentrant), the lock lets its teardown through; daemon
threads that ask for it wait until the process ends. (An exit hook registered before h5gds was
imported that waits for a thread needing h5py's lock would wait forever.)"""

import atexit

from h5py._objects import phil


def _hold_phil():
    # Waits (with the GIL released) for a daemon thread inside the lock to leave it.
    phil.acquire()


atexit.register(_hold_phil)
