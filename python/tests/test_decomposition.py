"""The collective calls' decomposition (comm=) without MPI: the boxes and errors
h5gds._collective takes from the engine (_native.tiles_*, as array-io's collective does), worded
as the package words them (shapes as Python tuples). test_mpi.py runs them under mpirun."""

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
    (((), 0, 2, "nonsense"), "the dataset is a scalar (no axis to split); read it without comm="),
    (((4, 4), 0, 3, (2, 2)),
     "decomposition (2, 2): a 2 x 2 grid has 4 blocks, but there are 3 ranks"),
    (((4,), 0, 4, "grid"), "a 2-D grid needs at least 2 dimensions; the dataset has 1"),
    (((4,), 0, 4, "rows"), "decomposition='rows': accepted are None"),
])
def test_read_errors_are_value_errors_worded_for_python(args, message):
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        _collective.tile_of(*args)


def test_writes_place_tiles():
    assert _native.tiles_write_boxes([(2, 3), (0, 3), (5, 3)], None) == \
        ([7, 3], [[0, 0], [2, 0], [2, 0]])
    shape, starts = _native.tiles_write_boxes([(2, 3), (2, 1), (1, 3), (1, 1)], (2, 2))
    assert (shape, starts[3]) == ([3, 4], [2, 3])
    # A tile's byte runs: h5gds_engine::collective::tile_write's tests.


@pytest.mark.parametrize("shapes, grid, message", [
    ([(2, 3), (2, 4)], None,
     "invalid decomposition: rank 1's tile has shape (2, 4), rank 0's (2, 3): stacked along "
     "axis 0, tiles must agree on every other dimension"),
    ([(2,), (2, 1)], None,
     "invalid decomposition: rank 1's tile has 2 dimensions (2, 1), rank 0's 1 (2,)"),
    ([(), ()], None, "invalid decomposition: the tiles are scalars (no axis to stack them along); "
                     "write 1-D tiles"),
    ([(2,)] * 4, (2, 2),
     "invalid decomposition: a 2-D grid needs at least 2 dimensions; the tiles have 1"),
    ([(2, 3), (2, 1), (1, 3), (1, 2)], (2, 2),
     "invalid decomposition: rank 3's tile (grid position (1, 1)) has shape (1, 2), but its grid "
     "row's tiles have 1 rows, its grid column's 1 columns and every tile the trailing shape ()"),
    ([(2, 3)] * 3, (2, 2),
     "decomposition (2, 2): a 2 x 2 grid has 4 blocks, but there are 3 ranks"),
])
def test_write_errors_name_the_rank_worded_for_python(shapes, grid, message):
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        _native.tiles_write_boxes(shapes, grid)
