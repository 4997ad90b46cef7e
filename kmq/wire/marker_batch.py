"""The batched marker codec (``marker_format: kmq``): many markers of one queue in one markers-topic record.

A record value is ``BATCH_PREFIX`` (00 'K' 'B' <version>) and a ``MarkerBatch`` protobuf: version 1, 2 when it
holds Starts by reference (kmq.wire.start_refs), so a version-1 reader refuses such a record (counted as malformed)
instead of silently missing its Starts, or 3 when it is about owner-tracked messages (message groups), so a reader
that predates groups refuses it instead of redelivering a grouped message out of its group's order. A protobuf tag
is never 0, so a per-message decoder (kafka-mq-go's, or ``markers.decode``) rejects a batch record instead of
misreading it, and a per-message marker never starts with 00: ``decode_record`` tells the two apart by the first byte.
Pure: no Kafka imports.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from itertools import chain
from typing import Any, Protocol, cast

from google.protobuf.message import DecodeError

from kmq.errors import MarkerDecodeError
from kmq.wire import CLOCK_PROBE_KEY, DELAY_REASON, RELEASE_REASON, RETURN_REASON, MessageId, start_refs
from kmq.wire._proto import kmq_marker_pb2 as pb
from kmq.wire.markers import EndReason, Headers, Marker, MarkerType, decode
from kmq.wire.start_refs import Referable, RefStarts

BATCH_VERSION = 1
BATCH_PREFIX = b"\x00KB" + bytes([BATCH_VERSION])
#: The version of a batch holding Starts by reference.
REFS_VERSION = 2
REFS_PREFIX = b"\x00KB" + bytes([REFS_VERSION])
#: The version of a record about owner-tracked messages (``MarkerBatch.owner_tracked``): message groups.
OWNED_VERSION = 3
OWNED_PREFIX = b"\x00KB" + bytes([OWNED_VERSION])
_VERSIONS = (BATCH_PREFIX[3:], REFS_PREFIX[3:], OWNED_PREFIX[3:])
#: Bytes a Start entry costs beyond its payload and headers (ids, counts, tags), for splitting batches; a Start by
#: reference costs at most this in all.
START_OVERHEAD_BYTES = 48
SETTLE_OVERHEAD_BYTES = 24

#: Settle kind → (marker type, end reason, the reason text it implies; "" = carried in the entry).
_SETTLE_KINDS = {
    pb.Settle.RELEASE: (MarkerType.KEEPALIVE, EndReason.ACKED, RELEASE_REASON),
    pb.Settle.RETURNED: (MarkerType.KEEPALIVE, EndReason.ACKED, RETURN_REASON),
    pb.Settle.DELAYED: (MarkerType.KEEPALIVE, EndReason.ACKED, DELAY_REASON),
    pb.Settle.REJECT: (MarkerType.END, EndReason.REJECTED, ""),
    pb.Settle.REDELIVERED: (MarkerType.END, EndReason.REDELIVERED, ""),
    pb.Settle.DEAD_LETTERED: (MarkerType.END, EndReason.DEAD_LETTERED, ""),
}
_KEEP_ALIVE_KINDS = {RETURN_REASON: pb.Settle.RETURNED, DELAY_REASON: pb.Settle.DELAYED}
_END_KINDS = {EndReason.REJECTED: pb.Settle.REJECT, EndReason.REDELIVERED: pb.Settle.REDELIVERED,
              EndReason.DEAD_LETTERED: pb.Settle.DEAD_LETTERED}


class Startable(Referable, Protocol):
    """What a Start entry that copies its payload is made from: a Start by reference's fields, and the record's
    payload and headers (a Message has these)."""

    @property
    def payload(self) -> bytes: ...
    @property
    def record_headers(self) -> Mapping[str, bytes]: ...


def start_size(message: Startable) -> int:
    """Roughly what ``message`` adds to a batch record, to split batches below the broker's size limit."""
    headers = message.record_headers
    if not headers:
        return len(message.payload) + START_OVERHEAD_BYTES
    return len(message.payload) + sum(len(k) + len(v) + 4 for k, v in headers.items()) + START_OVERHEAD_BYTES


def encode_starts(key: bytes, redeliver_after_ms: int, starts: Sequence[Startable], *,
                  refs: Sequence[Referable] = (), client_id: str = "", instance_id: str = "",
                  owner_tracked: bool = False) -> bytes:
    """One batch record holding the Starts of ``starts`` (payload and metadata to redeliver each) and of ``refs``
    (by reference: the tracker reads the record back from the messages topic). ``owner_tracked``: Starts of
    grouped messages, which their owner redelivers in place (trackers skip the record)."""
    batch = _header(key, redeliver_after_ms, client_id, instance_id, owner_tracked)
    if refs:
        start_refs.fill(batch.refs, refs)
    entries = batch.starts
    for message in starts:
        mid = message.message_id
        entry = entries.add(partition=mid.partition, offset=mid.offset, value=message.payload,
                            delivery_count=message.delivery_count, enqueued_at_ms=message.enqueued_at_ms)
        first = message.first_message_id
        if first != mid:
            entry.first_message_id.CopyFrom(pb.MessageID(partition=first.partition, offset=first.offset))
        for name, value in message.record_headers.items():
            entry.headers.add(key=name, value=value)
    return (OWNED_PREFIX if owner_tracked else REFS_PREFIX if refs else BATCH_PREFIX) + batch.SerializeToString()


