"""The control topic's records: pause/resume and purge, keyed per queue, and their fold into ControlState.

Records are keyed ``pause/<queue>`` (value: JSON ``{"until_ms": …}``; a tombstone resumes),
``schedule/<name>`` and ``fired/<name>`` (recurring schedules and the tick fired last: kmq.wire.schedule),
``purge/<queue>`` (value: JSON ``{"before_ms": …}``; a later purge with an earlier time changes nothing), and, for
consumers with a stable ``client_id``, ``claim/<client_id>`` (a consumer starting with it: ``{"instance": …}``) and
``alive/<client_id>`` (the instance that holds it answering a later claim: ``{"instance": …, "claim": offset}``).
Pure: no Kafka imports (kmq._kafka.control reads and writes the topic).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import structlog

from kmq.wire.schedule import FIRED, SCHEDULE, Schedule, decode_schedule

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

PAUSE, PURGE, CLAIM, ALIVE = "pause/", "purge/", "claim/", "alive/"


def control_topic(message_topic: str) -> str:
    """The control topic that belongs to a messages topic."""
    return f"{message_topic}.control"


@dataclass(frozen=True, slots=True)
class IdentityRecord:
    """A claim of a client_id, or an answer to one, and where it sits on the control topic."""

    instance_id: str
    offset: int
    #: An answer's: the offset of the claim it answers.
    claim_offset: int = -1


def identity_record(key: str, instance_id: str, claim_offset: int | None = None) -> tuple[bytes, bytes]:
    """The key and value of a ``claim/<client_id>`` (``key`` = CLAIM + id) or ``alive/<client_id>`` record."""
    value: dict[str, object] = {"instance": instance_id}
    if claim_offset is not None:
        value["claim"] = claim_offset
    return key.encode(), json.dumps(value).encode()


@dataclass(slots=True)
class ControlState:
    """What the control topic says now, per queue."""

    #: queue → paused until (ms since the epoch), or None for "until resumed".
    paused_until: dict[str, int | None] = field(default_factory=dict)
    #: queue → messages enqueued before this time (ms) are purged.
    purged_before: dict[str, int] = field(default_factory=dict)
    #: client_id → its newest claim (a consumer starting with it).
    claims: dict[str, IdentityRecord] = field(default_factory=dict)
    #: client_id → the newest answer of an instance that holds it to a later claim.
    alive: dict[str, IdentityRecord] = field(default_factory=dict)
    #: name → a recurring schedule (kmq schedule add).
    schedules: dict[str, Schedule] = field(default_factory=dict)
    #: name → the newest tick of it a tracker fired (ms since the epoch).
    fired: dict[str, int] = field(default_factory=dict)

    def apply(self, key: bytes, value: bytes | None, offset: int = -1) -> None:
        """Folds one control record (at ``offset`` of the control topic); a malformed one is logged and skipped."""
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
            elif text.startswith(CLAIM) and data is not None:
                self.claims[text[len(CLAIM):]] = IdentityRecord(str(data["instance"]), offset)
            elif text.startswith(ALIVE) and data is not None:
                self.alive[text[len(ALIVE):]] = IdentityRecord(str(data["instance"]), offset, int(data["claim"]))
            elif text.startswith(SCHEDULE):
                name = text[len(SCHEDULE):]
                if data is None:
                    self.schedules.pop(name, None)
                else:
                    self.schedules[name] = decode_schedule(name, data)
            elif text.startswith(FIRED) and data is not None:
                name = text[len(FIRED):]
                self.fired[name] = max(self.fired.get(name, 0), int(data["tick_ms"]))
            else:
                raise ValueError("unknown key")
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            log.warning("malformed_control_record", key=text, error=str(err))

    def paused(self, queue: str, now_ms: int) -> bool:
        if queue not in self.paused_until:
            return False
        until = self.paused_until[queue]
        return until is None or now_ms < until
