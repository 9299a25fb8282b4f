"""Programs the remote-file tests (test_remote.py) run in child interpreters under HDF5_DRIVER=gds.

Usage: python remote_scenarios.py COMMAND URL

  refuse    tries every write mode of h5py.File on URL; prints one line per mode
  missing   opens URL for reading and prints the error's class, errno and message
  replaced  opens URL, reads /compact, prints READY, waits for a line on stdin (the test replaces
            the object meanwhile), then reads /contiguous and prints what happened
  fork      opens URL, reads /compact, forks; the child reads /contiguous (a runtime and client of
            its own) and prints its digest
"""

import hashlib
import os
import sys

import h5py


def refuse(url):
    for mode in ("r+", "a", "w", "w-", "x"):
        try:
            h5py.File(url, mode).close()
        except OSError as err:
            print(f"REFUSED {mode} {type(err).__name__} errno={err.errno}: {err}")
        else:
            print(f"OPENED {mode}")


def missing(url):
    try:
        h5py.File(url, "r").close()
    except OSError as err:
        print(f"ERROR {type(err).__name__} errno={err.errno}: {err}")
    else:
        print("OPENED")


def replaced(url):
    with h5py.File(url, "r") as f:
        f["compact"][()]
        print("READY", flush=True)
        sys.stdin.readline()
        try:
            data = f["contiguous"][()]
        except OSError as err:
            print(f"FAILED {type(err).__name__}: {err}")
        else:
            print(f"READ {hashlib.sha256(data.tobytes()).hexdigest()}")


def fork(url):
    with h5py.File(url, "r") as f:
        f["compact"][()]
        parent = hashlib.sha256(f["contiguous"][()].tobytes()).hexdigest()
        pid = os.fork()
        if pid == 0:
            try:
                child = hashlib.sha256(f["contiguous"][:700_000].tobytes()).hexdigest()
                print(f"CHILD {child}", flush=True)
                os._exit(0)
            except BaseException as err:  # the child must never return into the test's stack
                print(f"CHILD FAILED {err}", flush=True)
                os._exit(1)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"child status {status}"
        print(f"PARENT {parent}")
        print(f"PARENT-PART {hashlib.sha256(f['contiguous'][:700_000].tobytes()).hexdigest()}")


if __name__ == "__main__":
    command, target = sys.argv[1], sys.argv[2]
    {"refuse": refuse, "missing": missing, "replaced": replaced, "fork": fork}[command](target)
