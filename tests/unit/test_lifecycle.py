"""kmq.ops.lifecycle (what `kmq stats` shows): every message in exactly one state of kmq.wire.vocabulary, the
counters as the vocabulary defines them, against the table of cases (tests/audit_cases.py) and against the ground
truth of random lives."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kmq.ops import lifecycle
from kmq.ops.audit.synthetic import plans as p
from kmq.ops.audit.synthetic.memory import classify
from kmq.ops.audit.synthetic.plans import Plan, PlanMaker, truth
from kmq.wire import RELEASE_REASON, MessageId
from kmq.wire import vocabulary as v
from kmq.wire.markers import EndReason, Marker, MarkerType
from kmq.wire.vocabulary import MarkerEvent as E
from tests.audit_cases import AT_MOST_ONCE, CASES, Case, simulate
from tests.audit_strategies import AT_MOST_ONCE as H_AT_MOST_ONCE
from tests.audit_strategies import QUEUES, plans


def _counters(life: lifecycle.MessageLife) -> Counter[str]:
    return +Counter({c: life.counters[c] for c in v.COUNTERS})


@pytest.fixture(scope="module")
def table() -> dict[str, lifecycle.MessageLife]:
    sink, outcome = simulate([case.plan for case in CASES])
    lives = classify(sink, outcome, AT_MOST_ONCE)
    assert len(lives) == len(CASES)  # no case split into two messages, none merged
    return {case.name: lives[key] for case, key in zip(CASES, outcome.keys, strict=True)}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_case_of_the_table_is_classified_as_written(case: Case, table: dict[str, lifecycle.MessageLife]) -> None:
    life = table[case.name]
    assert life.state == case.state
    assert {c: life.counters[c] for c in case.counters} == case.counters
    # and the plan model agrees with the table
    expected = truth(p.normalize(case.plan))
    assert (expected.state, +expected.counters) == (case.state, _counters(life))


def test_the_table_covers_every_state() -> None:
    assert {case.state for case in CASES} == set(v.STATES)


def _check_against_truth(plans_: list[Plan], at_most_once: frozenset[str], seed: int = 0) -> None:
    sink, outcome = simulate(plans_, seed)
    lives = classify(sink, outcome, at_most_once)
    assert set(lives) == set(outcome.messages)
    for key, expected in outcome.messages.items():
        got = lives[key]
        assert (got.state, _counters(got), got.acks) == (expected.state, +expected.counters, expected.acks), key


def test_thousands_of_random_lives_are_classified_as_their_plans_say() -> None:
    maker = PlanMaker(seed=7, never_read_share=0.05)
    rng = random.Random(7)
    _check_against_truth([maker.plan(rng.choice(QUEUES)) for _ in range(3000)], H_AT_MOST_ONCE, seed=7)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(plans, min_size=1, max_size=25), st.integers(0, 2**16))
def test_any_mix_of_lives_is_classified_as_their_plans_say(drawn: list[Plan], seed: int) -> None:
    _check_against_truth(drawn, H_AT_MOST_ONCE, seed)


# --- one marker, one event -------------------------------------------------------------------------------------

A = MessageId(0, 1)


@pytest.mark.parametrize(("marker", "event"), [
    (Marker(MarkerType.START, A, 1000, b"q", b"x"), E.START),
    (Marker(MarkerType.KEEPALIVE, A, 1000), E.KEEPALIVE),
    (Marker(MarkerType.KEEPALIVE, A, 0, reason=RELEASE_REASON), E.RELEASE),
    (Marker(MarkerType.KEEPALIVE, A, 0, reason="returned"), E.RETURN),
    (Marker(MarkerType.KEEPALIVE, A, 0, reason="delayed"), E.DELAY),
    (Marker(MarkerType.END, A, instance_id="host:1"), E.ACK),
    (Marker(MarkerType.END, A), E.GO_END),
    (Marker(MarkerType.END, A, end_reason=EndReason.REJECTED, reason="bad input"), E.REJECT),
    (Marker(MarkerType.END, A, end_reason=EndReason.REJECTED), E.REJECT),
    (Marker(MarkerType.END, A, end_reason=EndReason.REJECTED, reason="failed 3 time(s), last: boom"), E.DEAD_LETTER),
    (Marker(MarkerType.END, A, end_reason=EndReason.DEAD_LETTERED, client_id="kmq-redelivery-tracker"),
     E.DEAD_LETTER),
    (Marker(MarkerType.END, A, end_reason=EndReason.REJECTED, reason="expired"), E.EXPIRE),
    (Marker(MarkerType.END, A, end_reason=EndReason.REJECTED, reason="purged", instance_id="host:1"), E.PURGE),
    (Marker(MarkerType.END, A, end_reason=EndReason.REJECTED, reason="purged"), E.PURGE),
    (Marker(MarkerType.END, A, end_reason=EndReason.REJECTED, reason="purged", client_id="kmq-redelivery-tracker"),
     E.TRACKER_PURGE),
    (Marker(MarkerType.END, A, end_reason=EndReason.REDELIVERED, client_id="kmq-redelivery-tracker"), E.REDELIVER),
])
def test_each_marker_means_one_event(marker: Marker, event: E) -> None:
    assert v.marker_event(marker) is event


def test_a_user_reason_that_starts_like_a_worker_s_is_still_a_refusal_unless_it_matches() -> None:
    assert v.dead_letter_event("failed validation") is E.REJECT
    assert v.dead_letter_event("max deliveries (5) reached") is E.DEAD_LETTER


@given(st.permutations(range(6)))
def test_a_deliverys_events_do_not_depend_on_the_order_markers_are_folded_in(order: list[int]) -> None:
    markers = [Marker(MarkerType.START, A, 1000, b"q", b"x", delivery_count=2),
               Marker(MarkerType.KEEPALIVE, A, 1000), Marker(MarkerType.KEEPALIVE, A, 0, reason=RELEASE_REASON),
               Marker(MarkerType.END, A, end_reason=EndReason.REDELIVERED, client_id="t"),
               Marker(MarkerType.END, A, instance_id="h:1"), Marker(MarkerType.START, A, 1000, b"q", b"x")]
    fold = lifecycle.DeliveryFold()
    for i in order:
        fold.add(markers[i], 100 + i, i)  # seq: log order, whatever order they are folded in
    d = fold.deliveries[A]
    assert (d.starts, d.delivery_count, d.start_ms, d.deadline) == (2, 2, 100, (5, 1105))  # the last Start's
    assert (d.events[E.RELEASE], d.events[E.REDELIVER], d.events[E.ACK], d.open, d.handled) == (1, 1, 1, False, True)
