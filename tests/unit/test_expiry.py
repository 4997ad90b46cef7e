"""Expiry: what fires, and how long the tracker's loop may sleep; never zero for a deadline that cannot fire."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kmq.redelivery.expiry import POLL_S, PROBE_POLL_S, Expiry
from kmq.redelivery.partitions import OwnedPartitions
from kmq.wire import MessageId
from kmq.wire.marker_batch import decode_batch, encode_settles, encode_starts
from tests.unit.fakes import FakeStart


class Probes:
    def __init__(self) -> None:
        self.sent: list[int] = []
        self.back: list[tuple[int, int, float]] = []

    def send(self, partition: int) -> None:
        self.sent.append(partition)

    def answers(self) -> list[tuple[int, int, float]]:
        back, self.back = self.back, []
        return back


class Offsets:
    def committed(self, partitions: list[Any], timeout: float = -1) -> list[Any]:
        return [SimpleNamespace(offset=-1001)]

    def get_watermark_offsets(self, partition: Any, timeout: float = -1, cached: bool = False) -> tuple[int, int]:
        return 0, 0


def _rig(now: list[float]) -> tuple[OwnedPartitions, Probes, Expiry]:
    owned = OwnedPartitions(0, lambda: now[0], lambda p: p)
    owned.assigned([0])
    owned.init_pending(Offsets(), force=True)
    assert owned.newly_caught_up()
    probes = Probes()
    return owned, probes, Expiry(owned, probes, lambda: now[0], 0, dict)  # type: ignore[arg-type]


def test_a_deadline_the_read_horizon_holds_back_is_looked_at_not_spun_on() -> None:
    # Given a Start read at t=1000 ms with a 100 ms deadline, and the clock past it by 400 ms
    now = [0.0]
    owned, probes, expiry = _rig(now)
    part = owned.get(0)
    assert part is not None
    part.state.apply_batch(0, 1000, decode_batch(encode_starts(b"q", 100, [FakeStart(MessageId(0, 1), b"p")])))
    part.clock.observe(1000)
    part.horizon.read(1000)
    now[0] = 0.5
    # When it fires: nothing yet (nothing read after the deadline), and a probe goes out
    assert expiry.fire() == [] and probes.sent == [0]
    # Then the loop looks for the probe often for a moment, then every POLL_S; never a zero wait
    assert expiry.wait_s() == PROBE_POLL_S
    now[0] = 1.0
    assert expiry.wait_s() == POLL_S
    # And once a record appended after the deadline is read, it fires
    part.horizon.read(1500, probe=True, monotonic_s=now[0])
    assert [a.item.message_id for a in expiry.fire()] == [MessageId(0, 1)]


def test_once_every_start_has_ended_nothing_is_pending_however_many_deadlines_went_stale() -> None:
    now = [0.0]
    owned, _probes, expiry = _rig(now)
    part = owned.get(0)
    assert part is not None
    starts = [FakeStart(MessageId(0, i), b"") for i in range(50)]
    part.state.apply_batch(0, 1000, decode_batch(encode_starts(b"q", 100, starts[:25], refs=starts[25:])))
    part.state.apply_batch(1, 1001, decode_batch(encode_settles(b"q", 0, acks=[s.message_id for s in starts])))
    part.clock.observe(1001)
    part.horizon.read(1001)
    now[0] = 5.0
    part.horizon.read(5000, probe=True, monotonic_s=now[0])  # the probe the stale deadlines asked for
    assert expiry.fire() == []
    assert expiry.wait_s() is None, "no deadline left: the loop may sleep its idle time"
