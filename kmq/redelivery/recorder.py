"""RedeliveryRecorder: what each finished redelivery leaves behind: counters per queue, the lag histogram and a line
in the copy log."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kmq.redelivery.copy_log import CopyLog
from kmq.redelivery.metrics import TrackerMetrics
from kmq.redelivery.redeliverer import Attempt


class RedeliveryRecorder:
    """``now_ms(partition)``: the partition's deadline clock (None when it is no longer held or has seen nothing)."""

    def __init__(self, metrics: TrackerMetrics, now_ms: Callable[[int], int | None]) -> None:
        self._metrics = metrics
        self._now_ms = now_ms
        self.copy_log = CopyLog()
        self._counters: dict[tuple[str, str], list[Any]] = {}

    def record(self, attempt: Attempt) -> None:
        """Called by the Redeliverer once a copy (or dead letter) is written."""
        item = attempt.item
        queue = item.queue
        lag_s = self._lag_s(attempt)
        event = "unreadable" if attempt.unreadable else "dead_lettered" if attempt.dead_letter else "redelivered"
        counters = self._counters.get((event, queue))
        if counters is None:  # labels() costs more than the copy itself: once per queue, not per message
            metrics = self._metrics
            counters = [(metrics.dead_letters if attempt.dead_letter else metrics.redeliveries).labels(queue)]
            if attempt.unreadable:
                counters.append(metrics.unreadable.labels(queue))
            self._counters[(event, queue)] = counters
        for counter in counters:
            counter.inc()
        if lag_s is not None:
            self._metrics.redelivery_lag.observe(lag_s)
        self.copy_log.add(event, queue, item.message_id, item.first_id, attempt.delivery_count,
                          None if lag_s is None else round(lag_s * 1000))

    def _lag_s(self, attempt: Attempt) -> float | None:
        now_ms = self._now_ms(attempt.partition)
        return None if now_ms is None else max(0.0, (now_ms - attempt.item.deadline_ms) / 1000)
