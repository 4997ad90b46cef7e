"""The dead letters the console has read, and which of them still wait. Pure: no Kafka.

A letter *waits* while its message is dead-lettered (kmq.ops.lifecycle's state) and it is the message's newest
letter, and it is not behind its queue's redrive offset (``kmq dlq redrive`` commits past what it put back, in the
queue's redrive group of the set: ``kmq-dlq-redrive-<queue>`` in the default set). A redriven letter stays on the
topic (Kafka keeps records): its message's copy waits, or was handled since, so the message is no longer
dead-lettered. One Letters holds one topic set's (a dead letter's id is a position in its set's dead-letter topic).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from kmq.ops.lifecycle import Key
from kmq.wire import MessageId
from kmq.wire import vocabulary as v

WAITING, REDRIVEN, ANY = "waiting", "redriven", "any"


@dataclass(frozen=True, slots=True)
class Letter:
    dlq_id: MessageId
    queue: str
    first_id: MessageId | None
    reason: str
    at_ms: int

    @property
    def key(self) -> Key | None:
        return None if self.first_id is None else (self.queue, self.first_id)


@dataclass(frozen=True, slots=True)
class LetterFilter:
    """What the dead-letters page and a redrive by filter select; empty fields select everything."""

    queue: str = ""
    #: A substring of the reason (case-insensitive).
    reason: str = ""
    from_ms: int | None = None
    to_ms: int | None = None
    status: str = WAITING
    #: A dead-letter id or a first message id (``partition:offset``).
    message_id: MessageId | None = None

    def matches(self, letter: Letter) -> bool:
        return ((not self.queue or letter.queue == self.queue)
                and (not self.reason or self.reason.lower() in letter.reason.lower())
                and (self.from_ms is None or letter.at_ms >= self.from_ms)
                and (self.to_ms is None or letter.at_ms < self.to_ms)
                and (self.message_id is None or self.message_id in (letter.dlq_id, letter.first_id)))


class Letters:
    def __init__(self) -> None:
        self._all: list[Letter] = []
        self._by_id: dict[MessageId, Letter] = {}
        self._of_message: dict[Key, list[Letter]] = {}
        self._reasons: dict[str, int] = {}
        #: queue -> dead-letter partition -> the redrive group's committed offset.
        self._redriven_up_to: dict[str, dict[int, int]] = {}

    def add(self, letter: Letter) -> None:
        self._all.append(letter)
        self._by_id[letter.dlq_id] = letter
        self._reasons[letter.reason] = self._reasons.get(letter.reason, 0) + 1
        if letter.key is not None:
            self._of_message.setdefault(letter.key, []).append(letter)

    def set_redriven_up_to(self, queue: str, offsets: dict[int, int]) -> None:
        self._redriven_up_to[queue] = offsets

    def redriven_up_to(self, queue: str) -> dict[int, int]:
        return dict(self._redriven_up_to.get(queue, {}))

    def queues(self) -> list[str]:
        return sorted({letter.queue for letter in self._all})

    def get(self, dlq_id: MessageId) -> Letter | None:
        return self._by_id.get(dlq_id)

    def of_message(self, key: Key) -> list[Letter]:
        return list(self._of_message.get(key, ()))

    def waits(self, letter: Letter, state_of: Callable[[Key], str | None]) -> bool:
        if letter.dlq_id.offset < self._redriven_up_to.get(letter.queue, {}).get(letter.dlq_id.partition, 0):
            return False
        if letter.key is None:
            return True
        return self._of_message[letter.key][-1] is letter and state_of(letter.key) == v.DEAD_LETTERED

    def select(self, wanted: LetterFilter, state_of: Callable[[Key], str | None]) -> Iterator[tuple[Letter, bool]]:
        """The letters the filter selects but for their status, newest first, each with whether it waits."""
        for letter in reversed(self._all):
            if wanted.matches(letter):
                yield letter, self.waits(letter, state_of)

    def reasons(self, limit: int | None = 20) -> list[tuple[str, int]]:
        """The most common reasons of the letters read, with how many (``limit``: at most so many; None: all)."""
        return sorted(self._reasons.items(), key=lambda item: (-item[1], item[0]))[:limit]
