"""ClientErrors: what a consumer makes of its Kafka client's errors: fatal ones stop it, others are logged (now and
then: a broker that is down repeats them many times a second)."""

from __future__ import annotations

import time

import structlog
from confluent_kafka import KafkaError

from kmq import _kafka
from kmq._kafka.group import GroupMembership
from kmq.client.consumer.intake import Record
from kmq.config import Config
from kmq.errors import KafkaClientError, KmqError

CLIENT_WARNING_EVERY_S = 30.0


class ClientErrors:
    """The consumer's fatal error, once there is one. Errors arrive on the loop thread (inside poll)."""

    __slots__ = ("_config", "_last_warning", "_log", "_queue", "fatal", "membership")

    def __init__(self, config: Config, queue: str, logger: structlog.typing.FilteringBoundLogger) -> None:
        self._config = config
        self._queue = queue
        #: Set once the group membership exists (it is built after the client whose errors this takes).
        self.membership: GroupMembership | None = None
        self._log = logger
        self._last_warning = 0.0
        #: Why the consumer stopped working, or None.
        self.fatal: KmqError | None = None

    def on_record_error(self, record: Record) -> None:
        err: KafkaError = record.error()  # type: ignore[assignment]
        if _kafka.is_fatal(err):
            raise fatal_error(err, self._config, self._queue)
        cannot_join = self._cannot_join(err)
        if cannot_join is not None:
            raise cannot_join
        self._log.warning("consume_error", error=err.str(), code=err.name())

    def on_client_error(self, err: KafkaError) -> None:
        _kafka.Credentials.note(self._config.bootstrap_servers, self._config.kafka.get("sasl.username", ""), err)
        cannot_join = self._cannot_join(err)
        if _kafka.is_fatal(err) or cannot_join is not None:
            self.fatal = cannot_join or fatal_error(err, self._config, self._queue)
            self._log.error("consumer_fatal", error=str(self.fatal))
        elif time.monotonic() - self._last_warning > CLIENT_WARNING_EVERY_S:
            # Connection errors repeat many times a second while a broker is down: say it now and then.
            self._last_warning = time.monotonic()
            self._log.warning("kafka_client_error", error=err.str(), code=err.name())

    def _cannot_join(self, err: KafkaError) -> KafkaClientError | None:
        return None if self.membership is None else self.membership.cannot_join(err)


def fatal_error(err: KafkaError, config: Config, queue: str) -> KafkaClientError:
    if err.code() == KafkaError.FENCED_INSTANCE_ID or "fenced" in err.str().lower():
        return KafkaClientError(f"consumer of queue {queue!r} was fenced: client_id (group.instance.id) "
                                f"{config.client_id!r} is used by another consumer", code=err.code())
    return _kafka.client_error(err, f"fatal Kafka error in consumer of queue {queue!r}")
