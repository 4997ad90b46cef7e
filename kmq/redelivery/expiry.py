"""Expiry: which in-flight messages of the partitions held have expired, and how long the loop may sleep till the next.

Step 3 of the tracker's loop. A partition fires nothing before its catch-up gate opens (a half-replayed log would
fire messages whose End is just ahead); in the kmq marker format, a deadline fires only once the partition's log is
known to be read up to it (kmq.redelivery.horizon), and asks for a clock probe when that evidence is missing. The
wait before the next poll is the time to the earliest deadline that can fire, or a short look while a probe is on
its way; never zero for a deadline that cannot fire, else the loop would spin until a marker comes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from kmq.redelivery.clock import Monotonic
from kmq.redelivery.clock_probe import ClockProbes
from kmq.redelivery.partitions import OwnedPartitions, Partition
from kmq.redelivery.redeliverer import Attempt

#: The longest the loop waits for markers while a deadline is pending or work is under way.
POLL_S = 0.05
#: How often the loop looks for a clock probe sent less than PROBE_FAST_S ago (see horizon.py).
PROBE_POLL_S = 0.005
PROBE_FAST_S = 0.2


class Expiry:
    """Fires the expired messages of the partitions in ``owned`` as Attempts, and says how long the loop may wait.

    ``probes``: the clock probes (kmq format), None for kafka-mq-go's (deadlines fire on the clock alone);
    ``purged_before``: queue → purge time ms (kmq purge); ``max_deliveries``: 0 = no dead-lettering by count."""

    def __init__(self, owned: OwnedPartitions, probes: ClockProbes | None, monotonic: Monotonic,
                 max_deliveries: int, purged_before: Callable[[], Mapping[str, int]]) -> None:
        self._owned = owned
        self._probes = probes
        self._monotonic = monotonic
        self._max_deliveries = max_deliveries
        self._purged_before = purged_before

    def caught_up(self, partition: int) -> None:
        """A partition's catch-up gate opened: one probe for a fresh reading of its clock (kmq format)."""
        if self._probes is not None:
            self._probes.send(partition)

    def read_probe_answers(self) -> None:
        """Each probe's delivery report carries the broker's time on its partition: the partition's clock takes it."""
        if self._probes is None:
            return
        for p, timestamp_ms, seen_at in self._probes.answers():
            part = self._owned.get(p)
            if part is not None:
                part.clock.observe(timestamp_ms, seen_at)

    @property
    def probing(self) -> bool:
        """A probe is on its way on some partition (its answer is looked for soon)."""
        return any(part.horizon.probe_sent_at is not None for _p, part in self._owned.items())

    def fire(self) -> list[Attempt]:
        """The Attempts for every message whose deadline may fire now, partition by partition in deadline order."""
        purges = self._purged_before()
        attempts: list[Attempt] = []
        for p, part in self._owned.items():
            if not part.caught_up:
                continue  # the catch-up gate
            now_ms = part.clock.now_ms()
            if now_ms is None:
                continue
            if self._probes is not None:  # only on evidence that the log is read up to the deadline
                now_ms, probe = part.horizon.limit(now_ms, part.state.next_deadline_ms(), self._monotonic())
                if probe:
                    self._probes.send(p)
            for item in part.state.take_expired(now_ms):
                if purges and (item.enqueued_at_ms or item.start_timestamp_ms) < purges.get(item.queue, 0):
                    attempts.append(Attempt(p, item, dead_letter=False, purged=True, holding=part.holding))
                    continue
                dead = 0 < self._max_deliveries <= (item.delivery_count or 1) and not item.returned
                attempts.append(Attempt(p, item, dead, holding=part.holding))
        return attempts

    def wait_s(self) -> float | None:
        """Seconds until the next deadline that can fire (a caught-up partition's, by its clock), or a short look
        while one waits for its probe; None when no deadline is pending at all."""
        wait_ms: float | None = None
        for _p, part in self._owned.items():
            due = part.state.next_deadline_ms()
            if due is None or not part.caught_up:
                continue
            mine = self._wait_ms(part, due)
            if mine is not None and (wait_ms is None or mine < wait_ms):
                wait_ms = mine
        return None if wait_ms is None else min(wait_ms, POLL_S * 1000) / 1000

    def _wait_ms(self, part: Partition, due: int) -> float | None:
        if self._probes is not None and part.horizon.waiting(due, part.clock.now_ms()):
            # A probe is back within milliseconds on a healthy partition, so look often at first; a partition that
            # does not take it (a failover) is not spun on.
            sent_at = part.horizon.probe_sent_at
            young = sent_at is not None and self._monotonic() - sent_at < PROBE_FAST_S
            return PROBE_POLL_S * 1000 if young else POLL_S * 1000
        return part.clock.ms_until(due + 1)  # fires once "now" is past the deadline
