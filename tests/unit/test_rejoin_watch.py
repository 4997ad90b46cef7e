"""RejoinWatch: when a member that holds nothing must replace its group consumer (pure logic, a fake clock)."""

from __future__ import annotations

from kmq._kafka.rejoin import REJOIN_MARGIN_S, RejoinWatch

SESSION_S = 10.0


class World:
    def __init__(self) -> None:
        self.now = 100.0
        self.held_nothing_for = 0.0
        self.out: str | None = None
        self.asked = 0

    def out_of_group(self) -> str | None:
        self.asked += 1
        return self.out

    def watch(self) -> RejoinWatch:
        return RejoinWatch(lambda: self.held_nothing_for, self.out_of_group, SESSION_S, lambda: self.now)

    def later(self, seconds: float) -> None:
        self.now += seconds
        if self.held_nothing_for:
            self.held_nothing_for += seconds


def test_a_member_out_of_its_group_past_the_session_and_the_margin_is_told_to_rejoin_once() -> None:
    world = World()
    watch = world.watch()
    world.out = "out of group 'g'"
    # Holding partitions: never asked
    assert watch.reason() is None and world.asked == 0
    # Holding nothing for less than the session timeout: librdkafka's own rejoin has its chance
    world.held_nothing_for = SESSION_S - 1
    assert watch.reason() is None and world.asked == 0
    world.later(1)
    # Out of group, first seen now: not yet
    assert watch.reason() is None and world.asked == 1
    world.later(REJOIN_MARGIN_S - 0.5)
    assert watch.reason() is None
    world.later(0.5)
    reason = watch.reason()
    assert reason == f"out of group 'g', for {REJOIN_MARGIN_S:.0f} s by its coordinator's account"
    # Told once: the next rejoin needs the margin again (the new consumer has its chance)
    assert watch.reason() is None
    world.later(REJOIN_MARGIN_S)
    assert watch.reason() is not None


def test_a_member_back_in_its_group_or_holding_partitions_starts_the_margin_again() -> None:
    world = World()
    watch = world.watch()
    world.held_nothing_for = SESSION_S
    world.out = "out of group 'g'"
    assert watch.reason() is None
    world.later(REJOIN_MARGIN_S - 1)
    world.out = None  # listed again (joining), or the broker cannot say
    assert watch.reason() is None
    world.out = "out of group 'g'"
    world.later(2)
    assert watch.reason() is None, "the margin runs from when it was seen out again"
    world.held_nothing_for = 0.0  # it got partitions
    world.later(REJOIN_MARGIN_S)
    assert watch.reason() is None
    world.held_nothing_for = SESSION_S
    assert watch.reason() is None
