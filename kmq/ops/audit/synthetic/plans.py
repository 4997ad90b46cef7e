"""Plans of message lives for synthetic topics, and the ground truth each plan implies.

A plan says what happens to one message, delivery by delivery (``Step``), in the terms an operator would use: a
worker acks, releases, gives back, crashes; a tracker copies, dead-letters, purges or lags. ``truth`` says what state
and counters the plan means, from the plan alone (not from markers): it is the independent answer the audit and
``kmq stats`` are checked against. Pure: no Kafka.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

from kmq.wire import vocabulary as v

# --- what ends a delivery -----------------------------------------------------------------------------------------

#: Outcomes that settle the message at the consumer.
ACK, GO_ACK, REJECT, FAIL_MAX, EXPIRE, EXPIRE_DROP, PURGE = (
    "ack", "go_ack", "reject", "fail_max", "expire", "expire_drop", "purge")
#: A duplicate send (its dedup id seen within the window): Ended without a Start, its only step.
DEDUPLICATE = "deduplicate"
#: Outcomes after which a tracker acts (``Step.tracker``).
RELEASE, GIVE_BACK, DELAY, CRASH = "release", "give_back", "delay", "crash"
#: A tracker's action: copy it (kmq tracker, or a kafka-mq-go tracker: bare End, copy without headers),
#: dead-letter it, End it as purged, End it but lose the copy, copy it only at the very end (nobody reads the copy),
#: or nothing yet (its deadline still ahead, or already past: no tracker runs).
COPY, GO_COPY, DEAD, TRACKER_PURGE, LOST, LATE, NONE_ALIVE, NONE_OVERDUE = (
    "copy", "go_copy", "dead", "tracker_purge", "lost", "late", "none_alive", "none_overdue")

SETTLING = (ACK, GO_ACK, REJECT, FAIL_MAX, EXPIRE, EXPIRE_DROP, PURGE, DEDUPLICATE)
TRACKED = (RELEASE, GIVE_BACK, DELAY, CRASH)
CONTINUING = (COPY, GO_COPY)
DEAD_LETTERING = (REJECT, FAIL_MAX, EXPIRE, DEAD)
#: Deliveries no handler can have had.
UNHANDLED = (GIVE_BACK, DELAY, EXPIRE, EXPIRE_DROP, PURGE, DEDUPLICATE)

#: How an at-most-once queue's consumer (no markers) settles a message it read.
AMO_ACK, AMO_REJECT, AMO_FAIL, AMO_EXPIRE, AMO_DROP = "amo_ack", "amo_reject", "amo_fail", "amo_expire", "amo_drop"
AMO = (AMO_ACK, AMO_REJECT, AMO_FAIL, AMO_EXPIRE, AMO_DROP)


@dataclass(frozen=True, slots=True)
class Step:
    """One delivery: who took it, how it ended, and (for TRACKED outcomes) what the tracker did."""

    outcome: str
    tracker: str = ""
    #: A Go consumer took it (kafka-mq-go queues only): its Start has no kmq fields, its ack is a bare End.
    go_consumer: bool = False
    #: The consumer re-read the record (a failed commit) and wrote a second Start while the first was open.
    restart: bool = False
    #: After a crash and the tracker's copy, the silent worker's ack comes in late (the documented race).
    late_ack: bool = False
    #: A dead-lettered message redriven onto its queue afterwards (the next step delivers the redriven copy).
    redrive: bool = False


@dataclass(frozen=True, slots=True)
class QueueSpec:
    name: str
    #: "kmq" (batched markers) or "kafka-mq-go" (one record per marker; Go consumers and trackers may join).
    marker_format: str = "kmq"
    at_most_once: bool = False
    #: Messages enqueued before the simulation's purge time are purged (``kmq purge``).
    purge: bool = False
    redelivery_timeout_ms: int = 10_000
    max_deliveries: int = 3


@dataclass(frozen=True, slots=True)
class Plan:
    """One message's life: its deliveries, or (never read) where its record stays, or an at-most-once settle."""

    queue: QueueSpec
    steps: tuple[Step, ...] = ()
    #: No consumer ever reads it: it waits on the topic (or is purged there, if enqueued before the purge time).
    never_read: bool = False
    amo: str = ""
    #: A never-read message of a purged queue sent after the purge time: it still waits.
    after_purge: bool = False

    @property
    def ends_with_unread_copy(self) -> bool:
        return bool(self.steps) and self.steps[-1].tracker == LATE


@dataclass(slots=True)
class Truth:
    """What a plan means: the message's state and counters (kmq.wire.vocabulary), and its acks."""

    state: str
    counters: Counter[str] = field(default_factory=Counter)
    acks: int = 0


