"""Grouped messages in ``kmq stats`` and the audit: a record redelivered in place has several Starts (one per
delivery, each by its owner), a superseded delivery's settle is late (not the record's), and both tools say so alike
(lives built by hand and at random, classified by kmq.ops.lifecycle and by Spark). The audit's group report finds the
out-of-order hand-outs and gives each group's latency."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from kmq.ops import lifecycle
from kmq.ops.audit.groups import per_group, summarise
from kmq.ops.audit.synthetic.frames import frames
from kmq.ops.audit.synthetic.memory import MemorySink, classify
from kmq.ops.audit.synthetic.simulator import Outcome
from kmq.wire import HEADER_GROUP, RELEASE_REASON, RETURN_REASON, MessageId
from kmq.wire import vocabulary as v
from kmq.wire.marker_batch import encode_settles, encode_starts
from kmq.wire.markers import EndReason, Marker, MarkerType
from tests.unit.fakes import FakeStart
from tests.unit.test_audit_classification import _assert_same

pytestmark = pytest.mark.timeout(600)

QUEUE = "gq"
T0 = 1_700_000_000_000
AFTER_MS = 10_000


class Lives:
    """Messages of one grouped queue and their markers, written in order into a MemorySink."""

    def __init__(self) -> None:
        self.sink = MemorySink()
        self.now = T0

    def send(self, group: str) -> MessageId:
        self.now += 10
        return self.sink.message(0, QUEUE.encode(), b"x", [(HEADER_GROUP, group.encode())], self.now)

    def start(self, mid: MessageId, instance: str, count: int) -> None:
        self._mark(encode_starts(QUEUE.encode(), AFTER_MS, (), refs=[FakeStart(mid, b"", delivery_count=count)],
                                 client_id="c", instance_id=instance, owner_tracked=True))

    def settle(self, mid: MessageId, instance: str, how: str) -> None:
        acks: Sequence[MessageId] = [mid] if how == "ack" else ()
        others = {"release": [Marker(MarkerType.KEEPALIVE, mid, 500, reason=RELEASE_REASON)],
                  "give_back": [Marker(MarkerType.KEEPALIVE, mid, 0, reason=RETURN_REASON)],
                  "reject": [Marker(MarkerType.END, mid, end_reason=EndReason.REJECTED, reason="bad")],
                  "keep_alive": []}.get(how, [])
        self._mark(encode_settles(QUEUE.encode(), AFTER_MS, acks=acks, others=others,
                                  keep_alives=[mid] if how == "keep_alive" else (), client_id="c",
                                  instance_id=instance, owner_tracked=True))

    def _mark(self, value: bytes) -> None:
        self.now += 10
        self.sink.marker(0, QUEUE.encode(), value, self.now)

    def outcome(self) -> Outcome:
        return Outcome(self.now + 1_000, committed={QUEUE: {0: len(self.sink.messages)}})

    def python(self) -> dict[MessageId, lifecycle.MessageLife]:
        return {key[1]: life for key, life in classify(self.sink, self.outcome(), frozenset()).items()}


def test_in_place_redeliveries_count_each_handler_run_and_a_superseded_delivery_s_settles_are_late() -> None:
    lives = Lives()
    released, given_back, crashed, zombie, open_zombie = (lives.send(g) for g in "abcde")
    lives.start(released, "A", 1)
    lives.settle(released, "A", "release")
    lives.start(released, "A", 2)
    lives.settle(released, "A", "ack")
    lives.start(given_back, "A", 1)
    lives.settle(given_back, "A", "give_back")
    lives.start(given_back, "B", 1)
    lives.settle(given_back, "B", "ack")
    lives.start(crashed, "A", 1)  # A dies: B takes it over once its lease lapsed
    lives.start(crashed, "B", 2)
    lives.settle(crashed, "B", "ack")
    lives.start(zombie, "A", 1)  # A froze: B took over, then A's ack came
    lives.start(zombie, "B", 2)
    lives.settle(zombie, "A", "ack")
    lives.settle(zombie, "B", "ack")
    lives.start(open_zombie, "A", 1)
    lives.start(open_zombie, "B", 2)
    lives.settle(open_zombie, "A", "ack")  # late: B's run is still going
    got = lives.python()
    expect = {released: (v.ACKED, 2, 1, 0), given_back: (v.ACKED, 1, 0, 1), crashed: (v.ACKED, 2, 0, 0),
              zombie: (v.ACKED, 2, 0, 0), open_zombie: (v.IN_FLIGHT, 2, 0, 0)}
    assert {mid: (life.state, life.counters[v.DELIVERED], life.counters[v.RELEASED], life.counters[v.RETURNED])
            for mid, life in got.items()} == expect
    assert got[zombie].acks == 1, "the zombie's ack is late: not a second ack"
    assert all(got[m].counters[v.REDELIVERED] == 0 for m in expect), "in place: no tracker copy"


def _random_lives(seed: int, messages: int = 120) -> Lives:
    """Random owned lives: deliveries by instances A, B, C, each acked, released, given back, rejected, silent
    (a crash: the next owner takes over, counted) or frozen (a zombie whose settle comes after the next Start)."""
    rng, lives = random.Random(seed), Lives()
    for i in range(messages):
        mid = lives.send(f"g{i % 17}")
        count, instance = 1, rng.choice("ABC")
        for _ in range(rng.randint(1, 4)):
            lives.start(mid, instance, count)
            how = rng.choice(["ack", "release", "give_back", "reject", "crash", "zombie", "keep_alive"])
            if how in ("ack", "reject"):
                lives.settle(mid, instance, how)
                break
            if how == "keep_alive":
                lives.settle(mid, instance, how)
                break  # still running
            if how in ("release", "give_back"):
                lives.settle(mid, instance, how)
                count += how == "release"
                continue
            previous, instance = instance, rng.choice([c for c in "ABC" if c != instance])
            count += 1
            if how == "zombie":
                lives.start(mid, instance, count)
                lives.settle(mid, previous, rng.choice(["ack", "release", "keep_alive"]))
                lives.settle(mid, instance, "ack")
                break
    return lives


@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**16))
def test_any_mix_of_grouped_lives_is_classified_by_spark_as_by_python(spark: SparkSession, seed: int) -> None:
    lives = _random_lives(seed)
    _assert_same(spark, lives.sink, lives.outcome(), frozenset())


def test_the_group_report_finds_a_message_handed_out_after_a_later_one_of_its_group(spark: SparkSession) -> None:
    lives = Lives()
    x0, x1, y0, y1 = lives.send("x"), lives.send("x"), lives.send("y"), lives.send("y")
    for mid in (x0, x1):  # in order
        lives.start(mid, "A", 1)
        lives.settle(mid, "A", "ack")
    lives.start(y0, "A", 1)  # y1 went out while y0 was not finished, and y0 came back after it
    lives.start(y1, "A", 1)
    lives.settle(y1, "A", "ack")
    lives.start(y0, "B", 2)
    lives.settle(y0, "B", "ack")
    markers, records, _ = frames(spark, lives.sink)
    rows = {r["group"]: r.asDict() for r in per_group(markers, records).collect()}
    assert {g: (r["messages"], r["acked"], r["order_violations"]) for g, r in rows.items()} == {
        "x": (2, 2, 0), "y": (2, 2, 1)}
    assert all(r["latency_ms_p50_p95_p99"][0] > 0 for r in rows.values())
    summary = summarise(per_group(markers, records))[QUEUE]
    assert (summary["groups"], summary["messages"], summary["order_violations"]) == (2, 4, 1)
    assert [g["group"] for g in summary["slowest_groups"]] == ["y", "x"]
