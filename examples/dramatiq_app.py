"""Dramatiq on kmq: the one-line switch, and how retries, delays, dead letters and time limits map to kmq.

Needs a Kafka broker, the topics (`kmq topics create`) and a tracker (`kmq tracker`) for delays over 1 s and for
the tasks of workers that die. Then, with ``KMQ_URL=kmq://127.0.0.1:9092`` (or your broker):

    python examples/dramatiq_app.py              # sends a few tasks
    dramatiq examples.dramatiq_app               # a worker (Dramatiq's own command) runs them
    kmq dlq list emails                          # the task that always fails, with its exception as the reason
"""

from __future__ import annotations

import os

import dramatiq
from dramatiq.middleware import CurrentMessage

from kmq.dramatiq import KmqBroker, KmqMessageProxy

# The one line: every queue below is a kmq queue on the shared messages topic.
dramatiq.set_broker(KmqBroker(url=os.environ.get("KMQ_URL", "kmq://127.0.0.1:9092")))
dramatiq.get_broker().add_middleware(CurrentMessage())


@dramatiq.actor(queue_name="emails", max_retries=3, min_backoff=1_000, time_limit=30_000)
def send_email(to: str) -> None:
    """Retried up to 3 times through kmq delayed sends; the kmq record carries the 30 s time limit."""
    message = CurrentMessage.get_current_message()
    assert isinstance(message, KmqMessageProxy)
    # delivery_count > 1 only when a worker died (or was stuck) with this message: the tracker brought it back.
    print(f"email to {to}: delivery {message.delivery_count}, retry {message.options.get('retries', 0)}")
    if to.endswith("@invalid"):
        raise ValueError(f"no such domain: {to}")  # after 3 retries: kmq's dead-letter topic, reason included


@dramatiq.actor(queue_name="reports")
def build_report(name: str) -> None:
    print(f"report {name} built")


if __name__ == "__main__":
    send_email.send("ada@example.com")
    send_email.send("bob@invalid")
    build_report.send_with_options(args=("monthly",), delay=5_000)  # a kmq delayed send: no .DQ queue
    print("sent 3 tasks; run `dramatiq examples.dramatiq_app` to work them off")
    dramatiq.get_broker().close()
