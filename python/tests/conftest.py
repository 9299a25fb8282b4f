"""The package tests run from this directory with the wheel environment's interpreter, so that
`import h5gds` finds only the installed package: pytest puts this directory (no __init__.py) on the
path, never python/ above it, which holds the package's sources. tests/python (holding no h5gds)
goes on the path for the helpers shared with the h5py tests (support.py)."""

import importlib.util
import sys
import threading
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.append(str(HERE.parents[1] / "tests" / "python"))


def pytest_configure(config):
    """Refuses to run against the package's sources (python/h5gds): `import h5gds` must find the
    installed wheel. Looked up, not imported: the device tests set CUDA variables before the import."""
    found = importlib.util.find_spec("h5gds")
    if found is None or Path(found.origin).resolve().parent == HERE.parent / "h5gds":
        raise pytest.UsageError(
            f"the package tests check the installed h5gds, but `import h5gds` finds "
            f"{'nothing' if found is None else found.origin}: run them from python/tests with an "
            "interpreter that has the wheel installed (scripts/test.sh)")


@pytest.fixture
def run_in_threads():
    """``run(works, repeats)``: each of `works` in a thread of its own, all at once, each calling
    ``work(i)`` for i in range(repeats); fails naming what any thread raised, or if one still runs
    after two minutes."""
    def run(works, repeats):
        failures = []

        def guarded(work):
            def loop():
                try:
                    for i in range(repeats):
                        work(i)
                except BaseException as exc:  # reported by the main thread
                    failures.append(repr(exc))
            return loop

        threads = [threading.Thread(target=guarded(work)) for work in works]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not [t for t in threads if t.is_alive()], "a thread hung"
        assert not failures, failures
    return run


#: The device tests: device arrays over this process's libcuda, the emulator (scripts/test.sh) or a real driver.
DEVICE_TEST_FILES = ("test_device.py", "test_gpu_codec.py", "test_mpi_device.py")
#: Files holding host and device tests: the device tests' names start with the prefix.
DEVICE_TESTS_NAMED = {"test_xarray_backend.py": "test_device_", "test_remote_faces.py": "test_device_",
                      "test_face_parity.py": "test_device_"}


def _in_device_file(report):
    path, _, name = report.nodeid.partition("::")
    file = path.rsplit("/", 1)[-1]
    return file in DEVICE_TEST_FILES or (file in DEVICE_TESTS_NAMED and name.startswith(DEVICE_TESTS_NAMED[file]))


def _skip_reason(report):
    longrepr = report.longrepr
    reason = str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return reason.removeprefix("Skipped: ")


def pytest_terminal_summary(terminalreporter, config):
    """After device tests, one line saying where they ran: on the real GPU, what passed and failed there and
    how many need the emulator (skipped with device_arrays.NEEDS_EMULATOR), as scripts/test-gpu.sh counts the
    Rust device tests; on the emulator, a line saying so (no GPU was used). Nothing when no device test found
    a CUDA driver. Written at the very end (pytest_unconfigure), after pytest's own counts."""
    device_arrays = sys.modules.get("device_arrays")
    found = getattr(device_arrays, "_CUDA", None)
    if found is None:
        return
    stats = terminalreporter.stats
    passed = sum(1 for r in stats.get("passed", []) if _in_device_file(r))
    failed = len({r.nodeid for key in ("failed", "error") for r in stats.get(key, []) if _in_device_file(r)})
    skips = [_skip_reason(r) for r in stats.get("skipped", []) if _in_device_file(r)]
    for_emulator = sum(1 for reason in skips if reason.startswith(device_arrays.NEEDS_EMULATOR))
    if found.emulated:
        config._h5gds_device_line = (f"EMULATED (h5gds's CPU emulators, no GPU used): {passed} Python device tests "
                                     f"passed, {failed} failed; {len(skips)} skipped")
    else:
        config._h5gds_device_line = (f"ON THE REAL GPU: {passed} Python device tests passed, {failed} failed; "
                                     f"{for_emulator} need the emulator and were not run; {len(skips) - for_emulator} "
                                     "skipped for other reasons (pytest -rs lists them)")


def pytest_unconfigure(config):
    line = getattr(config, "_h5gds_device_line", None)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if line and reporter is not None:
        reporter.write_line(line)