def encode_settles(key: bytes, redeliver_after_ms: int, *, keep_alives: Sequence[MessageId] = (),
                   acks: Sequence[MessageId] = (), others: Sequence[Marker] = (), client_id: str = "",
                   instance_id: str = "", owner_tracked: bool = False) -> bytes:
    """One batch record of settles: keep-alives and acks as packed id lists, releases and Ends with a reason
    (``others``: KEEPALIVE markers with RELEASE_REASON or RETURN_REASON, END markers with a non-ACKED reason)
    one entry each. ``owner_tracked``: settles of grouped messages (trackers skip the record)."""
    batch = _header(key, redeliver_after_ms, client_id, instance_id, owner_tracked)
    batch.keep_alive_partitions.extend([m.partition for m in keep_alives])
    batch.keep_alive_offsets.extend([m.offset for m in keep_alives])
    for marker in others:
        if marker.type is MarkerType.KEEPALIVE:
            kind: Any = _KEEP_ALIVE_KINDS.get(marker.reason, pb.Settle.RELEASE)
        elif marker.type is MarkerType.END and marker.end_reason in _END_KINDS:
            kind = _END_KINDS[marker.end_reason]
        else:
            raise ValueError(f"not a settle with a reason: {marker.type.name}/{marker.end_reason.name}")
        batch.settles.add(kind=kind, partition=marker.message_id.partition, offset=marker.message_id.offset,
                          delay_ms=marker.redeliver_after_ms, reason=marker.reason)
    batch.ack_partitions.extend([m.partition for m in acks])
    batch.ack_offsets.extend([m.offset for m in acks])
    return (OWNED_PREFIX if owner_tracked else BATCH_PREFIX) + batch.SerializeToString()


#: An End with a reason, as ``encode_ends`` takes it: the message, why it ended, the reason's text.
EndEntry = tuple[MessageId, EndReason, str]


def encode_ends(key: bytes, ends: Sequence[EndEntry], client_id: str = "") -> bytes:
    """``encode_settles`` of Ends with a reason only (a tracker's, once its copies are written), each from its
    fields instead of a Marker: the same bytes (``tests/unit/test_marker_batch.py``) at half the cost."""
    batch = _header(key, 0, client_id, "")
    add = batch.settles.add
    for message_id, end_reason, reason in ends:
        if end_reason not in _END_KINDS:
            raise ValueError(f"not a settle with a reason: END/{end_reason.name}")
        add(kind=_END_KINDS[end_reason], partition=message_id.partition, offset=message_id.offset, reason=reason)
    return BATCH_PREFIX + batch.SerializeToString()


def encode_clock_probe(client_id: str) -> bytes:
    """A record with no entries: a tracker writes one to a markers partition it has just caught up on, to learn
    the broker's time there from its delivery report (LogAppendTime). Every reader finds nothing in it."""
    return BATCH_PREFIX + _header(CLOCK_PROBE_KEY, 0, client_id, "").SerializeToString()


def encode_hello(key: bytes, client_id: str, instance_id: str) -> bytes:
    """The record a restarted consumer with a stable ``client_id`` writes first (see MarkerBatch.hello)."""
    batch = _header(key, 0, client_id, instance_id)
    batch.hello = True
    return BATCH_PREFIX + batch.SerializeToString()


def _header(key: bytes, redeliver_after_ms: int, client_id: str, instance_id: str,
            owner_tracked: bool = False) -> pb.MarkerBatch:
    batch = pb.MarkerBatch(key=key, redeliver_after_ms=redeliver_after_ms)
    if owner_tracked:
        batch.owner_tracked = True
    if client_id:
        batch.client_id = client_id
    if instance_id:
        batch.instance_id = instance_id
    return batch


def is_batch(data: bytes | None) -> bool:
    return bool(data) and data[0] == 0  # type: ignore[index]


#: A Start entry as a plain tuple: id, payload, headers, delivery count, first id (None: this one), enqueued-at.
StartTuple = tuple[MessageId, bytes, Headers, int, MessageId | None, int]


