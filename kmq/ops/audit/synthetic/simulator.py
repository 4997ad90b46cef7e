"""Runs plans of message lives through simulated time and writes what kmq's components would have written: records
on the messages topic, markers through kmq's own encoders (batched, or one record per marker in kafka-mq-go queues,
with Go consumers and trackers where a plan says so), dead letters; then the queues' committed offsets, purge times,
and the ground truth of every message. Pure: a ``Sink`` does the writing.

Time runs in ticks. Arrivals and lives play in the main phase; in the final phase come the records nobody reads
(never-read messages, copies of a lagging tracker), so each queue's committed offset (past every record it Started)
lies before all of them, as on a real topic; ``now_ms`` is the last tick, beyond every overdue deadline.
"""

from __future__ import annotations

import random
import zlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from kmq import wire
from kmq.ops.audit.synthetic import plans as p
from kmq.ops.audit.synthetic.plans import Plan, QueueSpec, Step, Truth, truth
from kmq.wire import MessageId
from kmq.wire.marker_batch import encode_settles, encode_starts
from kmq.wire.markers import EndReason, Marker, MarkerType, encode

TRACKER_ID = "kmq-redelivery-tracker"
Headers = list[tuple[str, bytes]]


class Sink(Protocol):
    def message(self, partition: int, key: bytes, value: bytes, headers: Headers, timestamp_ms: int) -> MessageId:
        """Writes a messages-topic record; returns its id (the offset it gets)."""

    def marker(self, partition: int, key: bytes, value: bytes, timestamp_ms: int) -> None: ...

    def dead_letter(self, key: bytes, value: bytes, headers: Headers, timestamp_ms: int) -> None: ...


class Start(NamedTuple):
    """What ``encode_starts`` needs of a message (marker_batch.Startable)."""

    message_id: MessageId
    payload: bytes
    headers: Mapping[str, bytes]
    delivery_count: int
    first_message_id: MessageId
    enqueued_at_ms: int


@dataclass(slots=True)
class Life:
    """One message being simulated: its plan, where it is in it, and the record being delivered now."""

    plan: Plan
    payload: bytes
    index: int = 0
    phase: str = "start"
    original: MessageId | None = None
    #: When its original was produced.
    born_ms: int = 0
    record: MessageId | None = None
    #: What a consumer reads from the current record's headers: delivery count, first id, enqueued-at (0: none).
    count: int = 1
    first: MessageId | None = None
    enqueued_ms: int = 0
    header_first: bool = False
    instance: str = ""
    go: bool = False
    start_ms: int = 0

    @property
    def step(self) -> Step:
        return self.plan.steps[self.index]


@dataclass(slots=True)
class Outcome:
    """The simulation's result besides what the sink holds."""

    now_ms: int
    committed: dict[str, dict[int, int]] = field(default_factory=lambda: defaultdict(dict))
    purged_before: dict[str, int] = field(default_factory=dict)
    #: Per queue: states and counters the plans imply (kmq.wire.vocabulary names).
    states: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    counters: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    #: (queue, first id) -> truth, when the simulator keeps them.
    messages: dict[tuple[str, MessageId], Truth] = field(default_factory=dict)
    #: (queue, first id) of each plan, in arrival order, when the simulator keeps them.
    keys: list[tuple[str, MessageId]] = field(default_factory=list)
    #: Per window asked for: queue -> messages per state of those enqueued in it.
    windows: list[dict[str, Counter[str]]] = field(default_factory=list)


