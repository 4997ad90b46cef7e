"""``kmq inspect``: one message's life, read from the three topics.

From the message's first delivery id (its own id, or its first-id header) it finds every copy on the messages
topic, every marker of every copy, and its dead letter, and tells them in time order: enqueued, each delivery
(who: client id and host:pid; when; delivery count), keep-alives, releases and their reasons, redelivered copies,
rejects, dead letters, and the state it is in now. It answers "which worker holds message X" and "why was it
dead-lettered".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from kmq import _kafka, wire
from kmq._kafka.topic_replay import TopicReplay
from kmq.config import Config
from kmq.errors import KmqError, MarkerDecodeError
from kmq.wire import MessageId
from kmq.wire.marker_batch import decode_record
from kmq.wire.markers import EndReason, Marker, MarkerType


@dataclass(frozen=True, slots=True)
class Event:
    at_ms: int
    what: str
    message_id: str
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Life:
    queue: str
    first_message_id: str
    state: str = "unknown"
    holder: str = ""
    events: list[Event] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def inspect_message(config: Config, queue: str, message_id: MessageId) -> Life:
    """The life of the message at ``message_id`` on the messages topic (or of the one it is a copy of)."""
    key = queue.encode()
    copies: dict[MessageId, int] = {}  # every copy's id → when it was produced
    first = message_id
    records = list(_records(config, config.message_topic, key))
    for record in records:
        if _kafka.message_id(record) == message_id:
            first = _kafka.first_id(record)
    if not any(_kafka.message_id(r) == message_id for r in records):
        raise KmqError(f"no record of queue {queue!r} at {config.message_topic}[{message_id}]")
    for record in records:
        if _kafka.first_id(record) == first:
            copies[_kafka.message_id(record)] = _kafka.record_timestamp_ms(record)
    life = Life(queue, str(first))
    for mid, at_ms in copies.items():
        life.events.append(Event(at_ms, "enqueued" if mid == first else "copy_produced", str(mid)))
    open_starts: dict[MessageId, Marker] = {}
    ended_as: dict[MessageId, str] = {}
    for record in _records(config, config.marker_topic, key):
        try:
            markers = decode_record(record.value())
        except MarkerDecodeError:
            continue
        at_ms = _kafka.record_timestamp_ms(record)
        for marker in markers:
            if marker.message_id in copies:
                event = _event(marker, at_ms)
                life.events.append(event)
                if marker.type is MarkerType.START:
                    open_starts[marker.message_id] = marker
                elif marker.type is MarkerType.END:
                    open_starts.pop(marker.message_id, None)
                    ended_as[marker.message_id] = event.what
    for record in _records(config, config.dlq_topic, key):
        headers = _kafka.header_dict(record)
        if wire.DeliveryHeaders.parse(headers).first_message_id == first:
            life.events.append(Event(_kafka.record_timestamp_ms(record), "dead_letter_written",
                                     str(_kafka.message_id(record)),
                                     {"reason": headers.get(wire.HEADER_DLQ_REASON, b"").decode(errors="replace")}))
    life.events.sort(key=lambda e: e.at_ms)
    life.state, life.holder = _state(copies, open_starts, ended_as)
    return life


def _records(config: Config, topic: str, key: bytes) -> Any:
    replay = TopicReplay(config, topic)
    try:
        for record in replay.records():
            if record.key() == key:
                yield record
    finally:
        replay.close()


def _who(marker: Marker) -> str:
    return " ".join(p for p in (marker.client_id, marker.instance_id) if p) or "a kafka-mq-go component"


def _event(marker: Marker, at_ms: int) -> Event:
    mid = str(marker.message_id)
    if marker.type is MarkerType.START:
        return Event(at_ms, "delivered", mid, {"to": _who(marker), "delivery_count": marker.delivery_count or 1})
    if marker.type is MarkerType.KEEPALIVE:
        if marker.reason:
            return Event(at_ms, marker.reason, mid, {"by": _who(marker), "delay_ms": marker.redeliver_after_ms})
        return Event(at_ms, "kept_alive", mid, {"by": _who(marker)})
    what = {EndReason.ACKED: "acked", EndReason.REJECTED: "rejected", EndReason.REDELIVERED: "redelivered",
            EndReason.DEAD_LETTERED: "dead_lettered"}[marker.end_reason]
    if what == "rejected" and marker.reason == wire.EXPIRED_REASON:
        what = "expired"
    detail: dict[str, Any] = {"by": _who(marker)}
    if marker.reason:
        detail["reason"] = marker.reason
    return Event(at_ms, what, mid, detail)


def _state(copies: dict[MessageId, int], open_starts: dict[MessageId, Marker],
           ended_as: dict[MessageId, str]) -> tuple[str, str]:
    final = {"acked", "rejected", "dead_lettered", "expired"}
    for outcome in ended_as.values():
        if outcome in final:
            return outcome, ""
    if open_starts:
        start = max(open_starts.values(), key=lambda m: m.delivery_count)
        return "in_flight", _who(start)
    if any(mid not in ended_as for mid in copies):
        return "waiting", ""
    return "ended", ""
