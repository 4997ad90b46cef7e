"""kmq.tune_gc: the collector's settings for a process that handles messages (pure: no broker)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from kmq import tune_gc
from kmq.heap import YOUNG_THRESHOLD


@pytest.fixture(autouse=True)
def _collector_restored() -> Iterator[None]:
    """The test process's collector is left as it was found."""
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_it_raises_the_young_threshold_only_and_freezes_what_set_up_left() -> None:
    gc.set_threshold(700, 10, 10)
    tune_gc()
    assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10)
    assert gc.get_freeze_count() > 0


def test_it_never_lowers_a_threshold_the_program_raised() -> None:
    gc.set_threshold(50_000, 20, 20)
    tune_gc()
    assert gc.get_threshold() == (50_000, 20, 20)


def test_garbage_left_by_set_up_is_collected_not_frozen() -> None:
    class Node:
        def __init__(self) -> None:
            self.me = self  # a cycle: only the cyclic collector frees it

    node = Node()
    alive = weakref.ref(node)
    del node
    tune_gc()
    assert alive() is None


def test_a_threshold_below_one_allocation_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="young_threshold must be >= 1 allocation, got 0"):
        tune_gc(0)
