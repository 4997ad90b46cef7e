"""ReadyGate: what a consumer does with messages whose Starts are durable before they reach the ready buffer.

A message enqueued before the queue's purge line is purged (End, no handler); one read after its expiry time is
expired (dead-lettered or dropped); one read before its due time is held (due soon) or sent on a hop through the
tracker (due later; see DueTimes); the rest go to the ready buffer, where ``receive`` takes them.
"""

from __future__ import annotations

from collections.abc import Callable

from kmq.client.consumer.at_most_once import AtMostOnceMessages
from kmq.client.consumer.due_times import DueTimes
from kmq.client.consumer.hand_out import HandOut
from kmq.client.consumer.in_flight import InFlightMessages
from kmq.client.consumer.marker_writer import MarkerWriter
from kmq.client.message import Message
from kmq.wire import HEADER_GROUP


class ReadyGate:
    """Loop thread only (``take_all`` at close, once the loop stopped)."""

    __slots__ = ("_dead_letter_expired", "_due", "_in_flight", "_out", "_purged_before", "_settler", "_writer")

    def __init__(self, *, out: HandOut, in_flight: InFlightMessages, settler: InFlightMessages | AtMostOnceMessages,
                 writer: MarkerWriter, purged_before: Callable[[], int | None], dead_letter_expired: bool) -> None:
        self._out = out
        self._in_flight = in_flight
        self._settler = settler
        self._writer = writer
        self._purged_before = purged_before
        self._dead_letter_expired = dead_letter_expired
        #: Messages read before their due time and held until it.
        self._due = DueTimes()

    def put(self, messages: list[Message]) -> None:
        """Messages whose Starts are durable (and offsets committed): into the ready buffer, unless purged,
        expired or not due yet."""
        purged_before = self._purged_before()
        if purged_before is not None:
            purged = [m for m in messages if m.enqueued_at_ms < purged_before]
            if purged:
                for message in purged:
                    self._settler.purge(message)
                messages = [m for m in messages if not m.settled]
        ready, hops, expired = self._due.sort(messages)
        if hops and any(HEADER_GROUP in m.record_headers for m, _ in hops):
            # A grouped message goes out only once due (its group's ledger waits for it); no tracker would bring
            # an owner-tracked message back from a hop.
            ready += [m for m, _ in hops if HEADER_GROUP in m.record_headers]
            hops = [(m, d) for m, d in hops if HEADER_GROUP not in m.record_headers]
        for message, delay_ms in hops:  # read before their due time: the tracker brings them back then
            self._in_flight.discard(message.message_id)
            self._writer.delay(message.message_id, delay_ms)
        for message in expired:
            self._settler.expire(message, dead_letter=self._dead_letter_expired)
        if ready:
            self._out.put(ready)

    def put_due(self) -> None:
        """Held messages whose due time came (sorted again: one may have expired meanwhile)."""
        if self._due:
            self.put(self._due.take_due())

    def next_due_in_s(self) -> float | None:
        """Seconds until the next held message is due, or None."""
        return self._due.next_due_in_s()

    def take_all(self) -> list[Message]:
        """Every held message (the consumer is closing)."""
        return self._due.take_all()
