"""Child-process programs for test_sec2_parity.py: each runs under whatever driver the
environment selects (HDF5_DRIVER) and prints what a user would see."""

import os
import shutil
import subprocess
import sys

import h5py
import numpy as np


def outcome(path, mode):
    """'OPENED', or the exception's class, errno and message as h5py raised it."""
    try:
        h5py.File(path, mode).close()
        return "OPENED"
    except Exception as exc:  # the class is the point of the test
        return f"{type(exc).__name__} errno={getattr(exc, 'errno', None)} :: {exc}"


def errors(directory):
    """The failed opens every h5py user meets, one line each: case, class, errno."""
    existing = os.path.join(directory, "existing.h5")
    with h5py.File(existing, "w") as f:
        f["x"] = np.arange(4)
    locked = os.path.join(directory, "locked.h5")
    with h5py.File(locked, "w") as f:
        f["x"] = np.arange(4)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import h5py, sys, time\n"
         f"f = h5py.File({locked!r}, 'r+'); print('HELD', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "HELD"
    os.symlink("target.h5", os.path.join(directory, "dangling.h5"))
    os.symlink(os.path.join("no", "such", "target.h5"), os.path.join(directory, "lost.h5"))
    os.mkfifo(os.path.join(directory, "fifo.h5"))
    cases = [
        ("missing file, r", os.path.join(directory, "missing.h5"), "r"),
        ("a dangling symbolic link, w", os.path.join(directory, "dangling.h5"), "w"),
        ("a symbolic link into a missing directory, w", os.path.join(directory, "lost.h5"), "w"),
        ("a FIFO, w", os.path.join(directory, "fifo.h5"), "w"),
        ("/dev/null, w", "/dev/null", "w"),
        ("missing directory, w", os.path.join(directory, "no", "such", "dir.h5"), "w"),
        ("existing file, x", existing, "x"),
        ("existing file, w-", existing, "w-"),
        ("a directory, r", directory, "r"),
        ("a directory, w", directory, "w"),
        ("locked file, r", locked, "r"),
        ("locked file, r+", locked, "r+"),
    ]
    try:
        for name, path, mode in cases:
            result = outcome(path, mode)
            print(f"{name}: {result.split(' :: ')[0]}")
        created = os.path.isfile(os.path.join(directory, "target.h5"))
        print(f"the dangling link's target created: {created}")
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)


def permission(directory):
    """A file the user may not read: opened after giving up root in a forked child."""
    path = os.path.join(directory, "secret.h5")
    with h5py.File(path, "w") as f:  # also loads the driver while still root
        f["x"] = np.arange(4)
    os.chmod(path, 0)
    os.chmod(directory, 0o755)
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        os.setgid(65534)
        os.setuid(65534)
        print(f"unreadable file, r: {outcome(path, 'r').split(' :: ')[0]}", flush=True)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert status == 0, status


def other_writer(directory):
    """A reader re-reading small pieces of a file another process rewrites meanwhile, file locking
    off (as on file systems without locks): what it reads before and after, through a dataset
    opened anew each time, and through one kept open."""
    path = os.path.join(directory, "shared.h5")
    with h5py.File(path, "w") as f:
        f["x"] = np.zeros(100, "i4")
    with h5py.File(path, "r") as f:
        print("before:", f["x"][:5].tolist())
        subprocess.run([sys.executable, "-c", "import h5py, numpy as np\n"
                        f"with h5py.File({path!r}, 'r+') as f: f['x'][:] = np.arange(100)"], check=True)
        print("after, opened anew:", f["x"][:5].tolist(), f["x"][7])


def rewritten_in_place(directory):
    """A file this process holds open (the lock taken) rewritten in place by another program, as
    `cp` or `shutil.copy` do (same inode, truncated and written again, no HDF5 lock): what a
    200-byte dataset and the first and last rows of a 4 MB one next to it read after each
    rewrite, through the File kept open and through a second File on the same path. Each read
    after a rewrite comes right after a small read of the same bytes before it."""
    path = os.path.join(directory, "data.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("small", data=np.full(50, 1.0, "f4"))
        f.create_dataset("large", data=np.full((1000, 1000), 1.0, "f4"))
    # The same file with other values at the same addresses.
    versions = {}
    for value in (2.0, 3.0):
        versions[value] = os.path.join(directory, f"{value}.h5")
        shutil.copyfile(path, versions[value])
        with h5py.File(versions[value], "r+") as f:
            f["small"][...] = value
            f["large"][...] = value

    def rewrite(value):
        inode = os.stat(path).st_ino
        shutil.copyfile(versions[value], path)
        assert os.stat(path).st_ino == inode, "the rewrite must keep the inode"

    def values(f):
        return [sorted(set(f["small"][...].tolist())), sorted(set(f["large"][0].tolist())),
                f["large"][0, :3].tolist(), sorted(set(f["large"][-1].tolist()))]

    with h5py.File(path, "r") as f:
        print("before:", f["small"][...][:2].tolist(), f["large"][0, :2].tolist())
        rewrite(2.0)
        print("after, same File:", *values(f))
        print("again:", f["small"][...][:2].tolist(), f["large"][0, :2].tolist())
        rewrite(3.0)
        with h5py.File(path, "r") as second:
            print("after, second File:", *values(second))


def open_once(path, mode):
    """One open, reported with its message (for refusals)."""
    print(outcome(path, mode))


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    {"errors": errors, "permission": permission, "open": open_once, "other_writer": other_writer,
     "rewritten_in_place": rewritten_in_place}[command](*args)