def truth(plan: Plan) -> Truth:
    """The state and counters ``plan`` implies. A record nobody reads in a purged queue is enqueued before the purge
    time (a lagging tracker's copy keeps its original's enqueue time), unless the plan says it came after."""
    c: Counter[str] = Counter({v.PRODUCED: 1})
    purged_on_topic = plan.queue.purge and not plan.after_purge
    if plan.amo or plan.never_read:
        state = {AMO_REJECT: v.DEAD_LETTERED, AMO_FAIL: v.DEAD_LETTERED, AMO_EXPIRE: v.EXPIRED}.get(
            plan.amo, v.CONSUMED if plan.amo else (v.PURGED if purged_on_topic else v.WAITING))
        c[v.REJECTED] += plan.amo == AMO_REJECT
        return Truth(state, c)
    acks = 0
    for step in plan.steps:
        c[v.DELIVERED] += step.outcome not in UNHANDLED
        c[v.RELEASED] += step.outcome == RELEASE
        c[v.RETURNED] += step.outcome == GIVE_BACK
        if step.outcome in (RELEASE, CRASH) and step.tracker in (COPY, GO_COPY, LOST, LATE):
            c[v.REDELIVERED] += 1
            c[v.GO_REDELIVERED] += step.tracker == GO_COPY
            c[v.RECOVERED] += step.outcome == CRASH
        acks += (step.outcome == ACK) + step.late_ack
    last = plan.steps[-1]
    if acks:
        state = v.ACKED
    elif last.tracker == NONE_ALIVE:
        state = v.DELAYED if last.outcome == DELAY else v.IN_FLIGHT
    elif last.tracker == NONE_OVERDUE:
        state = v.OVERDUE
    elif last.tracker == LATE:
        state = v.PURGED if purged_on_topic else v.WAITING
    elif last.outcome == PURGE or last.tracker == TRACKER_PURGE:
        state = v.PURGED
    elif last.outcome in (EXPIRE, EXPIRE_DROP):
        state = v.EXPIRED
    elif last.outcome == DEDUPLICATE:
        state = v.DEDUPLICATED
    elif last.outcome in (REJECT, FAIL_MAX) or last.tracker == DEAD:
        state = v.DEAD_LETTERED
    elif last.outcome == GO_ACK:
        state = v.ENDED_BY_GO
    else:
        state = v.VANISHED  # LOST: the tracker Ended it, but its copy is nowhere
    c[v.REJECTED] += sum(s.outcome == REJECT for s in plan.steps)  # events: a redrive undoes none
    return Truth(state, c, acks)


# --- random plans at scale -------------------------------------------------------------------------------------

#: (weight, outcome, tracker) of a delivery's end in a queue that writes markers; most messages are acked at once.
_STEP_WEIGHTS: tuple[tuple[float, str, str], ...] = (
    (86.0, ACK, ""), (3.0, RELEASE, COPY), (0.4, RELEASE, DEAD), (1.2, CRASH, COPY), (0.2, CRASH, DEAD),
    (0.6, GIVE_BACK, COPY), (0.6, DELAY, COPY), (1.0, REJECT, ""), (0.5, FAIL_MAX, ""), (0.5, EXPIRE, ""),
    (0.3, EXPIRE_DROP, ""), (0.3, PURGE, ""), (0.2, RELEASE, TRACKER_PURGE), (0.05, CRASH, LOST),
    (0.3, CRASH, NONE_ALIVE), (0.05, CRASH, NONE_OVERDUE), (0.3, DELAY, NONE_ALIVE), (0.3, RELEASE, NONE_ALIVE),
    (0.2, RELEASE, LATE), (0.3, DEDUPLICATE, ""),
)
_GO_STEP_WEIGHTS = (*_STEP_WEIGHTS, (2.0, GO_ACK, ""), (1.0, CRASH, GO_COPY), (1.0, RELEASE, GO_COPY))
_AMO_WEIGHTS = ((90.0, AMO_ACK), (3.0, AMO_REJECT), (3.0, AMO_FAIL), (2.0, AMO_EXPIRE), (2.0, AMO_DROP))


