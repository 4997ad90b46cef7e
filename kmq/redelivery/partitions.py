"""OwnedPartitions: the markers partitions one tracker replica holds, and the catch-up gate of each.

Lifecycle of a partition: **pending** from its assignment until its committed offset (where the rebuild starts)
and its end offset (where the rebuild ends) are known; records read meanwhile wait, in order. Then **rebuilding**:
a Partition with a fresh PartitionState and DeadlineClock, fed every record from the committed offset; nothing is
redelivered from it yet (a half-replayed log would fire messages whose End is just ahead). **Caught up** once its
next offset reaches that end offset: its deadlines fire. Dropped on revoke or loss (the next owner rebuilds it).

Each holding of a partition has a number of its own, so work begun under one holding (a redelivery reading its
record back when the partition was lost) is told apart from the next holding of the same partition, which rebuilds
it and fires the same message afresh. A partition given back while this replica still has writes of an earlier
holding in flight (a copy or an End on its way to a broker cut off) stays pending until they are answered, at most
HOLD_BACK_S: its rebuild then reads those Ends, instead of firing the messages again. Loop thread only.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from kmq.redelivery.clock import DeadlineClock, Monotonic
from kmq.redelivery.horizon import ReadHorizon
from kmq.redelivery.partition_state import PartitionState

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

#: How often a pending partition whose offsets could not be read is tried again.
RETRY_INIT_S = 1.0
#: The longest a partition given back stays pending for writes of an earlier holding still in flight (a produce
#: request to a broker cut off is given up on after socket.timeout.ms, 10 s, and goes to the new leader).
HOLD_BACK_S = 20.0


class OffsetsClient(Protocol):
    """The offset queries a pending partition needs (confluent_kafka.Consumer has them)."""

    def committed(self, partitions: list[Any], timeout: float = ...) -> list[Any]: ...
    def get_watermark_offsets(self, partition: Any, timeout: float = ..., cached: bool = ...) -> Any: ...


@dataclass(slots=True)
class Partition:
    state: PartitionState
    clock: DeadlineClock
    #: The end offset seen when the rebuild began: caught up once the state's next offset reaches it.
    catch_up_to: int
    assigned_at: float
    #: This holding's number (see the module's docstring).
    holding: int = 0
    caught_up: bool = False
    markers_read: int = 0
    #: How far its deadlines may fire on evidence that the log is read up to there (kmq.redelivery.horizon).
    horizon: ReadHorizon = field(default_factory=ReadHorizon)


class OwnedPartitions:
    """The partitions held, by number, and the pending ones with their waiting records."""

    def __init__(self, use_now_if_no_marker_seen_ms: int, monotonic: Monotonic,
                 topic_partition: Callable[[int], Any], writing: Callable[[int], bool] = lambda _p: False) -> None:
        self._use_now_ms = use_now_if_no_marker_seen_ms
        self._monotonic = monotonic
        self._topic_partition = topic_partition
        #: Whether writes made for a partition (under an earlier holding) are still in flight.
        self._writing = writing
        self._held: dict[int, Partition] = {}
        self._pending: dict[int, list[Any]] = {}
        self._pending_since: dict[int, float] = {}
        self._held_back: set[int] = set()
        self._holdings = itertools.count(1)
        self._last_init_try = -RETRY_INIT_S

    def __contains__(self, partition: object) -> bool:
        return partition in self._held

    def __len__(self) -> int:
        return len(self._held)

    def __iter__(self) -> Iterator[int]:
        return iter(list(self._held))

    def items(self) -> list[tuple[int, Partition]]:
        return list(self._held.items())

    def get(self, partition: int) -> Partition | None:
        return self._held.get(partition)

    def holds(self, partition: int, holding: int) -> bool:
        """Whether ``partition`` is held now under that holding (not lost, nor lost and given back since)."""
        part = self._held.get(partition)
        return part is not None and part.holding == holding

    @property
    def any_held_or_pending(self) -> bool:
        return bool(self._held or self._pending)

    # --- assignment ------------------------------------------------------------------------------------------

    def assigned(self, partitions: list[int]) -> None:
        for p in partitions:
            self._pending[p] = []
            self._pending_since[p] = self._monotonic()

    def dropped(self, partitions: list[int]) -> None:
        for p in partitions:
            self._held.pop(p, None)
            self._pending.pop(p, None)
            self._pending_since.pop(p, None)
            self._held_back.discard(p)

    def route(self, record: Any) -> Partition | None:
        """The Partition a record feeds, or None: kept for later while its partition is pending, else dropped
        (a partition no longer held)."""
        p = record.partition() or 0
        part = self._held.get(p)
        if part is None:
            waiting = self._pending.get(p)
            if waiting is not None:
                waiting.append(record)
        return part

    def init_pending(self, client: OffsetsClient, *, force: bool = False) -> list[Any]:
        """Starts the rebuild of each pending partition whose offsets can be read now (the others stay pending and
        are tried again after RETRY_INIT_S); returns the records that waited for them, in order, to be fed."""
        if not self._pending or (not force and self._monotonic() - self._last_init_try < RETRY_INIT_S):
            return []
        self._last_init_try = self._monotonic()
        ready: list[Any] = []
        for p in list(self._pending):
            if self._writing(p) and self._monotonic() - self._pending_since[p] < HOLD_BACK_S:
                if p not in self._held_back:
                    self._held_back.add(p)
                    log.info("partition_held_back", partition=p, reason="writes of its last holding in flight",
                             at_most_s=HOLD_BACK_S)
                continue
            tp = self._topic_partition(p)
            try:
                committed = client.committed([tp], timeout=5)[0].offset
                low, high = client.get_watermark_offsets(tp, timeout=5, cached=False)
            except Exception as err:  # noqa: BLE001 - retried
                log.warning("partition_init_failed", partition=p, error=f"{type(err).__name__}: {err}",
                            retry_in_s=RETRY_INIT_S)
                continue
            state = PartitionState(p, next_offset=committed if committed >= 0 else low)
            self._held[p] = Partition(state, DeadlineClock(self._use_now_ms, self._monotonic), high,
                                      self._monotonic(), next(self._holdings))
            ready += self._pending.pop(p)
            del self._pending_since[p]
            self._held_back.discard(p)
        return ready

    # --- the catch-up gate -----------------------------------------------------------------------------------

    def newly_caught_up(self) -> list[tuple[int, Partition]]:
        """Partitions whose rebuild just reached its end offset (marked caught up now)."""
        done = []
        for p, part in self._held.items():
            if not part.caught_up and part.state.next_offset >= part.catch_up_to:
                part.caught_up = True
                done.append((p, part))
        return done

    def all_caught_up(self) -> bool:
        return not self._pending and all(part.caught_up for part in self._held.values())

    # --- figures ----------------------------------------------------------------------------------------------

    def per_queue(self) -> dict[str, tuple[int, int]]:
        """Queue → (in flight, oldest Start timestamp ms), over every partition held."""
        queues: dict[str, tuple[int, int]] = {}
        for part in self._held.values():
            for queue, (count, oldest) in part.state.per_queue().items():
                known, earliest = queues.get(queue, (0, sys.maxsize))
                queues[queue] = (known + count, min(earliest, oldest))
        return queues