class Simulator:
    """``run(arrivals)``: arrivals are (tick, plan) in tick order."""

    def __init__(self, sink: Sink, *, start_ms: int, tick_ms: int = 1000, partitions: int = 6,
                 marker_partitions: int = 3, seed: int = 0, keep_messages: bool = False,
                 payload_bytes: int = 48, windows: list[tuple[int, int]] | None = None) -> None:
        self._sink = sink
        self._start_ms = start_ms
        self._tick_ms = tick_ms
        self._partitions = partitions
        self._marker_partitions = marker_partitions
        self._rng = random.Random(seed)
        self._keep = keep_messages
        self._payload_bytes = payload_bytes
        self._due: dict[int, list[Life]] = defaultdict(list)
        self._final: list[Life] = []
        self._alive_to_end: list[Life] = []
        self._serial = 0
        self._next_partition = seed % partitions
        self._lives: list[Life] = []
        self._ended: dict[int, list[Any]] = {}
        self._tick = 0
        self.outcome = Outcome(0)
        self._windows = windows or []
        self.outcome.windows = [defaultdict(Counter) for _ in self._windows]
        self._buffers = MarkerBuffers(sink, marker_partitions)

    def ts(self, tick: int) -> int:
        return self._start_ms + tick * self._tick_ms

    def run(self, arrivals: Iterable[tuple[int, Plan]]) -> Outcome:
        last = 0
        for tick, plan in arrivals:
            while self._tick < tick:
                self._advance()
            self._arrive(plan)
            last = tick
        while self._due:
            self._advance()
        return self._finish(max(last, self._tick) + 2)

    # --- the clock ---------------------------------------------------------------------------------------------

    def _advance(self) -> None:
        for life in self._due.pop(self._tick, ()):
            self._act(life)
        self._buffers.flush(self.ts(self._tick))
        self._tick += 1

    def _at(self, ticks: int, life: Life, phase: str) -> None:
        life.phase = phase
        self._due[self._tick + max(1, ticks)].append(life)

    def _ticks(self, ms: int) -> int:
        return -(-ms // self._tick_ms)

    # --- arrivals ----------------------------------------------------------------------------------------------

    def _arrive(self, plan: Plan) -> None:
        self._serial += 1
        payload = f"{plan.queue.name}-{self._serial}-".encode().ljust(self._payload_bytes, b".")
        life = Life(plan, payload)
        if self._keep:
            self._lives.append(life)
        if plan.never_read:
            self._final.append(life)
            return
        life.original = life.record = self._produce(life, [], self.ts(self._tick))
        life.first, life.enqueued_ms = life.original, self.ts(self._tick)
        life.born_ms = life.enqueued_ms
        if plan.amo:
            self._at(1, life, "amo")
        else:
            self._at(1, life, "start")

    def _produce(self, life: Life, headers: Headers, ts: int) -> MessageId:
        self._next_partition = partition = (self._next_partition + 1) % self._partitions
        return self._sink.message(partition, life.plan.queue.name.encode(), life.payload, headers, ts)

    # --- one action of a life ----------------------------------------------------------------------------------

    def _act(self, life: Life) -> None:
        getattr(self, "_" + life.phase)(life)

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
        self._done(life)

    def _start(self, life: Life) -> None:
        self._read(life)
        step, queue = life.step, life.plan.queue
        life.go = step.go_consumer and not life.header_first and queue.marker_format != "kmq"
        life.instance = self._rng.choice(("host-a:101", "host-b:202", "host-c:303"))
        life.start_ms = self.ts(self._tick)
        if step.outcome == p.DEDUPLICATE:  # a duplicate send: an End instead of a Start
            assert life.record is not None
            repeats = MessageId(life.record.partition, max(0, life.record.offset - 1))  # any earlier record
            self._buffers.consumer_end(queue, life, Marker(
                MarkerType.END, life.record, end_reason=EndReason.REJECTED, reason=wire.deduplicated_reason(repeats),
                instance_id=life.instance))
            self._done(life)
            return
        self._buffers.start(queue, life)
        if step.outcome == p.CRASH:
            if step.tracker == p.NONE_ALIVE:
                self._alive_to_end.append(life)  # a hung handler: keep-alives to the end
            elif step.tracker != p.NONE_OVERDUE:
                self._at(self._ticks(queue.redelivery_timeout_ms) + 1, life, "tracker")
            else:
                self._done(life)
            return
        self._at(1 + self._rng.randrange(2), life, "settle")

    def _settle(self, life: Life) -> None:
        step, queue, ts = life.step, life.plan.queue, self.ts(self._tick)
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
            self._keep_alive(life, step, ts)
            return
        self._next(life)

    def _keep_alive(self, life: Life, step: Step, ts: int) -> None:
        """A release, give-back or delay hop: the tracker acts at the deadline it sets."""
        assert life.record is not None
        alive = step.tracker == p.NONE_ALIVE and step.outcome != p.GIVE_BACK
        delay_ms = {p.RELEASE: 1000 * self._rng.randrange(3), p.GIVE_BACK: 0, p.DELAY: 5000}[step.outcome]
        if alive:
            delay_ms = self._horizon_ms - ts
        reason = {p.RELEASE: wire.RELEASE_REASON, p.GIVE_BACK: wire.RETURN_REASON}.get(step.outcome, wire.DELAY_REASON)
        self._buffers.consumer_end(life.plan.queue, life, Marker(MarkerType.KEEPALIVE, life.record, delay_ms,
                                                                  reason=reason))
        if step.tracker in (p.NONE_ALIVE, p.NONE_OVERDUE):
            self._done(life)
        else:
            self._at(self._ticks(delay_ms) + 1, life, "tracker")

    @property
    def _horizon_ms(self) -> int:
        """Beyond the simulation's end: a deadline set to it is still ahead at ``now_ms``."""
        return self.ts(self._tick) + 10 ** 9

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
                self._done(life)
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
            self._done(life)

    def _tracker_end(self, life: Life, reason: EndReason, text: str = "") -> None:
        assert life.record is not None
        self._buffers.tracker_end(life.plan.queue, Marker(MarkerType.END, life.record, end_reason=reason,
                                                          reason=text, client_id=TRACKER_ID))

    def _copy(self, life: Life, go: bool) -> None:
        """The tracker's copy becomes the record delivered next."""
        ts = self.ts(self._tick)
        if go:
            life.record = self._produce(life, [], ts)
            life.count, life.first, life.enqueued_ms, life.header_first = 1, life.record, ts, False
        else:
            headers = self._copy_headers(life)
            life.record = self._produce(life, headers.encode(), ts)
            life.count, life.first, life.enqueued_ms = headers.delivery_count, headers.first_message_id, \
                headers.enqueued_at_ms
            life.header_first = True
        self._advance_step(life)

    @staticmethod
    def _copy_headers(life: Life) -> wire.DeliveryHeaders:
        """A kmq tracker's copy: the Start's count (Go's: none, so 1) plus one unless no handler had it, its first
        id (Go's Start has none: its own id), its enqueue time (Go's: none, so the Start's time)."""
        uncounted = life.step.outcome in (p.GIVE_BACK, p.DELAY)
        count = (1 if life.go else life.count) + (0 if uncounted else 1)
        first = life.record if life.go else life.first
        assert first is not None
        return wire.DeliveryHeaders(count, first, life.start_ms if life.go else life.enqueued_ms or life.start_ms)

    def _next(self, life: Life) -> None:
        """After a dead letter: a redrive puts it back, else its life is over."""
        if life.step.redrive and life.index + 1 < len(life.plan.steps):
            assert life.first is not None
            life.record = self._produce(life, [(wire.HEADER_FIRST_ID, str(life.first).encode())], self.ts(self._tick))
            life.count, life.header_first, life.enqueued_ms = 1, True, 0
            self._advance_step(life)
        else:
            self._done(life)

    def _advance_step(self, life: Life) -> None:
        if life.index + 1 >= len(life.plan.steps):
            self._done(life)  # a copy nobody reads yet: cannot be, plans end with LATE for that
            return
        life.index += 1
        self._at(1, life, "start")

    def _dead_letter(self, life: Life, reason: str) -> None:
        key = life.plan.queue.name.encode()
        first = life.first or life.record
        headers = [*wire.DeliveryHeaders(life.count, first, life.enqueued_ms).encode(),
                   (wire.HEADER_DLQ_REASON, reason.encode()), (wire.HEADER_DLQ_QUEUE, key)]
        self._sink.dead_letter(key, life.payload, headers, self.ts(self._tick))

    # --- the end -----------------------------------------------------------------------------------------------

    def _done(self, life: Life) -> None:
        ended = self._ended.get(id(life.plan))  # the truth of a shared plan is summed once, at the end
        if ended is None:
            ended = self._ended[id(life.plan)] = [life.plan, 0, None]
        ended[1] += 1
        for (start, end), in_window in zip(self._windows, self.outcome.windows, strict=True):
            if start <= life.born_ms < end:
                if ended[2] is None:
                    ended[2] = truth(life.plan).state
                in_window[life.plan.queue.name][ended[2]] += 1
        if self._keep:
            first = life.original if life.original is not None else life.record
            assert first is not None
            self.outcome.messages[(life.plan.queue.name, first)] = truth(life.plan)

    def _finish(self, tick: int) -> Outcome:
        """The final phase: what nobody reads, then keep-alives of hung handlers, then ``now``."""
        self._tick = tick
        purge_ms = self.ts(tick + 3)
        for queue in {life.plan.queue for life in self._final if life.plan.queue.purge}:
            self.outcome.purged_before[queue.name] = purge_ms
        # Never-read messages of a purged queue are sent before its purge time, or after it if their plan says so.
        ticks = sorted((tick + (4 + self._rng.randrange(3) if life.plan.after_purge else self._rng.randrange(3)), n)
                       for n, life in enumerate(self._final))
        for at, n in ticks:
            life = self._final[n]
            self._tick = at
            ts = self.ts(at)
            if life.plan.never_read:
                life.original = life.record = self._produce(life, [], ts)
                enqueued = life.born_ms = ts
            else:
                self._tracker_end(life, EndReason.REDELIVERED)
                headers = self._copy_headers(life)
                enqueued = headers.enqueued_at_ms
                life.record = self._produce(life, headers.encode(), ts)
            assert (life.plan.queue.purge and enqueued < purge_ms) == (life.plan.queue.purge and not
                                                                      life.plan.after_purge), "a purge the plan lacks"
            self._done(life)
            self._buffers.flush(ts)
        max_timeout = max((life.plan.queue.redelivery_timeout_ms for life in self._alive_to_end), default=0)
        self._tick = tick + 10 + self._ticks(max(max_timeout, 60_000))
        end_ms = self.ts(self._tick)
        for life in self._alive_to_end:
            assert life.record is not None
            self._buffers.consumer_end(life.plan.queue, life, Marker(MarkerType.KEEPALIVE, life.record,
                                                                      life.plan.queue.redelivery_timeout_ms))
            self._done(life)
        self._buffers.flush(end_ms)
        self.outcome.now_ms = end_ms
        for plan, count, _ in self._ended.values():
            found = truth(plan)
            self.outcome.states[plan.queue.name][found.state] += count
            self.outcome.counters[plan.queue.name].update({k: n * count for k, n in found.counters.items()})
        self.outcome.keys = [(life.plan.queue.name, life.original) for life in self._lives
                             if life.original is not None]
        return self.outcome


class MarkerBuffers:
    """Markers of one tick, written at its end as the components would: per queue and consumer instance one Start
    batch and one settle batch (``kmq``), or a record per marker (``kafka-mq-go``); a tracker's Ends apart."""

    def __init__(self, sink: Sink, partitions: int) -> None:
        self._sink = sink
        self._partitions = partitions
        self._starts: dict[tuple[QueueSpec, str], list[Start]] = defaultdict(list)
        self._settles: dict[tuple[QueueSpec, str], list[tuple[Marker, bool]]] = defaultdict(list)
        self._tracker: dict[QueueSpec, list[Marker]] = defaultdict(list)
        self._plain: dict[QueueSpec, list[Marker]] = defaultdict(list)

    def start(self, queue: QueueSpec, life: Life) -> None:
        assert life.record is not None and life.first is not None
        if queue.marker_format == "kmq":
            self._starts[(queue, life.instance)].append(
                Start(life.record, life.payload, {}, life.count, life.first, life.enqueued_ms))
        elif life.go:
            self._plain[queue].append(Marker(MarkerType.START, life.record, queue.redelivery_timeout_ms,
                                             queue.name.encode(), life.payload))
        else:
            self._plain[queue].append(Marker(
                MarkerType.START, life.record, queue.redelivery_timeout_ms, queue.name.encode(), life.payload,
                delivery_count=life.count, first_message_id=life.first, enqueued_at_ms=life.enqueued_ms,
                instance_id=life.instance))

    def consumer_end(self, queue: QueueSpec, life: Life, marker: Marker, ack: bool = False) -> None:
        if queue.marker_format == "kmq":
            self._settles[(queue, life.instance)].append((marker, ack))
        else:
            self._plain[queue].append(marker)

    def tracker_end(self, queue: QueueSpec, marker: Marker) -> None:
        (self._tracker if queue.marker_format == "kmq" else self._plain)[queue].append(marker)

    def go_tracker_end(self, queue: QueueSpec, record: MessageId) -> None:
        self._plain[queue].append(Marker(MarkerType.END, record))

    def flush(self, ts: int) -> None:
        write = self._sink.marker
        for (queue, instance), starts in self._starts.items():
            write(self._partition(queue), queue.name.encode(), encode_starts(
                queue.name.encode(), queue.redelivery_timeout_ms, starts, instance_id=instance), ts)
        for (queue, instance), settles in self._settles.items():
            keep_alives = [m.message_id for m, _ in settles if m.type is MarkerType.KEEPALIVE and not m.reason]
            others = [m for m, ack in settles if not ack and (m.type is MarkerType.END or m.reason)]
            acks = [m.message_id for m, ack in settles if ack]
            write(self._partition(queue), queue.name.encode(), encode_settles(
                queue.name.encode(), queue.redelivery_timeout_ms, keep_alives=keep_alives, acks=acks,
                others=others, instance_id=instance), ts)
        for queue, ends in self._tracker.items():
            write(self._partition(queue), queue.name.encode(),
                  encode_settles(queue.name.encode(), 0, others=ends, client_id=TRACKER_ID), ts)
        for queue, markers in self._plain.items():
            for marker in markers:
                write(self._partition(queue), queue.name.encode(), encode(marker), ts)
        self._starts.clear()
        self._settles.clear()
        self._tracker.clear()
        self._plain.clear()

    def _partition(self, queue: QueueSpec) -> int:
        return zlib.crc32(queue.name.encode()) % self._partitions
