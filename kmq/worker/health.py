"""WorkerHealth: a worker holding no partition of a queue while records wait for that queue's group.

After a broker freeze a worker's consumer waits for its old session to expire before the group gives it its
partitions back (45 s by default), and a consumer can be left out of its group: meanwhile nothing of that queue is
processed here. Past ``unassigned_unhealthy_ms`` with records waiting (past the group's committed offsets), /readyz
and /healthz say so with the queue's name; past ``unassigned_exit_ms``, /livez asks for a restart. A worker with no
records waiting, or whose broker cannot say, is not blamed for it (the broker probe reports a broker that is down).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from kmq._kafka.group_view import GroupAdmin
from kmq.config import Config
from kmq.metrics_http import GROUP_CHECK_S, PROBE_TIMEOUT_S, Cached, Unassigned, first_problem
from kmq.topic_sets import TopicSet


class QueueMember(Protocol):
    """What the check reads of a queue's Consumer."""

    @property
    def queue(self) -> str: ...
    @property
    def topics(self) -> TopicSet: ...
    def held_nothing_for_s(self) -> float: ...


class WorkerHealth:
    """One check per queue consumer, built on first use (the consumers open after the endpoint binds)."""

    def __init__(self, config: Config, consumers: Callable[[], Sequence[QueueMember]], admin: GroupAdmin,
                 monotonic: Callable[[], float]) -> None:
        self._config = config
        self._consumers = consumers
        self._admin = admin
        self._monotonic = monotonic
        self._checks: list[tuple[Unassigned, Unassigned]] = []

    def _build(self) -> list[tuple[Unassigned, Unassigned]]:
        if not self._checks:
            for consumer in self._consumers():
                needed = Cached(self._waiting(consumer.queue, consumer.topics), GROUP_CHECK_S, self._monotonic)
                self._checks.append((
                    Unassigned(consumer.held_nothing_for_s, needed, self._config.unassigned_unhealthy_ms / 1000),
                    Unassigned(consumer.held_nothing_for_s, needed, self._config.unassigned_exit_ms / 1000)))
        return self._checks

    def _waiting(self, queue: str, topics: TopicSet) -> Callable[[], str | None]:
        group = topics.consumer_group(queue)

        def needed() -> str | None:
            waiting = self._admin.waiting(group, topics.messages, PROBE_TIMEOUT_S)
            if not waiting:
                return None
            return f"holds no partition of queue {queue!r} while {waiting} records wait for its group {group!r}"

        return needed

    def ready(self) -> str | None:
        """For /readyz: the first queue this worker should serve and does not, or None."""
        return first_problem(*(ready for ready, _live in self._build()))

    def live(self) -> str | None:
        """For /livez: a queue left unserved past ``unassigned_exit_ms`` (0: never), else None."""
        if self._config.unassigned_exit_ms <= 0:
            return None
        return first_problem(*(live for _ready, live in self._build()))
