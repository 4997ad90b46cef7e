"""Send one message to the queue "emails", receive it and ack it (KMQ_BOOTSTRAP_SERVERS names the broker)."""

from kmq import Config, Service

config = Config.load()  # KMQ_* environment variables, e.g. KMQ_BOOTSTRAP_SERVERS=127.0.0.1:9092
emails = Service(config).queue("emails")

with emails.producer() as producer:
    message_id = producer.send(b'{"to": "ada@example.com"}')  # returns once the message is durable in Kafka
    print("sent", message_id)

with emails.consumer() as consumer:
    message = consumer.receive(timeout=60)  # the first receive waits for the consumer group to form
    assert message is not None, "nothing received within 60 s"
    print("received", message.payload, "delivery", message.delivery_count)
    message.ack()  # done: never delivered again
