"""StartWriter: writes the Starts of one queue's messages, in the configured marker format.

Starts are written when the consumer asks, one record per batch (``kmq``, split below the broker's record size
limit; Starts by reference fill the last record, then records of their own) or per message (``kafka-mq-go``); each
record gives a Delivery to wait on, and once it is durable the channel learns its message ids and broker append time.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from operator import attrgetter
from typing import Any

from kmq._kafka.records import log_append_time_ms
from kmq.client.consumer.marker_channel import MarkerChannel
from kmq.client.consumer.reference_policy import ReferencePolicy
from kmq.config import Config
from kmq.delivery import Delivery
from kmq.errors import DeliveryError
from kmq.wire import MessageId
from kmq.wire.marker_batch import START_OVERHEAD_BYTES, Startable, encode_starts, start_size
from kmq.wire.marker_bytes import encode_start

_message_id = attrgetter("message_id")


class StartWriter:
    """One queue's Start records. Loop thread."""

    __slots__ = ("_channel", "_start_record_bytes", "references")

    def __init__(self, config: Config, channel: MarkerChannel) -> None:
        self._channel = channel
        # A Start batch may grow to one payload's worth beyond this: a record of max_payload_bytes alone must fit.
        self._start_record_bytes = config.max_payload_bytes
        #: Which Starts name their record instead of copying it (kmq format); None: all copy. Set by the consumer
        #: once it knows the topics' retention, before its first Start.
        self.references: ReferencePolicy | None = None

    def start(self, messages: Sequence[Startable]) -> list[Delivery[MessageId]]:
        """Writes the Starts of ``messages``; the batch may be handed out once every Delivery succeeded."""
        if not messages:
            return []
        if not self._channel.batched:
            return [self._write_plain_starts(messages)]
        copies, refs = self.references.split(messages) if self.references is not None else (messages, ())
        deliveries = []
        chunk: list[Startable] = []
        size = 0
        for message in copies:
            cost = start_size(message)
            if chunk and size + cost > self._start_record_bytes:
                deliveries.append(self._write_starts(chunk, ()))
                chunk, size = [], 0
            chunk.append(message)
            size += cost
        # References cost at most START_OVERHEAD_BYTES each: they fill the last record, then records of their own.
        room = max(0, self._start_record_bytes - size) // START_OVERHEAD_BYTES
        step = max(1, self._start_record_bytes // START_OVERHEAD_BYTES)
        if chunk or refs:
            deliveries.append(self._write_starts(chunk, refs[:room]))
        for at in range(room, len(refs), step):
            deliveries.append(self._write_starts((), refs[at:at + step]))
        return deliveries

    def start_owned(self, messages: Sequence[Startable]) -> list[Delivery[MessageId]]:
        """Writes the owner-tracked Starts of grouped ``messages`` (kmq format): by reference, since their owner
        redelivers them from its own reading of the record and no tracker copies them."""
        step = max(1, self._start_record_bytes // START_OVERHEAD_BYTES)
        return [self._write_starts((), messages[at:at + step], owner_tracked=True)
                for at in range(0, len(messages), step)]

    def _write_starts(self, chunk: Sequence[Startable], refs: Sequence[Startable], *,
                      owner_tracked: bool = False) -> Delivery[MessageId]:
        channel = self._channel
        value = encode_starts(channel.key, channel.after_ms, chunk, refs=refs, client_id=channel.client_id,
                              instance_id=channel.instance_id, owner_tracked=owner_tracked)
        ids = [*map(_message_id, chunk), *map(_message_id, refs)]  # every message it Starts, by copy or reference
        sent_at = time.monotonic()

        def on_record(record: Any) -> None:
            channel.durable(ids, sent_at, record)
            if channel.on_start_record is not None:
                channel.on_start_record(ids, record.offset())

        return channel.producer.produce_future(channel.topic, value, channel.key, on_record=on_record)

    def _write_plain_starts(self, messages: Sequence[Startable]) -> Delivery[MessageId]:
        """One record per Start, one Delivery for them all: done when the last is, failed if any failed."""
        channel = self._channel
        delivery: Delivery[MessageId] = Delivery()
        reported = itertools.count(1)  # next() is atomic: callbacks may run on the poll thread and in flush()
        errors: list[BaseException] = []
        total = len(messages)
        sent_at = time.monotonic()

        ids = list(map(_message_id, messages))
        appended: list[int] = []

        def done(err: Any, record: Any) -> None:
            # One callback for the batch (librdkafka's batch produce): the messages' deadlines count from the
            # earliest append time among the batch's records, a few ms apart at most.
            if err is not None:
                errors.append(DeliveryError(f"delivery to {channel.topic} failed: {err.str()}",
                                            retriable=err.retriable(), code=err.code()))
            elif (appended_ms := log_append_time_ms(record) if record is not None else 0):
                channel.broker_time.observe(sent_at, appended_ms)
                appended.append(appended_ms)
            if next(reported) == total:
                if not errors and appended:
                    channel.on_durable(ids, min(appended))
                delivery._set(None, errors[0] if errors else None)

        key, after, client_id, instance_id = channel.key, channel.after_ms, channel.client_id, channel.instance_id
        channel.producer.produce_many(channel.topic, [
            encode_start(m.message_id, after, key, m.payload, delivery_count=m.delivery_count,
                         first_message_id=m.first_message_id, enqueued_at_ms=m.enqueued_at_ms,
                         headers=m.record_headers.items(), client_id=client_id, instance_id=instance_id)
            for m in messages], key, done)
        return delivery
