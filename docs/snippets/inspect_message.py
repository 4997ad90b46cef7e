"""One message's story from the topics, as `kmq inspect QUEUE PARTITION:OFFSET` tells it."""

from kmq import Config, Service
from kmq.ops.inspect import inspect_message

config = Config.load()
emails = Service(config).queue("emails")

with emails.producer() as producer:
    message_id = producer.send(b'{"to": "ada@example.com"}')  # a MessageId: partition and offset
print("sent", message_id)

with emails.consumer() as consumer:
    message = consumer.receive(timeout=60)
    assert message is not None and message.message_id == message_id
    message.ack()
    consumer.flush()  # the ack is durable: inspect reads it from the markers topic

life = inspect_message(config, "emails", message_id)
for event in life.events:  # enqueued, delivered (to whom, with which delivery count), acked
    print(event.at_ms, event.what, event.message_id, event.detail)
print("state:", life.state)  # acked
