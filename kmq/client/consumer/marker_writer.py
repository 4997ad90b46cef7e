"""MarkerWriter: writes one queue's markers, in the configured marker format; a facade over two named parts.

The **StartWriter** writes Starts when the consumer's loop asks (one record per batch, or per message), each record
with a Delivery to wait on; the **SettleWriter** turns settles (ack, keep-alive, release, reject, give-back, delay)
appended from any thread into batched records on a thread of its own. Both write through one **MarkerChannel**
(producer, topic, the queue's key, the identity every batch carries), which reports what became durable.
"""

from __future__ import annotations

from collections.abc import Sequence

from kmq._kafka.producer import MarkerProducer
from kmq.client.consumer.broker_time import BrokerTime
from kmq.client.consumer.marker_channel import Durable, MarkerChannel
from kmq.client.consumer.reference_policy import ReferencePolicy
from kmq.client.consumer.settle_sink import SettleSink
from kmq.client.consumer.settle_writer import SettleWriter
from kmq.client.consumer.start_writer import StartWriter
from kmq.config import Config
from kmq.delivery import Delivery
from kmq.wire import MessageId
from kmq.wire.marker_batch import Startable
from kmq.wire.markers import EndReason

__all__ = ["Durable", "MarkerWriter"]


class MarkerWriter:
    """One queue's marker output. ``start`` from the loop thread; settles from any thread."""

    __slots__ = ("channel", "settles", "starts")

    def __init__(self, config: Config, topic: str, key: bytes, producer: MarkerProducer, *, instance_id: str = "",
                 client_id: str = "") -> None:
        self.channel = MarkerChannel(config, topic, key, producer, instance_id=instance_id, client_id=client_id)
        self.starts = StartWriter(config, self.channel)
        self.settles = SettleWriter(config, self.channel)

    # --- what the parts share ---------------------------------------------------------------------------------

    @property
    def broker_time(self) -> BrokerTime:
        return self.channel.broker_time

    @property
    def on_durable(self) -> Durable:
        return self.channel.on_durable

    @on_durable.setter
    def on_durable(self, listener: Durable) -> None:
        self.channel.on_durable = listener

    @property
    def references(self) -> ReferencePolicy | None:
        return self.starts.references

    @references.setter
    def references(self, policy: ReferencePolicy | None) -> None:
        self.starts.references = policy

    @property
    def undelivered(self) -> int:
        """Settle markers whose record failed to be written, since the start."""
        return self.settles.undelivered

    @property
    def owned(self) -> SettleSink:
        """Where owner-tracked (grouped) messages' settles go: records of their own, which trackers skip."""
        return self.settles.owned

    # --- Starts (loop thread) ------------------------------------------------------------------------------------

    def start(self, messages: Sequence[Startable]) -> list[Delivery[MessageId]]:
        """Writes the Starts of ``messages``; the batch may be handed out once every Delivery succeeded."""
        return self.starts.start(messages)

    # --- settles (any thread) -------------------------------------------------------------------------------------

    def ack(self, message_id: MessageId) -> None:
        self.settles.plain.ack(message_id)

    def ack_many(self, message_ids: Sequence[MessageId]) -> None:
        self.settles.plain.ack_many(message_ids)

    def keep_alive(self, message_id: MessageId) -> None:
        self.settles.plain.keep_alive(message_id)

    def release(self, message_id: MessageId, delay_ms: int) -> None:
        """A KeepAlive with the delay as deadline, then silence: the tracker (Go's too) redelivers after it."""
        self.settles.plain.release(message_id, delay_ms)

    def give_back(self, message_id: MessageId) -> None:
        """Like ``release(0)``, for a message no handler saw: a kmq tracker's copy keeps its delivery count."""
        self.settles.plain.give_back(message_id)

    def delay(self, message_id: MessageId, delay_ms: int) -> None:
        """For a message read before its due time: the tracker redelivers it after ``delay_ms``, count unchanged."""
        self.settles.plain.delay(message_id, delay_ms)

    def end(self, message_id: MessageId, end_reason: EndReason, reason: str = "") -> None:
        self.settles.plain.end(message_id, end_reason, reason)

    def deduplicated(self, duplicates: Sequence[tuple[MessageId, MessageId]]) -> Delivery[MessageId]:
        """Writes at once the End (deduplicated) of each (duplicate, the message it repeats), instead of a Start (see
        SettleWriter.deduplicated)."""
        return self.settles.deduplicated(duplicates)

    def hello(self) -> None:
        """Announces this (re)started consumer (see SettleWriter.hello)."""
        self.settles.hello()

    def flush(self, timeout_s: float) -> int:
        """Writes every settle appended so far and waits until all records are durable; returns how many
        records are not."""
        return self.settles.flush(timeout_s)

    def close(self, timeout_s: float) -> int:
        """Stops the writer thread after a last write; returns how many records are not durable."""
        return self.settles.close(timeout_s)
