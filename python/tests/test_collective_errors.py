"""The collective calls' protocol and errors without MPI: the engine's protocol and agreements
(h5gds_engine::collective) over a stand-in communicator whose allgather returns this rank's
message among messages recorded from other calls, so each rank's verdict can be checked in one
process. test_mpi.py runs the same calls under mpirun."""

import errno

import h5py
import numpy as np
import pytest

import h5gds
from h5gds import _native


class Ranks:
    """A communicator of which this process is rank ``rank``: each allgather returns this rank's
    message among the other ranks' next messages (``others``, one list per allgather); with no
    others, a communicator of one rank. ``sent`` records this rank's messages."""

    def __init__(self, rank=0, others=()):
        self.rank, self.others, self.sent = rank, [list(o) for o in others], []

    def Get_rank(self):
        return self.rank

    def Get_size(self):
        return len(self.others[0]) + 1 if self.others else 1

    def allgather(self, mine):
        self.sent.append(mine)
        everyone = self.others.pop(0) if self.others else []
        everyone.insert(self.rank, mine)
        return everyone


def sent(error):
    """What a rank sends in an agreement where its step raised ``error`` (None: succeeded)."""
    one = Ranks()
    try:
        _native.collective_agree(one, "op", error)
    except Exception:  # noqa: BLE001 - a failed step raises on its own rank too
        pass
    return one.sent[0]


def test_a_collective_write_of_one_rank_is_an_ordinary_file_and_a_directory_is_refused(tmp_path):
    tile = np.arange(12, dtype="<i2").reshape(4, 3)
    path = tmp_path / "one.h5"
    h5gds.to_file(tile, path, "g/x", comm=Ranks())
    with h5py.File(path, "r") as f:
        assert f["g/x"].dtype == tile.dtype and (f["g/x"][()] == tile).all()
        assert f["g/x"].id.get_create_plist().get_layout() == h5py.h5d.CONTIGUOUS
    with pytest.raises(ValueError) as raised:
        h5gds.to_file(tile, tmp_path, "x", comm=Ranks())
    text = str(raised.value)
    assert text.startswith("describing the tiles failed on rank 0 of 1: ") and "is a directory" in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.h5"]


def test_every_rank_raises_the_class_of_the_kind_the_failed_ranks_share():
    missing = sent(FileNotFoundError(errno.ENOENT, "no such file"))
    # Rank 1 failed alone: rank 0, which succeeded, raises the same OSError of the same errno.
    with pytest.raises(FileNotFoundError) as raised:
        _native.collective_agree(Ranks(0, [[missing]]), "reading the tiles", None)
    assert raised.value.errno == errno.ENOENT
    assert str(raised.value).endswith(
        "reading the tiles failed on rank 1 of 2: rank 1: [Errno 2] no such file")
    assert raised.value.failures == {1: "[Errno 2] no such file"}
    # Both ranks refused a value: a ValueError naming every rank, the local one its cause.
    bad = ValueError("a bad tile")
    with pytest.raises(ValueError, match=r"^writing the tiles failed on every rank \(2\): a bad tile$") as raised:
        _native.collective_agree(Ranks(1, [[sent(ValueError("a bad tile"))]]), "writing the tiles", bad)
    assert raised.value.__cause__ is bad
    # Kinds that differ: CollectiveError, each rank's cause in `failures`.
    with pytest.raises(h5gds.CollectiveError) as raised:
        _native.collective_agree(Ranks(0, [[missing, sent(TypeError("t"))]]), "op", KeyError("k"))
    assert raised.value.failures == {0: "'k'", 1: "[Errno 2] no such file", 2: "t"}
    assert str(raised.value).startswith("op failed on ranks 0, 1, 2 of 3: rank 0: 'k'; ")
    # Every rank succeeded: nothing raised.
    assert _native.collective_agree(Ranks(1, [[sent(None)]]), "op", None) is None


def test_a_malformed_message_is_an_error_not_a_verdict():
    with pytest.raises(RuntimeError, match="the exchange between the ranks failed"):
        _native.collective_agree(Ranks(0, [[b"\x01\x07"]]), "op", None)
