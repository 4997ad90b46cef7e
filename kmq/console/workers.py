"""Workers and trackers as the console sees them. Pure: no Kafka.

Each consumer instance signs its markers (``host:pid``, and its ``client_id`` if it has one), so the markers tell
who runs, since when, and what each holds: every delivery it Started and no End has closed yet. The consumer groups
(one per queue) and the tracker group are described by the brokers (kmq.console.topics reads them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kmq.wire import MessageId
from kmq.wire.markers import Marker, MarkerType


@dataclass(slots=True)
class Instance:
    """One consumer process, from the markers it wrote."""

    instance_id: str
    client_id: str
    first_seen_ms: int
    last_seen_ms: int
    queues: set[str] = field(default_factory=set)
    #: Deliveries it Started that no End closed yet -> their queue.
    held: dict[MessageId, str] = field(default_factory=dict)

    @property
    def host(self) -> str:
        return self.instance_id.rpartition(":")[0]

    @property
    def pid(self) -> str:
        return self.instance_id.rpartition(":")[2]


@dataclass(frozen=True, slots=True)
class Member:
    """A member of a consumer group, as the group coordinator describes it."""

    member_id: str
    client_id: str
    #: ``group.instance.id``: a kmq consumer's ``client_id`` (static membership), "" if none.
    instance_id: str
    host: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Group:
    group_id: str
    state: str
    members: tuple[Member, ...]

    def owner(self, partition: int) -> Member | None:
        return next((m for m in self.members if partition in m.partitions), None)


@dataclass(frozen=True, slots=True)
class Ends:
    """Per markers partition: its end offset and the tracker group's committed offset (-1: none)."""

    end: dict[int, int] = field(default_factory=dict)
    committed: dict[int, int] = field(default_factory=dict)


class Workers:
    def __init__(self) -> None:
        self.instances: dict[str, Instance] = {}
        self._holder: dict[MessageId, str] = {}
        #: Markers partition -> the newest record time read on it (the broker time a tracker's clock follows).
        self.clocks: dict[int, int] = {}
        #: Queue -> the markers partitions its markers were read on (one, as the markers are keyed by queue).
        self.marker_partitions: dict[str, set[int]] = {}
        self.groups: dict[str, Group] = {}
        self.tracker_group: Group | None = None
        self.ends = Ends()

    def record(self, partition: int, at_ms: int) -> None:
        self.clocks[partition] = max(self.clocks.get(partition, 0), at_ms)

    def marker(self, marker: Marker, queue: str, partition: int, at_ms: int) -> None:
        mid = marker.message_id
        if queue:
            self.marker_partitions.setdefault(queue, set()).add(partition)
        if marker.type is MarkerType.END:
            holder = self._holder.pop(mid, None)
            if holder is not None:
                self.instances[holder].held.pop(mid, None)
        if not marker.instance_id:
            return  # a tracker's marker, or a kafka-mq-go consumer's (which does not sign its markers)
        found = self.instances.get(marker.instance_id)
        if found is None:
            found = self.instances[marker.instance_id] = Instance(marker.instance_id, marker.client_id, at_ms, at_ms)
        found.first_seen_ms, found.last_seen_ms = min(found.first_seen_ms, at_ms), max(found.last_seen_ms, at_ms)
        if queue:
            found.queues.add(queue)
        if marker.type is MarkerType.START:  # a record Started again (a consumer read it twice) has a new holder
            before = self._holder.get(mid)
            if before is not None:
                self.instances[before].held.pop(mid, None)
            self._holder[mid] = marker.instance_id
            found.held[mid] = queue

    def forget_idle(self, now_ms: int, idle_ms: int = 3_600_000) -> None:
        """Drops the instances that hold nothing and wrote no marker for ``idle_ms`` (a restarted worker is a new
        instance: without this, a console running for weeks would list every process that ever ran)."""
        for name in [n for n, i in self.instances.items() if not i.held and i.last_seen_ms < now_ms - idle_ms]:
            del self.instances[name]

    def holder(self, mid: MessageId) -> Instance | None:
        name = self._holder.get(mid)
        return None if name is None else self.instances[name]
