"""The package tests run from this directory with the wheel environment's interpreter, so that
`import h5gds` finds only the installed package; tests/python (the parent directory, holding no
h5gds) goes on the path for the helpers shared with the h5py tests (support.py)."""

import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent.parent))
