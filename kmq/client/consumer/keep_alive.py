"""KeepAliveLoop: the thread that keeps a consumer's messages in flight alive (a KeepAlive every
``redelivery_timeout_ms / 2``), and the rules under which it stops keeping grouped messages alive.

A grouped message's lease is what lets the next owner of its partition hand it out again after a crash: its owner
keeps it alive only while it can be sure it still owns the partition (docs/concepts/groups.md, "A frozen or cut-off
worker"). So keep-alives of grouped messages stop for a partition lost (``partitions_lost``: another member may
own it already), and after a gap in this thread's own schedule longer than the group session timeout (the process
was frozen or starved: the group may have moved on) none are written for grouped messages until the poll loop has
run a whole fetch since, in which librdkafka tells it what it lost.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import structlog

from kmq.client.consumer.marker_writer import MarkerWriter
from kmq.client.message import Message
from kmq.wire import HEADER_GROUP, MessageId

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)


class KeepAliveLoop:
    """Any thread may call its methods; the loop runs on its own thread."""

    def __init__(self, table: dict[MessageId, Message], writer: MarkerWriter, *, interval_s: float,
                 session_timeout_s: float, on_tick: Callable[[float], None], name: str) -> None:
        self._table = table
        self._writer = writer
        self._interval_s = interval_s
        self._session_timeout_s = session_timeout_s
        self._on_tick = on_tick
        self._stop = threading.Event()
        #: Partitions lost: their grouped messages get no keep-alive.
        self.lost: set[int] = set()
        #: Since when grouped messages get none (a gap in the schedule), until a whole fetch ran after it; 0: not.
        self._held_since = 0.0
        self._fetch_began = 0.0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def fetch_began(self) -> None:
        """The poll loop is about to fetch (rebalance callbacks run inside)."""
        self._fetch_began = time.monotonic()

    def fetched(self) -> None:
        """The poll loop's fetch returned: a hold that began before that fetch is over."""
        if self._held_since and self._fetch_began > self._held_since:
            self._held_since = 0.0
            log.info("grouped_keep_alives_resumed")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        interval_s = self._interval_s
        tick_s = max(0.01, min(interval_s / 5, 1.0))
        last = time.monotonic()
        while not self._stop.wait(tick_s):
            now = time.monotonic()
            if now - last > self._session_timeout_s and not self._held_since:
                self._held_since = now
                log.warning("grouped_keep_alives_held", gap_s=round(now - last, 1),
                            note="this process was frozen or starved longer than the group session: grouped "
                                 "messages are not kept alive until the poll loop has run")
            last = now
            for msg in list(self._table.values()):  # list() of a dict is atomic under the GIL
                if msg._next_keep_alive > now:
                    continue
                if HEADER_GROUP in msg.record_headers:
                    if self._held_since or msg.message_id.partition in self.lost:
                        continue
                    self._writer.owned.keep_alive(msg.message_id)
                else:
                    self._writer.keep_alive(msg.message_id)
                msg._next_keep_alive = now + interval_s
            self._on_tick(now)
