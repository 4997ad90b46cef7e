"""The one table of cases that ``kmq stats`` (kmq.ops.lifecycle) and the Spark audit must both classify as written:
each a message's life in an operator's words, the state it ends in and the counters it adds (kmq.wire.vocabulary).

Used by tests/unit/test_lifecycle.py (Python) and tests/unit/test_audit_classification.py (Spark), which run all
cases as one batch of topics through the simulator (kmq.ops.audit.synthetic).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kmq.ops.audit.synthetic import plans as p
from kmq.ops.audit.synthetic.memory import MemorySink
from kmq.ops.audit.synthetic.plans import Plan, QueueSpec, Step
from kmq.ops.audit.synthetic.simulator import Outcome, Simulator
from kmq.wire import vocabulary as v

KMQ = QueueSpec("kmq-q")
GO = QueueSpec("go-q", marker_format="kafka-mq-go")
PURGING = QueueSpec("purging-q", purge=True)
AMO = QueueSpec("amo-q", at_most_once=True)
AT_MOST_ONCE = frozenset({AMO.name})


@dataclass(frozen=True)
class Case:
    name: str
    plan: Plan
    state: str
    #: Counters that must have these values (the rest: whatever ``truth`` says, normally 0).
    counters: dict[str, int] = field(default_factory=dict)


def _steps(*steps: Step, queue: QueueSpec = KMQ) -> Plan:
    return Plan(queue, steps)


CASES = [
    Case("acked at once", _steps(Step(p.ACK)), v.ACKED, {v.DELIVERED: 1, v.PRODUCED: 1}),
    Case("released, copied, acked", _steps(Step(p.RELEASE, p.COPY), Step(p.ACK)), v.ACKED,
         {v.DELIVERED: 2, v.RELEASED: 1, v.REDELIVERED: 1, v.RECOVERED: 0}),
    Case("a crash: the tracker's copy is acked", _steps(Step(p.CRASH, p.COPY), Step(p.ACK)), v.ACKED,
         {v.DELIVERED: 2, v.REDELIVERED: 1, v.RECOVERED: 1}),
    Case("given back: returned, not redelivered, not a delivery", _steps(Step(p.GIVE_BACK, p.COPY), Step(p.ACK)),
         v.ACKED, {v.DELIVERED: 1, v.RETURNED: 1, v.REDELIVERED: 0}),
    Case("a delay hop is neither a delivery nor a redelivery", _steps(Step(p.DELAY, p.COPY), Step(p.ACK)), v.ACKED,
         {v.DELIVERED: 1, v.REDELIVERED: 0}),
    Case("read before its due time, waiting for it", _steps(Step(p.DELAY, p.NONE_ALIVE)), v.DELAYED,
         {v.DELIVERED: 0}),
    Case("refused by its handler", _steps(Step(p.REJECT)), v.DEAD_LETTERED, {v.REJECTED: 1, v.DELIVERED: 1}),
    Case("failed max_deliveries times at a worker", _steps(Step(p.RELEASE, p.COPY), Step(p.FAIL_MAX)),
         v.DEAD_LETTERED, {v.REJECTED: 0, v.DELIVERED: 2}),
    Case("dead-lettered by the tracker after max deliveries", _steps(Step(p.RELEASE, p.DEAD)), v.DEAD_LETTERED,
         {v.REJECTED: 0, v.REDELIVERED: 0}),
    Case("expired at read: dead-lettered as expired, never delivered", _steps(Step(p.EXPIRE)), v.EXPIRED,
         {v.DELIVERED: 0, v.REJECTED: 0}),
    Case("expired at read and dropped", _steps(Step(p.EXPIRE_DROP)), v.EXPIRED, {v.DELIVERED: 0}),
    Case("purged at a consumer: not a delivery", _steps(Step(p.PURGE)), v.PURGED, {v.DELIVERED: 0}),
    Case("a duplicate send: Ended instead of Started, never delivered", _steps(Step(p.DEDUPLICATE)),
         v.DEDUPLICATED, {v.DELIVERED: 0, v.PRODUCED: 1}),
    Case("a duplicate send in the kafka-mq-go format", _steps(Step(p.DEDUPLICATE), queue=GO), v.DEDUPLICATED,
         {v.DELIVERED: 0}),
    Case("purged by the tracker after a release: the handler ran", _steps(Step(p.RELEASE, p.TRACKER_PURGE)),
         v.PURGED, {v.DELIVERED: 1, v.RELEASED: 1}),
    Case("purged while still on the topic", Plan(PURGING, never_read=True), v.PURGED, {v.DELIVERED: 0}),
    Case("never read", Plan(KMQ, never_read=True), v.WAITING, {v.DELIVERED: 0, v.PRODUCED: 1}),
    Case("never read, sent after its queue's purge time", Plan(PURGING, never_read=True, after_purge=True),
         v.WAITING),
    Case("a lagging tracker's copy nobody read yet", _steps(Step(p.RELEASE, p.LATE)), v.WAITING,
         {v.REDELIVERED: 1}),
    Case("a lagging tracker's copy of a purged queue's message", _steps(Step(p.CRASH, p.LATE), queue=PURGING),
         v.PURGED, {v.REDELIVERED: 1, v.RECOVERED: 1}),
    Case("held by a handler, kept alive", _steps(Step(p.CRASH, p.NONE_ALIVE)), v.IN_FLIGHT),
    Case("released, its retry delay still running", _steps(Step(p.RELEASE, p.NONE_ALIVE)), v.IN_FLIGHT,
         {v.RELEASED: 1}),
    Case("silent worker, no tracker: overdue (lost)", _steps(Step(p.CRASH, p.NONE_OVERDUE)), v.OVERDUE),
    Case("given back, no tracker: overdue", _steps(Step(p.GIVE_BACK, p.NONE_OVERDUE)), v.OVERDUE,
         {v.DELIVERED: 0, v.RETURNED: 1}),
    Case("the tracker Ended it but its copy is nowhere", _steps(Step(p.CRASH, p.LOST)), v.VANISHED,
         {v.REDELIVERED: 1}),
    Case("a late ack racing the tracker's copy: acked twice", _steps(Step(p.CRASH, p.COPY, late_ack=True),
                                                                      Step(p.ACK)),
         v.ACKED, {v.DELIVERED: 2, v.REDELIVERED: 1}),
    Case("a duplicate Start (failed commit) is one delivery", _steps(Step(p.ACK, restart=True)), v.ACKED,
         {v.DELIVERED: 1}),
    # ``rejected`` counts refusals (events): a redrive takes the message out of ``dead_lettered``, not its refusal.
    Case("dead-lettered, redriven, acked", _steps(Step(p.REJECT, redrive=True), Step(p.ACK)), v.ACKED,
         {v.DELIVERED: 2, v.REJECTED: 1}),
    Case("dead-lettered, redriven, refused again", _steps(Step(p.REJECT, redrive=True), Step(p.REJECT)),
         v.DEAD_LETTERED, {v.REJECTED: 2}),
    # A redriven letter whose copy was Started is behind the message: what its copy did since decides.
    Case("dead-lettered, redriven, its copy's copy lost: vanished", _steps(Step(p.REJECT, redrive=True),
                                                                          Step(p.CRASH, p.LOST)),
         v.VANISHED, {v.DELIVERED: 2, v.REDELIVERED: 1, v.RECOVERED: 1, v.REJECTED: 1}),
    Case("dead-lettered by the tracker, redriven, ended by a Go consumer",
         _steps(Step(p.RELEASE, p.DEAD, redrive=True), Step(p.RELEASE, p.GO_COPY), Step(p.GO_ACK), queue=GO),
         v.ENDED_BY_GO, {v.DELIVERED: 3, v.RELEASED: 2, v.REDELIVERED: 1, v.GO_REDELIVERED: 1}),
    Case("a Go consumer's ack is not an ack", _steps(Step(p.GO_ACK), queue=GO), v.ENDED_BY_GO, {v.DELIVERED: 1}),
    Case("a Go tracker's copy is a redelivery", _steps(Step(p.CRASH, p.GO_COPY), Step(p.ACK), queue=GO), v.ACKED,
         {v.REDELIVERED: 1, v.GO_REDELIVERED: 1, v.RECOVERED: 1}),
    Case("a Go tracker's copy of a copy", _steps(Step(p.RELEASE, p.GO_COPY), Step(p.CRASH, p.GO_COPY), Step(p.ACK),
                                                 queue=GO),
         v.ACKED, {v.REDELIVERED: 2, v.GO_REDELIVERED: 2, v.RELEASED: 1}),
    Case("a Go consumer crashes, a kmq tracker copies", _steps(Step(p.CRASH, p.COPY, go_consumer=True),
                                                              Step(p.ACK), queue=GO),
         v.ACKED, {v.REDELIVERED: 1}),
    Case("kafka-mq-go format: released, copied, dead-lettered",
         _steps(Step(p.RELEASE, p.COPY), Step(p.RELEASE, p.DEAD), queue=GO), v.DEAD_LETTERED, {v.RELEASED: 2}),
    Case("at most once: taken, no markers", Plan(AMO, amo=p.AMO_ACK), v.CONSUMED, {v.DELIVERED: 0}),
    Case("at most once: refused", Plan(AMO, amo=p.AMO_REJECT), v.DEAD_LETTERED, {v.REJECTED: 1}),
    Case("at most once: failed once, dead-lettered", Plan(AMO, amo=p.AMO_FAIL), v.DEAD_LETTERED, {v.REJECTED: 0}),
    Case("at most once: expired", Plan(AMO, amo=p.AMO_EXPIRE), v.EXPIRED),
    Case("at most once: never read", Plan(AMO, never_read=True), v.WAITING),
]


def simulate(plans: list[Plan], seed: int = 0) -> tuple[MemorySink, Outcome]:
    """The plans' topics, one arrival per tick (the outcome's ``keys`` name each plan's message)."""
    sink = MemorySink()
    outcome = Simulator(sink, start_ms=START_MS, seed=seed, keep_messages=True).run(
        (tick, p.normalize(plan)) for tick, plan in enumerate(plans))
    return sink, outcome


START_MS = 1_767_225_600_000  # 2026-01-01T00:00Z
