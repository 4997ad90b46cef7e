"""Markers-topic records → one row per marker, on the executors (``mapInArrow``): the marker's event
(kmq.wire.vocabulary.MarkerEvent, read by the same ``marker_event`` as ``kmq stats``), its record id as one long, and
what the classification needs. Undecodable records give one row with event ``MALFORMED``, never a failure.

A record id (partition, offset) travels as ``partition << 40 | offset``: a long joins and sorts far faster than a
string, and 2^40 offsets per partition is beyond any topic's life.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kmq.wire import MessageId

MID_SHIFT = 40
MALFORMED = -1
#: Columns of the decoded markers, in order (see ``schema()``).
COLUMNS = ("queue", "event", "mid", "first_id", "ts", "deadline", "seq", "delivery_count")


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
    ])


class _Rows:
    """Column lists of the rows being built."""

    def __init__(self) -> None:
        self.columns: tuple[list[Any], ...] = tuple([] for _ in COLUMNS)

    def add(self, queue: str | None, event: int, mid: int, first: int | None, ts: int, deadline: int, seq: int,
            count: int) -> None:
        for column, value in zip(self.columns, (queue, event, mid, first, ts, deadline, seq, count), strict=True):
            column.append(value)


def decode_batches(batches: Iterator[Any]) -> Iterator[Any]:
    """``mapInArrow`` function: Arrow batches of (value, ts, offset) → Arrow batches of ``COLUMNS``."""
    import pyarrow as pa

    from kmq.ops.lifecycle import SEQ_SHIFT
    from kmq.wire.marker_batch import decode_batch, is_batch
    from kmq.wire.markers import decode

    arrow_schema = pa.schema([("queue", pa.string()), ("event", pa.int8()), ("mid", pa.int64()),
                              ("first_id", pa.int64()), ("ts", pa.int64()), ("deadline", pa.int64()),
                              ("seq", pa.int64()), ("delivery_count", pa.int32())])
    for batch in batches:
        rows = _Rows()
        values, stamps, offsets = (batch.column(i).to_pylist() for i in range(3))
        for value, ts, offset in zip(values, stamps, offsets, strict=True):
            seq = offset << SEQ_SHIFT
            try:
                if is_batch(value):
                    _batch_rows(rows, decode_batch(value), ts, seq)
                else:
                    _marker_row(rows, decode(value), ts, seq)
            except Exception:  # noqa: BLE001 - any undecodable record is counted, never fatal
                rows.add(None, MALFORMED, 0, None, ts, 0, seq, 0)
        yield pa.RecordBatch.from_arrays([pa.array(c, type=f.type) for c, f in zip(rows.columns, arrow_schema,
                                                                                   strict=True)],
                                         schema=arrow_schema)


def _marker_row(rows: _Rows, marker: Any, ts: int, seq: int) -> None:
    from kmq.wire.vocabulary import marker_event

    mid = marker.message_id
    first = marker.first_id if marker.type == 0 else None
    rows.add(marker.queue, int(marker_event(marker)), mid_long(mid.partition, mid.offset),
             None if first is None else mid_long(first.partition, first.offset), ts,
             ts + marker.redeliver_after_ms, seq, marker.delivery_count or 1)


def _batch_rows(rows: _Rows, batch: Any, ts: int, seq: int) -> None:
    """A kmq batch record, entry by entry in the order they apply; only its few settles become Markers."""
    from kmq.wire.markers import Marker, MarkerType
    from kmq.wire.vocabulary import MarkerEvent, marker_event

    queue = batch.key.decode("utf-8", "replace")
    deadline = ts + batch.redeliver_after_ms
    add = rows.add
    index = seq
    for mid, _value, _headers, count, first, _enqueued in batch.starts():
        own = mid_long(mid.partition, mid.offset)
        add(queue, MarkerEvent.START, own, own if first is None else mid_long(first.partition, first.offset), ts,
            deadline, index, count or 1)
        index += 1
    for mid in batch.keep_alives():
        add(queue, MarkerEvent.KEEPALIVE, mid_long(mid.partition, mid.offset), None, ts, deadline, index, 1)
        index += 1
    for marker in batch.settles():
        add(queue, int(marker_event(marker)), mid_long(marker.message_id.partition, marker.message_id.offset), None,
            ts, ts + marker.redeliver_after_ms, index, 1)
        index += 1
    acks = batch.acks()
    if acks:
        ack = int(marker_event(Marker(MarkerType.END, acks[0], client_id=batch.client_id,
                                      instance_id=batch.instance_id)))
        for mid in acks:
            add(queue, ack, mid_long(mid.partition, mid.offset), None, ts, ts, index, 1)
            index += 1
