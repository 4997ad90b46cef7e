"""RejoinWatch: when a group member that holds nothing must replace its group consumer to get back into its group.

librdkafka's member rejoins by itself once its session was lost; but after a broker freeze it has stayed out of its
group for 30 s and more, with a request to the coordinator that never leaves its queue (issue #31 for the tracker; a
worker too, in the broker-freeze fault run: 36 s, until the run ended, while the other worker held every partition).
Its race inside librdkafka is not pinned down, and a new consumer joins at once. So once the member has held
nothing for the session timeout (librdkafka's own rejoin has had its chance) and its coordinator has said for
REJOIN_MARGIN_S (two of its answers) that the member is not in the group, a new consumer joins afresh; and again
after as long if that one stays out too. A member that is joining is listed by the coordinator, so one left out this
long is not joining. Pure logic: the coordinator's answer comes in as a callable (cached by the caller).
"""

from __future__ import annotations

from collections.abc import Callable

#: How long the coordinator must have said that this member is not in its group (two of its answers, GROUP_CHECK_S
#: apart) before a new group consumer is made.
REJOIN_MARGIN_S = 5.0
#: How an ``out_of_group`` answer begins.
OUT_OF_GROUP = "out of group"


class RejoinWatch:
    """``held_nothing_for_s``: the member's (GroupMembership); ``out_of_group``: why its coordinator does not count
    it as a member now, or None (it does, or cannot say); asked only while the member has held nothing for
    ``session_s``."""

    def __init__(self, held_nothing_for_s: Callable[[], float], out_of_group: Callable[[], str | None],
                 session_s: float, monotonic: Callable[[], float]) -> None:
        self._held_nothing_for_s = held_nothing_for_s
        self._out_of_group = out_of_group
        self._session_s = session_s
        self._monotonic = monotonic
        #: Since when the coordinator has said this member is out of its group (None: not seen so).
        self._out_since: float | None = None

    def reason(self) -> str | None:
        """Why the group consumer must be replaced now, or None. Asked by the member's loop, each turn."""
        if self._held_nothing_for_s() < self._session_s:
            self._out_since = None
            return None
        why = self._out_of_group()
        if why is None:
            self._out_since = None
            return None
        now = self._monotonic()
        if self._out_since is None:
            self._out_since = now
        out_s = now - self._out_since
        if out_s < REJOIN_MARGIN_S:
            return None
        self._out_since = None
        return f"{why}, for {out_s:.0f} s by its coordinator's account"
