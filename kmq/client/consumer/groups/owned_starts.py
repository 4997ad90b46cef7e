"""OwnedStarts: grouped messages between "their group's turn came" and "handed out".

Their Starts are owner-tracked (trackers skip them) and always by reference: the owner reads a message it redelivers
from its own buffer, so no payload needs copying. Settles of grouped messages still waiting to be written are
written first (the same producer keeps them before the Starts: an earlier message's End, a release before the same
message's new Start). A grouped message goes out once its Start is durable and the End of the message before it in
its group too, without a commit (the commit never passes an unfinished grouped record, so a next owner finds it in
place and its Start in the markers). A Start that fails brings the message back to wait, count unchanged.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from kmq.client.consumer.groups.ledger import Entry, GroupQueue, PartitionLedger, State
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

    __slots__ = ("_add", "_batches", "_behind", "_discard", "_hand_out", "_starting", "_wake", "_writer")

    def __init__(self, writer: MarkerWriter, hand_out: Callable[[list[Message]], None], *,
                 add: Callable[[Message], None], discard: Callable[[MessageId], None],
                 wake: Callable[[], None] = lambda: None) -> None:
        self._writer = writer
        self._hand_out = hand_out
        self._add = add
        self._discard = discard
        self._wake = wake
        self._batches: deque[_Batch] = deque()
        #: Started, behind an earlier message of their group whose End is not durable yet.
        self._behind: list[tuple[PartitionLedger, Entry, Message]] = []
        self._starting = 0

    def __len__(self) -> int:
        return len(self._batches) + len(self._behind)

    @property
    def waiting(self) -> int:
        """Messages Started (or being Started) and not handed out yet."""
        return self._starting + len(self._behind)

    def give_back_behind(self, partitions: list[int]) -> None:
        """Messages of ``partitions`` Started and held behind an earlier End: given back (the partitions are being
        revoked; their next owner hands them out)."""
        still = []
        for ledger, entry, message in self._behind:
            if ledger.partition in partitions:
                self._writer.owned.give_back(message.message_id)
                self._discard(message.message_id)
            else:
                still.append((ledger, entry, message))
        self._behind = still

    def start(self, taken: list[Taken], messages: list[Message]) -> None:
        """Writes the Starts of ``messages`` (one per taken entry); they are in flight (kept alive) from now on."""
        for message in messages:
            self._add(message)
        if self._writer.owned:
            self._writer.settles.drain()  # an earlier End, a release or a give-back goes before these Starts
        deliveries = self._writer.starts.start_owned(messages)
        deliveries[-1].add_done_callback(lambda _done: self._wake())
        self._batches.append(_Batch(taken, messages, deliveries))
        self._starting += len(messages)

    def advance(self, now_ms: int, block_s: float = 0.0) -> list[tuple[PartitionLedger, GroupQueue | None]]:
        """Hands out the batches whose Starts are durable (waiting up to ``block_s`` for each); the queues of
        messages whose Start failed, which wait again."""
        offers: list[tuple[PartitionLedger, GroupQueue | None]] = []
        out = self._no_longer_behind()
        while self._batches:
            head = self._batches[0]
            if block_s:
                for delivery in head.deliveries:
                    with contextlib.suppress(TimeoutError):
                        delivery.exception(block_s)
            if not all(d.done() for d in head.deliveries):
                break
            self._batches.popleft()
            self._starting -= len(head.messages)
            error = next((d.exception(0) for d in head.deliveries if d.exception(0) is not None), None)
            for (ledger, entry), message in zip(head.taken, head.messages, strict=True):
                if error is None and ledger.owned and entry.delivery is message:
                    ledger.started(entry, message)
                    if ledger.ending_before(entry):
                        self._behind.append((ledger, entry, message))
                    else:
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

    def _no_longer_behind(self) -> list[Message]:
        """Started messages whose group's earlier End became durable since (or whose partition is gone)."""
        if not self._behind:
            return []
        out, still = [], []
        for ledger, entry, message in self._behind:
            if not ledger.owned or entry.delivery is not message or entry.state is not State.OUT:
                self._discard(message.message_id)  # not ours any more, or settled meanwhile (a purge)
            elif ledger.ending_before(entry):
                still.append((ledger, entry, message))
            else:
                out.append(message)
        self._behind = still
        return out
