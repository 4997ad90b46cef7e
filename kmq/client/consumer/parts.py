"""ConsumerParts: a consumer's named parts, built and wired in the order data flows through them.

``build_parts`` makes the Kafka clients (through the ClientFactory seam) and every part that works on them; the
Consumer facade and its PollLoop then reach each part by name. Building starts nothing: the Consumer starts the
control follower, claims its identity, subscribes and starts the loop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from kmq import _kafka
from kmq._kafka.commit_policy import CommitPolicy
from kmq._kafka.factory import ClientFactory, ControlClient, GroupClient, ProducerClient
from kmq._kafka.group import GroupMembership
from kmq._kafka.offsets import CommitOutcome, committed_with_metadata
from kmq._kafka.replaceable import ReplaceableClient
from kmq.client.consumer.at_most_once import AtMostOnceMessages
from kmq.client.consumer.client_errors import ClientErrors
from kmq.client.consumer.committer import QueueCommitter
from kmq.client.consumer.deduplicator import Deduplicator, reader_read_back
from kmq.client.consumer.groups.dispatch import GroupDispatch, GroupRules
from kmq.client.consumer.groups.follower import MarkersFollower
from kmq.client.consumer.groups.owned_starts import OwnedStarts
from kmq.client.consumer.groups.takeover import Takeover
from kmq.client.consumer.hand_out import HandOut
from kmq.client.consumer.identity import ClientIdentity
from kmq.client.consumer.in_flight import InFlightMessages
from kmq.client.consumer.intake import Intake, Record
from kmq.client.consumer.marker_writer import MarkerWriter
from kmq.client.consumer.offset_book import OffsetBook
from kmq.client.consumer.ready_gate import ReadyGate
from kmq.client.consumer.rebalances import Rebalances
from kmq.client.consumer.record_messages import to_message, to_messages
from kmq.client.consumer.rejoin import QueueRejoin
from kmq.client.consumer.start_pipeline import StartPipeline
from kmq.client.message import Message
from kmq.config import MARKER_FORMAT_KMQ, Config
from kmq.topic_sets import TopicSet
from kmq.wire.control import ControlState

#: Commit the offsets no hand-out waits for at least this often.
IDLE_COMMIT_S = 5.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerParts:
    """Every part of one queue's consumer."""

    #: The markers producer (Starts, settles, dead letters) and the marker writer over it.
    producer: ProducerClient
    writer: MarkerWriter
    #: Messages from their Start until settled, and the settler of this queue's messages (at most once: no markers).
    in_flight: InFlightMessages
    settler: InFlightMessages | AtMostOnceMessages
    #: The ready buffer ``receive`` takes from, and its back-pressure.
    out: HandOut
    control: ControlClient
    identity: ClientIdentity | None
    errors: ClientErrors
    #: The Kafka group member, and what reads, Starts, commits and hands out through it.
    client: ReplaceableClient
    membership: GroupMembership
    #: A new group member when the coordinator keeps this one out of its group.
    rejoin: QueueRejoin
    intake: Intake
    book: OffsetBook
    committer: QueueCommitter
    pipeline: StartPipeline
    gate: ReadyGate
    #: Message groups (None: an at-most-once queue, or the kafka-mq-go marker format, where groups are plain).
    groups: GroupDispatch | None
    #: Set to stop the loop (and any wait for Starts on it).
    stop: threading.Event


