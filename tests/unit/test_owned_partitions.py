"""OwnedPartitions: each holding of a partition is told apart; a partition given back waits for its writes."""

from __future__ import annotations

from kmq.redelivery.partitions import HOLD_BACK_S, RETRY_INIT_S, OwnedPartitions
from tests.unit.test_expiry import Offsets


def test_a_partition_lost_and_given_back_is_a_new_holding() -> None:
    now = [0.0]
    owned = OwnedPartitions(0, lambda: now[0], lambda p: p)
    owned.assigned([0])
    owned.init_pending(Offsets(), force=True)
    first = owned.get(0)
    assert first is not None and owned.holds(0, first.holding)
    owned.dropped([0])
    assert not owned.holds(0, first.holding)
    owned.assigned([0])
    owned.init_pending(Offsets(), force=True)
    again = owned.get(0)
    assert again is not None and again.holding != first.holding
    assert owned.holds(0, again.holding) and not owned.holds(0, first.holding)


def test_a_partition_given_back_waits_for_its_last_holdings_writes_in_flight_at_most_hold_back_s() -> None:
    now, writing = [0.0], {0}
    owned = OwnedPartitions(0, lambda: now[0], lambda p: p, writing=writing.__contains__)
    owned.assigned([0, 1])
    owned.init_pending(Offsets(), force=True)
    assert owned.get(0) is None and owned.get(1) is not None, "partition 1 has no writes in flight"
    writing.clear()
    now[0] = RETRY_INIT_S
    owned.init_pending(Offsets())
    assert owned.get(0) is not None, "its writes answered: its rebuild starts"

    owned.dropped([0])
    writing.add(0)
    owned.assigned([0])
    now[0] += HOLD_BACK_S - 0.1
    owned.init_pending(Offsets(), force=True)
    assert owned.get(0) is None
    now[0] += 0.2
    owned.init_pending(Offsets(), force=True)
    assert owned.get(0) is not None, "held back at most HOLD_BACK_S"
