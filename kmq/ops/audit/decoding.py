"""Markers-topic records → one row per marker, on the executors (``mapInArrow``): the marker's event
(kmq.wire.vocabulary.MarkerEvent, read by the same ``marker_event`` as ``kmq stats``), its record id as one long, and
what the classification needs. Undecodable records give one row with event ``MALFORMED``, never a failure.

A record id (partition, offset) travels as ``partition << 40 | offset``: a long joins and sorts far faster than a
string, and 2^40 offsets per partition is beyond any topic's life.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kmq.ops.lifecycle import SEQ_SHIFT
from kmq.wire import MessageId
from kmq.wire._proto import kmq_marker_pb2 as _pb
from kmq.wire.marker_batch import decode_batch, is_batch
from kmq.wire.markers import MarkerType
from kmq.wire.vocabulary import MarkerEvent, event_of, marker_event

MID_SHIFT = 40
MALFORMED = -1
_START, _KEEPALIVE = int(MarkerEvent.START), int(MarkerEvent.KEEPALIVE)
#: Columns of the decoded markers, in order (see ``schema()``).
COLUMNS = ("queue", "event", "mid", "first_id", "ts", "deadline", "seq", "delivery_count", "owner")


def mid_long(partition: int, offset: int) -> int:
    return (partition << MID_SHIFT) | offset


def mid_of(value: int) -> MessageId:
    return MessageId(value >> MID_SHIFT, value & ((1 << MID_SHIFT) - 1))


def schema() -> Any:
    from pyspark.sql import types as T

    return T.StructType([
        T.StructField("queue", T.StringType()), T.StructField("event", T.ByteType()),
        T.StructField("mid", T.LongType()), T.StructField("first_id", T.LongType()),
        T.StructField("ts", T.LongType()), T.StructField("deadline", T.LongType()),
        T.StructField("seq", T.LongType()), T.StructField("delivery_count", T.IntegerType()),
        # The writing instance, on an owner-tracked (grouped) record's markers only: who holds its newest delivery.
        T.StructField("owner", T.StringType()),
    ])


def decode_batches(batches: Iterator[Any]) -> Iterator[Any]:
    """``mapInArrow`` function: Arrow batches of (value, ts, offset) → Arrow batches of ``COLUMNS``."""
    import pyarrow as pa

    arrow_schema = pa.schema([("queue", pa.string()), ("event", pa.int8()), ("mid", pa.int64()),
                              ("first_id", pa.int64()), ("ts", pa.int64()), ("deadline", pa.int64()),
                              ("seq", pa.int64()), ("delivery_count", pa.int32()), ("owner", pa.string())])
    for batch in batches:
        columns = decode_values(*(batch.column(i).to_pylist() for i in range(3)))
        yield pa.RecordBatch.from_arrays([pa.array(c, type=f.type, from_pandas=True)
                                          for c, f in zip(columns, arrow_schema, strict=True)], schema=arrow_schema)


Row = tuple[str | None, int, int, int | None, int, int, int, int, str | None]


def decode_values(values: list[bytes | None], stamps: list[int], offsets: list[int]) -> list[Any]:
    """Column arrays (``COLUMNS``) of the markers in these markers-topic records; an undecodable record gives one
    row with event ``MALFORMED``. What counts as undecodable is exactly what ``kmq stats`` skips: a batch goes
    through the codec's own ``decode_batch``, a kafka-mq-go marker through ``marker_row``, whose checks are
    ``markers.decode``'s (a property test holds the two together)."""
    rows: list[Row] = []
    packed: list[tuple[str, int, Any, int, int, int, str | None]] = []  # keep-alives and acks, as id arrays
    for value, ts, offset in zip(values, stamps, offsets, strict=True):
        seq = offset << SEQ_SHIFT
        try:
            if is_batch(value):
                _batch_rows(rows, packed, decode_batch(value), ts, seq)  # type: ignore[arg-type]
            else:
                rows.append(marker_row(value, ts, seq))
        except Exception:  # noqa: BLE001 - any undecodable record is counted, never fatal
            rows.append((None, MALFORMED, 0, None, ts, 0, seq, 0, None))
    columns: list[Any] = [list(c) for c in zip(*rows, strict=True)] if rows else [[] for _ in COLUMNS]
    if not packed:
        return columns
    import numpy as np

    ids = np.concatenate([p[2] for p in packed])
    sizes = [len(p[2]) for p in packed]
    columns = [np.asarray(c, dtype=object if i in (0, 3, 8) else np.int64) for i, c in enumerate(columns)]
    extra = [np.repeat(np.array([p[0] for p in packed], dtype=object), sizes),
             np.repeat(np.array([p[1] for p in packed], dtype=np.int64), sizes), ids,
             np.full(len(ids), None, dtype=object),
             np.repeat(np.array([p[3] for p in packed], dtype=np.int64), sizes),
             np.repeat(np.array([p[4] for p in packed], dtype=np.int64), sizes),
             np.concatenate([np.arange(p[5], p[5] + n, dtype=np.int64) for p, n in zip(packed, sizes, strict=True)]),
             np.ones(len(ids), dtype=np.int64),
             np.repeat(np.array([p[6] for p in packed], dtype=object), sizes)]
    return [np.concatenate([c, e]) for c, e in zip(columns, extra, strict=True)]


