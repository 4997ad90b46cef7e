"""MessageMembers: what each message of a live classification is made of — its records on the messages topic, its
Started deliveries and its dead letters — with the way back from a record or delivery id to its message. Pure: no
Kafka."""

from __future__ import annotations

from dataclasses import dataclass, field

from kmq.ops.lifecycle import DeadLetter, Key, Record
from kmq.wire import MessageId


@dataclass(slots=True)
class Members:
    """One message's records on the messages topic and its Started deliveries."""

    records: set[MessageId] = field(default_factory=set)
    deliveries: set[MessageId] = field(default_factory=set)


class MessageMembers:
    """Every message's records, deliveries and dead letters, by message and by queue."""

    def __init__(self) -> None:
        self._records: dict[MessageId, Record] = {}
        self._letters: dict[Key, list[DeadLetter]] = {}
        self._members: dict[Key, Members] = {}
        self._delivery_key: dict[MessageId, Key] = {}
        self._by_queue: dict[str, set[Key]] = {}

    def __contains__(self, key: Key) -> bool:
        return key in self._members

    def get(self, key: Key) -> Members | None:
        return self._members.get(key)

    def member(self, key: Key) -> Members:
        """The message's members, made (empty) when it is new."""
        found = self._members.get(key)
        if found is None:
            found = self._members[key] = Members()
            self._by_queue.setdefault(key[0], set()).add(key)
        return found

    def add_record(self, key: Key, record: Record) -> None:
        self._records[record.message_id] = record
        self.member(key).records.add(record.message_id)

    def add_letter(self, key: Key, letter: DeadLetter) -> None:
        self._letters.setdefault(key, []).append(letter)
        self.member(key)

    def place_delivery(self, mid: MessageId, key: Key) -> Key | None:
        """Delivery ``mid`` belongs to ``key``; returns the message it belonged to before when that was another."""
        was = self._delivery_key.get(mid)
        moved = was if was is not None and was != key else None
        if moved is not None:
            self._members[moved].deliveries.discard(mid)
        self._delivery_key[mid] = key
        self.member(key).deliveries.add(mid)
        return moved

    def record(self, mid: MessageId) -> Record | None:
        return self._records.get(mid)

    def records_of(self, key: Key) -> list[Record]:
        members = self._members.get(key)
        return [self._records[rid] for rid in members.records] if members else []

    def letters(self, key: Key) -> list[DeadLetter]:
        return self._letters.get(key, [])

    def delivery_key(self, mid: MessageId) -> Key | None:
        return self._delivery_key.get(mid)

    def of_queue(self, queue: str) -> set[Key]:
        return self._by_queue.get(queue, set())

    def forget(self, key: Key) -> set[MessageId]:
        """Drops the message's members; returns its deliveries' ids (for the caller's fold to drop too)."""
        members = self._members.pop(key, None)
        self.of_queue(key[0]).discard(key)
        self._letters.pop(key, None)
        if members is None:
            return set()
        for rid in members.records:
            self._records.pop(rid, None)
        for mid in members.deliveries:
            self._delivery_key.pop(mid, None)
        return members.deliveries
