"""An at-most-once queue: no Start markers, never redelivered; a message can be acked or rejected, not released."""

from kmq import Config, KmqError, Service

# In YAML: at_most_once_queues: [metrics]; in the environment: KMQ_AT_MOST_ONCE_QUEUES=metrics
config = Config.load().replace(at_most_once_queues=("metrics",))
metrics = Service(config).queue("metrics")

with metrics.producer() as producer:
    producer.send(b"cpu=0.93")

with metrics.consumer() as consumer:
    message = consumer.receive(timeout=60)
    assert message is not None
    try:
        message.release()  # nothing would ever deliver it again
    except KmqError as err:
        print("refused:", err)
    message.ack()  # writes nothing: the consumer's commit already passed the message
    print("processed", message.payload)
