"""A Celery app on kmq: the one-line switch (``broker_url="kmq://host:9092"``) and what kmq does for each task.

Needs ``pip install 'kmq[celery]'``, a broker, kmq's topics and a redelivery tracker::

    export KMQ_BOOTSTRAP_SERVERS=127.0.0.1:9092
    kmq topics create
    kmq tracker &                                        # redelivers a dead worker's tasks, and delayed ones
    celery -A examples.celery_app worker -c 4 -l INFO    # start as many workers as there are partitions
    python -m examples.celery_app                        # sends a few tasks
    kmq dlq list emails                                  # the one that was rejected
"""

from __future__ import annotations

import os

from celery import Celery
from celery.exceptions import Reject

import kmq.kombu  # noqa: F401  (registers the kmq:// scheme; or set broker_transport="kmq.kombu:Transport")

BROKER = os.environ.get("KMQ_BOOTSTRAP_SERVERS", "127.0.0.1:9092").split(",")[0]

app = Celery("example", broker=f"kmq://{BROKER}")
app.conf.update(
    task_default_queue="emails",       # the kmq queue (one consumer group per queue, many workers per queue)
    task_acks_late=True,               # ack (a kmq End) when the task returns, not when it starts
    task_reject_on_worker_lost=True,   # a killed pool child's task goes back to the worker's queue at once
    worker_prefetch_multiplier=1,
    # kmq's redelivery timeout: the tracker hands a dead worker's unacked tasks to another after this silence.
    broker_transport_options={"visibility_timeout": 60},
)


class TemporaryError(Exception):
    """The mail server said "try later"."""


@app.task(name="examples.send_email", bind=True, max_retries=3)  # named: `python -m` makes it __main__
def send_email(self: object, to: str) -> str:
    if "@" not in to:
        raise Reject(f"not an address: {to!r}", requeue=False)  # dead letter: `kmq dlq list emails`
    try:
        deliver(to)
    except TemporaryError as exc:
        # A retry is a new message with a countdown: kmq holds it for 30 s, no worker keeps it in memory.
        raise self.retry(exc=exc, countdown=30) from exc  # type: ignore[attr-defined]
    return to


def deliver(to: str) -> None:
    print(f"sending to {to}")


if __name__ == "__main__":
    send_email.delay("ada@example.com")
    send_email.apply_async(("grace@example.com",), countdown=10)  # held by kmq until due
    send_email.delay("not-an-address")                            # dead-lettered by the worker
