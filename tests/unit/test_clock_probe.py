"""ClockProbes behind a fake producer: the broker's append time comes back with when it was learnt; a failed
probe leaves the clock alone."""

from __future__ import annotations

from typing import Any

from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME
from structlog.testing import capture_logs

from kmq.errors import KafkaClientError
from kmq.redelivery.clock_probe import ClockProbes
from kmq.wire import CLOCK_PROBE_KEY
from kmq.wire.marker_batch import decode_record, is_batch


class _Record:
    def __init__(self, kind: int, ts: int) -> None:
        self._ts = (kind, ts)

    def timestamp(self) -> tuple[int, int]:
        return self._ts


class _Error:
    def str(self) -> str:
        return "Broker: Not enough replicas"


class FakeProducer:
    """Answers each produce at once with ``answer`` (error, record), or raises ``raises``."""

    def __init__(self, answer: tuple[Any, Any] = (None, None), raises: Exception | None = None) -> None:
        self.answer, self.raises, self.sent = answer, raises, []

    def produce(self, topic: str, value: bytes, key: bytes | None, headers: Any = None, on_done: Any = None,
                partition: int | None = None) -> None:
        if self.raises is not None:
            raise self.raises
        self.sent.append((topic, value, key, partition))
        on_done(*self.answer)


def test_a_probe_goes_to_the_partition_and_its_append_time_comes_back_with_when_it_was_learnt() -> None:
    producer = FakeProducer((None, _Record(TIMESTAMP_LOG_APPEND_TIME, 1_700_000_000_123)))
    probes = ClockProbes(producer, "m.markers", "tracker-1", lambda: 42.5)  # type: ignore[arg-type]
    probes.send(3)
    [(topic, value, key, partition)] = producer.sent
    assert (topic, key, partition) == ("m.markers", CLOCK_PROBE_KEY, 3)
    assert is_batch(value) and decode_record(value) == []
    assert probes.answers() == [(3, 1_700_000_000_123, 42.5)]
    assert probes.answers() == []


def test_a_failed_or_create_time_probe_gives_no_answer_and_a_failed_one_says_so() -> None:
    with capture_logs() as logs:
        for producer in (FakeProducer((_Error(), None)), FakeProducer((None, _Record(TIMESTAMP_CREATE_TIME, 5))),
                         FakeProducer(raises=KafkaClientError("cannot produce to m.markers: broker down"))):
            probes = ClockProbes(producer, "m.markers", "t", lambda: 0.0)  # type: ignore[arg-type]
            probes.send(0)
            assert probes.answers() == []
    assert [entry["event"] for entry in logs] == ["clock_probe_failed", "clock_probe_failed"]


class SilentProducer(FakeProducer):
    """Keeps each delivery callback until ``answer_all`` (a broker that cannot take the records yet)."""

    def __init__(self) -> None:
        super().__init__()
        self.callbacks: list[Any] = []

    def produce(self, topic: str, value: bytes, key: bytes | None, headers: Any = None, on_done: Any = None,
                partition: int | None = None) -> None:
        self.sent.append((topic, value, key, partition))
        self.callbacks.append(on_done)

    def answer_all(self, err: Any, record: Any) -> None:
        callbacks, self.callbacks = self.callbacks, []
        for done in callbacks:
            done(err, record)


def test_one_probe_per_partition_is_on_its_way_however_often_the_loop_asks() -> None:
    producer = SilentProducer()
    probes = ClockProbes(producer, "m.markers", "tracker-1", lambda: 1.0)  # type: ignore[arg-type]
    for _ in range(5):  # a partition that cannot take records: the loop asks again every second
        probes.send(0)
    probes.send(1)
    assert [p for *_rest, p in producer.sent] == [0, 1]
    producer.answer_all(_Error(), None)  # failed (or answered): the next one may go
    probes.send(0)
    assert [p for *_rest, p in producer.sent] == [0, 1, 0]
