"""Runs plans of message lives through simulated time and writes what kmq's components would have written: records
on the messages topic, markers through kmq's own encoders (batched, or one record per marker in kafka-mq-go queues,
with Go consumers and trackers where a plan says so), dead letters; then the queues' committed offsets, purge times,
and the ground truth of every message. Pure: a ``Sink`` does the writing.

Time runs in ticks (``schedule``). Arrivals and lives play in the main phase; in the final phase come the records
nobody reads (never-read messages, copies of a lagging tracker), so each queue's committed offset (past every record
it Started) lies before all of them, as on a real topic; ``now_ms`` is the last tick, beyond every overdue deadline.
The parts: ``life`` (one message's place in its plan), ``schedule``, ``records`` (messages and dead letters),
``marker_buffers`` (markers, as each component batches them), ``outcome`` (the result and the truth's ledger).
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from kmq import wire
from kmq.ops.audit.synthetic import plans as p
from kmq.ops.audit.synthetic.life import Life
from kmq.ops.audit.synthetic.marker_buffers import TRACKER_ID, MarkerBuffers
from kmq.ops.audit.synthetic.outcome import Ledger, Outcome
from kmq.ops.audit.synthetic.plans import Plan, Step
from kmq.ops.audit.synthetic.records import Records
from kmq.ops.audit.synthetic.schedule import Schedule
from kmq.ops.audit.synthetic.sink import Headers, Sink
from kmq.wire.markers import EndReason, Marker, MarkerType

__all__ = ["Headers", "Outcome", "Simulator", "Sink"]


class Simulator:
    """``run(arrivals)``: arrivals are (tick, plan) in tick order. Each life acts in phases (the methods named
    ``_<phase>``): a read and Start, a settle, the tracker at a deadline, until its plan ends."""

    def __init__(self, sink: Sink, *, start_ms: int, tick_ms: int = 1000, partitions: int = 6,
                 marker_partitions: int = 3, seed: int = 0, keep_messages: bool = False,
                 payload_bytes: int = 48, windows: list[tuple[int, int]] | None = None) -> None:
        self._clock = Schedule(start_ms, tick_ms)
        self._records = Records(sink, partitions, seed)
        self._buffers = MarkerBuffers(sink, marker_partitions)
        self.outcome = Outcome(0)
        self._ledger = Ledger(self.outcome, windows or [], keep_messages)
        self._rng = random.Random(seed)
        self._payload_bytes = payload_bytes
        self._serial = 0
        #: Lives whose last record nobody reads (the final phase writes it), and hung handlers' lives.
        self._final: list[Life] = []
        self._alive_to_end: list[Life] = []

    def ts(self, tick: int) -> int:
        return self._clock.ts(tick)

    def run(self, arrivals: Iterable[tuple[int, Plan]]) -> Outcome:
        last = 0
        for tick, plan in arrivals:
            while self._clock.tick < tick:
                self._advance()
            self._arrive(plan)
            last = tick
        while self._clock.pending:
            self._advance()
        return self._finish(max(last, self._clock.tick) + 2)

    def _advance(self) -> None:
        for life in self._clock.due_now():
            getattr(self, "_" + life.phase)(life)
        self._buffers.flush(self._clock.ts())
        self._clock.tick += 1

    # --- arrivals ----------------------------------------------------------------------------------------------

    def _arrive(self, plan: Plan) -> None:
        self._serial += 1
        payload = f"{plan.queue.name}-{self._serial}-".encode().ljust(self._payload_bytes, b".")
        life = Life(plan, payload)
        self._ledger.arrived(life)
        if plan.never_read:
            self._final.append(life)
            return
        life.original = life.record = self._produce(life, [])
        life.first, life.enqueued_ms = life.original, self._clock.ts()
        life.born_ms = life.enqueued_ms
        self._clock.at(1, life, "amo" if plan.amo else "start")

    def _produce(self, life: Life, headers: Headers) -> wire.MessageId:
        return self._records.produce(life, headers, self._clock.ts())

    # --- the phases of a life ----------------------------------------------------------------------------------

    def _read(self, life: Life) -> None:
        """A consumer read the current record: the queue's committed offset moves past it."""
        assert life.record is not None
        committed = self.outcome.committed[life.plan.queue.name]
        committed[life.record.partition] = max(committed.get(life.record.partition, 0), life.record.offset + 1)

    def _amo(self, life: Life) -> None:
        self._read(life)
        reason = {p.AMO_REJECT: "bad input", p.AMO_FAIL: "failed 1 time(s), last: boom",
                  p.AMO_EXPIRE: wire.EXPIRED_REASON}.get(life.plan.amo)
        if reason:
            self._dead_letter(life, reason)
        self._ledger.done(life)

    def _start(self, life: Life) -> None:
        self._read(life)
        step, queue = life.step, life.plan.queue
        life.go = step.go_consumer and not life.header_first and queue.marker_format != "kmq"
        life.instance = self._rng.choice(("host-a:101", "host-b:202", "host-c:303"))
        life.start_ms = self._clock.ts()
        if step.outcome == p.DEDUPLICATE:  # a duplicate send: an End instead of a Start
            assert life.record is not None
            repeats = wire.MessageId(life.record.partition, max(0, life.record.offset - 1))  # any earlier record
            self._buffers.consumer_end(queue, life, Marker(
                MarkerType.END, life.record, end_reason=EndReason.REJECTED, reason=wire.deduplicated_reason(repeats),
                instance_id=life.instance))
            self._ledger.done(life)
            return
        self._buffers.start(queue, life)
        if step.outcome == p.CRASH:
            if step.tracker == p.NONE_ALIVE:
                self._alive_to_end.append(life)  # a hung handler: keep-alives to the end
            elif step.tracker != p.NONE_OVERDUE:
                self._clock.at(self._clock.ticks(queue.redelivery_timeout_ms) + 1, life, "tracker")
            else:
                self._ledger.done(life)
            return
        self._clock.at(1 + self._rng.randrange(2), life, "settle")

    def _settle(self, life: Life) -> None:
        step, queue = life.step, life.plan.queue
        assert life.record is not None
        if step.restart:
            self._buffers.start(queue, life)
        end = self._buffers.consumer_end
        if step.outcome == p.ACK:
            end(queue, life, Marker(MarkerType.END, life.record, instance_id=life.instance), ack=True)
        elif step.outcome == p.GO_ACK:
            end(queue, life, Marker(MarkerType.END, life.record), ack=True)
        elif step.outcome in (p.REJECT, p.FAIL_MAX, p.EXPIRE, p.EXPIRE_DROP, p.PURGE):
            reason = {p.REJECT: "bad input", p.FAIL_MAX: f"failed {life.count} time(s), last: boom",
                      p.PURGE: wire.PURGED_REASON}.get(step.outcome, wire.EXPIRED_REASON)
            if step.outcome != p.EXPIRE_DROP and step.outcome != p.PURGE:
                self._dead_letter(life, reason)
            end(queue, life, Marker(MarkerType.END, life.record, end_reason=EndReason.REJECTED, reason=reason))
        else:
            self._keep_alive(life, step, self._clock.ts())
            return
        self._next(life)

    def _keep_alive(self, life: Life, step: Step, ts: int) -> None:
        """A release, give-back or delay hop: the tracker acts at the deadline it sets."""
        assert life.record is not None
        alive = step.tracker == p.NONE_ALIVE and step.outcome != p.GIVE_BACK
        delay_ms = {p.RELEASE: 1000 * self._rng.randrange(3), p.GIVE_BACK: 0, p.DELAY: 5000}[step.outcome]
        if alive:
            delay_ms = self._clock.horizon_ms - ts
        reason = {p.RELEASE: wire.RELEASE_REASON, p.GIVE_BACK: wire.RETURN_REASON}.get(step.outcome, wire.DELAY_REASON)
        self._buffers.consumer_end(life.plan.queue, life, Marker(MarkerType.KEEPALIVE, life.record, delay_ms,
                                                                  reason=reason))
        if step.tracker in (p.NONE_ALIVE, p.NONE_OVERDUE):
            self._ledger.done(life)
        else:
            self._clock.at(self._clock.ticks(delay_ms) + 1, life, "tracker")

    def _tracker(self, life: Life) -> None:
        step, queue = life.step, life.plan.queue
        assert life.record is not None
        if step.tracker == p.LATE:
            self._final.append(life)
            return
        if step.tracker == p.GO_COPY:
            self._buffers.go_tracker_end(queue, life.record)
            self._copy(life, go=True)
        elif step.tracker in (p.COPY, p.LOST):
            self._tracker_end(life, EndReason.REDELIVERED)
            if step.tracker == p.COPY:
                self._copy(life, go=False)
            else:
                self._ledger.done(life)
            if step.late_ack:
                self._buffers.consumer_end(queue, life, Marker(MarkerType.END, life.record,
                                                               instance_id=life.instance), ack=True)
            return
        elif step.tracker == p.DEAD:
            self._dead_letter(life, f"max deliveries ({queue.max_deliveries}) reached")
            self._tracker_end(life, EndReason.DEAD_LETTERED)
            self._next(life)
        elif step.tracker == p.TRACKER_PURGE:
            self._tracker_end(life, EndReason.REJECTED, wire.PURGED_REASON)
            self._ledger.done(life)

    def _tracker_end(self, life: Life, reason: EndReason, text: str = "") -> None:
        assert life.record is not None
        self._buffers.tracker_end(life.plan.queue, Marker(MarkerType.END, life.record, end_reason=reason,
                                                          reason=text, client_id=TRACKER_ID))

    def _copy(self, life: Life, go: bool) -> None:
        """The tracker's copy becomes the record delivered next."""
        if go:
            life.record = self._produce(life, [])
            life.count, life.first, life.enqueued_ms, life.header_first = 1, life.record, self._clock.ts(), False
        else:
            headers = _copy_headers(life)
            life.record = self._produce(life, headers.encode())
            life.count, life.first, life.enqueued_ms = headers.delivery_count, headers.first_message_id, \
                headers.enqueued_at_ms
            life.header_first = True
        self._advance_step(life)

    def _next(self, life: Life) -> None:
        """After a dead letter: a redrive puts it back, else its life is over."""
        if life.step.redrive and life.index + 1 < len(life.plan.steps):
            assert life.first is not None
            life.record = self._produce(life, [(wire.HEADER_FIRST_ID, str(life.first).encode())])
            life.count, life.header_first, life.enqueued_ms = 1, True, 0
            self._advance_step(life)
        else:
            self._ledger.done(life)

    def _advance_step(self, life: Life) -> None:
        if life.index + 1 >= len(life.plan.steps):
            self._ledger.done(life)  # a copy nobody reads yet: cannot be, plans end with LATE for that
            return
        life.index += 1
        self._clock.at(1, life, "start")

    def _dead_letter(self, life: Life, reason: str) -> None:
        self._records.dead_letter(life, reason, self._clock.ts())

    # --- the end -----------------------------------------------------------------------------------------------

    def _finish(self, tick: int) -> Outcome:
        """The final phase: what nobody reads, then keep-alives of hung handlers, then ``now``."""
        clock = self._clock
        clock.tick = tick
        purge_ms = clock.ts(tick + 3)
        for queue in {life.plan.queue for life in self._final if life.plan.queue.purge}:
            self.outcome.purged_before[queue.name] = purge_ms
        # Never-read messages of a purged queue are sent before its purge time, or after it if their plan says so.
        ticks = sorted((tick + (4 + self._rng.randrange(3) if life.plan.after_purge else self._rng.randrange(3)), n)
                       for n, life in enumerate(self._final))
        for at, n in ticks:
            life = self._final[n]
            clock.tick = at
            if life.plan.never_read:
                life.original = life.record = self._produce(life, [])
                enqueued = life.born_ms = clock.ts()
            else:
                self._tracker_end(life, EndReason.REDELIVERED)
                headers = _copy_headers(life)
                enqueued = headers.enqueued_at_ms
                life.record = self._produce(life, headers.encode())
            assert (life.plan.queue.purge and enqueued < purge_ms) == (life.plan.queue.purge and not
                                                                      life.plan.after_purge), "a purge the plan lacks"
            self._ledger.done(life)
            self._buffers.flush(clock.ts())
        max_timeout = max((life.plan.queue.redelivery_timeout_ms for life in self._alive_to_end), default=0)
        clock.tick = tick + 10 + clock.ticks(max(max_timeout, 60_000))
        end_ms = clock.ts()
        for life in self._alive_to_end:
            assert life.record is not None
            self._buffers.consumer_end(life.plan.queue, life, Marker(MarkerType.KEEPALIVE, life.record,
                                                                      life.plan.queue.redelivery_timeout_ms))
            self._ledger.done(life)
        self._buffers.flush(end_ms)
        self.outcome.now_ms = end_ms
        self._ledger.close()
        return self.outcome


def _copy_headers(life: Life) -> wire.DeliveryHeaders:
    """A kmq tracker's copy: the Start's count (Go's: none, so 1) plus one unless no handler had it, its first id
    (Go's Start has none: its own id), its enqueue time (Go's: none, so the Start's time)."""
    uncounted = life.step.outcome in (p.GIVE_BACK, p.DELAY)
    count = (1 if life.go else life.count) + (0 if uncounted else 1)
    first = life.record if life.go else life.first
    assert first is not None
    return wire.DeliveryHeaders(count, first, life.start_ms if life.go else life.enqueued_ms or life.start_ms)
