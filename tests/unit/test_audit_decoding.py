"""The audit's marker decoding (kmq.ops.audit.decoding) reads every record as `kmq stats` does: the same markers,
events, ids and deadlines, and exactly the same records rejected as malformed."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kmq.errors import MarkerDecodeError
from kmq.ops.audit.decoding import MALFORMED, decode_values, marker_row, mid_long
from kmq.ops.lifecycle import SEQ_SHIFT
from kmq.wire import MessageId
from kmq.wire.marker_batch import decode_record, encode_settles, encode_starts
from kmq.wire.markers import EndReason, Marker, MarkerType, decode, encode
from kmq.wire.vocabulary import marker_event

ids = st.builds(MessageId, st.integers(0, 2**20), st.integers(0, 2**40 - 1))
text = st.sampled_from(["", "released", "returned", "delayed", "expired", "purged", "bad", "failed 2 time(s), x",
                        "max deliveries (3) reached", "deduplicated: duplicate of 2:17"])
markers = st.builds(
    Marker, type=st.sampled_from(MarkerType), message_id=ids, redeliver_after_ms=st.integers(0, 2**40),
    key=st.binary(max_size=8), value=st.binary(max_size=8), delivery_count=st.integers(0, 9),
    first_message_id=st.none() | ids, client_id=st.sampled_from(["", "kmq-redelivery-tracker", "w-1"]),
    instance_id=st.sampled_from(["", "host:1"]), end_reason=st.sampled_from(EndReason), reason=text)


def _expected(value: bytes, ts: int, offset: int) -> list[tuple[object, ...]]:
    """What `kmq stats` reads from the record, as the audit's rows."""
    try:
        decoded = decode_record(value)
    except MarkerDecodeError:
        return [(None, MALFORMED, 0, None, ts, 0, offset << SEQ_SHIFT, 0)]
    rows = []
    for i, m in enumerate(decoded):
        start = m.type is MarkerType.START
        rows.append((m.queue, int(marker_event(m)), mid_long(*m.message_id),
                     mid_long(*m.first_id) if start else None, ts, ts + m.redeliver_after_ms,
                     (offset << SEQ_SHIFT) + i, (m.delivery_count or 1) if start else 1))
    return rows


def _rows(value: bytes | None, ts: int = 1000, offset: int = 7) -> list[tuple[object, ...]]:
    columns = decode_values([value], [ts], [offset])
    return sorted(zip(*[list(c) for c in columns], strict=True), key=lambda r: r[6])


@given(markers)
def test_a_kafka_mq_go_format_marker_reads_as_the_codec_and_the_vocabulary_read_it(marker: Marker) -> None:
    value = encode(marker)
    expected = _expected(value, 1000, 7)
    if marker.type is not MarkerType.START:  # queue and count of a non-Start marker are not used
        expected = [(r[0], r[1], r[2], None, r[4], r[5], r[6], 1) for r in expected]
    assert _rows(value) == expected


@given(st.binary(max_size=40) | markers.map(encode).flatmap(
    lambda v: st.integers(0, max(0, len(v) - 1)).map(lambda i: v[:i] + bytes([v[i] ^ 0x5A]) + v[i + 1:]
                                                   if v else v)))
def test_exactly_the_records_the_codec_rejects_are_malformed(value: bytes) -> None:
    try:
        decode(value) if not (value and value[0] == 0) else decode_record(value)
        rejected = False
    except MarkerDecodeError:
        rejected = True
    assert (_rows(value)[0][1] == MALFORMED) is rejected
    if value and value[0] != 0:
        try:
            marker_row(value, 0, 0)
            assert not rejected
        except Exception:  # noqa: BLE001 - whatever the protobuf parser raises
            assert rejected


class _Start:
    def __init__(self, mid: MessageId, first: MessageId, count: int) -> None:
        self.message_id, self.payload, self.record_headers = mid, b"p", {}
        self.delivery_count, self.first_message_id, self.enqueued_at_ms = count, first, 5


@given(st.lists(ids, max_size=5), st.lists(ids, max_size=30), st.lists(ids, max_size=30),
       st.lists(markers.filter(lambda m: m.type is not MarkerType.START and (
           (m.type is MarkerType.KEEPALIVE and m.reason in ("released", "returned", "delayed"))
           or (m.type is MarkerType.END and m.end_reason is not EndReason.ACKED))), max_size=5),
       st.sampled_from(["", "host:1"]), st.sampled_from(["", "w", "kmq-redelivery-tracker"]))
def test_a_kmq_batch_reads_entry_by_entry_as_the_codec_reads_it(
    starts: list[MessageId], keep_alives: list[MessageId], acks: list[MessageId], others: list[Marker],
    instance: str, client: str,
) -> None:
    for value in (encode_starts(b"q", 30_000, [_Start(m, m if i % 2 else MessageId(0, 1), i % 4)
                                               for i, m in enumerate(starts)], client_id=client, instance_id=instance),
                  encode_settles(b"q", 30_000, keep_alives=keep_alives, acks=acks, others=others, client_id=client,
                                 instance_id=instance)):
        expected = _expected(value, 1000, 7)
        assert [r[1:] for r in _rows(value)] == [r[1:] for r in expected]
        assert {r[0] for r in _rows(value)} <= {"q"}
