"""ReadHorizon: how far a markers partition's deadlines may fire, on evidence that the log is current up to there.

The deadline clock extrapolates the broker's time from the newest marker seen. While a partition's high-watermark
stands still (a follower that died is still in the ISR until the controller fences it, 4-12 s), that clock runs on
but the markers appended meanwhile (the acks and keep-alives of messages whose deadlines fall due) cannot be read:
firing on the clock alone would copy messages whose workers had settled or kept them alive in time, duplicates
the tracker could have avoided. So a deadline fires only once a record appended after it has been read (every
record appended before that one has then been read too). On a busy partition the queues' own markers are that
evidence; on a quiet one the tracker writes a clock probe and fires when it reads the probe back (one write and
read more of lag, a few ms). kmq marker format only: a kafka-mq-go tracker would count the probes as malformed.
"""

from __future__ import annotations

from dataclasses import dataclass

#: A probe not read back within this long (the partition is unavailable) is sent again.
PROBE_RETRY_S = 1.0


@dataclass(slots=True)
class ReadHorizon:
    #: The newest append time (LogAppendTime, ms) read from the partition.
    read_ms: int = 0
    #: When the probe not yet read back was sent (monotonic s), or None.
    probe_sent_at: float | None = None

    def read(self, timestamp_ms: int, *, probe: bool = False) -> None:
        """A record appended at ``timestamp_ms`` was read; ``probe``: it is a clock probe."""
        if timestamp_ms > self.read_ms:
            self.read_ms = timestamp_ms
        if probe:
            self.probe_sent_at = None

    def limit(self, now_ms: int, next_due_ms: int | None, monotonic_s: float) -> tuple[int, bool]:
        """The time up to which deadlines may fire now (the extrapolated ``now_ms`` at most), and whether to send a
        probe: a deadline due by the clock lies past what has been read, and no probe is on its way."""
        limit = min(now_ms, self.read_ms)
        waiting = next_due_ms is not None and limit <= next_due_ms < now_ms
        send = waiting and (self.probe_sent_at is None or monotonic_s - self.probe_sent_at >= PROBE_RETRY_S)
        if send:
            self.probe_sent_at = monotonic_s
        return limit, send

    def waiting(self, due_ms: int, now_ms: int | None) -> bool:
        """True while a deadline due by the clock waits for evidence (a record appended after it)."""
        return now_ms is not None and self.read_ms <= due_ms < now_ms
