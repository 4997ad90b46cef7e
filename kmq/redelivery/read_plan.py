"""ReadPlan: which records to read back from one messages-topic partition, in ranges, and what became of each.

The tracker redelivers a Start by reference by reading its record back. Expiries come in runs of neighbouring
offsets (a dead worker's batch), so the wanted offsets of a partition are read as ranges: neighbours closer than
``max_gap`` share a range (the records between them are read and dropped), farther ones get a seek. Records of a
partition arrive in offset order, so a wanted offset passed over without its record was not there (compacted, or
deleted between the watermark check and the read). Pure: no Kafka.
"""

from __future__ import annotations

from collections.abc import Iterable

#: Records between two wanted ones read through rather than sought past.
MAX_GAP = 500


def ranges(offsets: Iterable[int], max_gap: int = MAX_GAP) -> list[tuple[int, int]]:
    """Sorted, distinct ``offsets`` as (first, last) ranges whose neighbours are at most ``max_gap`` apart."""
    out: list[tuple[int, int]] = []
    for offset in sorted(set(offsets)):
        if out and offset - out[-1][1] <= max_gap:
            out[-1] = (out[-1][0], offset)
        else:
            out.append((offset, offset))
    return out


class ReadPlan:
    """One partition's wanted offsets and the scan through them: ``start()`` says where to seek and ``seen(offset)``
    takes each record read, in order (a partition's end says nothing: see kmq.redelivery.record_reader)."""

    def __init__(self, wanted: Iterable[int], max_gap: int = MAX_GAP) -> None:
        self._wanted = sorted(set(wanted))
        #: The current range is self._wanted[self._next:self._range_end].
        self._next = 0
        self._range_end = 0
        self._max_gap = max_gap
        #: Wanted offsets passed over without their record.
        self.missing: list[int] = []
        self._open_range()

    def _open_range(self) -> None:
        wanted, end = self._wanted, self._next + 1
        while end < len(wanted) and wanted[end] - wanted[end - 1] <= self._max_gap:
            end += 1
        self._range_end = min(end, len(wanted))

    @property
    def done(self) -> bool:
        return self._next >= len(self._wanted)

    def start(self) -> int | None:
        """Where the current range begins (seek there), or None when every range is done."""
        return None if self.done else self._wanted[self._next]

    def seen(self, offset: int) -> tuple[bool, int | None]:
        """A record at ``offset`` was read: (whether it is wanted, where to seek next or None to read on). Wanted
        offsets below it in the current range were passed over: they go to ``missing``."""
        if self.done or offset < self._wanted[self._next]:
            return False, None  # done, or before the range (fetched before a seek took effect)
        wanted, end = self._wanted, self._range_end
        while self._next < end and wanted[self._next] < offset:
            self.missing.append(wanted[self._next])
            self._next += 1
        hit = self._next < end and wanted[self._next] == offset
        if hit:
            self._next += 1
        if self._next < end:
            return hit, None
        return hit, self._next_range()

    def outside(self, low: int, high: int) -> list[int]:
        """Drops the wanted offsets not yet read that are outside the partition's [low, high) (deleted by retention,
        or past its end) and returns them; ``start()`` then says where to read on."""
        left = self._wanted[self._next:]
        gone = [o for o in left if o < low or o >= high]
        if gone:
            self._wanted = self._wanted[:self._next] + [o for o in left if low <= o < high]
            self._open_range()
        return gone

    def _next_range(self) -> int | None:
        if self.done:
            return None
        self._open_range()
        return self._wanted[self._next]
