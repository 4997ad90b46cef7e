"""TopicReplay against a real broker: reading again goes on exactly where the last read stopped."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer as RawProducer

from kmq._kafka import topic_replay
from kmq._kafka.topic_replay import TopicReplay
from tests.helpers import ConfigFactory, write_transaction

pytestmark = pytest.mark.timeout(60)


def test_records_fetched_past_one_reads_end_are_yielded_by_the_next_read(
    kmq_config: ConfigFactory, monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = kmq_config(partitions=1)
    raw = RawProducer({"bootstrap.servers": config.bootstrap_servers})
    for i in range(10):
        raw.produce(config.message_topic, b"r%d" % i, b"q")
    assert raw.flush(10) == 0
    real = topic_replay.watermarks
    # The first read's end offset is 5 while 10 records are there: its fetches bring records past its end.
    monkeypatch.setattr(topic_replay, "watermarks", lambda *args, **kw: (real(*args, **kw)[0], 5))
    replay = TopicReplay(config, config.default_topics, config.message_topic)
    try:
        first = [r.value() for r in replay.records()]
        monkeypatch.setattr(topic_replay, "watermarks", real)
        second = [r.value() for r in replay.records()]
        third = [r.value() for r in replay.records()]
    finally:
        replay.close()
    assert first == [b"r%d" % i for i in range(5)]
    assert second == [b"r%d" % i for i in range(5, 10)]
    assert third == []


def test_a_read_ends_at_the_end_offset_when_a_transaction_marker_is_the_last_offset(
    kmq_config: ConfigFactory,
) -> None:
    config = kmq_config(partitions=1)
    # Its commit marker takes offset 3: the end offset is 4, the last record is at 2.
    write_transaction(config.bootstrap_servers, config.message_topic, [(b"q", b"t%d" % i) for i in range(3)])
    replay = TopicReplay(config, config.default_topics, config.message_topic)
    try:
        assert [r.value() for r in replay.records()] == [b"t0", b"t1", b"t2"]
        assert list(replay.records()) == []
    finally:
        replay.close()


def test_a_second_read_asks_for_its_end_offsets_without_waiting_behind_a_held_fetch(
    kmq_config: ConfigFactory, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each end-offset query of a read went out behind the broker's held fetch of the last read (0.5 s a partition:
    2.9 s for 6 in ``kmq stats`` and ``kmq inspect``): a finished read fetches no more."""
    config = kmq_config(partitions=6)
    raw = RawProducer({"bootstrap.servers": config.bootstrap_servers})
    for i in range(12):
        raw.produce(config.message_topic, b"r%d" % i, b"q", partition=i % 6)
    assert raw.flush(10) == 0
    asked: list[float] = []
    real = topic_replay.watermarks

    def timed(*args: object, **kw: object) -> tuple[int, int]:
        started = time.monotonic()
        try:
            return real(*args, **kw)  # type: ignore[arg-type]
        finally:
            asked.append(time.monotonic() - started)

    monkeypatch.setattr(topic_replay, "watermarks", timed)
    with TopicReplay(config, config.default_topics, config.default_topics.messages) as replay:
        assert len(list(replay.records())) == 12
        assert replay._consumer.assignment() == []  # nothing fetches between reads
        asked.clear()
        assert list(replay.records()) == []
    print(f"\nthe second read's end-offset queries: {sum(asked):.3f} s for 6 partitions")
    assert len(asked) == 6
