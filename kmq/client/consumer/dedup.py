"""The dedup window: which records of a queue repeat a dedup key seen less than ``dedup_window_ms`` before them
(docs/concepts/dedup.md). Pure: no Kafka; the Deduplicator (kmq.client.consumer.deduplicator) feeds it records.

The rule is a function of one partition's log alone, so every consumer that ever owns the partition decides every
record alike, and a new owner rebuilds what it must remember by reading one window back:

    a record with dedup key K and timestamp t is a **duplicate** when an earlier record of the partition with key K
    has a timestamp above t - window.

The records of K that follow each other so (each within the window of the newest before it) form a **run**; only the
run's first record is let through, and every later one is a duplicate *of* it. A window also answers again for
records it has decided already (a batch put back after a failed Start or commit, a partition taken back): the same
answer, from the first record of the key's newest run and of the run before it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kmq.wire import HEADER_DEDUP_ID, HEADER_FIRST_ID, MessageId

__all__ = ["DedupWindow", "PartitionWindow", "dedup_key"]

#: A key's run, packed in one int (a remembered id costs one int, not a tuple of three): the newest timestamp of
#: the run (ms), the offset of its first record, and the offset + 1 of the previous run's first record (0: none).
_OFFSET_BITS = 40
_OFFSET_MASK = (1 << _OFFSET_BITS) - 1
#: Sweeps for keys out of the window start at this many keys, and again whenever the keys doubled since the last.
FIRST_SWEEP_AT = 4096


def dedup_key(headers: Sequence[tuple[str, bytes | None]]) -> bytes | None:
    """The dedup key of an original send from its record's headers, or None: no dedup id, or a copy (a tracker's
    redelivery or a redrive carries the first delivery's id, and is a delivery of a message let through, never a
    duplicate of it). Within a consumer's window (one queue, one partition) the key is the dedup id; a message
    group, when a send has one, scopes it (docs/concepts/dedup.md): the group's header joins the key here."""
    key = None
    for name, value in headers:
        if name == HEADER_DEDUP_ID:
            key = value
        elif name == HEADER_FIRST_ID:
            return None
    return key or None


def _pack(newest_ms: int, first: int, previous: int) -> int:
    return (newest_ms << (2 * _OFFSET_BITS)) | (first << _OFFSET_BITS) | (previous + 1)


