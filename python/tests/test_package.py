"""The h5gds Python package as installed from its wheel (scripts/test.sh builds the wheel, installs
it into a fresh environment, .venv-wheel, and runs these tests there): the driver registered into
h5py's own HDF5, driver="gds" with keyword settings, h5gds.read / h5gds.write against h5py's own
results, their errors, h5gds.info() against `h5gds info --json`, threads."""

import json
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import h5py
import numpy as np
import pytest

import h5gds
from h5gds import _native
from support import PLUGIN_DIR, ROOT, assert_ran, clean_env  # tests/python, on the path by conftest.py


def child(code, timeout=120, **env):
    """Runs `code` in a child interpreter of this environment (no HDF5 or h5gds variable but `env`);
    returns the finished process."""
    return subprocess.run([sys.executable, "-c", code], env=clean_env(env), capture_output=True, text=True,
                          timeout=timeout)


# --- the wheel ---------------------------------------------------------------------------------------------

def test_the_package_comes_from_the_installed_wheel():
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    assert Path(h5gds.__file__).resolve().parent == site / "h5gds"
    assert Path(_native.__file__).resolve().parent == site / "h5gds"


def test_the_extension_links_no_libhdf5_and_no_libpython():
    dynamic = subprocess.run(["readelf", "-d", _native.__file__], capture_output=True, text=True, check=True).stdout
    needed = [line for line in dynamic.splitlines() if "(NEEDED)" in line]
    assert needed, dynamic
    assert not [line for line in needed if "hdf5" in line or "python" in line], needed


def test_the_driver_joined_h5pys_own_hdf5():
    libs = Path(h5py.__file__).resolve().parent.parent / "h5py.libs"
    library = Path(h5gds.HDF5_LIBRARY).resolve()
    assert library.parent == libs.resolve() and library.name.startswith("libhdf5-"), library
    assert h5gds._driver.DRIVER_ID is not None  # registered by this import (no plugin path here)
    assert "gds" in h5py.registered_drivers()


# --- driver="gds" ------------------------------------------------------------------------------------------

IMPORT_ORDERS = {
    "h5py first": "import h5py\nimport h5gds\n",
    "h5gds first": "import h5gds\nimport h5py\n",
    "h5gds only": "import h5gds\nh5py = h5gds.h5py\n",
}


@pytest.mark.parametrize("order", IMPORT_ORDERS)
def test_either_import_order_registers_the_driver(tmp_path, order):
    path = tmp_path / "order.h5"
    code = IMPORT_ORDERS[order] + (
        "import numpy as np\n"
        f"with h5py.File({str(path)!r}, 'w', driver='gds', nthreads=3) as f:\n"
        "    f['x'] = np.arange(12, dtype='i4')\n"
        f"with h5py.File({str(path)!r}, 'r', driver='gds') as f:\n"
        "    print(f['x'][:].tolist())\n")
    proc = child(code, H5GDS_LOG="info")
    assert_ran(proc, "the import order child")
    assert proc.stdout.strip() == str(list(range(12)))
    # Both opens went through gds: the driver logs each open, with the keyword's source.
    assert proc.stderr.count(f'opened "{path}"') == 2, proc.stderr
    assert "nthreads=3 (config string)" in proc.stderr, proc.stderr


def test_keywords_reach_the_driver_and_the_log_line_shows_them(tmp_path):
    path = tmp_path / "log.h5"
    proc = child("import h5gds, h5py\n"
                 f"h5py.File({str(path)!r}, 'w', driver='gds', compat_mode='on', task_size='8M', nthreads=2,"
                 " bounce_buffer_size=65536, direct_io=False).close()\n", H5GDS_LOG="info")
    assert_ran(proc, "the keyword child")
    line = next(l for l in proc.stderr.splitlines() if f'opened "{path}"' in l)
    for expected in ("compat_mode=on (config string)", "task_size=8M (config string)", "nthreads=2 (config string)",
                     "bounce_buffer_size=64K (config string)", "direct_io=off (config string)",
                     "2 threads for requests of 8M or more"):
        assert expected in line, line