def build_parts(config: Config, queue: str, clients: ClientFactory, topics: TopicSet, *, max_in_flight: int | None,
                on_control: Callable[[ControlState], None], closed: Callable[[], bool],
                logger: structlog.typing.FilteringBoundLogger) -> ConsumerParts:
    key = queue.encode()
    out = HandOut(config.receive_buffer_capacity, config.max_in_flight, config.start_pipeline_depth)
    if max_in_flight is not None:  # before the loop starts: its first Starts already keep to it
        out.limit = max_in_flight
    producer = clients.producer(
        _kafka.markers_producer_settings(config, f"kmq-markers-{queue}"), f"markers-{queue}", topics.markers)
    instance_id = _kafka.instance_id()
    writer = MarkerWriter(config, topics.markers, key, producer, instance_id=instance_id, client_id=config.client_id)
    in_flight = InFlightMessages(config, topics, queue, writer, producer, out.wake_loop)
    in_flight.on_settled_many = out.wake_loop
    settler: InFlightMessages | AtMostOnceMessages = (
        AtMostOnceMessages(config, topics, producer) if queue in config.at_most_once_queues else in_flight)
    control = clients.control(config, topics, on_control)
    #: A stable client_id is claimed before the group is joined: a live twin refuses this consumer.
    identity = (ClientIdentity(config.client_id, instance_id, producer, control, config.connect_timeout_ms / 1000 + 20)
                if config.client_id else None)
    errors = ClientErrors(config, queue, logger)
    settings = {**_kafka.consumer_settings(config, topics.consumer_group(queue), f"kmq-consumer-{queue}"),
                "error_cb": errors.on_client_error}
    client = ReplaceableClient(clients.group_consumer(settings))
    intake = Intake(client, key, errors.on_record_error, config.receive_buffer_capacity, config.max_read_ahead_records)
    book = OffsetBook(CommitPolicy(config.max_messages_per_commit, IDLE_COMMIT_S))
    committer = QueueCommitter(client, book, queue, left=intake.left)
    gate = ReadyGate(out=out, in_flight=in_flight, settler=settler, writer=writer,
                     purged_before=lambda: control.state.purged_before.get(queue),
                     dead_letter_expired=config.expired_messages == "dead-letter")
    keep_alive_s = config.keep_alive_interval_ms / 1000

    def make_message(record: Record) -> Message:
        return to_message(record, queue, settler, time.monotonic() + keep_alive_s)  # type: ignore[arg-type]

    def make_messages(records: list[Record]) -> list[Message]:
        return to_messages(records, queue, settler, time.monotonic() + keep_alive_s)  # type: ignore[arg-type]

    stop = threading.Event()
    #: Duplicate sends out before their Starts (docs/concepts/dedup.md); None with ``dedup_window_ms`` 0.
    dedup = Deduplicator(
        key, config.dedup_window_ms, config.dedup_clock_skew_ms, reader_read_back(clients, config, queue, stop),
        writer if settler is in_flight else None, park=config.eager_rebalance,
        queue=queue) if config.dedup_window_ms else None
    groups = None
    if config.marker_format == MARKER_FORMAT_KMQ and settler is in_flight:
        groups = _build_groups(config, topics, queue, clients, client, writer, in_flight, intake, book, committer, gate,
                               make_message, logger)
        committer.groups = groups.commits
    pipeline = StartPipeline(
        key=key, intake=intake, writer=writer, book=book, in_flight=in_flight, to_message=make_message,
        to_messages=make_messages,
        commit=committer.commit, hand_out=gate.put, start_timeout_s=config.connect_timeout_ms / 1000 + 20,
        stopping=stop, write_starts=settler is in_flight, dedup=dedup,
        divert=None if groups is None else groups.divert_many, depth=config.start_pipeline_depth)
    rebalances = Rebalances(topic=topics.messages, intake=intake, pipeline=pipeline, book=book,
                            committer=committer, groups=groups, dedup=dedup, keep_alives=in_flight.keep_alives,
                            closed=closed)
    membership = GroupMembership(
        topics.consumer_group(queue), config.assignment_strategy, eager=config.eager_rebalance,
        join_bound_s=config.connect_timeout_ms / 1000, on_assigned=rebalances.on_assigned,
        on_revoking=rebalances.on_revoking, on_dropped=rebalances.on_dropped, on_changed=rebalances.on_changed,
        logger=logger)
    errors.membership = membership
    rejoin = QueueRejoin(client=client, make_client=lambda: clients.group_consumer(settings), membership=membership,
                         topic=topics.messages, admin=lambda: clients.group_admin(config),
                         session_s=config.session_timeout_ms / 1000, monotonic=time.monotonic, logger=logger)
    return ConsumerParts(producer=producer, writer=writer, in_flight=in_flight, settler=settler, out=out,
                         control=control, identity=identity, errors=errors, client=client, membership=membership,
                         rejoin=rejoin, intake=intake, book=book, committer=committer, pipeline=pipeline, gate=gate,
                         groups=groups, stop=stop)


def _build_groups(config: Config, topics: TopicSet, queue: str, clients: ClientFactory, client: GroupClient,
                  writer: MarkerWriter, in_flight: InFlightMessages, intake: Intake, book: OffsetBook,
                  committer: QueueCommitter, gate: ReadyGate,
                  make_message: Callable[[Record], Message],
                  logger: structlog.typing.FilteringBoundLogger) -> GroupDispatch:
    """The message groups' parts, wired to the consumer's (see kmq.client.consumer.groups)."""
    topic, timeout_s = topics.messages, config.connect_timeout_ms / 1000

    def committed_of(partitions: list[int]) -> dict[int, tuple[int, str | None]]:
        return committed_with_metadata(client, topic, partitions, timeout_s)

    wake = threading.Event()
    takeover = Takeover(MarkersFollower(config, topics, queue, clients), committed_of,
                        writer.broker_time.now_ms, logger)
    groups = GroupDispatch(
        rules=GroupRules(config.group_concurrency_of(queue), config.max_deliveries, config.group_buffer_records),
        writer=writer, starts=OwnedStarts(writer, gate.put, add=in_flight.add, discard=in_flight.discard,
                                          wake=wake.set),
        takeover=takeover, book=_Book(committer, book, topic), make_message=make_message,
        dead_letter=in_flight.dead_letter, put_back=intake.put_back, last_marker=lambda: writer.channel.last_offset,
        logger=logger)
    groups.wake = wake
    in_flight.on_group_settle = groups.settled
    writer.settles.on_ended = groups.ended
    writer.channel.on_start_record = groups.commits.start_recorded
    return groups


class _Book:
    """The consumer's offsets as the groups act on them (kmq.client.consumer.groups.commits.Book)."""

    __slots__ = ("_book", "_committer", "_topic")

    def __init__(self, committer: QueueCommitter, book: OffsetBook, topic: str) -> None:
        self._committer = committer
        self._book = book
        self._topic = topic

    def commit(self, partition: int, since: int) -> bool:
        tp = (self._topic, partition)
        position = self._book.position(tp)
        return self._committer.commit({tp: since if position is None else position}) is CommitOutcome.COMMITTED

    def touch(self, partition: int) -> None:
        self._book.touch((self._topic, partition))

    def rewind(self, partition: int, offset: int) -> None:
        self._book.rewind({(self._topic, partition): offset})
