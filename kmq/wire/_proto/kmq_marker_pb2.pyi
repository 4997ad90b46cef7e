from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MessageID(_message.Message):
    __slots__ = ("partition", "offset")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    partition: int
    offset: int
    def __init__(self, partition: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class Header(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: bytes
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...

class Marker(_message.Message):
    __slots__ = ("version", "type", "message_id", "redeliver_after_ms", "key", "value", "delivery_count", "first_message_id", "enqueued_at_ms", "client_id", "instance_id", "headers", "end_reason", "reason")
    class Version(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        V1: _ClassVar[Marker.Version]
    V1: Marker.Version
    class Type(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        START: _ClassVar[Marker.Type]
        END: _ClassVar[Marker.Type]
        KEEPALIVE: _ClassVar[Marker.Type]
    START: Marker.Type
    END: Marker.Type
    KEEPALIVE: Marker.Type
    class EndReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        ACKED: _ClassVar[Marker.EndReason]
        REJECTED: _ClassVar[Marker.EndReason]
        REDELIVERED: _ClassVar[Marker.EndReason]
        DEAD_LETTERED: _ClassVar[Marker.EndReason]
    ACKED: Marker.EndReason
    REJECTED: Marker.EndReason
    REDELIVERED: Marker.EndReason
    DEAD_LETTERED: Marker.EndReason
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    REDELIVER_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_COUNT_FIELD_NUMBER: _ClassVar[int]
    FIRST_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    ENQUEUED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    END_REASON_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    version: Marker.Version
    type: Marker.Type
    message_id: MessageID
    redeliver_after_ms: int
    key: bytes
    value: bytes
    delivery_count: int
    first_message_id: MessageID
    enqueued_at_ms: int
    client_id: str
    instance_id: str
    headers: _containers.RepeatedCompositeFieldContainer[Header]
    end_reason: Marker.EndReason
    reason: str
    def __init__(self, version: _Optional[_Union[Marker.Version, str]] = ..., type: _Optional[_Union[Marker.Type, str]] = ..., message_id: _Optional[_Union[MessageID, _Mapping]] = ..., redeliver_after_ms: _Optional[int] = ..., key: _Optional[bytes] = ..., value: _Optional[bytes] = ..., delivery_count: _Optional[int] = ..., first_message_id: _Optional[_Union[MessageID, _Mapping]] = ..., enqueued_at_ms: _Optional[int] = ..., client_id: _Optional[str] = ..., instance_id: _Optional[str] = ..., headers: _Optional[_Iterable[_Union[Header, _Mapping]]] = ..., end_reason: _Optional[_Union[Marker.EndReason, str]] = ..., reason: _Optional[str] = ...) -> None: ...

class StartEntry(_message.Message):
    __slots__ = ("partition", "offset", "value", "headers", "delivery_count", "first_message_id", "enqueued_at_ms")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_COUNT_FIELD_NUMBER: _ClassVar[int]
    FIRST_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    ENQUEUED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    partition: int
    offset: int
    value: bytes
    headers: _containers.RepeatedCompositeFieldContainer[Header]
    delivery_count: int
    first_message_id: MessageID
    enqueued_at_ms: int
    def __init__(self, partition: _Optional[int] = ..., offset: _Optional[int] = ..., value: _Optional[bytes] = ..., headers: _Optional[_Iterable[_Union[Header, _Mapping]]] = ..., delivery_count: _Optional[int] = ..., first_message_id: _Optional[_Union[MessageID, _Mapping]] = ..., enqueued_at_ms: _Optional[int] = ...) -> None: ...

class StartRefs(_message.Message):
    __slots__ = ("partitions", "run_lengths", "offset_deltas", "enqueued_deltas", "extra_indexes", "extra_delivery_counts", "extra_first_partitions", "extra_first_offsets")
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    RUN_LENGTHS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_DELTAS_FIELD_NUMBER: _ClassVar[int]
    ENQUEUED_DELTAS_FIELD_NUMBER: _ClassVar[int]
    EXTRA_INDEXES_FIELD_NUMBER: _ClassVar[int]
    EXTRA_DELIVERY_COUNTS_FIELD_NUMBER: _ClassVar[int]
    EXTRA_FIRST_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    EXTRA_FIRST_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedScalarFieldContainer[int]
    run_lengths: _containers.RepeatedScalarFieldContainer[int]
    offset_deltas: _containers.RepeatedScalarFieldContainer[int]
    enqueued_deltas: _containers.RepeatedScalarFieldContainer[int]
    extra_indexes: _containers.RepeatedScalarFieldContainer[int]
    extra_delivery_counts: _containers.RepeatedScalarFieldContainer[int]
    extra_first_partitions: _containers.RepeatedScalarFieldContainer[int]
    extra_first_offsets: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, partitions: _Optional[_Iterable[int]] = ..., run_lengths: _Optional[_Iterable[int]] = ..., offset_deltas: _Optional[_Iterable[int]] = ..., enqueued_deltas: _Optional[_Iterable[int]] = ..., extra_indexes: _Optional[_Iterable[int]] = ..., extra_delivery_counts: _Optional[_Iterable[int]] = ..., extra_first_partitions: _Optional[_Iterable[int]] = ..., extra_first_offsets: _Optional[_Iterable[int]] = ...) -> None: ...

class Settle(_message.Message):
    __slots__ = ("kind", "partition", "offset", "delay_ms", "reason")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        RELEASE: _ClassVar[Settle.Kind]
        REJECT: _ClassVar[Settle.Kind]
        REDELIVERED: _ClassVar[Settle.Kind]
        DEAD_LETTERED: _ClassVar[Settle.Kind]
        RETURNED: _ClassVar[Settle.Kind]
        DELAYED: _ClassVar[Settle.Kind]
    RELEASE: Settle.Kind
    REJECT: Settle.Kind
    REDELIVERED: Settle.Kind
    DEAD_LETTERED: Settle.Kind
    RETURNED: Settle.Kind
    DELAYED: Settle.Kind
    KIND_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    kind: Settle.Kind
    partition: int
    offset: int
    delay_ms: int
    reason: str
    def __init__(self, kind: _Optional[_Union[Settle.Kind, str]] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., delay_ms: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class MarkerBatch(_message.Message):
    __slots__ = ("key", "redeliver_after_ms", "client_id", "instance_id", "starts", "keep_alive_partitions", "keep_alive_offsets", "settles", "ack_partitions", "ack_offsets", "hello", "refs", "owner_tracked")
    KEY_FIELD_NUMBER: _ClassVar[int]
    REDELIVER_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    STARTS_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    SETTLES_FIELD_NUMBER: _ClassVar[int]
    ACK_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    ACK_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    HELLO_FIELD_NUMBER: _ClassVar[int]
    REFS_FIELD_NUMBER: _ClassVar[int]
    OWNER_TRACKED_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    redeliver_after_ms: int
    client_id: str
    instance_id: str
    starts: _containers.RepeatedCompositeFieldContainer[StartEntry]
    keep_alive_partitions: _containers.RepeatedScalarFieldContainer[int]
    keep_alive_offsets: _containers.RepeatedScalarFieldContainer[int]
    settles: _containers.RepeatedCompositeFieldContainer[Settle]
    ack_partitions: _containers.RepeatedScalarFieldContainer[int]
    ack_offsets: _containers.RepeatedScalarFieldContainer[int]
    hello: bool
    refs: StartRefs
    owner_tracked: bool
    def __init__(self, key: _Optional[bytes] = ..., redeliver_after_ms: _Optional[int] = ..., client_id: _Optional[str] = ..., instance_id: _Optional[str] = ..., starts: _Optional[_Iterable[_Union[StartEntry, _Mapping]]] = ..., keep_alive_partitions: _Optional[_Iterable[int]] = ..., keep_alive_offsets: _Optional[_Iterable[int]] = ..., settles: _Optional[_Iterable[_Union[Settle, _Mapping]]] = ..., ack_partitions: _Optional[_Iterable[int]] = ..., ack_offsets: _Optional[_Iterable[int]] = ..., hello: _Optional[bool] = ..., refs: _Optional[_Union[StartRefs, _Mapping]] = ..., owner_tracked: _Optional[bool] = ...) -> None: ...
