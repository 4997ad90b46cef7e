"""A small deployment for the console's browser tests and its docs' screenshots, on a real broker: three queues
with messages acked, waiting, in flight (held by a consumer left open) and dead-lettered with several reasons, one
of them carrying a script in its payload, a header and its reason; a tracker running."""

from __future__ import annotations

import json
from contextlib import ExitStack
from dataclasses import dataclass, field

from kmq.client import Consumer, Message, Producer
from kmq.config import Config
from tests.helpers import receive_n, tracker_thread

XSS = "<script>alert(1)</script>"
XSS_HEADER = "<img src=x onerror=alert(2)>"
REASONS = ("invalid address: no @", "invalid address: no @", "invalid address: no @", "smtp timeout after 30 s",
           "smtp timeout after 30 s", f"refused: {XSS}")


@dataclass
class Scenario:
    config: Config
    stack: ExitStack = field(default_factory=ExitStack)
    #: The in-flight messages the open consumer holds.
    held: list[Message] = field(default_factory=list)
    #: Payload -> the first id of the dead-lettered message that carries it.
    dead: dict[str, str] = field(default_factory=dict)

    def close(self) -> None:
        self.stack.close()


def build(config: Config) -> Scenario:
    scenario = Scenario(config)
    scenario.stack.enter_context(tracker_thread(config))
    with Producer(config, "emails") as emails:
        for i in range(30):
            emails.send(json.dumps({"to": f"user{i}@example.com", "template": "welcome", "n": i}).encode(),
                        headers={"tenant": "acme" if i % 2 else "globex"})
    consumer = Consumer(config, "emails")
    try:
        for message in receive_n(consumer, 18):
            message.ack()
        consumer.flush()
    finally:
        consumer.close()
    with Producer(config, "reports") as reports:
        for i, _ in enumerate(REASONS):
            payload = XSS if i == len(REASONS) - 1 else json.dumps({"report": i})
            reports.send(payload.encode(), headers={"x-note": XSS_HEADER if i == len(REASONS) - 1 else "plain"})
    consumer = Consumer(config, "reports")
    try:
        got = receive_n(consumer, len(REASONS))
        assert len(got) == len(REASONS), f"received {len(got)} of {len(REASONS)} reports"
        for message in got:
            text = message.payload.decode()
            scenario.dead[text] = str(message.first_message_id)
            message.reject(REASONS[-1] if text == XSS else REASONS[json.loads(text)["report"]])
        consumer.flush()
    finally:
        consumer.close()
    with Producer(config, "billing") as billing:
        for i in range(5):
            billing.send(f"invoice {i}".encode())
    held_by = Consumer(config, "billing")
    scenario.stack.callback(held_by.close)
    scenario.held = receive_n(held_by, 2)
    return scenario