def marker_row(value: bytes | None, ts: int, seq: int) -> Row:
    """One kafka-mq-go format marker as a row, without building a Marker; raises ValueError on what
    ``kmq.wire.markers.decode`` rejects."""
    if not value:
        raise ValueError("empty value")
    msg = _pb.Marker()
    msg.ParseFromString(value)
    if msg.version != 0 or msg.type not in (0, 1, 2) or not msg.HasField("message_id"):
        raise ValueError("not a marker")
    mid = msg.message_id
    if mid.partition < 0 or mid.offset < 0:
        raise ValueError("negative message_id")
    own = (mid.partition << MID_SHIFT) | mid.offset
    if msg.type == _START:
        first = msg.first_message_id if msg.HasField("first_message_id") else None
        return (msg.key.decode("utf-8", "replace"), _START, own,
                own if first is None else (first.partition << MID_SHIFT) | first.offset, ts,
                ts + msg.redeliver_after_ms, seq, msg.delivery_count or 1, None)
    event = int(event_of(msg.type, msg.end_reason, msg.reason, msg.client_id, msg.instance_id))
    return (msg.key.decode("utf-8", "replace"), event, own, None, ts, ts + msg.redeliver_after_ms, seq, 1, None)


def _batch_rows(rows: list[Row], packed: list[Any], batch: Any, ts: int, seq: int) -> None:
    """A kmq batch record, entry by entry in the order they apply (kmq.wire.marker_batch.DecodedBatch.markers),
    read straight from its protobuf: the packed keep-alive and ack ids as arrays, only its few settles as
    Markers."""
    import numpy as np

    pb = batch._batch
    queue = batch.key.decode("utf-8", "replace")
    owner = batch.instance_id if batch.owner_tracked else None
    deadline = ts + batch.redeliver_after_ms
    append = rows.append
    index = seq
    for e in pb.starts:
        own = (e.partition << MID_SHIFT) | e.offset
        first = ((e.first_message_id.partition << MID_SHIFT) | e.first_message_id.offset
                 if e.HasField("first_message_id") else own)
        append((queue, _START, own, first, ts, deadline, index, e.delivery_count or 1, owner))
        index += 1
    refs = batch.refs  # Starts by reference (batch version 2): after the copying ones, as DecodedBatch.markers
    for i, mid in enumerate(refs.message_ids()):
        count, first_id = refs.delivery(i, mid)
        own = (mid.partition << MID_SHIFT) | mid.offset
        first = own if first_id is None else (first_id.partition << MID_SHIFT) | first_id.offset
        append((queue, _START, own, first, ts, deadline, index, count or 1, owner))
        index += 1
    if pb.keep_alive_partitions:
        ids = (np.array(pb.keep_alive_partitions, dtype=np.int64) << MID_SHIFT) | np.array(pb.keep_alive_offsets,
                                                                                           dtype=np.int64)
        packed.append((queue, _KEEPALIVE, ids, ts, deadline, index, owner))
        index += len(ids)
    for marker in batch.settles():
        mid = marker.message_id
        append((queue, int(marker_event(marker)), (mid.partition << MID_SHIFT) | mid.offset, None, ts,
                ts + marker.redeliver_after_ms, index, 1, owner))
        index += 1
    if pb.ack_partitions:
        ack = int(event_of(MarkerType.END, 0, "", batch.client_id, batch.instance_id))
        ids = (np.array(pb.ack_partitions, dtype=np.int64) << MID_SHIFT) | np.array(pb.ack_offsets, dtype=np.int64)
        packed.append((queue, ack, ids, ts, ts, index, owner))