class PartitionWindow:
    """One partition's remembered keys, fed in offset order from ``valid_from`` on (after a rebuild: from the first
    record it has to decide; everything before it that can matter was read back into it).

    Lifecycle: made empty at a rebuild (``DedupWindow.rebuilding``) → fed the read-back records → fed the queue's
    records as they are Started → parked when the partition is dropped → revived if the partition comes back before
    anyone else decided a record of it, else forgotten."""

    __slots__ = ("_keys", "_next_sweep", "newest_ms", "next_offset", "partition", "skew_ms", "undecided",
                 "valid_from", "window_ms")

    def __init__(self, partition: int, window_ms: int, skew_ms: int = 0, valid_from: int = 0) -> None:
        self.partition = partition
        self.window_ms = window_ms
        #: How much older than the newest a later record's timestamp may be (producers' clocks disagree): keys are
        #: kept that long beyond the window.
        self.skew_ms = skew_ms
        #: Records from this offset on are decided by the rule; before it, the window holds what was read back.
        self.valid_from = valid_from
        #: The offset after the newest record fed; a record below it is decided again, not fed again.
        self.next_offset = 0
        #: The newest record timestamp fed (ms).
        self.newest_ms = 0
        #: Records decided again whose run the window no longer knows (let through; see ``observe``).
        self.undecided = 0
        self._keys: dict[bytes, int] = {}
        self._next_sweep = FIRST_SWEEP_AT

    def __len__(self) -> int:
        return len(self._keys)

    def observe(self, offset: int, timestamp_ms: int, key: bytes) -> MessageId | None:
        """The message the record at ``offset`` (timestamp, dedup key) repeats, or None: it is let through. A record
        below ``next_offset`` is decided again, with the answer it had. (Should its key's runs since have moved on
        twice, or its key been swept meanwhile, neither of which a put-back batch reaches, it is let through and
        counted in ``undecided``: a duplicate run twice is the lesser harm than a message never run.)"""
        packed = self._keys.get(key)
        if offset < self.next_offset:
            return self._again(offset, packed)
        self.next_offset = offset + 1
        if timestamp_ms > self.newest_ms:
            self.newest_ms = timestamp_ms
        if packed is None:
            self._keys[key] = _pack(timestamp_ms, offset, -1)
            if len(self._keys) >= self._next_sweep:
                self.sweep()
            return None
        newest = packed >> (2 * _OFFSET_BITS)
        first = (packed >> _OFFSET_BITS) & _OFFSET_MASK
        if newest > timestamp_ms - self.window_ms:
            if timestamp_ms > newest:
                self._keys[key] = _pack(timestamp_ms, first, (packed & _OFFSET_MASK) - 1)
            return MessageId(self.partition, first)
        self._keys[key] = _pack(timestamp_ms, offset, first)  # a new run: this record is its first
        return None

    def _again(self, offset: int, packed: int | None) -> MessageId | None:
        if packed is None:
            self.undecided += 1
            return None
        first = (packed >> _OFFSET_BITS) & _OFFSET_MASK
        if first < offset:
            return MessageId(self.partition, first)
        if first == offset:
            return None
        previous = (packed & _OFFSET_MASK) - 1
        if previous == offset:
            return None
        if 0 <= previous < offset:
            return MessageId(self.partition, previous)
        self.undecided += 1
        return None

    def sweep(self) -> int:
        """Forgets keys no later record can repeat (newest timestamp more than window + skew before the newest fed);
        returns how many. Runs by itself as keys grow, so memory follows the keys within one window."""
        horizon = self.newest_ms - self.window_ms - self.skew_ms
        shift = 2 * _OFFSET_BITS
        before = len(self._keys)
        self._keys = {k: v for k, v in self._keys.items() if v >> shift > horizon}
        self._next_sweep = max(FIRST_SWEEP_AT, 2 * len(self._keys))
        return before - len(self._keys)

    def covers(self, offset: int) -> bool:
        """Whether this window (parked) can decide a partition's first keyed record at ``offset`` once it is taken
        back: nobody can have decided a record past what it saw (the record is not beyond ``next_offset``), and it
        saw everything before (the record is not before ``valid_from``)."""
        return self.valid_from <= offset <= max(self.next_offset, self.valid_from)


class DedupWindow:
    """The windows of the partitions a consumer holds: live ones, and with ``park`` (the eager rebalance protocol,
    which takes every partition back and gives most of them again) parked ones: partitions dropped, kept until they
    come back. Loop thread only."""

    def __init__(self, window_ms: int, skew_ms: int = 0, *, park: bool = False) -> None:
        self.window_ms = window_ms
        self.skew_ms = skew_ms
        self._park = park
        self.live: dict[int, PartitionWindow] = {}
        self._parked: dict[int, PartitionWindow] = {}

    def window_for(self, partition: int, offset: int) -> PartitionWindow | None:
        """The live window of ``partition`` for its keyed record at ``offset``: the live one, or a parked one that
        still covers it, revived; None when it must be rebuilt (``rebuilding``)."""
        found = self.live.get(partition)
        if found is not None:
            return found
        parked = self._parked.pop(partition, None)
        if parked is not None and parked.covers(offset):
            self.live[partition] = parked
            return parked
        return None

    def rebuilding(self, partition: int, first_offset: int) -> PartitionWindow:
        """A new empty window for ``partition``, deciding records from ``first_offset`` on: feed it the records read
        back, then the partition's own."""
        window = self.live[partition] = PartitionWindow(partition, self.window_ms, self.skew_ms, first_offset)
        return window

    def dropped(self, partitions: Iterable[int]) -> None:
        """The partitions left this consumer: their windows are parked if parking (an eager rebalance that gives one
        back untouched needs no rebuild), else forgotten."""
        for partition in partitions:
            window = self.live.pop(partition, None)
            if window is not None and self._park:
                self._parked[partition] = window

    def forget(self, partition: int) -> None:
        """Drops ``partition``'s window (a rebuild that failed half way)."""
        self.live.pop(partition, None)
        self._parked.pop(partition, None)

    def __len__(self) -> int:
        """Keys remembered in the live windows."""
        return sum(len(w) for w in self.live.values())