class PlanMaker:
    """Random plans with realistic proportions (most messages acked at their first delivery)."""

    def __init__(self, seed: int, never_read_share: float = 0.002) -> None:
        self._rng = random.Random(seed)
        self._never_read = never_read_share
        self._tables = {}
        for go in (False, True):
            table = _GO_STEP_WEIGHTS if go else _STEP_WEIGHTS
            total = sum(w for w, _, _ in table)
            self._tables[go] = ([w for w, _, _ in table], [(o, t) for _, o, t in table], table[0][0] / total)
        #: Plans are values: equal ones are shared (most messages have the same one-step life).
        self._known: dict[Plan, Plan] = {}
        self._acked_at_once: dict[str, Plan] = {}

    def plan(self, queue: QueueSpec) -> Plan:
        rng = self._rng
        if rng.random() < self._never_read:
            return self._share(Plan(queue, never_read=True, after_purge=queue.purge and rng.random() < 0.5))
        if queue.at_most_once or rng.random() >= self._tables[queue.marker_format != "kmq"][2]:
            return self._drawn(queue)
        found = self._acked_at_once.get(queue.name)
        if found is None:
            found = self._acked_at_once[queue.name] = self._share(Plan(queue, (Step(ACK),)))
        return found

    def _share(self, plan: Plan) -> Plan:
        plan = normalize(plan)
        return self._known.setdefault(plan, plan)

    def _drawn(self, queue: QueueSpec) -> Plan:
        rng = self._rng
        if queue.at_most_once:
            return self._share(Plan(queue, amo=rng.choices([a for _, a in _AMO_WEIGHTS],
                                                           [w for w, _ in _AMO_WEIGHTS])[0]))
        weights, choices, _ = self._tables[queue.marker_format != "kmq"]
        steps: list[Step] = []
        count = 1
        while True:
            outcome, tracker = rng.choices(choices, weights)[0]
            if count >= queue.max_deliveries and tracker in CONTINUING and outcome in (RELEASE, CRASH):
                tracker = DEAD  # the tracker dead-letters what had max deliveries
            # A Go consumer acks with a bare End, or crashes; the rest are kmq consumer features.
            go = outcome == GO_ACK or (outcome == CRASH and queue.marker_format != "kmq" and rng.random() < 0.3)
            late = outcome == CRASH and tracker == COPY and rng.random() < 0.05
            redrive = (outcome in (REJECT, FAIL_MAX) or tracker == DEAD) and rng.random() < 0.1
            steps.append(Step(outcome, tracker, go_consumer=go, restart=rng.random() < 0.005, late_ack=late,
                              redrive=redrive))
            if redrive:
                count = 1
            elif tracker in CONTINUING:
                count = 1 if tracker == GO_COPY else count + (outcome not in (GIVE_BACK, DELAY))
            else:
                return self._share(Plan(queue, tuple(steps)))
            if len(steps) >= 8:
                steps.append(Step(ACK))
                return self._share(Plan(queue, tuple(steps)))


def normalize(plan: Plan) -> Plan:
    """``plan`` made possible: what a component cannot do becomes the nearest thing it can (a Go consumer only in
    kafka-mq-go queues and only on a record without kmq headers, a copy nobody reads only last, …). Plans from
    ``PlanMaker`` and from property tests go through it alike."""
    queue = plan.queue
    if plan.never_read:
        return Plan(queue, never_read=True, after_purge=plan.after_purge and queue.purge)
    if queue.at_most_once:
        return Plan(queue, amo=plan.amo if plan.amo in AMO else AMO_ACK)
    go_queue = queue.marker_format != "kmq"
    steps: list[Step] = []
    headerless = True  # the record delivered now: the original, or a Go tracker's copy
    for step in plan.steps or (Step(ACK),):
        outcome, tracker = step.outcome, step.tracker
        if not go_queue:
            outcome = ACK if outcome == GO_ACK else outcome
            tracker = COPY if tracker == GO_COPY else tracker
        if outcome == GO_ACK and not headerless:
            outcome = ACK
        if outcome == DEDUPLICATE and steps:  # only an original send is a duplicate: copies are never checked
            outcome = ACK
        if outcome in SETTLING:
            tracker = ""
        elif tracker not in (COPY, GO_COPY, DEAD, TRACKER_PURGE, LOST, LATE, NONE_ALIVE, NONE_OVERDUE):
            tracker = COPY
        if outcome in (GIVE_BACK, DELAY) and tracker == DEAD:
            tracker = COPY
        if outcome == GIVE_BACK and tracker == NONE_ALIVE:
            tracker = NONE_OVERDUE
        go = outcome == GO_ACK or (step.go_consumer and go_queue and headerless and outcome == CRASH)
        redrive = step.redrive and (outcome in (REJECT, FAIL_MAX) or tracker == DEAD)
        steps.append(Step(outcome, tracker, go_consumer=go, restart=step.restart and outcome != CRASH,
                          late_ack=step.late_ack and outcome == CRASH and tracker == COPY, redrive=redrive))
        if not (tracker in CONTINUING or redrive):
            break
        headerless = tracker == GO_COPY
    last = steps[-1]
    if last.tracker in CONTINUING or last.redrive:
        steps[-1] = Step(last.outcome, LATE if last.tracker in CONTINUING else last.tracker,
                         go_consumer=last.go_consumer, restart=last.restart)
    return Plan(queue, tuple(steps))
