"""MarkerFloor: from which markers offset every marker of a messages-topic partition's records at or after an
offset can be read: the ``m=`` of a grouped partition's commit (docs/concepts/groups.md).

Each durable Start record (this consumer's, or an earlier owner's read in a replay) notes (r, m): its highest record
offset in the partition and its own markers offset. For a committed offset c, M(c) is the least m of a note with
r >= c. Notes come in markers order (m grows), so a note whose r is no higher than an earlier note's can never be
that least m and is dropped: the notes kept rise in both r and m, M(c) is the m of the first with r >= c, and notes
with r below a committed c are dropped for good. Pure; compiled by mypyc (setup.py's HOT_PATH).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from kmq.wire import MessageId


class MarkerFloor:
    """One partition's notes. Loop thread."""

    __slots__ = ("_notes",)

    def __init__(self) -> None:
        self._notes: deque[tuple[int, int]] = deque()

    def __len__(self) -> int:
        return len(self._notes)

    def note(self, record_offset: int, markers_offset: int) -> None:
        """A marker record at ``markers_offset`` is about records of this partition up to ``record_offset``."""
        if not self._notes or record_offset > self._notes[-1][0]:
            self._notes.append((record_offset, markers_offset))

    def at(self, committed: int) -> int | None:
        """M(``committed``): the markers offset to replay from, or None when no record at or after ``committed``
        has a marker."""
        for record_offset, markers_offset in self._notes:
            if record_offset >= committed:
                return markers_offset
        return None

    def committed(self, offset: int) -> None:
        """``offset`` is committed: notes of records before it are never needed again."""
        notes = self._notes
        while notes and notes[0][0] < offset:
            notes.popleft()


def highest_offsets(ids: Sequence[MessageId]) -> dict[int, int]:
    """Per partition, the highest offset among ``ids`` (the records one Start record is about): what its notes
    need. It runs for every Start record, over every id in it, grouped or not (compiled: setup.py's HOT_PATH)."""
    highest: dict[int, int] = {}
    for partition, offset in ids:
        if offset > highest.get(partition, -1):
            highest[partition] = offset
    return highest
