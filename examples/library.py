"""The library in 20 lines: send, receive, ack / release / reject. Needs a broker and `kmq topics create`."""

from __future__ import annotations

import os

from kmq import Config, Service

config = Config(bootstrap_servers=os.environ.get("KMQ_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))
emails = Service(config).queue("emails")

with emails.producer() as producer:
    producer.send(b'{"to": "ada@example.com"}', headers={"trace-id": "42"})

with emails.consumer() as consumer:
    for message in consumer:  # blocks; ends when the consumer is closed
        try:
            print(message.payload, message.delivery_count)
            message.ack()  # done: never delivered again
        except ValueError:
            message.reject("bad payload")  # dead letter, never redelivered
        except Exception:
            message.release(delay=30)  # try again in 30 s
        break
