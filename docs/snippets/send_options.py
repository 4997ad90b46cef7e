"""A send's options: delay or a due time, a time to live, a time limit, headers, and callbacks for async sends."""

from datetime import UTC, datetime, timedelta

from kmq import Config, KmqError, MessageId, Service

emails = Service(Config.load()).queue("emails")


def on_delivery(err: KmqError | None, message_id: MessageId | None) -> None:
    print(f"failed: {err}" if err else f"durable: {message_id}")


with emails.producer() as producer:
    producer.send(b"in 30 seconds", delay=30)  # no handler gets it before then
    tomorrow_nine = (datetime.now(UTC) + timedelta(days=1)).replace(hour=9, minute=0, second=0, microsecond=0)
    producer.send(b"tomorrow at nine", deliver_at=tomorrow_nine)  # an aware datetime
    producer.send(b"worthless after an hour", ttl=3600)  # expired: dead-lettered (or dropped), never handed out
    producer.send(b"may run 2 minutes", time_limit=120)  # a worker stops its handler after 120 s
    producer.send(b"with headers", headers={"trace-id": "42"})  # str or bytes values; the prefix kmq- is reserved
    delivery = producer.send_async(b"async", on_delivery=on_delivery)  # returns at once
    delivery.add_done_callback(lambda done: print("done:", done.result()))
    undelivered = producer.flush(timeout=30)  # wait for every send_async; how many are still undelivered
    assert undelivered == 0
