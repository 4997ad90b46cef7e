"""The Follower's groups rounds: a set's queues' committed offsets are read again once records were written to its
topics (a consumer commits as it writes Starts), and only every QUIET_OFFSETS_EVERY_S while nothing is; the groups'
members every groups round (kmq.console.topics stands in for Kafka)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from kmq.config import Config
from kmq.console import follower as follower_module
from kmq.console import topics
from kmq.console.follower import Follower
from kmq.console.model import Models
from kmq.console.workers import Ends
from kmq.topic_sets import TopicSet
from tests.unit.fakes import FakeRecord

CONFIG = Config(bootstrap_servers="127.0.0.1:1", message_topic="q.messages", marker_topic="q.markers")


class FakeKafka:
    """The set's topics (records written, read once each) and what each groups read was asked."""

    def __init__(self) -> None:
        self.written: dict[str, list[FakeRecord]] = {}
        self.calls: list[str] = []

    def write_message(self, offset: int) -> None:
        self.written.setdefault(CONFIG.message_topic, []).append(FakeRecord(CONFIG.message_topic, 0, offset))

    def records(self, topic: str) -> Iterator[Any]:
        return iter(self.written.pop(topic, []))

    def committed_offsets(self, _config: Config, _topics: TopicSet) -> dict[str, dict[int, int]]:
        self.calls.append("committed")
        return {}  # the message written is never taken

    def redrive_offsets(self, _config: Config, _topics: TopicSet, queues: Any) -> dict[str, dict[int, int]]:
        self.calls.append("redrive")
        return {q: {} for q in queues}

    def describe_groups(self, _config: Config, _groups: list[str]) -> dict[str, Any]:
        self.calls.append("describe")
        return {}

    def markers_ends(self, _config: Config, _topics: TopicSet) -> Ends:
        self.calls.append("ends")
        return Ends()

    def rounds(self, follower: Follower, count: int) -> list[str]:
        self.calls = []
        for _ in range(count):
            follower.round()
        return self.calls


@pytest.fixture
def kafka(monkeypatch: pytest.MonkeyPatch) -> FakeKafka:
    fake = FakeKafka()
    monkeypatch.setattr(topics.Follow, "records", lambda _follow, topic: fake.records(topic))
    for name in ("committed_offsets", "redrive_offsets", "describe_groups", "markers_ends"):
        monkeypatch.setattr(topics, name, getattr(fake, name))
    monkeypatch.setattr(follower_module, "QUIET_OFFSETS_EVERY_S", 0.3)
    return fake


def test_a_quiet_sets_offsets_are_read_again_only_once_records_are_written_or_the_quiet_interval_passed(
        kafka: FakeKafka) -> None:
    # Given a follower reading the groups every round, and a message written before the first
    follower = Follower(CONFIG, Models([CONFIG.default_topics]), groups_every_s=0)
    kafka.write_message(0)

    # When the first round reads it, Then the offsets are read in it and in the next (records were read after them)
    assert kafka.rounds(follower, 1).count("committed") == 1
    assert kafka.rounds(follower, 1).count("committed") == 1

    # When nothing more is written, Then the next rounds read the groups' members, never the offsets
    quiet = kafka.rounds(follower, 3)
    assert quiet.count("committed") == quiet.count("redrive") == 0
    assert quiet.count("describe") == quiet.count("ends") == 3

    # When a record is written, Then the round after the one that reads it reads the offsets again
    kafka.write_message(1)
    assert kafka.rounds(follower, 2).count("committed") == 1

    # When the quiet interval passes, Then they are read again though nothing was written
    assert kafka.rounds(follower, 1).count("committed") == 0
    time.sleep(0.35)
    assert kafka.rounds(follower, 1).count("committed") == 1


def test_a_set_with_records_waiting_in_an_at_most_once_queue_has_its_offsets_read_every_groups_round(
        kafka: FakeKafka) -> None:
    # Given an at-most-once queue with a message waiting (its consumer writes no Start as it takes it)
    config = Config(bootstrap_servers="127.0.0.1:1", message_topic="q.messages", marker_topic="q.markers",
                    at_most_once_queues=("q",))
    follower = Follower(config, Models([config.default_topics], frozenset({"q"})), groups_every_s=0)
    kafka.write_message(0)

    # When nothing more is written, Then its offsets are read every round still
    assert kafka.rounds(follower, 4).count("committed") == 4
