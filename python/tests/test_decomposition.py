"""The collective calls' decomposition (comm=) without MPI: the boxes and errors
h5gds._collective takes from the engine (_native.tiles_*, as array-io's collective does), worded
by the engine for both faces. test_mpi.py runs the writes under mpirun."""

import re

import pytest

from h5gds import _collective, _native


def test_reads_split_the_leading_axis_or_a_near_square_grid():
    assert _collective.tile_of((7, 3), 2, 3) == (slice(4, 7), slice(0, 3))
    assert _collective.tile_of((5, 7, 2), 3, 4, "grid") == (slice(2, 5), slice(3, 7), slice(0, 2))
    assert [_native.tiles_grid(p) for p in (1, 2, 4, 6, 7, 9)] == \
        [(1, 1), (2, 1), (2, 2), (3, 2), (7, 1), (3, 3)]
    assert [_native.tiles_share(10, 4, r) for r in range(4)] == [(0, 2), (2, 5), (5, 7), (7, 10)]


@pytest.mark.parametrize("args, message", [
    (((), 0, 2, "nonsense"), "the dataset is a scalar (no axis to split)"),
    (((4, 4), 0, 3, (2, 2)), "a 2 x 2 grid has 4 blocks, but there are 3 ranks"),
    (((4,), 0, 4, "grid"), "a 2-D grid needs at least 2 dimensions; the array has 1"),
    (((4,), 0, 4, "rows"), "decomposition='rows': accepted are None"),
])
def test_read_errors_are_value_errors_naming_the_shapes_and_ranks(args, message):
    # The wording is the engine's (h5gds_engine::tiles, its unit tests cover the write errors).
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        _collective.tile_of(*args)
