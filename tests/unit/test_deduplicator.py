"""The Deduplicator in the Start pipeline, behind fakes: a duplicate gets an End instead of a Start and is never
handed out; nothing past it is committed before its End is durable; a partition's window is rebuilt from the log
before its first keyed record is decided, and a failed rebuild hands nothing of the batch out."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kmq.client.consumer.deduplicator import Deduplicator, KeyedRecord
from kmq.errors import KafkaClientError
from kmq.wire import HEADER_DEDUP_ID, HEADER_FIRST_ID, MessageId, duplicate_of
from kmq.wire.marker_batch import decode_record
from kmq.wire.markers import MarkerType
from kmq.wire.vocabulary import MarkerEvent, marker_event
from tests.unit.fakes import FakeRecord
from tests.unit.test_start_pipeline import Rig

T0 = 1_700_000_000_000


def keyed(partition: int, offset: int, dedup_id: str | None, ts: int = T0, *, copy: bool = False,
          key: bytes = b"q") -> FakeRecord:
    headers = [] if dedup_id is None else [(HEADER_DEDUP_ID, dedup_id.encode())]
    if copy:
        headers.append((HEADER_FIRST_ID, b"0:1"))
    return FakeRecord("m", partition, offset, key, headers_=headers or None, timestamp_ms=ts)


class Log:
    """The messages topic as the rebuild reads it back; ``fail`` makes the next reads raise."""

    def __init__(self, records: list[FakeRecord] | None = None) -> None:
        self.records = records or []
        self.reads: list[tuple[int, int, int]] = []
        self.fail = 0

    def read_back(self, partition: int, since_ms: int, until: int) -> Iterator[KeyedRecord]:
        self.reads.append((partition, since_ms, until))
        if self.fail:
            self.fail -= 1
            raise KafkaClientError("leader moving")
        for r in self.records:
            if r.partition() == partition and r.offset() < until and r.timestamp_ms >= since_ms:
                yield r  # type: ignore[misc]


@pytest.fixture
def rig_and_log() -> Iterator[tuple[Rig, Log, Deduplicator]]:
    rig = Rig()
    log = Log()
    dedup = Deduplicator(b"q", 300_000, 30_000, log.read_back, rig.writer, queue="q")
    rig.pipeline._dedup = dedup
    yield rig, log, dedup
    rig.close()


def test_a_duplicate_gets_an_end_naming_the_message_it_repeats_and_is_never_handed_out(
    rig_and_log: tuple[Rig, Log, Deduplicator],
) -> None:
    rig, log, dedup = rig_and_log
    rig.pipeline.start([keyed(0, 10, "order-991"), keyed(0, 11, None), keyed(0, 12, "order-991", T0 + 1000)])
    rig.pipeline.advance(block=False)
    assert rig.commits == [], "nothing is committed before the duplicate's End is durable"
    rig.producer.deliver()
    rig.pipeline.advance(block=False)
    assert [m.message_id.offset for m in rig.handed] == [10, 11]
    assert rig.commits == [{("m", 0): 13}]
    ends = [m for r in rig.producer.records for m in decode_record(r.value) if m.type is MarkerType.END]
    assert [(m.message_id, duplicate_of(m.reason)) for m in ends] == [(MessageId(0, 12), MessageId(0, 10))]
    assert marker_event(ends[0]) is MarkerEvent.DEDUPLICATE
    starts = [m.message_id.offset for r in rig.producer.records for m in decode_record(r.value)
              if m.type is MarkerType.START]
    assert starts == [10, 11], "a duplicate is never Started"
    assert dedup.deduplicated == 1 and dedup.rebuilds == 1
    assert log.reads == [(0, T0 - 330_000, 10)], "rebuilt from one window and the skew before its first keyed record"


def test_a_batch_of_duplicates_only_still_waits_for_their_ends_before_its_commit(
    rig_and_log: tuple[Rig, Log, Deduplicator],
) -> None:
    rig, log, _ = rig_and_log
    log.records = [keyed(1, 3, "a")]
    rig.pipeline.start([keyed(1, 5, "a")])
    rig.pipeline.advance(block=False)
    assert rig.commits == []
    rig.producer.deliver()
    rig.pipeline.advance(block=False)
    assert rig.handed == [] and rig.commits == [{("m", 1): 6}]


def test_a_failed_end_rewinds_and_the_record_is_decided_again_the_same_way(
    rig_and_log: tuple[Rig, Log, Deduplicator],
) -> None:
    rig, log, dedup = rig_and_log
    log.records = [keyed(2, 0, "x")]
    rig.pipeline.start([keyed(2, 1, "x"), keyed(2, 2, "y")])
    rig.producer.deliver(RuntimeError("broker down"))
    rig.pipeline.advance(block=True)
    assert rig.handed == [] and rig.commits == []
    # Taken again (a rewind): the same decisions, no second rebuild
    rig.pipeline.start(rig.intake.take(10))  # type: ignore[arg-type]
    rig.producer.deliver()
    rig.pipeline.advance(block=False)
    assert [m.message_id.offset for m in rig.handed] == [2]
    assert dedup.rebuilds == 1


def test_a_window_that_cannot_be_rebuilt_hands_nothing_out_and_the_records_are_taken_again(
    rig_and_log: tuple[Rig, Log, Deduplicator],
) -> None:
    rig, log, dedup = rig_and_log
    log.records = [keyed(0, 4, "a")]
    log.fail = 1
    batch = [keyed(0, 6, None), keyed(0, 7, "a")]
    rig.pipeline.start(batch)  # type: ignore[arg-type]
    assert len(rig.pipeline) == 0 and rig.intake.take(10) == batch and rig.in_flight == {}
    rig.pipeline.start(batch)  # type: ignore[arg-type]
    rig.producer.deliver()
    rig.pipeline.advance(block=False)
    assert [m.message_id.offset for m in rig.handed] == [6]
    assert dedup.deduplicated == 1


def test_copies_and_sends_without_an_id_never_cost_a_rebuild(rig_and_log: tuple[Rig, Log, Deduplicator]) -> None:
    rig, log, dedup = rig_and_log
    rig.pipeline.start([keyed(0, 1, None), keyed(0, 2, "a", copy=True), keyed(0, 3, "a", copy=True)])
    rig.producer.deliver()
    rig.pipeline.advance(block=False)
    assert [m.message_id.offset for m in rig.handed] == [1, 2, 3]
    assert log.reads == [] and dedup.deduplicated == 0


def test_a_batch_without_headers_passes_whole_and_costs_no_rebuild() -> None:
    log = Log()
    dedup = Deduplicator(b"q", 300_000, 0, log.read_back, None)
    batch = [keyed(0, 1, None), keyed(1, 7, None), keyed(0, 2, None)]
    kept, ends = dedup.screen(batch)  # type: ignore[misc,arg-type]
    assert [(r.partition(), r.offset()) for r in kept] == [(0, 1), (1, 7), (0, 2)] and ends == []
    assert log.reads == [] and dedup.deduplicated == 0


def test_only_the_queues_own_records_read_back_are_remembered() -> None:
    log = Log([keyed(0, 1, "a", key=b"other-queue"), keyed(0, 2, "b")])
    dedup = Deduplicator(b"q", 300_000, 0, log.read_back, None)
    kept, ends = dedup.screen([keyed(0, 3, "a"), keyed(0, 4, "b")])  # type: ignore[misc]
    assert [r.offset() for r in kept] == [3] and ends == []  # at most once: skipped, no End
    assert dedup.deduplicated == 1


def test_a_dropped_partition_is_rebuilt_when_it_comes_back() -> None:
    log = Log([keyed(0, 1, "a"), keyed(0, 2, "b")])
    dedup = Deduplicator(b"q", 300_000, 0, log.read_back, None)
    dedup.screen([log.records[1]])  # type: ignore[list-item]
    dedup.dropped([0])
    kept, _ = dedup.screen([keyed(0, 9, "b")])  # type: ignore[misc]
    assert kept == [] and len(log.reads) == 2
