"""PollLoop: a consumer's background thread, which owns the Kafka consumer and never blocks on workers.

Each round, top to bottom: held messages that came due go to the ready buffer; with room to Start more, the intake
fetches and the Start pipeline Starts the next records; batches whose Starts are durable are committed and handed
out; the offsets no hand-out waits for are committed now and then; a consumer its coordinator keeps out of its
group joins again with a new group consumer (QueueRejoin). Rebalances run inside the fetch (GroupMembership
calls the consumer's ``Rebalances``). A fatal Kafka error stops the loop and wakes every receiver.
"""

from __future__ import annotations

import threading
import time

import structlog
from confluent_kafka import KafkaError, KafkaException

from kmq import _kafka, wire
from kmq.client.consumer.parts import ConsumerParts
from kmq.config import Config
from kmq.errors import KmqError


class PollLoop:
    """The loop thread and what it needs each round."""

    def __init__(self, config: Config, queue: str, parts: ConsumerParts,
                 logger: structlog.typing.FilteringBoundLogger) -> None:
        self._queue = queue
        self._wait_s = config.next_message_timeout_ms / 1000
        self._p = parts
        self._log = logger
        #: False once the consumer stops taking new messages (a draining worker).
        self.taking = True
        self._thread = threading.Thread(target=self._run, name=f"kmq-consumer-{queue}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout_s: float) -> None:
        """Stops the loop and waits up to ``timeout_s`` (a commit to an unreachable broker may block it)."""
        self._p.stop.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        errors, stop = self._p.errors, self._p.stop
        while not stop.is_set() and errors.fatal is None:
            try:
                self._poll_once()
            except KmqError as err:
                self._log.error("consumer_fatal", error=str(err))
                errors.fatal = err
            except KafkaException as exc:
                wrapped = _kafka.to_kmq_error(exc, f"consumer of queue {self._queue!r}")
                if exc.args and isinstance(exc.args[0], KafkaError) and exc.args[0].fatal():
                    errors.fatal = wrapped
                self._log.warning("consumer_poll_error", error=str(wrapped))
                time.sleep(0.2)
        if errors.fatal is not None:
            self._p.out.wake_all()

    def _poll_once(self) -> None:
        p = self._p
        pipeline, intake, groups = p.pipeline, p.intake, p.groups
        p.gate.put_due()
        if groups is not None:
            groups.advance()
        room = 0 if self.paused() or not self.taking else self.usable_room()
        intake.update_pause()
        busy = len(intake) or len(pipeline)
        wait_s = 0.0 if busy else self._wait_s
        next_due_s = p.gate.next_due_in_s()
        if next_due_s is not None:
            wait_s = min(wait_s, next_due_s)
        if groups is not None:
            wait_s = groups.wait_s(wait_s)
        if room <= 0 and not pipeline and not (groups is not None and groups.waiting):
            # (Grouped messages whose Starts are on their way hold room too: only this loop hands them out.)
            p.out.wait_for_room(self.usable_room, self.room)
            wait_s = 0.0
        keep_alives = p.in_flight.keep_alives
        keep_alives.fetch_began()
        if groups is not None and wait_s > 0 and groups.moving:
            # Grouped messages in motion: their settles and durable Ends wake this loop, librdkafka's poll cannot.
            if not intake.fetch(0):  # may run rebalance callbacks
                groups.wake.wait(wait_s)
            groups.wake.clear()
        else:
            intake.fetch(wait_s)  # may run rebalance callbacks
        keep_alives.fetched()
        started = False
        if room > 0 and not self.paused():
            if groups is not None:
                room -= groups.hand_out(self._group_share(room))
            if room > 0 and len(intake) and not pipeline.full() and not (groups is not None and groups.full):
                pipeline.start(intake.take(min(room, p.out.capacity)))  # a batch: the rest is the next one's
                started = True
        pipeline.advance(block=not started or pipeline.full())
        if p.book and not pipeline and p.book.policy.due():
            p.committer.commit_pending()
        p.rejoin.check()

    def _group_share(self, room: int) -> int:
        """Fair dispatch: the room grouped messages may take this round. Plain messages waiting in the backlog are
        one more participant of the round, with a share like a group's."""
        groups = self._p.groups
        assert groups is not None
        if not len(self._p.intake):
            return room
        return room - max(1, room // (groups.ready + 1))

    def paused(self) -> bool:
        """Paused (kmq pause): take no new messages; those in flight finish. Asked again after each fetch, since a
        pause may arrive while the fetch waits."""
        state = self._p.control.state
        return bool(state.paused_until) and state.paused(self._queue, wire.now_ms())

    def room(self) -> int:
        return self._p.out.room(self._starting(), len(self._p.in_flight))

    def usable_room(self) -> int:
        return self._p.out.usable_room(self._starting(), len(self._p.in_flight))

    def _starting(self) -> int:
        """Messages Started and not yet in the ready buffer."""
        groups = self._p.groups
        return self._p.pipeline.waiting + (0 if groups is None else groups.waiting)
