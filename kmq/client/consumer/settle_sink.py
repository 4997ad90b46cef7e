"""SettleSink: one queue's settles appended (from any thread) and not yet taken by its writer thread.

A settle is an O(1) append here, once per message on the thread that settles it; the SettleWriter's thread takes
what waits and writes it (kmq.client.consumer.settle_writer). Compiled by mypyc (setup.py's hot path): the appends
and the take run without the interpreter, and remain atomic (compiled code gives the GIL up only where it calls
something that does).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from typing import TypeVar

from kmq.wire import DELAY_REASON, RELEASE_REASON, RETURN_REASON, MessageId
from kmq.wire.markers import EndReason, Marker, MarkerType

T = TypeVar("T")


class SettleSink:
    """Settles appended and not yet written (any thread: deque appends are atomic)."""

    __slots__ = ("_batch_size", "_wake", "_woken", "acks", "keep_alives", "others")

    def __init__(self, batch_size: int, wake: threading.Event) -> None:
        self._batch_size = batch_size
        self._wake = wake
        #: The writer was woken for a full batch and has not taken it yet: the acks meanwhile need not wake it
        #: again (an Event.set per ack, while the writer waited for the GIL, was a tenth of a consumer's time).
        self._woken = False
        self.acks: deque[MessageId] = deque()
        self.keep_alives: deque[MessageId] = deque()
        self.others: deque[Marker] = deque()

    def __bool__(self) -> bool:
        return bool(self.acks or self.keep_alives or self.others)

    def ack(self, message_id: MessageId) -> None:
        self.acks.append(message_id)
        if len(self.acks) >= self._batch_size and not self._woken:
            self._woken = True
            self._wake.set()

    def ack_many(self, message_ids: Sequence[MessageId]) -> None:
        self.acks.extend(message_ids)
        if len(self.acks) >= self._batch_size and not self._woken:
            self._woken = True
            self._wake.set()

    def keep_alive(self, message_id: MessageId) -> None:
        self.keep_alives.append(message_id)

    def release(self, message_id: MessageId, delay_ms: int) -> None:
        """A KeepAlive with the delay as deadline, then silence: the tracker (Go's too) redelivers after it."""
        self.others.append(Marker(MarkerType.KEEPALIVE, message_id, delay_ms, reason=RELEASE_REASON))

    def give_back(self, message_id: MessageId) -> None:
        """Like ``release(0)``, for a message no handler saw: a kmq tracker's copy keeps its delivery count."""
        self.others.append(Marker(MarkerType.KEEPALIVE, message_id, 0, reason=RETURN_REASON))

    def delay(self, message_id: MessageId, delay_ms: int) -> None:
        """For a message read before its due time: the tracker redelivers it after ``delay_ms``, count unchanged."""
        self.others.append(Marker(MarkerType.KEEPALIVE, message_id, delay_ms, reason=DELAY_REASON))

    def end(self, message_id: MessageId, end_reason: EndReason, reason: str = "") -> None:
        self.others.append(Marker(MarkerType.END, message_id, end_reason=end_reason, reason=reason))

    def take(self) -> tuple[list[MessageId], list[Marker], list[MessageId]]:
        """(keep-alives, others, acks) appended so far, in the order they apply."""
        # Before taking: an ack appended after this line either is taken below or wakes the writer itself.
        self._woken = False
        return _take_all(self.keep_alives), _take_all(self.others), _take_all(self.acks)


def _take_all(buffer: deque[T]) -> list[T]:
    """Empties ``buffer`` with atomic pops (kmq._util.take_all, compiled here with its one caller on the hot path):
    an item appended by another thread meanwhile is taken now or left for the next take, never lost."""
    taken: list[T] = []
    while buffer:
        try:
            taken.append(buffer.popleft())
        except IndexError:  # emptied by another taker between the test and the pop
            break
    return taken
