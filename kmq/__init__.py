"""kmq: SQS-style queues with per-message acknowledgement on Apache Kafka."""


from kmq import logs
from kmq.config import Config
from kmq.consumer import Consumer
from kmq.delivery import Delivery
from kmq.errors import (
    ConfigError,
    ConsumerClosedError,
    DeliveryError,
    InvalidQueueNameError,
    KafkaClientError,
    KmqError,
    MarkerDecodeError,
    MessageSettledError,
    PayloadError,
    PayloadTooLargeError,
    Reject,
    TopicError,
)
from kmq.message import Message
from kmq.producer import Producer
from kmq.service import Queue, Service
from kmq.wire import MessageId

__all__ = [
    "Config",
    "ConfigError",
    "Consumer",
    "ConsumerClosedError",
    "Delivery",
    "DeliveryError",
    "InvalidQueueNameError",
    "KafkaClientError",
    "KmqError",
    "MarkerDecodeError",
    "Message",
    "MessageId",
    "MessageSettledError",
    "PayloadError",
    "PayloadTooLargeError",
    "Producer",
    "Queue",
    "Reject",
    "Service",
    "TopicError",
]

# A library must not write to stdout: structlog's default does, unless the application configured it.
logs.use_stderr_by_default()
