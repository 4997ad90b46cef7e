"""kmq: SQS-style queues with per-message acknowledgement on Apache Kafka."""

from kmq._kafka import Delivery
from kmq.config import Config
from kmq.consumer import Consumer
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
from kmq.markers import MessageId
from kmq.message import Message
from kmq.producer import Producer
from kmq.service import Queue, Service

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
