"""Life: one message being simulated, where it is in its plan, and the record being delivered now."""

from __future__ import annotations

from dataclasses import dataclass

from kmq.ops.audit.synthetic.plans import Plan, Step
from kmq.wire import MessageId


@dataclass(slots=True)
class Life:
    """One message being simulated: its plan, where it is in it, and the record being delivered now."""

    plan: Plan
    payload: bytes
    index: int = 0
    phase: str = "start"
    original: MessageId | None = None
    #: When its original was produced.
    born_ms: int = 0
    record: MessageId | None = None
    #: What a consumer reads from the current record's headers: delivery count, first id, enqueued-at (0: none).
    count: int = 1
    first: MessageId | None = None
    enqueued_ms: int = 0
    header_first: bool = False
    instance: str = ""
    go: bool = False
    start_ms: int = 0

    @property
    def step(self) -> Step:
        return self.plan.steps[self.index]
