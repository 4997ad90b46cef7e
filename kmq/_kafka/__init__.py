"""The confluent-kafka edge: every Kafka client kmq's rooms use is built, configured and read through here.

- ``settings``: the librdkafka settings kmq relies on; ``errors``: which errors are fatal, transient, or mean the
  partitions are gone; ``records``: record ids, headers and timestamps as kmq values;
- ``producer``: PolledProducer (delivery reports served by a thread, futures per record); ``offsets``: commits and
  watermarks; ``metadata``: a topic's partitions; ``group``: assignment per rebalance protocol, join watch;
- ``commit_policy``: when a reader commits; ``topic_replay``: a topic read to its end offsets; ``topics``: create and
  check kmq's topics; ``retention``: whether Starts may reference their records; ``control``: the pause/purge
  topic, followed and written.

Only this package (and the rooms' Kafka-facing facades) import confluent_kafka; nothing here imports a room.
"""

from kmq._kafka.errors import LEADERSHIP_MOVING, OWNERSHIP_LOST, Credentials, client_error, is_fatal, to_kmq_error
from kmq._kafka.group import GroupJoinWatch, assign, unassign
from kmq._kafka.metadata import topic_partitions
from kmq._kafka.offsets import COMMIT_ATTEMPTS, CommitOutcome, commit, watermarks
from kmq._kafka.producer import MarkerProducer, PolledProducer
from kmq._kafka.records import first_id, header_dict, message_id, record_timestamp_ms
from kmq._kafka.settings import (
    base_settings,
    consumer_settings,
    instance_id,
    markers_producer_settings,
    messages_producer_settings,
    reader_settings,
)

__all__ = [
    "COMMIT_ATTEMPTS", "LEADERSHIP_MOVING", "OWNERSHIP_LOST", "CommitOutcome", "Credentials", "GroupJoinWatch",
    "MarkerProducer", "PolledProducer", "assign", "base_settings", "client_error", "commit", "consumer_settings",
    "first_id",
    "header_dict", "instance_id", "is_fatal", "markers_producer_settings", "message_id", "messages_producer_settings",
    "reader_settings", "record_timestamp_ms", "to_kmq_error", "topic_partitions", "unassign", "watermarks",
]