def test_environment_variables_keep_working_and_keywords_win(tmp_path):
    path = tmp_path / "env.h5"
    proc = child("import h5gds, h5py\n"
                 f"h5py.File({str(path)!r}, 'w', driver='gds').close()\n"
                 f"h5py.File({str(path)!r}, 'r', driver='gds', nthreads=4).close()\n",
                 H5GDS_LOG="info", H5GDS_NTHREADS="5", H5GDS_TASK_SIZE="1M")
    assert_ran(proc, "the environment child")
    first, second = [l for l in proc.stderr.splitlines() if f'opened "{path}"' in l]
    assert "nthreads=5 (environment (H5GDS_NTHREADS))" in first, first
    assert "nthreads=4 (config string)" in second and "task_size=1M (environment (H5GDS_TASK_SIZE))" in second, second


def test_files_written_through_gds_are_byte_identical_to_sec2(tmp_path):
    rng = np.random.default_rng(7)
    data = {"contiguous": rng.standard_normal((300, 70)), "ints": np.arange(100_000, dtype="<i8")}
    files = {}
    for driver, settings in (("gds", {"nthreads": 2, "task_size": "4K"}), (None, {})):
        files[driver] = tmp_path / f"{driver or 'sec2'}.h5"
        with h5py.File(files[driver], "w", driver=driver, **settings) as f:
            for name, value in data.items():
                f[name] = value
            f.create_dataset("chunked", data=data["ints"].reshape(1000, 100), chunks=(64, 16), compression="gzip")
    assert files["gds"].read_bytes() == files[None].read_bytes()
    with h5py.File(files["gds"], "r", driver="gds", nthreads=2, task_size="4K") as f:
        for name, value in data.items():
            assert np.array_equal(f[name][...], value)
        assert np.array_equal(f["chunked"][...], data["ints"].reshape(1000, 100))


def test_an_unknown_keyword_raises_type_error_naming_it_and_the_accepted_ones(tmp_path):
    path = tmp_path / "never.h5"
    with pytest.raises(TypeError) as err:
        h5py.File(path, "w", driver="gds", nthread=4)
    text = str(err.value)
    assert "'nthread'" in text
    for key in h5gds.SETTING_KEYS:
        assert key in text, text
    assert not path.exists()


@pytest.mark.parametrize("setting, value, accepted", [
    ("nthreads", 0, "an integer from 1 to 256"),
    ("nthreads", 2.5, "an integer from 1 to 256"),
    ("nthreads", True, "an integer from 1 to 256"),
    ("nthreads", -3, "an integer from 1 to 256"),
    ("nthreads", 2**80, "an integer from 1 to 256"),
    ("compat_mode", "maybe", "auto, on, off"),
    ("compat_mode", "on,nthreads=4", "auto, on, off"),
    ("task_size", "3T", "a size from 4K to 1G"),
    ("task_size", "2G", "a size from 4K to 1G"),
    ("bounce_buffer_size", None, "a size from 4K to 1G"),
    ("direct_io", "sometimes", "off, on, auto"),
])
def test_a_bad_value_raises_value_error_naming_the_setting_and_accepted_values(tmp_path, setting, value, accepted):
    path = tmp_path / "never.h5"
    with pytest.raises(ValueError) as err:
        h5py.File(path, "w", driver="gds", **{setting: value})
    text = str(err.value)
    assert setting in text and accepted in text, text
    if isinstance(value, bool):  # named as written, not as the config string spells it ("on")
        assert f"invalid value {value} for {setting}" in text, text
    assert not path.exists()


def test_boolean_keywords_mean_on_and_off(tmp_path):
    assert _native.config_string({"direct_io": True, "compat_mode": False}) == "direct_io=on,compat_mode=off"
    assert _native.config_string({"nthreads": 8, "task_size": "8M"}) == "nthreads=8,task_size=8M"
    assert _native.config_string({"nthreads": np.int64(3), "task_size": np.uint32(65536)}) == \
        "nthreads=3,task_size=65536"


# --- h5gds.info() ------------------------------------------------------------------------------------------

def cli():
    """The `h5gds` command built by the Rust tests (H5GDS_CLI, else target/{debug,release}/h5gds)."""
    if "H5GDS_CLI" in os.environ:
        return Path(os.environ["H5GDS_CLI"])
    built = [p for p in (ROOT / "target" / "debug" / "h5gds", ROOT / "target" / "release" / "h5gds") if p.is_file()]
    assert built, "build the h5gds command first (cargo build -p h5gds-cli)"
    return max(built, key=lambda p: p.stat().st_mtime)


