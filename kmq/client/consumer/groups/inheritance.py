"""Inheritance: what a new owner of a messages-topic partition learns from the queue's markers about the records an
earlier owner read (docs/concepts/groups.md, "A new owner").

A new owner replays the queue's markers partition from the commit's ``m=`` to its end, then follows it while any
message is held elsewhere. Each marker record of the queue, by another instance than this one, is applied to the
ledger of every partition it names, for records at or after that partition's committed offset:

- an owner-tracked Start: the record is HELD by that instance, lease = the record's broker time + its
  ``redeliver_after_ms``; a KeepAlive of the holder moves the lease; a release makes it WAITING (due after the delay,
  one more delivery counted), a give-back WAITING now (count unchanged); an End (ack, reject, expiry, purge) by the
  holder finishes it, one by another instance (a superseded delivery's settle) is late and ignored;
- a plain Start: the record is FINISHED here (a tracker answers for it), skipped when read;
- an End of a record no Start is known of (a record finished without a Start): FINISHED;
- a hello of a client_id: what other instances of it hold is WAITING now, counted (fast takeover).

Records already read here are only touched through their entries (a record read and handed to the Start pipeline is
not this owner's concern). Pure: no Kafka; markers arrive decoded.
"""

from __future__ import annotations

from collections.abc import Iterable

from kmq.client.consumer.groups.ledger import Entry, GroupQueue, PartitionLedger, State
from kmq.wire import DELAY_REASON, RETURN_REASON, MessageId
from kmq.wire.marker_batch import DecodedBatch
from kmq.wire.markers import EndReason, MarkerType

#: What applying one marker record to a ledger gives: the group queues whose next message may now go out.
Offers = list[GroupQueue]


def apply_batch(ledger: PartitionLedger, since: int, read_to: int, appended_ms: int, markers_offset: int,
                batch: DecodedBatch) -> Offers:
    """Applies one marker record of the queue (by another instance) to ``ledger``: the committed offset at its
    assignment was ``since``; records before ``read_to`` were read here."""
    offers: Offers = []
    if batch.hello:
        for entry in list(ledger.held.values()):
            if entry.holder_client == batch.client_id and entry.holder != batch.instance_id:
                _offer(offers, ledger.back(entry, due_ms=appended_ms, counted=True))
        return offers
    partition = ledger.partition
    started = [(mid, count) for mid, count in _starts(batch) if mid.partition == partition and mid.offset >= since]
    if started:
        ledger.floor.note(max(mid.offset for mid, _ in started), markers_offset)
    for mid, count in started:
        _start(ledger, read_to, mid.offset, count, batch, appended_ms + batch.redeliver_after_ms)
    if not batch.owner_tracked:
        _plain_ends(ledger, since, read_to, batch)
        return offers
    lease_ms = appended_ms + batch.redeliver_after_ms
    for mid in batch.keep_alives():
        kept = _held_by(ledger, mid, since, batch.instance_id)
        if kept is not None:
            kept.lease_ms = max(kept.lease_ms, lease_ms)
    for marker in batch.settles():
        mid = marker.message_id
        if mid.partition != partition or mid.offset < since:
            continue
        if marker.type is MarkerType.KEEPALIVE:
            held = _held_by(ledger, mid, since, batch.instance_id)
            if held is not None and marker.reason != DELAY_REASON:
                back = marker.reason != RETURN_REASON
                _offer(offers, ledger.back(held, due_ms=appended_ms + (marker.redeliver_after_ms if back else 0),
                                           counted=back))
        else:
            _offer(offers, _end(ledger, read_to, mid.offset, batch.instance_id))
    for mid in batch.acks():
        if mid.partition == partition and mid.offset >= since:
            _offer(offers, _end(ledger, read_to, mid.offset, batch.instance_id))
    return offers


def lapse(ledger: PartitionLedger, broker_now_ms: int, wall_now_ms: int) -> Offers:
    """HELD entries whose lease lapsed on broker time: WAITING now, one more delivery counted (the holder's
    handler may have run)."""
    offers: Offers = []
    for entry in [e for e in ledger.held.values() if e.lease_ms <= broker_now_ms]:
        _offer(offers, ledger.back(entry, due_ms=wall_now_ms, counted=True))
    return offers


def _starts(batch: DecodedBatch) -> Iterable[tuple[MessageId, int]]:
    for mid, _value, _headers, count, _first, _enqueued in batch.starts():
        yield mid, count
    refs = batch.refs
    for index, mid in enumerate(refs.message_ids()):
        yield mid, refs.delivery(index, mid)[0]


def _start(ledger: PartitionLedger, read_to: int, offset: int, count: int, batch: DecodedBatch,
           lease_ms: int) -> None:
    entry = ledger.entries.get(offset)
    if not batch.owner_tracked:  # a plain Start: a tracker answers for it; skip it when read
        if entry is None and offset >= read_to:
            ledger.entries[offset] = Entry(offset, State.FINISHED)
        return
    if entry is None:
        if offset < read_to:
            return  # read here as a plain message: not this owner's concern
        entry = ledger.entries[offset] = Entry(offset)
    elif entry.state is State.FINISHED or entry.delivery is not None:
        return  # finished, or handed out here already: a late Start by a zombie does not take it back
    ledger.hold(entry, holder=batch.instance_id, holder_client=batch.client_id, lease_ms=lease_ms,
                delivery_count=count)


def _held_by(ledger: PartitionLedger, mid: MessageId, since: int, instance_id: str) -> Entry | None:
    if mid.partition != ledger.partition or mid.offset < since:
        return None
    entry = ledger.held.get(mid.offset)
    return entry if entry is not None and entry.holder == instance_id else None


def _end(ledger: PartitionLedger, read_to: int, offset: int, instance_id: str) -> GroupQueue | None:
    """An End by ``instance_id``: finishes what it holds, or a record no Start is known of; a superseded
    delivery's End (another instance holds the record now, or this owner handed it out) is late: ignored."""
    entry = ledger.entries.get(offset)
    if entry is None:
        if offset >= read_to:
            ledger.entries[offset] = Entry(offset, State.FINISHED)
        return None
    if entry.state is State.FINISHED or entry.delivery is not None:
        return None
    if entry.state is State.HELD and entry.holder != instance_id:
        return None
    if entry.state is State.WAITING and entry.holder not in ("", instance_id):
        return None
    return ledger.finish(entry)


def _plain_ends(ledger: PartitionLedger, since: int, read_to: int, batch: DecodedBatch) -> None:
    """Ends in a plain record about records not read yet: finished (e.g. a record finished without a Start)."""
    partition = ledger.partition
    ended = [m.message_id for m in batch.settles()
             if m.type is MarkerType.END and m.end_reason is not EndReason.REDELIVERED]
    for mid in (*ended, *batch.acks()):
        if mid.partition == partition and mid.offset >= max(since, read_to) and mid.offset not in ledger.entries:
            ledger.entries[mid.offset] = Entry(mid.offset, State.FINISHED)


def _offer(offers: Offers, queue: GroupQueue | None) -> None:
    if queue is not None:
        offers.append(queue)
