"""The library in 30 lines: send, then receive in batches and settle every message (ack, reject or release)."""

import json

from kmq import Config, Service

config = Config.load()  # KMQ_BOOTSTRAP_SERVERS and other KMQ_* settings; topics default to kmq.messages / kmq.markers
service = Service(config)
service.create_topics(partitions=6, marker_partitions=3)  # once; or `kmq topics create` (existing topics are kept)
emails = service.queue("emails")


def handle(payload: bytes) -> None:
    job = json.loads(payload)  # raises ValueError on a payload that is not JSON
    print("sending email to", job["to"])  # raises KeyError on a job without "to"


with emails.producer() as producer:
    producer.send(b'{"to": "ada@example.com"}', headers={"trace-id": "42"})  # blocks until durable
    delivery = producer.send_async(b"not json")  # Future-like: .result(timeout) -> MessageId, add_done_callback
    print("sent", delivery.result(timeout=30))

with emails.consumer() as consumer:
    settled = 0
    while settled < 2:
        batch = consumer.receive_many(100, timeout=60.0)  # SQS ReceiveMessage style: up to 100, [] on timeout
        if not batch:
            raise SystemExit("no message within 60 s")
        for message in batch:  # settle every message of the batch, exactly once
            try:
                handle(message.payload)
                message.ack()  # done, never delivered again
            except ValueError as err:
                message.reject(str(err))  # dead letter, never redelivered
            except Exception:
                message.release(delay=30)  # try again in 30 s (delivery_count + 1)
            settled += 1
    consumer.flush()  # wait until the acks are durable (close does it too)
