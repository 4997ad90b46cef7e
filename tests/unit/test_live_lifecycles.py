"""kmq.ops.live: the classification kept up to date round by round is, after every round, the classification of
everything read so far (kmq.ops.lifecycle.classify), for any mix of lives, any split of the topics into rounds,
committed offsets moving on, a purge, and deadlines passing."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kmq.ops import lifecycle
from kmq.ops.audit.synthetic.memory import MemorySink
from kmq.ops.audit.synthetic.plans import Plan, PlanMaker, QueueSpec, Step
from kmq.ops.audit.synthetic.simulator import Outcome
from kmq.ops.live import LiveLifecycles
from kmq.wire import MessageId
from kmq.wire import vocabulary as v
from tests.audit_cases import CASES, simulate
from tests.audit_strategies import AT_MOST_ONCE, QUEUES, plans


def _seen(life: lifecycle.MessageLife) -> tuple[Any, ...]:
    return (life.state, +life.counters, life.acks, life.waiting_since_ms, life.in_flight_since_ms, life.enqueued_ms,
            life.first_start_ms)


def _summary(s: lifecycle.QueueSummary) -> tuple[Any, ...]:
    return +s.states, +s.counters, s.oldest_waiting_ms, s.oldest_in_flight_ms


def _rounds(sink: MemorySink, outcome: Outcome, rng: random.Random, forget_acked: bool) -> None:
    """Feeds the topics in random rounds, checking the live classification against a batch one after each."""
    rounds = rng.randint(1, 6)

    def cuts(n: int) -> list[int]:
        return [*sorted(rng.randint(0, n) for _ in range(rounds - 1)), n]

    marks, messages, letters = cuts(len(sink.markers)), cuts(len(sink.messages)), cuts(len(sink.dead_letters))
    purge_round = rng.randint(0, rounds)
    live = LiveLifecycles(AT_MOST_ONCE, forget_acked=forget_acked)
    fold = lifecycle.DeliveryFold()
    records: list[lifecycle.Record] = []
    dead: list[lifecycle.DeadLetter] = []
    done = [0, 0, 0]
    start_ms = min((r.timestamp_ms for r in sink.messages), default=outcome.now_ms)
    for i in range(rounds):
        share = (i + 1) / rounds
        committed = {q: {p: int(o * share) for p, o in offsets.items()} for q, offsets in outcome.committed.items()}
        purged = outcome.purged_before if i >= purge_round else {}
        now_ms = start_ms + int((outcome.now_ms - start_ms + 60_000) * share)
        live.set_committed(committed)
        live.set_purged_before(purged)
        for r in sink.markers[done[0]:marks[i]]:
            live.add_markers(r.value, r.timestamp_ms, r.offset)
            fold.add_record(r.value, r.timestamp_ms, r.offset)
        for r in sink.messages[done[1]:messages[i]]:
            record = lifecycle.to_record(MessageId(r.partition, r.offset), r.key, r.timestamp_ms, dict(r.headers),
                                         r.value)
            live.add_record(record)
            records.append(record)
        for r in sink.dead_letters[done[2]:letters[i]]:
            letter = lifecycle.to_dead_letter(r.key, dict(r.headers), r.timestamp_ms)
            live.add_dead_letter(letter)
            dead.append(letter)
        done = [marks[i], messages[i], letters[i]]
        most = rng.choice((None, 1, 7, 50))
        live.refresh(now_ms, most)
        while live.pending:  # a slice at a time, as the console's follower does
            live.refresh(now_ms, most)
        batch = lifecycle.classify(fold.deliveries, records, dead,
                                   lifecycle.Context(now_ms, committed, purged, AT_MOST_ONCE))
        _check(live, batch, forget_acked)


def _check(live: LiveLifecycles, batch: dict[lifecycle.Key, lifecycle.MessageLife], forget_acked: bool) -> None:
    if not forget_acked:
        assert {k: _seen(m) for k, m in live.lives.items()} == {k: _seen(m) for k, m in batch.items()}
        for queue, summary in lifecycle.summarise(batch.values()).items():
            assert _summary(live.summary(queue)) == _summary(summary), queue
        return
    # Forgetting acked messages: every state the same (acked ones by their index), figures per state the same.
    assert {k: live.state_of(k) for k in batch} == {k: m.state for k, m in batch.items()}
    for queue, summary in lifecycle.summarise(batch.values()).items():
        got = live.summary(queue)
        assert (+got.states, got.oldest_waiting_ms, got.oldest_in_flight_ms) == (
            +summary.states, summary.oldest_waiting_ms, summary.oldest_in_flight_ms), queue
        for state in v.STATES:
            assert live.count(queue, state) == summary.states[state]


def test_the_table_of_cases_read_in_rounds_is_classified_as_read_at_once() -> None:
    sink, outcome = simulate([case.plan for case in CASES])
    for seed in range(20):
        _rounds(sink, outcome, random.Random(seed), forget_acked=seed % 2 == 1)


def test_thousands_of_random_lives_read_in_rounds() -> None:
    maker = PlanMaker(seed=11, never_read_share=0.05)
    rng = random.Random(11)
    sink, outcome = simulate([maker.plan(rng.choice(QUEUES)) for _ in range(1500)], seed=11)
    _rounds(sink, outcome, random.Random(3), forget_acked=False)
    _rounds(sink, outcome, random.Random(4), forget_acked=True)


_KMQ = QueueSpec(name="h-kmq", marker_format="kmq", at_most_once=False, purge=False, redelivery_timeout_ms=10000,
                 max_deliveries=3)
_PURGED = QueueSpec(name="h-purge", marker_format="kmq", at_most_once=False, purge=True, redelivery_timeout_ms=10000,
                    max_deliveries=3)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(plans, min_size=1, max_size=25), st.integers(0, 2**16), st.booleans())
# A purge while a released message's copy waits and its delivery is overdue: the state stays, the wait is purged.
@example(drawn=[*[Plan(queue=_KMQ, steps=(), never_read=True, amo="", after_purge=False)] * 4,
                Plan(queue=_PURGED, steps=(Step(outcome="release", tracker="late", go_consumer=False, restart=False,
                                                late_ack=False, redrive=False),),
                     never_read=False, amo="", after_purge=False)],
         seed=1574, forget_acked=False)
def test_any_mix_of_lives_in_any_rounds_is_classified_as_read_at_once(drawn: list[Plan], seed: int,
                                                                      forget_acked: bool) -> None:
    sink, outcome = simulate(drawn, seed)
    _rounds(sink, outcome, random.Random(seed), forget_acked)


def test_a_refresh_classifies_only_what_changed() -> None:
    sink, outcome = simulate([case.plan for case in CASES])
    live = LiveLifecycles(AT_MOST_ONCE)
    for r in sink.markers:
        live.add_markers(r.value, r.timestamp_ms, r.offset)
    for r in sink.messages:
        live.add_record(lifecycle.to_record(MessageId(r.partition, r.offset), r.key, r.timestamp_ms,
                                            dict(r.headers), r.value))
    live.set_committed(outcome.committed)
    first = live.refresh(outcome.now_ms)
    assert len(first) == len(live.lives)
    assert live.refresh(outcome.now_ms) == []  # nothing read, nothing due: nothing classified
    states = Counter(m.state for m in live.lives.values())
    assert sum(live.count(q, s) for q in live.queues() for s in v.STATES) == sum(states.values())


def _record(partition: int, offset: int, timestamp_ms: int, queue: str = "q") -> lifecycle.Record:
    return lifecycle.to_record(MessageId(partition, offset), queue.encode(), timestamp_ms, {}, b"x")


def test_a_purge_ends_the_waiting_messages_enqueued_before_it() -> None:
    live = LiveLifecycles()
    live.add_record(_record(0, 0, 1_000))
    live.add_record(_record(0, 1, 3_000))
    live.refresh(5_000)
    assert live.summary("q").states == Counter({v.WAITING: 2})
    assert live.summary("q").oldest_waiting_ms == 1_000
    live.set_purged_before({"q": 2_000})
    assert {c.key[1]: c.new.state for c in live.refresh(5_000) if c.new} == {MessageId(0, 0): v.PURGED,
                                                                        MessageId(0, 1): v.WAITING}
    assert live.summary("q").states == Counter({v.WAITING: 1, v.PURGED: 1})
    assert live.summary("q").oldest_waiting_ms == 3_000


def test_a_committed_offset_past_a_record_no_consumer_started_is_seen() -> None:
    live = LiveLifecycles(frozenset({"q"}))
    live.add_record(_record(0, 0, 1_000))
    live.refresh(5_000)
    live.set_committed({"q": {0: 1}})
    live.refresh(5_000)
    assert [*live.keys("q", v.CONSUMED)] == [("q", MessageId(0, 0))]
    live.set_committed({"q": {0: 0}})  # offsets reset: it waits again
    live.refresh(5_000)
    assert [*live.keys("q", v.WAITING)] == [("q", MessageId(0, 0))]


def test_a_duplicate_send_ended_in_a_later_round_than_its_record_is_deduplicated() -> None:
    from kmq.wire import DEDUPLICATED_REASON
    from kmq.wire.markers import EndReason, Marker, MarkerType, encode

    live = LiveLifecycles()
    live.add_record(_record(0, 0, 1_000))
    live.refresh(5_000)
    assert live.state_of(("q", MessageId(0, 0))) == v.WAITING
    end = Marker(MarkerType.END, MessageId(0, 0), end_reason=EndReason.REJECTED, reason=DEDUPLICATED_REASON,
                 instance_id="w:1")
    live.add_markers(encode(end), 2_000, 0)  # an End of a record never Started
    live.refresh(5_000)
    assert live.state_of(("q", MessageId(0, 0))) == v.DEDUPLICATED
