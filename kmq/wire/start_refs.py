"""Starts by reference (``StartRefs`` in kmq_marker.proto): which records a batch Started, not their payloads.

The payload and headers of a message are already durable on the messages topic, so a Start needs only where the
record is, when it was enqueued, and, for a redelivered copy, its delivery count and first id. Entries are sorted
by (partition, offset) and stored in runs of one partition with delta-coded offsets and enqueue times: ~3-5 bytes
per Start where a copy costs the payload. Pure: no Kafka imports.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, chain, repeat
from typing import Protocol

from kmq.errors import MarkerDecodeError
from kmq.wire import MessageId
from kmq.wire._proto import kmq_marker_pb2 as pb

#: What a referenced Start tells beyond its id: (delivery count, first id), for the Starts that are not first
#: deliveries; a first delivery (count 1, first id its own) is not listed.
Extra = tuple[int, MessageId]


class Referable(Protocol):
    """What a Start by reference is made from (a Message has these)."""

    @property
    def message_id(self) -> MessageId: ...
    @property
    def delivery_count(self) -> int: ...
    @property
    def first_message_id(self) -> MessageId: ...
    @property
    def enqueued_at_ms(self) -> int: ...


def fill(out: pb.StartRefs, starts: Sequence[Referable]) -> None:
    """Writes ``starts`` into ``out`` (sorted, in runs, delta-coded)."""
    partitions, runs, offset_deltas, enqueued_deltas = [], [], [], []
    extra_indexes, extra_counts, extra_parts, extra_offsets = [], [], [], []
    run_partition, last_offset, last_enqueued = -1, 0, 0
    for index, start in enumerate(sorted(starts, key=_by_id)):
        partition, offset = start.message_id
        if partition != run_partition:
            partitions.append(partition)
            runs.append(0)
            run_partition, last_offset = partition, 0
        runs[-1] += 1
        offset_deltas.append(offset - last_offset)
        enqueued_deltas.append(start.enqueued_at_ms - last_enqueued)
        last_offset, last_enqueued = offset, start.enqueued_at_ms
        first = start.first_message_id
        if start.delivery_count != 1 or first != start.message_id:
            extra_indexes.append(index)
            extra_counts.append(start.delivery_count)
            extra_parts.append(first.partition)
            extra_offsets.append(first.offset)
    out.partitions.extend(partitions)
    out.run_lengths.extend(runs)
    out.offset_deltas.extend(offset_deltas)
    out.enqueued_deltas.extend(enqueued_deltas)
    out.extra_indexes.extend(extra_indexes)
    out.extra_delivery_counts.extend(extra_counts)
    out.extra_first_partitions.extend(extra_parts)
    out.extra_first_offsets.extend(extra_offsets)


def _by_id(start: Referable) -> MessageId:
    return start.message_id


@dataclass(frozen=True, slots=True)
class RefStarts:
    """The decoded Starts by reference of one batch, as columns (the tracker's rebuild reads millions)."""

    #: One per run, with the number of Starts in it.
    run_partitions: list[int]
    run_lengths: list[int]
    #: Per Start, in (partition, offset) order.
    offsets: list[int]
    enqueued_at_ms: list[int]
    #: Index of a Start → its (delivery count, first id), for those that are not first deliveries.
    extras: dict[int, Extra] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.offsets)

    def partitions(self) -> list[int]:
        """Per Start, its partition."""
        return list(chain.from_iterable(map(repeat, self.run_partitions, self.run_lengths)))

    def message_ids(self) -> list[MessageId]:
        return list(map(MessageId, self.partitions(), self.offsets))

    def runs(self) -> Iterator[tuple[int, int, int]]:
        """(partition, index of its first Start, index after its last), per run."""
        start = 0
        for partition, length in zip(self.run_partitions, self.run_lengths, strict=True):
            yield partition, start, start + length
            start += length

    def delivery(self, index: int, message_id: MessageId) -> tuple[int, MessageId | None]:
        """The (delivery count, first id or None when its own) of the Start at ``index``."""
        extra = self.extras.get(index)
        if extra is None:
            return 1, None
        count, first = extra
        return count, None if first == message_id else first


EMPTY = RefStarts([], [], [], [])


def decode(refs: pb.StartRefs, data: bytes) -> RefStarts:
    """The columns of ``refs`` (from the batch record ``data``, for errors); MarkerDecodeError if inconsistent."""
    if not refs.run_lengths and not refs.partitions:
        return EMPTY
    run_partitions, run_lengths = list(refs.partitions), list(refs.run_lengths)
    deltas, enqueued = refs.offset_deltas, refs.enqueued_deltas
    total = sum(run_lengths)
    if len(run_partitions) != len(run_lengths) or total != len(deltas) or total != len(enqueued):
        raise MarkerDecodeError("start references with lists of unequal length", data)
    if min(run_partitions) < 0 or min(run_lengths) < 1:
        raise MarkerDecodeError("start references with a negative partition or an empty run", data)
    if run_partitions != sorted(set(run_partitions)):
        raise MarkerDecodeError("start references not in partition order", data)
    offsets: list[int] = []
    at = 0
    for length in run_lengths:
        run = deltas[at:at + length]
        if 0 in run[1:]:
            raise MarkerDecodeError("start references not in offset order", data)
        offsets += accumulate(run)
        at += length
    if max(offsets) >= 2**63:
        raise MarkerDecodeError("start reference offset out of range", data)
    extras = _extras(refs, total, data)
    return RefStarts(run_partitions, run_lengths, offsets, list(accumulate(enqueued)), extras)


def _extras(refs: pb.StartRefs, total: int, data: bytes) -> dict[int, Extra]:
    indexes = refs.extra_indexes
    if not indexes:
        return {}
    columns = (refs.extra_delivery_counts, refs.extra_first_partitions, refs.extra_first_offsets)
    if any(len(c) != len(indexes) for c in columns):
        raise MarkerDecodeError("start reference extras with lists of unequal length", data)
    if max(indexes) >= total or min(chain(refs.extra_first_partitions, refs.extra_first_offsets)) < 0:
        raise MarkerDecodeError("start reference extra out of range", data)
    return {index: (count, MessageId(partition, offset))
            for index, count, partition, offset in zip(indexes, *columns, strict=True)}
