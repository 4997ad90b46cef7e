"""Takeover: a new owner learns what earlier owners held of its partitions, and follows it until it is settled or its
lease lapses (docs/concepts/groups.md, "A new owner").

Every partition is *blind* from its assignment until its committed offset and metadata are known (asked on the loop
thread, not in the rebalance callback) and, when the commit named ``m=``, the follower has read the queue's markers
partition from there to the end offset of that moment: what is read of it meanwhile is parked (grouped and plain
records alike, so that nothing an earlier owner Started is Started again) and read again afterwards, and it is not
committed past the first parked record. Each marker record read is applied (``inheritance``) to every ledger it is
new to. While any entry is HELD the follower keeps reading; HELD entries whose lease passed on broker time come back to
wait, one more delivery counted. Loop thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import structlog

from kmq import wire
from kmq.client.consumer.groups import inheritance
from kmq.client.consumer.groups.follower import MarkersFollower
from kmq.client.consumer.groups.ledger import GroupQueue, PartitionLedger
from kmq.errors import KmqError

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)


#: Per partition: its committed offset (negative: none) and the commit's metadata.
CommittedOf = Callable[[list[int]], dict[int, tuple[int, str | None]]]


class Replay:
    """One partition's takeover: from which markers offset, up to which end, and what was applied."""

    __slots__ = ("end", "parked", "seen", "since", "start")

    def __init__(self) -> None:
        #: The partition's committed offset at its assignment (None: not known yet), and the commit's ``m=``.
        self.since: int | None = None
        self.start = -1
        #: The markers partition's end offset when the replay began (-1: not begun); blind until read up to it.
        self.end = -1
        #: The last markers offset applied to this partition.
        self.seen = -1
        #: Records of the partition read while it was blind, in order.
        self.parked: list[Any] = []


class Takeover:
    """The replays under way and the follower they share."""

    def __init__(self, follower: MarkersFollower, committed_of: CommittedOf, broker_now_ms: Callable[[], int | None],
                 logger: structlog.typing.FilteringBoundLogger = log) -> None:
        self._follower = follower
        self._committed_of = committed_of
        self._broker_now_ms = broker_now_ms
        self._log = logger
        self.replays: dict[int, Replay] = {}

    def begin(self, ledger: PartitionLedger) -> None:
        """``ledger``'s partition was just assigned: blind until its commit is known and, if it says so,
        replayed."""
        self.replays[ledger.partition] = Replay()
        ledger.blind = True

    def blind_floor(self, partition: int) -> int | None:
        """A blind partition must not be committed past this (its first parked record); None: not at all."""
        replay = self.replays.get(partition)
        if replay is not None and replay.parked:
            return int(replay.parked[0].offset())
        return None

    def round(self, ledgers: dict[int, PartitionLedger], wall_now_ms: int,
              ) -> tuple[list[tuple[PartitionLedger, GroupQueue]], list[Any]]:
        """Reads what the follower has, applies it, ends the replays that caught up, lets leases lapse: the group
        queues that may now hand out, and the parked records to read again."""
        offers: list[tuple[PartitionLedger, GroupQueue]] = []
        unparked: list[Any] = []
        self._drop_gone(ledgers)
        if not self.replays and not any(ledger.held for ledger in ledgers.values()):
            self._follower.stop()
            return offers, unparked
        try:
            self.ask_commits(ledgers)
            self._start_replays()
            records = self._follower.read() if self._follower.reading else []
        except KmqError as err:  # the markers cannot be read now: the partitions stay blind, tried again next round
            self._log.warning("group_takeover_read_failed", error=str(err))
            return offers, unparked
        for record in records:
            for partition, ledger in ledgers.items():
                replay = self.replays.get(partition)
                if replay is not None and record.offset <= replay.seen:
                    continue
                if replay is not None:
                    replay.seen = record.offset
                if replay is not None and (replay.end < 0 or record.offset < replay.start):
                    continue
                queues = inheritance.apply_batch(ledger, ledger.since, ledger.read_to, record.appended_ms,
                                                 record.offset, record.batch)
                offers += [(ledger, q) for q in queues]
        unparked += self._finish_replays(ledgers, offers)
        broker_now = max(self._follower.broker_now_ms(), self._broker_now_ms() or 0)
        if broker_now:
            for ledger in ledgers.values():
                if ledger.held and not ledger.blind:
                    offers += [(ledger, q) for q in inheritance.lapse(ledger, broker_now, wall_now_ms)]
        return offers, unparked

    def anchor(self, ledger: PartitionLedger) -> None:
        """Learns a markers offset before anything this owner will write about ``ledger``'s records (its ``base``),
        before its first grouped Start; the caller then commits it."""
        if ledger.base is None:
            ledger.base = self._follower.end_offset()

    def close(self) -> None:
        self._follower.close()

    def ask_commits(self, ledgers: dict[int, PartitionLedger]) -> None:
        """Asks the committed offset and metadata of the partitions that do not know theirs; a partition with
        nothing to replay is blind no more."""
        unknown = [p for p, replay in self.replays.items() if replay.since is None]
        if not unknown:
            return
        try:
            commits = self._committed_of(unknown)
        except KmqError as err:  # asked again next round; the partitions stay blind meanwhile
            self._log.warning("group_committed_offsets_unknown", partitions=unknown, error=str(err))
            return
        for partition, (committed, metadata) in commits.items():
            replay, ledger = self.replays[partition], ledgers[partition]
            replay.since = ledger.since = ledger.read_to = max(0, committed)
            markers_offset = wire.parse_group_commit_metadata(metadata)
            ledger.grouped = bool(metadata and metadata.startswith(wire.GROUP_COMMIT_FORMAT))
            if markers_offset is not None and committed >= 0:
                replay.start = ledger.base = markers_offset
                ledger.anchored = True
                replay.seen = markers_offset - 1
                self._log.info("group_takeover_started", partition=partition, committed=committed,
                               markers_from=markers_offset)
            elif not replay.parked:
                del self.replays[partition]
                ledger.blind = False

    def _start_replays(self) -> None:
        for replay in self.replays.values():
            if replay.since is not None and replay.start >= 0 and replay.end < 0:
                replay.end = self._follower.replay_from(replay.start)

    def _finish_replays(self, ledgers: dict[int, PartitionLedger],
                        offers: list[tuple[PartitionLedger, GroupQueue]]) -> Iterable[Any]:
        position = self._follower.position
        for partition, replay in list(self.replays.items()):
            if replay.since is None or (replay.start >= 0 and (replay.end < 0 or position < replay.end)):
                continue
            del self.replays[partition]
            ledger = ledgers[partition]
            ledger.blind = False
            offers += [(ledger, q) for q in ledger.groups.values()]
            if replay.start >= 0:
                self._log.info("group_takeover_caught_up", partition=partition, held=len(ledger.held),
                               parked=len(replay.parked))
            yield from replay.parked

    def _drop_gone(self, ledgers: dict[int, PartitionLedger]) -> None:
        for partition in [p for p in self.replays if p not in ledgers]:
            del self.replays[partition]

    def park(self, partition: int, record: Any) -> None:
        self.replays[partition].parked.append(record)
