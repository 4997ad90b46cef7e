"""Dramatiq on kmq: the one-line switch, an actor, and a Dramatiq worker run in this process until the queue is done."""

import dramatiq
from dramatiq import Worker

from kmq.dramatiq import KmqBroker

broker = KmqBroker()  # reads $KMQ_CONFIG and KMQ_* like the kmq command; or KmqBroker(url="kmq://kafka1:9092")
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="emails", max_retries=3, min_backoff=1_000)
def send_email(to: str) -> None:
    print(f"email to {to}", flush=True)


if __name__ == "__main__":
    send_email.send("ada@example.com")
    send_email.send_with_options(args=("bob@example.com",), delay=500)  # a kmq delayed send: no .DQ queue
    worker = Worker(broker, worker_threads=2)  # in production: the `dramatiq module` command
    worker.start()
    broker.join("emails", timeout=120_000)  # returns once no message of the queue waits or is in flight
    worker.stop()
    broker.close()
