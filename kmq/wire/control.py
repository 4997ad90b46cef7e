"""The control topic's records: pause/resume and purge, keyed per queue, and their fold into ControlState.

Records are keyed ``pause/<queue>`` (value: JSON ``{"until_ms": …}``; a tombstone resumes) and
``purge/<queue>`` (value: JSON ``{"before_ms": …}``; a later purge with an earlier time changes nothing).
Pure: no Kafka imports (kmq._kafka.control reads and writes the topic).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import structlog

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

PAUSE, PURGE = "pause/", "purge/"


def control_topic(message_topic: str) -> str:
    """The control topic that belongs to a messages topic."""
    return f"{message_topic}.control"


@dataclass(slots=True)
class ControlState:
    """What the control topic says now, per queue."""

    #: queue → paused until (ms since the epoch), or None for "until resumed".
    paused_until: dict[str, int | None] = field(default_factory=dict)
    #: queue → messages enqueued before this time (ms) are purged.
    purged_before: dict[str, int] = field(default_factory=dict)

    def apply(self, key: bytes, value: bytes | None) -> None:
        """Folds one control record; a malformed one is logged and skipped."""
        text = key.decode("utf-8", "replace")
        try:
            data = json.loads(value) if value is not None else None
            if text.startswith(PAUSE):
                queue = text[len(PAUSE):]
                if data is None:
                    self.paused_until.pop(queue, None)
                else:
                    until = data.get("until_ms")
                    self.paused_until[queue] = None if until is None else int(until)
            elif text.startswith(PURGE) and data is not None:
                queue = text[len(PURGE):]
                self.purged_before[queue] = max(self.purged_before.get(queue, 0), int(data["before_ms"]))
            else:
                raise ValueError("unknown key")
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            log.warning("malformed_control_record", key=text, error=str(err))

    def paused(self, queue: str, now_ms: int) -> bool:
        if queue not in self.paused_until:
            return False
        until = self.paused_until[queue]
        return until is None or now_ms < until
