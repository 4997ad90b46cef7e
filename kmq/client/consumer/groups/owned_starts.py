"""OwnedStarts: grouped messages between "their group's turn came" and "handed out".

Their Starts are owner-tracked (trackers skip them) and always by reference: the owner reads a message it redelivers
from its own buffer, so no payload needs copying. A grouped message goes out once its Start is durable, without a
commit (the commit never passes an unfinished grouped record, so a next owner finds it in place and its Start in
the markers). A Start that fails brings the message back to wait at its group's head, count unchanged.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from kmq.client.consumer.groups.ledger import Entry, GroupQueue, PartitionLedger
from kmq.client.consumer.marker_writer import MarkerWriter
from kmq.client.message import Message
from kmq.delivery import Delivery
from kmq.wire import MessageId

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

Taken = tuple[PartitionLedger, Entry]


@dataclass(slots=True)
class _Batch:
    taken: list[Taken]
    messages: list[Message]
    deliveries: list[Delivery[MessageId]]


class OwnedStarts:
    """Loop thread."""

    __slots__ = ("_add", "_batches", "_discard", "_hand_out", "_writer", "waiting")

    def __init__(self, writer: MarkerWriter, hand_out: Callable[[list[Message]], None], *,
                 add: Callable[[Message], None], discard: Callable[[MessageId], None]) -> None:
        self._writer = writer
        self._hand_out = hand_out
        self._add = add
        self._discard = discard
        self._batches: deque[_Batch] = deque()
        #: Messages whose Start is on its way.
        self.waiting = 0

    def __len__(self) -> int:
        return len(self._batches)

    def start(self, taken: list[Taken], messages: list[Message]) -> None:
        """Writes the Starts of ``messages`` (one per taken entry); they are in flight (kept alive) from now on."""
        for message in messages:
            self._add(message)
        if any(entry.again for _, entry in taken):
            self._writer.settles.drain()  # their release or give-back goes before their new Start
        self._batches.append(_Batch(taken, messages, self._writer.starts.start_owned(messages)))
        self.waiting += len(messages)

    def advance(self, now_ms: int, block_s: float = 0.0) -> list[tuple[PartitionLedger, GroupQueue | None]]:
        """Hands out the batches whose Starts are durable (waiting up to ``block_s`` for each); the queues of
        messages whose Start failed, which wait again."""
        offers: list[tuple[PartitionLedger, GroupQueue | None]] = []
        while self._batches:
            head = self._batches[0]
            if block_s:
                for delivery in head.deliveries:
                    with contextlib.suppress(TimeoutError):
                        delivery.exception(block_s)
            if not all(d.done() for d in head.deliveries):
                break
            self._batches.popleft()
            self.waiting -= len(head.messages)
            error = next((d.exception(0) for d in head.deliveries if d.exception(0) is not None), None)
            out = []
            for (ledger, entry), message in zip(head.taken, head.messages, strict=True):
                if error is None and ledger.owned and entry.delivery is message:
                    ledger.started(entry, message)
                    out.append(message)
                    continue
                self._discard(message.message_id)
                if ledger.owned and entry.delivery is message:
                    offers.append((ledger, ledger.back(entry, due_ms=now_ms, counted=False)))
            if error is not None:
                log.warning("group_start_markers_failed", error=str(error), batch=len(head.messages))
            if out:
                self._hand_out(out)
        return offers
