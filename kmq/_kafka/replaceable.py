"""ReplaceableClient: a group member's client that its owner can swap for a new one, while every part holding it goes
on calling the same object.

A queue consumer's parts (the intake, the committer, the message groups, the membership) each hold its group
client; when a member its coordinator keeps out of its group joins again with a new consumer (RejoinWatch), they all
follow at once. The calls are forwarded one by one, with no lookup by name: ``poll`` and ``consume`` run for every
fetch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kmq._kafka.factory import GroupClient


class ReplaceableClient:
    """A GroupClient that forwards every call to ``current``; ``replace`` swaps it. Owner's loop thread only."""

    def __init__(self, current: GroupClient) -> None:
        self.current = current

    def replace(self, new: GroupClient) -> GroupClient:
        """From now on calls go to ``new``; returns the client they went to (the caller closes it)."""
        old, self.current = self.current, new
        return old

    def subscribe(self, topics: list[str], on_assign: Callable[..., None] | None = None,
                  on_revoke: Callable[..., None] | None = None, on_lost: Callable[..., None] | None = None) -> None:
        callbacks = {"on_assign": on_assign, "on_revoke": on_revoke, "on_lost": on_lost}
        self.current.subscribe(topics, **{name: f for name, f in callbacks.items() if f is not None})

    def poll(self, timeout: float = -1) -> Any:
        return self.current.poll(timeout)

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]:
        return self.current.consume(num_messages, timeout)

    def assign(self, partitions: list[Any]) -> None:
        self.current.assign(partitions)

    def incremental_assign(self, partitions: list[Any]) -> None:
        self.current.incremental_assign(partitions)

    def unassign(self) -> None:
        self.current.unassign()

    def seek(self, partition: Any) -> None:
        self.current.seek(partition)

    def incremental_unassign(self, partitions: list[Any]) -> None:
        self.current.incremental_unassign(partitions)

    def assignment(self) -> list[Any]:
        return self.current.assignment()

    def pause(self, partitions: list[Any]) -> None:
        self.current.pause(partitions)

    def resume(self, partitions: list[Any]) -> None:
        self.current.resume(partitions)

    def commit(self, message: Any = None, offsets: Any = None, asynchronous: bool = True) -> Any:
        if message is not None:
            return self.current.commit(message=message, asynchronous=asynchronous)
        if offsets is not None:
            return self.current.commit(offsets=offsets, asynchronous=asynchronous)
        return self.current.commit(asynchronous=asynchronous)

    def committed(self, partitions: list[Any], timeout: float = -1) -> list[Any]:
        return self.current.committed(partitions, timeout=timeout)

    def get_watermark_offsets(self, partition: Any, timeout: float = -1, cached: bool = False) -> Any:
        return self.current.get_watermark_offsets(partition, timeout=timeout, cached=cached)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        return self.current.list_topics(topic, timeout=timeout)

    def memberid(self) -> str | None:
        return self.current.memberid()

    def offsets_for_times(self, partitions: list[Any], timeout: float = -1) -> list[Any]:
        return self.current.offsets_for_times(partitions, timeout=timeout)

    def close(self) -> None:
        self.current.close()
