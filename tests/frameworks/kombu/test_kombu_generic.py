"""kombu's own generic transport tests (``t/integration/common.py`` of the pinned sdist) run on the kmq transport.

Every class kombu's other transports run is here; what is left out, and why:
- ``BasePriority``: kmq queues have no priorities (a partition is read in order); the transport ignores ``priority``.
- ``BaseEventLoop``: the transport is synchronous (``implements.asynchronous`` is False, so Celery drives it from
  its synloop); ``register_with_event_loop`` does nothing, so a hub's ``run_once`` never drains it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from t.integration.common import (  # type: ignore[import-not-found]
    BaseExchangeTypes,
    BaseFailover,
    BaseMessage,
    BaseTimeToLive,
    BasicFunctionality,
)

from kmq import Config
from tests.helpers import tracker_thread
from tests.markers_io import wait_for

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module", autouse=True)
def tracker(kombu_config: Config) -> Iterator[None]:
    """A requeue (``reject(requeue=True)``, ``requeue()``) comes back through a tracker, as a new delivery: within
    kombu's tests' 5 s get once the tracker holds the markers partition (caught up)."""
    with tracker_thread(kombu_config) as running:
        assert wait_for(lambda: bool(running.partitions) and all(p.caught_up for p in running.partitions.values()),
                        timeout_s=90), "the tracker did not take the markers partition"
        yield


class TestKmqBasicFunctionality(BasicFunctionality):  # type: ignore[misc]
    pass


class TestKmqExchangeTypes(BaseExchangeTypes):  # type: ignore[misc]
    pass


class TestKmqMessage(BaseMessage):  # type: ignore[misc]
    pass


class TestKmqTimeToLive(BaseTimeToLive):  # type: ignore[misc]
    pass


class TestKmqFailover(BaseFailover):  # type: ignore[misc]
    pass
