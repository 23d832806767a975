"""The cycle collector's pause: nested pauses leave it to the outermost, and an error still ends it."""

from __future__ import annotations

import gc

import pytest

from patched_wheels.base.gcpause import cycle_collection_paused


def test_cycle_collection_paused_nests_and_comes_back_on_errors() -> None:
    assert gc.isenabled()
    with cycle_collection_paused():
        assert not gc.isenabled()
        with cycle_collection_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner pause leaves it to the outer one
    assert gc.isenabled()
    with pytest.raises(RuntimeError), cycle_collection_paused():
        raise RuntimeError("fails inside")
    assert gc.isenabled()
