"""HeapTrim: the C heap's free pages handed back to the system as markers are folded (glibc's ``malloc_trim``)."""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable

#: Records folded between two trims. A trim takes 0.1-3 ms, so at this spacing it costs under 0.1 µs a record.
TRIM_EVERY_RECORDS = 50_000


def _malloc_trim() -> Callable[[], object] | None:
    """glibc's ``malloc_trim(0)``, or None where the C library has none (musl, macOS): there nothing is trimmed."""
    name = ctypes.util.find_library("c")
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    return lambda: trim(0)


class HeapTrim:
    """Folding markers frees librdkafka's fetched records and keeps the Starts, so glibc's heaps fill with free
    pages it does not give back by itself: a tracker rebuilding 1,000,000 kafka-mq-go markers peaked at 1.30 GB
    against 0.97 GB when the same fold also made a protobuf object per record (Python's own heap and glibc's bytes in
    use were the same in both). Trimming every ``every`` records folded keeps the peak where it was."""

    def __init__(self, every: int = TRIM_EVERY_RECORDS, trim: Callable[[], object] | None = None) -> None:
        self._every = every
        self._trim = trim if trim is not None else _malloc_trim()
        self._since = 0

    def folded(self, records: int) -> None:
        """``records`` more were folded: trims once ``every`` have been since the last trim."""
        if self._trim is None:
            return
        self._since += records
        if self._since >= self._every:
            self._since = 0
            self._trim()
