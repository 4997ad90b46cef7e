"""ClockProbes: the broker's time on a markers partition, learnt by writing to it.

A tracker's deadline clock runs on the log time of the markers it reads, so after reading a backlog it trails
the broker by however late it read them, and on a partition where no newer marker comes it never catches up:
every overdue deadline there would fire up to one redelivery timeout late. A partition the tracker has just
caught up on therefore gets one probe record (no entries, ``marker_batch.encode_clock_probe``); its delivery
report carries the broker's LogAppendTime, a fresh reading of the partition's clock. kmq marker format only:
a kafka-mq-go tracker would take the record for a malformed marker.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import structlog
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, KafkaError
from confluent_kafka import Message as KafkaMessage

from kmq._kafka.factory import ProducerClient
from kmq._util import take_all
from kmq.errors import KmqError
from kmq.wire import CLOCK_PROBE_KEY
from kmq.wire.marker_batch import encode_clock_probe

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)


class ClockProbes:
    """Sends probes from the tracker's loop; their answers (partition, broker time ms, monotonic time learnt)
    come back on the producer's thread and are collected by the loop. At most one probe per partition is on its
    way: while the partition cannot take it (a broker frozen or cut off) another adds nothing but a record queued
    for when it can (librdkafka retries the first one), so the next is sent once the first is answered or failed."""

    def __init__(self, producer: ProducerClient, topic: str, client_id: str,
                 monotonic: Callable[[], float]) -> None:
        self._producer = producer
        self._topic = topic
        self._value = encode_clock_probe(client_id)
        self._monotonic = monotonic
        self._answers: deque[tuple[int, int, float]] = deque()
        #: Partitions with a probe on its way (added on the loop thread, removed on the producer's).
        self._outstanding: set[int] = set()

    def send(self, partition: int) -> None:
        if partition in self._outstanding:
            return
        self._outstanding.add(partition)
        try:
            self._producer.produce(self._topic, self._value, CLOCK_PROBE_KEY, partition=partition,
                                   on_done=lambda err, record: self._answer(partition, err, record))
        except KmqError as err:  # as for a failed delivery: the clock stays on marker time
            self._outstanding.discard(partition)
            log.warning("clock_probe_failed", partition=partition, error=str(err))

    def _answer(self, partition: int, err: KafkaError | None, record: KafkaMessage) -> None:
        self._outstanding.discard(partition)
        if err is not None:  # the clock keeps running on marker time: late, never early
            log.warning("clock_probe_failed", partition=partition, error=err.str())
            return
        kind, timestamp_ms = record.timestamp()
        if kind == TIMESTAMP_LOG_APPEND_TIME:
            self._answers.append((partition, timestamp_ms, self._monotonic()))

    def answers(self) -> list[tuple[int, int, float]]:
        """The answers that came back since the last call."""
        return take_all(self._answers)
