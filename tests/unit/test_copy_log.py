"""CopyLog: one info line per event and queue per poll, not one per copied message."""

from __future__ import annotations

from structlog.testing import capture_logs

from kmq.redelivery.copy_log import CopyLog
from kmq.wire import MessageId


def test_copies_of_one_poll_are_summed_per_event_and_queue() -> None:
    copies = CopyLog()
    with capture_logs() as logs:
        for i in range(7):
            copies.add("redelivered", "jobs", MessageId(0, i), MessageId(0, i), 2, lag_ms=10 * i)
        copies.add("dead_lettered", "jobs", MessageId(1, 9), MessageId(0, 3), 3, lag_ms=None)
        copies.flush()
        copies.flush()  # nothing new: no line
    infos = [entry for entry in logs if entry["log_level"] == "info"]
    assert infos == [
        {"event": "redelivered", "log_level": "info", "queue": "jobs", "count": 7, "max_lag_ms": 60,
         "message_ids": "0:0,0:1,0:2,0:3,0:4,…"},
        {"event": "dead_lettered", "log_level": "info", "queue": "jobs", "count": 1, "max_lag_ms": None,
         "message_ids": "1:9"},
    ]
    assert sum(entry["log_level"] == "debug" for entry in logs) == 8
