"""The redelivery of Starts by reference: which records a round reads (ReadPlan), what the reader answers for
each (RecordReader against a fake messages topic), and what the Redeliverer makes of the answers."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from hypothesis import given
from hypothesis import strategies as st

from kmq import Config
from kmq.redelivery.in_flight import InFlight
from kmq.redelivery.read_plan import ReadPlan, ranges
from kmq.redelivery.record_reader import Failed, Found, Missing, Outcome, RecordReader
from kmq.redelivery.redeliverer import Attempt, Redeliverer, Step
from kmq.wire import UNREADABLE_REASON, MessageId
from kmq.wire.marker_batch import decode_record
from kmq.wire.markers import EndReason
from tests.unit.fake_clients import FakeReaderClient, Record
from tests.unit.fakes import FakeProducer

TOPIC = "m"


# --- ReadPlan -------------------------------------------------------------------------------------------------------

@given(st.sets(st.integers(0, 5000), min_size=1, max_size=50), st.sets(st.integers(0, 5000), max_size=50),
       st.integers(1, 600))
def test_a_scan_over_the_records_there_finds_each_wanted_one_there_and_misses_each_one_not(
    wanted: set[int], present: set[int], max_gap: int,
) -> None:
    """Reading in order from each seek, every wanted offset is found (it is there) or missing (it is not)."""
    plan = ReadPlan(wanted, max_gap)
    found: list[int] = []
    at = plan.start()
    on_topic = sorted(present | {max(wanted | present) + 1})  # a record past the last keeps reads finite
    while at is not None:
        following = [o for o in on_topic if o >= at]
        hit, seek_to = plan.seen(following[0])
        if hit:
            found.append(following[0])
        at = seek_to if seek_to is not None else (following[0] + 1 if not plan.done else None)
    assert plan.done
    assert sorted(found) == sorted(wanted & present)
    assert sorted(plan.missing) == sorted(wanted - present)


def test_neighbours_share_a_range_and_distant_offsets_get_a_seek() -> None:
    assert ranges([7, 1, 3, 900, 1500, 1400], max_gap=500) == [(1, 7), (900, 1500)]
    assert ranges([5], max_gap=0) == [(5, 5)]


def test_offsets_outside_the_partition_are_dropped_and_reading_goes_on_from_the_first_left() -> None:
    plan = ReadPlan([1, 5, 9, 20], max_gap=2)
    assert plan.seen(1) == (True, 5)
    assert plan.outside(6, 15) == [5, 20]
    assert plan.start() == 9 and plan.seen(9) == (True, None) and plan.done


# --- RecordReader ---------------------------------------------------------------------------------------------------

def _topic(partition: int, offsets: range | list[int], key: bytes = b"q") -> list[Record]:
    return [Record(TOPIC, partition, o, key, b"payload-%d" % o,
                   headers_=[("trace", b"t%d" % o), ("kmq-delivery-count", b"2"), ("kmq-deliver-at-ms", b"5")])
            for o in offsets]


@contextmanager
def reading(client: FakeReaderClient) -> Iterator[tuple[RecordReader, dict[object, Outcome], threading.Event]]:
    answers: dict[object, Outcome] = {}
    expected: list[int] = [0]
    all_in = threading.Event()

    def done(token: object, outcome: Outcome) -> None:
        answers[token] = outcome
        if len(answers) >= expected[0]:
            all_in.set()

    reader = RecordReader(client, TOPIC, done, round_timeout_s=2.0)
    reader.expected = expected  # type: ignore[attr-defined]
    try:
        yield reader, answers, all_in
    finally:
        reader.close()


def _ask(reader: RecordReader, wanted: dict[str, tuple[MessageId, bytes]]) -> None:
    reader.expected[0] = len(wanted)  # type: ignore[attr-defined]
    for token, (message_id, key) in wanted.items():
        reader.request(message_id, key, token)


def test_records_are_read_back_with_their_payload_and_user_headers_across_partitions_and_gaps() -> None:
    client = FakeReaderClient({0: _topic(0, range(0, 3000)), 1: _topic(1, range(100, 200))})
    with reading(client) as (reader, answers, all_in):
        _ask(reader, {"a": (MessageId(0, 5), b"q"), "b": (MessageId(0, 2500), b"q"), "c": (MessageId(1, 150), b"q"),
                      "d": (MessageId(0, 6), b"q")})
        assert all_in.wait(10)
    assert answers == {
        "a": Found(b"q", b"payload-5", (("trace", b"t5"), ("kmq-deliver-at-ms", b"5"))),
        "b": Found(b"q", b"payload-2500", (("trace", b"t2500"), ("kmq-deliver-at-ms", b"5"))),
        "c": Found(b"q", b"payload-150", (("trace", b"t150"), ("kmq-deliver-at-ms", b"5"))),
        "d": Found(b"q", b"payload-6", (("trace", b"t6"), ("kmq-deliver-at-ms", b"5")))}
    assert (0, 2500) in client.seeks  # 5-6 and 2500 are too far apart to read through


def test_a_record_deleted_by_retention_compacted_away_or_of_another_queue_is_missing_with_why() -> None:
    client = FakeReaderClient({0: _topic(0, [*range(10, 20), *range(21, 30)]), 1: _topic(1, range(5), key=b"other")},
                              low={0: 10})
    with reading(client) as (reader, answers, all_in):
        _ask(reader, {"retention": (MessageId(0, 3), b"q"), "compacted": (MessageId(0, 20), b"q"),
                      "there": (MessageId(0, 25), b"q"), "other queue": (MessageId(1, 2), b"q"),
                      "past the end": (MessageId(0, 31), b"q")})
        assert all_in.wait(10)
    assert isinstance(answers["there"], Found)
    reasons = {token: outcome.reason for token, outcome in answers.items() if isinstance(outcome, Missing)}
    assert reasons.keys() == {"retention", "compacted", "other queue", "past the end"}
    assert "retention" in reasons["retention"] and "compacted" in reasons["compacted"]
    assert "another queue" in reasons["other queue"] and "recreated" in reasons["past the end"]


def test_a_last_wanted_record_gone_at_the_end_of_its_partition_is_missing_not_waited_for() -> None:
    client = FakeReaderClient({0: _topic(0, range(10))})
    client.records[0] = [r for r in client.records[0] if r.offset() != 8]  # 9 remains: the end is still 10
    with reading(client) as (reader, answers, all_in):
        _ask(reader, {"gone": (MessageId(0, 8), b"q")})
        assert all_in.wait(10)
    assert isinstance(answers["gone"], Missing)


def test_a_record_past_a_new_leaders_lagging_end_is_read_once_the_end_catches_up_never_missing() -> None:
    """Right after a leader change the new leader can serve a high watermark below records the old one served (the
    CI's controller kill: 8 such records dead-lettered as "compacted or deleted"). That end is no proof of absence."""
    client = FakeReaderClient({0: _topic(0, range(20))}, served_end={0: 12})
    with reading(client) as (reader, answers, all_in):
        _ask(reader, {"late": (MessageId(0, 14), b"q"), "early": (MessageId(0, 3), b"q")})
        assert not all_in.wait(0.5)
        assert isinstance(answers["early"], Found) and "late" not in answers
        client.served_end.clear()  # the followers fetched: the end moves on
        assert all_in.wait(10)
    assert isinstance(answers["late"], Found)


def test_a_record_past_an_end_that_never_catches_up_fails_the_round_to_be_asked_again() -> None:
    client = FakeReaderClient({0: _topic(0, range(20))}, served_end={0: 12})
    with reading(client) as (reader, answers, all_in):
        _ask(reader, {"late": (MessageId(0, 14), b"q")})
        assert all_in.wait(10)
    late = answers["late"]
    assert isinstance(late, Failed) and "ended at offset 12" in late.error, late


def test_a_broker_that_does_not_answer_fails_the_round_and_the_reader_lives_on() -> None:
    client = FakeReaderClient({0: _topic(0, range(10))}, fail=True)
    with reading(client) as (reader, answers, all_in):
        _ask(reader, {"a": (MessageId(0, 3), b"q")})
        assert all_in.wait(10)
        assert isinstance(answers["a"], Failed)
        client.fail = False
        all_in.clear()
        answers.clear()
        _ask(reader, {"b": (MessageId(0, 4), b"q")})
        assert all_in.wait(10)
    assert isinstance(answers["b"], Found)


# --- Redeliverer ---------------------------------------------------------------------------------------------------

class ScriptedReader:
    def __init__(self) -> None:
        self.asked: list[tuple[MessageId, bytes, object]] = []

    def request(self, message_id: MessageId, key: bytes, token: object) -> None:
        self.asked.append((message_id, key, token))


def _ref_item(offset: int, count: int = 1) -> InFlight:
    return InFlight(MessageId(0, offset), b"q", None, (), count, MessageId(0, 1), 5, 3, 0, 1000)


def _rig() -> tuple[Redeliverer, FakeProducer, FakeProducer, ScriptedReader, list[Attempt], list[float]]:
    sender, markers, reader, copied, now = FakeProducer(), FakeProducer(), ScriptedReader(), [], [0.0]
    config = Config(bootstrap_servers="x:1")
    redeliverer = Redeliverer(config, config.default_topics, sender, markers, lambda: now[0], copied.append,
                              reader=reader)
    return redeliverer, sender, markers, reader, copied, now


def _complete(producer: FakeProducer) -> None:
    for record in producer.records:
        if record.on_done is not None:
            record.on_done(None, None)
            record.on_done = None


def test_a_reference_is_read_back_then_copied_with_its_payload_headers_and_the_next_delivery_count() -> None:
    redeliverer, sender, _, reader, copied, _ = _rig()
    attempt = Attempt(0, _ref_item(7, count=2), dead_letter=False)
    redeliverer.submit(attempt)
    assert attempt.step is Step.READ and sender.records == [] and redeliverer.unfinished == 1
    [(message_id, key, token)] = reader.asked
    assert (message_id, key, token) == (MessageId(0, 7), b"q", attempt)
    redeliverer.read_done(token, Found(b"q", b"payload", (("trace", b"t"),)))
    redeliverer.poll(lambda p, h: True)
    [copy] = sender.records
    assert (copy.value, copy.key) == (b"payload", b"q")
    assert copy.headers == [("trace", b"t"), ("kmq-delivery-count", b"3"), ("kmq-first-message-id", b"0:1"),
                            ("kmq-enqueued-at-ms", b"5")]
    _complete(sender)
    redeliverer.poll(lambda p, h: True)
    assert copied == [attempt] and attempt.step is Step.END


def test_an_unreadable_record_is_dead_lettered_without_payload_with_its_reason_and_ended_as_such() -> None:
    redeliverer, sender, markers, reader, copied, _ = _rig()
    attempt = Attempt(0, _ref_item(7), dead_letter=False)
    redeliverer.submit(attempt)
    redeliverer.read_done(reader.asked[0][2], Missing("deleted by retention"))
    redeliverer.poll(lambda p, h: True)
    assert sender.records == []
    [letter] = markers.records
    headers = dict(letter.headers)
    assert letter.value == b"" and headers["kmq-dead-letter-reason"] == UNREADABLE_REASON.encode()
    assert headers["kmq-queue"] == b"q" and headers["kmq-first-message-id"] == b"0:1"
    _complete(markers)
    redeliverer.poll(lambda p, h: True)
    assert copied == [attempt] and attempt.unreadable == "deleted by retention"
    [end] = decode_record(markers.records[1].value)
    assert (end.message_id, end.end_reason, end.reason) == (MessageId(0, 7), EndReason.DEAD_LETTERED,
                                                            UNREADABLE_REASON)


def test_a_failed_read_is_asked_again_after_its_backoff_unless_the_partition_went_elsewhere() -> None:
    redeliverer, sender, _, reader, _, now = _rig()
    attempt = Attempt(2, _ref_item(7), dead_letter=False)
    redeliverer.submit(attempt)
    redeliverer.read_done(attempt, Failed("broker down"))
    redeliverer.poll(lambda p, h: True)
    assert attempt.failures == 1 and len(reader.asked) == 1
    now[0] = 0.6
    redeliverer.poll(lambda p, h: True)
    assert len(reader.asked) == 2 and attempt.step is Step.READ
    redeliverer.read_done(attempt, Found(b"q", b"p", ()))
    redeliverer.poll(lambda p, h: p != 2)
    assert sender.records == [] and redeliverer.unfinished == 0


def test_a_read_begun_before_its_partition_was_lost_and_given_back_is_dropped_not_copied_twice() -> None:
    """The cluster fault's duplicate: a read of holding 1 answered once the partition is held again (holding 2),
    whose rebuild fired the same message afresh. Only holding 2's attempt is copied."""
    redeliverer, sender, _, reader, _, _ = _rig()
    first = Attempt(0, _ref_item(7), dead_letter=False, holding=1)
    redeliverer.submit(first)
    again = Attempt(0, _ref_item(7), dead_letter=False, holding=2)
    redeliverer.submit(again)
    for _message_id, _key, token in reader.asked:
        redeliverer.read_done(token, Found(b"q", b"payload", ()))
    redeliverer.poll(lambda p, h: h == 2)
    assert len(sender.records) == 1 and redeliverer.unfinished == 1
