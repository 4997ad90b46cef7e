"""When a tracker fires a recurring schedule's tick: the pure decision behind kmq.redelivery.scheduler.

Every tracker replica knows every schedule (the control topic) and takes the same decision from the same facts:

- a schedule's **primary** is the replica that owns the markers partition its name hashes to; it fires a tick at
  its time. Every other replica is a **standby**: it fires the tick ``standby_delay_ms`` later (counted from when it
  started, for ticks already due then), unless by then it has read a "fired" record for that tick or a later one;
- a tick more than ``grace_ms`` old is **missed** (no replica could fire it in time). Ticks still within the grace
  fire in order, and missed ones are then dropped; when only missed ticks are due, the schedule's policy says:
  ``fire-last`` fires the latest of them once, ``skip`` none.

A tick fired twice (a slow primary and a standby; a primary that crashed between its send and its "fired" record)
carries one dedup id, so a handler gets it once. Pure: no Kafka.
"""

from __future__ import annotations

from dataclasses import dataclass

from kmq.wire.partitioning import murmur2
from kmq.wire.schedule import SKIP, Schedule, latest_tick, ticks_after

#: How long a paused schedule (or one with no tick ever) waits before it is looked at again.
IDLE_MS = 1000


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with one schedule now."""

    #: The tick to fire now (ms since the epoch), or None.
    fire: int | None = None
    #: A missed tick let go (``skip``): no replica fires it; it counts as done.
    skipped: int | None = None
    #: When to decide again, at the latest (ms since the epoch).
    wake_ms: int = 0
    #: The tick was missed (fired late under ``fire-last``).
    late: bool = False


def primary_partition(name: str, partitions: int) -> int:
    """The markers partition whose owner is ``name``'s primary (Kafka's murmur2 of the name)."""
    return (murmur2(name.encode()) & 0x7FFFFFFF) % max(1, partitions)


def decide(schedule: Schedule, *, done_ms: int, now_ms: int, primary: bool, standby_since_ms: int,
           standby_delay_ms: int, grace_ms: int) -> Decision:
    """The decision for ``schedule`` at ``now_ms``, given the latest tick known done (fired by any replica, or let
    go here): ``done_ms``."""
    if schedule.paused:
        return Decision(wake_ms=now_ms + IDLE_MS)
    after = max(done_ms, schedule.active_from_ms - 1)
    horizon = now_ms - grace_ms
    first_due = next(ticks_after(schedule, max(after, horizon)), None)
    if first_due is not None and first_due <= now_ms:
        return _fire_or_wait(first_due, now_ms, primary, standby_since_ms, standby_delay_ms, late=False)
    missed = latest_tick(schedule, after, horizon) if horizon > after else None
    if missed is not None:
        if schedule.missed == SKIP:
            return Decision(skipped=missed, wake_ms=now_ms)
        return _fire_or_wait(missed, now_ms, primary, standby_since_ms, standby_delay_ms, late=True)
    if first_due is None:
        return Decision(wake_ms=now_ms + IDLE_MS)
    return Decision(wake_ms=first_due if primary else first_due + standby_delay_ms)


def _fire_or_wait(tick: int, now_ms: int, primary: bool, standby_since_ms: int, standby_delay_ms: int,
                  late: bool) -> Decision:
    fire_at = tick if primary else max(tick, standby_since_ms) + standby_delay_ms
    if now_ms >= fire_at:
        return Decision(fire=tick, wake_ms=now_ms, late=late)
    return Decision(wake_ms=fire_at)
