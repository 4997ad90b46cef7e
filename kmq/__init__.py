"""kmq: SQS-style queues with per-message acknowledgement on Apache Kafka.

The package's rooms, from the bottom up (imports only go down; ``make lint`` checks it with import-linter):
``errors``, ``logs``, ``delivery`` → ``wire`` (the wire format) → ``topic_sets`` → ``config`` → ``_kafka`` (the
confluent-kafka edge) → ``client`` (producer, consumer, message) → ``worker`` · ``redelivery`` · ``ops`` (independent
of each other) → ``service``, ``cli``, ``demo``. See docs/architecture.md.
"""

from kmq import logs
from kmq.client import Consumer, Message, Producer
from kmq.config import Config
from kmq.delivery import Delivery
from kmq.errors import (
    AuthenticationError,
    AuthorizationError,
    ClientIdInUseError,
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
    ScheduleError,
    TimeLimitExceeded,
    TopicError,
    UndeliveredMarkersError,
)
from kmq.heap import tune_gc
from kmq.redelivery import RedeliveryTracker
from kmq.service import Queue, Service
from kmq.topic_sets import TopicSet
from kmq.wire import MessageId
from kmq.worker import Backoff, Handler, Worker

#: kmq's version (the one in pyproject.toml).
__version__ = "0.2.0"

__all__ = [  # noqa: RUF022 - grouped by kind, as aiokafka and dramatiq do
    # entry points and clients
    "Config",
    "Consumer",
    "Producer",
    "Queue",
    "Service",
    # the worker runtime and the tracker
    "Backoff",
    "Handler",
    "RedeliveryTracker",
    "Worker",
    # process set-up
    "tune_gc",
    # values
    "Delivery",
    "Message",
    "MessageId",
    "TopicSet",
    # errors (all rooted at KmqError; TimeLimitExceeded is a BaseException, like KeyboardInterrupt)
    "AuthenticationError",
    "AuthorizationError",
    "ClientIdInUseError",
    "ConfigError",
    "ConsumerClosedError",
    "DeliveryError",
    "InvalidQueueNameError",
    "KafkaClientError",
    "KmqError",
    "MarkerDecodeError",
    "MessageSettledError",
    "PayloadError",
    "PayloadTooLargeError",
    "Reject",
    "ScheduleError",
    "TimeLimitExceeded",
    "TopicError",
    "UndeliveredMarkersError",
    "__version__",
]

# A library must not write to stdout: structlog's default does, unless the application configured it.
logs.use_stderr_by_default()