class DecodedBatch:
    """A decoded batch record, read entry by entry without building a Marker for each (the tracker's path)."""

    __slots__ = ("_batch", "client_id", "hello", "instance_id", "key", "owner_tracked", "redeliver_after_ms", "refs")

    def __init__(self, batch: pb.MarkerBatch, refs: RefStarts = start_refs.EMPTY) -> None:
        self._batch = batch
        #: Its Starts by reference.
        self.refs = refs
        self.key: bytes = batch.key
        self.redeliver_after_ms: int = batch.redeliver_after_ms
        self.client_id: str = batch.client_id
        self.instance_id: str = batch.instance_id
        #: A restarted consumer's announcement (no entries): see MarkerBatch.hello.
        self.hello: bool = batch.hello
        #: About owner-tracked (grouped) messages: their owner redelivers them, trackers skip the record.
        self.owner_tracked: bool = batch.owner_tracked

    def starts(self) -> Iterator[StartTuple]:
        """Its Starts that carry their payload (``refs`` holds the others)."""
        for entry in self._batch.starts:
            first = (MessageId(entry.first_message_id.partition, entry.first_message_id.offset)
                     if entry.HasField("first_message_id") else None)
            headers = tuple((h.key, h.value) for h in entry.headers) if entry.headers else ()
            yield (MessageId(entry.partition, entry.offset), entry.value, headers, entry.delivery_count, first,
                   entry.enqueued_at_ms)

    def keep_alive_columns(self) -> tuple[list[int], list[int]]:
        """The keep-alives' (partitions, offsets), without a MessageId each."""
        return list(self._batch.keep_alive_partitions), list(self._batch.keep_alive_offsets)

    def ack_columns(self) -> tuple[list[int], list[int]]:
        """The acks' (partitions, offsets), without a MessageId each."""
        return list(self._batch.ack_partitions), list(self._batch.ack_offsets)

    def keep_alives(self) -> list[MessageId]:
        return list(map(MessageId, self._batch.keep_alive_partitions, self._batch.keep_alive_offsets))

    def settles(self) -> Iterator[Marker]:
        """Releases and Ends with a reason, as Markers (they are few)."""
        for settle in self._batch.settles:
            kind, reason, implied = _SETTLE_KINDS[cast(Any, settle.kind)]
            yield Marker(kind, MessageId(settle.partition, settle.offset), settle.delay_ms, end_reason=reason,
                         reason=implied or settle.reason, client_id=self.client_id, instance_id=self.instance_id)

    def acks(self) -> list[MessageId]:
        return list(map(MessageId, self._batch.ack_partitions, self._batch.ack_offsets))

    def markers(self) -> Iterator[Marker]:
        """Every marker of the batch, in the order they apply."""
        key, after, client, instance = self.key, self.redeliver_after_ms, self.client_id, self.instance_id
        owned = self.owner_tracked
        for mid, value, headers, count, first, enqueued in self.starts():
            yield Marker(MarkerType.START, mid, after, key, value, delivery_count=count, first_message_id=first,
                         enqueued_at_ms=enqueued, client_id=client, instance_id=instance, headers=headers,
                         owner_tracked=owned)
        refs = self.refs
        for index, (mid, enqueued) in enumerate(zip(refs.message_ids(), refs.enqueued_at_ms, strict=True)):
            count, first = refs.delivery(index, mid)
            yield Marker(MarkerType.START, mid, after, key, delivery_count=count, first_message_id=first,
                         enqueued_at_ms=enqueued, client_id=client, instance_id=instance, reference=True,
                         owner_tracked=owned)
        for mid in self.keep_alives():
            yield Marker(MarkerType.KEEPALIVE, mid, after, client_id=client, instance_id=instance, owner_tracked=owned)
        for marker in self.settles():
            yield dataclasses.replace(marker, owner_tracked=True) if owned else marker
        for mid in self.acks():
            yield Marker(MarkerType.END, mid, client_id=client, instance_id=instance, owner_tracked=owned)


def decode_batch(data: bytes) -> DecodedBatch:
    """Parses a batch record (``is_batch(data)``); raises MarkerDecodeError for anything malformed."""
    if data[:3] != BATCH_PREFIX[:3]:
        raise MarkerDecodeError("starts with 00 but is not a kmq marker batch", data)
    if data[3:4] not in _VERSIONS:
        raise MarkerDecodeError(f"unknown marker batch version {data[3] if len(data) > 3 else None}", data)
    batch = pb.MarkerBatch()
    try:
        batch.ParseFromString(data[4:])
    except DecodeError as err:
        raise MarkerDecodeError(f"not a protobuf MarkerBatch ({err})", data) from err
    if not batch.key:
        raise MarkerDecodeError("marker batch without a key (queue id)", data)
    if (len(batch.keep_alive_partitions) != len(batch.keep_alive_offsets)
            or len(batch.ack_partitions) != len(batch.ack_offsets)):
        raise MarkerDecodeError("marker batch id lists of unequal length", data)
    ids = chain(batch.keep_alive_partitions, batch.keep_alive_offsets, batch.ack_partitions, batch.ack_offsets,
                (e.partition for e in batch.starts), (e.offset for e in batch.starts),
                (s.partition for s in batch.settles), (s.offset for s in batch.settles))
    if min(ids, default=0) < 0:
        raise MarkerDecodeError("negative message id in a marker batch", data)
    if any(s.kind not in _SETTLE_KINDS for s in batch.settles):
        raise MarkerDecodeError("unknown settle kind in a marker batch", data)
    if batch.HasField("refs"):
        return DecodedBatch(batch, start_refs.decode(batch.refs, data))
    return DecodedBatch(batch)


def decode_record(data: bytes | None) -> list[Marker]:
    """The markers in one markers-topic record, in either format, in the order they apply."""
    if not is_batch(data):
        return [decode(data)]
    assert data is not None
    return list(decode_batch(data).markers())
