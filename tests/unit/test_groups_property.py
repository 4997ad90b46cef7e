"""Message groups' hand-out and ordering logic (GroupDispatch over its real ledger, ready ring, owned starts,
takeover and inheritance; fakes only at the Kafka edges) over random interleavings of sends, reads, acks, releases
with and without a delay, give-backs, failed Starts, crashes of the owner and clean rebalances, with time passing.

The oracle (tests.unit.group_world) checks every hand-out: per group in offset order, never two at once; and at the
end, once everything settles, nothing is lost: every grouped message was acked.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kmq.client.consumer.groups.dispatch import ACK, RELEASE, RETURN
from tests.unit.group_world import AFTER_MS, Owner, World

GROUPS = ["a", "b", "c", None]


class GroupOwners(RuleBasedStateMachine):
    @initialize()
    def start(self) -> None:
        self.world = World()
        self.owners: list[Owner] = [Owner(self.world, "i0")]
        self.made = 1

    @property
    def owner(self) -> Owner:
        return self.owners[-1]

    def _live_messages(self) -> list[tuple[Owner, object]]:
        return [(o, m) for o in self.owners if not o.dead for m in o.out.values()]

    @rule(group=st.sampled_from(GROUPS), n=st.integers(1, 4))
    def send(self, group: str | None, n: int) -> None:
        for _ in range(n):
            self.world.send(group)

    @rule(room=st.integers(1, 5), reads=st.integers(0, 6))
    def round(self, room: int, reads: int) -> None:
        self.owner.round(room, reads)

    @precondition(lambda self: self._live_messages())
    @rule(pick=st.integers(0, 1000), how=st.sampled_from([ACK, ACK, ACK, RELEASE, RETURN]),
          delay_ms=st.sampled_from([0, 0, 300, 2_000]))
    def settle(self, pick: int, how: str, delay_ms: int) -> None:
        live = self._live_messages()
        owner, message = live[pick % len(live)]
        owner.settle(message, how, delay_ms)  # type: ignore[arg-type]

    @rule(report=st.booleans())
    def flush(self, report: bool) -> None:
        for owner in self.owners:
            if not owner.dead:
                owner.flush()
                if report:
                    owner.report()

    @rule()
    def reports_come_in(self) -> None:
        for owner in self.owners:
            owner.report()

    @rule()
    def commit(self) -> None:
        self.owner.commit_all()

    @rule(ms=st.sampled_from([50, 400, AFTER_MS // 2, AFTER_MS * 2]))
    def time_passes(self, ms: int) -> None:
        # Live instances keep what they hold alive every half lease, as their keep-alive threads do (a frozen one,
        # a zombie, is what groups cannot promise anything about: see docs/concepts/groups.md).
        while ms > 0:
            for owner in self.owners:
                if not owner.dead:
                    owner.keep_alive()
                    owner.flush()
                    owner.report()
            step = min(ms, AFTER_MS // 2)
            self.world.now += step
            ms -= step

    @rule(fail=st.booleans())
    def crash_and_take_over(self, fail: bool) -> None:
        self.owner.crash()
        self._new_owner(fail)

    @rule(fail=st.booleans())
    def clean_rebalance(self, fail: bool) -> None:
        self.owner.revoke()
        self._new_owner(fail)

    @rule()
    def revoked_and_assigned_back(self) -> None:
        """A cooperative rebalance that gives the partition back to the same instance: its new ledger learns from
        the markers what its handlers still hold."""
        owner = self.owner
        owner.revoke()
        self.owners.append(Owner(self.world, owner.instance))

    @precondition(lambda self: self.owner.fail_starts)
    @rule()
    def starts_succeed_again(self) -> None:
        self.owner.fail_starts = False

    def _new_owner(self, fail_starts: bool) -> None:
        self.made += 1
        self.owners.append(Owner(self.world, f"i{self.made}", fail_starts=fail_starts))
        self.owners = [o for o in self.owners if not o.dead or o is self.owners[-1]]

    @invariant()
    def at_most_one_live_delivery_per_group(self) -> None:
        seen: dict[str, int] = {}
        for _, message in self._live_messages():
            group = message.group  # type: ignore[attr-defined]
            seen[group] = seen.get(group, 0) + 1
        assert all(n == 1 for n in seen.values()), seen

    def teardown(self) -> None:
        """Everything settles: every grouped message is acked, in order, one at a time."""
        if not hasattr(self, "world"):
            return
        owner = self.owner
        owner.fail_starts = False
        for _ in range(400):
            for o in self.owners:
                if not o.dead:
                    for message in list(o.out.values()):
                        o.settle(message, ACK)
                    o.flush()
                    o.report()
            self.world.now += AFTER_MS * 2
            owner.round(room=50, reads=50)
            if self.world.grouped() <= self.world.acked:
                break
        missing = self.world.grouped() - self.world.acked
        assert not missing, f"never acked: {sorted(missing)}; hand-outs {self.world.handouts[-20:]}"


GroupOwners.TestCase.settings = settings(max_examples=150, stateful_step_count=60, deadline=None,
                                         suppress_health_check=[HealthCheck.too_slow])
test_hand_out_keeps_each_group_in_order_one_at_a_time_and_loses_nothing = pytest.mark.timeout(600)(
    GroupOwners.TestCase)
