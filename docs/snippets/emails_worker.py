"""A handler for `kmq worker emails_worker:handle --queue emails`: return → ack, kmq.Reject → dead letter at once,
any other exception → retried with backoff (dead letter after max_deliveries)."""

import json

from kmq import Message, Reject


def handle(message: Message) -> None:
    try:
        job = json.loads(message.payload)
    except ValueError as err:
        raise Reject(f"not JSON: {err}") from err
    if "to" not in job:
        raise Reject("missing 'to'")
    print(f"sending email to {job['to']} (delivery {message.delivery_count})", flush=True)
