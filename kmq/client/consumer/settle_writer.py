"""SettleWriter: writes one queue's settles (acks, keep-alives, releases, Ends) as marker records, in batches.

A settle is an O(1) append to a SettleSink from any thread; a writer thread turns what waits into records every
``settle_linger_ms``, or as soon as ``settle_batch_size`` settles wait. Within one write, keep-alives apply before
releases and Ends, and those before acks, so a keep-alive that raced with a settle of the same message never outlives
it. Settles of owner-tracked messages (message groups: their owner redelivers them in place, no tracker does) go to
the ``owned`` sink and are written in records of their own, flagged so a tracker skips them whole; once such a
record is durable, or has failed, ``on_ended`` learns which messages it ended.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import structlog

from kmq.client.consumer.marker_channel import MarkerChannel
from kmq.client.consumer.settle_sink import SettleSink
from kmq.config import Config
from kmq.delivery import Delivery
from kmq.errors import DeliveryError, KmqError
from kmq.wire import MessageId, deduplicated_reason
from kmq.wire.marker_batch import encode_hello, encode_settles
from kmq.wire.marker_bytes import encode_end, encode_keep_alive
from kmq.wire.markers import EndReason, Marker, MarkerType, encode

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

#: How long the writer thread sleeps when nothing waits (a settle arriving then waits at most this long).
IDLE_WAIT_S = 0.05
#: Entries of packed id lists per settle record; ~20 B each keeps a record far below the broker's 1 MB limit.
MAX_SETTLES_PER_RECORD = 20_000

#: Told the ids a durable (True) or failed (False) owner-tracked settle record ended (acks and Ends).
Ended = Callable[[Sequence[MessageId], bool], None]


def _ignore_ended(_ids: Sequence[MessageId], _ok: bool) -> None:
    pass


class SettleWriter:
    """One queue's settle output: a plain sink, an owner-tracked one, and the thread that writes both."""

    def __init__(self, config: Config, channel: MarkerChannel) -> None:
        self._channel = channel
        self._linger_s = config.settle_linger_ms / 1000
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._drain_lock = threading.Lock()
        self.plain = SettleSink(config.settle_batch_size, self._wake)
        #: Settles of owner-tracked (grouped) messages.
        self.owned = SettleSink(config.settle_batch_size, self._wake)
        self.on_ended: Ended = _ignore_ended
        #: Settle markers whose record failed to be written, since the start.
        self.undelivered = 0
        self._thread = threading.Thread(target=self._run, name=f"kmq-markers-{channel.queue}", daemon=True)
        self._thread.start()

    def hello(self) -> None:
        """Announces this (re)started consumer: a kmq tracker redelivers at once what earlier instances of the same
        ``client_id`` still hold (kmq format only: kafka-mq-go's trackers would count the record as malformed)."""
        channel = self._channel
        if channel.batched and channel.client_id:
            self._produce(encode_hello(channel.key, channel.client_id, channel.instance_id), 0)

    def deduplicated(self, duplicates: Sequence[tuple[MessageId, MessageId]]) -> Delivery[MessageId]:
        """Writes at once the End (deduplicated) of each (duplicate, the message it repeats), instead of a Start; the
        Delivery is done when all are durable, failed if any failed (nothing past them may be committed before)."""
        channel = self._channel
        markers = [Marker(MarkerType.END, duplicate, end_reason=EndReason.REJECTED, reason=deduplicated_reason(of),
                          instance_id=channel.instance_id) for duplicate, of in duplicates]
        if channel.batched:
            value = encode_settles(channel.key, channel.after_ms, others=markers, client_id=channel.client_id,
                                   instance_id=channel.instance_id)
            return channel.producer.produce_future(channel.topic, value, channel.key)
        delivery: Delivery[MessageId] = Delivery()
        reported = itertools.count(1)
        errors: list[BaseException] = []

        def done(err: Any, _record: Any) -> None:
            if err is not None:
                errors.append(DeliveryError(f"delivery to {channel.topic} failed: {err.str()}",
                                            retriable=err.retriable(), code=err.code()))
            if next(reported) == len(markers):
                delivery._set(None, errors[0] if errors else None)

        channel.producer.produce_many(channel.topic, [encode(m) for m in markers], channel.key, done)
        return delivery

    def wake(self) -> None:
        """Writes what waits now rather than after the linger (an owner waiting for an End to move a group on)."""
        self._wake.set()

    def flush(self, timeout_s: float) -> int:
        """Writes every settle appended so far and waits until all records are durable; returns how many
        records are not."""
        self.drain()
        return self._channel.producer.flush(timeout_s)

    def close(self, timeout_s: float) -> int:
        """Stops the writer thread after a last write; returns how many records are not durable."""
        self._stop.set()
        self._wake.set()
        self._thread.join()
        return self.flush(timeout_s)

    # --- the writer thread ----------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._linger_s if self.plain or self.owned else IDLE_WAIT_S)
            self._wake.clear()
            self.drain()

    def drain(self) -> None:
        """Writes every settle appended so far (any thread)."""
        with self._drain_lock:
            for sink, owned in ((self.plain, False), (self.owned, True)):
                if not sink:
                    continue
                keep_alives, others, acks = sink.take()
                try:
                    if owned:
                        self._write_batches(keep_alives, others, acks, owner_tracked=True)
                    elif self._channel.batched:
                        self._write_batches(keep_alives, others, acks)
                    else:
                        self._write_plain(keep_alives, others, acks)
                except KmqError as err:
                    # librdkafka refused the records outright (e.g. the topic is gone): they are lost, not retried,
                    # and the writer thread must live on for the next settles.
                    lost = len(keep_alives) + len(others) + len(acks)
                    self.undelivered += lost
                    log.error("markers_not_written", queue=self._channel.queue, markers=lost, error=str(err))
                    if owned:
                        self.on_ended([*_ended(others), *acks], False)

    def _write_plain(self, keep_alives: list[MessageId], others: list[Marker], acks: list[MessageId]) -> None:
        channel = self._channel
        produce, topic, key, after = channel.producer.produce, channel.topic, channel.key, channel.after_ms
        for message_id in keep_alives:  # one record each, so each reports its own message's new deadline
            produce(topic, encode_keep_alive(message_id, after), key, on_done=self._reporter(1, (message_id,)))
        values = [encode(marker) for marker in others]
        values += [encode_end(message_id, channel.instance_id) for message_id in acks]
        if values:
            channel.producer.produce_many(topic, values, key, self._one_delivered)

    def _write_batches(self, keep_alives: list[MessageId], others: list[Marker], acks: list[MessageId], *,
                       owner_tracked: bool = False) -> None:
        channel = self._channel
        step = MAX_SETTLES_PER_RECORD
        for i in range(0, max(len(keep_alives), len(others), len(acks)), step):
            part_k, part_o, part_a = keep_alives[i:i + step], others[i:i + step], acks[i:i + step]
            value = encode_settles(channel.key, channel.after_ms, keep_alives=part_k, acks=part_a, others=part_o,
                                   client_id=channel.client_id, instance_id=channel.instance_id,
                                   owner_tracked=owner_tracked)
            ended = [*_ended(part_o), *part_a] if owner_tracked else ()
            self._produce(value, len(part_k) + len(part_o) + len(part_a), part_k, ended)

    def _one_delivered(self, err: Any, _record: Any) -> None:
        if err is not None:
            self.undelivered += 1
            log.error("markers_not_delivered", queue=self._channel.queue, markers=1, error=err.str())

    def _reporter(self, count: int, kept_alive: Sequence[MessageId],
                  ended: Sequence[MessageId] = ()) -> Callable[[Any, Any], None]:
        """The delivery callback of a settle record of ``count`` markers, ``kept_alive`` among them, and ``ended``
        owner-tracked messages."""
        sent_at = time.monotonic()

        def done(err: Any, record: Any) -> None:
            if err is not None:
                self.undelivered += count
                log.error("markers_not_delivered", queue=self._channel.queue, markers=count, error=err.str())
            else:
                self._channel.durable(kept_alive, sent_at, record)
            if ended:
                self.on_ended(ended, err is None)
        return done

    def _produce(self, value: bytes, count: int, kept_alive: Sequence[MessageId] = (),
                 ended: Sequence[MessageId] = ()) -> None:
        channel = self._channel
        channel.producer.produce(channel.topic, value, channel.key, on_done=self._reporter(count, kept_alive, ended))


def _ended(others: Sequence[Marker]) -> list[MessageId]:
    return [m.message_id for m in others if m.type is MarkerType.END]
