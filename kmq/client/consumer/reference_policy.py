"""ReferencePolicy: which Starts may name their record instead of copying its payload (kmq marker format).

A Start by reference is only as good as its record: the tracker reads the payload back from the messages topic
when it redelivers. So a consumer references only while the topics' retention is known to be safe
(kmq._kafka.retention), and a Start whose record could be deleted before the tracker needs it carries its payload:
a record already old when read (a lagging consumer), or one read before its due time whose delay hop ends late.
"Could": the record's age when the tracker may need it (its enqueue time to the end of its deadline or hop) passes
half the messages topic's retention. Pure: no Kafka.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import TypeVar

from kmq.client.consumer.due_times import MAX_HOP_MS
from kmq.wire import HEADER_DELIVER_AT, now_ms
from kmq.wire.marker_batch import Startable

S = TypeVar("S", bound=Startable)
_enqueued_at_ms = attrgetter("enqueued_at_ms")
_record_headers = attrgetter("record_headers")


class ReferencePolicy:
    """``split(messages)`` → (Starts that copy, Starts by reference). ``keep_ms`` None: records kept for ever."""

    def __init__(self, *, keep_ms: int | None, redelivery_timeout_ms: int,
                 clock_ms: Callable[[], int] = now_ms) -> None:
        self._safe_age_ms = None if keep_ms is None else keep_ms // 2
        self._timeout_ms = redelivery_timeout_ms
        self._clock_ms = clock_ms

    def split(self, messages: Sequence[S]) -> tuple[list[S], list[S]]:
        if self._safe_age_ms is None:
            return [], list(messages)
        now = self._clock_ms()
        # Enqueued at or after this, a record is young enough when its deadline comes.
        oldest = now + self._timeout_ms - self._safe_age_ms
        if messages and min(map(_enqueued_at_ms, messages)) >= oldest and not any(map(_record_headers, messages)):
            return [], list(messages)  # young and without a due time (the common case): one pass in C
        copies: list[S] = []
        refs: list[S] = []
        for message in messages:
            if message.enqueued_at_ms < oldest or (HEADER_DELIVER_AT in message.record_headers and self._hop_too_long(
                    message, now)):
                copies.append(message)
            else:
                refs.append(message)
        return copies, refs

    def _hop_too_long(self, message: Startable, now: int) -> bool:
        hop_ms = min(max(0, int(message.record_headers[HEADER_DELIVER_AT]) - now), MAX_HOP_MS)
        assert self._safe_age_ms is not None
        return now + max(hop_ms, self._timeout_ms) - message.enqueued_at_ms > self._safe_age_ms
