"""GroupMembership: one member of a consumer group, shared by the queue consumer and the tracker.

It subscribes, takes librdkafka's rebalance callbacks (which run inside ``poll``/``consume`` on the owner's loop
thread), assigns and unassigns per protocol (an eager rebalance hands over the whole assignment, a cooperative one a
delta), keeps the set of partitions held, and tells its owner in three steps: ``assigned`` (new partitions),
``revoking`` (still held: the last chance to commit), ``dropped`` (no longer held, or lost), and since when it has
held nothing (for health checks: a member out of its group, or one the group gives nothing). Every step is guarded:
an exception escaping a rebalance callback would surface from the owner's poll far from its cause, or end its loop,
so each is logged (``rebalance_callback_failed``) and the next step still runs. The GroupJoinWatch turns "cannot join
the group" into a clear fatal error.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

import structlog
from confluent_kafka import KafkaError

from kmq._kafka.errors import NOT_AUTHENTICATED, NOT_AUTHORIZED, not_authenticated, not_authorized
from kmq.errors import KafkaClientError

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)


class AssignClient(Protocol):
    """The assignment calls of a group member (confluent_kafka.Consumer)."""

    def assign(self, partitions: list[Any]) -> None: ...
    def incremental_assign(self, partitions: list[Any]) -> None: ...
    def unassign(self) -> None: ...
    def incremental_unassign(self, partitions: list[Any]) -> None: ...


def assign(consumer: AssignClient, partitions: list[Any], eager: bool) -> None:
    """In an on_assign callback: an eager rebalance hands over the whole assignment, a cooperative one a delta."""
    if eager:
        consumer.assign(partitions)
    else:
        consumer.incremental_assign(partitions)


def unassign(consumer: AssignClient, partitions: list[Any], eager: bool) -> None:
    """In an on_revoke/on_lost callback: an eager rebalance takes everything back, a cooperative one a delta."""
    if eager:
        consumer.unassign()
    else:
        consumer.incremental_unassign(partitions)


class GroupJoinWatch:
    """Turns "cannot join the group" into a fatal error: refused credentials, or ACLs that do not allow the group or
    its topics, at once; no assignment strategy in common with its members once it has lasted ``bound_s`` with
    nothing assigned. librdkafka retries each for ever, silently to the caller."""

    def __init__(self, group: str, strategy: str, bound_s: float) -> None:
        self._group = group
        self._strategy = strategy
        self._bound_s = bound_s
        self._since: float | None = None
        #: What the member subscribed to (named when a topic is not authorized).
        self.topics: list[str] = []

    def assigned(self) -> None:
        self._since = None

    def check(self, err: KafkaError, has_assignment: bool) -> KafkaClientError | None:
        """For each client error: the fatal error to raise, or None."""
        if err.code() in NOT_AUTHENTICATED:
            return not_authenticated(err)
        if err.code() in NOT_AUTHORIZED:
            what = (f"topic {', '.join(self.topics)!r}" if NOT_AUTHORIZED[err.code()] == "topic"
                    else f"consumer group {self._group!r}")
            return not_authorized(what, err)
        if err.code() != KafkaError.INCONSISTENT_GROUP_PROTOCOL or has_assignment:
            return None
        now = time.monotonic()
        if self._since is None:
            self._since = now
        if now - self._since < self._bound_s:
            return None
        return KafkaClientError(
            f"cannot join consumer group {self._group!r}: its members use a partition assignment strategy this "
            f"member does not ({self._strategy!r} here; kafka-mq-go's members use 'range,roundrobin'). Give every "
            "kmq member of a group shared with kafka-mq-go rebalance_protocol: eager (the default with "
            "marker_format: kafka-mq-go)", code=err.code())


Hook = Callable[[list[int]], None]


class GroupMembership:
    """The rebalance side of one group member; its callbacks run on the owner's loop thread (inside poll).

    ``on_assigned(partitions)`` after new partitions are assigned; ``on_revoking(partitions)`` while revoked ones are
    still held (commit them); ``on_dropped(partitions, lost)`` once they are gone; ``on_changed()`` after any change
    of the assignment.
    """

    def __init__(self, group: str, strategy: str, *, eager: bool, join_bound_s: float,
                 on_assigned: Hook | None = None, on_revoking: Hook | None = None,
                 on_dropped: Callable[[list[int], bool], None] | None = None,
                 on_changed: Callable[[], None] | None = None,
                 logger: structlog.typing.FilteringBoundLogger = log,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.group = group
        self.eager = eager
        self._join_watch = GroupJoinWatch(group, strategy, join_bound_s)
        self._on_assigned = on_assigned
        self._on_revoking = on_revoking
        self._on_dropped = on_dropped
        self._on_changed = on_changed
        self._log = logger
        #: Partitions held now.
        self.assigned: frozenset[int] = frozenset()
        #: Rebalance callbacks seen (assign, revoke and lost alike).
        self.rebalances = 0
        self._monotonic = monotonic
        #: Since when (monotonic s) nothing has been held: since the subscription until the first assignment.
        self._empty_since: float | None = monotonic()
        #: How many clients were subscribed: callbacks of an earlier one are not followed.
        self._subscriptions = 0

    def held_nothing_for_s(self) -> float:
        """Seconds this member has held no partition (0 while it holds some)."""
        since = self._empty_since
        return 0.0 if since is None else max(0.0, self._monotonic() - since)

    def subscribe(self, client: Any, topics: list[str]) -> None:
        """Subscribes ``client``; a client subscribed before (replaced by its owner) is no longer followed: its
        late rebalance callbacks only hand its partitions back."""
        self._join_watch.topics = list(topics)
        self._subscriptions += 1
        mine = self._subscriptions

        def step(follow: Callable[[AssignClient, list[Any]], None], name: str) -> Callable[..., None]:
            # Told apart by subscription, not by the client object: confluent-kafka passes its own Consumer, which
            # an owner may have wrapped.
            def callback(client: AssignClient, partitions: list[Any]) -> None:
                if mine == self._subscriptions:
                    follow(client, partitions)
                else:
                    self._replaced(client, name, partitions)
            return callback

        client.subscribe(topics, on_assign=step(self._assign, "assign"), on_revoke=step(self._revoke, "revoke"),
                         on_lost=step(self._lost, "lost"))

    def cannot_join(self, err: KafkaError) -> KafkaClientError | None:
        """For each client error: the fatal error when the group cannot be joined, else None."""
        return self._join_watch.check(err, bool(self.assigned))

    def _replaced(self, client: AssignClient, step: str, partitions: list[Any]) -> None:
        self._log.warning("rebalance_of_replaced_consumer", group=self.group, step=step,
                          partitions=[tp.partition for tp in partitions])
        if step != "assign":
            self._guard("unassign", unassign, client, partitions, self.eager)

    def _assign(self, client: AssignClient, partitions: list[Any]) -> None:
        self.rebalances += 1
        numbers = [tp.partition for tp in partitions]
        if self._guard("assign", assign, client, partitions, self.eager):
            self._join_watch.assigned()
            self.assigned = (frozenset() if self.eager else self.assigned) | set(numbers)
        self._log.info("partitions_assigned", group=self.group, partitions=numbers)
        if self._on_assigned is not None:
            self._guard("assigned", self._on_assigned, numbers)
        self._changed()

    def _revoke(self, client: AssignClient, partitions: list[Any]) -> None:
        self.rebalances += 1
        numbers = [tp.partition for tp in partitions]
        if self._on_revoking is not None:
            self._guard("revoking", self._on_revoking, numbers)
        self._drop(client, partitions, numbers, lost=False)
        self._log.info("partitions_revoked", group=self.group, partitions=numbers)

    def _lost(self, client: AssignClient, partitions: list[Any]) -> None:
        self.rebalances += 1
        numbers = [tp.partition for tp in partitions]
        self._drop(client, partitions, numbers, lost=True)
        self._log.warning("partitions_lost", group=self.group, partitions=numbers)

    def _drop(self, client: AssignClient, partitions: list[Any], numbers: list[int], lost: bool) -> None:
        if self._on_dropped is not None:
            self._guard("dropped", self._on_dropped, numbers, lost)
        self._guard("unassign", unassign, client, partitions, self.eager)
        self.assigned = self.assigned - set(numbers)
        self._changed()

    def _changed(self) -> None:
        if self.assigned:
            self._empty_since = None
        elif self._empty_since is None:
            self._empty_since = self._monotonic()
        if self._on_changed is not None:
            self._guard("changed", self._on_changed)

    def _guard(self, step: str, fn: Callable[..., object], *args: object) -> bool:
        try:
            fn(*args)
        except Exception as err:  # noqa: BLE001 - see the module docstring: logged here, the next step still runs
            self._log.error("rebalance_callback_failed", group=self.group, step=step, error=_describe(err))
            return False
        return True


def _describe(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"
