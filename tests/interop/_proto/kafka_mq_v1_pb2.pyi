from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MessageID(_message.Message):
    __slots__ = ("partition", "offset")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    partition: int
    offset: int
    def __init__(self, partition: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class Marker(_message.Message):
    __slots__ = ("version", "type", "message_id", "redeliver_after_ms", "key", "value")
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
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    REDELIVER_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    version: Marker.Version
    type: Marker.Type
    message_id: MessageID
    redeliver_after_ms: int
    key: bytes
    value: bytes
    def __init__(self, version: _Optional[_Union[Marker.Version, str]] = ..., type: _Optional[_Union[Marker.Type, str]] = ..., message_id: _Optional[_Union[MessageID, _Mapping]] = ..., redeliver_after_ms: _Optional[int] = ..., key: _Optional[bytes] = ..., value: _Optional[bytes] = ...) -> None: ...
