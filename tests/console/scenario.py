"""A small deployment for the console's browser tests and its docs' screenshots, on a real broker: three queues
with messages acked, waiting, in flight (held by a consumer left open) and dead-lettered with several reasons, one
of them carrying a script in its payload, a header and its reason; a second topic set, ``ledger``, with a queue
routed there (acked, waiting and dead-lettered messages) and a queue moving there from the default set (messages
waiting in both); a tracker running for each set."""

from __future__ import annotations

import json
from contextlib import ExitStack
from dataclasses import dataclass, field

from kmq.client import Consumer, Message, Producer
from kmq.config import Config
from tests.helpers import receive_n, tracker_thread

#: The second topic set, its routed queue, the queue moving to it from the default set (docs/concepts/topic-sets.md).
LEDGER, INVOICES, MOVING = "ledger", "invoices", "moving"
ROUTES = [{"queues": INVOICES, "set": LEDGER}, {"queues": MOVING, "set": LEDGER, "draining": "default"}]
#: Invoices: sent, acked, dead-lettered with this reason, and left waiting.
INVOICES_ACKED, INVOICE_REASON, INVOICES_WAITING = 3, "amount missing", 2
#: Moving's messages sent before its route (they stay in the default set) and after it (in the ledger set).
MOVED_BEFORE, MOVED_AFTER = 3, 2
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
    #: The payload of the invoice dead-lettered in the ledger set.
    rejected_invoice: str = ""

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
    _second_set(scenario)
    return scenario


def _second_set(scenario: Scenario) -> None:
    config = scenario.config
    scenario.stack.enter_context(tracker_thread(config, topics=config.topic_set(LEDGER)))
    with Producer(config, INVOICES) as invoices:
        for i in range(INVOICES_ACKED + 1):
            invoices.send(json.dumps({"invoice": i}).encode())
    consumer = Consumer(config, INVOICES)
    try:
        got = receive_n(consumer, INVOICES_ACKED + 1)
        assert len(got) == INVOICES_ACKED + 1, f"received {len(got)} invoices"
        for message in got[:-1]:
            message.ack()
        got[-1].reject(INVOICE_REASON)
        scenario.rejected_invoice = got[-1].payload.decode()
        consumer.flush()
    finally:
        consumer.close()
    with Producer(config, INVOICES) as invoices:
        for i in range(INVOICES_WAITING):
            invoices.send(json.dumps({"invoice": 100 + i}).encode())
    # Before the move, the default set's producers send moving's messages there; then the route sends them to ledger.
    before = config.replace(routes=ROUTES[:1])
    with Producer(before, MOVING) as moving:
        for i in range(MOVED_BEFORE):
            moving.send(f"before the move {i}".encode())
    with Producer(config, MOVING) as moving:
        for i in range(MOVED_AFTER):
            moving.send(f"after the move {i}".encode())
