"""committed_of_groups: many groups' committed offsets read a bounded number at a time, each by a reader of its own
that is closed once read, even when a read fails (a fake reader stands in for confluent-kafka's Consumer)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kmq._kafka import offsets
from kmq._kafka.offsets import GROUPS_AT_ONCE, committed_of_groups
from kmq.config import Config
from kmq.errors import KafkaClientError

TOPIC = "q.messages"


class FakeReader:
    """A consumer with a group's id: answers metadata and committed offsets, and counts how many are open at once."""

    made: ClassVar[list[FakeReader]] = []
    #: group → partition → committed offset (a partition missing: never committed).
    offsets: ClassVar[dict[str, dict[int, int]]] = {}
    failing: ClassVar[set[str]] = set()
    topic_exists: ClassVar[bool] = True
    lock = threading.Lock()
    open_now = most_open = 0

    def __init__(self, settings: dict[str, Any]) -> None:
        self.group = str(settings["group.id"])
        self.settings = settings
        self.closed = False
        self.described = 0
        with FakeReader.lock:
            FakeReader.made.append(self)
            FakeReader.open_now += 1
            FakeReader.most_open = max(FakeReader.most_open, FakeReader.open_now)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        self.described += 1
        found = {TOPIC: SimpleNamespace(error=None, partitions={0: None, 1: None, 2: None})}
        return SimpleNamespace(topics=found if self.topic_exists else {})

    def committed(self, partitions: list[TopicPartition], timeout: float = -1) -> list[TopicPartition]:
        time.sleep(0.01)  # a round trip: the reads overlap
        if self.group in self.failing:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        mine = self.offsets.get(self.group, {})
        return [TopicPartition(tp.topic, tp.partition, mine.get(tp.partition, -1001)) for tp in partitions]

    def close(self) -> None:
        assert not self.closed, "closed twice"
        self.closed = True
        with FakeReader.lock:
            FakeReader.open_now -= 1


@pytest.fixture
def readers(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[FakeReader]]:
    monkeypatch.setattr(offsets, "KafkaConsumer", FakeReader)
    FakeReader.made, FakeReader.offsets, FakeReader.failing = [], {}, set()
    FakeReader.topic_exists, FakeReader.open_now, FakeReader.most_open = True, 0, 0
    yield FakeReader


CONFIG = Config(bootstrap_servers="127.0.0.1:1", message_topic="q.messages", marker_topic="q.markers")


def test_every_group_is_read_by_a_reader_of_its_own_a_bounded_number_at_once_and_every_reader_is_closed(
        readers: type[FakeReader]) -> None:
    # Given 40 groups (more than are read at once), each having committed its own offsets, one none at all
    groups = [f"g{i}" for i in range(40)]
    readers.offsets = {f"g{i}": {0: i, 2: 100 + i} for i in range(1, 40)}

    # When they are read
    found = committed_of_groups(CONFIG, "test", groups, TOPIC)

    # Then each group's offsets come back under its name (a partition never committed left out)
    assert found == {"g0": {}, **{f"g{i}": {0: (i, None), 2: (100 + i, None)} for i in range(1, 40)}}
    # read by a reader with its group's id, the topic described once, the readers closed, never more open than allowed
    assert sorted(r.group for r in readers.made[1:]) == sorted(groups)
    assert sum(r.described for r in readers.made) == 1
    assert all(r.closed for r in readers.made)
    assert 1 < readers.most_open <= GROUPS_AT_ONCE + 1  # the describing reader is closed before the reads begin
    assert all(r.settings["reconnect.backoff.ms"] == 10 for r in readers.made)


def test_a_failing_read_raises_a_kafka_client_error_naming_its_group_and_leaves_no_reader_open(
        readers: type[FakeReader]) -> None:
    # Given 40 groups, the fifth of which the broker does not answer for
    readers.failing = {"g4"}

    # When they are read, Then the failure is the call's, naming the group
    with pytest.raises(KafkaClientError, match="committed offsets of group 'g4'"):
        committed_of_groups(CONFIG, "test", [f"g{i}" for i in range(40)], TOPIC)

    # and every reader made was closed (the reads not begun were dropped)
    assert readers.made and all(r.closed for r in readers.made)
    assert readers.open_now == 0


def test_a_topic_that_does_not_exist_has_nothing_committed_on_it_for_any_group(readers: type[FakeReader]) -> None:
    readers.topic_exists = False

    assert committed_of_groups(CONFIG, "test", ["a", "b"], TOPIC) == {"a": {}, "b": {}}
    assert len(readers.made) == 1 and readers.made[0].closed


def test_no_groups_make_no_reader(readers: type[FakeReader]) -> None:
    assert committed_of_groups(CONFIG, "test", [], TOPIC) == {}
    assert readers.made == []
