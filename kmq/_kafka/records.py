"""Reading confluent-kafka records: their ids, headers and timestamps as kmq's values."""

from __future__ import annotations

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME
from confluent_kafka import Message as KafkaMessage

from kmq import wire
from kmq.wire import MessageId


def message_id(record: KafkaMessage) -> MessageId:
    return MessageId(record.partition() or 0, record.offset() or 0)


def first_id(record: KafkaMessage) -> MessageId:
    """The first delivery's id of a messages-topic record: its first-id header, or its own id on a first delivery."""
    first = header_dict(record).get(wire.HEADER_FIRST_ID)
    return MessageId.parse(first.decode()) if first else message_id(record)


def header_dict(record: KafkaMessage) -> dict[str, bytes]:
    headers: list[tuple[str, bytes]] | None = record.headers()  # type: ignore[assignment]
    return {k: v or b"" for k, v in headers} if headers else {}


def record_timestamp_ms(record: KafkaMessage) -> int:
    kind, ts = record.timestamp()
    return int(ts) if kind != 0 and ts is not None and ts >= 0 else 0




def log_append_time_ms(record: KafkaMessage) -> int:
    """The broker's append time of a record of a LogAppendTime topic (a delivery report carries it), else 0."""
    kind, ts = record.timestamp()
    return int(ts) if kind == TIMESTAMP_LOG_APPEND_TIME and ts is not None and ts > 0 else 0
