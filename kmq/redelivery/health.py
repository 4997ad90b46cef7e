"""TrackerHealth: what a tracker replica answers on /readyz (/healthz) and /livez, and when it must exit.

Ready: the broker answers, its writes are acknowledged, and it is not a replica holding no markers partition while
its group has partitions no tracker holds (it is out of its group, or the group gives it nothing while it needs
someone) for longer than ``unassigned_unhealthy_ms``. Live: its loop turns, and that last condition has not lasted
``unassigned_exit_ms``; past that the tracker exits with one line (``exit_reason``) for its supervisor to restart
it: a process that cannot get back into its group by itself must not live on silently. A standby replica (every
partition held by another) is healthy.
"""

from __future__ import annotations

from collections.abc import Callable

from kmq._kafka.group_view import GroupView
from kmq._kafka.rejoin import OUT_OF_GROUP, RejoinWatch
from kmq.config import Config
from kmq.metrics_http import GROUP_CHECK_S, Cached, Health, Pulse, Unassigned, first_problem
from kmq.topic_sets import TopicSet

#: The loop turns at least every IDLE_POLL_S; a rebalance callback may hold it for two offset queries (5 s each)
#: per partition assigned. Past this (librdkafka's own max.poll.interval.ms), it is stuck.
LOOP_STALL_S = 300.0


class TrackerHealth:
    """``held_nothing_for_s``: GroupMembership's; ``member_id``: the group consumer's (None without one);
    ``view``: the group as its coordinator describes it (None when it cannot say); ``broker``: the BrokerProbe."""

    def __init__(self, config: Config, topics: TopicSet, *, broker: Health, held_nothing_for_s: Callable[[], float],
                 member_id: Callable[[], str | None], view: Callable[[], GroupView | None],
                 stopping: Callable[[], bool], monotonic: Callable[[], float]) -> None:
        self._group = topics.tracker_group
        self._topic = topics.markers
        self._member_id = member_id
        self._view = view
        self._broker = broker
        self._stopping = stopping
        self._exit_after_ms = config.unassigned_exit_ms
        needed = self._cached_needed = Cached(self.needed, GROUP_CHECK_S, monotonic)
        self._rejoin = RejoinWatch(held_nothing_for_s, self._out_of_group, config.session_timeout_ms / 1000,
                                   monotonic)
        self._unready = Unassigned(held_nothing_for_s, needed, config.unassigned_unhealthy_ms / 1000)
        self._gone = Unassigned(held_nothing_for_s, needed, config.unassigned_exit_ms / 1000)
        #: Beaten by the loop each turn.
        self.pulse = Pulse("the tracker's loop", LOOP_STALL_S, monotonic)

    def needed(self) -> str | None:
        """Why the group needs this replica that holds nothing, or None (a standby, or the broker cannot say)."""
        view = self._view()
        if view is None or not view.unserved:
            return None
        member = self._member_id()
        if member is None or member not in view.members:
            return f"{OUT_OF_GROUP} {self._group!r} while markers partitions {view.unserved} have no tracker"
        return f"holds no markers partition while {view.unserved} of {self._topic!r} have no tracker"

    def ready(self) -> str | None:
        """/readyz and /healthz: None when healthy, else why not."""
        if self._stopping():
            return "stopping"
        return first_problem(self._broker, self._unready)

    def live(self) -> str | None:
        """/livez: None unless a restart is the way back."""
        return self.stalled() or self.exit_reason()

    def stalled(self) -> str | None:
        """The loop has not turned for LOOP_STALL_S (blocked in a call that does not return), else None."""
        return None if self._stopping() else self.pulse()

    def rejoin_reason(self) -> str | None:
        """Why this replica must replace its group consumer now, or None (asked by its loop): out of its group
        while markers partitions have no tracker (RejoinWatch). A replica that holds partitions, or that the broker
        cannot describe, is left alone."""
        return None if self._stopping() else self._rejoin.reason()

    def _out_of_group(self) -> str | None:
        why = self._cached_needed()
        return why if why is not None and why.startswith(OUT_OF_GROUP) else None

    def exit_reason(self) -> str | None:
        """Why this tracker must exit now (asked by its loop), or None."""
        if self._exit_after_ms <= 0:
            return None
        return self._gone()
