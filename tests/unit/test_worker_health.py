"""WorkerHealth: a queue this worker holds no partition of, while records wait for its group, is reported past the
bound (/readyz), then as a reason to restart (/livez); a queue with nothing waiting is not."""

from __future__ import annotations

from dataclasses import dataclass

from kmq._kafka.group_view import GroupView
from kmq.config import Config
from kmq.topic_sets import TopicSet
from kmq.worker.health import WorkerHealth

CONFIG = Config(bootstrap_servers="fake:9092", unassigned_unhealthy_ms=30_000, unassigned_exit_ms=120_000)


@dataclass
class Member:
    queue: str
    idle_s: float = 0.0
    topics: TopicSet = CONFIG.default_topics

    def held_nothing_for_s(self) -> float:
        return self.idle_s


class Admin:
    def __init__(self) -> None:
        self.waiting_records: dict[str, int | None] = {}
        self.asked: list[str] = []

    def view(self, group: str, topic: str, timeout_s: float) -> GroupView | None:
        return None

    def waiting(self, group: str, topic: str, timeout_s: float) -> int | None:
        self.asked.append(group)
        return self.waiting_records.get(group)


def test_a_queue_left_without_partitions_while_records_wait_is_not_ready_then_not_live() -> None:
    members, admin, now = [Member("a"), Member("b")], Admin(), [0.0]
    health = WorkerHealth(CONFIG, lambda: members, admin, lambda: now[0])
    admin.waiting_records = {"kafka-mq-b": 12}
    assert health.ready() is None and admin.asked == [], "holding partitions: the group is not asked"
    members[1].idle_s = 45.0
    assert health.ready() == ("holds no partition of queue 'b' while 12 records wait for its group 'kafka-mq-b', "
                              "for 45 s")
    assert health.live() is None, "not yet a reason to restart"
    members[1].idle_s = 121.0
    assert (health.live() or "").endswith("for 121 s")
    admin.waiting_records = {"kafka-mq-b": 0}
    now[0] = 10.0  # past the cache: asked again
    assert health.ready() is None and health.live() is None, "nothing waits: an idle member is not blamed"
