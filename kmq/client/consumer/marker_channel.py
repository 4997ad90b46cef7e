"""MarkerChannel: where one queue's marker records go, and what their delivery reports tell.

Shared by the two writers of a queue's markers, the StartWriter and the SettleWriter: the markers topic, the queue's
key (which picks its markers partition), the producer, the identity every batch carries, and the reports of durable
records: ``on_durable`` learns the ids a durable Start or keep-alive record covers and its broker append time (what
the tracker's deadline for them is counted from), ``broker_time`` how promptly the broker took it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kmq._kafka.producer import MarkerProducer
from kmq._kafka.records import log_append_time_ms
from kmq.client.consumer.broker_time import BrokerTime
from kmq.config import MARKER_FORMAT_KMQ, Config
from kmq.wire import MessageId

#: Told the ids of a durable Start or keep-alive record and the broker time it was appended at (ms).
Durable = Callable[[Sequence[MessageId], int], None]
#: Told the ids a durable Start record (kmq format) Started and its offset on the markers topic.
StartRecorded = Callable[[Sequence[MessageId], int], None]


def _ignore(_ids: Sequence[MessageId], _appended_ms: int) -> None:
    pass


class MarkerChannel:
    """One queue's marker output: the producer and topic, and the reports of what became durable. Any thread."""

    __slots__ = ("after_ms", "batched", "broker_time", "client_id", "instance_id", "key", "last_offset",
                 "on_durable", "on_start_record", "producer", "topic")

    def __init__(self, config: Config, topic: str, key: bytes, producer: MarkerProducer, *, instance_id: str = "",
                 client_id: str = "") -> None:
        self.topic = topic
        self.key = key
        self.producer = producer
        self.batched = config.marker_format == MARKER_FORMAT_KMQ
        self.after_ms = config.redelivery_timeout_ms
        self.client_id = client_id
        self.instance_id = instance_id
        self.broker_time = BrokerTime()
        self.on_durable: Durable = _ignore
        #: Set by a consumer of grouped messages: where its commits' ``m=`` comes from (groups.MarkerFloor).
        self.on_start_record: StartRecorded | None = None
        #: The markers offset of the newest of its records reported durable (-1: none yet).
        self.last_offset = -1

    @property
    def queue(self) -> str:
        return self.key.decode(errors="replace")

    def durable(self, ids: Sequence[MessageId], sent_at: float, record: Any) -> None:
        """A record covering ``ids``, produced at ``sent_at`` (monotonic), is durable."""
        appended_ms = log_append_time_ms(record) if record is not None else 0
        if record is not None:
            self.last_offset = max(self.last_offset, record.offset())
        if appended_ms:
            self.broker_time.observe(sent_at, appended_ms)
            if ids:
                self.on_durable(ids, appended_ms)

