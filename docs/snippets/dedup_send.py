"""Deduplicated sends: a retried send with the same dedup id is accepted, and never handed to a handler."""

from kmq import Config, Service

orders = Service(Config.load()).queue("orders")

with orders.producer() as producer:
    first = producer.send(b'{"order": 991, "charge": 42.0}', dedup_id="order-991")
    # A retry after a timeout, a webhook delivered twice: the same id within dedup_window_ms (5 minutes)
    again = producer.send(b'{"order": 991, "charge": 42.0}', dedup_id="order-991")
    print("sent", first, "and", again)

with orders.consumer() as consumer:
    message = consumer.receive(timeout=30)
    assert message is not None
    print("handling", message.payload, "id", message.headers["kmq-dedup-id"].decode())
    message.ack()
    print("another one?", consumer.receive(timeout=3))
