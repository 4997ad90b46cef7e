"""QueueRejoin: a queue consumer its group coordinator keeps out of its group joins again with a new group consumer.

After a broker freeze librdkafka's member can stay out of its group (RejoinWatch says when, and why a new consumer
is the way back); a worker then served nothing of the queue until a supervisor restarted it on /livez
(``unassigned_exit_ms``, 180 s). The loop asks ``check()`` each round; only a consumer that has held nothing for
the session timeout asks the coordinator, at most every GROUP_CHECK_S. Holding nothing, it has nothing to hand
over: its lost partitions were rewound and forgotten when they were lost, and its messages in flight are settled
through the markers producer, which stays. The new consumer takes the old one's place in the ReplaceableClient
every part holds, and subscribes through the same GroupMembership, which ignores the old one's late callbacks.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from kmq._kafka.closing import OLD_CLIENT_CLOSE_S, close_within
from kmq._kafka.factory import GroupClient
from kmq._kafka.group import GroupMembership
from kmq._kafka.group_view import GroupAdmin
from kmq._kafka.rejoin import OUT_OF_GROUP, RejoinWatch
from kmq._kafka.replaceable import ReplaceableClient
from kmq.metrics_http import GROUP_CHECK_S, PROBE_TIMEOUT_S, Cached


class QueueRejoin:
    """The rejoin of one queue consumer. Loop thread only. ``make_client()``: a new group consumer with the same
    settings; ``admin()``: what the coordinator says about the group (made on first use: most consumers never
    ask)."""

    def __init__(self, *, client: ReplaceableClient, make_client: Callable[[], GroupClient],
                 membership: GroupMembership, topic: str, admin: Callable[[], GroupAdmin], session_s: float,
                 monotonic: Callable[[], float], logger: structlog.typing.FilteringBoundLogger) -> None:
        self._client = client
        self._make_client = make_client
        self._membership = membership
        self._topic = topic
        self._admin_for = admin
        self._admin: GroupAdmin | None = None
        self._log = logger
        self._watch = RejoinWatch(membership.held_nothing_for_s, Cached(self._out_of_group, GROUP_CHECK_S, monotonic),
                                  session_s, monotonic)
        #: New group consumers made so far.
        self.rejoins = 0

    def check(self) -> None:
        """Each round of the loop: replaces the group consumer once RejoinWatch says so."""
        if self._membership.assigned:
            return
        reason = self._watch.reason()
        if reason is not None:
            self._rejoin(reason)

    def _out_of_group(self) -> str | None:
        if self._admin is None:
            self._admin = self._admin_for()
        group = self._membership.group
        view = self._admin.view(group, self._topic, PROBE_TIMEOUT_S)
        if view is None:
            return None  # the broker cannot say: no reason to act
        member = self._client.memberid()
        if member and member in view.members:
            return None
        return f"{OUT_OF_GROUP} {group!r} (its members hold {len(view.served)} of {len(view.partitions)} partitions)"

    def _rejoin(self, reason: str) -> None:
        self.rejoins += 1
        self._log.warning("consumer_rejoining", group=self._membership.group, reason=reason, rejoins=self.rejoins)
        # The new one first: its subscription makes GroupMembership ignore the old one's callbacks as it closes.
        old = self._client.replace(self._make_client())
        self._membership.subscribe(self._client, [self._topic])
        close_within(old, OLD_CLIENT_CLOSE_S, self._log, what="consumer_old_client")
