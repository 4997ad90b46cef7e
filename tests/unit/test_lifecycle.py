"""LifecycleFold (what `kmq stats` shows): releases, returns, recoveries and acks each counted as what they are."""

from __future__ import annotations

from kmq.ops.lifecycle import LifecycleFold
from kmq.wire import RELEASE_REASON, RETURN_REASON, MessageId
from kmq.wire.markers import EndReason, Marker, MarkerType

A, B, C, D = (MessageId(0, i) for i in range(4))


def _start(mid: MessageId, first: MessageId | None = None, count: int = 1, value: bytes = b"p") -> Marker:
    return Marker(MarkerType.START, mid, 1000, b"q", value, delivery_count=count, first_message_id=first)


def _ack(mid: MessageId) -> Marker:
    return Marker(MarkerType.END, mid, instance_id="host:1")


def test_a_returned_message_is_not_a_release_nor_a_recovery_and_its_copy_is_not_a_redelivery() -> None:
    fold = LifecycleFold()
    for marker in (_start(A), _start(B),
                   Marker(MarkerType.KEEPALIVE, A, 0, reason=RETURN_REASON),
                   Marker(MarkerType.KEEPALIVE, B, 0, reason=RELEASE_REASON),
                   Marker(MarkerType.END, A, end_reason=EndReason.REDELIVERED),
                   Marker(MarkerType.END, B, end_reason=EndReason.REDELIVERED),
                   _start(C, first=A, count=1), _start(D, first=B, count=2),
                   _ack(C), _ack(D)):
        fold.add(marker, 0)
    q = fold.summary()["q"]
    assert (q.returned, q.released, q.recovered, q.redelivered, q.acked, q.in_flight) == (1, 1, 0, 1, 2, 0)
    assert q.acked_first_ids == {A, B}


def test_a_go_trackers_bare_end_and_copy_count_as_a_redelivery_in_either_order_and_never_as_an_ack() -> None:
    # A kafka-mq-go tracker produces the copy, then writes a bare End; the copy's Start may come before or after.
    fold = LifecycleFold()
    e, f = MessageId(0, 4), MessageId(0, 5)
    for marker in (_start(A, value=b"a"), _start(B, value=b"b"),
                   Marker(MarkerType.END, A),                        # bare End first …
                   _start(C, value=b"a"),                            # … then the copy of A
                   _start(D, value=b"b"),                            # the copy of B first …
                   Marker(MarkerType.KEEPALIVE, B, 0, reason=RELEASE_REASON),
                   Marker(MarkerType.END, B),                        # … then the bare End
                   _ack(C), _ack(D),
                   Marker(MarkerType.START, e, 1000, b"q", b"other"),
                   Marker(MarkerType.END, e),                        # a Go consumer's ack: no copy follows
                   Marker(MarkerType.START, f, 1000, b"q", b"p2")):
        fold.add(marker, 0)
    q = fold.summary()["q"]
    assert (q.deliveries, q.acked, q.redelivered, q.go_redelivered, q.recovered, q.released, q.go_ends) == (
        6, 2, 2, 2, 1, 1, 1)
    assert q.acked_first_ids == {A, B}
