"""ReadHorizon: how far a markers partition's deadlines may fire, on evidence that the log is current up to there.

The deadline clock extrapolates the broker's time from the newest marker seen. While a partition's high-watermark
stands still (a follower that died is still in the ISR until the controller fences it, 4-12 s), that clock runs on
but the markers appended meanwhile (the acks and keep-alives of messages whose deadlines fall due) cannot be read:
firing on the clock alone would copy messages whose workers had settled or kept them alive in time, duplicates
the tracker could have avoided. So a deadline fires only once a record appended after it has been read (every
record appended before that one has then been read too). On a busy partition the queues' own markers are that
evidence; on a quiet one the tracker writes a clock probe and fires when it reads the probe back (one write and
read more of lag, a few ms). kmq marker format only: a kafka-mq-go tracker would count the probes as malformed.

When the partition's leader itself died, the writes held meanwhile (a worker's acks, the tracker's probe) are all
sent again to the new leader once the producers learn of it, in no particular order: a probe that wins the race
would fire deadlines whose acks land a moment later. So a probe that took STALL_S or more to come back (the
partition was unavailable) holds back what fell due since until a record appended GRACE_MS after it is read, time
for every producer to have found the new leader.
"""

from __future__ import annotations

from dataclasses import dataclass

#: A probe not read back within this long (the partition is unavailable) is sent again.
PROBE_RETRY_S = 1.0
#: A probe back after this long means the partition was unavailable meanwhile (normally it takes milliseconds).
STALL_S = 1.0
#: After such a stall, how long the other producers get to re-send what they held to the new leader (librdkafka
#: looks for a partition's new leader at least every retry.backoff.max.ms, 1 s by default).
GRACE_MS = 2000


@dataclass(slots=True)
class ReadHorizon:
    #: The newest append time (LogAppendTime, ms) read from the partition.
    read_ms: int = 0
    #: When the probe not yet read back was sent (monotonic s), or None.
    probe_sent_at: float | None = None
    #: After a stall: (fire up to this, until a record appended at or after this is read, no probe before this
    #: monotonic time).
    hold: tuple[int, int, float] | None = None

    def read(self, timestamp_ms: int, *, probe: bool = False, monotonic_s: float = 0.0) -> None:
        """A record appended at ``timestamp_ms`` was read (at ``monotonic_s``); ``probe``: it is a clock probe."""
        if probe and self.probe_sent_at is not None and monotonic_s - self.probe_sent_at >= STALL_S:
            upto = self.hold[0] if self.hold is not None else self.read_ms
            self.hold = (upto, timestamp_ms + GRACE_MS, monotonic_s + GRACE_MS / 1000)
        if timestamp_ms > self.read_ms:
            self.read_ms = timestamp_ms
        if probe:
            self.probe_sent_at = None

    def limit(self, now_ms: int, next_due_ms: int | None, monotonic_s: float) -> tuple[int, bool]:
        """The time up to which deadlines may fire now (the extrapolated ``now_ms`` at most), and whether to send a
        probe: a deadline due by the clock lies past what has been read, and no probe is on its way."""
        limit = min(now_ms, self.read_ms)
        quiet_until = 0.0
        if self.hold is not None:
            upto, until_ms, quiet_until = self.hold
            if self.read_ms >= until_ms:
                self.hold = None
            else:
                limit = min(limit, upto)
        waiting = next_due_ms is not None and limit <= next_due_ms < now_ms
        send = (waiting and monotonic_s >= quiet_until
                and (self.probe_sent_at is None or monotonic_s - self.probe_sent_at >= PROBE_RETRY_S))
        if send:
            self.probe_sent_at = monotonic_s
        return limit, send

    def waiting(self, due_ms: int, now_ms: int | None) -> bool:
        """True while a deadline due by the clock waits for evidence (a record appended after it, or the end of a
        hold after a stall)."""
        fireable = self.read_ms if self.hold is None else min(self.read_ms, self.hold[0])
        return now_ms is not None and fireable <= due_ms < now_ms
