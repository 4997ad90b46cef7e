"""Records: the messages and dead-letter topics' records of a simulation (markers are MarkerBuffers')."""

from __future__ import annotations

from kmq import wire
from kmq.ops.audit.synthetic.life import Life
from kmq.ops.audit.synthetic.sink import Headers, Sink
from kmq.wire import MessageId


class Records:
    """Messages go to the partitions in turn; dead letters carry what a consumer or tracker writes on them."""

    def __init__(self, sink: Sink, partitions: int, seed: int) -> None:
        self._sink = sink
        self._partitions = partitions
        self._next_partition = seed % partitions

    def produce(self, life: Life, headers: Headers, ts: int) -> MessageId:
        self._next_partition = partition = (self._next_partition + 1) % self._partitions
        return self._sink.message(partition, life.plan.queue.name.encode(), life.payload, headers, ts)

    def dead_letter(self, life: Life, reason: str, ts: int) -> None:
        key = life.plan.queue.name.encode()
        first = life.first or life.record
        headers = [*wire.DeliveryHeaders(life.count, first, life.enqueued_ms).encode(),
                   (wire.HEADER_DLQ_REASON, reason.encode()), (wire.HEADER_DLQ_QUEUE, key)]
        self._sink.dead_letter(key, life.payload, headers, ts)
