"""Iterating over a consumer: the loop blocks until a message comes, and ends when you break or close it."""

from kmq import Config, Service

emails = Service(Config.load()).queue("emails")

with emails.producer() as producer:
    for n in range(3):
        producer.send_async(f"job {n}".encode())
    producer.flush()  # wait for the three sends

with emails.consumer() as consumer:
    for handled, message in enumerate(consumer, start=1):  # never ends by itself: it waits for the next message
        print(message.payload.decode(), "delivery", message.delivery_count)
        message.ack()
        if handled == 3:
            break  # or call consumer.close() from another thread: the loop then ends
