"""How long the topics keep records, and whether Starts may reference their records (kmq marker format).

A Start by reference names its record on the messages topic; a tracker reads the payload back from there when it
redelivers. So the messages topic must keep a record as long as a Start of it may be in flight or waiting out a
delay: no compaction (a queue's records share a key), no size-based deletion, and time-based retention at least as
long as the markers topic's (a Start outlives nothing its record does not) and than the longest hop (12 h).
``kmq topics check`` fails on a problem; other callers log it, and a consumer that finds one copies payloads into
its Starts instead (the tracker dead-letters a record it cannot read back, with its own reason).
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

from kmq._kafka.errors import to_kmq_error
from kmq.config import MARKER_FORMAT_KMQ, MAX_REDELIVERY_TIMEOUT_MS, START_REFERENCE, Config
from kmq.errors import KafkaClientError, TopicError
from kmq.topic_sets import TopicSet

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Retention:
    """What the topics' configs say; ``None``: kept for ever (``-1``)."""

    messages_ms: int | None
    markers_ms: int | None
    messages_bytes: int | None = None
    messages_cleanup: str = "delete"

    def problems(self) -> list[str]:
        """Why a record of the messages topic could be gone while a Start by reference still names it."""
        found = []
        if "compact" in self.messages_cleanup:
            found.append(f"the messages topic has cleanup.policy={self.messages_cleanup}: compaction keeps one record "
                         "per key, and a queue's records share a key")
        if self.messages_bytes is not None:
            found.append(f"the messages topic has retention.bytes={self.messages_bytes}: it deletes records by size, "
                         "whatever their age")
        if self.messages_ms is not None:
            if self.markers_ms is None or self.messages_ms < self.markers_ms:
                found.append(f"the messages topic keeps records {_span(self.messages_ms)}, less than the markers "
                             f"topic ({_span(self.markers_ms)}): a Start could outlive its record")
            if self.messages_ms < MAX_REDELIVERY_TIMEOUT_MS:
                found.append(f"the messages topic keeps records {_span(self.messages_ms)}, less than the longest "
                             f"redelivery timeout or delay hop ({_span(MAX_REDELIVERY_TIMEOUT_MS)})")
        return found


def _span(ms: int | None) -> str:
    if ms is None:
        return "for ever"
    return f"{ms / 3_600_000:g} h" if ms >= 3_600_000 else f"{ms} ms"


def _ms(value: str | None) -> int | None:
    number = int(value) if value not in (None, "") else -1
    return None if number < 0 else number


def describe_retention(admin: AdminClient, config: Config, topics: TopicSet, timeout_s: float) -> Retention:
    """The messages and markers topics' retention settings; a KafkaClientError when the broker cannot say."""
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in (topics.messages, topics.markers)]
    try:
        futures = admin.describe_configs(resources, request_timeout=timeout_s)
        messages, markers = (futures[r].result(timeout=timeout_s) for r in resources)
    except KafkaException as exc:
        raise to_kmq_error(exc, "cannot read the topics' retention") from exc
    except TimeoutError:
        raise KafkaClientError(f"cannot read the topics' retention from {config.bootstrap_servers} within "
                               f"{timeout_s:.0f}s", retriable=True) from None

    def value(entries: dict[str, object], name: str) -> str | None:
        entry = entries.get(name)
        return None if entry is None else str(entry.value)  # type: ignore[attr-defined]

    return Retention(messages_ms=_ms(value(messages, "retention.ms")), markers_ms=_ms(value(markers, "retention.ms")),
                     messages_bytes=_ms(value(messages, "retention.bytes")),
                     messages_cleanup=value(messages, "cleanup.policy") or "delete")


def check_retention(admin: AdminClient, config: Config, topics: TopicSet, timeout_s: float, *,
                    strict: bool = False) -> Retention | None:
    """For a deployment that writes Starts by reference: logs each retention problem, or raises a TopicError naming
    them with ``strict`` (``kmq topics check``). None when the deployment copies payloads into its Starts."""
    if config.marker_format != MARKER_FORMAT_KMQ or config.start_markers != START_REFERENCE:
        return None
    retention = describe_retention(admin, config, topics, timeout_s)
    problems = retention.problems()
    if problems and strict:
        raise TopicError(f"Starts by reference (start_markers: reference) need {topics.messages!r} to keep "
                         f"its records: {'; '.join(problems)}. Fix the topic's config, or set start_markers: copy")
    for problem in problems:
        log.warning("start_references_unsafe", problem=problem,
                    note="consumers copy payloads into their Starts until the topic's config is fixed")
    return retention
