"""Sink: where a simulation writes what kmq's components would have written (Kafka topics, or memory)."""

from __future__ import annotations

from typing import Protocol

from kmq.wire import MessageId

Headers = list[tuple[str, bytes]]


class Sink(Protocol):
    def message(self, partition: int, key: bytes, value: bytes, headers: Headers, timestamp_ms: int) -> MessageId:
        """Writes a messages-topic record; returns its id (the offset it gets)."""

    def marker(self, partition: int, key: bytes, value: bytes, timestamp_ms: int) -> None: ...

    def dead_letter(self, key: bytes, value: bytes, headers: Headers, timestamp_ms: int) -> None: ...
