"""CopyLog: what the tracker copied, logged per queue and poll rather than per message.

A mass expiry (a worker with 10,000 messages in flight dies) would otherwise format 10,000 info lines on the
loop thread between two rounds of copies: measured, that stalled the second round by 150-240 ms. Each message
still gets a debug line; metrics count every copy; ``kmq inspect`` tells one message's story.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import structlog

from kmq.wire import MessageId

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)


#: Message ids named in a summary line; the rest are in the debug lines.
EXAMPLES = 5


@dataclass(slots=True)
class _Tally:
    count: int = 0
    max_lag_ms: int | None = None
    message_ids: list[str] = field(default_factory=list)


class CopyLog:
    """Gathers redelivered and dead-lettered copies until ``flush``, once per poll of the tracker's loop."""

    def __init__(self) -> None:
        self._tallies: dict[tuple[str, str], _Tally] = {}
        #: Whether the per-message debug lines are logged: asked once per poll, since formatting two ids for a line
        #: that is dropped cost more than the rest of the tally.
        self._debug = log.is_enabled_for(logging.DEBUG)

    def add(self, event: str, queue: str, message_id: MessageId, first_message_id: MessageId, delivery_count: int,
            lag_ms: int | None) -> None:
        """``event`` is ``redelivered`` or ``dead_lettered``; ``lag_ms`` how long after its deadline."""
        if self._debug:
            log.debug(event, queue=queue, message_id=str(message_id), first_message_id=str(first_message_id),
                      delivery_count=delivery_count, lag_ms=lag_ms)
        tally = self._tallies.get((event, queue))
        if tally is None:
            tally = self._tallies[(event, queue)] = _Tally()
        tally.count += 1
        if len(tally.message_ids) < EXAMPLES:
            tally.message_ids.append(str(message_id))
        if lag_ms is not None and (tally.max_lag_ms is None or lag_ms > tally.max_lag_ms):
            tally.max_lag_ms = lag_ms

    def flush(self) -> None:
        """One info line per event and queue since the last flush."""
        self._debug = log.is_enabled_for(logging.DEBUG)
        if not self._tallies:
            return
        tallies, self._tallies = self._tallies, {}
        for (event, queue), tally in tallies.items():
            log.info(event, queue=queue, count=tally.count, max_lag_ms=tally.max_lag_ms,
                     message_ids=",".join(tally.message_ids) + (",…" if tally.count > EXAMPLES else ""))
