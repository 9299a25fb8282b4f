"""``to_netcdf(engine="h5gds")`` in a process that never imported h5gds: the wheel installs
``h5gds_xarray.pth`` into site-packages, which runs ``_h5gds_xarray_hook`` at every interpreter
start (docs/xarray.md). Each case runs a fresh interpreter of this environment (from a scratch
directory, so that only the installed package can be imported): what start-up imports (nothing of
h5gds, h5py, numpy or xarray), writes through h5gds's driver with xarray imported alone, other
engines and xarray's own errors untouched, a hook that leaves unexpected xarrays as they are."""

import subprocess
import sys
import sysconfig
import textwrap
import types
from pathlib import Path

import pytest

pytest.importorskip("xarray", reason="scripts/test.sh installs the [xarray] extra's packages")
pytest.importorskip("h5netcdf", reason="scripts/test.sh installs the [xarray] extra's packages")

import _h5gds_xarray_hook as hook  # noqa: E402  (installed by the wheel beside h5gds)
from support import clean_env  # noqa: E402


def fresh(tmp_path, code, **env):
    """``code`` run by a new interpreter of this environment in ``tmp_path``; its stdout's lines."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env=clean_env(env))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines(), proc.stderr


def test_the_wheel_installs_the_start_up_file_and_its_module_into_site_packages():
    site = Path(sysconfig.get_paths()["purelib"])
    assert (site / "h5gds_xarray.pth").read_text() == "import _h5gds_xarray_hook\n"
    assert Path(hook.__file__).resolve() == (site / "_h5gds_xarray_hook.py").resolve()


def test_start_up_imports_nothing_and_puts_one_finder_first(tmp_path):
    lines, _ = fresh(tmp_path, """
        import sys
        print([type(f).__name__ for f in sys.meta_path].count("XarrayWriterFinder"), type(sys.meta_path[0]).__name__)
        print(sorted({m.split(".")[0] for m in sys.modules} & {"h5gds", "h5py", "numpy", "xarray", "cuda"}))
        """)
    assert lines == ["1 XarrayWriterFinder", "[]"]
    # -X importtime lists a module's imports above it, indented deeper: the hook's line has none.
    _, timings = fresh(tmp_path, "pass", PYTHONPROFILEIMPORTTIME="1")
    names = [line.split("|")[-1] for line in timings.splitlines() if line.startswith("import time:")]
    at = [i for i, name in enumerate(names) if name.strip() == "_h5gds_xarray_hook"]
    assert len(at) == 1, timings
    depth = len(names[at[0]]) - len(names[at[0]].lstrip())
    assert at[0] == 0 or len(names[at[0] - 1]) - len(names[at[0] - 1].lstrip()) <= depth, timings
    no_site = subprocess.run([sys.executable, "-S", "-c", "import sys; print([type(f).__name__ for f in sys.meta_path])"],
                             cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert "XarrayWriterFinder" not in no_site.stdout and no_site.returncode == 0, no_site


WRITE = """
    import sys
    import numpy as np
    import xarray as xr
    ds = xr.Dataset({"t": (("time", "x"), np.arange(12.0).reshape(3, 4), {"units": "K"})},
                    coords={"x": [10, 20, 30, 40]}, attrs={"title": "hook"})
    ds.to_netcdf("other.nc", engine="h5netcdf")
    print("after h5netcdf:", sorted(m for m in sys.modules if m.split(".")[0] == "h5gds"))
    WRITE_H5GDS
    print("after h5gds:", "h5gds.xarray" in sys.modules)
    from xarray.backends import writers
    import h5gds.xarray
    print(writers.WRITEABLE_STORES["h5netcdf"] is h5gds.xarray._open_writable, writers.to_netcdf.h5gds_writes,
          writers._datatree_to_netcdf.h5gds_writes)
    # h5gds.xarray wrapped xarray's own function, not the stand-in.
    print(writers.to_netcdf.__wrapped__.__module__, hasattr(writers.to_netcdf.__wrapped__, "h5gds_deferred"))
    with xr.open_dataset("ours.nc", engine="h5netcdf") as back:
        xr.testing.assert_identical(back.load(), ds)
    print("identical")
    """


@pytest.mark.parametrize("call", ['ds.to_netcdf("ours.nc", engine="h5gds")',
                                  'ds.to_netcdf("ours.nc", "w", None, None, "h5gds")',
                                  'ds.chunk({"time": 1}).to_netcdf("ours.nc", engine="h5gds", compute=False).compute()'],
                         ids=["keyword", "positional", "dask-delayed"])
def test_to_netcdf_engine_h5gds_in_a_process_that_imported_only_xarray(tmp_path, call):
    lines, log = fresh(tmp_path, WRITE.replace("WRITE_H5GDS", call), H5GDS_LOG="info")
    assert lines == ["after h5netcdf: []", "after h5gds: True", "True True True", "xarray.backends.writers False",
                     "identical"]
    # The h5gds write opened its file through h5gds's driver; h5netcdf's did not.
    assert log.count(f'opened "{tmp_path}/ours.nc"') >= 1, log
    assert f'opened "{tmp_path}/other.nc"' not in log, log


def test_datatree_to_netcdf_engine_h5gds_in_a_fresh_process(tmp_path):
    lines, log = fresh(tmp_path, """
        import sys
        import numpy as np
        import xarray as xr
        tree = xr.DataTree.from_dict({"/": xr.Dataset({"a": ("x", np.arange(3))}),
                                      "/g": xr.Dataset({"b": ("y", np.linspace(0, 1, 5))})})
        tree.to_netcdf("tree.nc", engine="h5gds")
        print("h5gds.xarray" in sys.modules)
        with xr.open_datatree("tree.nc", engine="h5netcdf") as back:
            xr.testing.assert_identical(back.load(), tree)
        print("identical")
        """, H5GDS_LOG="info")
    assert lines == ["True", "identical"]
    assert f'opened "{tmp_path}/tree.nc"' in log, log


def test_other_engines_and_xarrays_errors_are_untouched(tmp_path):
    lines, _ = fresh(tmp_path, """
        import sys
        import xarray as xr
        ds = xr.Dataset({"a": ("x", [1, 2, 3])})
        for engine in ("nonsense", "H5GDS"):
            try:
                ds.to_netcdf("x.nc", engine=engine)
            except ValueError as exc:
                print(exc)
        try:
            ds.to_netcdf("x.nc", engine="h5gds", no_such_option=1)
        except TypeError as exc:
            print("TypeError", "no_such_option" in str(exc))
        print(sorted(m for m in sys.modules if m.split(".")[0] == "h5gds"))
        """)
    assert lines == ["unrecognized engine for to_netcdf: 'nonsense'", "unrecognized engine for to_netcdf: 'H5GDS'",
                     "TypeError True", "[]"]


def fake_xarray(root, writers_source):
    """A package ``xarray`` under ``root`` (put ahead of site-packages by PYTHONPATH) whose
    ``backends.writers`` is ``writers_source``."""
    (root / "xarray" / "backends").mkdir(parents=True)
    (root / "xarray" / "__init__.py").write_text("")
    (root / "xarray" / "backends" / "__init__.py").write_text("")
    (root / "xarray" / "backends" / "writers.py").write_text(textwrap.dedent(writers_source))
    return str(root)


def test_an_xarray_unlike_the_one_expected_is_left_as_it_is(tmp_path):
    odd = fake_xarray(tmp_path / "odd", """
        to_netcdf = 42
        def _datatree_to_netcdf(dt, engine=None):
            return ("xarray's", engine)
        """)
    lines, _ = fresh(tmp_path, """
        import sys
        from xarray.backends import writers
        print(writers.to_netcdf, writers._datatree_to_netcdf(None, engine="h5netcdf"),
              type(writers.__loader__).__name__, type(writers.__spec__.loader).__name__)
        print(sorted(m for m in sys.modules if m.split(".")[0] == "h5gds"))
        """, PYTHONPATH=odd)
    assert lines == ["42 (\"xarray's\", 'h5netcdf') SourceFileLoader SourceFileLoader", "[]"]
    broken = fake_xarray(tmp_path / "broken", "raise RuntimeError('xarray broken here')\n")
    proc = subprocess.run([sys.executable, "-c", "import xarray.backends.writers"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, env=clean_env({"PYTHONPATH": broken}))
    assert proc.returncode == 1 and proc.stderr.strip().endswith("RuntimeError: xarray broken here"), proc.stderr


def test_the_stand_ins_pass_every_other_call_to_xarrays_function():
    calls = []

    def to_netcdf(dataset, path_or_file=None, mode="w", format=None, group=None, engine=None, **kwargs):
        calls.append((dataset, path_or_file, mode, engine, kwargs))
        return "written"

    module = types.ModuleType("writers_like")
    module.to_netcdf = to_netcdf
    hook._install(module)
    stand_in = module.to_netcdf
    assert stand_in is not to_netcdf and stand_in.h5gds_deferred is to_netcdf and stand_in.__name__ == "to_netcdf"
    assert stand_in("ds", "p.nc", "a", None, None, "h5netcdf", compute=False) == "written"
    assert stand_in("ds", path_or_file="q.nc") == "written"
    assert calls == [("ds", "p.nc", "a", "h5netcdf", {"compute": False}), ("ds", "q.nc", "w", None, {})]
    hook._install(module)
    assert module.to_netcdf is stand_in  # once only
    assert hook.XarrayWriterFinder().find_spec("json") is None
