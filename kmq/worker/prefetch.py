"""PrefetchWindow: how many messages a worker lets one consumer hold, from how long its handlers take.

A consumer Starts, commits and buffers messages ahead of the threads that run them. For fast handlers that pipeline
is the throughput (a Start batch and a commit cost the same for 1 message or 500); for slow ones every buffered
message waits for a thread while nobody else can run it: a worker that joins the group later gets the partition,
not what this one buffered. So the window is the worker's threads plus about ``horizon_s`` of their work:

    concurrency + floor(concurrency * horizon_s / mean run time), within [concurrency, maximum]

It starts at ``concurrency`` (nothing is known yet: a first burst of slow jobs is not hoarded) and follows an
exponentially weighted mean of run times; a run still going on counts as at least that long (``at_least``), so a
switch to slow jobs shrinks the window before the first of them ends. Pure logic: the caller applies the size.
"""

from __future__ import annotations

from collections.abc import Callable

#: How much handler work a worker buffers beyond what its threads run: enough to cover a Start and a commit round
#: trip (a few ms, more on a loaded broker) for fast handlers; none for handlers slower than this per thread.
HORIZON_S = 0.25
#: Weight of the newest run time in the mean.
ALPHA = 0.2
#: A worker's only thread takes at once about this much work (by the mean run time), and at most BATCH_MAX messages:
#: enough to take one look at the buffer per many fast jobs; a slow run holds back little behind it.
BATCH_WORK_S = 0.002
BATCH_MAX = 64


class PrefetchWindow:
    """The window of one queue. ``observe`` may be called from several threads: a lost update only delays it."""

    def __init__(self, concurrency: int, maximum: int, on_change: Callable[[int], None],
                 horizon_s: float = HORIZON_S, alpha: float = ALPHA) -> None:
        self.concurrency = concurrency
        self.maximum = max(concurrency, maximum)
        self.horizon_s = horizon_s
        self.alpha = alpha
        self.mean_s: float | None = None
        self.size = concurrency
        self._on_change = on_change
        #: Mean run times up to this give the maximum (a shortcut: this runs once per message).
        spare = self.maximum - concurrency
        self._full_up_to = concurrency * horizon_s / spare if spare else float("inf")

    def observe(self, run_s: float) -> None:
        """A handler run of this queue took ``run_s`` seconds."""
        mean = self.mean_s
        self.mean_s = mean = run_s if mean is None else mean + self.alpha * (run_s - mean)
        if mean <= self._full_up_to and self.size == self.maximum:
            return
        self._resize()

    def at_least(self, running_s: float) -> None:
        """A run has been going on for ``running_s`` seconds: the mean is at least that. (Before any run ended the
        window is at its smallest already.)"""
        if self.mean_s is not None and self.mean_s < running_s:
            self.mean_s = running_s
            self._resize()

    def thread_batch(self) -> int:
        """How many messages a thread may take at once: 1 with several threads (one must not hold a message while
        another is idle) or before any run ended; else about BATCH_WORK_S of runs, within [1, BATCH_MAX]."""
        mean = self.mean_s
        if self.concurrency > 1 or mean is None:
            return 1
        if mean * BATCH_MAX <= BATCH_WORK_S:
            return BATCH_MAX
        return max(1, int(BATCH_WORK_S / mean))

    def size_for(self, mean_s: float) -> int:
        if mean_s <= 0:
            return self.maximum
        extra = self.concurrency * self.horizon_s / mean_s
        if extra >= self.maximum:  # also keeps int() away from huge floats
            return self.maximum
        return min(self.maximum, self.concurrency + int(extra))

    def _resize(self) -> None:
        assert self.mean_s is not None
        size = self.size_for(self.mean_s)
        if size != self.size:
            self.size = size
            self._on_change(size)
