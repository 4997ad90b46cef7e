"""What crosses a process boundary pickled (``kmq worker --processes``: a child's recipe; ``--handler-processes``:
a handler's outcome) round-trips, as the package runs: a frozen dataclass compiled by mypyc (setup.py's HOT_PATH)
does not unpickle, so none of these may move into a compiled module."""

from __future__ import annotations

import pickle

import pytest

from kmq.config import Config
from kmq.worker.backoff import Backoff
from kmq.worker.handler_runner import RETURNED, TIMED_OUT, Outcome
from kmq.worker.pool import WorkerRecipe
from tests.unit.test_compiled import hot_path

CROSSING = [
    WorkerRecipe(Config(bootstrap_servers="127.0.0.1:9", client_id="w"), ("orders", "emails"), "app:handle",
                 concurrency=4, backoff=Backoff(base_s=0.5, max_s=20.0), time_limit_s=3.0),
    Backoff(base_s=2.0, max_s=60.0),
    Outcome("failed", detail="ValueError: no", traceback="Traceback ..."),
    RETURNED,
    TIMED_OUT,
]


@pytest.mark.parametrize("value", CROSSING, ids=lambda v: type(v).__name__)
def test_what_a_child_process_is_sent_or_sends_back_round_trips(value: object) -> None:
    assert pickle.loads(pickle.dumps(value, pickle.HIGHEST_PROTOCOL)) == value


@pytest.mark.parametrize("value", CROSSING, ids=lambda v: type(v).__name__)
def test_what_crosses_a_process_boundary_is_not_compiled(value: object) -> None:
    assert type(value).__module__ not in hot_path(), (
        f"{type(value).__name__} is pickled across processes: mypyc's frozen dataclasses do not unpickle")