def test_info_is_what_h5gds_info_json_prints(monkeypatch):
    monkeypatch.setenv("H5GDS_TASK_SIZE", "8M")
    monkeypatch.setenv("H5GDS_PLUGIN_DIR", str(ROOT / "target" / "nowhere"))
    ours = h5gds.info()
    theirs = json.loads(subprocess.run([str(cli()), "info", "--json"], capture_output=True, text=True, check=True,
                                       env={**os.environ}).stdout)
    assert set(theirs) <= set(ours), set(theirs) - set(ours)
    for key in ("cuda", "cufile", "settings", "settings_error", "verdict", "gds_plugins"):
        assert ours[key] == theirs[key], key
    task = next(s for s in ours["settings"] if s["key"] == "task_size")
    assert task == {"key": "task_size", "env": "H5GDS_TASK_SIZE", "value": "8M",
                    "source": "environment (H5GDS_TASK_SIZE)"}
    assert Path(ours["plugin"]) == Path(_native.__file__)
    assert ours["python"] == {"hdf5_library": h5gds.HDF5_LIBRARY, "registered_here": True,
                              "other_gds_driver": None}


def test_info_reports_an_invalid_environment_setting(monkeypatch):
    monkeypatch.setenv("H5GDS_NTHREADS", "lots")
    report = h5gds.info()
    assert "H5GDS_NTHREADS" in report["settings_error"] and "1 to 256" in report["settings_error"]
    assert report["verdict"]["host"].startswith("files will not open")


def test_another_hdf5_loaded_and_initialised_first_does_not_capture_the_driver(tmp_path):
    # Another wheel's private HDF5 (as PyTables or netCDF4 would bring): the one of the project's
    # other h5py environment (.venv with HDF5 2.x, .venv-114 with 1.14), loaded and initialised
    # before h5py. The driver must still join h5py's own HDF5.
    ours = Path(h5gds.HDF5_LIBRARY).resolve()
    candidates = [libs for env in (".venv", ".venv-114")
                  for libs in sorted((ROOT / env).glob("lib/python3*/site-packages/h5py.libs"))]
    other_libs = [libs for libs in candidates if ours.name not in [p.name for p in libs.glob("libhdf5-*.so*")]]
    assert other_libs, f"scripts/setup.sh creates .venv and .venv-114; none holds an HDF5 other than {ours}"
    other = [sorted(other_libs[0].glob(f"{name}-*.so*")) for name in ("libaec", "libsz", "libhdf5")]
    assert all(len(found) == 1 for found in other), other
    other = [found[0] for found in other]
    path = tmp_path / "two.h5"
    code = (f"import ctypes\nloaded = [ctypes.CDLL(lib) for lib in {[str(p) for p in other]!r}]\n"
            "assert loaded[-1].H5open() >= 0\n"
            "import h5gds, h5py, numpy as np\n"
            "print(h5gds.HDF5_LIBRARY)\n"
            f"with h5py.File({str(path)!r}, 'w', driver='gds', nthreads=3) as f:\n"
            "    f['x'] = np.arange(10)\n"
            f"with h5py.File({str(path)!r}, 'r') as f:\n"
            "    h5gds.read(f['x'])\n"
            "    print(h5gds.read(f['x'], sel=slice(2, 9, 3)).tolist())\n")
    proc = child(code, H5GDS_LOG="info")
    assert_ran(proc, "the child with another HDF5 loaded first")
    library, values = proc.stdout.split("\n")[:2]
    assert Path(library).resolve() == Path(h5gds.HDF5_LIBRARY).resolve(), library
    assert values == "[2, 5, 8]"
    assert f'opened "{path}"' in proc.stderr and "nthreads=3 (config string)" in proc.stderr, proc.stderr


def test_the_plugin_already_loaded_through_hdf5_plugin_path_is_used(tmp_path):
    # HDF5_DRIVER=gds with h5gds's plugin on HDF5_PLUGIN_PATH: h5py's HDF5 loads the plugin when it
    # initialises; importing h5gds then leaves that registration in place and driver="gds" uses it.
    assert (PLUGIN_DIR / "libh5gds.so").is_file(), "cargo build --release -p h5gds-vfd"
    path = tmp_path / "plugin.h5"
    code = ("import h5py, numpy as np\n"
            f"h5py.File({str(path)!r}, 'w').close()\n"  # HDF5_DRIVER=gds: loads the plugin
            "import h5gds\n"
            "print(h5gds._driver.DRIVER_ID)\n"
            f"with h5py.File({str(path)!r}, 'w', driver='gds', nthreads=2) as f:\n"
            "    f['x'] = np.arange(5)\n"
            "    print(h5gds.read(f['x']).tolist())\n")
    proc = child(code, H5GDS_LOG="info", HDF5_PLUGIN_PATH=str(PLUGIN_DIR), HDF5_DRIVER="gds")
    assert_ran(proc, "the child with the plugin loaded first")
    assert proc.stdout.split() == ["None", "[0,", "1,", "2,", "3,", "4]"], proc.stdout
    opens = [line for line in proc.stderr.splitlines() if f'opened "{path}"' in line]
    assert "(config string)" not in opens[0], opens  # the first, through HDF5_DRIVER
    assert "nthreads=2 (config string)" in opens[-1], opens  # then through driver="gds"


