"""kombu's own generic transport tests (``t/integration/common.py`` of the pinned sdist) run on the kmq transport.

Every class kombu's other transports run is here; what is left out, and why:
- ``BasePriority``: kmq queues have no priorities (a partition is read in order); the transport ignores ``priority``.
- ``BaseEventLoop``: the transport is synchronous (``implements.asynchronous`` is False, so Celery drives it from
  its synloop); ``register_with_event_loop`` does nothing, so a hub's ``run_once`` never drains it.
"""

from __future__ import annotations

import pytest
from t.integration.common import (  # type: ignore[import-not-found]
    BaseExchangeTypes,
    BaseFailover,
    BaseMessage,
    BaseTimeToLive,
    BasicFunctionality,
)

pytestmark = pytest.mark.timeout(120)


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
