"""MarkerFold: step 1 of the tracker's loop, a poll's marker records folded into the states of their partitions.

Per record only what must be: route it to its partition (a pending partition keeps it for later, one no longer held
drops it), decode it (a kmq batch or a kafka-mq-go marker; a malformed one is logged, counted and skipped) and move
the partition's next offset on. Once per poll: each partition's deadline clock and read horizon observe the newest
timestamp read. A clock probe read back tells the horizon its write reached the log.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import structlog
from confluent_kafka import KafkaError, KafkaException

from kmq import _kafka
from kmq.errors import MarkerDecodeError
from kmq.redelivery.clock import Monotonic
from kmq.redelivery.partition_state import PartitionState
from kmq.redelivery.partitions import OwnedPartitions, Partition
from kmq.wire import CLOCK_PROBE_KEY
from kmq.wire.marker_batch import decode_batch

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)


class Counter(Protocol):
    def inc(self, amount: float = 1) -> None: ...


class MarkerFold:
    """Folds records into ``owned``'s partitions; ``malformed`` counts the records skipped."""

    def __init__(self, owned: OwnedPartitions, malformed: Counter, monotonic: Monotonic) -> None:
        self._owned = owned
        self._malformed = malformed
        self._monotonic = monotonic

    def fold(self, records: Sequence[Any]) -> int:
        """Folds a poll's records, in order; returns how many there were. Raises KmqError on a fatal client error."""
        if not records:
            return 0
        newest: dict[int, tuple[Partition, int]] = {}
        route = self._owned.route
        for record in records:
            err = record.error()
            if err is not None:
                _consume_error(err)
                continue
            part = route(record)
            if part is None:
                continue
            offset = record.offset() or 0
            kind, timestamp_ms = record.timestamp()
            if not kind or timestamp_ms is None or timestamp_ms < 0:
                timestamp_ms = 0
            part.markers_read += 1
            state = part.state
            known = newest.get(state.partition)
            if known is None or timestamp_ms > known[1]:
                newest[state.partition] = (part, timestamp_ms)
            self._apply(state, offset, timestamp_ms, record.value())
            if part.horizon.probe_sent_at is not None and record.key() == CLOCK_PROBE_KEY:
                part.horizon.read(timestamp_ms, probe=True, monotonic_s=self._monotonic())
            if offset >= state.next_offset:
                state.next_offset = offset + 1
        for part, timestamp_ms in newest.values():
            part.clock.observe(timestamp_ms)
            part.horizon.read(timestamp_ms)
        return len(records)

    def _apply(self, state: PartitionState, offset: int, timestamp_ms: int, value: bytes | None) -> None:
        try:
            if value and value[0] == 0:  # marker_batch.is_batch
                batch = decode_batch(value)
                if batch.owner_tracked:
                    # Message groups (#33): the owner of a grouped message's partition redelivers it in place, in
                    # its group's order; a tracker keeps no deadline for it and never copies it
                    # (docs/concepts/groups.md).
                    return
                state.apply_batch(offset, timestamp_ms, batch)
                if batch.hello:
                    log.info("consumer_restarted", queue=batch.key.decode(errors="replace"),
                             client_id=batch.client_id, instance_id=batch.instance_id,
                             taken_over=state.stats["taken_over"])
            else:
                state.apply_plain(offset, timestamp_ms, value)
        except MarkerDecodeError as bad:
            self._malformed.inc()
            log.warning("malformed_marker", partition=state.partition, offset=offset, reason=bad.reason)


def _consume_error(err: KafkaError) -> None:
    if _kafka.is_fatal(err):
        raise _kafka.to_kmq_error(KafkaException(err), "tracker consumer")
    log.warning("markers_consume_error", error=err.str())