def test_another_driver_registered_as_gds_is_refused_with_advice(tmp_path):
    # As vfd-gds would appear: HDF5's sec2 class, copied, renamed "gds" with value 512 and
    # registered in h5py's HDF5 before h5gds is imported.
    path = tmp_path / "refused.h5"
    code = ("import ctypes, h5py\n"
            "from h5py import h5\n"
            "lib = ctypes.CDLL(h5.__file__)\n"  # its lookups reach h5py's own HDF5
            "lib.H5FD_get_class.restype = ctypes.c_void_p\n"
            "lib.H5FDregister.restype = ctypes.c_int64\n"
            "from h5py import h5fd\n"
            "sec2 = lib.H5FD_get_class(ctypes.c_int64(h5fd.SEC2))\n"
            "other = ctypes.create_string_buffer(ctypes.string_at(sec2, 336), 336)\n"
            "name = ctypes.c_char_p(b'gds')\n"
            "ctypes.c_int.from_buffer(other, 4).value = 512\n"
            "ctypes.c_void_p.from_buffer(other, 8).value = ctypes.cast(name, ctypes.c_void_p).value\n"
            "assert lib.H5FDregister(other) >= 0\n"
            "import h5gds\n"
            "print(h5gds.info()['python']['other_gds_driver'])\n"
            "try:\n"
            f"    h5py.File({str(path)!r}, 'w', driver='gds')\n"
            "except OSError as err:\n"
            "    print('REFUSED', err)\n")
    proc = child(code)
    assert_ran(proc, "the child with another gds driver")
    other, refused = proc.stdout.splitlines()[:2]
    assert Path(other).resolve() == Path(h5gds.HDF5_LIBRARY).resolve(), other  # sec2's code lives there
    assert refused.startswith("REFUSED another HDF5 driver is registered as gds") and "vfd-gds" in refused \
        and "HDF5_PLUGIN_PATH" in refused, refused
    assert not path.exists()


def test_exit_with_open_files_and_a_warm_pool_and_a_forked_child(tmp_path):
    # The driver inside the extension module runs its I/O pool like the plugin: a forked child
    # gets a working pool, and the process exits cleanly with files left open.
    path = tmp_path / "exit.h5"
    code = ("import os, h5gds, h5py, numpy as np\n"
            f"f = h5py.File({str(path)!r}, 'w', driver='gds', nthreads=4, task_size='4K')\n"
            "f['x'] = np.arange(1 << 20, dtype='f8')\n"
            "f.flush()\n"
            "assert np.array_equal(h5gds.read(f['x'], sel=slice(0, None, 2)), np.arange(0, 1 << 20, 2.0))\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    ok = np.array_equal(h5gds.read(f['x']), np.arange(1 << 20, dtype='f8'))\n"
            "    os._exit(0 if ok else 3)\n"
            "_, status = os.waitpid(pid, 0)\n"
            "print('CHILD', os.waitstatus_to_exitcode(status))\n"
            "g = h5py.File(f.filename, 'r', driver='gds', nthreads=4, task_size='4K')\n"
            "print(g['x'][-1])\n")  # exits with both files open
    proc = child(code, timeout=120)
    assert_ran(proc, "the exit and fork child")
    assert proc.stdout.split() == ["CHILD", "0", str(float((1 << 20) - 1))], proc.stdout
    assert without_fork_warning(proc.stderr) == "", proc.stderr


