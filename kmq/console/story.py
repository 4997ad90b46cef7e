"""A message's page: its payload and headers, and its story (``kmq inspect``'s, told by kmq.ops.inspect.tell), read
where the console knows they are instead of replaying the topics: its records by id, its markers from its queue's
markers partition starting at its enqueue time, its dead letters by id: all in the topic set the message is in."""

from __future__ import annotations

import json
from dataclasses import dataclass

from confluent_kafka import Message as KafkaMessage

from kmq import _kafka
from kmq.config import Config
from kmq.console.model import Model
from kmq.console.topics import Reader
from kmq.errors import MarkerDecodeError
from kmq.ops.inspect import Life, tell
from kmq.ops.lifecycle import Key
from kmq.topic_sets import TopicSet
from kmq.wire import MessageId
from kmq.wire import vocabulary as v
from kmq.wire.marker_batch import decode_record
from kmq.wire.markers import Marker, MarkerType

#: Markers read at most for one story (a message in flight for hours on a busy partition is told up to here).
MARKERS_BUDGET = 500_000
#: Once a message is settled, markers read this much log time past its last one (a late ack, a racing copy).
SETTLED_MARGIN_MS = 5_000
#: Payload bytes shown at most.
SHOWN_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class Payload:
    size: int
    text: str
    #: Pretty-printed when the payload is JSON, else "".
    json: str
    hex: str
    truncated: bool
    headers: list[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class Story:
    life: Life
    payload: Payload
    #: The markers budget ran out before the story's end.
    cut_short: bool


def read(config: Config, topics: TopicSet, model: Model, key: Key) -> Story | None:
    """The story of the message at ``key`` of ``topics`` (``model`` is that set's); None when its records are gone."""
    queue, first = key
    with model.lock:
        ids = {first, *model.live.record_ids(key)}
        letter_ids = [letter.dlq_id for letter in model.letters.of_message(key)]
        partitions = sorted(model.workers.marker_partitions.get(queue, ()))
        state = model.live.state_of(key)
        held = key in model.live.lives  # not forgotten: the console holds every delivery of it
        starts = [d.start_ms for _, d in model.live.deliveries(key)]
    if held and not starts:
        partitions = []  # never Started: it has no markers
    with Reader(config, topics) as reader:
        copies = {mid: r for mid, r in reader.at(topics.messages, ids).items() if _queue(r) == queue}
        if not copies:
            return None
        # From its first Start when the console holds its deliveries, else from its enqueue time (a little before:
        # the clocks of producer and broker differ).
        since_ms = (min(starts) if starts else min(_kafka.record_timestamp_ms(r) for r in copies.values())) - 1_000
        markers, cut_short = _markers(reader, topics.markers, partitions, since_ms, first, ids,
                                      settled=state not in (None, *_MOVING))
        more = ids - set(copies)
        if more:  # copies a Start named that the console holds no record of (a forgotten acked message's)
            copies.update(reader.at(topics.messages, more))
        letters = list(reader.at(topics.dead_letters, letter_ids).values())
    life = tell(queue, first, copies, markers, letters, state)
    return Story(life, payload(copies.get(first) or next(iter(copies.values()))), cut_short)


_MOVING = (v.WAITING, v.IN_FLIGHT, v.DELAYED, v.OVERDUE)


def _markers(reader: Reader, topic: str, partitions: list[int], since_ms: int, first: MessageId,
             ids: set[MessageId], settled: bool) -> tuple[list[tuple[Marker, int]], bool]:
    """The markers of the message's deliveries (``ids`` grows with each copy a Start names as the message's)."""
    found: list[tuple[Marker, int]] = []
    budget = MARKERS_BUDGET
    for p in partitions:
        start, end = reader.offset_at(topic, p, since_ms), reader.watermarks(topic, p)[1]
        open_: set[MessageId] = set()
        last_ms = since_ms
        for record in reader.range(topic, p, start, end):
            budget -= 1
            at_ms = _kafka.record_timestamp_ms(record)
            if budget <= 0:
                return found, True
            if settled and not open_ and found and at_ms > last_ms + SETTLED_MARGIN_MS:
                break
            try:
                markers = decode_record(record.value())
            except MarkerDecodeError:
                continue
            for marker in markers:
                mid = marker.message_id
                if marker.type is MarkerType.START and marker.first_message_id == first:
                    ids.add(mid)
                if mid not in ids:
                    continue
                found.append((marker, at_ms))
                last_ms = at_ms
                if marker.type is MarkerType.START:
                    open_.add(mid)
                elif marker.type is MarkerType.END:
                    open_.discard(mid)
    return found, False


def payload(record: KafkaMessage) -> Payload:
    value = record.value() or b""
    shown = value[:SHOWN_BYTES]
    text = shown.decode("utf-8", "replace")
    try:
        pretty = json.dumps(json.loads(value), indent=2, ensure_ascii=False, sort_keys=True)[:SHOWN_BYTES * 2]
    except (ValueError, UnicodeDecodeError):
        pretty = ""
    headers = [(k, v.decode("utf-8", "replace")) for k, v in _kafka.header_dict(record).items()]
    return Payload(len(value), text, pretty, hexdump(shown), len(value) > SHOWN_BYTES, headers)


def hexdump(data: bytes, width: int = 16) -> str:
    lines = []
    for at in range(0, len(data), width):
        chunk = data[at:at + width]
        printable = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{at:08x}  {chunk.hex(' '):<{width * 3}} {printable}")
    return "\n".join(lines)


def _queue(record: KafkaMessage) -> str:
    return (record.key() or b"").decode("utf-8", "replace")
