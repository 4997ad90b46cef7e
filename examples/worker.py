"""An example worker: ``kmq worker examples.worker:handle --queue emails --concurrency 4``.

Return → ack; raise ``kmq.Reject`` → dead letter at once; any other exception → retried with backoff.
"""

from __future__ import annotations

import json

from kmq import Message, Reject


def handle(message: Message) -> None:
    try:
        job = json.loads(message.payload)
    except ValueError as err:
        raise Reject(f"not JSON: {err}") from err
    if "to" not in job:
        raise Reject("missing 'to'")
    print(f"sending email to {job['to']} (delivery {message.delivery_count})")