def test_exit_while_a_daemon_thread_reads(tmp_path):
    # CPython before 3.14 ends a daemon thread that takes the GIL back after exit began with
    # pthread_exit, whose forced unwind runs through the extension's frames: they must unwind with
    # the unwinder glibc uses (the wheel's module links libgcc_s; one linked with zig's own
    # libunwind crashed at exit 10 times in 10).
    path = tmp_path / "daemon.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(1 << 22, dtype="f4").reshape(4096, 1024)
    code = ("import threading, time, h5gds, h5py\n"
            f"f = h5py.File({str(path)!r}, 'r')\n"
            "d = f['x']\n"
            "def rows():\n"
            "    i = 0\n"
            "    while True:\n"
            "        h5gds.read(d, sel=i % 4096)\n"
            "        i += 1\n"
            "threading.Thread(target=rows, daemon=True).start()\n"
            "time.sleep(0.3)\n"
            "print('EXIT', flush=True)\n")
    for _ in range(3):
        proc = child(code, timeout=120)
        assert proc.returncode == 0 and proc.stdout == "EXIT\n", (proc.returncode, proc.stdout, proc.stderr)


#: Children of test_exit_while_daemon_threads_gather (issue 42 measured 200: H5GDS_EXIT_RUNS=200).
EXIT_RUNS = int(os.environ.get("H5GDS_EXIT_RUNS", "16"))

EXIT_WHILE_GATHERING = """\
import sys, threading, time
import numpy as np
import h5gds, h5py
rng = np.random.default_rng(int(sys.argv[3]))
files = [h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r+")]
def gather(dset, into):
    rows = [rng.integers(-4096, 4096, 256) for _ in range(4)]
    out = np.empty((256, 1024), dtype="f4")
    while True:
        for sel in rows:
            h5gds.read(dset, out=out, sel=sel) if into else h5gds.read(dset, sel=sel)
def epochs(dset):
    while True:
        for batch in h5gds.batches(dset, 512):
            pass
for n, (f, name) in enumerate([(0, "contiguous"), (0, "chunked"), (1, "contiguous"), (1, "chunked")]):
    threading.Thread(target=gather, args=(files[f][name], n % 2 == 0), daemon=True).start()
threading.Thread(target=epochs, args=(files[0]["chunked"],), daemon=True).start()
time.sleep(rng.uniform(0.01, 0.3))
print("EXIT", flush=True)
"""


def test_exit_while_daemon_threads_gather(tmp_path):
    # Four daemon threads gathering rows (into `out=` arrays and new ones; contiguous and chunked;
    # from a read-only file, served with no HDF5 call, and from one open for writing, read by
    # H5Dread under h5py's lock) and one iterating h5gds.batches when the interpreter exits, at a
    # random moment: no run may crash (h5py's exit hook calling HDF5 beside a daemon's HDF5 call)
    # or hang (h5py's lock held by a daemon thread CPython ended), nor print an error.
    data = np.arange(1 << 22, dtype="f4").reshape(4096, 1024)
    paths = [tmp_path / "read.h5", tmp_path / "write.h5"]
    for path in paths:
        with h5py.File(path, "w") as f:
            f["contiguous"] = data
            f.create_dataset("chunked", data=data, chunks=(64, 1024))
    failures = []
    for run in range(EXIT_RUNS):
        try:
            proc = subprocess.run([sys.executable, "-c", EXIT_WHILE_GATHERING, *map(str, paths), str(run)],
                                  env=clean_env({}), capture_output=True, text=True, timeout=30)
        except subprocess.TimeoutExpired:
            failures.append((run, "hung", ""))
        else:
            if proc.returncode != 0 or proc.stdout != "EXIT\n" or proc.stderr:
                failures.append((run, f"exit status {proc.returncode}", proc.stderr[-2000:]))
        if len(failures) == 3:  # enough to tell (a hang costs the whole timeout)
            break
    hangs = sum(1 for _, what, _ in failures if what == "hung")
    assert not failures, (f"{len(failures) - hangs} crashed, {hangs} hung in {run + 1} runs", failures)


#: Python 3.12+ warns when a process with more than one thread forks (here: the pool's threads), which is
#: true; `warnings` prints the line, and on 3.13+ the source line `pid = os.fork()` under it.
FORK_WARNING = re.compile(r"<string>:\d+: DeprecationWarning: This process \(pid=\d+\) is multi-threaded, use of "
                          r"fork\(\) may lead to deadlocks in the child\.\n(?:  pid = os\.fork\(\)\n)?")


def without_fork_warning(stderr):
    """`stderr` less Python 3.12+'s warning about fork() in a multi-threaded process (once at most); before
    3.12, `stderr` as it is."""
    if sys.version_info < (3, 12):
        return stderr
    return FORK_WARNING.sub("", stderr, count=1)
