"""One error hierarchy for kmq, rooted at KmqError."""

from __future__ import annotations


class KmqError(Exception):
    """Raised for every kmq failure; catch this to handle them all."""


class ConfigError(KmqError, ValueError):
    """Raised when a configuration value is invalid; ``field`` names the offending key."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"invalid config: {field}: {message}")
        self.field = field


class ScheduleError(ConfigError):
    """Raised when a recurring schedule's definition is invalid (cron expression, time zone, template, policy,
    name) or names no schedule; ``field`` names what is wrong."""

    def __init__(self, field: str, message: str) -> None:
        KmqError.__init__(self, f"schedule {field}: {message}")
        self.field = field


class InvalidQueueNameError(KmqError, ValueError):
    """Raised when a queue name is empty, too long or not printable."""


class PayloadError(KmqError, TypeError):
    """Raised when a payload or its headers are not of a type kmq can send."""


class PayloadTooLargeError(KmqError, ValueError):
    """Raised when a payload exceeds the configured ``max_payload_bytes``."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"payload of {size} bytes exceeds max_payload_bytes={limit}")
        self.size = size
        self.limit = limit


class KafkaClientError(KmqError):
    """Raised when Kafka refuses or fails an operation; ``retriable`` says whether trying again may work."""

    def __init__(self, message: str, *, retriable: bool = False, code: int | None = None) -> None:
        super().__init__(message)
        self.retriable = retriable
        self.code = code


class AuthorizationError(KafkaClientError):
    """Raised when the broker refuses an operation that the principal's ACLs do not allow; the message names the
    topic or group (``kmq acl plan`` prints what a tenant needs)."""


class AuthenticationError(KafkaClientError):
    """Raised when the broker refuses the client's credentials (``kafka.sasl.*``, ``kafka.ssl.*``)."""


class DeliveryError(KafkaClientError):
    """Raised when a record could not be written durably to Kafka within the time allowed."""


class TopicError(KmqError):
    """Raised when a kmq topic is missing or configured in a way kmq cannot rely on."""


class MarkerDecodeError(KmqError):
    """Raised when a markers-topic record is not a valid marker; keeps the raw bytes and where they came from."""

    def __init__(self, reason: str, raw: bytes | None, *, topic: str = "", partition: int = -1,
                 offset: int = -1) -> None:
        super().__init__(f"malformed marker at {topic}[{partition}]@{offset}: {reason}")
        self.reason = reason
        self.raw = raw
        self.topic = topic
        self.partition = partition
        self.offset = offset


class MessageSettledError(KmqError):
    """Raised when ack, release or reject is called on a message that was already settled."""


class ClientIdInUseError(KmqError):
    """Raised when a consumer starts with a ``client_id`` that a live consumer of another process holds: two
    processes with one identity would fence each other and run each other's jobs twice."""


class ConsumerClosedError(KmqError):
    """Raised when a closed consumer is used, or a message is settled after its consumer closed."""


class Reject(KmqError):
    """Raised by a worker handler to reject a message for good (dead letter, never redelivered)."""


class UndeliveredMarkersError(DeliveryError):
    """Raised by ``Consumer.close()`` (and a worker's ``run()``) when settle markers (acks, releases, rejects) could
    not be written durably: those messages will be delivered again. ``undelivered`` counts the marker records."""

    def __init__(self, message: str, undelivered: int) -> None:
        super().__init__(message, retriable=True)
        self.undelivered = undelivered


class TimeLimitExceeded(BaseException):
    """Raised inside a handler thread whose message ran past its time limit.

    A BaseException, like KeyboardInterrupt, so a handler's ``except Exception`` does not swallow it. By then the
    worker has already released the message (or dead-lettered it after ``max_deliveries``).
    """
