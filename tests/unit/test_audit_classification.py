"""The Spark audit's classification (kmq.ops.audit.classification) against kmq.ops.lifecycle, the Python fold
behind `kmq stats`: the table of cases and random lives, fed from memory through the audit's own decoding, must be
classified identically, message by message and queue by queue. Each test runs Spark once over many lives."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from kmq.ops import lifecycle
from kmq.ops.audit.classification import Facts, lifecycles
from kmq.ops.audit.decoding import mid_of
from kmq.ops.audit.summary import summarise
from kmq.ops.audit.synthetic.frames import frames
from kmq.ops.audit.synthetic.memory import MemorySink, classify
from kmq.ops.audit.synthetic.plans import Plan, PlanMaker
from kmq.ops.audit.synthetic.simulator import Outcome
from kmq.wire import vocabulary as v
from tests.audit_cases import AT_MOST_ONCE, CASES, simulate
from tests.audit_strategies import AT_MOST_ONCE as H_AT_MOST_ONCE
from tests.audit_strategies import QUEUES, plans

pytestmark = pytest.mark.timeout(600)

FACT_NAMES = tuple(v.FACTS)


def _spark_lives(spark: SparkSession, sink: MemorySink, outcome: Outcome, at_most_once: frozenset[str],
                 window: lifecycle.Window | None = None) -> tuple[dict[lifecycle.Key, dict[str, object]],
                                                                   dict[str, dict[str, object]]]:
    markers, records, letters = frames(spark, sink)
    markers = markers.cache()
    facts = Facts(outcome.now_ms, outcome.committed, outcome.purged_before, at_most_once,
                  None if window is None else window.start_offsets,
                  None if window is None else window.from_ms, None if window is None else window.to_ms)
    life = lifecycles(spark, markers, records, letters, facts).cache()
    rows = {(r["queue"], mid_of(r["first_id"])): r.asDict() for r in life.collect()}
    summary = summarise(life)
    spark.catalog.clearCache()
    return rows, summary


def _python(life: lifecycle.MessageLife) -> dict[str, object]:
    return {"state": life.state, "scope": life.scope, "acks": life.acks,
            **{c: life.counters[c] for c in v.COUNTERS}, **{f: life.facts[f] for f in FACT_NAMES}}


def _spark(row: dict[str, object]) -> dict[str, object]:
    return {"state": row["state"], "scope": row["scope"], "acks": row["acks"],
            **{c: row[c] for c in v.COUNTERS}, **{f: row[f] for f in FACT_NAMES}}


def _assert_same(spark: SparkSession, sink: MemorySink, outcome: Outcome, at_most_once: frozenset[str],
                 window: lifecycle.Window | None = None) -> tuple[dict[lifecycle.Key, dict[str, object]],
                                                                   dict[str, dict[str, object]]]:
    """Spark's lives and summary, once checked to be Python's."""
    python = classify(sink, outcome, at_most_once, window)
    rows, summary = _spark_lives(spark, sink, outcome, at_most_once, window)
    assert set(rows) == set(python)
    for key, life in python.items():
        assert _spark(rows[key]) == _python(life), key
    expected = lifecycle.summarise(python.values())
    for queue, q in expected.items():
        figures = {k: summary.get(queue, {}).get(k, 0) for k in q.figures()}
        assert figures == (q.figures() if q.states else dict.fromkeys(q.figures(), 0)), queue
        assert summary.get(queue, {}).get("before_window", 0) == q.before_window
    return rows, summary


def test_the_table_of_cases_is_classified_by_spark_as_by_python(spark: SparkSession) -> None:
    sink, outcome = simulate([case.plan for case in CASES])
    rows, _ = _assert_same(spark, sink, outcome, AT_MOST_ONCE)
    assert [rows[key]["state"] for key in outcome.keys] == [case.state for case in CASES]


def test_thousands_of_random_lives_are_classified_by_spark_as_by_python_and_as_planned(spark: SparkSession) -> None:
    maker = PlanMaker(seed=11, never_read_share=0.05)
    rng = random.Random(11)
    sink, outcome = simulate([maker.plan(rng.choice(QUEUES)) for _ in range(4000)], seed=11)
    _, summary = _assert_same(spark, sink, outcome, H_AT_MOST_ONCE)
    for queue, states in outcome.states.items():
        assert {s: summary[queue][s] for s in v.STATES} == {s: states[s] for s in v.STATES}, queue
        assert {c: summary[queue][c] for c in v.COUNTERS} == {c: outcome.counters[queue][c] for c in v.COUNTERS}


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
          derandomize=False)
@given(st.lists(plans, min_size=100, max_size=200), st.integers(0, 2**16))
def test_any_mix_of_lives_is_classified_by_spark_as_by_python(spark: SparkSession, drawn: list[Plan],
                                                              seed: int) -> None:
    sink, outcome = simulate(drawn, seed)
    _assert_same(spark, sink, outcome, H_AT_MOST_ONCE)


def test_a_window_reports_what_began_in_it_and_counts_what_began_before(spark: SparkSession) -> None:
    maker = PlanMaker(seed=3, never_read_share=0.05)
    rng = random.Random(3)
    sink, outcome = simulate([maker.plan(rng.choice(QUEUES)) for _ in range(600)], seed=3)
    # The window: the middle third of the messages' timestamps; records before its offsets are not read.
    times = sorted(r.timestamp_ms for r in sink.messages)
    from_ms, to_ms = times[len(times) // 3], times[2 * len(times) // 3]
    starts: dict[int, int] = {}
    for r in sink.messages:
        if r.timestamp_ms < from_ms:
            starts[r.partition] = max(starts.get(r.partition, 0), r.offset + 1)
    window = lifecycle.Window(starts, from_ms, to_ms)
    read = MemorySink(messages=[r for r in sink.messages if r.offset >= starts.get(r.partition, 0)],
                      markers=[r for r in sink.markers if r.timestamp_ms >= from_ms - 60_000],
                      dead_letters=[r for r in sink.dead_letters if r.timestamp_ms >= from_ms])
    _assert_same(spark, read, outcome, H_AT_MOST_ONCE, window)
    python = classify(read, outcome, H_AT_MOST_ONCE, window)
    everything = classify(sink, outcome, H_AT_MOST_ONCE)
    in_window = {k for k, m in python.items() if m.scope == lifecycle.IN_WINDOW}
    # Every message enqueued in the window is classified as a full read would, none is lost for the window.
    assert in_window == {k for k, m in everything.items() if m.enqueued_ms is not None and from_ms <= m.enqueued_ms
                         < to_ms}
    assert all(python[k].state == everything[k].state for k in in_window)
    assert Counter(m.scope for m in python.values())[lifecycle.BEFORE_WINDOW] > 0
